/* attn_flags.c — parsing of the attention-variant flags (cli/attn_flags.h). */
#include "cli/attn_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "ops/kernels.h"

const char fg_attn_variant_flags_help[] =
    "  --gqa HKV            grouped-query attention: K and V have HKV heads, H a multiple of HKV (1 = multi-query)\n"
    "  --window L,R         sliding window: query i (i' = i + Nk - Nq) sees keys i'-L .. i'+R; -1 = unbounded side;\n"
    "                       with --causal the intersection\n"
    "  --alibi              ALiBi: score -= slope_h * |i' - j| with the paper's standard slopes\n"
    "  --softcap C          logit softcapping: score = C * tanh(score / C) before bias and mask, C > 0\n"
    "  --custom NAME        a registered user variant (score_mod / mask callbacks); --custom list shows them\n";

static int bad(const char *cmd, const char *flag, const char *val, const char *want) {
    fprintf(stderr, "%s: %s %s, got '%s'\n", cmd, flag, want, val ? val : "");
    return 2;
}

int fg_attn_variant_flag(const char *cmd, int argc, char **argv, int *i, fg_attn_opts *o) {
    const char *a = argv[*i];
    if (!strcmp(a, "--alibi")) {
        o->variant.alibi = 1;
        return 1;
    }
    if (strcmp(a, "--gqa") && strcmp(a, "--window") && strcmp(a, "--softcap") && strcmp(a, "--custom")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, a);
        return 2;
    }
    const char *val = argv[++*i];
    if (!strcmp(a, "--gqa")) {
        int64_t n;
        if (fg_parse_int(val, &n) || n < 1 || n > 65536) return bad(cmd, a, val, "must be an integer in [1, 65536]");
        o->variant.n_kv_heads = n;
    } else if (!strcmp(a, "--window")) {
        int64_t lr[2];
        int n = 0;
        if (fg_parse_int_list(val, lr, 2, &n, -1, INT32_MAX) || n != 2)
            return bad(cmd, a, val, "must be L,R: two integers >= -1 (-1 = unbounded)");
        o->variant.window = 1;
        o->variant.window_left = lr[0];
        o->variant.window_right = lr[1];
    } else if (!strcmp(a, "--softcap")) {
        double c;
        /* whether c fits the inputs' dtype is the library's check (fg_attn_problem_check_dtype) */
        if (fg_parse_double(val, &c) || !(c > 0)) return bad(cmd, a, val, "must be a finite number > 0");
        o->variant.softcap = c;
    } else { /* --custom */
        const fg_attn_custom *c = fg_attn_find_custom(val);
        if (!strcmp(val, "list")) {
            printf("registered attention variants (--custom NAME):\n");
            const char *help;
            for (int k = 0; fg_attn_custom_name(k, &help); k++)
                printf("  %-16s %s\n", fg_attn_custom_name(k, NULL), help);
            return 3;
        }
        if (!c) {
            fprintf(stderr, "%s: --custom: no variant named '%s' (--custom list shows them)\n", cmd, val);
            return 2;
        }
        o->custom = *c;
    }
    return 1;
}

const char *fg_attn_variant_str(const fg_attn_opts *o, const char *custom_name, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
#define ADD(...) used += (size_t)snprintf(buf + (used < n ? used : n), used < n ? n - used : 0, __VA_ARGS__)
    const fg_attn_variant *v = &o->variant;
    if (v->n_kv_heads) ADD("%sgqa=%lld", used ? " " : "", (long long)v->n_kv_heads);
    if (v->window) ADD("%swindow=%lld,%lld", used ? " " : "", (long long)v->window_left, (long long)v->window_right);
    if (v->alibi) ADD("%salibi", used ? " " : "");
    if (v->softcap > 0) ADD("%ssoftcap=%g", used ? " " : "", v->softcap);
    if (custom_name) ADD("%scustom=%s", used ? " " : "", custom_name);
    if (!used) ADD("none");
#undef ADD
    return buf;
}

int fg_attn_device_flag(const char *cmd, int argc, char **argv, int *i, fg_device *dev) {
    if (strcmp(argv[*i], "--device")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: --device needs a value (cpu or cuda)\n", cmd);
        return 2;
    }
    const char *val = argv[++*i];
    if (!strcmp(val, "cpu"))
        *dev = FG_CPU;
    else if (!strcmp(val, "cuda"))
        *dev = FG_CUDA;
    else
        return bad(cmd, "--device", val, "must be cpu or cuda");
    return 1;
}

int fg_attn_device_ready(const char *cmd, fg_device dev, const fg_attn_opts *o) {
    if (dev == FG_CPU) return 0;
    if (o && (o->custom.score_mod || o->custom.mask)) {
        fprintf(stderr,
                "%s: --device %s: --custom variants are user callbacks, which run on the CPU only (use "
                "--device cpu, or the built-in --gqa, --window, --alibi, --softcap)\n",
                cmd, fg_device_name(dev));
        return 2;
    }
    if (fg_device_start(dev) != FG_OK) {
        fprintf(stderr, "%s: --device %s: %s\n", cmd, fg_device_name(dev), fg_last_error());
        /* a binary without the device's code is asked for something it does not have; one with
         * it found no usable device here */
        return fg_device_built(dev) ? 1 : 2;
    }
    return 0;
}
