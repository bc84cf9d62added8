/* main.c — the flashgrad command-line program: dispatches to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "ops/cpu.h"
#include "tensor/fileio.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"train", fg_cmd_train, "train a small GPT (synthetic task or a text file)"},
    {"sample", fg_cmd_sample, "generate text from a checkpoint"},
    {"export", fg_cmd_export, "write a model as a Hugging Face folder (GPT-2, Llama, NanoChat) or an llm.c model file"},
    {"eval", fg_cmd_eval, "train and validation loss of a checkpoint (writes nothing)"},
    {"attention", fg_cmd_attention, "run attention on .npy inputs, write O, lse and gradients"},
    {"gradcheck", fg_cmd_gradcheck, "gradient-check attention (naive vs finite differences, flash vs naive)"},
    {"bench", fg_cmd_bench, "benchmarks: train, attention, matmul, peak"},
    {"plot", fg_cmd_plot, "draw runs' loss, learning rate and MFU from their log.csv as a PNG"},
    {"prepare", fg_cmd_prepare, "text files to token files (nanoGPT's train.bin/val.bin or llm.c's shards) with a BPE tokenizer"},
    {"tokenizer", fg_cmd_tokenizer, "encode or decode text with a BPE tokenizer (Hugging Face or tiktoken files)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: flashgrad <command> [options]   (flashgrad <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return fg_stdout_close_check(NULL);
    }
    /* FG_NUM_THREADS sizes the pool of every command: a value it cannot take is a usage error, not
     * silently capped or ignored. */
    const char *nt = getenv("FG_NUM_THREADS");
    if (nt && *nt) {
        char *end;
        long v = strtol(nt, &end, 10);
        if (*end || v < 1 || v > FG_POOL_MAX_THREADS) {
            fprintf(stderr, "flashgrad: FG_NUM_THREADS='%s' must be a whole number from 1 to %d (the pool's most)\n",
                    nt, FG_POOL_MAX_THREADS);
            return 2;
        }
    }
    /* Exit 0 promises that the results reached their destination, stdout included: a command's
     * printed results that could not be written (a full disk, a closed pipe) make a success exit 1. */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            char prog[64];
            snprintf(prog, sizeof prog, "flashgrad %s", commands[i].name);
            fg_mapped_install_sigbus(prog); /* a mapped input truncated under us: one line, exit 1 */
            int rc = commands[i].run(argc - 1, argv + 1);
            if (fg_stdout_close_check(commands[i].name) != 0 && rc == 0) rc = 1;
            return rc;
        }
    fprintf(stderr, "flashgrad: unknown command '%s' (flashgrad --help lists them)\n", argv[1]);
    return 2;
}
