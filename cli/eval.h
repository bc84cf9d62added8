/* eval.h — the loss of a saved model on its data, writing nothing: `flashgrad eval` and
 * `flashgrad train --eval-only --resume`.
 *
 * The batches are the trainer's evaluation batches (train/trainer.h, fg_trainer_eval_loss: the
 * same eval seed, B, T and count), so with the run's settings the figures are the ones its last
 * evaluation printed and logged.
 */
#ifndef FG_EVAL_H
#define FG_EVAL_H

#include <stdint.h>

typedef struct {
    const char *cmd;       /* for messages: "eval", "train" */
    const char *ckpt;      /* what `sample --ckpt` takes (train/model_files.h) */
    const char *data;      /* a text file to use instead of the recorded one, or NULL */
    const char *data_bin;  /* token files to use instead of the recorded ones, or NULL */
    int batch_size;        /* 0: the run's (12 without its optimizer file) */
    int eval_iters;        /* 0: the run's (20 without its optimizer file) */
    int has_seed;          /* seed: the batches' run seed instead of the run's */
    uint64_t seed;
} fg_eval_opts;

/* Loads the model and its data, prints what it evaluates and "step S: train loss X, val loss Y"
 * on stdout. Reads the checkpoint's files only. Returns the exit status (0, 1 for a file that does
 * not load, 2 for a usage error), its one line printed on stderr. */
int fg_eval_run(const fg_eval_opts *o);

#endif /* FG_EVAL_H */
