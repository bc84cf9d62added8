/* bench.h — the CPU benchmarks of the flashgrad program: `flashgrad bench <what>`, one file each
 * (bench/bench_<what>.c), dispatched by fg_cmd_bench (bench/bench.c, declared in cli/commands.h).
 *
 * Each takes the arguments after `bench` (argv[0] is the benchmark's name) and returns the exit
 * status, as the commands do (cli/commands.h): 0 success, 1 runtime error, 2 usage error.
 */
#ifndef FG_BENCH_H
#define FG_BENCH_H

#include "cli/flags.h"
#include "cli/train_defaults.h"
#include "datasets/source.h"

/* `flashgrad bench train ...`: the steady-state training step (bench/bench_train.c). */
int fg_bench_train(int argc, char **argv);
/* `flashgrad bench recompute ...`: what each recompute choice saves and costs per block, the
 * planner, and the measured trade-off (bench/bench_recompute.c). */
int fg_bench_recompute(int argc, char **argv);

/* bench train's flag defaults for a task (train's, cli/train_defaults.h) with the benchmark's
 * optimizer settings (lr 1e-3 -> 1e-4, no warm-up), for the flags of cli/train_flags.h. */
void fg_bench_train_defaults(fg_flag *f, const fg_train_defaults *d);
/* bench train's --synthetic-vocab V dataset: uniform tokens from Philox, no file. Caller frees
 * (fg_source_free); NULL with fg_last_error() when out of memory. */
fg_source *fg_bench_synth_source(int V);

/* `flashgrad bench attention ...`: naive against flash attention (bench/bench_attention.c). */
int fg_bench_attention(int argc, char **argv);
/* `flashgrad bench matmul ...`: a GPT's float32 products with each CPU kernel (bench/bench_matmul.c). */
int fg_bench_matmul(int argc, char **argv);

/* `flashgrad bench peak ...`: the float32 FMA peak and memory bandwidth (bench/bench_peak.c). */
int fg_bench_peak(int argc, char **argv);

/* Warm-up calls of one GEMM shape before it is timed: at most FG_BENCH_GEMM_WARM_CALLS, and no
 * more once they have taken FG_BENCH_GEMM_WARM_SECONDS. oneDNN's sgemm allocates its packing
 * workspace in every call, and glibc's per-thread arenas give a thread fresh pages for it in its
 * first calls of a shape (up to about ten), each first touch a page fault: those calls are slower
 * than the steady state a training step runs in, and one warm-up call would time them. */
#define FG_BENCH_GEMM_WARM_CALLS 10
#define FG_BENCH_GEMM_WARM_SECONDS 1.0

/* qsort's comparison of two doubles, ascending (for medians of timings). */
int fg_bench_cmp_double(const void *a, const void *b);

#endif /* FG_BENCH_H */
