/* test_devices.c — which devices the CPU build holds and how the flashgrad program asks for one:
 * fg_device_built / fg_device_start (ops/kernels.h) in a program without the cuda/ objects, and
 * every command's --device cuda in such a build, a usage error (2) in one line that says why.
 * (tests/cuda/test_runtime.c checks the CUDA build's side.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/kernels.h"
#include "tests/common.h"

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
