/* nanogpt.h — nanoGPT's habits for `flashgrad train`: its flag names, its config files, its
 * train.py defaults.
 *
 * Three parts, all over the command's flag table (cli/flags.h):
 *   - names: fg_nanogpt_aliases gives each of our flags that has a nanoGPT twin its nanoGPT name
 *     as an alias (--n_layer for --n-layer, --max_iters for --steps, ...), and FG_NANOGPT_FLAGS are
 *     the train.py settings that have no flag of ours (dataset, decay_lr, compile, ...), which a
 *     command appends to its table; fg_nanogpt_resolve turns them into ours after parsing;
 *   - config files: `flashgrad train CONFIG.py` reads a nanoGPT config file as nanoGPT's
 *     configurator.py does — `key = value` lines over train.py's defaults, in command-line order
 *     with the flags — except that a value must be a literal (a number, possibly a constant
 *     expression of numbers such as 5 * 8, a string, True, False): anything else is refused with
 *     one line naming the file and line, and so is a key train.py does not have;
 *   - help: fg_nanogpt_help lists every setting of nanoGPT's train.py and what it does here.
 */
#ifndef FG_NANOGPT_H
#define FG_NANOGPT_H

#include <stdio.h>

#include "cli/flags.h"

/* X(id, name, type, meta, help, lo, hi, lo_open), as a command's own flags. */
#define FG_NANOGPT_FLAGS(X)                                                                                            \
    X(NG_DATASET, "--dataset", FG_FLAG_STR, "NAME",                                                                    \
      "nanoGPT: train on data/NAME/ under the working folder (its train.bin, val.bin), i.e. --data-bin data/NAME", 0,  \
      0, 0)                                                                                                            \
    X(NG_ALWAYS_SAVE, "--always_save_checkpoint", FG_FLAG_TRUTH, NULL,                                                 \
      "nanoGPT: False = checkpoint only at evaluations whose val loss is the best so far", 0, 0, 0)                    \
    X(NG_DECAY_LR, "--decay_lr", FG_FLAG_TRUTH, NULL, "nanoGPT: False = a constant --lr (no warm-up, no decay)", 0, 0, \
      0)                                                                                                               \
    X(NG_COMPILE, "--compile", FG_FLAG_TRUTH, NULL, "nanoGPT: accepted, does nothing (there is no torch.compile)", 0,  \
      0, 0)                                                                                                            \
    X(NG_BACKEND, "--backend", FG_FLAG_STR, "NAME",                                                                    \
      "nanoGPT: nccl or gloo, accepted and ignored (under mpirun the transport is MPI's, or NCCL on CUDA)", 0, 0, 0)   \
    X(NG_WANDB_LOG, "--wandb_log", FG_FLAG_TRUTH, NULL, "nanoGPT: accepted, does nothing (the curve is in log.csv)",   \
      0, 0, 0)                                                                                                         \
    X(NG_WANDB_PROJECT, "--wandb_project", FG_FLAG_STR, "NAME", "nanoGPT: accepted, does nothing", 0, 0, 0)            \
    X(NG_WANDB_RUN, "--wandb_run_name", FG_FLAG_STR, "NAME", "nanoGPT: accepted, does nothing", 0, 0, 0)

/* The state of one command line's nanoGPT parts: the config files read, and where the data and
 * vocabulary came from. Zero it before the first parse. */
typedef struct {
    const char *cmd;
    fg_flag *flags;
    int n;
    int configs;      /* config files read in this parse */
    int best_only;    /* resolved: always_save_checkpoint = False */
    int best_only_given; /* always_save_checkpoint was given (a resumed run otherwise keeps its policy) */
    char data_bin[4200]; /* resolved: data/<dataset> */
} fg_nanogpt;

/* Gives the flags of f[0 .. n) that have a nanoGPT twin its name as their alias. */
void fg_nanogpt_aliases(fg_flag *f, int n);

/* What is wrong with nanoGPT's init_from value `value` as a model to start from: NULL when it may
 * name one (a path; 'scratch' means none), else the reason ('resume', a hub name such as 'gpt2'
 * that is not a path here). The returned text is static. */
const char *fg_nanogpt_init_from_refusal(const char *value);

/* Sets the FG_NANOGPT_FLAGS' defaults (train.py's) in f; nothing given. */
void fg_nanogpt_flag_defaults(fg_flag *f, int n);

/* nanoGPT's train.py defaults for the settings a config file runs over (its GPT-2 124M on
 * OpenWebText: 12 layers, block 1024, 600000 iterations, ...), as defaults (nothing given).
 * Not the device (ours, cpu), the dtype (ours, float32) or bias (True): see the help. 0, or 2 after a
 * line. */
int fg_nanogpt_train_defaults(fg_nanogpt *ng);

/* The positional-argument hook of fg_flags_parse_ex: `arg` is a config file, read and applied
 * now (ctx: the fg_nanogpt, whose cmd, flags and n are set). 0, or 2 (1 when it does not open)
 * after one line. */
int fg_nanogpt_positional(const char *arg, void *ctx);

/* After parsing: checks the FG_NANOGPT_FLAGS and turns them into ours — dataset into --data-bin
 * data/<dataset> (with the vocabulary nanoGPT uses without a meta.pkl, 50304, unless --vocab-size
 * is given or `resuming`), decay_lr = False into --warmup 0 and --min-lr = --lr, device 'cuda:0'
 * into cuda, always_save_checkpoint into ng->best_only (dtype is our --dtype); bias = False,
 * backend other than nccl, gloo or mpi are refused. `notes`: print one "note:" line on stdout
 * for each setting accepted that does nothing. 0, or 2 after one line. */
int fg_nanogpt_resolve(fg_nanogpt *ng, int resuming, int notes);

/* The help section: every setting of nanoGPT's train.py and what it does here. */
void fg_nanogpt_help(FILE *out);

/* ---- the config-file reader, on its own (tests use it) ---- */
typedef struct {
    char key[64];
    char value[1024]; /* the literal as text: a number in full precision, True/False/None, a string's contents */
    int is_string;
    int line;
} fg_pyconfig_entry;

/* Reads `path`'s `key = literal` lines (comments and blank lines skipped). Returns the number of
 * entries (in file order, *out caller frees), or -1 with one line in err ("PATH:LINE: ..."): an
 * unreadable file, a line that is not `key = literal`, a value that is not a literal. */
int fg_pyconfig_read(const char *path, fg_pyconfig_entry **out, char *err, size_t err_n);

#endif /* FG_NANOGPT_H */
