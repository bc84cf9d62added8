/* elementwise.cu — add, sub, mul, div with NumPy broadcasting; add_scalar, mul_scalar; add_into:
 * the launchers of the elementwise and memory kernels of ops/kernels.h.
 *
 * CPU reference: ops/cpu/elementwise.c (same rules; the table of ops/kernels.h).
 *
 * Legend: a and b broadcast (aligned at the right; size-1 or missing dims stretch) to out's
 * shape, e.g. a (B, T, C) + b (C) -> out (B, T, C). Forward reads a and b through broadcast
 * strides (0 along stretched dims): nothing is expanded.
 *
 * Backward without atomics: the gradient of an input is a reduction of out-shaped terms over the
 * dims where that input was stretched. One thread owns one element of the input's gradient and
 * walks the stretched dims in C order (an odometer), so each element is summed in a fixed order
 * by one thread: deterministic, and in the CPU's order.
 */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

/* forward and backward expressions, as in ops/cpu/elementwise.c (fg_binary_op, fg_binary_rule) */
enum { F_ADD = FG_BINARY_ADD, F_SUB = FG_BINARY_SUB, F_MUL = FG_BINARY_MUL, F_DIV = FG_BINARY_DIV };
enum {
    R_PLUS = FG_BINARY_RULE_PLUS,
    R_MINUS = FG_BINARY_RULE_MINUS,
    R_TIMES = FG_BINARY_RULE_TIMES,
    R_OVER = FG_BINARY_RULE_OVER,
    R_QUOT = FG_BINARY_RULE_QUOT
};

template <typename T, int OP> __device__ __forceinline__ T fwd_op(T x, T y) {
    if (OP == F_ADD) return x + y;
    if (OP == F_SUB) return x - y;
    if (OP == F_MUL) return x * y;
    return x / y;
}
/* d = dout, p and q as the CPU rule defines them (p = the other input; div of b: p = b, q = a) */
template <typename T, int RULE> __device__ __forceinline__ T bwd_rule(T d, T p, T q) {
    if (RULE == R_PLUS) return d;
    if (RULE == R_MINUS) return -d;
    if (RULE == R_TIMES) return d * p;
    if (RULE == R_OVER) return d / p;
    return -d * q / (p * p);
}

/* The backward index space: out's dims split into kept dims (the input's own) and reduced dims
 * (stretched), each with the strides of dout, p and q along it. */
struct bwd_space {
    int nk, nr;
    int64_t kshape[FG_MAX_DIMS], kd[FG_MAX_DIMS], kp[FG_MAX_DIMS], kq[FG_MAX_DIMS];
    int64_t rshape[FG_MAX_DIMS], rd[FG_MAX_DIMS], rp[FG_MAX_DIMS], rq[FG_MAX_DIMS];
    int64_t nred; /* product of rshape */
};

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* out[k] = OP(a[k'], b[k'']) with out contiguous; La, Lb give a's and b's broadcast strides */
template <typename T, int OP>
__global__ void binary_kernel(T *out, const T *a, fg_cu_layout La, const T *b, fg_cu_layout Lb, int64_t n,
                              int contiguous) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        if (contiguous) {
            out[k] = fwd_op<T, OP>(a[k], b[k]);
        } else {
            int64_t oa = fg_cu_offset(k, La.ndim, La.shape, La.stride);
            int64_t ob = fg_cu_offset(k, Lb.ndim, Lb.shape, Lb.stride);
            out[k] = fwd_op<T, OP>(a[oa], b[ob]);
        }
    }
}

/* g[e] += Σ over the reduced dims of RULE(dout, p, q), one thread per element e of g */
template <typename T, int RULE>
__global__ void binary_bwd_kernel(T *g, const T *dy, const T *P, const T *Q, bwd_space S, int64_t ng) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < ng; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t od = 0, op = 0, oq = 0, k = e;
        for (int d = S.nk - 1; d >= 0; d--) {
            int64_t i = k % S.kshape[d];
            k /= S.kshape[d];
            od += i * S.kd[d];
            op += i * S.kp[d];
            oq += i * S.kq[d];
        }
        int64_t idx[FG_MAX_DIMS] = {0};
        T acc = 0;
        for (int64_t r = 0; r < S.nred; r++) {
            acc += bwd_rule<T, RULE>(dy[od], P[op], Q[oq]);
            for (int d = S.nr - 1; d >= 0; d--) { /* odometer over the reduced dims */
                od += S.rd[d];
                op += S.rp[d];
                oq += S.rq[d];
                if (++idx[d] < S.rshape[d]) break;
                od -= S.rd[d] * S.rshape[d];
                op -= S.rp[d] * S.rshape[d];
                oq -= S.rq[d] * S.rshape[d];
                idx[d] = 0;
            }
        }
        g[e] += acc;
    }
}

/* out[k] = a[k'] + s  or  a[k'] * s, out contiguous */
template <typename T> __global__ void scalar_kernel(T *out, const T *a, fg_cu_layout La, int64_t n, T s, int is_mul) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        T x = a[fg_cu_offset(k, La.ndim, La.shape, La.stride)];
        out[k] = is_mul ? x * s : x + s;
    }
}

/* y[k'] += alpha * x[k''] over a C-order index k (float32 scales by (float)alpha, as the CPU does) */
template <typename T>
__global__ void add_into_kernel(T *y, fg_cu_layout Ly, const T *x, fg_cu_layout Lx, int64_t n, T alpha) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t oy = fg_cu_offset(k, Ly.ndim, Ly.shape, Ly.stride);
        int64_t ox = fg_cu_offset(k, Lx.ndim, Lx.shape, Lx.stride);
        y[oy] += alpha * x[ox];
    }
}

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

static int64_t numel_of(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* A view of (nd, shape) read through `stride` (broadcast strides: 0 along stretched dims). */
static fg_cu_layout layout_of(int nd, const int64_t *shape, const int64_t *stride) {
    fg_cu_layout L;
    memset(&L, 0, sizeof L);
    L.ndim = nd;
    for (int i = 0; i < nd; i++) {
        L.shape[i] = shape[i];
        L.stride[i] = stride[i];
    }
    return L;
}

static void contig_strides(int nd, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

/* Does `stride` read (nd, shape) as a contiguous array (element k at k)? Size-1 dims never step. */
static int reads_contiguous(int nd, const int64_t *shape, const int64_t *stride) {
    int64_t st[FG_MAX_DIMS];
    contig_strides(nd, shape, st);
    for (int i = 0; i < nd; i++)
        if (shape[i] != 1 && stride[i] != st[i]) return 0;
    return 1;
}

template <typename T>
static fg_status binary_fwd(int kind, void *out, const void *a, const int64_t *sa, const void *b, const int64_t *sb,
                            int nd, const int64_t *shape) {
    int64_t n = numel_of(nd, shape);
    if (n == 0) return FG_OK;
    fg_cu_layout La = layout_of(nd, shape, sa), Lb = layout_of(nd, shape, sb);
    int contiguous = reads_contiguous(nd, shape, sa) && reads_contiguous(nd, shape, sb);
    const T *pa = (const T *)a, *pb = (const T *)b;
    T *po = (T *)out;
    unsigned nb = fg_cu_blocks(n);
    cudaStream_t s = fg_cu_stream();
    switch (kind) {
    case F_ADD:
        binary_kernel<T, F_ADD><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous);
        break;
    case F_SUB:
        binary_kernel<T, F_SUB><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous);
        break;
    case F_MUL:
        binary_kernel<T, F_MUL><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous);
        break;
    default:
        binary_kernel<T, F_DIV><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous);
        break;
    }
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* g (g_shape, contiguous) += Σ_stretched RULE(dy, p, q), dy contiguous with out's shape, p and q
 * read through their broadcast strides into it */
template <typename T>
static fg_status binary_bwd_side(int rule, void *g, int g_nd, const int64_t *g_shape, const void *dy, const void *p,
                                 const int64_t *sp, const void *q, const int64_t *sq, int nd, const int64_t *shape) {
    int64_t ng = numel_of(g_nd, g_shape);
    if (ng == 0) return FG_OK;
    int64_t sd[FG_MAX_DIMS];
    contig_strides(nd, shape, sd);
    bwd_space S;
    memset(&S, 0, sizeof S);
    S.nred = 1;
    for (int i = 0; i < nd; i++) {
        int is = i - (nd - g_nd);
        int64_t self_size = is >= 0 ? g_shape[is] : 1;
        if (self_size == shape[i]) { /* kept: one of the input's own dims (or size 1 in both) */
            S.kshape[S.nk] = shape[i];
            S.kd[S.nk] = sd[i];
            S.kp[S.nk] = sp[i];
            S.kq[S.nk] = sq[i];
            S.nk++;
        } else { /* stretched: summed over */
            S.rshape[S.nr] = shape[i];
            S.rd[S.nr] = sd[i];
            S.rp[S.nr] = sp[i];
            S.rq[S.nr] = sq[i];
            S.nred *= shape[i];
            S.nr++;
        }
    }
    T *pg = (T *)g;
    const T *pd = (const T *)dy, *pp = (const T *)p, *pq = (const T *)q;
    unsigned nb = fg_cu_blocks(ng);
    cudaStream_t s = fg_cu_stream();
    switch (rule) {
    case R_PLUS:
        binary_bwd_kernel<T, R_PLUS><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng);
        break;
    case R_MINUS:
        binary_bwd_kernel<T, R_MINUS><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng);
        break;
    case R_TIMES:
        binary_bwd_kernel<T, R_TIMES><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng);
        break;
    case R_OVER:
        binary_bwd_kernel<T, R_OVER><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng);
        break;
    default:
        binary_bwd_kernel<T, R_QUOT><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng);
        break;
    }
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status scalar_fwd(int is_mul, void *out, const void *a, const int64_t *sa, int nd, const int64_t *shape,
                            double s) {
    int64_t n = numel_of(nd, shape);
    if (n == 0) return FG_OK;
    scalar_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)out, (const T *)a,
                                                                            layout_of(nd, shape, sa), n, (T)s, is_mul);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status add_into(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides, int nd,
                          const int64_t *shape, double alpha) {
    int64_t n = numel_of(nd, shape);
    if (n == 0) return FG_OK;
    add_into_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)dst, layout_of(nd, shape, dst_strides), (const T *)src, layout_of(nd, shape, src_strides), n, (T)alpha);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_elementwise_forward(fg_binary_op op, fg_dtype dt, void *out, const void *a,
                                               const int64_t *sa, const void *b, const int64_t *sb, int nd,
                                               const int64_t *shape) {
    return FG_CU_DISPATCH(dt, binary_fwd, (int)op, out, a, sa, b, sb, nd, shape);
}

extern "C" fg_status fg_cu_elementwise_backward(fg_binary_rule rule, fg_dtype dt, void *g, int g_nd,
                                                const int64_t *g_shape, const void *dout, const void *p,
                                                const int64_t *sp, const void *q, const int64_t *sq, int nd,
                                                const int64_t *shape) {
    return FG_CU_DISPATCH(dt, binary_bwd_side, (int)rule, g, g_nd, g_shape, dout, p, sp, q, sq, nd, shape);
}

extern "C" fg_status fg_cu_elementwise_scalar(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa,
                                              int nd, const int64_t *shape, double s) {
    return FG_CU_DISPATCH(dt, scalar_fwd, op == FG_BINARY_MUL, out, a, sa, nd, shape, s);
}

extern "C" fg_status fg_cu_memory_add_into(fg_dtype dt, void *dst, const int64_t *dst_strides, const void *src,
                                           const int64_t *src_strides, int nd, const int64_t *shape, double alpha) {
    return FG_CU_DISPATCH(dt, add_into, dst, dst_strides, src, src_strides, nd, shape, alpha);
}
