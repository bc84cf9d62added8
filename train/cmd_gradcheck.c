/* cmd_gradcheck.c — `flashgrad gradcheck attention`: check attention's gradients on random inputs.
 *
 *   flashgrad gradcheck attention [--b B --h H --nq N --nk M --d D] [--causal] [--dropout P] [--seed S]
 *                                 [--block-q N --block-k N]
 *
 * Three checks, one table:
 *   1. naive float64 against central finite differences (fg_gradcheck), dQ, dK and dV one at a time;
 *      an element passes when |analytic − numeric| <= 1e-7 + 1e-5 |numeric|;
 *   2. flash float64 against naive float64: O, dQ, dK, dV to 1e-12 relative (max|a − b| / max|b|);
 *   3. flash float32 against naive float64 on the same float32-rounded inputs, FlashAttention's rule:
 *      the flash error is at most twice the naive float32 error (+ 2^-20 max(1, max|ref|)).
 * Exits 0 when everything passes, 1 when a tolerance is exceeded, 2 on a usage error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "ops/attention.h"
#include "train/cli_util.h"
#include "train/commands.h"

static const char gradcheck_usage[] =
    "usage: flashgrad gradcheck attention [--b B --h H --nq N --nk M --d D] [--causal] [--dropout P] [--seed S]\n"
    "                                     [--block-q N --block-k N]\n"
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
    "  --block-q, --block-k flash tile sizes (default 4 and 3, so that tiles do not divide N)\n";

#define CMD "flashgrad gradcheck"

typedef struct {
    double max_abs, ref_max;
} err_stat;

/* max |a − b| and max |b| over finite reference entries; a NaN/Inf where b is finite counts as inf. */
static err_stat err_of(const fg_tensor *a, const fg_tensor *b) {
    err_stat e = {0, 0};
    for (int64_t i = 0; i < fg_numel(b); i++) {
        double x = fg_get(a, i), y = fg_get(b, i);
        if (isinf(y) && x == y) continue;
        double d = fabs(x - y);
        if (!(d <= e.max_abs)) e.max_abs = isnan(d) ? INFINITY : d;
        if (fabs(y) > e.ref_max) e.ref_max = fabs(y);
    }
    return e;
}
static double rel_of(err_stat e) { return e.max_abs / (e.ref_max > 0 ? e.ref_max : 1); }

static fg_tensor *attention_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return fg_attention(in[0], in[1], in[2], (const fg_attn_opts *)user, NULL);
}

/* O and the three gradients of leaf copies of q, k, v. NULL entries on error (message set). */
static int run(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_tensor *dout, const fg_attn_opts *o, fg_tensor *res[4]) {
    memset(res, 0, 4 * sizeof *res);
    fg_tensor *l[3] = {fg_clone(q), fg_clone(k), fg_clone(v)};
    int ok = l[0] && l[1] && l[2];
    for (int i = 0; ok && i < 3; i++) fg_set_requires_grad(l[i], 1);
    if (ok) res[0] = fg_attention(l[0], l[1], l[2], o, NULL);
    ok = ok && res[0] && fg_backward(res[0], dout) == FG_OK;
    for (int i = 0; ok && i < 3; i++) res[1 + i] = fg_retain(l[i]->grad);
    for (int i = 0; i < 3; i++) fg_release(l[i]);
    if (!ok)
        for (int i = 0; i < 4; i++) {
            fg_release(res[i]);
            res[i] = NULL;
        }
    return ok;
}

static int parse_count(const char *flag, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    if (fg_parse_int(val, out) || *out < lo || *out > hi) {
        fprintf(stderr, CMD ": %s must be an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo, (long long)hi, val);
        return 0;
    }
    return 1;
}

static int gradcheck_attention(int argc, char **argv) {
    int64_t B = 2, H = 2, Nq = 8, Nk = 11, d = 4, seed = 0, bq = 4, bk = 3;
    fg_attn_opts opts = fg_attn_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(gradcheck_usage, stdout);
            return 0;
        }
        if (!strcmp(a, "--causal")) {
            opts.causal = 1;
            continue;
        }
        static const char *valued[] = {"--b", "--h", "--nq", "--nk", "--d", "--dropout", "--seed", "--block-q", "--block-k"};
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
        if (!strcmp(a, "--b")) ok = parse_count(a, val, 1, 64, &B);
        else if (!strcmp(a, "--h")) ok = parse_count(a, val, 1, 64, &H);
        else if (!strcmp(a, "--nq")) ok = parse_count(a, val, 0, 512, &Nq);
        else if (!strcmp(a, "--nk")) ok = parse_count(a, val, 0, 512, &Nk);
        else if (!strcmp(a, "--d")) ok = parse_count(a, val, 1, 256, &d);
        else if (!strcmp(a, "--seed")) ok = parse_count(a, val, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--block-q")) ok = parse_count(a, val, 1, FG_ATTN_MAX_BLOCK, &bq);
        else if (!strcmp(a, "--block-k")) ok = parse_count(a, val, 1, FG_ATTN_MAX_BLOCK, &bk);
        else { /* --dropout */
            double p;
            if (fg_parse_double(val, &p) || !(p >= 0 && p < 1)) {
                fprintf(stderr, CMD ": --dropout must be a number in [0, 1), got '%s'\n", val);
                return 2;
            }
            opts.dropout_p = p;
        }
        if (!ok) return 2;
    }
    opts.seed = (uint64_t)seed;
    opts.block_q = (int)bq;
    opts.block_k = (int)bk;
    const double scale = 1.0 / sqrt((double)d);

    int64_t qs[4] = {B, H, Nq, d}, ks[4] = {B, H, Nk, d};
    fg_tensor *q = fg_rand_normal(FG_F64, FG_CPU, 4, qs, 0, 1, (uint64_t)seed, 1);
    fg_tensor *k = fg_rand_normal(FG_F64, FG_CPU, 4, ks, 0, 1, (uint64_t)seed, 2);
    fg_tensor *v = fg_rand_normal(FG_F64, FG_CPU, 4, ks, 0, 1, (uint64_t)seed, 3);
    fg_tensor *dout = fg_rand_normal(FG_F64, FG_CPU, 4, qs, 0, 1, (uint64_t)seed, 4);
    fg_tensor *q32 = NULL, *k32 = NULL, *v32 = NULL, *d32 = NULL, *q64r = NULL, *k64r = NULL, *v64r = NULL, *d64r = NULL;
    fg_tensor *nf[4] = {0}, *ff[4] = {0}, *n32[4] = {0}, *f32r[4] = {0}, *ref32[4] = {0};
    int rc = 1, all_ok = 1;
    if (!q || !k || !v || !dout) goto runtime_error;

    printf("gradcheck attention: B=%lld H=%lld Nq=%lld Nk=%lld d=%lld causal=%d dropout=%g seed=%lld block_q=%lld "
           "block_k=%lld scale=%.6g\n",
           (long long)B, (long long)H, (long long)Nq, (long long)Nk, (long long)d, opts.causal, opts.dropout_p,
           (long long)seed, (long long)bq, (long long)bk, scale);
    printf("relative error = max|a-b| / max|b| (finite differences: max over elements of |a-n|/|n|)\n\n");
    printf("%-30s %-6s %-12s %-12s %-34s %s\n", "check", "tensor", "max abs err", "max rel err", "limit", "result");
    const char *names[4] = {"O", "dQ", "dK", "dV"};

    /* 1. naive float64 against finite differences, one input at a time */
    fg_attn_opts on = opts, of = opts;
    on.impl = FG_ATTN_NAIVE;
    of.impl = FG_ATTN_FLASH;
    fg_tensor *in[3] = {q, k, v};
    printf("%-30s %-6s %-12s %-12s %-34s %s\n", "naive f64 vs finite diff", "O", "-", "-", "(not a gradient)", "-");
    for (int w = 0; w < 3; w++) {
        for (int i = 0; i < 3; i++) fg_set_requires_grad(in[i], i == w);
        fg_gradcheck_report rep;
        fg_gradcheck_opts go = {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5, .seed = (uint64_t)seed + 17};
        if (fg_gradcheck(attention_fn, in, 3, &on, &go, &rep) != FG_OK) goto runtime_error;
        all_ok &= rep.passed;
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", "naive f64 vs finite diff", names[1 + w], rep.max_abs_err,
               rep.max_rel_err, "|a-n| <= 1e-7 + 1e-5|n| (eps 1e-6)", rep.passed ? "PASS" : "FAIL");
        if (!rep.passed)
            printf("    worst: input %s index %lld analytic %.12g numeric %.12g\n", names[1 + w],
                   (long long)rep.worst_index, rep.analytic, rep.numeric);
        fg_set_requires_grad(in[w], 0);
        fg_zero_grad(in[w]);
    }

    /* 2. flash float64 against naive float64 */
    if (!run(q, k, v, dout, &on, nf) || !run(q, k, v, dout, &of, ff)) goto runtime_error;
    for (int t = 0; t < 4; t++) {
        err_stat e = err_of(ff[t], nf[t]);
        int ok = rel_of(e) <= 1e-12;
        all_ok &= ok;
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", "flash f64 vs naive f64", names[t], e.max_abs, rel_of(e),
               "rel <= 1e-12", ok ? "PASS" : "FAIL");
    }

    /* 3. float32: both implementations against naive float64 on the float32-rounded inputs */
    q32 = fg_to(q, FG_CPU, FG_F32);
    k32 = fg_to(k, FG_CPU, FG_F32);
    v32 = fg_to(v, FG_CPU, FG_F32);
    d32 = fg_to(dout, FG_CPU, FG_F32);
    if (!q32 || !k32 || !v32 || !d32) goto runtime_error;
    q64r = fg_to(q32, FG_CPU, FG_F64);
    k64r = fg_to(k32, FG_CPU, FG_F64);
    v64r = fg_to(v32, FG_CPU, FG_F64);
    d64r = fg_to(d32, FG_CPU, FG_F64);
    if (!q64r || !k64r || !v64r || !d64r) goto runtime_error;
    if (!run(q64r, k64r, v64r, d64r, &on, ref32) || !run(q32, k32, v32, d32, &on, n32) ||
        !run(q32, k32, v32, d32, &of, f32r))
        goto runtime_error;
    for (int t = 0; t < 4; t++) {
        err_stat en = err_of(n32[t], ref32[t]), ef = err_of(f32r[t], ref32[t]);
        double floor = ldexp(ef.ref_max > 1 ? ef.ref_max : 1.0, -20);
        double lim = 2 * en.max_abs + floor;
        int ok = ef.max_abs <= lim;
        all_ok &= ok;
        char limit[64];
        snprintf(limit, sizeof limit, "abs <= 2 x naive f32 + floor = %.2e", lim);
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", "flash f32 vs naive f64", names[t], ef.max_abs, rel_of(ef), limit,
               ok ? "PASS" : "FAIL");
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", "naive f32 vs naive f64", names[t], en.max_abs, rel_of(en),
               "(reference for the row above)", "-");
    }
    printf("\ngradcheck attention: %s\n", all_ok ? "PASS" : "FAIL");
    rc = all_ok ? 0 : 1;
    goto done;

runtime_error:
    fprintf(stderr, CMD ": %s\n", fg_last_error());
    rc = 1;
done:
    for (int t = 0; t < 4; t++) {
        fg_release(nf[t]);
        fg_release(ff[t]);
        fg_release(n32[t]);
        fg_release(f32r[t]);
        fg_release(ref32[t]);
    }
    fg_tensor *all[] = {q, k, v, dout, q32, k32, v32, d32, q64r, k64r, v64r, d64r};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
    return rc;
}

int fg_cmd_gradcheck(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, CMD ": what to check? (only 'attention': flashgrad gradcheck attention --help)\n");
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(gradcheck_usage, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "attention")) return gradcheck_attention(argc - 1, argv + 1);
    fprintf(stderr, CMD ": unknown target '%s' (only 'attention')\n", argv[1]);
    return 2;
}
