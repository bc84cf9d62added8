/* common.c — shared test helpers (see common.h). */
#include "tests/common.h"

#include "ops/attention_kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "tensor/safetensors.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

static int env_on(const char *name) {
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}
int fgt_sanitize(void) { return env_on("FG_SANITIZE"); }
int fgt_verbose(void) { return env_on("FG_TEST_VERBOSE"); }

fg_tensor *fgt_ok(fg_tensor *t, const char *what) {
    cr_assert(t != NULL, "%s returned NULL: %s", what, fg_last_error());
    return t;
}

fg_tensor *fgt_uniform(fg_dtype dt, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed) {
    return fgt_ok(fg_rand_uniform(dt, FG_CPU, ndim, shape, lo, hi, seed, 0), "fg_rand_uniform");
}

fg_tensor *fgt_rand(fg_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
    return fgt_uniform(dt, ndim, shape, -1.0, 1.0, seed);
}

fg_tensor *fgt_leaf(fg_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
    fg_tensor *t = fgt_rand(dt, ndim, shape, seed);
    cr_assert_eq(fg_set_requires_grad(t, 1), FG_OK, "requires_grad: %s", fg_last_error());
    return t;
}

void fgt_poison_cache(fg_dtype dt, int ndim, const int64_t *shape, void *ptrs[FGT_POISON_BLOCKS]) {
    fg_tensor *t[FGT_POISON_BLOCKS];
    for (int i = 0; i < FGT_POISON_BLOCKS; i++) {
        t[i] = fgt_ok(fg_empty(dt, FG_CPU, ndim, shape), "fg_empty");
        for (int64_t k = 0; k < fg_numel(t[i]); k++) fg_set(t[i], k, NAN);
        ptrs[i] = fg_data(t[i]);
    }
    for (int i = 0; i < FGT_POISON_BLOCKS; i++) fg_release(t[i]);
}

int fgt_poisoned(const void *p, void *const ptrs[FGT_POISON_BLOCKS]) {
    for (int i = 0; i < FGT_POISON_BLOCKS; i++)
        if (p == ptrs[i]) return 1;
    return 0;
}

fg_tensor *fgt_from(fg_dtype dt, int ndim, const int64_t *shape, const double *values) {
    fg_tensor *t = fgt_ok(fg_empty(dt, FG_CPU, ndim, shape), "fg_empty");
    for (int64_t k = 0; k < fg_numel(t); k++) fg_set(t, k, values[k]);
    return t;
}

double *fgt_values(const fg_tensor *t) {
    int64_t n = fg_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    cr_assert(v != NULL, "out of memory");
    for (int64_t k = 0; k < n; k++) v[k] = fg_get(t, k);
    return v;
}

/* ---- comparison ---- */
static void cmp_one(fgt_cmp *c, int64_t k, double a, double e, double atol, double rtol) {
    int bad;
    if (isnan(a) || isnan(e)) {
        bad = !(isnan(a) && isnan(e));
    } else if (isinf(a) || isinf(e)) {
        bad = a != e;
    } else {
        double err = fabs(a - e);
        if (fabs(e) > c->ref_max) c->ref_max = fabs(e);
        if (!c->nonfinite && (err > c->max_abs || c->worst < 0)) {
            c->max_abs = err;
            c->worst = k;
            c->worst_actual = a;
            c->worst_expected = e;
        }
        if (e != 0 && err / fabs(e) > c->max_rel) c->max_rel = err / fabs(e);
        bad = !(err <= atol + rtol * fabs(e));
    }
    if (!(isinf(e) && a == e) && !(isfinite(a) && isfinite(e))) {
        if (!c->nonfinite) {
            c->worst = k;
            c->worst_actual = a;
            c->worst_expected = e;
        }
        c->nonfinite++;
        c->max_abs = INFINITY;
    }
    if (bad) {
        if (c->first_bad < 0) {
            c->first_bad = k;
            c->bad_actual = a;
            c->bad_expected = e;
        }
        c->n_bad++;
    }
    c->n++;
}

fgt_cmp fgt_compare_buf(const fg_tensor *actual, const double *expected, int64_t n, double atol, double rtol) {
    fgt_cmp c = {.first_bad = -1, .worst = -1};
    cr_assert_eq(fg_numel(actual), n, "compare: %lld elements against %lld expected", (long long)fg_numel(actual),
                 (long long)n);
    for (int64_t k = 0; k < n; k++) cmp_one(&c, k, fg_get(actual, k), expected[k], atol, rtol);
    return c;
}

fgt_cmp fgt_compare(const fg_tensor *actual, const fg_tensor *expected, double atol, double rtol) {
    fgt_cmp c = {.first_bad = -1, .worst = -1};
    cr_assert_eq(fg_numel(actual), fg_numel(expected), "compare: %lld elements against %lld expected",
                 (long long)fg_numel(actual), (long long)fg_numel(expected));
    for (int64_t k = 0; k < fg_numel(actual); k++) cmp_one(&c, k, fg_get(actual, k), fg_get(expected, k), atol, rtol);
    return c;
}

double fgt_rel_err(fgt_cmp c) { return c.max_abs / (c.ref_max > 0 ? c.ref_max : 1); }

static void assert_cmp(const fgt_cmp *c, double atol, double rtol, const char *what, const char *file, int line) {
    cr_assert(c->n_bad == 0,
              "%s:%d: %s: %lld of %lld elements differ (atol %g, rtol %g); max abs err %.3e, max rel err %.3e; "
              "first bad index %lld: actual %.17g, expected %.17g",
              file, line, what, (long long)c->n_bad, (long long)c->n, atol, rtol, c->max_abs, c->max_rel,
              (long long)c->first_bad, c->bad_actual, c->bad_expected);
}

void fgt_assert_close_at(const fg_tensor *actual, const fg_tensor *expected, double atol, double rtol, const char *what,
                         const char *file, int line) {
    cr_assert(actual != NULL && expected != NULL, "%s:%d: %s: NULL tensor (%s)", file, line, what, fg_last_error());
    fgt_cmp c = fgt_compare(actual, expected, atol, rtol);
    assert_cmp(&c, atol, rtol, what, file, line);
}

void fgt_assert_close_buf_at(const fg_tensor *actual, const double *expected, int64_t n, double atol, double rtol,
                             const char *what, const char *file, int line) {
    cr_assert(actual != NULL, "%s:%d: %s: NULL tensor (%s)", file, line, what, fg_last_error());
    fgt_cmp c = fgt_compare_buf(actual, expected, n, atol, rtol);
    assert_cmp(&c, atol, rtol, what, file, line);
}

/* ---- gradcheck ---- */
fg_gradcheck_report fgt_gradcheck_at(const char *what, fg_gradcheck_fn fn, fg_tensor *const *inputs, int n, void *user,
                                     double atol, double rtol, const char *file, int line) {
    fg_gradcheck_opts opts = {.atol = atol, .rtol = rtol, .seed = 7};
    fg_gradcheck_report rep;
    fg_status st = fg_gradcheck(fn, inputs, n, user, &opts, &rep);
    cr_assert_eq(st, FG_OK, "%s:%d: gradcheck %s did not run: %s", file, line, what, fg_last_error());
    if (fgt_verbose())
        fprintf(stderr, "gradcheck %s: max_abs %.3e max_rel %.3e checked %lld\n", what, rep.max_abs_err,
                rep.max_rel_err, (long long)rep.checked);
    cr_assert(rep.passed,
              "%s:%d: gradcheck %s failed: worst element is input %d index %lld: analytic %.12g, numeric %.12g; "
              "max abs err %.3e, max rel err %.3e over %lld elements",
              file, line, what, rep.worst_input, (long long)rep.worst_index, rep.analytic, rep.numeric, rep.max_abs_err,
              rep.max_rel_err, (long long)rep.checked);
    cr_assert(rep.checked > 0, "%s:%d: gradcheck %s checked nothing", file, line, what);
    return rep;
}

size_t fgt_alloc_current(void) { return fg_alloc_get_stats(FG_CPU).current; }

/* ---- attention ---- */
fg_tensor *fgt_randn4(fg_dtype dt, int64_t B, int64_t H, int64_t N, int64_t d, double std, uint64_t seed,
                      uint64_t stream) {
    int64_t shape[4] = {B, H, N, d};
    fg_tensor *t = fg_rand_normal(dt, FG_CPU, 4, shape, 0.0, std, seed, stream);
    cr_assert(t, "fg_rand_normal: %s", fg_last_error());
    return t;
}

fgt_attn_run fgt_run_attention(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_tensor *dout, const fg_attn_opts *opts) {
    fgt_attn_run r = {0};
    fg_tensor *lq = fg_clone(q), *lk = fg_clone(k), *lv = fg_clone(v);
    cr_assert(lq && lk && lv, "%s", fg_last_error());
    fg_set_requires_grad(lq, dout != NULL);
    fg_set_requires_grad(lk, dout != NULL);
    fg_set_requires_grad(lv, dout != NULL);
    r.o = fg_attention(lq, lk, lv, opts, &r.lse);
    cr_assert(r.o, "fg_attention(%s): %s", fg_attn_impl_name(opts->impl), fg_last_error());
    if (dout) {
        cr_assert_eq(fg_backward(r.o, dout), FG_OK, "backward(%s): %s", fg_attn_impl_name(opts->impl), fg_last_error());
        r.dq = fg_retain(lq->grad);
        r.dk = fg_retain(lk->grad);
        r.dv = fg_retain(lv->grad);
    }
    fg_release(lq);
    fg_release(lk);
    fg_release(lv);
    return r;
}

void fgt_attn_run_free(fgt_attn_run *r) {
    fg_release(r->o);
    fg_release(r->lse);
    fg_release(r->dq);
    fg_release(r->dk);
    fg_release(r->dv);
    memset(r, 0, sizeof *r);
}

/* ---- temporary directories ---- */
void fgt_make_tmpdir(char *dir, size_t n, const char *tmpl) {
    snprintf(dir, n, "%s", tmpl);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

void fgt_remove_tmpdir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

const char *fgt_bin(void) {
    const char *b = getenv("FG_BIN");
    return (b && *b) ? b : "build/flashgrad";
}

int fgt_run_cmd(const char *cmd, char *log, size_t logn) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t used = 0;
    char buf[512];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        if (log && used + 1 < logn) {
            size_t take = got < logn - 1 - used ? got : logn - 1 - used;
            memcpy(log + used, buf, take);
            used += take;
        }
    }
    if (log) log[used] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

long long fgt_ckpt_step(const char *run_dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/optimizer.safetensors", run_dir);
    fg_st_file *f = fg_st_load(p);
    cr_assert(f, "%s: %s", p, fg_last_error());
    int64_t step = -1;
    cr_assert_eq(fg_st_read(f, "step", FG_ST_I64, 1, (int64_t[]){1}, &step), FG_OK, "%s", fg_last_error());
    fg_st_close(f);
    return (long long)step;
}

void fgt_expect_same_run_state(const char *a, const char *b) {
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int fi = 0; fi < 2; fi++) {
        char pa[1024], pb[1024];
        snprintf(pa, sizeof pa, "%s/%s", a, files[fi]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[fi]);
        fg_st_file *x = fg_st_load(pa), *y = fg_st_load(pb);
        cr_assert(x && y, "cannot load %s or %s: %s", pa, pb, fg_last_error());
        cr_assert_eq(fg_st_count(x), fg_st_count(y), "%s and %s hold different tensor sets", pa, pb);
        for (int i = 0; i < fg_st_count(x); i++) {
            const fg_st_array *ax = fg_st_at(x, i), *ay = fg_st_find(y, ax->name);
            cr_assert(ay, "%s has no %s", pb, ax->name);
            cr_expect(ax->nbytes == ay->nbytes && !memcmp(ax->data, ay->data, ax->nbytes),
                      "%s differs between %s and %s", ax->name, a, b);
        }
        fg_st_close(x);
        fg_st_close(y);
    }
}

/* ---- tiny models ---- */
fg_gpt_config fgt_tiny_gpt_config(fg_dtype dt, fg_attn_impl impl, int n_embd, int block_size, int vocab_size,
                                  double dropout) {
    fg_gpt_config c = fg_gpt_default_config();
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = n_embd;
    c.block_size = block_size;
    c.vocab_size = vocab_size;
    c.dropout = dropout;
    c.attn = impl;
    c.dtype = dt;
    return c;
}

fg_train_config fgt_tiny_train_config(const fg_source *src, int T, int batch_size, int steps, int eval_iters,
                                      uint64_t seed) {
    fg_train_config c = {0};
    c.model = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, T, fg_source_vocab_size(src), 0.1);
    c.batch_size = batch_size;
    c.grad_accum = 2;
    c.steps = steps;
    c.eval_every = 0;
    c.eval_iters = eval_iters;
    c.seed = seed;
    c.opt = (fg_adamw_config){.lr = 3e-3,
                              .min_lr = 3e-4,
                              .warmup = steps / 4,
                              .decay_steps = steps,
                              .beta1 = 0.9,
                              .beta2 = 0.99,
                              .eps = 1e-8,
                              .weight_decay = 0.1,
                              .grad_clip = 1.0};
    return c;
}

/* ---- Python cross-checks ---- */
void fgt_skip(const char *what, const char *why) {
    fprintf(stderr, "[skip] %s: %s\n", what, why);
    cr_skip_test("%s: %s", what, why);
}

const char *fgt_python_missing(const char *modules) {
    static char why[256];
    if (access(FGT_PYTHON, X_OK) != 0) return "no " FGT_PYTHON;
    const char *p = modules ? modules : "";
    while (*p) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, " ");
        if (len == 0) break;
        char cmd[256];
        snprintf(cmd, sizeof cmd, FGT_PYTHON " -c 'import %.*s' >/dev/null 2>&1", (int)len, p);
        if (system(cmd) != 0) {
            snprintf(why, sizeof why, FGT_PYTHON " cannot import %.*s", (int)len, p);
            return why;
        }
        p += len;
    }
    return NULL;
}

void fgt_python_require(const char *what, const char *modules) {
    const char *why = fgt_python_missing(modules);
    if (why) fgt_skip(what, why);
}

int fgt_python_run(const char *env, const char *script, const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s" FGT_PYTHON " %s %s 2>&1", env ? env : "", env ? " " : "", script,
             args ? args : "");
    return fgt_run_cmd(cmd, out, n);
}

/* ---- pipes ---- */
int fgt_pipe_with(const void *data, size_t n, char *path, size_t pn) {
    int fds[2];
    cr_assert(n <= 65536, "fgt_pipe_with: %zu bytes do not fit a pipe's buffer", n);
    cr_assert_eq(pipe(fds), 0, "pipe: %s", strerror(errno));
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fds[1], p, n);
        cr_assert(w > 0, "write to a pipe: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    close(fds[1]);
    snprintf(path, pn, "/dev/fd/%d", fds[0]);
    return fds[0];
}

/* ---- flash attention: bit identity across SIMD levels and thread counts ---- */

enum { FLASH_OUTS = 6 }; /* O, lse, lse_lo, dQ, dK, dV */
static const char *const flash_out_name[FLASH_OUTS] = {"O", "lse", "lse_lo", "dQ", "dK", "dV"};

/* the outputs of one forward + backward in dt; out[2] (lse_lo) only in float32 */
static void flash_once(fg_dtype dt, const fg_attn_problem *pr, void *const in[4], void *out[FLASH_OUTS],
                       const size_t len[FLASH_OUTS]) {
    const size_t es = fg_dtype_size(dt);
    for (int t = 0; t < FLASH_OUTS; t++) out[t] = len[t] ? calloc(len[t], es) : NULL;
    fg_status st;
    if (dt == FG_F32) {
        const float *q = in[0], *k = in[1], *v = in[2], *dout = in[3];
        st = fg_attn_flash_forward_lo_f32(out[0], out[1], out[2], q, k, v, pr);
        if (st == FG_OK)
            st = fg_attn_flash_backward_lo_f32(out[3], out[4], out[5], dout, q, k, v, out[0], out[1], out[2], pr);
    } else {
        const double *q = in[0], *k = in[1], *v = in[2], *dout = in[3];
        st = fg_attn_flash_forward_f64(out[0], out[1], q, k, v, pr);
        if (st == FG_OK) st = fg_attn_flash_backward_f64(out[3], out[4], out[5], dout, q, k, v, out[0], out[1], pr);
    }
    cr_assert_eq(st, FG_OK, "%s", fg_last_error());
}

static double elem(fg_dtype dt, const void *p, size_t i) {
    return dt == FG_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

void fgt_flash_bit_identity(fg_dtype dt, const fgt_flash_case *cases, size_t n, uint64_t seed) {
    const fg_simd_level best = fg_simd_detect();
    const size_t es = fg_dtype_size(dt);
    for (size_t ci = 0; ci < n; ci++) {
        const fgt_flash_case *c = &cases[ci];
        fg_attn_opts o = fg_attn_defaults();
        o.causal = c->causal;
        o.dropout_p = c->p;
        o.seed = 99;
        o.block_q = c->bq;
        o.block_k = c->bk;
        o.variant.n_kv_heads = c->Hkv;
        o.variant.window = c->window;
        o.variant.window_left = 20;
        o.variant.window_right = 3;
        o.variant.alibi = c->alibi;
        o.variant.softcap = c->softcap;
        fg_attn_problem pr;
        cr_assert_eq(fg_attn_problem_init(&pr, c->B, c->H, c->Nq, c->Nk, c->d, &o), FG_OK, "%s", fg_last_error());
        const size_t nq = (size_t)(c->B * c->H * c->Nq * c->d), nk = (size_t)(c->B * c->Hkv * c->Nk * c->d);
        const size_t nl = (size_t)(c->B * c->H * c->Nq);
        const size_t len[FLASH_OUTS] = {nq, nl, dt == FG_F32 ? nl : 0, nq, nk, nk};
        /* q, k in (-2, 2), v and dout in (-1, 1) */
        const size_t in_len[4] = {nq, nk, nk, nq};
        const double in_scale[4] = {2, 2, 1, 1};
        void *in[4];
        fg_tensor *src[4];
        for (int t = 0; t < 4; t++) {
            src[t] = fgt_uniform(dt, FGT_DIMS((int64_t)in_len[t]), -in_scale[t], in_scale[t], seed + 16 * ci + t);
            in[t] = fg_data(src[t]);
        }
        fg_simd_set(FG_SIMD_SCALAR);
        fg_pool_set_threads(1);
        void *ref[FLASH_OUTS];
        flash_once(dt, &pr, in, ref, len);
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++)
            for (int threads = 1; threads <= 3; threads++) {
                if (lv == FG_SIMD_SCALAR && threads == 1) continue;
                fg_simd_set((fg_simd_level)lv);
                fg_pool_set_threads(threads);
                void *r[FLASH_OUTS];
                flash_once(dt, &pr, in, r, len);
                for (int t = 0; t < FLASH_OUTS; t++) {
                    int64_t at = -1;
                    for (size_t i = 0; i < len[t] && at < 0; i++)
                        if (memcmp((char *)r[t] + i * es, (char *)ref[t] + i * es, es)) at = (int64_t)i;
                    cr_expect(at < 0, "%s, %s, %s, %d threads: %s differs from the 1-thread scalar run at %lld (%a vs %a)",
                              fg_dtype_name(dt), c->name, fg_simd_name((fg_simd_level)lv), threads, flash_out_name[t],
                              (long long)at, at < 0 ? 0.0 : elem(dt, r[t], (size_t)at),
                              at < 0 ? 0.0 : elem(dt, ref[t], (size_t)at));
                }
                for (int t = 0; t < FLASH_OUTS; t++) free(r[t]);
            }
        for (int t = 0; t < FLASH_OUTS; t++) free(ref[t]);
        for (int t = 0; t < 4; t++) fg_release(src[t]);
    }
    fg_simd_set(best);
    fg_pool_set_threads(0);
}

/* ---- the register-blocked tile products ---- */

static uint64_t gemm_lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void set_elem(fg_dtype dt, void *p, size_t i, double v) {
    if (dt == FG_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* C = alpha A B (mode 0), C += alpha A B (1), C = rs ∘ C + alpha A B (2) in dt */
static void small_gemm(fg_dtype dt, int64_t m, int64_t n, int64_t k, double alpha, const void *A, int64_t rsa,
                       int64_t csa, const void *B, int64_t ldb, void *C, int64_t ldc, const void *rs, int mode) {
    if (dt == FG_F32)
        fg_sgemm_small(m, n, k, (float)alpha, A, rsa, csa, B, ldb, C, ldc, mode == 2 ? rs : NULL, mode != 0);
    else
        fg_dgemm_small(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, mode == 2 ? rs : NULL, mode != 0);
}

void fgt_small_gemm_check(fg_dtype dt, int n_cases, int64_t max_m, int64_t max_n, uint64_t seed) {
    const fg_simd_level best = fg_simd_detect();
    const size_t es = fg_dtype_size(dt);
    const long double eps = dt == FG_F32 ? FLT_EPSILON : DBL_EPSILON;
    for (int cs = 0; cs < n_cases; cs++) {
        /* every fourth case ends in 1 to 4 columns past a multiple of 16 (the AVX-512 form's column
         * strips), every fifth is deeper than four 16-deep chunks */
        const int64_t m = (int64_t)(gemm_lcg(&seed) % (uint64_t)max_m),
                      n0 = (int64_t)(gemm_lcg(&seed) % (uint64_t)max_n) + (cs % 7 == 0 ? 64 : 0),
                      n = cs % 4 == 1 ? n0 / 16 * 16 + 1 + n0 % 4 : n0,
                      k = (int64_t)(gemm_lcg(&seed) % (cs % 5 == 2 ? 150 : 70));
        const int transA = (int)(gemm_lcg(&seed) & 1), mode = (int)(gemm_lcg(&seed) % 3);
        const double alpha = cs % 3 == 0 ? 1.0 : (dt == FG_F32 ? (double)0.37f : 0.37);
        const int64_t lda = (transA ? m : k) + 3, ldb = n + 5, ldc = n + 7; /* padding that must stay untouched */
        const int64_t rsa = transA ? 1 : lda, csa = transA ? lda : 1;
        const size_t na = (size_t)((transA ? k : m) * lda + 1), nb = (size_t)(k * ldb + 1), nc = (size_t)(m * ldc + 1);
        void *A = malloc(na * es), *Bm = malloc(nb * es), *C0 = malloc(nc * es), *C = malloc(nc * es),
             *Cref = malloc(nc * es), *rs = malloc((size_t)(m + 1) * es);
        cr_assert(A && Bm && C0 && C && Cref && rs);
        void *fill[4] = {A, Bm, C0, rs};
        const size_t fill_n[4] = {na, nb, nc, (size_t)(m + 1)};
        for (int f = 0; f < 4; f++)
            for (size_t i = 0; i < fill_n[f]; i++)
                set_elem(dt, fill[f], i, (double)gemm_lcg(&seed) / 2147483648.0 * 2.0 - 1.0);
        /* the plain C level is the bit-exact reference for the others ... */
        fg_simd_set(FG_SIMD_SCALAR);
        memcpy(Cref, C0, nc * es);
        small_gemm(dt, m, n, k, alpha, A, rsa, csa, Bm, ldb, Cref, ldc, rs, mode);
        /* ... and a long double triple loop checks it */
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < ldc; c++) {
                const size_t at = (size_t)(r * ldc + c);
                const double got = elem(dt, Cref, at);
                if (c >= n) {
                    cr_assert(memcmp((char *)Cref + at * es, (char *)C0 + at * es, es) == 0,
                              "%s case %d: column %lld of row %lld (past n = %lld) was written", fg_dtype_name(dt), cs,
                              (long long)c, (long long)r, (long long)n);
                    continue;
                }
                long double t = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    const long double x = (long double)elem(dt, A, (size_t)(r * rsa + p * csa)) *
                                          elem(dt, Bm, (size_t)(p * ldb + c));
                    t += x;
                    mag += fabsl(x);
                }
                const long double old = elem(dt, C0, at), rsr = elem(dt, rs, (size_t)r);
                const long double want = mode == 0 ? alpha * t : mode == 1 ? old + alpha * t : rsr * old + alpha * t;
                const long double bound = (long double)(k + 3) * eps * (fabsl(alpha) * mag + fabsl(old) + 1e-300L);
                cr_assert(fabsl(got - want) <= bound,
                          "%s case %d (m %lld n %lld k %lld transA %d mode %d): C[%lld][%lld] = %.17g, want %.17Lg",
                          fg_dtype_name(dt), cs, (long long)m, (long long)n, (long long)k, transA, mode, (long long)r,
                          (long long)c, got, want);
            }
        for (int lv = FG_SIMD_AVX2; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            memcpy(C, C0, nc * es);
            small_gemm(dt, m, n, k, alpha, A, rsa, csa, Bm, ldb, C, ldc, rs, mode);
            for (size_t i = 0; i < nc; i++)
                cr_assert(memcmp((char *)C + i * es, (char *)Cref + i * es, es) == 0,
                          "%s case %d (m %lld n %lld k %lld transA %d mode %d): %s differs from scalar at %zu (row "
                          "%lld col %lld): %a vs %a",
                          fg_dtype_name(dt), cs, (long long)m, (long long)n, (long long)k, transA, mode,
                          fg_simd_name((fg_simd_level)lv), i, (long long)(i / (size_t)ldc),
                          (long long)(i % (size_t)ldc), elem(dt, C, i), elem(dt, Cref, i));
        }
        free(A);
        free(Bm);
        free(C0);
        free(C);
        free(Cref);
        free(rs);
    }
    fg_simd_set(best);
}
