/* test_fuzz_corpus.c — replays the fuzzers' seed corpora and every saved crash through the same
 * harnesses libFuzzer runs (tests/fuzz/fuzz_*.c), so a parser bug that was found once stays fixed.
 * A harness aborts on a violated property, which Criterion reports as a crash. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLVMFuzzerTestOneInput fuzz_npy_one
#include "tests/fuzz/fuzz_npy.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "tests/fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_dataset_one
#include "tests/fuzz/fuzz_dataset.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_meta_pkl_one
#include "tests/fuzz/fuzz_meta_pkl.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_bpe_one
#include "tests/fuzz/fuzz_bpe.c"
#undef LLVMFuzzerTestOneInput

typedef int (*harness)(const uint8_t *, size_t);

/* Feed every regular file of `dir` to h; returns how many files ran (0 if the folder is missing). */
static int replay_dir(const char *dir, harness h) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        uint8_t *buf = malloc(1 << 20);
        size_t len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        h(buf, len);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

Test(fuzz_corpus, npy_seeds_and_regressions_replay_cleanly) {
    int n = replay_dir("tests/fuzz/corpus/npy", fuzz_npy_one);
    n += replay_dir("tests/fuzz/regressions/npy", fuzz_npy_one);
    cr_expect_geq(n, 1, "no npy corpus found (tests run from the repo root)");
}

Test(fuzz_corpus, safetensors_seeds_and_regressions_replay_cleanly) {
    int n = replay_dir("tests/fuzz/corpus/safetensors", fuzz_safetensors_one);
    n += replay_dir("tests/fuzz/regressions/safetensors", fuzz_safetensors_one);
    cr_expect_geq(n, 1, "no safetensors corpus found");
}

Test(fuzz_corpus, dataset_seeds_and_regressions_replay_cleanly) {
    int n = replay_dir("tests/fuzz/corpus/dataset", fuzz_dataset_one);
    n += replay_dir("tests/fuzz/regressions/dataset", fuzz_dataset_one);
    cr_expect_geq(n, 1, "no dataset corpus found");
}

Test(fuzz_corpus, meta_pkl_seeds_and_regressions_replay_cleanly) {
    int n = replay_dir("tests/fuzz/corpus/meta_pkl", fuzz_meta_pkl_one);
    n += replay_dir("tests/fuzz/regressions/meta_pkl", fuzz_meta_pkl_one);
    cr_expect_geq(n, 1, "no meta_pkl corpus found");
}

Test(fuzz_corpus, bpe_seeds_and_regressions_replay_cleanly) {
    int n = replay_dir("tests/fuzz/corpus/bpe", fuzz_bpe_one);
    n += replay_dir("tests/fuzz/regressions/bpe", fuzz_bpe_one);
    cr_expect_gt(n, 0, "no bpe seeds found (run from the repo root)");
}
