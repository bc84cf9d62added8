/* test_kernel_caps.c — the op shells ask the tensors' device for each kernel they use (ops/kernels.h):
 * a device whose table leaves a member NULL gets the op refused with FG_ERR_DEVICE, "op X: not
 * supported on <device>", before anything is allocated or read. The device here is FG_CUDA with a
 * test table registered in its slot (each Criterion test runs in its own process) and CPU tensors
 * relabelled as cuda ones, which the ops must not touch. */
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops.h"
#include "tests/common.h"

TestSuite(kernel_caps, .timeout = 60);

static const fg_kernels no_kernels = {.device = "testdev"};

static fg_tensor *on_testdev(fg_tensor *t) {
    t->device = FG_CUDA;
    return t;
}

typedef struct {
    fg_tensor *a23, *b34, *w43, *v4;
} fx;

#define ROW(name, expr)                                                                                                \
    static fg_tensor *name(fx *f) {                                                                                    \
        (void)f;                                                                                                       \
        return (expr);                                                                                                 \
    }
static const int32_t ids[2] = {0, 1};
ROW(row_matmul, fg_matmul(f->a23, f->b34))
ROW(row_linear, fg_linear(f->a23, f->w43, f->v4))
ROW(row_add, fg_add(f->a23, f->a23))
ROW(row_sub, fg_sub(f->a23, f->a23))
ROW(row_mul, fg_mul(f->a23, f->a23))
ROW(row_div, fg_div(f->a23, f->a23))
ROW(row_add_scalar, fg_add_scalar(f->a23, 1.0))
ROW(row_mul_scalar, fg_mul_scalar(f->a23, 2.0))
ROW(row_sum, fg_sum(f->a23, 1, 0))
ROW(row_mean, fg_mean(f->a23, 0, 1))
ROW(row_sum_all, fg_sum_all(f->a23))
ROW(row_mean_all, fg_mean_all(f->a23))
ROW(row_embedding, fg_embedding(f->w43, ids, 1, (const int64_t[]){2}))

static const struct {
    fg_tensor *(*call)(fx *);
    const char *msg;
} rows[] = {
    {row_matmul, "op matmul: not supported on testdev"},
    {row_linear, "op linear: not supported on testdev"},
    {row_add, "op add: not supported on testdev"},
    {row_sub, "op sub: not supported on testdev"},
    {row_mul, "op mul: not supported on testdev"},
    {row_div, "op div: not supported on testdev"},
    {row_add_scalar, "op add_scalar: not supported on testdev"},
    {row_mul_scalar, "op mul_scalar: not supported on testdev"},
    {row_sum, "op sum: not supported on testdev"},
    {row_mean, "op mean: not supported on testdev"},
    {row_sum_all, "op sum_all: not supported on testdev"},
    {row_mean_all, "op mean_all: not supported on testdev"},
    {row_embedding, "op embedding: not supported on testdev"},
};

Test(kernel_caps, an_op_whose_kernel_the_device_lacks_is_refused_naming_op_and_device) {
    fg_register_kernels(FG_CUDA, &no_kernels);
    fx f = {
        .a23 = on_testdev(fgt_rand(FG_F64, FGT_DIMS(2, 3), 1)),
        .b34 = on_testdev(fgt_rand(FG_F64, FGT_DIMS(3, 4), 2)),
        .w43 = on_testdev(fgt_rand(FG_F64, FGT_DIMS(4, 3), 3)),
        .v4 = on_testdev(fgt_rand(FG_F64, FGT_DIMS(4), 4)),
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        fg_clear_error();
        fg_tensor *out = rows[r].call(&f);
        cr_expect_null(out, "row %zu (%s): expected NULL", r, rows[r].msg);
        fg_release(out);
        cr_expect_eq(fg_last_status(), FG_ERR_DEVICE, "row %zu: status %d, expected FG_ERR_DEVICE", r,
                     (int)fg_last_status());
        cr_expect(strstr(fg_last_error(), rows[r].msg) != NULL, "row %zu: message \"%s\" lacks \"%s\"", r,
                  fg_last_error(), rows[r].msg);
    }
    fg_release(f.a23);
    fg_release(f.b34);
    fg_release(f.w43);
    fg_release(f.v4);
}

/* The views need no kernel of their own: on a device that is started (it has a table) they work,
 * and only their backward asks for the device's add_into. */
Test(kernel_caps, views_work_on_any_started_device) {
    fg_register_kernels(FG_CUDA, &no_kernels);
    fg_tensor *t = on_testdev(fgt_rand(FG_F64, FGT_DIMS(2, 3), 5));
    fg_tensor *v = fg_transpose(t, 0, 1);
    cr_assert_not_null(v, "transpose on a started device: %s", fg_last_error());
    cr_expect_eq(v->device, FG_CUDA);
    cr_expect_eq(v->shape[0], 3);
    fg_tensor *s = fg_slice(v, 0, 1, 3);
    cr_expect_not_null(s, "slice on a started device: %s", fg_last_error());
    fg_release(s);
    fg_release(v);
    fg_release(t);
}
