/* test_muon.c — --optimizer muon: one matrix's update against a naive float64 reference (both
 * orientations), the parameter split, thread-count determinism, bit-exact resume, the checkpoint's
 * state round trip, refusals, no allocation after warm-up, and the step-for-step cross-check against
 * torch.optim.Muon + torch.optim.AdamW (tests/muon_torch_check.py, where FG_TORCH_PYTHON has
 * PyTorch >= 2.9). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/cpu/threadpool.h"
#include "ops/flat.h"
#include "tensor/alloc.h"
#include "tensor/npy.h"
#include "tensor/safetensors.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/muon.h"
#include "train/trainer.h"

static char tmpdir[256];
static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fg_muon_test_XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}
static void remove_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
}

static fg_source *addition_source(void) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *s = fg_source_addition(&ac);
    cr_assert(s, "%s", fg_last_error());
    return s;
}

/* A tiny Muon run: 16 wide, so the matrices are (48, 16), (16, 16), (64, 16) and (16, 64). */
static fg_train_config muon_config(const fg_source *s) {
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 12, 2, 77);
    c.optimizer = FG_OPTIM_MUON;
    c.muon = fg_muon_default_config();
    c.muon.lr = 0.05;
    c.muon.weight_decay = 0.1;
    return c;
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

/* ---- the update of one matrix against a naive reference ---- */

/* torch.optim.Muon's single-tensor update in float64, written out with plain loops: momentum,
 * Nesterov, the Frobenius normalization, the quintic iteration on the wide orientation, decay and
 * the adjusted step. */
static void naive_muon(double *p, const double *g, double *buf, int R, int Cc, const fg_muon_config *c, double lr) {
    const int tr = R > Cc, k = tr ? Cc : R, n = tr ? R : Cc;
    double *X = calloc((size_t)k * n, sizeof *X), *A = calloc((size_t)k * k, sizeof *A);
    double *B = calloc((size_t)k * k, sizeof *B), *Y = calloc((size_t)k * n, sizeof *Y);
    const double mu = c->momentum;
    double ss = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < Cc; j++) {
            const double gi = g[i * Cc + j];
            buf[i * Cc + j] = mu * buf[i * Cc + j] + (1 - mu) * gi;
            const double u = c->nesterov ? (1 - mu) * gi + mu * buf[i * Cc + j] : buf[i * Cc + j];
            X[tr ? j * R + i : i * Cc + j] = u;
            ss += u * u;
        }
    const double nrm = fmax(sqrt(ss), FG_MUON_EPS);
    for (int i = 0; i < k * n; i++) X[i] /= nrm;
    for (int s = 0; s < c->ns_steps; s++) {
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) {
                double t = 0;
                for (int j = 0; j < n; j++) t += X[a * n + j] * X[b * n + j];
                A[a * k + b] = t;
            }
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) {
                double t = 0;
                for (int j = 0; j < k; j++) t += A[a * k + j] * A[j * k + b];
                B[a * k + b] = FG_MUON_NS_B * A[a * k + b] + FG_MUON_NS_C * t;
            }
        for (int a = 0; a < k; a++)
            for (int j = 0; j < n; j++) {
                double t = 0;
                for (int b = 0; b < k; b++) t += B[a * k + b] * X[b * n + j];
                Y[a * n + j] = FG_MUON_NS_A * X[a * n + j] + t;
            }
        memcpy(X, Y, (size_t)k * n * sizeof *X);
    }
    const double alr = fg_muon_adjusted_lr(c->adjust, lr, R, Cc);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < Cc; j++)
            p[i * Cc + j] = p[i * Cc + j] * (1 - lr * c->weight_decay) - alr * X[tr ? j * R + i : i * Cc + j];
    free(X);
    free(A);
    free(B);
    free(Y);
}

Test(muon, one_matrix_update_matches_a_naive_float64_reference_in_both_orientations) {
    static const int shapes[][2] = {{12, 5}, {5, 12}, {7, 7}};
    for (int si = 0; si < 3; si++)
        for (int adj = 0; adj < FG_MUON_ADJUST_COUNT; adj++) {
            const int R = shapes[si][0], Cc = shapes[si][1];
            const int64_t n = (int64_t)R * Cc, sh[1] = {n};
            fg_muon_config c = fg_muon_default_config();
            c.momentum = 0.9;
            c.weight_decay = 0.3;
            c.adjust = (fg_muon_adjust)adj;
            const double lr = 0.05, gscale = 0.7;
            fg_tensor *p = fgt_rand(FG_F64, 1, sh, 1 + si), *g = fgt_rand(FG_F64, 1, sh, 11 + si);
            fg_tensor *buf = fgt_rand(FG_F64, 1, sh, 21 + si); /* a momentum buffer mid-run */
            const int64_t wn = fg_flat_muon_work(R, Cc);
            fg_tensor *work = fg_zeros(FG_F64, FG_CPU, 1, &wn);
            double *rp = fgt_values(p), *rg = fgt_values(g), *rb = fgt_values(buf);
            for (int64_t i = 0; i < n; i++) rg[i] *= gscale;
            fg_muon_step ms = {.momentum = c.momentum, .nesterov = 1, .ns_steps = c.ns_steps, .a = FG_MUON_NS_A,
                               .b = FG_MUON_NS_B, .c = FG_MUON_NS_C, .eps = FG_MUON_EPS,
                               .decay_factor = 1 - lr * c.weight_decay,
                               .lr = fg_muon_adjusted_lr(c.adjust, lr, R, Cc)};
            for (int rep = 0; rep < 2; rep++) { /* twice: the buffer carries over */
                cr_assert_eq(fg_flat_muon(p, g, gscale, 0, R, Cc, buf, 0, &ms, work), FG_OK, "%s", fg_last_error());
                naive_muon(rp, rg, rb, R, Cc, &c, lr);
            }
            char what[96];
            snprintf(what, sizeof what, "(%d, %d) %s: parameters", R, Cc, fg_muon_adjust_name(c.adjust));
            FGT_ASSERT_CLOSE_BUF(p, rp, n, 1e-12, 1e-10, what);
            snprintf(what, sizeof what, "(%d, %d) %s: momentum buffer", R, Cc, fg_muon_adjust_name(c.adjust));
            FGT_ASSERT_CLOSE_BUF(buf, rb, n, 1e-14, 1e-12, what);
            free(rp);
            free(rg);
            free(rb);
            fg_release(p);
            fg_release(g);
            fg_release(buf);
            fg_release(work);
        }
}

Test(muon, the_orthogonalized_update_has_singular_values_near_one) {
    /* 5 steps of the quintic leave the singular values in roughly [0.7, 1.2] (Keller Jordan's
     * post): X Xᵀ of the update, for a (6, 20) gradient, has its diagonal there and its
     * off-diagonal small. */
    const int R = 6, Cc = 20;
    const int64_t n = R * Cc, sh[1] = {n}, wn = fg_flat_muon_work(R, Cc);
    fg_tensor *p = fg_zeros(FG_F64, FG_CPU, 1, sh), *buf = fg_zeros(FG_F64, FG_CPU, 1, sh);
    fg_tensor *g = fgt_rand(FG_F64, 1, sh, 3), *work = fg_zeros(FG_F64, FG_CPU, 1, &wn);
    fg_muon_step ms = {.momentum = 0, .nesterov = 0, .ns_steps = 5, .a = FG_MUON_NS_A, .b = FG_MUON_NS_B,
                       .c = FG_MUON_NS_C, .eps = FG_MUON_EPS, .decay_factor = 1, .lr = -1}; /* p = O */
    cr_assert_eq(fg_flat_muon(p, g, 1.0, 0, R, Cc, buf, 0, &ms, work), FG_OK, "%s", fg_last_error());
    const double *o = fg_data(p);
    for (int a = 0; a < R; a++)
        for (int b = 0; b < R; b++) {
            double t = 0;
            for (int j = 0; j < Cc; j++) t += o[a * Cc + j] * o[b * Cc + j];
            if (a == b)
                cr_expect(t > 0.4 && t < 1.6, "row %d of O O^T: diagonal %g", a, t);
            else
                cr_expect(fabs(t) < 0.35, "O O^T[%d][%d] = %g", a, b, t);
        }
    fg_release(p);
    fg_release(buf);
    fg_release(g);
    fg_release(work);
}

/* ---- the split ---- */

Test(muon, muon_takes_the_hidden_matrices_and_adamw_the_rest) {
    /* per block: GPT-2's c_attn, attn.c_proj, c_fc, mlp.c_proj; Llama's q, k, v, o, gate, up, down;
     * nanochat's q, k, v, o, fc1, fc2. Embeddings, an untied head and the norms stay with AdamW. */
    static const struct {
        fg_gpt_arch arch;
        int per_block;
    } archs[] = {{FG_ARCH_GPT2, 4}, {FG_ARCH_LLAMA, 7}, {FG_ARCH_NANOCHAT, 6}};
    fg_source *s = addition_source();
    for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ai++) {
        fg_train_config c = muon_config(s);
        c.model.dropout = 0;
        fg_gpt_arch_preset(&c.model, archs[ai].arch);
        fg_trainer *tr = trainer(&c, s);
        const fg_gpt *g = tr->model;
        const char *an = fg_gpt_arch_name(archs[ai].arch);
        int64_t M = 0;
        int taken = 0;
        for (int j = 0; j < g->n_params; j++) {
            const fg_gpt_param *pp = &g->params[j];
            const int want = (!strncmp(pp->name, "transformer.h.", 14) || !strncmp(pp->name, "model.layers.", 13)) &&
                             pp->ndim == 2;
            cr_expect_eq(fg_muon_takes(pp), want, "%s %s: Muon takes it = %d", an, pp->name, fg_muon_takes(pp));
            if (want) M += pp->numel, taken++;
        }
        cr_expect_eq(taken, archs[ai].per_block * c.model.n_layer, "%s: Muon takes %d tensors", an, taken);
        cr_expect_eq(tr->muon.n, M, "%s: momentum buffers of %lld elements, the matrices %lld", an,
                     (long long)tr->muon.n, (long long)M);
        /* one step: AdamW's moments stay zero on Muon's matrices and move elsewhere; the buffers move */
        steps(tr, 1, NULL);
        const float *m = fg_data(tr->opt.m), *bf = fg_data(tr->muon.buf);
        for (int j = 0; j < g->n_params; j++) {
            const fg_gpt_param *pp = &g->params[j];
            double mx = 0;
            for (int64_t i = 0; i < pp->numel; i++) mx = fmax(mx, fabs(m[pp->offset + i]));
            if (fg_muon_takes(pp))
                cr_expect(mx == 0, "%s %s: AdamW's moment moved (%g) on a Muon matrix", an, pp->name, mx);
            else if (!strstr(pp->name, "bias")) /* a bias may see a zero gradient */
                cr_expect(mx > 0, "%s %s: AdamW's moment did not move", an, pp->name);
        }
        double bmx = 0;
        for (int64_t i = 0; i < tr->muon.n; i++) bmx = fmax(bmx, fabs(bf[i]));
        cr_expect(bmx > 0, "%s: the momentum buffers did not move", an);
        cr_expect_eq(tr->muon.t, 1);
        fg_trainer_free(tr);
    }
    fg_source_free(s);
}

/* ---- determinism, resume, checkpoint ---- */

Test(muon, training_is_bit_identical_for_any_thread_count) {
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    c.model.n_embd = 64;
    c.model.n_head = 4;
    fg_tensor *ref = NULL, *ref_buf = NULL;
    for (int threads = 1; threads <= 3; threads += 2) {
        fg_pool_set_threads(threads);
        fg_trainer *t = trainer(&c, s);
        steps(t, 3, NULL);
        if (!ref) {
            ref = fg_clone(t->model->params_flat);
            ref_buf = fg_clone(t->muon.buf);
        } else {
            cr_expect(!memcmp(fg_data(t->model->params_flat), fg_data(ref), fg_nbytes(ref)),
                      "%d threads: the parameters differ from 1 thread's after 3 steps", threads);
            cr_expect(!memcmp(fg_data(t->muon.buf), fg_data(ref_buf), fg_nbytes(ref_buf)),
                      "%d threads: the momentum buffers differ from 1 thread's", threads);
        }
        fg_trainer_free(t);
    }
    fg_pool_set_threads(0);
    fg_release(ref);
    fg_release(ref_buf);
    fg_source_free(s);
}

static void resume_case(fg_gpt_arch arch) {
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    fg_gpt_arch_preset(&c.model, arch);
    const int N = 4;
    fg_trainer *full = trainer(&c, s);
    double lf[2 * N];
    steps(full, 2 * N, lf);
    fg_trainer *first = trainer(&c, s);
    steps(first, N, NULL);
    cr_assert_eq(fg_ckpt_save(tmpdir, first), FG_OK, "%s", fg_last_error());
    fg_trainer_free(first);
    fg_ckpt *ck = fg_ckpt_open(tmpdir, 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    const fg_muon_config *a = &in->train.muon, *b = &c.muon;
    cr_expect(in->train.optimizer == FG_OPTIM_MUON && a->lr == b->lr && a->momentum == b->momentum &&
                  a->nesterov == b->nesterov && a->ns_steps == b->ns_steps && a->weight_decay == b->weight_decay &&
                  a->adjust == b->adjust,
              "Muon's configuration did not survive the checkpoint");
    fg_trainer *second = trainer(&in->train, s);
    cr_assert_eq(fg_ckpt_restore(ck, second), FG_OK, "%s", fg_last_error());
    fg_ckpt_close(ck);
    cr_expect_eq(second->muon.t, N);
    double l2[N];
    steps(second, N, l2);
    for (int i = 0; i < N; i++)
        cr_expect(l2[i] == lf[N + i], "step %d after resuming: %.17g, uninterrupted %.17g", N + i + 1, l2[i],
                  lf[N + i]);
    cr_expect(!memcmp(fg_data(second->model->params_flat), fg_data(full->model->params_flat),
                      fg_nbytes(full->model->params_flat)),
              "final parameters differ");
    cr_expect(!memcmp(fg_data(second->muon.buf), fg_data(full->muon.buf), fg_nbytes(full->muon.buf)),
              "final momentum buffers differ");
    cr_expect(!memcmp(fg_data(second->opt.v), fg_data(full->opt.v), fg_nbytes(full->opt.v)),
              "final AdamW second moments differ");
    fg_trainer_free(full);
    fg_trainer_free(second);
    fg_source_free(s);
}

Test(muon, resume_reproduces_the_uninterrupted_run_bit_for_bit, .init = make_tmpdir, .fini = remove_tmpdir) {
    resume_case(FG_ARCH_GPT2);
}

Test(muon, resume_of_a_nanochat_model_reproduces_the_uninterrupted_run, .init = make_tmpdir, .fini = remove_tmpdir) {
    resume_case(FG_ARCH_NANOCHAT);
}

Test(muon, checkpoint_keeps_the_momentum_buffers_and_refuses_a_damaged_or_mismatched_state, .init = make_tmpdir,
     .fini = remove_tmpdir) {
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 2, NULL);
    cr_assert_eq(fg_ckpt_check_savable(tmpdir, tr), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save(tmpdir, tr), FG_OK, "%s", fg_last_error());
    char opath[400], cmd[600];
    snprintf(opath, sizeof opath, "%s/" FG_CKPT_OPTIM_FILE, tmpdir);
    /* the file holds the buffers as written, under their name */
    fg_st_file *f = fg_st_load(opath);
    cr_assert(f, "%s", fg_last_error());
    const fg_st_array *a = fg_st_find(f, "muon_momentum_buffer");
    cr_assert(a, "no muon_momentum_buffer in %s", opath);
    cr_expect_eq(a->shape[0], tr->muon.n);
    cr_expect_eq(a->nbytes, (size_t)fg_nbytes(tr->muon.buf));
    cr_expect(!memcmp(a->data, fg_data(tr->muon.buf), a->nbytes), "the stored buffers differ from the trainer's");
    cr_expect_str_eq(fg_st_metadata(f, "optimizer"), "muon");
    fg_st_close(f);
    /* into a fresh trainer: the same bytes */
    fg_ckpt *ck = fg_ckpt_open(tmpdir, 1);
    cr_assert(ck, "%s", fg_last_error());
    fg_trainer *back = trainer(&fg_ckpt_get_info(ck)->train, s);
    cr_assert_eq(fg_ckpt_restore(ck, back), FG_OK, "%s", fg_last_error());
    cr_expect(!memcmp(fg_data(back->muon.buf), fg_data(tr->muon.buf), fg_nbytes(tr->muon.buf)),
              "restored momentum buffers differ");
    cr_expect_eq(back->muon.t, tr->muon.t);
    /* an AdamW trainer does not take a Muon run's state */
    fg_train_config ca = c;
    ca.optimizer = FG_OPTIM_ADAMW;
    fg_trainer *adamw = trainer(&ca, s);
    cr_expect_neq(fg_ckpt_restore(ck, adamw), FG_OK, "an AdamW trainer restored a Muon checkpoint");
    cr_expect(strstr(fg_last_error(), "optimizer muon"), "message: %s", fg_last_error());
    fg_trainer_free(adamw);
    fg_ckpt_close(ck);
    fg_trainer_free(back);
    /* a NaN in the buffers is refused by name: rewrite the file with one (checksums made again by
     * flashgrad's own writer) */
    float *bf = fg_data(tr->muon.buf);
    const float keep = bf[3];
    bf[3] = NAN;
    cr_assert_eq(fg_ckpt_save(tmpdir, tr), FG_OK, "%s", fg_last_error());
    bf[3] = keep;
    snprintf(cmd, sizeof cmd, "%s/" FG_CKPT_OPTIM_PREV_FILE, tmpdir);
    unlink(cmd); /* the previous save's state pairs with the model too: keep only the damaged one */
    cr_expect_null(fg_ckpt_open(tmpdir, 1), "a NaN momentum buffer was accepted");
    cr_expect(strstr(fg_last_error(), "muon_momentum_buffer") && strstr(fg_last_error(), "index 3"), "message: %s",
              fg_last_error());
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(muon, bad_settings_zero_and_devices_are_refused_with_one_line) {
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    struct {
        const char *field, *says;
        fg_muon_config m;
    } bad[] = {
        {"lr", "muon-lr", c.muon}, {"momentum", "muon-momentum", c.muon}, {"ns_steps", "muon-ns-steps", c.muon},
        {"weight_decay", "muon-weight-decay", c.muon}, {"adjust", "adjustment", c.muon},
    };
    bad[0].m.lr = 0;
    bad[1].m.momentum = 1;
    bad[2].m.ns_steps = 0;
    bad[3].m.weight_decay = -1;
    bad[4].m.adjust = FG_MUON_ADJUST_COUNT;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_train_config b = c;
        b.muon = bad[i].m;
        cr_expect_eq(fg_train_config_check(&b), FG_ERR_ARG, "a bad %s was accepted", bad[i].field);
        cr_expect(strstr(fg_last_error(), bad[i].says) && !strchr(fg_last_error(), '\n'), "%s: message '%s'",
                  bad[i].field, fg_last_error());
        cr_expect_null(fg_trainer_create(&b, s), "a trainer with a bad %s", bad[i].field);
    }
    /* the same bad values are fine with AdamW, which does not read them */
    fg_train_config b = c;
    b.optimizer = FG_OPTIM_ADAMW;
    b.muon.lr = 0;
    cr_expect_eq(fg_train_config_check(&b), FG_OK, "%s", fg_last_error());
    /* ZeRO-1 does not shard Muon: refused on two ranks (a one-process --zero is a no-op) */
    fg_comm two = *fg_comm_single();
    two.size = 2;
    c.grad_accum = 2;
    cr_expect_null(fg_trainer_create_dist(&c, s, &two, 1), "--zero 1 with Muon was accepted");
    cr_expect(strstr(fg_last_error(), "--zero 1 does not shard Muon"), "message: %s", fg_last_error());
    fg_source_free(s);
}

Test(muon, a_step_after_warmup_takes_nothing_from_the_system) {
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    fg_trainer *tr = trainer(&c, s);
    steps(tr, 2, NULL);
    fg_alloc_stats mid = fg_alloc_get_stats(FG_CPU);
    steps(tr, 3, NULL);
    fg_alloc_stats after = fg_alloc_get_stats(FG_CPU);
    cr_expect_eq(after.system_allocs, mid.system_allocs, "system allocations grew from %llu to %llu in 3 steps",
                 (unsigned long long)mid.system_allocs, (unsigned long long)after.system_allocs);
    cr_expect_eq(after.current, mid.current, "live bytes between steps changed: %zu -> %zu", mid.current,
                 after.current);
    fg_trainer_free(tr);
    fg_source_free(s);
}

/* ---- against PyTorch ---- */

/* The interpreter with PyTorch: $FG_TORCH_PYTHON when set, else the system one. */
static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

Test(muon, steps_match_torch_optim_muon_and_adamw, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    const char *what = "PyTorch cross-check of Muon";
    const char *script = "tests/muon_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/muon_torch_check.py not found (run from the repo root)");
    if (access(torch_python(), X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    fg_source *s = addition_source();
    fg_train_config c = muon_config(s);
    c.model.dropout = 0; /* the reference has none */
    c.model.attn = FG_ATTN_NAIVE;
    c.muon.momentum = 0.9;
    c.opt.weight_decay = 0.5;
    c.opt.grad_clip = 0.5;
    c.opt.warmup = 1;
    const int K = 3;
    fg_trainer *tr = trainer(&c, s);
    char path[600];
    snprintf(path, sizeof path, "%s/s0", tmpdir);
    mkdir(path, 0777);
    cr_assert_eq(fg_ckpt_save(path, tr), FG_OK, "%s", fg_last_error());
    snprintf(path, sizeof path, "%s/lr.txt", tmpdir);
    FILE *lrf = fopen(path, "w");
    cr_assert(lrf);
    const int B = c.batch_size, T = tr->T;
    for (int k = 1; k <= K; k++) {
        for (int m = 0; m < 2; m++) {
            fg_source_batch(s, FG_SPLIT_TRAIN, B, T, c.seed, (uint64_t)(k - 1) * 2 + (uint64_t)m, tr->x, tr->y);
            double xb[64 * 16], yb[64 * 16];
            cr_assert(B * T <= 64 * 16);
            for (int i = 0; i < B * T; i++) xb[i] = tr->x[i], yb[i] = tr->y[i];
            snprintf(path, sizeof path, "%s/x%d_%d.npy", tmpdir, k, m);
            cr_assert_eq(fg_npy_save_raw(path, FG_F64, 2, (int64_t[]){B, T}, xb), FG_OK, "%s", fg_last_error());
            snprintf(path, sizeof path, "%s/y%d_%d.npy", tmpdir, k, m);
            cr_assert_eq(fg_npy_save_raw(path, FG_F64, 2, (int64_t[]){B, T}, yb), FG_OK, "%s", fg_last_error());
        }
        fg_step_stats st;
        cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
        fprintf(lrf, "%.17g %.17g %.17g\n", st.lr, fg_trainer_muon_lr(&c, tr->step - 1), st.loss);
        snprintf(path, sizeof path, "%s/s%d", tmpdir, k);
        mkdir(path, 0777);
        cr_assert_eq(fg_ckpt_save(path, tr), FG_OK, "%s", fg_last_error());
    }
    fclose(lrf);
    fg_trainer_free(tr);
    fg_source_free(s);
    char cmd[2000], log[16384];
    snprintf(cmd, sizeof cmd, "%s %s %s %d 2>&1", torch_python(), script, tmpdir, K);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    if (fgt_verbose()) fprintf(stderr, "[muon] %s", log);
    cr_expect_eq(st, 0, "muon_torch_check.py exited %d:\n%s", st, log);
}

/* ---- the command line ---- */

/* Runs `flashgrad <args>` in tmpdir; expects exit `code` and `phrase`, one line when an error. */
static void expect_cli(const char *args, int code, const char *phrase) {
    char cmd[2048], log[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", tmpdir, fgt_bin(), args);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, code, "`flashgrad %s` exited %d, expected %d:\n%s", args, st, code, log);
    cr_expect(strstr(log, phrase) != NULL, "`flashgrad %s`: output does not mention '%s':\n%s", args, phrase, log);
    if (code != 0) {
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`flashgrad %s`: an error should be one line, got %d:\n%s", args, lines, log);
    }
}

Test(muon, train_resumes_a_muon_run_to_the_same_state_and_refuses_bad_flags, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 300) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    const char *model = "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --eval-every 3 "
                        "--eval-iters 2 --eval-problems 10 --samples 0 --threads 1 --optimizer muon --muon-lr 0.03 "
                        "--muon-weight-decay 0.01 --muon-adjust-lr match_rms_adamw";
    char args[1024];
    snprintf(args, sizeof args, "train %s --steps 6 --out full", model);
    expect_cli(args, 0, "muon: the 2-d matrices inside the blocks, lr 0.03");
    snprintf(args, sizeof args, "train %s --steps 3 --out r", model);
    expect_cli(args, 0, "final");
    expect_cli("train --resume --steps 6 --out r --threads 1 --eval-problems 10 --samples 0", 0, "resuming from step 3");
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/full", tmpdir);
    snprintf(b, sizeof b, "%s/r", tmpdir);
    fgt_expect_same_run_state(a, b);
    /* refusals, one line each, exit 2 */
    expect_cli("train --task addition --steps 2 --out x --muon-lr 0.1", 2, "--muon-lr applies to --optimizer muon only");
    expect_cli("train --task addition --steps 2 --out x --optimizer sgd", 2, "--optimizer: unknown optimizer 'sgd'");
    expect_cli("train --task addition --steps 2 --out x --optimizer muon --muon-adjust-lr none", 2,
               "--muon-adjust-lr: unknown adjustment 'none'");
    expect_cli("train --task addition --steps 2 --out x --optimizer muon --muon-momentum 1", 2, "--muon-momentum");
    expect_cli("train --resume --steps 8 --out r --optimizer adamw", 2, "--optimizer adamw differs from the checkpoint's muon");
    expect_cli("bench train --steps 1 --warmup-steps 1 --optimizer muon --muon-ns-steps 0", 2, "--muon-ns-steps");
}
