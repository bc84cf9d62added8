/* test_train.c — training: the schedule, AdamW and clipping against hand computations, bit-exact
 * determinism and resume, checkpoints (round trip, tokenizer in the metadata, refusal of bad
 * files), no system allocation after warm-up, non-finite losses, and the `flashgrad train` /
 * `flashgrad sample` command lines (exit codes, messages, log.csv, no partial output). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/alloc.h"
#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"
#include "ops/cpu/threadpool.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

/* ---- helpers ---- */
static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fg_train_test_XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}
static void remove_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
}

static const char *path_in(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A small text: a few repeated lines, enough for block 8 in both splits. */
static const char *some_text(void) {
    return "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
           "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n";
}

static fg_source *addition_source(int digits) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = digits;
    fg_source *s = fg_source_addition(&ac);
    cr_assert(s, "%s", fg_last_error());
    return s;
}

static fg_trainer *trainer(const fg_train_config *c, const fg_source *s) {
    fg_trainer *tr = fg_trainer_create(c, s);
    cr_assert(tr, "fg_trainer_create: %s", fg_last_error());
    return tr;
}

static void steps(fg_trainer *tr, int n, double *losses) {
    for (int i = 0; i < n; i++) {
        fg_step_stats s;
        cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "step %lld: %s", (long long)tr->step + 1, fg_last_error());
        if (losses) losses[i] = s.loss;
    }
}

/* ---- schedule, clipping, AdamW ---- */

Test(train, lr_schedule_is_warmup_then_cosine_to_min_lr) {
    fg_adamw_config c = {.lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .decay_steps = 2000};
    cr_expect_float_eq(fg_lr_at(&c, 0), 1e-3 * 1 / 101, 1e-15, "step 0: %g", fg_lr_at(&c, 0));
    cr_expect_float_eq(fg_lr_at(&c, 99), 1e-3 * 100 / 101, 1e-15);
    cr_expect_float_eq(fg_lr_at(&c, 100), 1e-3, 1e-15, "first step after warm-up: %g", fg_lr_at(&c, 100));
    cr_expect_float_eq(fg_lr_at(&c, 1050), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-15, "half-way: %g", fg_lr_at(&c, 1050));
    cr_expect_float_eq(fg_lr_at(&c, 2000), 1e-4, 1e-15);
    cr_expect_float_eq(fg_lr_at(&c, 5000), 1e-4, 1e-15);
    for (int s = 101; s < 2000; s++) cr_assert(fg_lr_at(&c, s) <= fg_lr_at(&c, s - 1), "not decreasing at %d", s);
}

/* The CPU's blocks of the norm (ops/kernels.h): B = max(65536, ceil(n / 1024)); every split of the
 * blocks into contiguous ranges, each range's sums from sum_squares_blocks, added in block order
 * from 0, gives sum_squares's bits (a ZeRO-1 rank's part of the norm, train/trainer.c). */
Test(train, blockwise_sums_of_squares_add_up_to_the_sum_of_squares_bit_for_bit) {
    const fg_optimizer_kernels *k = &fg_kernels_for(FG_CPU, "test")->optimizer;
    cr_assert(k->norm_block && k->sum_squares_blocks, "the CPU has no blockwise sum of squares");
    cr_expect_eq(k->norm_block(1), 65536);
    cr_expect_eq(k->norm_block(1024 * 65536), 65536);
    cr_expect_eq(k->norm_block(1024 * 65536 + 1), 65537);
    cr_expect_eq(k->norm_block((int64_t)1 << 40), ((int64_t)1 << 40) / 1024);
    static const int64_t sizes[] = {1, 1000, 65536, 65537, 3 * 65536 + 17, 5 * 65536, 7 * 65536 - 1};
    double part[16];
    for (int d = 0; d < 2; d++) {
        const fg_dtype dt = d ? FG_F64 : FG_F32;
        for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
            const int64_t n = sizes[t], B = k->norm_block(n), blocks = (n + B - 1) / B;
            void *x = malloc((size_t)n * fg_dtype_size(dt));
            uint64_t r = 0x9e3779b97f4a7c15ull + (uint64_t)n;
            for (int64_t i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                /* magnitudes over 2^-20 .. 2^20, so that the order of the additions shows */
                double v = ldexp((double)(r >> 11) / 9007199254740992.0 - 0.5, (int)((r >> 3) % 41) - 20);
                if (d) ((double *)x)[i] = v;
                else ((float *)x)[i] = (float)v;
            }
            double want = 0;
            cr_assert_eq(k->sum_squares(dt, x, n, &want), FG_OK);
            for (int P = 1; P <= 5; P++) {
                double sum = 0;
                for (int q = 0; q < P; q++) {
                    const int64_t b0 = blocks * q / P, b1 = blocks * (q + 1) / P;
                    for (int64_t b = 0; b < 16; b++) part[b] = NAN;
                    cr_assert_eq(k->sum_squares_blocks(dt, x, n, b0, b1, part), FG_OK, "%s", fg_last_error());
                    for (int64_t b = b0; b < b1; b++) sum += part[b - b0];
                    cr_expect(isnan(part[b1 - b0]), "n %lld: a block past [%lld, %lld) was written", (long long)n,
                              (long long)b0, (long long)b1);
                }
                cr_expect(sum == want, "%s n %lld, %d ranges: %a, sum_squares %a", fg_dtype_name(dt), (long long)n, P,
                          sum, want);
            }
            cr_expect_neq(k->sum_squares_blocks(dt, x, n, 0, blocks + 1, part), FG_OK, "a block past the end");
            fg_clear_error();
            free(x);
        }
    }
}

Test(train, clipping_scales_to_the_clip_norm_and_leaves_small_gradients) {
    double v[4] = {3, 4, 0, 0};
    fg_tensor *g = fgt_from(FG_F32, FGT_DIMS(4), v);
    double n = fg_clip_grad_norm(g, 1.0);
    cr_expect_float_eq(n, 5.0, 1e-12, "norm before clipping: %g", n);
    cr_expect_float_eq(fg_grad_norm(g), 1.0 * 5 / (5 + 1e-6), 1e-6, "after: %g", fg_grad_norm(g));
    n = fg_clip_grad_norm(g, 10.0);
    cr_expect_float_eq(fg_get(g, 0), 3.0 / (5 + 1e-6), 1e-6, "a gradient under the clip changed: %g", fg_get(g, 0));
    fg_release(g);
}

Test(train, adamw_matches_a_hand_computed_step_and_decays_only_2d_tensors) {
    fg_gpt_config mc = fg_gpt_default_config();
    mc.n_layer = 1;
    mc.n_head = 1;
    mc.n_embd = 2;
    mc.block_size = 2;
    mc.vocab_size = 3;
    mc.dtype = FG_F64;
    fg_gpt *g = fg_gpt_create(&mc, 1);
    cr_assert(g, "%s", fg_last_error());
    fg_adamw_config oc = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.5};
    fg_adamw o;
    cr_assert_eq(fg_adamw_init(&o, &oc, FG_F64, FG_CPU, g->num_elements), FG_OK);
    const int64_t P = g->num_elements;
    double *p0 = malloc(P * sizeof *p0), *gr = malloc(P * sizeof *gr);
    memcpy(p0, fg_data(g->params_flat), P * sizeof *p0);
    for (int64_t i = 0; i < P; i++) gr[i] = sin(1.0 + i);
    memcpy(fg_data(g->grads_flat), gr, P * sizeof *gr);
    fg_adamw_update(&o, g, 0.1);
    memcpy(fg_data(g->grads_flat), gr, P * sizeof *gr);
    fg_adamw_update(&o, g, 0.05);
    /* two steps of PyTorch's AdamW by hand, per element */
    const double *p = fg_data(g->params_flat);
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *e = &g->params[j];
        for (int64_t k = e->offset; k < e->offset + e->numel; k++) {
            double x = p0[k], m = 0, v = 0, lrs[2] = {0.1, 0.05};
            for (int t = 1; t <= 2; t++) {
                double lr = lrs[t - 1];
                if (e->decay) x *= 1 - lr * 0.5;
                m = 0.9 * m + 0.1 * gr[k];
                v = 0.99 * v + 0.01 * gr[k] * gr[k];
                double mh = m / (1 - pow(0.9, t)), vh = v / (1 - pow(0.99, t));
                x -= lr * mh / (sqrt(vh) + 1e-8);
            }
            cr_expect(fabs(p[k] - x) <= 1e-12 * (1 + fabs(x)), "%s[%lld]: %.17g, expected %.17g", e->name,
                      (long long)(k - e->offset), p[k], x);
        }
    }
    free(p0);
    free(gr);
    fg_adamw_free(&o);
    fg_gpt_free(g);
}

/* ---- determinism and resume ---- */

/* Model FLOPs per token: 6 N + 12 L C T, N counted here from the parameter shapes (embeddings
 * V C + T C, per block 2 layernorms 4 C, qkv 3 C C + 3 C, proj C C + C, fc 4 C C + 4 C, fc-proj
 * 4 C C + C; final layernorm 2 C; the LM head tied). */
Test(train, flops_per_token_is_six_n_plus_twelve_l_c_t) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 2, 1, 1, 5); /* 2 layers, 16 wide */
    fg_trainer *tr = trainer(&c, s);
    const double L = 2, C = 16, V = c.model.vocab_size, Tb = c.model.block_size, T = tr->T;
    const double N =
        V * C + Tb * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C;
    cr_expect_eq(tr->model->num_elements, (int64_t)N, "parameters %lld, counted %.0f",
                 (long long)tr->model->num_elements, N);
    cr_expect_eq(fg_trainer_flops_per_token(tr), 6 * N + 12 * L * C * T, "flops/token %.17g, want %.17g",
                 fg_trainer_flops_per_token(tr), 6 * N + 12 * L * C * T);
    const double m = fg_trainer_mfu(tr, 1000.0);
    cr_expect(m > 0 && isfinite(m), "mfu %g", m);
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(train, same_seed_gives_the_same_losses_bit_for_bit) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    fg_trainer *a = trainer(&c, s), *b = trainer(&c, s);
    double la[6], lb[6];
    steps(a, 6, la);
    steps(b, 6, lb);
    for (int i = 0; i < 6; i++) cr_expect(la[i] == lb[i], "step %d: %.17g vs %.17g", i + 1, la[i], lb[i]);
    cr_expect(!memcmp(fg_data(a->model->params_flat), fg_data(b->model->params_flat), fg_nbytes(a->model->params_flat)),
              "parameters differ after 6 steps");
    c.seed = 78;
    fg_trainer *d = trainer(&c, s);
    double ld[6];
    steps(d, 6, ld);
    cr_expect(ld[0] != la[0], "another seed gave the same first loss");
    fg_trainer_free(a);
    fg_trainer_free(b);
    fg_trainer_free(d);
    fg_source_free(s);
}

/* The products, attention and elementwise ops split their work over the pool and pick AVX-512 or
 * AVX2 at run time; none of it may change a bit of training. A model wide enough that every op
 * takes the pool. */
Test(train, training_is_bit_identical_for_any_thread_count_and_vector_level) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    c.model.n_embd = 64;
    c.model.n_head = 4;
    c.batch_size = 16;
    const fg_simd_level best = fg_simd_detect();
    double ref[4];
    fg_tensor *ref_params = NULL;
    int runs = 0;
    for (int lv = FG_SIMD_AVX2; lv <= (int)best; lv++)
        for (int threads = 1; threads <= 3; threads += 2) {
            fg_simd_set((fg_simd_level)lv);
            fg_pool_set_threads(threads);
            fg_trainer *t = trainer(&c, s);
            double l[4];
            steps(t, 4, l);
            if (!ref_params) {
                memcpy(ref, l, sizeof ref);
                ref_params = fg_clone(t->model->params_flat);
            } else {
                for (int i = 0; i < 4; i++)
                    cr_expect(l[i] == ref[i], "%s, %d threads, step %d: %a, first run %a", fg_simd_name(lv), threads,
                              i + 1, l[i], ref[i]);
                cr_expect(!memcmp(fg_data(t->model->params_flat), fg_data(ref_params), fg_nbytes(ref_params)),
                          "%s, %d threads: parameters differ after 4 steps", fg_simd_name(lv), threads);
            }
            runs++;
            fg_trainer_free(t);
        }
    fg_simd_set(best);
    fg_pool_set_threads(0);
    if (runs < 2) cr_log_warn("this CPU has no AVX2: only the scalar level, nothing to compare");
    fg_release(ref_params);
    fg_source_free(s);
}

Test(train, resume_reproduces_the_uninterrupted_run_bit_for_bit, .init = make_tmpdir, .fini = remove_tmpdir) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    const int N = 5;
    /* uninterrupted: 2N steps */
    fg_trainer *full = trainer(&c, s);
    double lf[2 * N];
    steps(full, 2 * N, lf);
    /* interrupted: N steps, checkpoint, a fresh process would start here */
    fg_trainer *first = trainer(&c, s);
    double l1[N];
    steps(first, N, l1);
    cr_assert_eq(fg_ckpt_save(tmpdir, first), FG_OK, "%s", fg_last_error());
    fg_trainer_free(first);
    fg_ckpt *ck = fg_ckpt_open(tmpdir, 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    cr_expect_eq(in->step, N);
    cr_expect(in->train.opt.lr == c.opt.lr && in->train.seed == c.seed && in->train.grad_accum == c.grad_accum &&
                  in->train.model.dropout == c.model.dropout,
              "the training configuration did not survive the checkpoint");
    fg_trainer *second = trainer(&in->train, s);
    cr_assert_eq(fg_ckpt_restore(ck, second), FG_OK, "%s", fg_last_error());
    fg_ckpt_close(ck);
    double l2[N];
    steps(second, N, l2);
    for (int i = 0; i < N; i++)
        cr_expect(l1[i] == lf[i], "step %d before the checkpoint: %.17g vs %.17g", i + 1, l1[i], lf[i]);
    for (int i = 0; i < N; i++)
        cr_expect(l2[i] == lf[N + i], "step %d after resuming: %.17g, uninterrupted %.17g", N + i + 1, l2[i],
                  lf[N + i]);
    cr_expect(!memcmp(fg_data(second->model->params_flat), fg_data(full->model->params_flat),
                      fg_nbytes(full->model->params_flat)),
              "final parameters differ");
    cr_expect(!memcmp(fg_data(second->opt.m), fg_data(full->opt.m), fg_nbytes(full->opt.m)),
              "final AdamW first moments differ");
    cr_expect(!memcmp(fg_data(second->opt.v), fg_data(full->opt.v), fg_nbytes(full->opt.v)),
              "final AdamW second moments differ");
    cr_expect_eq(second->opt.t, full->opt.t, "AdamW's step counter: resumed %lld, uninterrupted %lld",
                 (long long)second->opt.t, (long long)full->opt.t);
    fg_trainer_free(full);
    fg_trainer_free(second);
    fg_source_free(s);
}

Test(train, a_step_after_warmup_takes_nothing_from_the_system) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 2, NULL);
    fg_alloc_stats before = fg_alloc_get_stats(FG_CPU);
    steps(tr, 4, NULL);
    double l;
    cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &l), FG_OK); /* evaluation too, after its first call */
    fg_alloc_stats mid = fg_alloc_get_stats(FG_CPU);
    steps(tr, 2, NULL);
    cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &l), FG_OK);
    fg_alloc_stats after = fg_alloc_get_stats(FG_CPU);
    cr_expect_eq(after.system_allocs, mid.system_allocs, "system allocations grew from %llu to %llu in 2 steps + eval",
                 (unsigned long long)mid.system_allocs, (unsigned long long)after.system_allocs);
    cr_expect(mid.system_allocs - before.system_allocs <= 16, "warm steps 3-6 took %llu blocks from the system",
              (unsigned long long)(mid.system_allocs - before.system_allocs));
    cr_expect_eq(after.current, mid.current, "live bytes between steps changed: %zu -> %zu", mid.current,
                 after.current);
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(train, a_non_finite_loss_stops_with_the_step_and_keeps_the_parameters) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 2, NULL);
    fg_set(fg_gpt_weight(tr->model, FG_GPT_LNF_W, 0), 0, NAN);
    size_t nb = fg_nbytes(tr->model->params_flat);
    void *snap = malloc(nb);
    memcpy(snap, fg_data(tr->model->params_flat), nb);
    fg_step_stats st;
    cr_expect_eq(fg_trainer_step(tr, &st), FG_ERR_NUMERIC);
    cr_expect(strstr(fg_last_error(), "step 3"), "message should name step 3: %s", fg_last_error());
    cr_expect_eq(tr->step, 2, "the step counter moved");
    cr_expect(!memcmp(snap, fg_data(tr->model->params_flat), nb), "parameters changed on a failed step");
    free(snap);
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(train, addition_model_learns_something_quickly, .timeout = 300) {
    /* a short run on 1-digit addition: the loss must move well towards the optimum */
    fg_source *s = addition_source(1);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    c.model.dropout = 0;
    c.model.n_embd = 32;
    c.grad_accum = 1;
    c.batch_size = 32;
    c.steps = fgt_sanitize() ? 150 : 300;
    c.opt.decay_steps = c.steps;
    c.opt.warmup = 20;
    c.opt.lr = 1e-2;
    fg_trainer *tr = trainer(&c, s);
    double l0, l1;
    cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &l0), FG_OK);
    steps(tr, (int)c.steps, NULL);
    cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &l1), FG_OK);
    double opt = fg_source_optimal_loss(s);
    cr_expect(l1 - opt < 0.5 * (l0 - opt), "val loss %g -> %g (optimum %g): less than half the gap closed", l0, l1,
              opt);
    fg_trainer_free(tr);
    fg_source_free(s);
}

/* ---- checkpoints ---- */

Test(checkpoint, save_then_load_gives_identical_logits_and_the_tokenizer, .init = make_tmpdir, .fini = remove_tmpdir) {
    char p[512];
    write_file(path_in(p, sizeof p, "text.txt"), some_text(), strlen(some_text()));
    fg_text_options to = fg_text_default_options(8);
    fg_source *s = fg_source_text(p, &to);
    cr_assert(s, "%s", fg_last_error());
    fg_train_config c = fgt_tiny_train_config(s, 8, 4, 12, 2, 77);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 3, NULL);
    cr_assert_eq(fg_ckpt_save(tmpdir, tr), FG_OK, "%s", fg_last_error());

    fg_ckpt *ck = fg_ckpt_open(tmpdir, 0);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    fg_gpt *g = fg_ckpt_load_model(ck);
    cr_assert(g, "%s", fg_last_error());
    cr_expect(in->data.kind == FG_SOURCE_TEXT && !strcmp(in->data.path, p) && in->data.file_hash == s->file_hash,
              "the data description did not survive: %s", in->data.path);
    /* the tokenizer, through the metadata: same vocabulary, same encoding, text round trip */
    const fg_tokenizer *a = fg_source_tokenizer(s), *b = in->tokenizer;
    cr_assert_eq(fg_tokenizer_vocab_size(a), fg_tokenizer_vocab_size(b));
    const char *msg = "Speak, speak.\n";
    size_t n = strlen(msg);
    int32_t ta[64], tb[64];
    char back[64];
    cr_assert_eq(fg_tokenizer_encode(a, msg, n, ta), FG_OK);
    cr_assert_eq(fg_tokenizer_encode(b, msg, n, tb), FG_OK, "%s", fg_last_error());
    cr_expect(!memcmp(ta, tb, n * sizeof *ta), "the loaded tokenizer encodes differently");
    cr_assert_eq(fg_tokenizer_decode(b, tb, n, back), FG_OK);
    cr_expect(!memcmp(back, msg, n), "round trip gave '%.*s'", (int)n, back);

    int32_t x[2 * 8];
    for (int i = 0; i < 16; i++) x[i] = (i * 5) % c.model.vocab_size;
    fg_tensor *l1 = fg_gpt_forward(tr->model, x, 2, 8, NULL), *l2 = fg_gpt_forward(g, x, 2, 8, NULL);
    cr_assert(l1 && l2, "%s", fg_last_error());
    cr_expect(!memcmp(fg_data(l1), fg_data(l2), fg_nbytes(l1)), "logits differ after save -> load");
    fg_release(l1);
    fg_release(l2);
    fg_gpt_free(g);
    fg_ckpt_close(ck);
    fg_trainer_free(tr);
    fg_source_free(s);
}

/* A good checkpoint in tmpdir, then the bytes of its model file. */
static void good_checkpoint(void **buf, size_t *n) {
    fg_source *s = addition_source(1);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 1, NULL);
    cr_assert_eq(fg_ckpt_save(tmpdir, tr), FG_OK, "%s", fg_last_error());
    fg_trainer_free(tr);
    fg_source_free(s);
    char p[512];
    cr_assert_eq(fg_read_file(path_in(p, sizeof p, FG_CKPT_MODEL_FILE), 0, buf, n), FG_OK);
}

static void expect_refused(int with_optim, const char *phrase, const char *what) {
    fg_ckpt *ck = fg_ckpt_open(tmpdir, with_optim);
    if (ck) fg_ckpt_close(ck);
    cr_expect(ck == NULL, "%s: accepted", what);
    cr_expect(strstr(fg_last_error(), phrase) != NULL, "%s: message '%s' does not mention '%s'", what, fg_last_error(),
              phrase);
}

Test(checkpoint, truncated_corrupted_and_foreign_files_are_refused_by_name, .init = make_tmpdir,
     .fini = remove_tmpdir) {
    void *buf;
    size_t n;
    good_checkpoint(&buf, &n);
    char mp[512];
    path_in(mp, sizeof mp, FG_CKPT_MODEL_FILE);
    fg_ckpt *ok = fg_ckpt_open(tmpdir, 1);
    cr_assert(ok, "the good checkpoint was refused: %s", fg_last_error());
    fg_ckpt_close(ok);

    write_file(mp, buf, n / 2);
    expect_refused(0, FG_CKPT_MODEL_FILE, "truncated to half");
    write_file(mp, buf, 5);
    expect_refused(0, FG_CKPT_MODEL_FILE, "truncated to 5 bytes");
    unsigned char *bad = malloc(n);
    memcpy(bad, buf, n);
    bad[n - 3] ^= 0x40; /* a weight's byte: only the checksum can tell */
    write_file(mp, bad, n);
    expect_refused(0, "checksum", "a flipped data byte");
    free(bad);

    /* a foreign safetensors file: valid format, no flashgrad metadata */
    fg_st_writer *w = fg_st_writer_new();
    float data[4] = {1, 2, 3, 4};
    fg_st_writer_add(w, "wte", FG_ST_F32, 2, (int64_t[]){2, 2}, data);
    cr_assert_eq(fg_st_writer_write(w, mp), FG_OK, "%s", fg_last_error());
    fg_st_writer_free(w);
    expect_refused(0, "not a flashgrad checkpoint", "a foreign safetensors file");

    /* the optimizer file given as the model */
    char op[512];
    path_in(op, sizeof op, FG_CKPT_OPTIM_FILE);
    fg_ckpt *c2 = fg_ckpt_open(op, 0);
    cr_expect(c2 == NULL && strstr(fg_last_error(), "optimizer state"), "optimizer file as model: %s", fg_last_error());
    if (c2) fg_ckpt_close(c2);

    /* a model whose metadata promises more layers than the file holds */
    fg_st_file *f = fg_st_parse(buf, n, "model");
    cr_assert(f, "%s", fg_last_error());
    w = fg_st_writer_new();
    for (int i = 0; i < fg_st_count(f); i++) {
        const fg_st_array *a = fg_st_at(f, i);
        fg_st_writer_add(w, a->name, a->dtype, a->ndim, a->shape, a->data);
    }
    for (int i = 0; i < fg_st_metadata_count(f); i++) {
        const char *k, *v;
        fg_st_metadata_at(f, i, &k, &v);
        if (strcmp(k, "fg_checksum")) fg_st_writer_set_metadata(w, k, v);
    }
    fg_st_writer_set_metadata(w, "n_layer", "7");
    cr_assert_eq(fg_st_writer_write(w, mp), FG_OK, "%s", fg_last_error());
    expect_refused(0, "7-layer", "n_layer that does not match the tensors");
    /* a bad configuration value */
    fg_st_writer_set_metadata(w, "n_layer", "two");
    fg_st_writer_write(w, mp);
    expect_refused(0, "n_layer", "a non-numeric n_layer");
    fg_st_writer_set_metadata(w, "n_layer", "2");
    fg_st_writer_set_metadata(w, "tokenizer", "char-v1:zz");
    fg_st_writer_write(w, mp);
    expect_refused(0, "tokenizer", "a malformed tokenizer");
    fg_st_writer_free(w);
    fg_st_close(f);

    /* a model from another step beside the optimizer file: the pair is refused for resuming */
    write_file(mp, buf, n);
    fg_source *s = addition_source(1);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 2, NULL);
    char other[512];
    path_in(other, sizeof other, "other");
    mkdir(other, 0777);
    cr_assert_eq(fg_ckpt_save(other, tr), FG_OK, "%s", fg_last_error());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s'", other, FG_CKPT_OPTIM_FILE, op);
    cr_assert_eq(system(cmd), 0);
    expect_refused(1, "does not match", "model of step 1 with optimizer state of step 2");
    fg_ckpt *only_model = fg_ckpt_open(tmpdir, 0);
    cr_expect(only_model != NULL, "the model alone is still usable: %s", fg_last_error());
    fg_ckpt_close(only_model);
    unlink(op);
    expect_refused(1, FG_CKPT_OPTIM_FILE, "a missing optimizer file");
    fg_trainer_free(tr);
    fg_source_free(s);
    free(buf);
}

/* ---- the command line ---- */
static const char *fg_bin(void) {
    const char *b = getenv("FG_BIN");
    return b && *b ? b : "build/flashgrad";
}

/* Runs cmd; out gets the LAST n-1 bytes of its output (all of it is read, so the child never
 * dies of SIGPIPE). Returns the exit status, -1 if it did not exit normally. */
static int run_cmd(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = 0, r;
    char chunk[4096];
    while ((r = fread(chunk, 1, sizeof chunk, p)) > 0) {
        if (r >= n - 1) {
            memcpy(out, chunk + r - (n - 1), n - 1);
            k = n - 1;
        } else {
            if (k + r > n - 1) {
                size_t drop = k + r - (n - 1);
                memmove(out, out + drop, k - drop);
                k -= drop;
            }
            memcpy(out + k, chunk, r);
            k += r;
        }
    }
    out[k] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void need_bin(void) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
}

/* Runs `flashgrad <args>` with stderr captured; expects exit `code` and `phrase` in the output,
 * and a single line of output when it is an error. */
static void expect_cli(const char *args, int code, const char *phrase) {
    char cmd[2048], log[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", tmpdir, fg_bin(), args);
    int st = run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, code, "`flashgrad %s` exited %d, expected %d:\n%s", args, st, code, log);
    cr_expect(strstr(log, phrase) != NULL, "`flashgrad %s`: output does not mention '%s':\n%s", args, phrase, log);
    if (code != 0) {
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`flashgrad %s`: an error should be one line, got %d:\n%s", args, lines, log);
    }
}

static int exists(const char *rel) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", tmpdir, rel);
    return access(p, F_OK) == 0;
}

Test(cli, train_rejects_bad_flags_and_bad_data_with_one_line, .init = make_tmpdir, .fini = remove_tmpdir) {
    need_bin();
    char p[512];
    write_file(path_in(p, sizeof p, "empty.txt"), "", 0);
    write_file(path_in(p, sizeof p, "short.txt"), "hello\n", 6);
    unsigned char bin[256];
    for (int i = 0; i < 256; i++) bin[i] = (unsigned char)i;
    write_file(path_in(p, sizeof p, "binary.dat"), bin, sizeof bin);
    write_file(path_in(p, sizeof p, "text.txt"), some_text(), strlen(some_text()));

    expect_cli("train --steps -5 --out o", 2, "--steps");
    expect_cli("train --steps 0 --out o", 2, "--steps");
    expect_cli("train --lr abc --out o", 2, "--lr");
    expect_cli("train --lr 0 --out o", 2, "--lr");
    expect_cli("train --n-layer", 2, "needs a value");
    expect_cli("train --bogus 3", 2, "unknown flag");
    expect_cli("train --dropout 1.5 --out o", 2, "--dropout");
    expect_cli("train --n-embd 30 --n-head 4 --out o", 2, "multiple");
    expect_cli("train --task subtraction --out o", 2, "unknown task");
    expect_cli("train --attn fast --out o", 2, "--attn");
    expect_cli("train --device cuda --out o", 2, "CUDA");
    expect_cli("train --data text.txt --answer-only 1 --out o", 2, "--answer-only");
    expect_cli("train --data missing.txt --out o", 1, "missing.txt");
    expect_cli("train --data empty.txt --out o", 1, "empty");
    expect_cli("train --data binary.dat --out o", 1, "binary.dat");
    expect_cli("train --data short.txt --block-size 64 --out o", 1, "short.txt");
    expect_cli("train --resume --out nowhere", 1, "no checkpoint");
    expect_cli("train --data text.txt --block-size 8 --out text.txt/sub --steps 1", 1, "--out");
    cr_expect(!exists("o"), "a failed run left its output folder behind");
    expect_cli("sample --ckpt nowhere", 1, "nowhere");
    expect_cli("sample", 2, "--ckpt");
    expect_cli("sample --ckpt x --temperature -1", 2, "--temperature");
    expect_cli("bench nothing", 2, "unknown benchmark");
}

/* `train` and `bench train` read the model and optimizer flags from one table with one set of
 * bounds and check them with one validator: the same bad settings are the same usage error, word
 * for word after "flashgrad <cmd>: ". */
Test(cli, train_and_bench_train_refuse_the_same_settings_alike, .init = make_tmpdir, .fini = remove_tmpdir) {
    need_bin();
    static const char *const bad[] = {
        "--lr 20",          "--lr 0",       "--min-lr 0.5 --lr 0.1",
        "--beta1 1",        "--beta2 1",    "--weight-decay 1e7",
        "--grad-clip -1",   "--dropout 1",  "--n-embd 30 --n-head 4",
        "--block-size 3",   "--byte",       "--attn fast",
        "--recompute full", "--device tpu", "--device cuda",
        "--memory-budget 1.5GB", "--recompute none,block,none,attn,none,none,none,none,none",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], tr[2048], be[2048];
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' train %s --steps 1 --out o 2>&1 >/dev/null", tmpdir, fg_bin(),
                 bad[i]);
        int st_tr = run_cmd(cmd, tr, sizeof tr);
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' bench train %s --steps 1 --warmup-steps 1 2>&1 >/dev/null", tmpdir,
                 fg_bin(), bad[i]);
        int st_be = run_cmd(cmd, be, sizeof be);
        cr_expect_eq(st_tr, 2, "`train %s` exited %d, expected 2: %s", bad[i], st_tr, tr);
        cr_expect_eq(st_be, 2, "`bench train %s` exited %d, expected 2: %s", bad[i], st_be, be);
        const char *pt = "flashgrad train: ", *pb = "flashgrad bench train: ";
        cr_expect(!strncmp(tr, pt, strlen(pt)) && !strncmp(be, pb, strlen(pb)) &&
                      !strcmp(tr + strlen(pt), be + strlen(pb)),
                  "`%s` is refused differently:\n  train:       %s  bench train: %s", bad[i], tr, be);
    }
    cr_expect(!exists("o"), "a refused run left its output folder behind");
}

/* Reads column `col` (0-based) of log.csv rows into out; returns rows. */
static int read_log_column(const char *dir, int col, char rows[][32], int cap, char *header, size_t hn) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/log.csv", tmpdir, dir);
    FILE *f = fopen(p, "r");
    cr_assert(f, "no %s", p);
    char line[256];
    int n = 0;
    if (fgets(line, sizeof line, f)) snprintf(header, hn, "%.200s", line);
    while (fgets(line, sizeof line, f) && n < cap) {
        char *s = line;
        for (int c = 0; c < col && s; c++) {
            s = strchr(s, ',');
            if (s) s++;
        }
        cr_assert(s, "short row: %s", line);
        size_t len = strcspn(s, ",\n");
        snprintf(rows[n++], 32, "%.*s", (int)len, s);
    }
    fclose(f);
    return n;
}

Test(cli, train_writes_log_checkpoint_and_resumes_to_the_same_curve, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    const char *model = "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --dropout 0.1 "
                        "--eval-every 4 --eval-iters 2 --eval-problems 20 --samples 2 --threads 1";
    char args[1024];
    snprintf(args, sizeof args, "train %s --steps 10 --out full", model);
    expect_cli(args, 0, "final:");
    char header[256], full[16][32], part[16][32], val[16][32];
    int n = read_log_column("full", 1, full, 16, header, sizeof header);
    cr_expect_str_eq(header, "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb\n");
    cr_expect_eq(n, 10, "log.csv has %d rows", n);
    char mfu[16][32];
    read_log_column("full", 6, mfu, 16, header, sizeof header);
    for (int i = 0; i < 10; i++)
        cr_expect(atof(mfu[i]) > 0 && atof(mfu[i]) < 10, "mfu at step %d is '%s', want a positive fraction", i + 1,
                  mfu[i]);
    read_log_column("full", 5, val, 16, header, sizeof header);
    cr_expect(val[3][0] && !val[2][0] && val[9][0], "val_loss should be at steps 4, 8, 10 only: '%s' '%s' '%s'", val[2],
              val[3], val[9]);
    cr_expect(exists("full/model.safetensors") && exists("full/optimizer.safetensors"), "checkpoint files missing");

    /* 6 steps of a 10-step schedule, then resume to 10 */
    snprintf(args, sizeof args, "train %s --steps 6 --lr-decay-steps 10 --out part", model);
    expect_cli(args, 0, "final:");
    snprintf(args, sizeof args, "train --resume --steps 10 --out part --threads 1 --eval-problems 20 --samples 0");
    expect_cli(args, 0, "resuming from step 6");
    int m = read_log_column("part", 1, part, 16, header, sizeof header);
    cr_expect_eq(m, 10, "resumed log.csv has %d rows", m);
    for (int i = 0; i < 10 && i < m; i++)
        cr_expect_str_eq(part[i], full[i], "loss at step %d: resumed %s, uninterrupted %s", i + 1, part[i], full[i]);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/full", tmpdir);
    snprintf(pb, sizeof pb, "%s/part", tmpdir);
    fgt_expect_same_run_state(pa, pb);
    expect_cli("train --resume --out part --lr 0.5", 2, "differs from the checkpoint");
    expect_cli("train --resume --out part --steps 10", 2, "larger --steps");

    /* sampling from it: deterministic for a seed, prompt must be in the vocabulary */
    char cmd[1200], o1[512], o2[512];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' sample --ckpt full --prompt '1+2=' --tokens 8 --seed 5 2>&1", tmpdir,
             fg_bin());
    cr_expect_eq(run_cmd(cmd, o1, sizeof o1), 0, "sample: %s", o1);
    cr_expect_eq(run_cmd(cmd, o2, sizeof o2), 0);
    cr_expect_str_eq(o1, o2, "the same seed sampled differently");
    cr_expect(!strncmp(o1, "1+2=", 4) && strlen(o1) == 4 + 8 + 1, "sample output: '%s'", o1);
    expect_cli("sample --ckpt full --prompt 'abc'", 1, "--prompt");
    expect_cli("sample --ckpt full/model.safetensors --tokens 3 --temperature 0", 0, "");
}

/* A run folder whose log.csv was written before the mfu column: --resume keeps its rows (mfu
 * empty), appends the new steps with an mfu, and writes the whole log with the current header. */
Test(cli, resume_keeps_a_log_written_without_the_mfu_column, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    const char *model = "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --eval-every 0 "
                        "--eval-iters 1 --eval-problems 10 --samples 0 --threads 1";
    char args[1024], p[600];
    snprintf(args, sizeof args, "train %s --steps 4 --lr-decay-steps 6 --out r", model);
    expect_cli(args, 0, "final:");
    /* rewrite the log as the format without mfu: header and rows keep their first six fields */
    size_t n = 0;
    void *file = NULL;
    cr_assert_eq(fg_read_file(path_in(p, sizeof p, "r/log.csv"), 1 << 20, &file, &n), FG_OK, "%s", fg_last_error());
    char *old = realloc(file, n + 1), buf[8192], *o = buf;
    cr_assert(old);
    old[n] = '\0';
    for (char *save = NULL, *line = strtok_r(old, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *last = line;
        for (int c = 0; c < 6 && last; c++) last = strchr(last + (c > 0), ',');
        cr_assert(last, "row with fewer than seven fields: %s", line);
        o += sprintf(o, "%.*s\n", (int)(last - line), line);
    }
    free(old);
    cr_assert(!strncmp(buf, "step,loss,lr,grad_norm,tokens_per_s,val_loss\n", 45), "%s", buf);
    write_file(path_in(p, sizeof p, "r/log.csv"), buf, (size_t)(o - buf));
    expect_cli("train --resume --steps 6 --out r --threads 1 --eval-problems 10 --samples 0", 0,
               "resuming from step 4");
    char header[256], step[16][32], mfu[16][32];
    int rows = read_log_column("r", 0, step, 16, header, sizeof header);
    cr_expect_str_eq(header, "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb\n");
    cr_assert_eq(rows, 6, "resumed log.csv has %d rows", rows);
    read_log_column("r", 6, mfu, 16, header, sizeof header);
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(atoi(step[i]), i + 1, "row %d is step '%s'", i + 1, step[i]);
        if (i < 4)
            cr_expect_str_eq(mfu[i], "", "old row %d has mfu '%s'", i + 1, mfu[i]);
        else
            cr_expect(atof(mfu[i]) > 0, "new row %d has mfu '%s'", i + 1, mfu[i]);
    }
}

Test(cli, train_on_a_text_file_prints_progress_and_samples, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    char p[512];
    write_file(path_in(p, sizeof p, "text.txt"), some_text(), strlen(some_text()));
    expect_cli("train --data text.txt --block-size 16 --n-layer 1 --n-embd 16 --n-head 2 --batch-size 4 --steps 8 "
               "--eval-every 0 --eval-iters 1 --log-every 4 --out runs/t --samples 1 --threads 1",
               0, "step 8/8");
    cr_expect(exists("runs/t/log.csv") && exists("runs/t/model.safetensors"), "outputs missing in a created folder");
    cr_expect(!exists("runs/t/log.csv.tmp"), "temporary file left behind");
}

Test(cli, ctrl_c_checkpoints_exits_130_and_resume_finishes_the_same_curve, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    const char *model = "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --eval-every 0 "
                        "--eval-iters 1 --eval-problems 10 --samples 0 --threads 1 --log-every 100";
    const int steps = fgt_sanitize() ? 300 : 1500;
    char args[1024];
    snprintf(args, sizeof args, "train %s --steps %d --out full", model, steps);
    expect_cli(args, 0, "final:");
    /* The same run, interrupted once it has logged step 20. Its output goes into a pipe of one
     * page: the run blocks when it is a page of log lines ahead of what this test has read, so
     * however late the signal leaves, it lands a few dozen steps after step 20, far from the end. */
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0, "pipe");
    fcntl(pfd[0], F_SETPIPE_SZ, 4096);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork");
    if (pid == 0) {
        if (chdir(tmpdir) != 0) _exit(99);
        close(pfd[0]);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        char st[32];
        snprintf(st, sizeof st, "%d", steps);
        execl(fg_bin(), fg_bin(), "train", "--task", "addition", "--digits", "1", "--n-layer", "1", "--n-head", "2",
              "--n-embd", "16", "--batch-size", "8", "--eval-every", "0", "--eval-iters", "1", "--eval-problems", "10",
              "--samples", "0", "--threads", "1", "--log-every", "1", "--steps", st, "--out", "part", (char *)NULL);
        _exit(98);
    }
    close(pfd[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int seen = 0;
    for (;;) {
        if (len + 4097 > cap) buf = realloc(buf, cap *= 2);
        ssize_t r = read(pfd[0], buf + len, 4096);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        buf[len] = '\0';
        if (!seen && strstr(buf, "step 20/")) {
            seen = 1;
            kill(pid, SIGINT);
        }
    }
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    buf[len] = '\0';
    cr_assert(seen, "the run never logged step 20:\n%s", buf);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 130, "after Ctrl-C the exit status is %d:\n%s",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf);
    cr_expect(strstr(buf, "interrupted by SIGINT at step") != NULL, "no interruption message:\n%s", buf);
    free(buf);
    cr_assert(exists("part/model.safetensors"), "no checkpoint after Ctrl-C at step 20 of %d", steps);
    expect_cli("train --resume --out part --threads 1 --samples 0 --eval-problems 10", 0, "resuming from step");
    char header[256];
    static char full[4000][32], part[4000][32];
    int a = read_log_column("full", 1, full, 4000, header, sizeof header);
    int b = read_log_column("part", 1, part, 4000, header, sizeof header);
    cr_expect_eq(a, steps);
    cr_expect_eq(b, steps, "interrupted + resumed log has %d rows", b);
    for (int i = 0; i < a && i < b; i++)
        cr_assert_str_eq(part[i], full[i], "loss at step %d: interrupted+resumed %s, uninterrupted %s", i + 1, part[i],
                         full[i]);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/full", tmpdir);
    snprintf(pb, sizeof pb, "%s/part", tmpdir);
    fgt_expect_same_run_state(pa, pb);
}

/* Gradient accumulation averages: A micro-batches of B sequences give the gradient of one batch of
 * A x B (the same sequences: micro-batch m of step s draws rows (s A + m) B + r, as one batch of A B
 * draws rows s A B + r), so the loss, the gradient norm and the updated weights agree with the
 * unaccumulated step to rounding. A sum instead of a mean would double the norm. */
Test(train, gradient_accumulation_averages_the_micro_batches) {
    fg_source *s = addition_source(2);
    fg_train_config ca = fgt_tiny_train_config(s, fg_source_fixed_block(s), 2, 4, 1, 31);
    ca.model.dropout = 0; /* the masks are drawn per micro-batch: off, so the two runs see the same model */
    ca.grad_accum = 3;
    ca.opt.grad_clip = 0;
    fg_train_config c1 = ca;
    c1.batch_size = ca.batch_size * ca.grad_accum;
    c1.grad_accum = 1;
    fg_trainer *ta = trainer(&ca, s), *t1 = trainer(&c1, s);
    for (int k = 0; k < 2; k++) {
        fg_step_stats sa, s1;
        cr_assert_eq(fg_trainer_step(ta, &sa), FG_OK, "%s", fg_last_error());
        cr_assert_eq(fg_trainer_step(t1, &s1), FG_OK, "%s", fg_last_error());
        cr_expect(fabs(sa.loss - s1.loss) <= 1e-5 * fabs(s1.loss), "step %d loss: accumulated %.9g, one batch %.9g",
                  k + 1, sa.loss, s1.loss);
        cr_expect(fabs(sa.grad_norm - s1.grad_norm) <= 1e-4 * s1.grad_norm,
                  "step %d gradient norm: accumulated %.9g, one batch %.9g", k + 1, sa.grad_norm, s1.grad_norm);
    }
    const float *wa = fg_data(ta->model->params_flat), *w1 = fg_data(t1->model->params_flat);
    double worst = 0;
    for (int64_t i = 0; i < ta->model->num_elements; i++) worst = fmax(worst, fabs((double)wa[i] - (double)w1[i]));
    cr_expect(worst <= 1e-4, "the weights after two steps differ by %.3g (the learning rate is 3e-3)", worst);
    fg_trainer_free(ta);
    fg_trainer_free(t1);
    fg_source_free(s);
}

/* The trainer clips inside AdamW (each gradient times the coefficient as it is read): the same
 * bits as scaling the gradients (fg_grad_scale) and then updating, and grads_flat keeps the
 * unclipped gradient. A second trainer from the same start takes the first one's gradients through
 * the two separate passes. */
Test(train, clipping_inside_adamw_gives_the_bits_of_scaling_first) {
    fg_source *s = addition_source(2);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 4, 1, 5);
    c.opt.grad_clip = 0.05; /* below the gradient norm: every step clips */
    c.opt.eps = 1e-3;       /* near the clipped gradients: AdamW's step is no longer blind to their scale */
    fg_trainer *ta = trainer(&c, s), *tb = trainer(&c, s);
    const int64_t P = ta->model->num_elements;
    for (int k = 0; k < 2; k++) {
        fg_step_stats st;
        cr_assert_eq(fg_trainer_step(ta, &st), FG_OK, "%s", fg_last_error());
        const double coef = c.opt.grad_clip / (st.grad_norm + 1e-6);
        cr_assert(coef < 1.0, "step %d: the norm %g is under the clip; the test needs it above", k + 1, st.grad_norm);
        const float *ga = fg_data(ta->model->grads_flat);
        double ss = 0;
        for (int64_t i = 0; i < P; i++) ss += (double)ga[i] * ga[i];
        cr_expect_float_eq(sqrt(ss), st.grad_norm, 1e-9 * st.grad_norm,
                           "step %d: grads_flat is not the unclipped gradient (norm %g, the step's %g)", k + 1,
                           sqrt(ss), st.grad_norm);
        memcpy(fg_data(tb->model->grads_flat), fg_data(ta->model->grads_flat), (size_t)P * sizeof(float));
        fg_grad_scale(tb->model->grads_flat, coef);
        cr_assert_eq(fg_adamw_update(&tb->opt, tb->model, st.lr), FG_OK, "%s", fg_last_error());
        const float *pa = fg_data(ta->model->params_flat), *pb = fg_data(tb->model->params_flat);
        int64_t bad = -1;
        for (int64_t i = 0; i < P && bad < 0; i++)
            if (memcmp(&pa[i], &pb[i], sizeof *pa) != 0) bad = i;
        cr_expect(bad < 0, "step %d: parameter %lld is %.9g after the trainer's step, %.9g after scale-then-update",
                  k + 1, (long long)bad, bad < 0 ? 0.0 : pa[bad], bad < 0 ? 0.0 : pb[bad]);
        if (bad >= 0) break;
    }
    fg_trainer_free(ta);
    fg_trainer_free(tb);
    fg_source_free(s);
}
