/* cmd_gradcheck.c — `flashgrad gradcheck attention`: check attention's gradients on random inputs.
 *
 *   flashgrad gradcheck attention [--b B --h H --nq N --nk M --d D] [--causal] [--dropout P] [--seed S]
 *                                 [--block-q N --block-k N] [--gqa HKV] [--window L,R] [--alibi]
 *                                 [--softcap C] [--custom NAME] [--device cpu|cuda]
 *
 * Three checks, one table (fg_attn_gradcheck, ops/attention.h):
 *   1. naive float64 against central finite differences (fg_gradcheck), dQ, dK and dV one at a time;
 *      an element passes when |analytic − numeric| <= 1e-7 + 1e-5 |numeric|;
 *   2. flash float64 against naive float64: O, dQ, dK, dV to 1e-12 relative (max|a − b| / max|b|);
 *   3. flash float32 against naive float64 on the same float32-rounded inputs, FlashAttention's rule:
 *      the flash error is at most twice the naive float32 error + 2^-20 max(1, max|ref|) (see ops/attention.h);
 *      skipped, with a line that says why, when an option does not fit float32 (--softcap 1e300).
 * Every variant flag combines with the others and with --causal and --dropout. --custom NAME picks
 * a variant registered with fg_attn_register_custom (a program that registers its own can call
 * fg_cmd_gradcheck).
 *
 * --device cuda checks the GPU kernels against the CPU, on the same inputs (made on the host):
 *   1. GPU naive float64 against central finite differences of the GPU naive forward (same rule,
 *      eps and weights as check 1);
 *   2. GPU flash float64 and GPU naive float64 against CPU naive float64: O, dQ, dK, dV to 1e-12;
 *   3. GPU flash float32 against CPU naive float64 on the float32-rounded inputs, with check 3's
 *      rule where the baseline is GPU naive float32 (the naive kernel of the same device).
 * The GPU picks its own tiles (64 or 32 rows), so flash spans several tiles only for --nq/--nk
 * above them. Exit status: 0 when everything passes, 1 when a tolerance is exceeded (or, in a CUDA
 * build, no GPU is usable), 2 on a usage error (also --device cuda in a build without CUDA, and
 * --custom with --device cuda).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/attention.h"
#include "cli/attn_flags.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

static const char gradcheck_usage[] =
    "usage: flashgrad gradcheck attention [--b B --h H --nq N --nk M --d D] [--causal] [--dropout P] [--seed S]\n"
    "                                     [--block-q N --block-k N] [--gqa HKV] [--window L,R] [--alibi]\n"
    "                                     [--softcap C] [--custom NAME]\n"
    "\n"
    "  Random inputs (normal, seed S). Checks naive attention against finite differences (float64),\n"
    "  flash against naive (float64, 1e-12 relative) and flash float32 against a float64 reference\n"
    "  (error at most twice naive float32's). Prints a table; exits 1 if a tolerance is exceeded.\n"
    "\n"
    "  --b, --h             batch and heads (default 2, 2; 1..64)\n"
    "  --nq, --nk           queries and keys (default 8, 11; 0..512)\n"
    "  --d                  head dim (default 4; 1..256)\n"
    "  --causal             bottom-right causal mask\n"
    "  --dropout P          0 <= P < 1 (default 0)\n"
    "  --seed S             inputs and dropout seed (default 0)\n"
    "  --block-q, --block-k flash tile sizes (default 4 and 3, so that tiles do not divide N)\n"
    "  --device cpu|cuda    cuda: GPU naive f64 vs finite differences, GPU flash and naive f64 vs CPU naive f64\n"
    "                       (1e-12), GPU flash f32 vs CPU naive f64 (at most twice GPU naive f32's error);\n"
    "                       needs a CUDA build; the GPU uses its own tiles (64/32 rows)\n"
    "variants (any combination):\n";

#define CMD "flashgrad gradcheck"

static int parse_count(const char *flag, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    if (fg_parse_int(val, out) || *out < lo || *out > hi) {
        fprintf(stderr, CMD ": %s must be an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo, (long long)hi,
                val);
        return 0;
    }
    return 1;
}

/* ---- --device: the GPU kernels against the CPU ---- */

typedef struct {
    char check[48];
    const char *tensor;
    double max_abs, max_rel, limit;
    char limit_text[48];
    int passed; /* -1: information only */
} dev_row;

typedef struct {
    dev_row rows[24];
    int n, passed;
    const char *fd_tensor; /* the worst finite-difference element, when check 1 failed */
    int64_t fd_index;
    double fd_analytic, fd_numeric;
} dev_report;

static void dev_add(dev_report *r, const char *check, const char *tensor, double max_abs, double max_rel, double limit,
                    const char *limit_text, int passed) {
    if (r->n >= (int)(sizeof r->rows / sizeof r->rows[0])) return;
    dev_row *w = &r->rows[r->n++];
    snprintf(w->check, sizeof w->check, "%s", check);
    w->tensor = tensor;
    w->max_abs = max_abs;
    w->max_rel = max_rel;
    w->limit = limit;
    snprintf(w->limit_text, sizeof w->limit_text, "%s", limit_text);
    w->passed = passed;
    if (passed == 0) r->passed = 0;
}

/* max |a − b| and max |b| over two float64 CPU tensors of the same size (NaN counts as inf). */
static void dev_err(const fg_tensor *a, const fg_tensor *b, double *max_abs, double *ref_max) {
    *max_abs = 0;
    *ref_max = 0;
    for (int64_t i = 0; i < fg_numel(b); i++) {
        double x = fg_get(a, i), y = fg_get(b, i);
        if (isinf(y) && x == y) continue;
        double e = fabs(x - y);
        if (!(e <= *max_abs)) *max_abs = isnan(e) ? INFINITY : e;
        if (fabs(y) > *ref_max) *ref_max = fabs(y);
    }
}

/* O, dQ, dK, dV (as float64 CPU tensors, into res[4]) of fg_attention on copies of the float64 CPU
 * tensors q, k, v moved to dev in dtype dt, with dout as O's gradient. 0 on error (message set). */
static int dev_run(fg_device dev, fg_dtype dt, fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_tensor *dout,
                   const fg_attn_opts *o, fg_tensor *res[4]) {
    memset(res, 0, 4 * sizeof *res);
    fg_tensor *l[3] = {fg_to(q, dev, dt), fg_to(k, dev, dt), fg_to(v, dev, dt)};
    fg_tensor *dd = fg_to(dout, dev, dt), *out = NULL;
    int ok = l[0] && l[1] && l[2] && dd;
    for (int i = 0; ok && i < 3; i++) fg_set_requires_grad(l[i], 1);
    if (ok) ok = (out = fg_attention(l[0], l[1], l[2], o, NULL)) != NULL;
    if (ok) ok = fg_backward(out, dd) == FG_OK;
    if (ok) ok = (res[0] = fg_to(out, FG_CPU, FG_F64)) != NULL;
    for (int i = 0; ok && i < 3; i++)
        ok = (res[1 + i] = l[i]->grad ? fg_to(l[i]->grad, FG_CPU, FG_F64)
                                      : fg_zeros(FG_F64, FG_CPU, l[i]->ndim, l[i]->shape)) != NULL;
    fg_release(out);
    fg_release(dd);
    for (int i = 0; i < 3; i++) fg_release(l[i]);
    if (!ok)
        for (int i = 0; i < 4; i++) {
            fg_release(res[i]);
            res[i] = NULL;
        }
    return ok;
}

/* loss = Σ R · attention(in) with in[w] replaced by x, computed on dev in float64, no graph. */
static int dev_loss(fg_device dev, fg_tensor *const dev_in[3], int w, const fg_tensor *x, const fg_tensor *R,
                    const fg_attn_opts *o, double *loss) {
    fg_tensor *xd = fg_to(x, dev, FG_F64);
    if (!xd) return 0;
    fg_tensor *in[3] = {dev_in[0], dev_in[1], dev_in[2]};
    in[w] = xd;
    fg_no_grad_enter();
    fg_tensor *out = fg_attention(in[0], in[1], in[2], o, NULL);
    fg_no_grad_exit();
    fg_tensor *oh = out ? fg_to(out, FG_CPU, FG_F64) : NULL;
    fg_release(out);
    fg_release(xd);
    if (!oh) return 0;
    double s = 0;
    for (int64_t e = 0; e < fg_numel(oh); e++) s += fg_get(R, e) * fg_get(oh, e);
    fg_release(oh);
    *loss = s;
    return 1;
}

/* f32: 0 skips check 3 (an option float32 cannot hold) */
static int gradcheck_attention_device(fg_device dev, const fg_attn_opts *base, int64_t B, int64_t H, int64_t Nq,
                                      int64_t Nk, int64_t d, uint64_t seed, int f32, dev_report *rep) {
    static const char *names[4] = {"O", "dQ", "dK", "dV"};
    const char *dn = fg_device_name(dev);
    const int64_t Hkv = base->variant.n_kv_heads ? base->variant.n_kv_heads : H;
    const int64_t qs[4] = {B, H, Nq, d}, ks[4] = {B, Hkv, Nk, d};
    memset(rep, 0, sizeof *rep);
    rep->passed = 1;
    fg_attn_opts on = *base, of = *base;
    on.impl = FG_ATTN_NAIVE;
    of.impl = FG_ATTN_FLASH;
    /* the inputs of fg_attn_gradcheck (ops/attention_check.c): normal, Philox streams 1..4 */
    fg_tensor *q = fg_rand_normal(FG_F64, FG_CPU, 4, qs, 0, 1, seed, 1);
    fg_tensor *k = q ? fg_rand_normal(FG_F64, FG_CPU, 4, ks, 0, 1, seed, 2) : NULL;
    fg_tensor *v = k ? fg_rand_normal(FG_F64, FG_CPU, 4, ks, 0, 1, seed, 3) : NULL;
    fg_tensor *dout = v ? fg_rand_normal(FG_F64, FG_CPU, 4, qs, 0, 1, seed, 4) : NULL;
    fg_tensor *R = dout ? fg_rand_uniform(FG_F64, FG_CPU, 4, qs, -1.0, 1.0, seed + 17, 0x67726164ULL) : NULL;
    fg_tensor *cpu_ref[4] = {0}, *dnaive[4] = {0}, *dflash[4] = {0}, *ana[4] = {0};
    fg_tensor *ref32[4] = {0}, *dn32[4] = {0}, *df32[4] = {0};
    fg_tensor *r32[4] = {0}, *r64[4] = {0}; /* q, k, v, dout rounded to float32 (as float32, as float64) */
    fg_tensor *dev_in[3] = {0};
    int ok = R != NULL;

    /* 1. GPU naive float64 against finite differences of the GPU naive forward */
    ok = ok && dev_run(dev, FG_F64, q, k, v, R, &on, ana);
    for (int i = 0; ok && i < 3; i++) ok = (dev_in[i] = fg_to(i == 0 ? q : i == 1 ? k : v, dev, FG_F64)) != NULL;
    fg_tensor *in[3] = {q, k, v};
    const double eps = 1e-6, atol = 1e-7, rtol = 1e-5;
    for (int w = 0; ok && w < 3; w++) {
        fg_tensor *x = fg_clone(in[w]);
        ok = x != NULL;
        double max_abs = 0, max_rel = 0, worst = -1;
        int passed = 1;
        for (int64_t e = 0; ok && e < fg_numel(x); e++) {
            const double x0 = fg_get(x, e);
            double lp = 0, lm = 0;
            fg_set(x, e, x0 + eps);
            ok = dev_loss(dev, dev_in, w, x, R, &on, &lp);
            fg_set(x, e, x0 - eps);
            ok = ok && dev_loss(dev, dev_in, w, x, R, &on, &lm);
            fg_set(x, e, x0);
            const double num = (lp - lm) / (2 * eps), a = fg_get(ana[1 + w], e), err = fabs(a - num);
            const double score = isnan(err) ? INFINITY : err / (atol + rtol * fabs(num));
            if (!isnan(err) && err > max_abs) max_abs = err;
            if (fabs(num) > atol && err / fabs(num) > max_rel) max_rel = err / fabs(num);
            if (!(score <= 1)) passed = 0;
            if (score > worst) {
                worst = score;
                if (!passed && !rep->fd_tensor) {
                    rep->fd_index = e;
                    rep->fd_analytic = a;
                    rep->fd_numeric = num;
                }
            }
        }
        fg_release(x);
        if (!ok) break;
        char check[48];
        snprintf(check, sizeof check, "%s naive f64 vs finite diff", dn);
        dev_add(rep, check, names[1 + w], max_abs, max_rel, 0, "|a-n| <= 1e-7 + 1e-5|n| (eps 1e-6)", passed);
        if (!passed && !rep->fd_tensor) rep->fd_tensor = names[1 + w];
    }

    /* 2. GPU flash and naive float64 against CPU naive float64 */
    ok = ok && dev_run(FG_CPU, FG_F64, q, k, v, dout, &on, cpu_ref) &&
         dev_run(dev, FG_F64, q, k, v, dout, &of, dflash) && dev_run(dev, FG_F64, q, k, v, dout, &on, dnaive);
    for (int pass = 0; ok && pass < 2; pass++) {
        char check[48];
        snprintf(check, sizeof check, "%s %s f64 vs cpu naive f64", dn, pass == 0 ? "flash" : "naive");
        for (int t = 0; t < 4; t++) {
            double e, m;
            dev_err(pass == 0 ? dflash[t] : dnaive[t], cpu_ref[t], &e, &m);
            const double rel = e / (m > 0 ? m : 1);
            dev_add(rep, check, names[t], e, rel, 1e-12, "rel <= 1e-12", rel <= 1e-12);
        }
    }

    /* 3. float32: GPU flash and naive against CPU naive float64 on the float32-rounded inputs */
    fg_tensor *in4[4] = {q, k, v, dout};
    for (int i = 0; ok && f32 && i < 4; i++)
        ok = (r32[i] = fg_to(in4[i], FG_CPU, FG_F32)) && (r64[i] = fg_to(r32[i], FG_CPU, FG_F64));
    ok = ok && (!f32 || (dev_run(FG_CPU, FG_F64, r64[0], r64[1], r64[2], r64[3], &on, ref32) &&
                         dev_run(dev, FG_F32, r64[0], r64[1], r64[2], r64[3], &on, dn32) &&
                         dev_run(dev, FG_F32, r64[0], r64[1], r64[2], r64[3], &of, df32)));
    if (ok && f32) {
        /* the floor of ops/attention_check.c: 2^-20 max(1, max|ref|); where naive float32 is exact,
         * 2^-19 · the largest reference value of O, dQ, dK, dV */
        double gscale = 1;
        for (int t = 0; t < 4; t++) {
            double e, m;
            dev_err(ref32[t], ref32[t], &e, &m);
            if (m > gscale) gscale = m;
        }
        char cf[48], cn[48];
        snprintf(cf, sizeof cf, "%s flash f32 vs cpu naive f64", dn);
        snprintf(cn, sizeof cn, "%s naive f32 vs cpu naive f64", dn);
        for (int t = 0; t < 4; t++) {
            double en, mn, ef, mf;
            dev_err(dn32[t], ref32[t], &en, &mn);
            dev_err(df32[t], ref32[t], &ef, &mf);
            const double floor = en == 0 ? ldexp(gscale, -19) : ldexp(mf > 1 ? mf : 1.0, -20);
            const double lim = 2 * en + floor;
            char lt[48];
            snprintf(lt, sizeof lt, "abs <= 2 x %s naive f32 + floor = %.2e", dn, lim);
            dev_add(rep, cf, names[t], ef, ef / (mf > 0 ? mf : 1), lim, lt, ef <= lim);
            dev_add(rep, cn, names[t], en, en / (mn > 0 ? mn : 1), 0, "(reference for the row above)", -1);
        }
    }

    fg_tensor *all[] = {q, k, v, dout, R, dev_in[0], dev_in[1], dev_in[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
    for (int t = 0; t < 4; t++) {
        fg_release(cpu_ref[t]), fg_release(dnaive[t]), fg_release(dflash[t]), fg_release(ana[t]);
        fg_release(ref32[t]), fg_release(dn32[t]), fg_release(df32[t]), fg_release(r32[t]), fg_release(r64[t]);
    }
    if (!ok) rep->passed = 0;
    return ok;
}

static int gradcheck_attention(int argc, char **argv) {
    int64_t B = 2, H = 2, Nq = 8, Nk = 11, d = 4;
    fg_attn_opts opts = fg_attn_defaults();
    opts.seed = 0;
    opts.block_q = 4;
    opts.block_k = 3;
    fg_device dev = FG_CPU;
    fg_attn_flags af;
    fg_attn_flags_init(&af, "gradcheck attention", FG_AF_ALL & ~(FG_AF_BIT(FG_AF_IMPL) | FG_AF_BIT(FG_AF_IMPL_BOTH)));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(gradcheck_usage, stdout);
            fputs(fg_attn_variant_flags_help, stdout);
            return 0;
        }
        const int af_rc = fg_attn_flags_take(&af, argc, argv, &i);
        if (af_rc == 2) return 2;
        if (af_rc == 3) return 0;
        if (af_rc == 1) continue;
        static const char *valued[] = {"--b", "--h", "--nq", "--nk", "--d"};
        int known = 0;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= !strcmp(a, valued[j]);
        if (!known) {
            fprintf(stderr, CMD ": unknown option '%s' (flashgrad gradcheck attention --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, CMD ": %s needs a value\n", a);
            return 2;
        }
        const char *val = argv[++i];
        int ok = 1;
        if (!strcmp(a, "--b"))
            ok = parse_count(a, val, 1, 64, &B);
        else if (!strcmp(a, "--h"))
            ok = parse_count(a, val, 1, 64, &H);
        else if (!strcmp(a, "--nq"))
            ok = parse_count(a, val, 0, 512, &Nq);
        else if (!strcmp(a, "--nk"))
            ok = parse_count(a, val, 0, 512, &Nk);
        else /* --d */
            ok = parse_count(a, val, 1, 256, &d);
        if (!ok) return 2;
    }
    if (fg_attn_flags_apply(&af, &opts, &dev)) return 2;
    const char *custom_name = af.f[FG_AF_CUSTOM].given ? af.f[FG_AF_CUSTOM].s : NULL;
    const uint64_t seed = opts.seed;
    const int64_t bq = opts.block_q, bk = opts.block_k;
    if (opts.variant.n_kv_heads && H % opts.variant.n_kv_heads != 0) {
        fprintf(stderr, CMD ": --h %lld is not a multiple of --gqa %lld\n", (long long)H,
                (long long)opts.variant.n_kv_heads);
        return 2;
    }
    const double scale = 1.0 / sqrt((double)d);
    int drc = fg_attn_device_ready(CMD, dev, &opts);
    if (drc) return drc;

    char vbuf[256];
    printf("gradcheck attention: B=%lld H=%lld H_kv=%lld Nq=%lld Nk=%lld d=%lld causal=%d dropout=%g seed=%llu "
           "block_q=%lld block_k=%lld scale=%.6g\n",
           (long long)B, (long long)H, (long long)(opts.variant.n_kv_heads ? opts.variant.n_kv_heads : H),
           (long long)Nq, (long long)Nk, (long long)d, opts.causal, opts.dropout_p, (unsigned long long)seed,
           (long long)bq, (long long)bk, scale);
    printf("variant: %s\n", fg_attn_variant_str(&opts, custom_name, vbuf, sizeof vbuf));
    printf("relative error = max|a-b| / max|b| (finite differences: max over elements of |a-n|/|n|)\n\n");
    if (dev != FG_CPU) {
        if (fg_attn_check_opts(&opts, B, H, Nq, Nk, d, FG_F64) != FG_OK) {
            fprintf(stderr, CMD ": %s\n", fg_last_error());
            return 2;
        }
        char f32_skipped[256] = "";
        if (fg_attn_check_opts(&opts, B, H, Nq, Nk, d, FG_F32) != FG_OK)
            snprintf(f32_skipped, sizeof f32_skipped, "%s", fg_last_error());
        dev_report rep;
        printf("device: %s (the GPU picks its own flash tiles; --block-q/--block-k apply to the CPU only)\n\n",
               fg_device_name(dev));
        if (!gradcheck_attention_device(dev, &opts, B, H, Nq, Nk, d, (uint64_t)seed, !f32_skipped[0], &rep)) {
            fprintf(stderr, CMD ": %s\n", fg_last_error());
            return 1;
        }
        printf("%-32s %-6s %-12s %-12s %-40s %s\n", "check", "tensor", "max abs err", "max rel err", "limit", "result");
        for (int r = 0; r < rep.n; r++) {
            const dev_row *w = &rep.rows[r];
            printf("%-32s %-6s %-12.3e %-12.3e %-40s %s\n", w->check, w->tensor, w->max_abs, w->max_rel, w->limit_text,
                   w->passed < 0 ? "-"
                   : w->passed   ? "PASS"
                                 : "FAIL");
        }
        if (rep.fd_tensor)
            printf("    worst finite-difference element: input %s index %lld analytic %.12g numeric %.12g\n",
                   rep.fd_tensor, (long long)rep.fd_index, rep.fd_analytic, rep.fd_numeric);
        if (f32_skipped[0]) printf("%s flash f32 vs cpu naive f64: skipped, %s\n", fg_device_name(dev), f32_skipped);
        printf("\ngradcheck attention on %s: %s\n", fg_device_name(dev), rep.passed ? "PASS" : "FAIL");
        return rep.passed ? 0 : 1;
    }

    fg_attn_check_shape sh = {.B = B, .H = H, .Nq = Nq, .Nk = Nk, .d = d, .seed = (uint64_t)seed};
    fg_attn_check_report rep;
    if (fg_attn_gradcheck(&opts, &sh, &rep) != FG_OK) {
        fprintf(stderr, CMD ": %s\n", fg_last_error());
        return 1;
    }
    printf("%-30s %-6s %-12s %-12s %-34s %s\n", "check", "tensor", "max abs err", "max rel err", "limit", "result");
    printf("%-30s %-6s %-12s %-12s %-34s %s\n", "naive f64 vs finite diff", "O", "-", "-", "(not a gradient)", "-");
    for (int r = 0; r < rep.n_rows; r++) {
        const fg_attn_check_row *w = &rep.rows[r];
        char limit[64];
        if (!strcmp(w->check, "naive f64 vs finite diff"))
            snprintf(limit, sizeof limit, "|a-n| <= 1e-7 + 1e-5|n| (eps 1e-6)");
        else if (!strcmp(w->check, "flash f64 vs naive f64"))
            snprintf(limit, sizeof limit, "rel <= 1e-12");
        else if (w->passed < 0)
            snprintf(limit, sizeof limit, "(reference for the row above)");
        else
            snprintf(limit, sizeof limit, "abs <= 2 x naive f32 + floor = %.2e", w->limit);
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", w->check, w->tensor, w->max_abs, w->max_rel, limit,
               w->passed < 0 ? "-"
               : w->passed   ? "PASS"
                             : "FAIL");
    }
    if (rep.fd_worst_tensor)
        printf("    worst finite-difference element: input %s index %lld analytic %.12g numeric %.12g\n",
               rep.fd_worst_tensor, (long long)rep.fd_worst_index, rep.fd_analytic, rep.fd_numeric);
    if (rep.f32_skipped[0]) printf("flash f32 vs naive f64: skipped, %s\n", rep.f32_skipped);
    printf("\ngradcheck attention: %s\n", rep.passed ? "PASS" : "FAIL");
    return rep.passed ? 0 : 1;
}

int fg_cmd_gradcheck(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, CMD ": what to check? (only 'attention': flashgrad gradcheck attention --help)\n");
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(gradcheck_usage, stdout);
        fputs(fg_attn_variant_flags_help, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "attention")) return gradcheck_attention(argc - 1, argv + 1);
    fprintf(stderr, CMD ": unknown target '%s' (only 'attention')\n", argv[1]);
    return 2;
}
