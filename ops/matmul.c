/* matmul.c — matrix products: fg_matmul (batched) and fg_linear (x @ wᵀ + b), for every device,
 * through the device's GEMM kernel (ops/kernels.h); the CPU's (ops/cpu/matmul.c) runs on the
 * library's thread pool, through oneDNN, OpenBLAS or a register-blocked float32 kernel.
 *
 * Legend (outermost first):
 *   matmul: a is (..., M, K), b is (..., K, N) or (K, N) shared by every batch, out is (..., M, N)
 *   linear: x is (..., K), seen as R = prod(...) rows of K; w is (N, K) like torch.nn.Linear;
 *           bias is (N) or NULL; out is (..., N)
 *
 * How operands reach the GEMM without copies. BLAS (row-major) takes a matrix as a pointer, a
 * leading dimension and a transpose flag. A (rows, cols) view with unit column stride is NoTrans
 * with ld = row stride; a view with unit row stride (a transposed view of a contiguous matrix, e.g.
 * fg_transpose(k, -2, -1)) is Trans with ld = column stride. Batch dims may have any strides; we
 * step through them with the row iterator and call the GEMM once per row of batches (batches
 * one stride apart). Only views that fit neither layout (a sliced column, a broadcast stride of 0)
 * are copied (fg_op_contiguous). (The CPU's float32 tile kernel reads a transposed right operand B
 * through a transient transposed copy, K×N, taken and given back inside the call.)
 *
 * Batches are folded into one big GEMM when the layout allows it: with a shared (K, N) b, the
 * (..., M, K) rows of a are one (prod(...) * M, K) matrix when their strides chain (always, for a
 * contiguous a), which is what makes fg_linear a single GEMM over all B*T rows.
 */
#include <limits.h>
#include <string.h>

#include "ops/cpu/matmul.h"
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the CPU GEMM's kernel choice (ops/ops.h), kept in ops/cpu/matmul.c ---- */

fg_matmul_kernel fg_matmul_set_kernel(fg_matmul_kernel k) {
    return fg__matmul_set_kernel(k);
}

fg_matmul_kernel fg_matmul_auto_kernel(int64_t M, int64_t N, int64_t K, int ta) {
    return fg__matmul_auto_kernel(M, N, K, ta);
}

/* ---- GEMM operands ---- */

/* A (rows, cols) strided matrix as a row-major GEMM sees it. */
typedef struct {
    char *p; /* element (0, 0) of batch 0 */
    int tr;  /* 0: as it is, 1: transposed */
    int64_t ld;
    int64_t bstride[FG_MAX_DIMS]; /* elements from one batch to the next, per batch dim; 0 = shared */
} blas_mat;

/* Can a (rows, cols) matrix with strides (s_r, s_c) go to BLAS directly? Sets the flag and ld.
 * The stride of a size-1 dim never matters, so such dims accept any stride. */
static int blas_layout(int64_t rows, int64_t cols, int64_t s_r, int64_t s_c, int *tr, int64_t *ld) {
    int64_t need_n = cols > 1 ? cols : 1, need_t = rows > 1 ? rows : 1;
    if (rows == 0 || cols == 0) { /* nothing is read */
        *tr = 0;
        *ld = need_n;
        return 1;
    }
    /* NoTrans: element (i, j) at i*ld + j */
    int64_t ld_n = rows > 1 ? s_r : need_n;
    if ((cols <= 1 || s_c == 1) && ld_n >= need_n) {
        *tr = 0;
        *ld = ld_n;
        return 1;
    }
    /* Trans: element (i, j) at j*ld + i */
    int64_t ld_t = cols > 1 ? s_c : need_t;
    if ((rows <= 1 || s_r == 1) && ld_t >= need_t) {
        *tr = 1;
        *ld = ld_t;
        return 1;
    }
    return 0;
}

static int last2_ok(const fg_tensor *t) {
    int tr;
    int64_t ld;
    int nd = t->ndim;
    return blas_layout(t->shape[nd - 2], t->shape[nd - 1], t->strides[nd - 2], t->strides[nd - 1], &tr, &ld);
}

/* t itself (retained) if its last two dims go to BLAS as they are, else a contiguous copy. */
static fg_tensor *blas_ready(fg_tensor *t) { return last2_ok(t) ? fg_retain(t) : fg_op_contiguous(t); }

/* Can t (..., K) be seen as one (rows, K) matrix, NoTrans with row stride *rs? True when the last
 * dim has unit stride and the leading dims chain into one stride (always for a contiguous t). */
static int fold_rows(const fg_tensor *t, int64_t *rows, int64_t *rs) {
    int nd = t->ndim;
    int64_t K = nd ? t->shape[nd - 1] : 1, need = K > 1 ? K : 1;
    int64_t r = 1;
    for (int d = 0; d < nd - 1; d++) r *= t->shape[d];
    *rows = r;
    *rs = need;
    if (r == 0 || K == 0) return 1; /* nothing is read */
    if (K > 1 && t->strides[nd - 1] != 1) return 0;
    /* the leading dims of size > 1, innermost first, must step as one dim of stride `stride` */
    int64_t stride = -1, span = 1;
    for (int d = nd - 2; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (stride < 0)
            stride = t->strides[d];
        else if (t->strides[d] != stride * span)
            return 0;
        span *= t->shape[d];
    }
    if (stride < 0) return 1;    /* a single row */
    if (stride < need) return 0; /* rows overlap (e.g. a broadcast stride of 0) */
    *rs = stride;
    return 1;
}

/* The blas_mat of the last two dims of t (which must satisfy last2_ok); its batch dims are the
 * first nb dims of t, or shared (stride 0) when t has no batch dims. */
static blas_mat mat_of(const fg_tensor *t, int nb) {
    blas_mat m;
    memset(&m, 0, sizeof m);
    int nd = t->ndim;
    int ok = blas_layout(t->shape[nd - 2], t->shape[nd - 1], t->strides[nd - 2], t->strides[nd - 1], &m.tr, &m.ld);
    FG_ASSERT(ok, "matmul operand was not made BLAS-ready");
    m.p = fg_data(t);
    for (int d = 0; d < nb; d++) m.bstride[d] = (nd - 2 == nb) ? t->strides[d] : 0;
    return m;
}

/* The same memory read as the transposed matrix. */
static blas_mat mat_t(blas_mat m) {
    m.tr = !m.tr;
    return m;
}

/* A plain contiguous (rows, cols) matrix, e.g. a gradient buffer or the output. */
static blas_mat mat_contig(void *p, int64_t cols) {
    blas_mat m;
    memset(&m, 0, sizeof m);
    m.p = p;
    m.tr = 0;
    m.ld = cols > 1 ? cols : 1;
    return m;
}

/* ---- products through the device's GEMM ---- */

/* C (M, N) = A' (M, K) @ B' (K, N) + beta * C: one product, A' and B' as the blas_mats say. */
static fg_status gemm(const fg_kernels *k, fg_dtype dt, int64_t M, int64_t N, int64_t K, const char *A, int ta,
                      int64_t lda, const char *B, int tb, int64_t ldb, double beta, char *C, int64_t ldc) {
    return k->matmul.gemm(dt, ta, tb, M, N, K, 1.0, A, lda, 0, B, ldb, 0, beta, NULL, C, ldc, 0, 1);
}

/* For every batch index of bshape (nb dims):  C[b] (M, N) = A[b] @ B[b] + beta * C[b].
 * C's batch strides are cbs; with cbs all 0 and beta = 1, the batches sum into one C (in batch
 * order, so the result is repeatable). Each row of the batch iterator is one strided GEMM call. */
static fg_status gemm_batched(const fg_kernels *k, fg_dtype dt, int nb, const int64_t *bshape, int64_t M, int64_t N,
                              int64_t K, const blas_mat *A, const blas_mat *B, double beta, const blas_mat *C) {
    size_t esz = fg_dtype_size(dt);
    int64_t strides[3][FG_MAX_DIMS];
    memcpy(strides[0], A->bstride, sizeof strides[0]);
    memcpy(strides[1], B->bstride, sizeof strides[1]);
    memcpy(strides[2], C->bstride, sizeof strides[2]);
    fg_iter it;
    fg_iter_init(&it, nb, bshape, 3, strides);
    while (fg_iter_next(&it))
        FG_TRY(k->matmul.gemm(dt, A->tr, B->tr, M, N, K, 1.0, A->p + (size_t)it.off[0] * esz, A->ld, it.inner[0],
                              B->p + (size_t)it.off[1] * esz, B->ld, it.inner[1], beta, NULL,
                              C->p + (size_t)it.off[2] * esz, C->ld, it.inner[2], it.n));
    return FG_OK;
}

/* BLAS takes int sizes and leading dimensions. */
static fg_status check_blas_int(const char *op, const fg_tensor *t) {
    char b[FG_SHAPE_BUF];
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > INT_MAX || t->strides[d] > INT_MAX)
            return fg_error(FG_ERR_ARG, "%s: %s is too large for BLAS (sizes and strides must fit in int)", op,
                            FG_SHP(t, b));
    return FG_OK;
}

/* ============================================================================================
 * matmul: out (..., M, N) = a (..., M, K) @ b (..., K, N)
 * saved for backward: A, B = a, b as the GEMM saw them (the inputs themselves unless a copy was needed)
 * ============================================================================================ */

typedef struct {
    fg_tensor *a, *b; /* A, B */
} matmul_state;

static fg_status matmul_forward(const fg_kernels *k, fg_tensor *out, const fg_tensor *A, const fg_tensor *B) {
    int nb = out->ndim - 2;
    int64_t M = A->shape[A->ndim - 2], K = A->shape[A->ndim - 1], N = B->shape[B->ndim - 1];
    blas_mat mb = mat_of(B, nb), mo = mat_contig(fg_data(out), N);
    int64_t rows, rs;
    if (B->ndim == 2 && fold_rows(A, &rows, &rs)) /* shared b: all batches of a are one (rows, K) matrix */
        return gemm(k, out->dtype, rows, N, K, fg_data(A), 0, rs, mb.p, mb.tr, mb.ld, 0.0, mo.p, mo.ld);
    blas_mat ma = mat_of(A, nb);
    fg_contig_strides(nb, out->shape, mo.bstride);
    for (int d = 0; d < nb; d++) mo.bstride[d] *= M * N;
    return gemm_batched(k, out->dtype, nb, out->shape, M, N, K, &ma, &mb, 0.0, &mo);
}

static fg_status matmul_grads(const fg_kernels *k, fg_tensor *dA, fg_tensor *dB, fg_tensor *dC, const fg_tensor *A,
                              const fg_tensor *B) {
    fg_dtype dt = dC->dtype;
    int nb = dC->ndim - 2;
    int64_t M = A->shape[A->ndim - 2], K = A->shape[A->ndim - 1], N = B->shape[B->ndim - 1];
    int64_t bn = 1; /* number of batches */
    for (int d = 0; d < nb; d++) bn *= dC->shape[d];
    int shared_b = B->ndim == 2;
    blas_mat mdc = mat_contig(fg_data(dC), N);
    fg_contig_strides(nb, dC->shape, mdc.bstride);
    for (int d = 0; d < nb; d++) mdc.bstride[d] *= M * N;

    /* forward: C = A @ B  ->  dA (.., M, K) += dC (.., M, N) @ Bᵀ (.., N, K) */
    if (dA) {
        blas_mat mbt = mat_t(mat_of(B, nb));
        if (shared_b) { /* dA and dC are contiguous: all batches are one GEMM of bn*M rows */
            FG_TRY(gemm(k, dt, bn * M, K, N, mdc.p, 0, mdc.ld, mbt.p, mbt.tr, mbt.ld, 1.0, fg_data(dA), K > 1 ? K : 1));
        } else {
            blas_mat mda = mat_contig(fg_data(dA), K);
            fg_contig_strides(nb, dC->shape, mda.bstride);
            for (int d = 0; d < nb; d++) mda.bstride[d] *= M * K;
            FG_TRY(gemm_batched(k, dt, nb, dC->shape, M, K, N, &mdc, &mbt, 1.0, &mda));
        }
    }
    /* forward: C = A @ B  ->  dB (.., K, N) += Aᵀ (.., K, M) @ dC (.., M, N) */
    if (dB) {
        blas_mat mdb = mat_contig(fg_data(dB), N);
        int64_t rows, rs;
        if (shared_b && fold_rows(A, &rows, &rs)) {
            /* shared b sums over every batch: dB (K, N) += A_flatᵀ (K, rows) @ dC_flat (rows, N) */
            return gemm(k, dt, K, N, rows, fg_data(A), 1, rs, mdc.p, 0, mdc.ld, 1.0, mdb.p, mdb.ld);
        }
        blas_mat mat = mat_t(mat_of(A, nb));
        if (!shared_b) {
            fg_contig_strides(nb, dC->shape, mdb.bstride);
            for (int d = 0; d < nb; d++) mdb.bstride[d] *= K * N;
        } /* else: bstride 0, the batches accumulate into the one dB */
        return gemm_batched(k, dt, nb, dC->shape, K, N, M, &mat, &mdc, 1.0, &mdb);
    }
    return FG_OK;
}

static fg_status matmul_backward(fg_node *n) {
    const matmul_state *s = FG_NODE_STATE(n, matmul_state);
    fg_tensor *dA, *dB;
    FG_TRY(fg_grad_get(n->inputs[0], &dA));
    FG_TRY(fg_grad_get(n->inputs[1], &dB));
    if (!dA && !dB) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->a->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dC = fg_op_grad_out(n);
    if (!dC) return fg_last_status();
    fg_status st = matmul_grads(k, dA, dB, dC, s->a, s->b);
    fg_release(dC);
    return st;
}

fg_tensor *fg_matmul(fg_tensor *a, fg_tensor *b) {
    static const char op[] = "matmul";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "a", a) != FG_OK || fg_op_check_like(op, "b", b, "a", a) != FG_OK) return NULL;
    if (a->ndim < 2 || b->ndim < 2) {
        fg_error(FG_ERR_SHAPE, "%s: a %s and b %s need at least 2 dims", op, FG_SHP(a, b1), FG_SHP(b, b2));
        return NULL;
    }
    int nb = a->ndim - 2;
    int64_t M = a->shape[nb], K = a->shape[nb + 1], N = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != K) {
        fg_error(FG_ERR_SHAPE, "%s: inner dims differ: a %s, b %s", op, FG_SHP(a, b1), FG_SHP(b, b2));
        return NULL;
    }
    int batch_ok = b->ndim == 2 || b->ndim == a->ndim;
    for (int d = 0; batch_ok && b->ndim != 2 && d < nb; d++) batch_ok = a->shape[d] == b->shape[d];
    if (!batch_ok) {
        fg_error(FG_ERR_SHAPE, "%s: batch dims of a %s and b %s must be equal, or b must be 2-D", op, FG_SHP(a, b1),
                 FG_SHP(b, b2));
        return NULL;
    }
    if (check_blas_int(op, a) != FG_OK || check_blas_int(op, b) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(a->device, op);
    if (!k) return NULL;
    if (!k->matmul.gemm) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    int64_t shape[FG_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[nb] = M;
    shape[nb + 1] = N;
    fg_tensor *A = blas_ready(a), *B = A ? blas_ready(b) : NULL;
    fg_tensor *out = B ? fg_empty(a->dtype, a->device, a->ndim, shape) : NULL;
    if (out && matmul_forward(k, out, A, B) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_node *node = fg_record(out, op, matmul_backward, 2, (fg_tensor *[]){a, b});
        if (node) {
            matmul_state *s = FG_NODE_STATE(node, matmul_state);
            s->a = fg_node_keep(node, A);
            s->b = fg_node_keep(node, B);
        }
    }
    fg_release(A);
    fg_release(B);
    return out;
}

/* ============================================================================================
 * linear: out (R, N) = x (R, K) @ wᵀ (K, N) + bias (N)        (R = all leading dims of x)
 * saved for backward: X, W = x, w as the GEMM saw them
 * ============================================================================================ */

typedef struct {
    fg_tensor *x, *w; /* X, W */
} linear_state;

/* dx_fresh: dx is unset (fg_grad_get_fresh) and is written, not added into. */
static fg_status linear_grads(const fg_kernels *k, fg_tensor *dx, int dx_fresh, fg_tensor *dw, fg_tensor *db,
                              fg_tensor *dout, const fg_tensor *X, const fg_tensor *W) {
    fg_dtype dt = dout->dtype;
    int64_t N = W->shape[0], K = W->shape[1], R, rs;
    int ok = fold_rows(X, &R, &rs);
    FG_ASSERT(ok, "linear saved an x that is not a row matrix");
    blas_mat mw = mat_of(W, 0);
    int64_t ldo = N > 1 ? N : 1;

    /* forward: out = x @ wᵀ + bias  ->  dx (R, K) += dout (R, N) @ w (N, K)  (=, β = 0, when fresh) */
    if (dx)
        FG_TRY(gemm(k, dt, R, K, N, fg_data(dout), 0, ldo, mw.p, mw.tr, mw.ld, dx_fresh ? 0.0 : 1.0, fg_data(dx),
                    K > 1 ? K : 1));
    /* forward: out = x @ wᵀ + bias  ->  dw (N, K) += doutᵀ (N, R) @ x (R, K), one GEMM over all rows */
    if (dw) FG_TRY(gemm(k, dt, N, K, R, fg_data(dout), 1, ldo, fg_data(X), 0, rs, 1.0, fg_data(dw), K > 1 ? K : 1));
    /* forward: out = x @ wᵀ + bias  ->  dbias (N) += sum over rows of dout */
    if (db) FG_TRY(k->matmul.colsum(dt, fg_data(db), fg_data(dout), R, N));
    return FG_OK;
}

static fg_status linear_backward(fg_node *n) {
    const linear_state *s = FG_NODE_STATE(n, linear_state);
    fg_tensor *dx, *dw, *db;
    int dx_fresh;
    /* dx first: when it is fresh, linear_grads writes it before it touches dw or db (which could be
     * the same tensor's buffer, were x also w or bias) */
    FG_TRY(fg_grad_get_fresh(n->inputs[0], &dx, &dx_fresh));
    FG_TRY(fg_grad_get(n->inputs[1], &dw));
    FG_TRY(fg_grad_get(n->inputs[2], &db));
    if (!dx && !dw && !db) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = linear_grads(k, dx, dx_fresh, dw, db, dout, s->x, s->w);
    fg_release(dout);
    return st;
}

fg_tensor *fg_linear(fg_tensor *x, fg_tensor *w, fg_tensor *bias) {
    static const char op[] = "linear";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF], b3[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK || fg_op_check_like(op, "w", w, "x", x) != FG_OK) return NULL;
    if (bias && fg_op_check_like(op, "bias", bias, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1]) {
        fg_error(FG_ERR_SHAPE, "%s: x %s and w %s do not fit: need x (..., K) and w (N, K)", op, FG_SHP(x, b1),
                 FG_SHP(w, b2));
        return NULL;
    }
    int64_t N = w->shape[0], K = w->shape[1];
    if (bias && (bias->ndim != 1 || bias->shape[0] != N)) {
        fg_error(FG_ERR_SHAPE, "%s: bias %s does not fit w %s: need (%lld)", op, FG_SHP(bias, b3), FG_SHP(w, b2),
                 (long long)N);
        return NULL;
    }
    if (check_blas_int(op, x) != FG_OK || check_blas_int(op, w) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->matmul.gemm || (bias && !k->matmul.colsum)) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    int64_t R, rs;
    fg_tensor *X = fold_rows(x, &R, &rs) ? fg_retain(x) : fg_op_contiguous(x);
    fg_tensor *W = X ? blas_ready(w) : NULL;
    fg_tensor *Bc = (W && bias) ? fg_op_contiguous(bias) : NULL;
    int64_t shape[FG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    fg_tensor *out = (W && (Bc || !bias)) ? fg_empty(x->dtype, x->device, x->ndim, shape) : NULL;
    if (out) {
        int ok = fold_rows(X, &R, &rs);
        FG_ASSERT(ok, "a contiguous x must fold into rows");
        blas_mat mwt = mat_t(mat_of(W, 0));
        if (k->matmul.gemm(x->dtype, 0, mwt.tr, R, N, K, 1.0, fg_data(X), rs, 0, mwt.p, mwt.ld, 0, 0.0,
                           Bc ? fg_data(Bc) : NULL, fg_data(out), N > 1 ? N : 1, 0, 1) != FG_OK) {
            fg_release(out);
            out = NULL;
        }
    }
    if (out) {
        fg_node *node = fg_record(out, op, linear_backward, 3, (fg_tensor *[]){x, w, bias});
        if (node) {
            linear_state *s = FG_NODE_STATE(node, linear_state);
            s->x = fg_node_keep(node, X);
            s->w = fg_node_keep(node, W);
        }
    }
    fg_release(X);
    fg_release(W);
    fg_release(Bc);
    return out;
}
