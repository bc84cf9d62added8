/* attn_flags.h — the flags shared by `flashgrad attention` and `flashgrad gradcheck attention`: the
 * attention variants (--gqa HKV, --window L,R, --alibi, --softcap C, --custom NAME) and the device
 * (--device cpu|cuda).
 *
 * fg_attn_variant_flag looks at argv[*i]: returns 0 when it is not one of these flags; 1 when it
 * was, after storing it into *o and advancing *i past its value; 2 after printing one line
 * "<cmd>: <problem>" on stderr for a bad or missing value (a usage error); 3 after printing the
 * list of registered variants on stdout (for --custom list: the command then exits 0).
 */
#ifndef FG_ATTN_FLAGS_H
#define FG_ATTN_FLAGS_H

#include <stddef.h>

#include "ops/attention.h"
#include "tensor/tensor.h"

/* The help lines for the flags (for a command's usage text). */
extern const char fg_attn_variant_flags_help[];

int fg_attn_variant_flag(const char *cmd, int argc, char **argv, int *i, fg_attn_opts *o);

/* "gqa=2 window=3,-1 alibi softcap=5 custom=doc-mask" (or "none") into buf; returns buf. */
const char *fg_attn_variant_str(const fg_attn_opts *o, const char *custom_name, char *buf, size_t n);

/* --device cpu|cuda at argv[*i]: 0 when it is not that flag; 1 after storing it into *dev and
 * advancing *i; 2 after printing "<cmd>: <problem>" on stderr (missing or unknown device). */
int fg_attn_device_flag(const char *cmd, int argc, char **argv, int *i, fg_device *dev);

/* Can the command run on dev with these options? 0 yes (CUDA initialized); otherwise prints one
 * line "<cmd>: --device cuda: <why>" on stderr and returns the exit status:
 *   2  a usage error: this flashgrad was built without CUDA (the flag asks for something the
 *      binary does not have, as `flashgrad train --device cuda` answers), or user callbacks
 *      (--custom) with a non-CPU device (they run on the CPU only);
 *   1  a runtime error: a CUDA build that finds no usable GPU. */
int fg_attn_device_ready(const char *cmd, fg_device dev, const fg_attn_opts *o);

#endif /* FG_ATTN_FLAGS_H */
