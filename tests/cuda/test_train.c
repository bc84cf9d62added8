/* test_train.c — the GPT trainer (train/trainer.h) on the GPU against the same run on the CPU.
 *
 * The same model code trains on either device: parameters, gradients and AdamW's moments are flat
 * device buffers, initialized from the same host Philox numbers, with the gradient norm, clipping
 * and AdamW done by cuda/adamw.cu. The reference for every GPU number here is the CPU trainer
 * with the same seed and configuration (itself tested by tests/test_trainer.c): losses and
 * gradient norms step by step, then the parameters and moments, within float32 tolerance (cuBLAS
 * and the deterministic device reductions sum in other orders than the CPU), all but the key
 * bias: its exact gradient is zero, so what each device has there is rounding noise, checked as
 * such (compare_trained). Checkpoints of a device run go through host copies and must restore bit
 * for bit; `flashgrad sample` reads them on the CPU. After two warm-up steps a device step takes no
 * block from the system (cudaMalloc). bfloat16 mixed precision (bf16 GEMMs and attention over the
 * same float32 buffers) against the CPU's float32 run at bf16 tolerance, and its checkpoints.
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
    c.opt = (fg_adamw_config){.lr = 3e-3,
                              .min_lr = 3e-4,
                              .warmup = 1,
                              .decay_steps = steps,
                              .beta1 = 0.9,
                              .beta2 = 0.99,
                              .eps = 1e-8,
                              .weight_decay = 0.1,
                              .grad_clip = 1.0};
    return c;
}

static int rel_close(double got, double want, double tol) { return fabs(got - want) <= tol * fmax(fabs(want), 1e-3); }

/* The key bias, the middle third (K) of each block's c_attn.bias, has a gradient that is exactly
 * zero in exact arithmetic: q·(k + b) = q·k + q·b adds the same amount to every score of a query
 * row, and the softmax ignores that. What a device computes there is rounding noise, which AdamW's
 * m̂ / (sqrt(v̂) + eps) turns into steps of up to about lr once the noise outgrows eps; the slice
 * then takes a random walk that differs between devices and that no loss can see. So those
 * elements are left out of the parameter and moment comparisons, and checked on their own:
 *   - the gradient there is noise on both devices: at most 1e-5 · max|g| (a wrong attention
 *     backward, whose rows of dS no longer sum to zero, puts a real gradient there);
 *   - the moments are noise-sized likewise (|m| at most 1e-5 · max|m|, v at most 1e-10 · max|v|);
 *   - each device's key bias moved at most 2.5 · Σ lr from its start (AdamW's step is at most
 *     about 2.3 · lr for β1 = 0.9, β2 = 0.99; biases get no weight decay).
 * key[i] = 1 marks the key-bias elements of the flat buffers. */
static int8_t *key_bias_mask(const fg_gpt *g) {
    int8_t *key = calloc((size_t)g->num_elements, 1);
    if (!key) return NULL;
    const int64_t C = g->cfg.n_embd;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].kind == FG_GPT_ATTN_B) memset(key + g->params[i].offset + C, 1, (size_t)C);
    return key;
}

/* the elements of x where key[i] == keep (a new array of *n) */
static double *pick(const double *x, const int8_t *key, int64_t P, int keep, int64_t *n) {
    double *r = malloc((size_t)(P ? P : 1) * sizeof(double));
    *n = 0;
    if (r)
        for (int64_t i = 0; i < P; i++)
            if (key[i] == keep) r[(*n)++] = x[i];
    return r;
}

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* The four flat buffers of a trained run as host float64 arrays: params, grads, exp_avg, exp_avg_sq
 * (free with free_trained). */
typedef struct {
    double *b[4];
} trained_host;
static void free_trained(trained_host *t) {
    for (int i = 0; i < 4; i++) free(t->b[i]);
}
static int get_trained(const fg_trainer *tr, trained_host *t) {
    const fg_tensor *src[4] = {tr->model->params_flat, tr->model->grads_flat, tr->opt.m, tr->opt.v};
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= (t->b[i] = fgt_host_f64(src[i])) != NULL;
    if (!ok) printf("    could not read the trained buffers: %s\n", fg_last_error());
    return ok;
}

/* The device run (dev) against the CPU run (ref), the key bias apart (see above); key from
 * key_bias_mask, P elements, lr_sum = Σ lr over the steps taken. */
static int compare_trained(const trained_host *dev, const trained_host *ref, const int8_t *key, int64_t P,
                           double lr_sum) {
    int r = FGT_PASS;
    /* everything but the key bias, as tight as the rest of this test: AdamW's m / (sqrt(v) + eps)
     * amplifies tiny gradient differences where v is small, so the parameters get a looser (still
     * float32-scale) tolerance than the losses */
    static const char *names[4] = {"parameters after training (without the key bias)", NULL,
                                   "AdamW exp_avg (without the key bias)", "AdamW exp_avg_sq (without the key bias)"};
    static const double tols[4] = {1e-4, 0, 5e-3, 5e-3};
    for (int b = 0; b < 4 && r == FGT_PASS; b++) {
        if (!names[b]) continue;
        int64_t n;
        double *g = pick(dev->b[b], key, P, 0, &n), *w = pick(ref->b[b], key, P, 0, &n);
        r = g && w ? fgt_compare(names[b], g, w, n, tols[b]) : FGT_FAIL;
        free(g);
        free(w);
    }
    /* the key bias: noise on both devices, and a bounded walk */
    const trained_host *runs[2] = {dev, ref};
    static const char *run_names[2] = {"device", "CPU"};
    for (int d = 0; d < 2 && r == FGT_PASS; d++) {
        double *const *h = runs[d]->b;
        int64_t nk, nr;
        double *kp = pick(h[0], key, P, 1, &nk);
        double *kg = pick(h[1], key, P, 1, &nk), *rg = pick(h[1], key, P, 0, &nr);
        double *km = pick(h[2], key, P, 1, &nk), *rm = pick(h[2], key, P, 0, &nr);
        double *kv = pick(h[3], key, P, 1, &nk), *rv = pick(h[3], key, P, 0, &nr);
        if (!kp || !kg || !rg || !km || !rm || !kv || !rv)
            r = FGT_FAIL;
        else if (max_abs(kg, nk) > 1e-5 * max_abs(rg, nr) || max_abs(km, nk) > 1e-5 * max_abs(rm, nr) ||
                 max_abs(kv, nk) > 1e-10 * max_abs(rv, nr) || max_abs(kp, nk) > 2.5 * lr_sum) {
            printf("    key bias on the %s: max |grad| %.3e (others %.3e), |exp_avg| %.3e (others %.3e), exp_avg_sq "
                   "%.3e (others %.3e), |value| %.3e (2.5 x sum of lr %.3e): not the rounding noise that exact "
                   "arithmetic's zero gradient leaves\n",
                   run_names[d], max_abs(kg, nk), max_abs(rg, nr), max_abs(km, nk), max_abs(rm, nr), max_abs(kv, nk),
                   max_abs(rv, nr), max_abs(kp, nk), 2.5 * lr_sum);
            r = FGT_FAIL;
        }
        free(kp), free(kg), free(rg), free(km), free(rm), free(kv), free(rv);
    }
    return r;
}

static int compare_trainers(fg_trainer *gpu, fg_trainer *cpu, double lr_sum) {
    trained_host g = {{0}}, c = {{0}};
    int8_t *key = key_bias_mask(cpu->model);
    int r = key && get_trained(gpu, &g) && get_trained(cpu, &c)
                ? compare_trained(&g, &c, key, cpu->model->num_elements, lr_sum)
                : FGT_FAIL;
    free_trained(&g);
    free_trained(&c);
    free(key);
    return r;
}

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
    double lr_sum = 0;
    uint64_t warm = 0;
    for (int s = 0; s < steps; s++) {
        fg_step_stats a, b;
        if (fg_trainer_step(cpu, &a) != FG_OK || fg_trainer_step(gpu, &b) != FG_OK) {
            printf("    step %d: %s\n", s + 1, fg_last_error());
            goto out;
        }
        printf("    step %d: loss cpu %.7f gpu %.7f | grad norm cpu %.6f gpu %.6f\n", s + 1, a.loss, b.loss,
               a.grad_norm, b.grad_norm);
        if (!rel_close(b.loss, a.loss, tol) || !rel_close(b.grad_norm, a.grad_norm, tol) || b.lr != a.lr) {
            printf(
                "    step %d: GPU loss %.9g / grad norm %.9g / lr %g, CPU %.9g / %.9g / %g (tolerance %g relative)\n",
                s + 1, b.loss, b.grad_norm, b.lr, a.loss, a.grad_norm, a.lr, tol);
            goto out;
        }
        lr_sum += a.lr;
        if (s == 1) warm = fg_alloc_get_stats(FG_CUDA).system_allocs; /* after two warm-up steps */
    }
    if (FGT_DEV == FG_CUDA && fg_alloc_get_stats(FG_CUDA).system_allocs != warm) {
        printf("    device steps 3-%d took %llu blocks from the system (cudaMalloc)\n", steps,
               (unsigned long long)(fg_alloc_get_stats(FG_CUDA).system_allocs - warm));
        goto out;
    }
    if (compare_trainers(gpu, cpu, lr_sum) != FGT_PASS) goto out;
    double lc = 0, lg = 0;
    if (fg_trainer_eval_loss(cpu, FG_SPLIT_VAL, &lc) != FG_OK ||
        fg_trainer_eval_loss(gpu, FG_SPLIT_VAL, &lg) != FG_OK) {
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

/* compare_trained on what a device whose rounding noise outgrows AdamW's eps would leave: two
 * identical CPU runs, then the "device" key bias walked by ±lr per step. The whole-buffer
 * comparison rejects that; compare_trained must accept it, and must still reject a real gradient
 * in the key bias and a wrong parameter elsewhere. */
static int key_bias_noise_passes_the_comparison_and_a_real_key_gradient_fails_it(void) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    FGT_NOTNULL(src);
    const int steps = 2;
    fg_train_config cc = tiny_config(src, FG_CPU, FG_ATTN_FLASH, steps);
    fg_trainer *a = fg_trainer_create(&cc, src), *b = fg_trainer_create(&cc, src);
    trained_host ta = {{0}}, tb = {{0}};
    int8_t *key = NULL;
    int r = FGT_FAIL;
    double lr_sum = 0;
    if (!a || !b) goto fail;
    for (int s = 0; s < steps; s++) {
        fg_step_stats sa, sb;
        if (fg_trainer_step(a, &sa) != FG_OK || fg_trainer_step(b, &sb) != FG_OK) goto fail;
        lr_sum += sa.lr;
    }
    const int64_t P = a->model->num_elements;
    if (!(key = key_bias_mask(a->model)) || !get_trained(a, &ta) || !get_trained(b, &tb)) goto out;
    if (compare_trained(&tb, &ta, key, P, lr_sum) != FGT_PASS) {
        printf("    two identical runs do not compare equal\n");
        goto out;
    }
    /* the walk: each key-bias element of the "device" off by lr per step, alternating in sign */
    int64_t nkey = 0;
    for (int64_t i = 0; i < P; i++)
        if (key[i]) tb.b[0][i] = ta.b[0][i] + ((nkey++ & 1) ? -1 : 1) * lr_sum;
    printf("    seeded: the key bias walked by lr per step; the whole-buffer comparison (must reject it):\n");
    if (fgt_compare("parameters, whole buffer", tb.b[0], ta.b[0], P, 1e-4) == FGT_PASS) {
        printf("    the whole-buffer comparison accepts a key bias off by lr per step; this test shows nothing\n");
        goto out;
    }
    if (compare_trained(&tb, &ta, key, P, lr_sum) != FGT_PASS) {
        printf("    compare_trained rejects the key bias's noise walk\n");
        goto out;
    }
    /* a real gradient there: 1% of the largest one */
    double gmax = 0;
    for (int64_t i = 0; i < P; i++) gmax = fmax(gmax, fabs(ta.b[1][i]));
    int64_t k0 = -1, w0 = -1;
    for (int64_t i = 0; i < P && (k0 < 0 || w0 < 0); i++) {
        if (key[i] && k0 < 0) k0 = i;
        if (!key[i] && w0 < 0) w0 = i;
    }
    const double g_saved = tb.b[1][k0];
    tb.b[1][k0] = 0.01 * gmax;
    printf("    seeded: a key-bias gradient of 1%% of the largest gradient (must be rejected):\n");
    if (compare_trained(&tb, &ta, key, P, lr_sum) == FGT_PASS) {
        printf("    compare_trained accepts a key-bias gradient of 1%% of the largest gradient\n");
        goto out;
    }
    tb.b[1][k0] = g_saved;
    /* and a parameter outside the key bias off by 1% of the largest one */
    tb.b[0][w0] += 0.01 * max_abs(ta.b[0], P);
    printf("    seeded: a parameter outside the key bias off by 1%% (must be rejected):\n");
    if (compare_trained(&tb, &ta, key, P, lr_sum) == FGT_PASS) {
        printf("    compare_trained accepts a wrong parameter outside the key bias\n");
        goto out;
    }
    r = FGT_PASS;
    goto out;
fail:
    printf("    %s\n", fg_last_error());
out:
    free_trained(&ta);
    free_trained(&tb);
    free(key);
    fg_trainer_free(a);
    fg_trainer_free(b);
    fg_source_free(src);
    return r;
}

static int same_bytes(const char *what, const fg_tensor *a, const fg_tensor *b);

/* ---- bfloat16 mixed precision (ops/device.h): float32 weights, gradients and AdamW; bf16
 * GEMMs (cuBLAS, float32 accumulation) and bf16 flash attention ----
 * The reference is the CPU's float32 run with the same seed. Rounding every GEMM and attention
 * operand to bf16 (8 significant bits) moves this model's losses by up to ~1.5e-4 relative over
 * these steps and its gradient norms by up to ~3e-3 (measured on the emulator); the tolerances
 * below (2e-3 and 2e-2) leave about ten and seven times that, while a wrong product (an operand
 * passed as float32 bits: NaN; transposed or without its stride: out of bounds or garbage) fails at
 * the first step. A float32 device run stays within ~1e-6 of the CPU; the bf16 run must be at
 * least 1e-5 away in some loss or gradient norm, or nothing was rounded. What this comparison
 * cannot see: at initialization the scores are ~0 and attention nearly uniform, so an attention
 * operand mix-up (k read as q) moves the losses no more than the rounding does; the bit-exact
 * attention test (tests/cuda/test_ops.c) and the GEMM test against the rounded operands catch
 * such bugs, and subtler rounding ones (truncation instead of nearest even). */
static int bf16_training_follows_the_float32_cpu_run(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP; /* the CPU has no bf16 kernels */
    const int steps = fgt_quick ? 4 : 8;
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    FGT_NOTNULL(src);
    fg_train_config cc = tiny_config(src, FG_CPU, FG_ATTN_FLASH, steps), bc = tiny_config(src, FGT_DEV, FG_ATTN_FLASH, steps);
    bc.model.compute = FG_COMPUTE_BF16;
    fg_trainer *cpu = fg_trainer_create(&cc, src), *gpu = fg_trainer_create(&bc, src);
    int r = FGT_FAIL;
    double worst = 0;
    uint64_t warm = 0;
    if (!cpu || !gpu) {
        printf("    trainer_create: %s\n", fg_last_error());
        goto out;
    }
    for (int st = 0; st < steps; st++) {
        fg_step_stats a, b;
        if (fg_trainer_step(cpu, &a) != FG_OK || fg_trainer_step(gpu, &b) != FG_OK) {
            printf("    step %d: %s\n", st + 1, fg_last_error());
            goto out;
        }
        const double dl = fabs(b.loss - a.loss) / fabs(a.loss);
        printf("    step %d: loss cpu float32 %.7f gpu bfloat16 %.7f (rel %.1e) | grad norm %.6f %.6f\n", st + 1,
               a.loss, b.loss, dl, a.grad_norm, b.grad_norm);
        worst = fmax(worst, fmax(dl, fabs(b.grad_norm - a.grad_norm) / fabs(a.grad_norm)));
        if (st == 1) warm = fg_alloc_get_stats(FG_CUDA).system_allocs; /* after two warm-up steps */
        if (!rel_close(b.loss, a.loss, 2e-3) || !rel_close(b.grad_norm, a.grad_norm, 2e-2) || b.lr != a.lr) {
            printf("    step %d: bfloat16 loss %.9g / grad norm %.9g, float32 CPU %.9g / %.9g (tolerance 2e-3 / 2e-2 "
                   "relative)\n",
                   st + 1, b.loss, b.grad_norm, a.loss, a.grad_norm);
            goto out;
        }
    }
    /* the bf16 copies come from the caching allocator: warm steps take no block from the system */
    if (fg_alloc_get_stats(FG_CUDA).system_allocs != warm) {
        printf("    bfloat16 steps 3-%d took %llu blocks from the system (cudaMalloc)\n", steps,
               (unsigned long long)(fg_alloc_get_stats(FG_CUDA).system_allocs - warm));
        goto out;
    }
    if (fg_device_compute(FG_CUDA) != FG_COMPUTE_FULL) {
        printf("    the trainer left the device in %s\n", fg_compute_name(fg_device_compute(FG_CUDA)));
        goto out;
    }
    double lc = 0, lg = 0;
    if (fg_trainer_eval_loss(cpu, FG_SPLIT_VAL, &lc) != FG_OK ||
        fg_trainer_eval_loss(gpu, FG_SPLIT_VAL, &lg) != FG_OK) {
        printf("    eval: %s\n", fg_last_error());
        goto out;
    }
    printf("    validation loss: cpu float32 %.7f, gpu bfloat16 %.7f\n", lc, lg);
    if (!rel_close(lg, lc, 2e-3)) goto out;
    if (worst < 1e-5) {
        printf("    the bfloat16 losses and norms are within %.1e of float32's: nothing was rounded to bf16\n", worst);
        goto out;
    }
    r = FGT_PASS;
out:
    fg_trainer_free(cpu);
    fg_trainer_free(gpu);
    fg_source_free(src);
    return r;
}

/* A bfloat16 run's checkpoint says so: it reopens as bfloat16, resumes bit for bit in bfloat16,
 * and is refused by a float32 trainer. */
static int bf16_checkpoint_keeps_its_precision(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    FGT_NOTNULL(src);
    fg_train_config bc = tiny_config(src, FGT_DEV, FG_ATTN_FLASH, 4), fc = bc;
    bc.model.compute = FG_COMPUTE_BF16;
    char dir[] = "/tmp/fg_cuda_bf16_ckpt_XXXXXX";
    int made = mkdtemp(dir) != NULL;
    fg_trainer *a = fg_trainer_create(&bc, src), *b = fg_trainer_create(&bc, src), *f = fg_trainer_create(&fc, src);
    fg_ckpt *ck = NULL;
    int r = FGT_FAIL;
    fg_step_stats sa, sb;
    if (!made || !a || !b || !f) goto fail;
    if (fg_trainer_step(a, NULL) != FG_OK || fg_ckpt_save(dir, a) != FG_OK || !(ck = fg_ckpt_open(dir, 1))) goto fail;
    if (fg_ckpt_get_info(ck)->model.compute != FG_COMPUTE_BF16 || fg_ckpt_get_info(ck)->train.model.compute != FG_COMPUTE_BF16) {
        printf("    the checkpoint reads back as %s\n", fg_compute_name(fg_ckpt_get_info(ck)->model.compute));
        goto out;
    }
    if (fg_ckpt_restore(ck, f) == FG_OK || !strstr(fg_last_error(), "bfloat16")) {
        printf("    a float32 trainer took the bfloat16 checkpoint (%s)\n", fg_last_error());
        goto out;
    }
    fg_clear_error();
    if (fg_ckpt_restore(ck, b) != FG_OK || fg_trainer_step(a, &sa) != FG_OK || fg_trainer_step(b, &sb) != FG_OK)
        goto fail;
    FGT_CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm,
              "resumed bfloat16 step: loss %.9g / norm %.9g, uninterrupted %.9g / %.9g", sb.loss, sb.grad_norm, sa.loss,
              sa.grad_norm);
    if (!same_bytes("bfloat16 parameters after a resumed step", b->model->params_flat, a->model->params_flat)) goto out;
    r = FGT_PASS;
    goto out;
fail:
    printf("    %s\n", fg_last_error());
out:
    fg_ckpt_close(ck);
    fg_trainer_free(a);
    fg_trainer_free(b);
    fg_trainer_free(f);
    fg_source_free(src);
    if (made) {
        const char *files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE};
        char p[4096];
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    return r;
}

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
        const char *files[] = {
            FG_CKPT_MODEL_FILE,
            FG_CKPT_OPTIM_FILE,
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
    {"device_checkpoint_restores_bit_for_bit_and_samples_on_cpu",
     device_checkpoint_restores_bit_for_bit_and_samples_on_cpu},
    {"key_bias_noise_passes_the_comparison_and_a_real_key_gradient_fails_it",
     key_bias_noise_passes_the_comparison_and_a_real_key_gradient_fails_it},
    {"bf16_training_follows_the_float32_cpu_run", bf16_training_follows_the_float32_cpu_run},
    {"bf16_checkpoint_keeps_its_precision", bf16_checkpoint_keeps_its_precision},
    {NULL, NULL},
};
