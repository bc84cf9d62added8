/* test_train.c — the GPT trainer (train/trainer.h) on the GPU against the same run on the CPU.
 *
 * The same model code trains on either device: parameters, gradients and AdamW's moments are flat
 * device buffers, initialized from the same host Philox numbers, with the gradient norm, clipping
 * and AdamW done by cuda/adamw.cu. The reference for every GPU number here is the CPU trainer
 * with the same seed and configuration (itself tested by tests/test_trainer.c): losses and
 * gradient norms step by step, then the parameters and moments, within float32 tolerance (cuBLAS
 * and the deterministic device reductions sum in other orders than the CPU). Checkpoints of a
 * device run go through host copies and must restore bit for bit; `flashgrad sample` reads them
 * on the CPU.
 *
 * bench/gpu_check.sh runs these (and the CLI comparison) as its training step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/alloc.h"
#include "tests/cuda/cuda_test.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

/* A tiny addition-task run that exercises every part of a step: dropout (masks must match the
 * CPU's), gradient accumulation, clipping (clip below the early norms), weight decay, both
 * attention implementations. */
static fg_train_config tiny_config(const fg_source *src, fg_device dev, fg_attn_impl attn, int steps) {
    fg_train_config c = {0};
    c.model = fg_gpt_default_config();
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.block_size = fg_source_fixed_block(src);
    c.model.vocab_size = fg_source_vocab_size(src);
    c.model.dropout = 0.1;
    c.model.attn = attn;
    c.model.device = dev;
    c.batch_size = fgt_quick ? 4 : 8;
    c.grad_accum = 2;
    c.steps = steps;
    c.eval_every = 0;
    c.eval_iters = 2;
    c.seed = 1234;
    c.opt = (fg_adamw_config){.lr = 3e-3, .min_lr = 3e-4, .warmup = 1, .decay_steps = steps, .beta1 = 0.9,
                              .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    return c;
}

static int rel_close(double got, double want, double tol) { return fabs(got - want) <= tol * fmax(fabs(want), 1e-3); }

static int train_matches_cpu(fg_attn_impl attn) {
    const int steps = fgt_quick ? 3 : 6;
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    FGT_NOTNULL(src);
    fg_train_config cc = tiny_config(src, FG_CPU, attn, steps), gc = tiny_config(src, FGT_DEV, attn, steps);
    fg_trainer *cpu = fg_trainer_create(&cc, src), *gpu = fg_trainer_create(&gc, src);
    int r = FGT_FAIL;
    if (!cpu || !gpu) {
        printf("    trainer_create: %s\n", fg_last_error());
        goto out;
    }
    if (gpu->model->params_flat->device != FGT_DEV || gpu->opt.m->device != FGT_DEV) {
        printf("    the device run's buffers are on %s, not %s\n", fg_device_name(gpu->model->params_flat->device),
               fg_device_name(FGT_DEV));
        goto out;
    }
    /* the same initial parameters, exactly (host Philox numbers copied over) */
    if (fgt_compare_tensors("initial parameters", gpu->model->params_flat, cpu->model->params_flat, 0.0) != FGT_PASS)
        goto out;
    /* float32 through a few steps of AdamW: losses and norms agree to ~1e-5 relative on a GPU
     * (other summation orders); 2e-4 leaves room without hiding a wrong gradient (those are off
     * by percent) */
    const double tol = 2e-4;
    for (int s = 0; s < steps; s++) {
        fg_step_stats a, b;
        if (fg_trainer_step(cpu, &a) != FG_OK || fg_trainer_step(gpu, &b) != FG_OK) {
            printf("    step %d: %s\n", s + 1, fg_last_error());
            goto out;
        }
        printf("    step %d: loss cpu %.7f gpu %.7f | grad norm cpu %.6f gpu %.6f\n", s + 1, a.loss, b.loss, a.grad_norm,
               b.grad_norm);
        if (!rel_close(b.loss, a.loss, tol) || !rel_close(b.grad_norm, a.grad_norm, tol) || b.lr != a.lr) {
            printf("    step %d: GPU loss %.9g / grad norm %.9g / lr %g, CPU %.9g / %.9g / %g (tolerance %g relative)\n",
                   s + 1, b.loss, b.grad_norm, b.lr, a.loss, a.grad_norm, a.lr, tol);
            goto out;
        }
    }
    /* AdamW's m / (sqrt(v) + eps) amplifies tiny gradient differences where v is small, so the
     * parameters get a looser (still float32-scale) tolerance than the losses */
    if (fgt_compare_tensors("parameters after training", gpu->model->params_flat, cpu->model->params_flat, 1e-4) != FGT_PASS ||
        fgt_compare_tensors("AdamW exp_avg", gpu->opt.m, cpu->opt.m, 5e-3) != FGT_PASS ||
        fgt_compare_tensors("AdamW exp_avg_sq", gpu->opt.v, cpu->opt.v, 5e-3) != FGT_PASS)
        goto out;
    double lc = 0, lg = 0;
    if (fg_trainer_eval_loss(cpu, FG_SPLIT_VAL, &lc) != FG_OK || fg_trainer_eval_loss(gpu, FG_SPLIT_VAL, &lg) != FG_OK) {
        printf("    eval: %s\n", fg_last_error());
        goto out;
    }
    if (!rel_close(lg, lc, tol)) {
        printf("    validation loss: GPU %.9g, CPU %.9g\n", lg, lc);
        goto out;
    }
    r = FGT_PASS;
out:
    fg_trainer_free(cpu);
    fg_trainer_free(gpu);
    fg_source_free(src);
    return r;
}

static int gpt_training_flash_on_device_matches_cpu_step_by_step(void) { return train_matches_cpu(FG_ATTN_FLASH); }
static int gpt_training_naive_on_device_matches_cpu_step_by_step(void) { return train_matches_cpu(FG_ATTN_NAIVE); }

/* Bitwise equality of two tensors' bytes (any devices), via host copies. */
static int same_bytes(const char *what, const fg_tensor *a, const fg_tensor *b) {
    size_t n = (size_t)fg_nbytes(a);
    void *x = malloc(n), *y = malloc(n);
    int ok = x && y && (size_t)fg_nbytes(b) == n && fg_to_host(a, x) == FG_OK && fg_to_host(b, y) == FG_OK;
    int64_t bad = -1;
    if (ok && memcmp(x, y, n)) {
        const unsigned char *p = x, *q = y;
        for (size_t i = 0; i < n && bad < 0; i++)
            if (p[i] != q[i]) bad = (int64_t)(i / fg_dtype_size(a->dtype));
        ok = 0;
    }
    if (!ok)
        printf("    %s: not bit-identical (first differing element %lld)%s%s\n", what, (long long)bad,
               bad < 0 ? ": " : "", bad < 0 ? fg_last_error() : "");
    free(x);
    free(y);
    return ok;
}

static int device_checkpoint_restores_bit_for_bit_and_samples_on_cpu(void) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    FGT_NOTNULL(src);
    fg_train_config gc = tiny_config(src, FGT_DEV, FG_ATTN_FLASH, 4);
    char dir[] = "/tmp/fg_cuda_ckpt_XXXXXX";
    int made = mkdtemp(dir) != NULL;
    fg_trainer *a = fg_trainer_create(&gc, src), *b = fg_trainer_create(&gc, src);
    fg_ckpt *ck = NULL;
    fg_gpt *host = NULL;
    int32_t *t1 = NULL, *t2 = NULL;
    int r = FGT_FAIL;
    if (!made || !a || !b) {
        printf("    setup: %s\n", made ? fg_last_error() : "mkdtemp failed");
        goto out;
    }
    for (int s = 0; s < 2; s++)
        if (fg_trainer_step(a, NULL) != FG_OK) goto fail;
    if (fg_ckpt_save(dir, a) != FG_OK || !(ck = fg_ckpt_open(dir, 1)) || fg_ckpt_restore(ck, b) != FG_OK) goto fail;
    if (b->step != a->step || b->opt.t != a->opt.t) {
        printf("    restored step %lld / t %lld, saved %lld / %lld\n", (long long)b->step, (long long)b->opt.t,
               (long long)a->step, (long long)a->opt.t);
        goto out;
    }
    if (!same_bytes("parameters", b->model->params_flat, a->model->params_flat) ||
        !same_bytes("exp_avg", b->opt.m, a->opt.m) || !same_bytes("exp_avg_sq", b->opt.v, a->opt.v))
        goto out;
    /* the resumed run continues exactly: same step, same device, same order */
    fg_step_stats sa, sb;
    if (fg_trainer_step(a, &sa) != FG_OK || fg_trainer_step(b, &sb) != FG_OK) goto fail;
    FGT_CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm,
              "resumed step: loss %.9g / norm %.9g, uninterrupted %.9g / %.9g", sb.loss, sb.grad_norm, sa.loss,
              sa.grad_norm);
    if (!same_bytes("parameters after a resumed step", b->model->params_flat, a->model->params_flat)) goto out;
    /* what `flashgrad sample` does: the checkpoint as a CPU model; greedy decoding on both devices
     * must agree (the logits differ in the last bits at most) */
    host = fg_ckpt_load_model(ck);
    if (!host) goto fail;
    if (host->params_flat->device != FG_CPU) {
        printf("    fg_ckpt_load_model put the model on %s\n", fg_device_name(host->params_flat->device));
        goto out;
    }
    /* b is one step past the checkpoint; the saved state is what `ck` holds: compare with a fresh
     * device load of it */
    fg_trainer_free(b);
    b = fg_trainer_create(&gc, src);
    if (!b || fg_ckpt_restore(ck, b) != FG_OK) goto fail;
    const int n = 8, pl = fg_addition_prompt_len(src->add), al = fg_addition_answer_len(src->add), W = pl + al;
    t1 = calloc((size_t)n * W, sizeof *t1);
    t2 = calloc((size_t)n * W, sizeof *t2);
    if (!t1 || !t2) goto out;
    int32_t ans[64];
    if (al > 64) goto out;
    for (int i = 0; i < n; i++)
        if (fg_addition_problem(src->add, FG_SPLIT_VAL, (uint64_t)i, t1 + (size_t)i * W, ans, NULL, NULL) != FG_OK)
            goto fail;
    memcpy(t2, t1, (size_t)n * W * sizeof *t1);
    if (fg_gpt_greedy_batch(host, t1, n, pl, al) != FG_OK || fg_gpt_greedy_batch(b->model, t2, n, pl, al) != FG_OK)
        goto fail;
    for (int i = 0; i < n * W; i++)
        FGT_CHECK(t1[i] == t2[i], "greedy decoding: token %d is %d on %s, %d on the CPU", i, t2[i],
                  fg_device_name(FGT_DEV), t1[i]);
    r = FGT_PASS;
    goto out;
fail:
    printf("    %s\n", fg_last_error());
out:
    free(t1);
    free(t2);
    fg_gpt_free(host);
    fg_ckpt_close(ck);
    fg_trainer_free(a);
    fg_trainer_free(b);
    fg_source_free(src);
    if (made) {
        const char *files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE,
#ifdef FG_CKPT_OPTIM_PREV_FILE
                               FG_CKPT_OPTIM_PREV_FILE,
#endif
        };
        char p[4096];
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    return r;
}

const fgt_case fgt_train_cases[] = {
    {"gpt_training_flash_on_device_matches_cpu_step_by_step", gpt_training_flash_on_device_matches_cpu_step_by_step},
    {"gpt_training_naive_on_device_matches_cpu_step_by_step", gpt_training_naive_on_device_matches_cpu_step_by_step},
    {"device_checkpoint_restores_bit_for_bit_and_samples_on_cpu", device_checkpoint_restores_bit_for_bit_and_samples_on_cpu},
    {NULL, NULL},
};
