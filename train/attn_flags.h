/* attn_flags.h — the attention-variant flags shared by `flashgrad attention` and `flashgrad gradcheck
 * attention`: --gqa HKV, --window L,R, --alibi, --softcap C, --custom NAME.
 *
 * fg_attn_variant_flag looks at argv[*i]: returns 0 when it is not one of these flags; 1 when it
 * was, after storing it into *o and advancing *i past its value; 2 after printing one line
 * "<cmd>: <problem>" on stderr for a bad or missing value (a usage error); 3 after printing the
 * list of registered variants on stdout (for --custom list: the command then exits 0).
 */
#ifndef FG_ATTN_FLAGS_H
#define FG_ATTN_FLAGS_H

#include "ops/attention.h"

/* The help lines for the flags (for a command's usage text). */
extern const char fg_attn_variant_flags_help[];

int fg_attn_variant_flag(const char *cmd, int argc, char **argv, int *i, fg_attn_opts *o);

/* "gqa=2 window=3,-1 alibi softcap=5 custom=doc-mask" (or "none") into buf; returns buf. */
const char *fg_attn_variant_str(const fg_attn_opts *o, const char *custom_name, char *buf, size_t n);

#endif /* FG_ATTN_FLAGS_H */
