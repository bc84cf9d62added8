/* bench.c — `flashgrad bench <what>`: picks the benchmark; and what the benchmarks share
 * (bench/bench.h). */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/commands.h"

int fg_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *o = argc < 2 ? stderr : stdout;
        fprintf(o, "usage: flashgrad bench <train|recompute|attention|matmul|peak> [options]   (flashgrad bench <what> --help)\n"
                   "  train      steady-state training step time, tokens/s and allocator counters\n"
                   "  recompute  what each recompute choice saves and costs per block; planner; trade-off\n"
                   "  attention  naive against flash attention\n"
                   "  matmul     a GPT's float32 products with each CPU matmul kernel\n"
                   "  peak       this machine's float32 FMA peak and memory bandwidth on the pool's threads\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return fg_bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "recompute")) return fg_bench_recompute(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention")) return fg_bench_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "matmul")) return fg_bench_matmul(argc - 1, argv + 1);
    if (!strcmp(argv[1], "peak")) return fg_bench_peak(argc - 1, argv + 1);
    fprintf(stderr, "flashgrad bench: unknown benchmark '%s' (train, recompute, attention, matmul or peak)\n", argv[1]);
    return 2;
}

int fg_bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

