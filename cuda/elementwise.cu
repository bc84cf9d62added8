/* elementwise.cu — add, sub, mul, div with NumPy broadcasting; add_scalar, mul_scalar; add_into.
 *
 * CPU reference: ops/elementwise.c (same rules; its backward table is repeated below).
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
#include "cuda/cuda_ops.h"

/* forward and backward expressions, as in ops/elementwise.c */
enum { F_ADD, F_SUB, F_MUL, F_DIV };
enum { R_PLUS, R_MINUS, R_TIMES, R_OVER, R_QUOT };

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
template <typename T>
__global__ void scalar_kernel(T *out, const T *a, fg_cu_layout La, int64_t n, T s, int is_mul) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        T x = a[fg_cu_offset(k, La.ndim, La.shape, La.stride)];
        out[k] = is_mul ? x * s : x + s;
    }
}

/* ============================================================================================
 * host side
 * ============================================================================================ */

static const char *const op_names[] = {"add", "sub", "mul", "div"};

/* t's strides read as if t had the broadcast shape (nd, shape): aligned at the right, 0 where t
 * is missing the dim or has size 1 there (ops_common.c's fg_broadcast_strides). */
static void bcast_strides(const fg_tensor *t, int nd, const int64_t *shape, int64_t *out) {
    for (int i = 0; i < nd; i++) {
        int it = i - (nd - t->ndim);
        out[i] = (it >= 0 && t->shape[it] == shape[i]) ? t->strides[it] : 0;
    }
}

static fg_cu_layout bcast_layout(const fg_tensor *t, int nd, const int64_t *shape) {
    fg_cu_layout L;
    memset(&L, 0, sizeof L);
    L.ndim = nd;
    for (int i = 0; i < nd; i++) L.shape[i] = shape[i];
    bcast_strides(t, nd, shape, L.stride);
    return L;
}

static void contig_strides(int nd, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

template <typename T>
static fg_status binary_fwd(int kind, fg_tensor *out, const fg_tensor *a, const fg_tensor *b) {
    int nd = out->ndim;
    int64_t n = fg_numel(out);
    if (n == 0) return FG_OK;
    fg_cu_layout La = bcast_layout(a, nd, out->shape), Lb = bcast_layout(b, nd, out->shape);
    int contiguous = fg_same_shape(a, out) && fg_same_shape(b, out) && fg_is_contiguous(a) && fg_is_contiguous(b);
    const T *pa = (const T *)fg_data(a), *pb = (const T *)fg_data(b);
    T *po = (T *)fg_data(out);
    unsigned nb = fg_cu_blocks(n);
    cudaStream_t s = fg_cu_stream();
    switch (kind) {
    case F_ADD: binary_kernel<T, F_ADD><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous); break;
    case F_SUB: binary_kernel<T, F_SUB><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous); break;
    case F_MUL: binary_kernel<T, F_MUL><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous); break;
    default: binary_kernel<T, F_DIV><<<nb, FG_CU_THREADS, 0, s>>>(po, pa, La, pb, Lb, n, contiguous); break;
    }
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* g (self's shape, contiguous) += Σ_stretched RULE(dy, p, q) with p and q read through their
 * broadcast strides into dy's shape */
template <typename T>
static fg_status binary_bwd_side(int rule, fg_tensor *g, const fg_tensor *dy, const fg_tensor *self, const fg_tensor *p,
                                 const fg_tensor *q) {
    int nd = dy->ndim;
    int64_t ng = fg_numel(g);
    if (ng == 0) return FG_OK;
    int64_t sd[FG_MAX_DIMS], sp[FG_MAX_DIMS], sq[FG_MAX_DIMS];
    contig_strides(nd, dy->shape, sd);
    bcast_strides(p, nd, dy->shape, sp);
    bcast_strides(q, nd, dy->shape, sq);
    bwd_space S;
    memset(&S, 0, sizeof S);
    S.nred = 1;
    for (int i = 0; i < nd; i++) {
        int is = i - (nd - self->ndim);
        int64_t self_size = is >= 0 ? self->shape[is] : 1;
        if (self_size == dy->shape[i]) { /* kept: one of self's own dims (or size 1 in both) */
            S.kshape[S.nk] = dy->shape[i];
            S.kd[S.nk] = sd[i];
            S.kp[S.nk] = sp[i];
            S.kq[S.nk] = sq[i];
            S.nk++;
        } else { /* stretched: summed over */
            S.rshape[S.nr] = dy->shape[i];
            S.rd[S.nr] = sd[i];
            S.rp[S.nr] = sp[i];
            S.rq[S.nr] = sq[i];
            S.nred *= dy->shape[i];
            S.nr++;
        }
    }
    T *pg = (T *)fg_data(g);
    const T *pd = (const T *)fg_data(dy), *pp = (const T *)fg_data(p), *pq = (const T *)fg_data(q);
    unsigned nb = fg_cu_blocks(ng);
    cudaStream_t s = fg_cu_stream();
    switch (rule) {
    case R_PLUS: binary_bwd_kernel<T, R_PLUS><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng); break;
    case R_MINUS: binary_bwd_kernel<T, R_MINUS><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng); break;
    case R_TIMES: binary_bwd_kernel<T, R_TIMES><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng); break;
    case R_OVER: binary_bwd_kernel<T, R_OVER><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng); break;
    default: binary_bwd_kernel<T, R_QUOT><<<nb, FG_CU_THREADS, 0, s>>>(pg, pd, pp, pq, S, ng); break;
    }
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* Backward rules, from the forward lines (as in ops/elementwise.c)
 *   add: out = a + b   ->  da += dout,            db += dout
 *   sub: out = a - b   ->  da += dout,            db -= dout
 *   mul: out = a * b   ->  da += dout * b,        db += dout * a
 *   div: out = a / b   ->  da += dout / b,        db -= dout * a / b²
 * each summed over the broadcast dims of its input. */
static fg_status binary_backward(fg_node *n, int kind) {
    fg_tensor *a = n->inputs[0], *b = n->inputs[1];
    fg_tensor *ga = fg_grad_buffer(a), *gb = fg_grad_buffer(b);
    if (!ga && !gb) return FG_OK;
    fg_tensor *dy = fg_cu_grad_out(n);
    if (!dy) return fg_last_status();
    fg_status st = FG_OK;
    for (int side = 0; side < 2 && st == FG_OK; side++) {
        fg_tensor *g = side ? gb : ga, *self = side ? b : a, *other = side ? a : b;
        if (!g) continue;
        int rule;
        const fg_tensor *p = other, *q = self;
        switch (kind) {
        case F_ADD: rule = R_PLUS; break;
        case F_SUB: rule = side ? R_MINUS : R_PLUS; break;
        case F_MUL: rule = R_TIMES; break;
        default:
            if (side) { /* db -= dout * a / b²: p = b, q = a */
                rule = R_QUOT;
                p = self;
                q = other;
            } else {
                rule = R_OVER; /* da += dout / b: p = b */
            }
            break;
        }
        st = FG_CU_DISPATCH(dy->dtype, binary_bwd_side, rule, g, dy, self, p, q);
    }
    fg_release(dy);
    return st;
}
static fg_status add_backward(fg_node *n) { return binary_backward(n, F_ADD); }
static fg_status sub_backward(fg_node *n) { return binary_backward(n, F_SUB); }
static fg_status mul_backward(fg_node *n) { return binary_backward(n, F_MUL); }
static fg_status div_backward(fg_node *n) { return binary_backward(n, F_DIV); }

extern "C" fg_tensor *fg_cuda_binary(int kind, fg_tensor *a, fg_tensor *b) {
    if (kind < F_ADD || kind > F_DIV) {
        fg_error(FG_ERR_ARG, "cuda binary: unknown kind %d", kind);
        return NULL;
    }
    const char *op = op_names[kind];
    if (fg_cu_require(op) != FG_OK) return NULL;
    /* the broadcast shape (the caller has checked that a and b broadcast) */
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[FG_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            fg_error(FG_ERR_SHAPE, "%s: shapes do not broadcast (dim %d: %lld vs %lld)", op, i, (long long)sa,
                     (long long)sb);
            return NULL;
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    fg_tensor *out = fg_empty(a->dtype, FG_CUDA, nd, shape);
    if (!out) return NULL;
    if (FG_CU_DISPATCH(a->dtype, binary_fwd, kind, out, a, b) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    static const fg_backward_fn rules[] = {add_backward, sub_backward, mul_backward, div_backward};
    fg_tensor *inputs[2] = {a, b};
    fg_record(out, op, rules[kind], 2, inputs);
    return out;
}

/* ---- scalar ops: out = a + s, out = a * s            (fargs[0] = s) ---- */

/* forward: out = a + s  ->  da += dout;   forward: out = a * s  ->  da += s * dout */
static fg_status scalar_backward(fg_node *n) {
    fg_tensor *ga = fg_grad_buffer(n->inputs[0]);
    if (!ga) return FG_OK;
    fg_tensor *dy = fg_cu_grad_out(n);
    fg_status st = dy ? fg_cuda_add_into(ga, dy, n->iargs[0] ? n->fargs[0] : 1.0) : fg_last_status();
    fg_release(dy);
    return st;
}

template <typename T>
static fg_status scalar_fwd(fg_tensor *out, const fg_tensor *a, double s, int is_mul) {
    int64_t n = fg_numel(out);
    if (n == 0) return FG_OK;
    fg_cu_layout La = bcast_layout(a, a->ndim, a->shape);
    scalar_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out), (const T *)fg_data(a),
                                                                           La, n, (T)s, is_mul);
    FG_CU_LAUNCHED();
    return FG_OK;
}

static fg_tensor *scalar(const char *op, int is_mul, fg_tensor *a, double s) {
    if (fg_cu_require(op) != FG_OK) return NULL;
    fg_tensor *out = fg_empty(a->dtype, FG_CUDA, a->ndim, a->shape);
    if (!out) return NULL;
    if (FG_CU_DISPATCH(a->dtype, scalar_fwd, out, a, s, is_mul) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    fg_tensor *inputs[1] = {a};
    fg_node *node = fg_record(out, op, scalar_backward, 1, inputs);
    if (node) {
        node->fargs[0] = s;
        node->iargs[0] = is_mul;
    }
    return out;
}

extern "C" fg_tensor *fg_cuda_add_scalar(fg_tensor *a, double s) { return scalar("add_scalar", 0, a, s); }
extern "C" fg_tensor *fg_cuda_mul_scalar(fg_tensor *a, double s) { return scalar("mul_scalar", 1, a, s); }

/* ---- dst += alpha * src (any strides): the tensor backend's axpy of cuda/runtime.cu ---- */
extern "C" fg_status fg_cuda_add_into(fg_tensor *dst, const fg_tensor *src, double alpha) {
    FG_TRY(fg_cu_require("accumulate"));
    if (dst->device != FG_CUDA || src->device != FG_CUDA)
        return fg_error(FG_ERR_DEVICE, "accumulate: %s into %s: both must be on cuda", fg_device_name(src->device),
                        fg_device_name(dst->device));
    return fg_axpy(dst, alpha, src);
}
