/* common.h — helpers shared by the Criterion tests: random tensors, one comparison helper that
 * reports the largest absolute and relative error and the first bad element, and a gradcheck
 * wrapper that asserts and prints the report.
 *
 * Everything here asserts with Criterion (cr_assert) on failure, so a test reads as a list of
 * steps. Names start with fgt_ (flashgrad test) to stay clear of the library's fg_ and of the
 * static helpers inside individual test files.
 *
 * Set FG_TEST_VERBOSE=1 to have fgt_gradcheck print one line per check ("gradcheck <what>:
 * max_abs ... max_rel ..."), e.g. to collect the largest errors per op.
 */
#ifndef FG_TESTS_COMMON_H
#define FG_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "ops/attention.h"
#include "tensor/tensor.h"
#include "train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `ndim, shape` for the fg_ creation functions: fg_zeros(FG_F64, FG_CPU, FGT_DIMS(2, 3)). */
#define FGT_DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((const int64_t[]){__VA_ARGS__})

/* 1 when FG_SANITIZE is set (make sanitize): tests shrink their largest cases. */
int fgt_sanitize(void);
/* 1 when FG_TEST_VERBOSE is set. */
int fgt_verbose(void);

/* Assert t is not NULL (printing fg_last_error() otherwise) and return it. */
fg_tensor *fgt_ok(fg_tensor *t, const char *what);

/* Uniform in (lo, hi] from Philox (seed, stream 0); asserts success. CPU. */
fg_tensor *fgt_uniform(fg_dtype dt, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed);
/* Uniform in (-1, 1]. */
fg_tensor *fgt_rand(fg_dtype dt, int ndim, const int64_t *shape, uint64_t seed);
/* fgt_rand with requires_grad set (a leaf). */
fg_tensor *fgt_leaf(fg_dtype dt, int ndim, const int64_t *shape, uint64_t seed);
/* Poisons the caching allocator: makes FGT_POISON_BLOCKS CPU tensors of this dtype and shape, fills
 * them with NaN and releases them, so that the next tensors of that size get NaN-filled storage
 * (fg_alloc hands cached blocks out again); their data pointers go to ptrs. For tests that a buffer
 * left unset is written before it is read. */
#define FGT_POISON_BLOCKS 8
void fgt_poison_cache(fg_dtype dt, int ndim, const int64_t *shape, void *ptrs[FGT_POISON_BLOCKS]);
/* Whether p is one of fgt_poison_cache's pointers. */
int fgt_poisoned(const void *p, void *const ptrs[FGT_POISON_BLOCKS]);
/* A CPU tensor with the given values (C order, n = numel). */
fg_tensor *fgt_from(fg_dtype dt, int ndim, const int64_t *shape, const double *values);
/* The elements of t in C order as a malloc'd double array (caller frees). */
double *fgt_values(const fg_tensor *t);

/* ---- comparison ---- */
typedef struct {
    int64_t n;         /* elements compared */
    double max_abs;    /* max |actual - expected| */
    double max_rel;    /* max |actual - expected| / |expected| over |expected| > 0 */
    int64_t n_bad;     /* elements outside atol + rtol * |expected| (NaN vs number is bad) */
    int64_t first_bad; /* flat C-order index of the first bad element, -1 if none */
    double bad_actual, bad_expected;
    /* Tolerance-free view (what the attention tests bound themselves): */
    double ref_max;    /* max |expected| over the elements where both sides are finite */
    int64_t nonfinite; /* elements where a side is NaN or the sides are not the same infinity
                           * (two NaNs count here, unlike in n_bad); max_abs is +inf when > 0 */
    int64_t worst;     /* index of the first non-finite element if any, else of the first
                           * largest |actual - expected|; -1 when nothing was compared */
    double worst_actual, worst_expected;
} fgt_cmp;

/* Compare actual (any strides) with expected values (C order, n of them). Equal infinities and
 * two NaNs count as equal for n_bad. */
fgt_cmp fgt_compare_buf(const fg_tensor *actual, const double *expected, int64_t n, double atol, double rtol);
/* Compare two tensors of the same numel (any dtypes and strides). */
fgt_cmp fgt_compare(const fg_tensor *actual, const fg_tensor *expected, double atol, double rtol);

/* max_abs relative to the reference's scale: max_abs / ref_max (ref_max 0 counts as 1). */
double fgt_rel_err(fgt_cmp c);

/* Assert closeness; the message names `what`, the call site, the errors and the first bad index. */
void fgt_assert_close_at(const fg_tensor *actual, const fg_tensor *expected, double atol, double rtol, const char *what,
                         const char *file, int line);
void fgt_assert_close_buf_at(const fg_tensor *actual, const double *expected, int64_t n, double atol, double rtol,
                             const char *what, const char *file, int line);
#define FGT_ASSERT_CLOSE(actual, expected, atol, rtol, what)                                                           \
    fgt_assert_close_at((actual), (expected), (atol), (rtol), (what), __FILE__, __LINE__)
#define FGT_ASSERT_CLOSE_BUF(actual, expected, n, atol, rtol, what)                                                    \
    fgt_assert_close_buf_at((actual), (expected), (n), (atol), (rtol), (what), __FILE__, __LINE__)

/* ---- gradcheck ---- */
/* Run fg_gradcheck (atol, rtol 0 = its defaults) and assert that it ran and passed; on failure
 * print the whole report. Returns the report so callers can track the largest error. */
fg_gradcheck_report fgt_gradcheck_at(const char *what, fg_gradcheck_fn fn, fg_tensor *const *inputs, int n, void *user,
                                     double atol, double rtol, const char *file, int line);
#define FGT_GRADCHECK(what, fn, inputs, n, user)                                                                       \
    fgt_gradcheck_at((what), (fn), (inputs), (n), (user), 0.0, 0.0, __FILE__, __LINE__)

/* ---- leak checks ---- */
/* Bytes the CPU allocator has handed out and not taken back (fg_alloc_get_stats(FG_CPU).current). */
size_t fgt_alloc_current(void);

/* ---- attention ---- */
/* A (B, H, N, d) float tensor of normals with standard deviation std, from Philox (seed, stream). */
fg_tensor *fgt_randn4(fg_dtype dt, int64_t B, int64_t H, int64_t N, int64_t d, double std, uint64_t seed,
                      uint64_t stream);
/* O, lse and the three gradients of one fgt_run_attention (NULL where not computed). */
typedef struct {
    fg_tensor *o, *lse, *dq, *dk, *dv;
} fgt_attn_run;

/* One forward (and backward with dout) on leaf copies of q, k, v; asserts success. */
fgt_attn_run fgt_run_attention(fg_tensor *q, fg_tensor *k, fg_tensor *v, fg_tensor *dout, const fg_attn_opts *opts);
/* Release every tensor of r and zero it. */
void fgt_attn_run_free(fgt_attn_run *r);

/* ---- temporary directories ---- */
/* Create a fresh directory from the mkdtemp template tmpl (ending in XXXXXX) into dir (size n);
 * asserts success. */
void fgt_make_tmpdir(char *dir, size_t n, const char *tmpl);
/* Unlink the plain files directly in dir, then remove dir. */
void fgt_remove_tmpdir(const char *dir);

/* The flashgrad program under test: $FG_BIN (set by make test), else build/flashgrad. */
const char *fgt_bin(void);
/* Runs a shell command; returns its exit status (-1 if it could not run or died by a signal).
 * Its stdout (append 2>&1 for stderr) goes into log[0..logn) when log is not NULL. */
int fgt_run_cmd(const char *cmd, char *log, size_t logn);

/* Expects the run folders a and b to hold the same training state bit for bit: every tensor of
 * their model.safetensors and optimizer.safetensors (parameters, both AdamW moments, step, RNG). */
void fgt_expect_same_run_state(const char *a, const char *b);
/* The step of the checkpoint in the run folder run_dir (its optimizer.safetensors); asserts it reads. */
long long fgt_ckpt_step(const char *run_dir);
/* ---- tiny models ---- */
/* fg_gpt_default_config() with 2 layers, 2 heads and the given dtype, attention, width, block
 * size, vocabulary and dropout. */
fg_gpt_config fgt_tiny_gpt_config(fg_dtype dt, fg_attn_impl impl, int n_embd, int block_size, int vocab_size,
                                  double dropout);
/* A tiny training run on src: fgt_tiny_gpt_config(float32, flash, 16 wide, block T, src's
 * vocabulary, dropout 0.1); batch_size sequences, 2 micro-batches, `steps` steps, no periodic
 * evaluation, eval_iters batches per evaluation, seed; AdamW lr 3e-3 -> 3e-4 with steps / 4
 * warm-up steps and cosine decay over all the steps, betas (0.9, 0.99), eps 1e-8, weight decay
 * 0.1, grad clip 1. */
fg_train_config fgt_tiny_train_config(const fg_source *src, int T, int batch_size, int steps, int eval_iters,
                                      uint64_t seed);

/* ---- Python cross-checks ---- */
/* The interpreter the cross-checks run: Debian's, whose packages (python3-numpy, python3-torch)
 * the project documents. */
#define FGT_PYTHON "/usr/bin/python3"
/* Exit status by which a cross-check script says it cannot run (the reason on its output). */
#define FGT_PYTHON_CANNOT_RUN 77
/* Skip the current test visibly: one line "[skip] <what>: <why>" on stderr (shown without
 * --verbose) and cr_skip_test with the same text. Does not return. */
void fgt_skip(const char *what, const char *why);
/* Skip (fgt_skip) unless FGT_PYTHON exists and imports every module in `modules` (separated by
 * spaces, e.g. "numpy torch"); the line names the interpreter or the first missing module. */
void fgt_python_require(const char *what, const char *modules);
/* Same check without skipping: NULL when usable, else the reason (a static string). */
const char *fgt_python_missing(const char *modules);
/* Run "<env> FGT_PYTHON <script> <args> 2>&1" (env: NULL or "NAME='value' ..."), its output into
 * out[0..n); returns its exit status, -1 if it could not run or died by a signal. */
int fgt_python_run(const char *env, const char *script, const char *args, char *out, size_t n);

/* ---- pipes ---- */
/* A pipe that holds data[0..n) (n <= 65536, what a pipe buffers) with its write end closed, so a
 * reader gets the bytes, then end of file. Returns the read end (the caller closes it) and puts a
 * name that opens it, "/dev/fd/N" (a FIFO to fstat), into path; asserts success. */
int fgt_pipe_with(const void *data, size_t n, char *path, size_t pn);

/* ---- flash attention: bit identity across SIMD levels and thread counts ---- */
typedef struct {
    const char *name;
    int64_t B, H, Hkv, Nq, Nk, d;
    int causal, window, alibi; /* window: window_left 20, window_right 3 */
    double p, softcap;         /* dropout (seed 99), softcap */
    int bq, bk;                /* 0: the default blocks */
} fgt_flash_case;

/* For every case: flash forward and backward in dt (FG_F32, with lse_lo, or FG_F64) on random
 * inputs, first with the plain C forms on one thread (the reference), then at every SIMD level the
 * CPU has with 1, 2 and 3 threads; expects O, lse (and lse_lo), dQ, dK, dV bit-identical to the
 * reference, naming the case, level, threads, output and first differing element. Leaves the SIMD
 * level at the CPU's best and the pool at its default size. */
void fgt_flash_bit_identity(fg_dtype dt, const fgt_flash_case *cases, size_t n, uint64_t seed);

/* ---- the register-blocked tile products (ops/cpu/smallgemm.h) ---- */
/* n_cases random products in dt (FG_F32: fg_sgemm_small, FG_F64: fg_dgemm_small), m < max_m,
 * n < max_n (+ 64 every 7th case), k < 70, A plain or transposed, modes =, += and rowscale, rows
 * padded: the plain C level must match a long double triple loop within (k + 3) eps of the sum of
 * magnitudes and leave the padding untouched, and every vector level the CPU has must give its
 * bits. Leaves the SIMD level at the CPU's best. */
void fgt_small_gemm_check(fg_dtype dt, int n_cases, int64_t max_m, int64_t max_n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FG_TESTS_COMMON_H */
