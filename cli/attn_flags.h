/* attn_flags.h — the one flag table of the attention commands: `flashgrad attention`,
 * `flashgrad gradcheck attention` and `flashgrad bench attention` take the attention options
 * (--causal, --dropout, --seed, --block-q, --block-k, --impl), the variants (--gqa HKV,
 * --window L,R, --alibi, --softcap C, --custom NAME) and the device (--device cpu|cuda) from this
 * table, parsed by the fg_flag parser (cli/flags.h: its checks and its one-line errors), then turned
 * into fg_attn_opts by fg_attn_flags_apply. Each command takes the subset it has (a mask) and parses
 * its own flags (paths, sizes) beside them.
 *
 *     fg_attn_flags af;
 *     fg_attn_flags_init(&af, "attention", FG_AF_ALL & ~FG_AF_BIT(FG_AF_IMPL_BOTH));
 *     for (i = 1; i < argc; i++) {
 *         int r = fg_attn_flags_take(&af, argc, argv, &i);  // 0: not one of them; 1: taken;
 *         if (r == 2) return 2;                              // 2: usage error (line printed);
 *         if (r == 3) return 0;                              // 3: --custom list printed
 *         if (r == 1) continue;
 *         ... the command's own flags ...
 *     }
 *     if (fg_attn_flags_apply(&af, &opts, &dev)) return 2;
 */
#ifndef FG_ATTN_FLAGS_H
#define FG_ATTN_FLAGS_H

#include <stddef.h>

#include "cli/flags.h"
#include "ops/attention.h"
#include "tensor/tensor.h"

/* X(id, name, type, meta, help, lo, hi, lo_open): the table (the defaults are fg_attn_defaults()'s,
 * or the command's, set after fg_attn_flags_init). */
#define FG_ATTN_FLAGS(X)                                                                                               \
    X(CAUSAL, "--causal", FG_FLAG_BOOL, NULL, "causal mask", 0, 0, 0)                                                  \
    X(DROPOUT, "--dropout", FG_FLAG_F64, "P", "dropout probability on the attention weights, in [0, 1)", 0, 0, 0)      \
    X(SEED, "--seed", FG_FLAG_U64, "S", "dropout seed", 0, 0, 0)                                                       \
    X(BLOCK_Q, "--block-q", FG_FLAG_INT, "N", "flash tile rows (queries)", 1, FG_ATTN_MAX_BLOCK, 0)                    \
    X(BLOCK_K, "--block-k", FG_FLAG_INT, "N", "flash tile columns (keys)", 1, FG_ATTN_MAX_BLOCK, 0)                    \
    X(IMPL, "--impl", FG_FLAG_STR, "naive|flash", "implementation", 0, 0, 0)                                           \
    X(DEVICE, "--device", FG_FLAG_STR, "cpu|cuda", "device", 0, 0, 0)                                                  \
    X(GQA, "--gqa", FG_FLAG_INT, "HKV", "grouped-query attention: K and V have HKV heads", 1, 65536, 0)                \
    X(WINDOW, "--window", FG_FLAG_STR, "L,R", "sliding window (-1 = unbounded side)", 0, 0, 0)                         \
    X(ALIBI, "--alibi", FG_FLAG_BOOL, NULL, "ALiBi with the paper's standard slopes", 0, 0, 0)                         \
    X(SOFTCAP, "--softcap", FG_FLAG_F64, "C", "logit softcapping, C > 0", 0, 1e300, 1)                                 \
    X(CUSTOM, "--custom", FG_FLAG_STR, "NAME", "a registered user variant (--custom list shows them)", 0, 0, 0)

enum {
#define FG_AF_ENUM(id, name, type, meta, help, lo, hi, lo_open) FG_AF_##id,
    FG_ATTN_FLAGS(FG_AF_ENUM)
#undef FG_AF_ENUM
        FG_AF_COUNT,
    FG_AF_IMPL_BOTH = FG_AF_COUNT /* a mask bit, not a flag: --impl also takes "both" */
};
#define FG_AF_BIT(id) (1u << (id))
#define FG_AF_ALL ((1u << (FG_AF_COUNT + 1)) - 1)
/* the variants, for commands that take them */
#define FG_AF_VARIANTS                                                                                                 \
    (FG_AF_BIT(FG_AF_GQA) | FG_AF_BIT(FG_AF_WINDOW) | FG_AF_BIT(FG_AF_ALIBI) | FG_AF_BIT(FG_AF_SOFTCAP) |              \
     FG_AF_BIT(FG_AF_CUSTOM))

typedef struct {
    const char *cmd; /* "attention", "gradcheck attention", "bench attention" (messages: "flashgrad <cmd>: ...") */
    unsigned mask;   /* the flags the command takes: FG_AF_BIT(FG_AF_...) | ... */
    fg_flag f[FG_AF_COUNT];
} fg_attn_flags;

/* The table for cmd, with the flags of mask (the others are not taken). */
void fg_attn_flags_init(fg_attn_flags *af, const char *cmd, unsigned mask);

/* argv[*i] is one of the command's attention flags? 0: no; 1: taken (*i advanced past its value);
 * 2: a bad or missing value (one line printed); 3: --custom list printed (the command exits 0). */
int fg_attn_flags_take(fg_attn_flags *af, int argc, char **argv, int *i);

/* The flags given, into *o and *dev (what was not given stays as it is there): 0, or 2 after one
 * line for a value the table's checks let pass but attention does not (--dropout 1, --impl x,
 * --window 1, an unknown --custom, --device x). */
int fg_attn_flags_apply(const fg_attn_flags *af, fg_attn_opts *o, fg_device *dev);

/* The help lines for the variant flags (for a command's usage text). */
extern const char fg_attn_variant_flags_help[];

/* "gqa=2 window=3,-1 alibi softcap=5 custom=doc-mask" (or "none") into buf; returns buf. */
const char *fg_attn_variant_str(const fg_attn_opts *o, const char *custom_name, char *buf, size_t n);

/* Can the command run on dev with these options? 0 yes (CUDA initialized); otherwise prints one
 * line "<cmd>: --device cuda: <why>" on stderr and returns the exit status:
 *   2  a usage error: this flashgrad was built without CUDA (the flag asks for something the
 *      binary does not have, as `flashgrad train --device cuda` answers), or user callbacks
 *      (--custom) with a non-CPU device (they run on the CPU only);
 *   1  a runtime error: a CUDA build that finds no usable GPU. */
int fg_attn_device_ready(const char *cmd, fg_device dev, const fg_attn_opts *o);

#endif /* FG_ATTN_FLAGS_H */
