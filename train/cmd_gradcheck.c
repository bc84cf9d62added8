/* cmd_gradcheck.c — `flashgrad gradcheck attention`: check attention's gradients on random inputs.
 *
 *   flashgrad gradcheck attention [--b B --h H --nq N --nk M --d D] [--causal] [--dropout P] [--seed S]
 *                                 [--block-q N --block-k N] [--gqa HKV] [--window L,R] [--alibi]
 *                                 [--softcap C] [--custom NAME]
 *
 * Three checks, one table (fg_attn_gradcheck, ops/attention.h):
 *   1. naive float64 against central finite differences (fg_gradcheck), dQ, dK and dV one at a time;
 *      an element passes when |analytic − numeric| <= 1e-7 + 1e-5 |numeric|;
 *   2. flash float64 against naive float64: O, dQ, dK, dV to 1e-12 relative (max|a − b| / max|b|);
 *   3. flash float32 against naive float64 on the same float32-rounded inputs, FlashAttention's rule:
 *      the flash error is at most twice the naive float32 error + 2^-20 max(1, max|ref|) (see ops/attention.h).
 * Every variant flag combines with the others and with --causal and --dropout. --custom NAME picks
 * a variant registered with fg_attn_register_custom (a program that registers its own can call
 * fg_cmd_gradcheck). Exits 0 when everything passes, 1 when a tolerance is exceeded, 2 on a usage
 * error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "train/attn_flags.h"
#include "train/cli_util.h"
#include "train/commands.h"

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
    "variants (any combination):\n";

#define CMD "flashgrad gradcheck"

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
    const char *custom_name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(gradcheck_usage, stdout);
            fputs(fg_attn_variant_flags_help, stdout);
            return 0;
        }
        if (!strcmp(a, "--causal")) {
            opts.causal = 1;
            continue;
        }
        int vf = fg_attn_variant_flag(CMD, argc, argv, &i, &opts);
        if (vf == 2) return 2;
        if (vf == 3) return 0;
        if (vf == 1) {
            if (!strcmp(a, "--custom")) custom_name = argv[i];
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
    if (opts.variant.n_kv_heads && H % opts.variant.n_kv_heads != 0) {
        fprintf(stderr, CMD ": --h %lld is not a multiple of --gqa %lld\n", (long long)H, (long long)opts.variant.n_kv_heads);
        return 2;
    }
    opts.seed = (uint64_t)seed;
    opts.block_q = (int)bq;
    opts.block_k = (int)bk;
    const double scale = 1.0 / sqrt((double)d);

    char vbuf[256];
    printf("gradcheck attention: B=%lld H=%lld H_kv=%lld Nq=%lld Nk=%lld d=%lld causal=%d dropout=%g seed=%lld "
           "block_q=%lld block_k=%lld scale=%.6g\n",
           (long long)B, (long long)H, (long long)(opts.variant.n_kv_heads ? opts.variant.n_kv_heads : H), (long long)Nq,
           (long long)Nk, (long long)d, opts.causal, opts.dropout_p, (long long)seed, (long long)bq, (long long)bk, scale);
    printf("variant: %s\n", fg_attn_variant_str(&opts, custom_name, vbuf, sizeof vbuf));
    printf("relative error = max|a-b| / max|b| (finite differences: max over elements of |a-n|/|n|)\n\n");

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
        if (!strcmp(w->check, "naive f64 vs finite diff")) snprintf(limit, sizeof limit, "|a-n| <= 1e-7 + 1e-5|n| (eps 1e-6)");
        else if (!strcmp(w->check, "flash f64 vs naive f64")) snprintf(limit, sizeof limit, "rel <= 1e-12");
        else if (w->passed < 0) snprintf(limit, sizeof limit, "(reference for the row above)");
        else snprintf(limit, sizeof limit, "abs <= 2 x naive f32 + floor = %.2e", w->limit);
        printf("%-30s %-6s %-12.3e %-12.3e %-34s %s\n", w->check, w->tensor, w->max_abs, w->max_rel, limit,
               w->passed < 0 ? "-" : w->passed ? "PASS" : "FAIL");
    }
    if (rep.fd_worst_tensor)
        printf("    worst finite-difference element: input %s index %lld analytic %.12g numeric %.12g\n",
               rep.fd_worst_tensor, (long long)rep.fd_worst_index, rep.fd_analytic, rep.fd_numeric);
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
