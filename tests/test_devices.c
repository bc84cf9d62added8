/* test_devices.c — which devices the CPU build holds and how the flashgrad program asks for one:
 * fg_device_built / fg_device_start (ops/kernels.h) in a program without the cuda/ objects, and
 * every command's --device cuda in such a build, a usage error (2) in one line that says why; the
 * compute precision (ops/device.h): the CPU refuses bfloat16 mixed precision, in the library and
 * as `train --dtype bfloat16`, and `--dtype float32` is the default to the bit.
 * (tests/cuda/test_runtime.c checks the CUDA build's side, tests/cuda/test_train.c bfloat16.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/kernels.h"
#include "tests/common.h"
#include "train/trainer.h"

Test(devices, a_cpu_build_holds_the_cpu_and_says_cuda_is_missing) {
    cr_expect_eq(fg_device_built(FG_CPU), 1, "the CPU is always built in");
    cr_expect_eq(fg_device_built(FG_CUDA), 0, "the CPU test runner has no cuda/ objects, yet CUDA reads as built");
    cr_expect_eq(fg_device_start(FG_CPU), FG_OK, "the CPU failed to start: %s", fg_last_error());
    cr_expect_eq(fg_device_start(FG_CUDA), FG_ERR_DEVICE, "CUDA started in a build without it");
    cr_expect(strstr(fg_last_error(), "built without CUDA") != NULL, "message: %s", fg_last_error());
    fg_clear_error();
}

Test(devices, every_command_refuses_device_cuda_in_a_cpu_build_as_a_usage_error, .timeout = 120) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    static const char *const args[] = {
        "train --device cuda --steps 1 --out /nonexistent/fg_devices_test",
        "bench train --device cuda --steps 1 --warmup-steps 1",
        "bench attention --device cuda --n 16 --repeat 1",
        "gradcheck attention --device cuda",
        "attention --device cuda --q q.npy --k k.npy --v v.npy --out /nonexistent/fg_devices_test",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char cmd[1024], log[4096] = "";
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 </dev/null", fgt_bin(), args[i]);
        FILE *p = popen(cmd, "r");
        cr_assert(p, "popen failed");
        size_t n = fread(log, 1, sizeof log - 1, p);
        log[n] = '\0';
        int st = pclose(p);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(code, 2, "`flashgrad %s` exited %d, expected 2: %s", args[i], code, log);
        cr_expect(lines == 1 && strstr(log, "--device cuda") && strstr(log, "built without CUDA"),
                  "`flashgrad %s`: want one line naming --device cuda and why: %s", args[i], log);
    }
}

Test(devices, the_cpu_refuses_bfloat16_compute_and_stays_float32) {
    cr_expect_eq(fg_device_compute(FG_CPU), FG_COMPUTE_FULL, "the CPU does not start in float32");
    cr_expect_eq(fg_device_set_compute(FG_CPU, FG_COMPUTE_BF16), FG_ERR_DEVICE, "the CPU took bfloat16");
    cr_expect(strstr(fg_last_error(), "CPU has no bf16 kernels") != NULL, "message: %s", fg_last_error());
    cr_expect_eq(fg_device_compute(FG_CPU), FG_COMPUTE_FULL, "a refused setting changed the CPU's precision");
    cr_expect_eq(fg_device_set_compute(FG_CUDA, FG_COMPUTE_BF16), FG_ERR_DEVICE, "bfloat16 on cuda without cuda");
    cr_expect(strstr(fg_last_error(), "built without cuda") != NULL, "message: %s", fg_last_error());
    cr_expect_eq(fg_device_set_compute(FG_CPU, FG_COMPUTE_FULL), FG_OK, "%s", fg_last_error());
    cr_expect_eq(fg_device_set_compute(FG_CPU, (fg_compute)7), FG_ERR_ARG);
    cr_expect_eq(fg_compute_parse("bfloat16"), FG_COMPUTE_BF16);
    cr_expect_eq(fg_compute_parse("float32"), FG_COMPUTE_FULL);
    cr_expect_eq(fg_compute_parse("float16"), -1);
    cr_expect_str_eq(fg_compute_name(FG_COMPUTE_BF16), "bfloat16");
    /* a trainer asked for bfloat16 on the CPU: NULL and the reason, before anything is built */
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    cr_assert(src);
    fg_train_config c = {.batch_size = 2, .grad_accum = 1, .steps = 1, .eval_iters = 1, .seed = 1};
    c.model = fg_gpt_default_config();
    c.model.n_layer = 1, c.model.n_head = 2, c.model.n_embd = 16;
    c.model.block_size = fg_source_fixed_block(src);
    c.model.vocab_size = fg_source_vocab_size(src);
    c.model.compute = FG_COMPUTE_BF16;
    c.opt = (fg_adamw_config){.lr = 1e-3, .decay_steps = 1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_expect_null(tr, "a bfloat16 trainer was built on the CPU");
    cr_expect(strstr(fg_last_error(), "runs on cuda only") != NULL, "message: %s", fg_last_error());
    fg_trainer_free(tr);
    /* what the bf16 attention kernels cannot do is refused by the configuration check, on any device */
    c.model.n_embd = 24; /* head dim 12 */
    cr_expect_eq(fg_train_config_check(&c), FG_ERR_ARG, "a head dim of 12 passed under bfloat16");
    c.model.n_embd = 16;
    c.model.attn = FG_ATTN_NAIVE;
    cr_expect_eq(fg_train_config_check(&c), FG_ERR_ARG, "naive attention passed under bfloat16");
    fg_source_free(src);
    fg_clear_error();
}

/* `flashgrad ARGS` in `dir`: exit status, output (both streams) in log */
static int run_in(const char *dir, const char *args, char *log, size_t cap) {
    char cmd[2048], bin[1024];
    cr_assert(realpath(fgt_bin(), bin), "no flashgrad binary at %s", fgt_bin());
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1 </dev/null", dir, bin, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen failed");
    size_t n = fread(log, 1, cap - 1, p);
    log[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(devices, dtype_bfloat16_on_the_cpu_is_one_line_and_exit_2_and_float32_is_the_default, .timeout = 120) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char dir[] = "/tmp/fg_dtype_test_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    static const char *const refused[] = {
        "train --dtype bfloat16 --steps 1 --out run_bf16",
        "train --dtype=bfloat16 --device cpu --steps 1 --out run_bf16",
        "bench train --dtype bfloat16 --steps 1 --warmup-steps 1",
    };
    char log[4096];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int code = run_in(dir, refused[i], log, sizeof log);
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(code, 2, "`flashgrad %s` exited %d, expected 2: %s", refused[i], code, log);
        cr_expect(lines == 1 && strstr(log, "--dtype bfloat16") && strstr(log, "CPU has no bf16 kernels"),
                  "`flashgrad %s`: want one line naming --dtype bfloat16 and why: %s", refused[i], log);
    }
    char p[256];
    snprintf(p, sizeof p, "%s/run_bf16", dir);
    cr_expect_neq(access(p, F_OK), 0, "a refused run left %s behind", p);
    /* --dtype float32 is the default: the same run, the same checkpoint bytes */
    const char *base = "train --task addition --digits 2 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 4 --steps 3 "
                       "--eval-every 0 --eval-iters 1 --samples 0 --threads 1";
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s --out run_a", base);
    snprintf(b, sizeof b, "%s --dtype float32 --out run_b", base);
    cr_assert_eq(run_in(dir, a, log, sizeof log), 0, "%s", log);
    cr_assert_eq(run_in(dir, b, log, sizeof log), 0, "%s", log);
    char cmp[1024];
    snprintf(cmp, sizeof cmp, "cmp -s '%s/run_a/model.safetensors' '%s/run_b/model.safetensors'", dir, dir);
    cr_expect_eq(system(cmp), 0, "--dtype float32 trained other weights (or other metadata) than the default");
    snprintf(cmp, sizeof cmp, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmp), 0);
}
