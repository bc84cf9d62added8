/* train_args.c — the flags of `flashgrad train` (cli/train_cmd.h): the table, --help, parsing and
 * checking them (a bad value is one line and exit 2, before anything is written), --init-from's
 * model and the address space the threads will need. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/train_cmd.h"
#include "cli/train_defaults.h"
#include "datasets/meta_pkl.h"
#include "ops/cpu.h"

static void init_flags(fg_flag *f) {
    static const fg_flag own[F_COUNT - FG_TF_COUNT] = {
#define TF_INIT(id, nm, ty, me, he, l, h, lop)                                                                         \
    {.name = nm, .type = ty, .meta = me, .help = he, .lo = l, .hi = h, .lo_open = lop},
        TRAIN_FLAGS(TF_INIT) FG_NANOGPT_FLAGS(TF_INIT)
#undef TF_INIT
    };
    fg_train_flags_init(f);
    memcpy(f + FG_TF_COUNT, own, sizeof own);
    fg_nanogpt_aliases(f, F_COUNT);
}

/* Defaults: a task's own (train_defaults.h), shown in --help as "text / addition". */
static void set_defaults(fg_flag *f, const fg_train_defaults *d) {
    fg_train_flags_defaults(f, d);
    f[F_TASK].s = "addition";
    f[F_OUT].s = "out";
    f[F_ANSWER_ONLY].i = d->answer_only;
    f[F_STEPS].i = d->steps;
    f[F_EVAL_EVERY].i = d->eval_every;
    f[F_EVAL_ITERS].i = d->eval_iters;
    f[F_EVAL_PROBLEMS].i = d->eval_problems;
    f[F_CKPT_EVERY].i = 0;
    f[F_LOG_EVERY].i = 0;
    f[F_SAMPLES].i = d->samples;
    f[F_ZERO].i = 0;
    fg_nanogpt_flag_defaults(f, F_COUNT);
}

static void help(void) {
    fg_flag a[F_COUNT], t[F_COUNT];
    init_flags(a);
    set_defaults(a, &fg_defaults_addition);
    init_flags(t);
    set_defaults(t, &fg_defaults_text);
    printf("Train a GPT-2 style model on the addition task (the default), a text file (--data) or pre-tokenized\n"
           "token files (--data-bin with --vocab-size). Where a default differs for text and token files it is\n"
           "shown after 'text'.\n\n");
    fg_flags_help_alt(stdout, "train",
                      "[CONFIG.py] [--data FILE | --data-bin PATH --vocab-size V | --task addition] [--steps N] "
                      "[--out DIR] [--resume] [options]",
                      a, t, "text", F_COUNT);
    printf(
        "\nWeight decay applies to the 2-d weights (matmuls and embeddings), not to biases or LayerNorm.\n"
        "The character-level tokenizer works on bytes: its vocabulary is the distinct bytes of the file, so a\n"
        "non-ASCII UTF-8 character is several tokens, and samples of such text may hold invalid UTF-8.\n"
        "--data-bin reads nanoGPT's train.bin/val.bin (raw little-endian uint16 ids, from its prepare.py) and\n"
        "llm.c's .bin files (a 1024-byte header, magic 20240520), memory-mapped; a single file without a *val*\n"
        "sibling keeps its last tenth for validation. llm.c's shards (a folder of *train*.bin / *val*.bin files,\n"
        "or a quoted pattern: --data-bin 'data/fineweb_train_*.bin') are one sequence in llm.c's sorted order.\n"
        "Such a model has no tokenizer: `flashgrad sample` prints\n"
        "its token ids, or decodes them with --tokenizer (llm.c's gpt2_tokenizer.bin).\n"
        "One train at a time writes a folder (DIR/train.lock); a fresh run refuses a folder that holds another\n"
        "run's checkpoint or log unless --overwrite is given.\n"
        "Exit status: 0 done, 1 runtime error, 2 usage error; after SIGINT, SIGTERM or SIGHUP the step in flight\n"
        "finishes, a checkpoint is written and the exit status is 128 + the signal (130, 143, 129): use --resume.\n"
        "Data parallel: `mpirun -np P flashgrad train ...` runs P processes of --grad-accum micro-batches each (P x\n"
        "--grad-accum per step, the sequences of one process with --grad-accum P x N, summed in a fixed order: with\n"
        "--grad-accum 1 the run is bit for bit that one process's); process 0 alone prints, logs and checkpoints.\n"
        "(As root in a container, Open MPI needs `mpirun --allow-run-as-root -np P ...`.)\n"
        "MFU divides by the float32 FMA peak of this CPU model, SIMD level and thread count, measured once and\n"
        "cached in $XDG_CACHE_HOME/flashgrad/peak.tsv (~/.cache/flashgrad/peak.tsv); --peak overrides it, and\n"
        "log.csv's peak_gflops column says which figure each row used.\n");
    fg_nanogpt_help(stdout);
}

/* --init-from: loads the model (exit 1 when it does not load) and makes the model flags its
 * architecture: a flag that contradicts the file is one line and exit 2; --block-size may only
 * shrink the context (wpe is cropped); --data-bin's --vocab-size is the file's. */
static void init_from_flags(fg_flag *f) {
    const char *path = f[F_INIT_FROM].s;
    const char *why = fg_nanogpt_init_from_refusal(path);
    if (!strcmp(path, "scratch")) { /* nanoGPT's name for a fresh run */
        f[F_INIT_FROM].given = 0;
        return;
    }
    if (why) fg_train_die(2, "--init-from '%s': %s", path, why);
    if (f[F_RESUME].given)
        fg_train_die(
            2, "--init-from starts a new run from a model's weights; --resume continues the run in --out: not both");
    fg_train_init_model = fg_model_file_load(path);
    if (!fg_train_init_model) fg_train_die(1, "--init-from: %s", fg_last_error());
    const fg_gpt_config *mc = &fg_train_init_model->model->cfg;
    const struct {
        int flag;
        int value;
        const char *what;
    } arch[] = {{FG_TF_N_LAYER, mc->n_layer, "n_layer"},
                {FG_TF_N_HEAD, mc->n_head, "n_head"},
                {FG_TF_N_EMBD, mc->n_embd, "n_embd"},
                {FG_TF_VOCAB, mc->vocab_size, "vocab_size"}};
    for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++) {
        fg_flag *x = &f[arch[i].flag];
        if (arch[i].flag == FG_TF_VOCAB && !f[FG_TF_DATA_BIN].given) continue; /* text and tasks: checked later */
        if (x->given && x->i != arch[i].value)
            fg_train_die(2, "%s %lld contradicts the model in '%s' (%s %d); its architecture comes from the file",
                         x->name, (long long)x->i, path, arch[i].what, arch[i].value);
        x->i = arch[i].value;
        x->given = 1;
    }
    if (f[FG_TF_BLOCK].given && f[FG_TF_BLOCK].i > mc->block_size)
        fg_train_die(
            2, "--block-size %lld is longer than the context of the model in '%s' (%d positions); it may only shrink",
            (long long)f[FG_TF_BLOCK].i, path, mc->block_size);
    if (!f[FG_TF_BLOCK].given) f[FG_TF_BLOCK].i = mc->block_size;
    f[FG_TF_BLOCK].given = 1;
}

/* Address space a worker thread reserves once it runs its first step (its stack, its malloc arena,
 * OpenMP's and oneDNN's per-thread scratch), measured on Linux/glibc as the growth of VmPeak per
 * extra --threads: mostly reserved, little of it touched, but an address-space limit (ulimit -v)
 * counts it all, and a reservation that fails inside a library kills the process without a word. */
#define THREAD_RESERVE_MIB 512

/* Before any worker starts (flashgrad's pool and OpenBLAS's, which --threads sizes alike): the
 * reservations of `threads` threads must fit RLIMIT_AS, or one line and exit 1. */
static void check_address_space(int threads) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
    long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lld", &pages) != 1) pages = 0;
        fclose(f);
    }
    const long long now = pages * (long long)sysconf(_SC_PAGESIZE), limit = (long long)rl.rlim_cur;
    /* the main thread's own growth during the first step, then one reservation per other thread */
    const long long per = (long long)THREAD_RESERVE_MIB << 20, first = per / 2;
    if (now + first + (long long)(threads - 1) * per <= limit) return;
    /* The suggestion must also fit a later start whose "in use" is larger: OpenBLAS starts its
     * workers when it loads, and each one's malloc arena (a 128 MiB mapping, trimmed to 64) may
     * or may not be there yet when statm is read. */
    const long long racing = (long long)(fg_blas_threads() > 1 ? fg_blas_threads() - 1 : 0) << 27;
    const long long room = limit - now - first - racing;
    const long long fit = room >= 0 ? room / per + 1 : 0;
    if (fit >= 1)
        fg_train_die(
            1,
            "the address-space limit (ulimit -v) is %lld MiB and %lld MiB are in use; %d threads reserve about %d "
            "MiB each: run with --threads %lld or raise the limit",
            limit >> 20, now >> 20, threads, THREAD_RESERVE_MIB, fit);
    fg_train_die(1,
                 "the address-space limit (ulimit -v) is %lld MiB and %lld MiB are in use: too little for training "
                 "(each thread reserves about %d MiB); raise the limit",
                 limit >> 20, now >> 20, THREAD_RESERVE_MIB);
}

/* Parses and checks every flag: a bad value is one line and exit 2, before anything is written.
 * Returns -1 when the run goes on, else the exit status (0 after --help). */
int fg_train_parse(int argc, char **argv, train_args *a) {
    fg_flag *f = a->f;
    init_flags(f);
    /* Two passes: the first finds --data/--task (and nanoGPT config files, whose dataset is the
     * data) so the second starts from that task's defaults, or from nanoGPT train.py's under a
     * config file (cli/nanogpt.h). */
    set_defaults(f, &fg_defaults_text);
    memset(&a->ng, 0, sizeof a->ng);
    a->ng = (fg_nanogpt){.cmd = "train", .flags = f, .n = F_COUNT};
    int rc = fg_flags_parse_ex("train", f, F_COUNT, argc, argv, fg_nanogpt_positional, &a->ng);
    if (rc == -1) {
        help();
        return 0;
    }
    if (rc) return rc;
    if ((rc = fg_nanogpt_resolve(&a->ng, f[F_RESUME].given, 0)) != 0) return rc;
    const int configs = a->ng.configs;
    a->is_text = f[FG_TF_DATA].given;
    /* under a config file the data is train.py's dataset (openwebtext) unless it names one */
    a->is_bin = f[FG_TF_DATA_BIN].given || (configs && !a->is_text);
    if (a->is_text && f[F_TASK].given) fg_train_die(2, "give either --data FILE or --task NAME, not both");
    if (a->is_bin && f[F_TASK].given) fg_train_die(2, "give either --data-bin PATH or --task NAME, not both");
    if (a->is_bin && f[F_ANSWER_ONLY].given) fg_train_die(2, "--answer-only applies to the addition task only");
    if (!a->is_text && strcmp(f[F_TASK].s, "addition"))
        fg_train_die(2, "--task: unknown task '%s' (available: addition)", f[F_TASK].s);
    if (a->is_text && f[F_ANSWER_ONLY].given) fg_train_die(2, "--answer-only applies to the addition task only");
    if ((a->is_text || a->is_bin) && f[F_EVAL_PROBLEMS].given)
        fg_train_die(2, "--eval-problems applies to the addition task only (its exact-match accuracy)");
    init_flags(f);
    set_defaults(f, a->is_text || a->is_bin ? &fg_defaults_text : &fg_defaults_addition);
    a->ng = (fg_nanogpt){.cmd = "train", .flags = f, .n = F_COUNT};
    if (configs && (rc = fg_nanogpt_train_defaults(&a->ng)) != 0) return rc;
    rc = fg_flags_parse_ex("train", f, F_COUNT, argc, argv, fg_nanogpt_positional, &a->ng);
    if (rc) return rc;
    if ((rc = fg_nanogpt_resolve(&a->ng, f[F_RESUME].given, fg_train_comm->rank == 0)) != 0) return rc;
    a->is_text = f[FG_TF_DATA].given;
    a->is_bin = f[FG_TF_DATA_BIN].given;
    /* nanoGPT's gradient_accumulation_steps counts the micro-batches of every process */
    if (f[FG_TF_ACCUM].by_alias) {
        if (f[FG_TF_ACCUM].i % fg_train_comm->size)
            fg_train_die(2, "--gradient_accumulation_steps %lld does not divide among %d processes",
                         (long long)f[FG_TF_ACCUM].i, fg_train_comm->size);
        f[FG_TF_ACCUM].i /= fg_train_comm->size;
    }
    if (a->ng.best_only && f[F_CKPT_EVERY].given)
        fg_train_die(
            2, "--ckpt-every and always_save_checkpoint = False: give one (the second checkpoints the best val loss)");
    a->peak = 0;
    a->peak_remeasure = 0;
    if (f[F_PEAK].given) {
        char *end;
        double g = strtod(f[F_PEAK].s, &end);
        if (!strcmp(f[F_PEAK].s, "measure"))
            a->peak_remeasure = 1;
        else if (end == f[F_PEAK].s || *end || !(g >= FG_PEAK_MIN_GFLOPS && g <= FG_PEAK_MAX_GFLOPS))
            fg_train_die(2, "--peak: '%s' is neither GFLOP/s (%g..%g, the cache's range) nor 'measure'", f[F_PEAK].s,
                         FG_PEAK_MIN_GFLOPS, FG_PEAK_MAX_GFLOPS);
        else
            a->peak = g;
    }
    if (f[F_INIT_FROM].given) init_from_flags(f);
    char meta[4200];
    if (a->is_bin && !f[FG_TF_VOCAB].given && !f[F_RESUME].given &&
        fg_source_tokens_meta_path(f[FG_TF_DATA_BIN].s, meta, sizeof meta)) {
        /* nanoGPT's meta.pkl names the vocabulary (its tokenizer goes into the checkpoint) */
        fg_tokenizer *t = fg_meta_pkl_load(meta);
        if (!t) fg_train_die(1, "--data-bin: %s", fg_last_error());
        f[FG_TF_VOCAB].i = fg_tokenizer_vocab_size(t);
        f[FG_TF_VOCAB].given = 1;
        fg_tokenizer_free(t);
    }
    if (a->is_bin && !f[FG_TF_VOCAB].given && !f[F_RESUME].given && f[FG_TF_TOKENIZER].given) {
        /* the tokenizer that made the ids names their vocabulary */
        fg_tokenizer *t = fg_tokenizer_bpe_load(f[FG_TF_TOKENIZER].s, NULL);
        if (!t) fg_train_die(1, "--tokenizer: %s", fg_last_error());
        f[FG_TF_VOCAB].i = fg_tokenizer_vocab_size(t);
        f[FG_TF_VOCAB].given = 1;
        fg_tokenizer_free(t);
    }

    /* --byte, --data-bin, device (started here), attention, recompute, heads, learning rates:
     * train_flags.h. A resumed run takes its vocabulary from the checkpoint (configure_resumed
     * checks a --vocab-size against it). */
    fg_flag chk[F_COUNT];
    memcpy(chk, f, sizeof chk);
    if (f[F_RESUME].given) chk[FG_TF_VOCAB].given = a->is_bin;
    if (fg_train_flags_check(chk, &a->run) != FG_OK) fg_train_die(2, "%s", fg_last_error());
    if (fg_train_init_model) {
        /* the architecture comes from the file: an option flag given must agree with it */
        const fg_gpt_config *mc = &fg_train_init_model->model->cfg;
        fg_gpt_config want = *mc;
        fg_train_flags_arch(f, &a->run, &want);
        if (!fg_gpt_same_arch(&want, mc)) {
            char arch[512];
            fg_gpt_arch_describe(mc, arch, sizeof arch);
            fg_train_die(2, "%s contradicts the model in '%s' (%s); its architecture comes from the file",
                         fg_train_flags_arch_given(f), f[F_INIT_FROM].s, arch);
        }
        a->run.arch_from = mc;
    }
    check_address_space(f[FG_TF_THREADS].given ? (int)f[FG_TF_THREADS].i : fg_pool_threads()); /* no thread yet */
    fg_train_flags_threads(f);

    /* the output folder: created if missing (with parents), and it must be writable */
    a->out = f[F_OUT].s;
    if (snprintf(a->model_path, sizeof a->model_path, "%s/%s", a->out, FG_CKPT_MODEL_FILE) >=
            (int)sizeof a->model_path ||
        snprintf(a->log_path, sizeof a->log_path, "%s/log.csv", a->out) >= (int)sizeof a->log_path)
        fg_train_die(2, "--out: the path is too long");
    return -1;
}
