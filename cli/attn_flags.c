/* attn_flags.c — the attention commands' one flag table (cli/attn_flags.h). */
#include "cli/attn_flags.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "ops/device.h"

const char fg_attn_variant_flags_help[] =
    "  --gqa HKV            grouped-query attention: K and V have HKV heads, H a multiple of HKV (1 = multi-query)\n"
    "  --window L,R         sliding window: query i (i' = i + Nk - Nq) sees keys i'-L .. i'+R; -1 = unbounded side;\n"
    "                       with --causal the intersection\n"
    "  --alibi              ALiBi: score -= slope_h * |i' - j| with the paper's standard slopes\n"
    "  --softcap C          logit softcapping: score = C * tanh(score / C) before bias and mask, C > 0\n"
    "  --custom NAME        a registered user variant (score_mod / mask callbacks); --custom list shows them\n";

void fg_attn_flags_init(fg_attn_flags *af, const char *cmd, unsigned mask) {
    static const fg_flag table[FG_AF_COUNT] = {
#define FG_AF_INIT(id, nm, ty, me, he, l, h, lop)                                                                      \
    {.name = nm, .type = ty, .meta = me, .help = he, .lo = l, .hi = h, .lo_open = lop},
        FG_ATTN_FLAGS(FG_AF_INIT)
#undef FG_AF_INIT
    };
    af->cmd = cmd;
    af->mask = mask;
    memcpy(af->f, table, sizeof table);
}

int fg_attn_flags_take(fg_attn_flags *af, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    const size_t len = eq ? (size_t)(eq - a) : strlen(a);
    int k = 0;
    while (k < FG_AF_COUNT && !(strlen(af->f[k].name) == len && !strncmp(af->f[k].name, a, len))) k++;
    if (k == FG_AF_COUNT || !(af->mask & FG_AF_BIT(k))) return 0;
    fg_flag *f = &af->f[k];
    const char *v = eq ? eq + 1 : NULL;
    if (!v && f->type != FG_FLAG_BOOL) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "flashgrad %s: %s needs a value (%s)\n", af->cmd, f->name, f->meta);
            return 2;
        }
        v = argv[++*i];
    }
    if (fg_flags_set(af->cmd, af->f, FG_AF_COUNT, f->name, v, "")) return 2;
    if (k == FG_AF_CUSTOM && !strcmp(v, "list")) {
        printf("registered attention variants (--custom NAME):\n");
        const char *help;
        for (int j = 0; fg_attn_custom_name(j, &help); j++) printf("  %-16s %s\n", fg_attn_custom_name(j, NULL), help);
        return 3;
    }
    return 1;
}

static int bad(const fg_attn_flags *af, int k, const char *want) {
    fprintf(stderr, "flashgrad %s: %s: %s, got '%s'\n", af->cmd, af->f[k].name, want, af->f[k].s ? af->f[k].s : "");
    return 2;
}

int fg_attn_flags_apply(const fg_attn_flags *af, fg_attn_opts *o, fg_device *dev) {
    const fg_flag *f = af->f;
    if (f[FG_AF_CAUSAL].given) o->causal = 1;
    if (f[FG_AF_DROPOUT].given) {
        if (!(f[FG_AF_DROPOUT].d >= 0 && f[FG_AF_DROPOUT].d < 1)) { /* the table checks that it is finite */
            fprintf(stderr, "flashgrad %s: --dropout: %g is outside [0, 1)\n", af->cmd, f[FG_AF_DROPOUT].d);
            return 2;
        }
        o->dropout_p = f[FG_AF_DROPOUT].d;
    }
    if (f[FG_AF_SEED].given) o->seed = f[FG_AF_SEED].u;
    if (f[FG_AF_BLOCK_Q].given) o->block_q = (int)f[FG_AF_BLOCK_Q].i;
    if (f[FG_AF_BLOCK_K].given) o->block_k = (int)f[FG_AF_BLOCK_K].i;
    if (f[FG_AF_IMPL].given) {
        const char *v = f[FG_AF_IMPL].s;
        const int both = (af->mask & FG_AF_BIT(FG_AF_IMPL_BOTH)) != 0;
        if (!strcmp(v, "naive"))
            o->impl = FG_ATTN_NAIVE;
        else if (!strcmp(v, "flash"))
            o->impl = FG_ATTN_FLASH;
        else if (!both || strcmp(v, "both"))
            return bad(af, FG_AF_IMPL, both ? "must be naive, flash or both" : "must be naive or flash");
    }
    if (f[FG_AF_DEVICE].given) {
        if (!strcmp(f[FG_AF_DEVICE].s, "cpu"))
            *dev = FG_CPU;
        else if (!strcmp(f[FG_AF_DEVICE].s, "cuda"))
            *dev = FG_CUDA;
        else
            return bad(af, FG_AF_DEVICE, "must be cpu or cuda");
    }
    if (f[FG_AF_GQA].given) o->variant.n_kv_heads = f[FG_AF_GQA].i;
    if (f[FG_AF_WINDOW].given) {
        int64_t lr[2];
        int n = 0;
        if (fg_parse_int_list(f[FG_AF_WINDOW].s, lr, 2, &n, -1, INT32_MAX) || n != 2)
            return bad(af, FG_AF_WINDOW, "must be L,R: two integers >= -1 (-1 = unbounded)");
        o->variant.window = 1;
        o->variant.window_left = lr[0];
        o->variant.window_right = lr[1];
    }
    if (f[FG_AF_ALIBI].given) o->variant.alibi = 1;
    /* whether the softcap fits the inputs' dtype is the library's check (fg_attn_problem_check_dtype) */
    if (f[FG_AF_SOFTCAP].given) o->variant.softcap = f[FG_AF_SOFTCAP].d;
    if (f[FG_AF_CUSTOM].given) {
        const fg_attn_custom *c = fg_attn_find_custom(f[FG_AF_CUSTOM].s);
        if (!c) {
            fprintf(stderr, "flashgrad %s: --custom: no variant named '%s' (--custom list shows them)\n", af->cmd,
                    f[FG_AF_CUSTOM].s);
            return 2;
        }
        o->custom = *c;
    }
    return 0;
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
