/* elementwise.c — add, sub, mul, div with NumPy broadcasting; add_scalar, mul_scalar.
 *
 * Legend: a and b are any two shapes that broadcast (aligned at the right; a size-1 or missing dim
 * stretches), out has the broadcast shape, e.g. a (B, T, C) + b (C) -> out (B, T, C).
 *
 * Forward reads a and b through broadcast strides (0 along stretched dims), so neither is copied
 * or expanded. Backward is the forward's derivative summed over every output element that read
 * a given input element: an input's gradient buffer is walked with the same broadcast strides, so
 * the += of all those elements lands on the one element they came from (a reduction over the
 * broadcast dims, in output order).
 *
 * Every kernel is the row iterator (ops_internal.h) plus an inner loop with fast cases for the
 * contiguous and "one side is one value per row" layouts. float32 forwards and the add / sub
 * backward walk the iterator in pieces (ops/cpu/vmath.h: on the thread pool when big), unit-stride
 * rows through the vector kernels there, which compute the same single operation per element.
 */
#include <string.h>

#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"
#include "ops/ops_internal.h"

/* ---- kernels ---- */

/* out = EXPR(x, y), x from a and y from b, over the iterator (operands: out, a, b). */
#define BINARY_FWD_BODY(T, EXPR)                                                                                       \
    while (fg_iter_next(it)) {                                                                                         \
        T *o = out + it->off[0];                                                                                       \
        const T *pa = a + it->off[1], *pb = b + it->off[2];                                                            \
        int64_t so = it->inner[0], sa = it->inner[1], sb = it->inner[2], n = it->n;                                    \
        if (so == 1 && sa == 1 && sb == 1) {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T x = pa[i], y = pb[i];                                                                                \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else if (so == 1 && sa == 1 && sb == 0) {                                                                    \
            T y = pb[0];                                                                                               \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T x = pa[i];                                                                                           \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else if (so == 1 && sa == 0 && sb == 1) {                                                                    \
            T x = pa[0];                                                                                               \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T y = pb[i];                                                                                           \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T x = pa[i * sa], y = pb[i * sb];                                                                      \
                o[i * so] = (EXPR);                                                                                    \
            }                                                                                                          \
        }                                                                                                              \
    }

/* g += EXPR(d, p, q) over the iterator (operands: g, dy, p, q). g may have stride 0 along the row
 * (its input was broadcast there): then the row is summed first and added once. */
#define BINARY_BWD_BODY(T, EXPR)                                                                                       \
    while (fg_iter_next(it)) {                                                                                         \
        T *pg = g + it->off[0];                                                                                        \
        const T *pd = dy + it->off[1], *pp = P + it->off[2], *pq = Q + it->off[3];                                     \
        int64_t sg = it->inner[0], sd = it->inner[1], sp = it->inner[2], sq = it->inner[3], n = it->n;                 \
        if (sg == 1 && sd == 1 && sp == 1 && sq == 1) {                                                                \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T d = pd[i], p = pp[i], q = pq[i];                                                                     \
                (void)p, (void)q;                                                                                      \
                pg[i] += (EXPR);                                                                                       \
            }                                                                                                          \
        } else if (sg == 0) {                                                                                          \
            T acc = 0;                                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T d = pd[i * sd], p = pp[i * sp], q = pq[i * sq];                                                      \
                (void)p, (void)q;                                                                                      \
                acc += (EXPR);                                                                                         \
            }                                                                                                          \
            pg[0] += acc;                                                                                              \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T d = pd[i * sd], p = pp[i * sp], q = pq[i * sq];                                                      \
                (void)p, (void)q;                                                                                      \
                pg[i * sg] += (EXPR);                                                                                  \
            }                                                                                                          \
        }                                                                                                              \
    }

/* out = EXPR(x, s) with a scalar s (operands: out, a). */
#define SCALAR_FWD_BODY(T, EXPR)                                                                                       \
    T s = (T)s_;                                                                                                       \
    while (fg_iter_next(it)) {                                                                                         \
        T *o = out + it->off[0];                                                                                       \
        const T *pa = a + it->off[1];                                                                                  \
        int64_t so = it->inner[0], sa = it->inner[1], n = it->n;                                                       \
        if (so == 1 && sa == 1)                                                                                        \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T x = pa[i];                                                                                           \
                o[i] = (EXPR);                                                                                         \
            }                                                                                                          \
        else                                                                                                           \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                T x = pa[i * sa];                                                                                      \
                o[i * so] = (EXPR);                                                                                    \
            }                                                                                                          \
    }

/* the forward kernels and the add / sub backward: float64 here, float32 below (in pieces) */
static void add_fwd_f64(double *out, const double *a, const double *b, fg_iter *it) { BINARY_FWD_BODY(double, x + y); }
static void sub_fwd_f64(double *out, const double *a, const double *b, fg_iter *it) { BINARY_FWD_BODY(double, x - y); }
static void mul_fwd_f64(double *out, const double *a, const double *b, fg_iter *it) { BINARY_FWD_BODY(double, x *y); }
static void div_fwd_f64(double *out, const double *a, const double *b, fg_iter *it) { BINARY_FWD_BODY(double, x / y); }
/* add (a and b), sub (a) */
static void plus_bwd_f64(double *g, const double *dy, const double *P, const double *Q, fg_iter *it) {
    BINARY_BWD_BODY(double, d);
}
/* sub (b) */
static void minus_bwd_f64(double *g, const double *dy, const double *P, const double *Q, fg_iter *it) {
    BINARY_BWD_BODY(double, -d);
}
static void adds_fwd_f64(double *out, const double *a, double s_, fg_iter *it) { SCALAR_FWD_BODY(double, x + s); }
static void muls_fwd_f64(double *out, const double *a, double s_, fg_iter *it) { SCALAR_FWD_BODY(double, x *s); }
/* the mul and div backward, both dtypes */
/* mul: p is the other input */
static void times_bwd_f32(float *g, const float *dy, const float *P, const float *Q, fg_iter *it) {
    BINARY_BWD_BODY(float, d *p);
}
/* div (a): p = b */
static void over_bwd_f32(float *g, const float *dy, const float *P, const float *Q, fg_iter *it) {
    BINARY_BWD_BODY(float, d / p);
}
/* div (b): p = b, q = a */
static void quot_bwd_f32(float *g, const float *dy, const float *P, const float *Q, fg_iter *it) {
    BINARY_BWD_BODY(float, -d *q / (p * p));
}
/* mul: p is the other input */
static void times_bwd_f64(double *g, const double *dy, const double *P, const double *Q, fg_iter *it) {
    BINARY_BWD_BODY(double, d *p);
}
/* div (a): p = b */
static void over_bwd_f64(double *g, const double *dy, const double *P, const double *Q, fg_iter *it) {
    BINARY_BWD_BODY(double, d / p);
}
/* div (b): p = b, q = a */
static void quot_bwd_f64(double *g, const double *dy, const double *P, const double *Q, fg_iter *it) {
    BINARY_BWD_BODY(double, -d *q / (p * p));
}

/* ---- float32: the same loops in pieces (ops/cpu/vmath.h), unit-stride rows through the vector
 * kernels; every path does the same single operation per element, so the bits do not depend on
 * it ---- */

typedef struct {
    int kind; /* FG_VOP_ADD .. FG_VOP_DIV (= fg_binary_op); for the backward: the sign, +1 or -1 */
    float *o;
    const float *a, *b;
} vjob;

static inline float vop1(int kind, float x, float y) {
    switch (kind) {
    case FG_VOP_ADD:
        return x + y;
    case FG_VOP_SUB:
        return x - y;
    case FG_VOP_MUL:
        return x * y;
    default:
        return x / y;
    }
}

/* out = a ∘ b over a piece (operands: out, a, b) */
static void binary_rows_f32(void *ctx, fg_iter *it) {
    const vjob *j = ctx;
    while (fg_iter_next(it)) {
        float *o = j->o + it->off[0];
        const float *pa = j->a + it->off[1], *pb = j->b + it->off[2];
        const int64_t so = it->inner[0], sa = it->inner[1], sb = it->inner[2], n = it->n;
        if (so == 1 && sa == 1 && sb == 1)
            fg_vbinary_f32(j->kind, o, pa, pb, n);
        else if (so == 1 && sa == 1 && sb == 0)
            fg_vbinary_scalar_f32(j->kind, o, pa, pb[0], n);
        else
            for (int64_t i = 0; i < n; i++) o[i * so] = vop1(j->kind, pa[i * sa], pb[i * sb]);
    }
}

/* g += sign * dy over a piece (operands: g, dy; the add and sub rules). A row along which g has
 * stride 0 is summed first, as in BINARY_BWD_BODY. */
static void plus_rows_f32(void *ctx, fg_iter *it) {
    const vjob *j = ctx;
    const float sign = (float)j->kind;
    while (fg_iter_next(it)) {
        float *g = j->o + it->off[0];
        const float *d = j->a + it->off[1];
        const int64_t sg = it->inner[0], sd = it->inner[1], n = it->n;
        if (sg == 1 && sd == 1) {
            fg_vaxpy_f32(g, sign, d, n);
        } else if (sg == 0) {
            float acc = 0;
            for (int64_t i = 0; i < n; i++) acc += sign * d[i * sd];
            g[0] += acc;
        } else {
            for (int64_t i = 0; i < n; i++) g[i * sg] += sign * d[i * sd];
        }
    }
}

/* fg_binary_op numbers the ops as FG_VOP_* does: the float32 path hands it to fg_vbinary_f32 */
_Static_assert((int)FG_BINARY_ADD == FG_VOP_ADD && (int)FG_BINARY_SUB == FG_VOP_SUB &&
                   (int)FG_BINARY_MUL == FG_VOP_MUL && (int)FG_BINARY_DIV == FG_VOP_DIV,
               "fg_binary_op and FG_VOP_* differ");

/* ---- the CPU kernels (ops/kernels.h) ---- */

fg_status fg_cpu_elementwise_forward(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa,
                                     const void *b, const int64_t *sb, int nd, const int64_t *shape) {
    int64_t st[3][FG_MAX_DIMS];
    fg_contig_strides(nd, shape, st[0]);
    memcpy(st[1], sa, (size_t)nd * sizeof(int64_t));
    memcpy(st[2], sb, (size_t)nd * sizeof(int64_t));
    fg_iter it;
    fg_iter_init(&it, nd, shape, 3, st);
    if (dt == FG_F32) {
        vjob j = {op, out, a, b}; /* out is contiguous: pieces never meet; ~0.2 ns per element */
        fg_par_iter(&it, 1, 0.2, binary_rows_f32, &j);
    } else
        switch (op) {
        case FG_BINARY_ADD:
            add_fwd_f64(out, a, b, &it);
            break;
        case FG_BINARY_SUB:
            sub_fwd_f64(out, a, b, &it);
            break;
        case FG_BINARY_MUL:
            mul_fwd_f64(out, a, b, &it);
            break;
        default:
            div_fwd_f64(out, a, b, &it);
            break;
        }
    return FG_OK;
}

fg_status fg_cpu_elementwise_backward(fg_binary_rule rule, fg_dtype dt, void *g, int g_nd, const int64_t *g_shape,
                                      const void *dout, const void *p, const int64_t *sp, const void *q,
                                      const int64_t *sq, int nd, const int64_t *shape) {
    int64_t st[4][FG_MAX_DIMS], gs[FG_MAX_DIMS];
    /* g is contiguous with its input's shape; read it with that input's broadcast into out's shape */
    fg_contig_strides(g_nd, g_shape, gs);
    fg_broadcast_strides(g_nd, g_shape, gs, nd, shape, st[0]);
    fg_contig_strides(nd, shape, st[1]);
    memcpy(st[2], sp, (size_t)nd * sizeof(int64_t));
    memcpy(st[3], sq, (size_t)nd * sizeof(int64_t));
    if (dt == FG_F32 && (rule == FG_BINARY_RULE_PLUS || rule == FG_BINARY_RULE_MINUS)) {
        fg_iter it2;
        fg_iter_init(&it2, nd, shape, 2, st);
        vjob j = {rule == FG_BINARY_RULE_MINUS ? -1 : 1, g, dout, NULL};
        /* in pieces only when g is not broadcast (its rows then never meet); ~0.2 ns per element */
        fg_par_iter(&it2, fg_no_broadcast(nd, shape, st[0]), 0.2, plus_rows_f32, &j);
        return FG_OK;
    }
    fg_iter it;
    fg_iter_init(&it, nd, shape, 4, st);
    switch (rule) { /* plus and minus: float64 here */
    case FG_BINARY_RULE_PLUS:
        plus_bwd_f64(g, dout, p, q, &it);
        break;
    case FG_BINARY_RULE_MINUS:
        minus_bwd_f64(g, dout, p, q, &it);
        break;
    case FG_BINARY_RULE_TIMES:
        FG_DISPATCH(dt, times_bwd, g, dout, p, q, &it);
        break;
    case FG_BINARY_RULE_OVER:
        FG_DISPATCH(dt, over_bwd, g, dout, p, q, &it);
        break;
    default:
        FG_DISPATCH(dt, quot_bwd, g, dout, p, q, &it);
        break;
    }
    return FG_OK;
}

fg_status fg_cpu_elementwise_scalar(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa, int nd,
                                    const int64_t *shape, double s) {
    const int is_mul = op == FG_BINARY_MUL;
    int64_t st[3][FG_MAX_DIMS] = {{0}}; /* out, a; float32 also reads s as an operand of stride 0 */
    fg_contig_strides(nd, shape, st[0]);
    memcpy(st[1], sa, (size_t)nd * sizeof(int64_t));
    fg_iter it;
    fg_iter_init(&it, nd, shape, dt == FG_F32 ? 3 : 2, st);
    if (dt == FG_F32) {
        float sf = (float)s;
        vjob j = {is_mul ? FG_VOP_MUL : FG_VOP_ADD, out, a, &sf};
        fg_par_iter(&it, 1, 0.2, binary_rows_f32, &j); /* out is contiguous: pieces never meet */
    } else if (is_mul) {
        muls_fwd_f64(out, a, s, &it);
    } else {
        adds_fwd_f64(out, a, s, &it);
    }
    return FG_OK;
}

/* ============================================================================================
 * binary ops: out = a ∘ b with broadcasting
 * ============================================================================================ */

static const char *const op_names[] = {"add", "sub", "mul", "div"};

/* Backward rules, from the forward lines
 *   add: out = a + b   ->  da += dout,            db += dout
 *   sub: out = a - b   ->  da += dout,            db -= dout
 *   mul: out = a * b   ->  da += dout * b,        db += dout * a
 *   div: out = a / b   ->  da += dout / b,        db -= dout * a / b²
 * each summed over the broadcast dims of its input. The rule reads the inputs themselves. */
static fg_status binary_backward(fg_node *n, fg_binary_op kind) {
    fg_tensor *a = n->inputs[0], *b = n->inputs[1], *ga = NULL, *gb;
    int fresh[2] = {0, 0}; /* a gradient buffer made here, unset: written instead of added into */
    /* add: da = dout, so a's gradient can be dout itself when a has none yet (a residual stream's) */
    int taken = 0;
    if (kind == FG_BINARY_ADD) FG_TRY(fg_grad_take_output_grad(n, a, &taken));
    if (!taken) FG_TRY(fg_grad_get_fresh(a, &ga, &fresh[0]));
    FG_TRY(fg_grad_get_fresh(b, &gb, &fresh[1]));
    if (!ga && !gb) return FG_OK;
    const fg_kernels *k = fg_kernels_for(a->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dy = fg_op_grad_out(n);
    if (!dy) return fg_last_status();
    const int nd = dy->ndim;
    const int64_t *shape = dy->shape;
    int64_t sp[FG_MAX_DIMS], sq[FG_MAX_DIMS];
    fg_status st = FG_OK;
    for (int side = 0; side < 2 && st == FG_OK; side++) {
        fg_tensor *g = side ? gb : ga, *self = side ? b : a, *other = side ? a : b;
        if (!g) continue;
        if (fresh[side] && kind == FG_BINARY_ADD && fg_same_shape(g, dy)) { /* a residual's da = dout */
            st = fg_copy_into(g, dy);
            continue;
        }
        if (fresh[side] && (st = fg_fill(g, 0)) != FG_OK) break;
        fg_binary_rule rule;
        const fg_tensor *p = other, *q = self;
        switch (kind) {
        case FG_BINARY_ADD:
            rule = FG_BINARY_RULE_PLUS;
            break;
        case FG_BINARY_SUB:
            rule = side ? FG_BINARY_RULE_MINUS : FG_BINARY_RULE_PLUS;
            break;
        case FG_BINARY_MUL:
            rule = FG_BINARY_RULE_TIMES;
            break;
        default:
            if (side) { /* db -= dout * a / b²: p = b, q = a */
                rule = FG_BINARY_RULE_QUOT;
                p = self;
                q = other;
            } else {
                rule = FG_BINARY_RULE_OVER; /* da += dout / b: p = b */
            }
            break;
        }
        fg_broadcast_strides(p->ndim, p->shape, p->strides, nd, shape, sp);
        fg_broadcast_strides(q->ndim, q->shape, q->strides, nd, shape, sq);
        st = k->elementwise.backward(rule, dy->dtype, fg_data(g), g->ndim, g->shape, fg_data(dy), fg_data(p), sp,
                                     fg_data(q), sq, nd, shape);
    }
    fg_release(dy);
    return st;
}
static fg_status add_backward(fg_node *n) { return binary_backward(n, FG_BINARY_ADD); }
static fg_status sub_backward(fg_node *n) { return binary_backward(n, FG_BINARY_SUB); }
static fg_status mul_backward(fg_node *n) { return binary_backward(n, FG_BINARY_MUL); }
static fg_status div_backward(fg_node *n) { return binary_backward(n, FG_BINARY_DIV); }

static fg_tensor *binary(fg_binary_op kind, fg_tensor *a, fg_tensor *b) {
    const char *op = op_names[kind];
    if (fg_op_check(op, "a", a) != FG_OK || fg_op_check_like(op, "b", b, "a", a) != FG_OK) return NULL;
    int nd;
    int64_t shape[FG_MAX_DIMS];
    if (fg_broadcast_shape(op, a, b, &nd, shape) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(a->device, op);
    if (!k) return NULL;
    if (!k->elementwise.forward || !k->elementwise.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    fg_tensor *out = fg_empty(a->dtype, a->device, nd, shape);
    if (!out) return NULL;
    int64_t sa[FG_MAX_DIMS], sb[FG_MAX_DIMS];
    fg_broadcast_strides(a->ndim, a->shape, a->strides, nd, shape, sa);
    fg_broadcast_strides(b->ndim, b->shape, b->strides, nd, shape, sb);
    if (k->elementwise.forward(kind, a->dtype, fg_data(out), fg_data(a), sa, fg_data(b), sb, nd, shape) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    static const fg_backward_fn rules[] = {add_backward, sub_backward, mul_backward, div_backward};
    fg_record(out, op, rules[kind], 2, (fg_tensor *[]){a, b}); /* a and b are the node's inputs */
    return out;
}

fg_tensor *fg_add(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_ADD, a, b); }
fg_tensor *fg_sub(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_SUB, a, b); }
fg_tensor *fg_mul(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_MUL, a, b); }
fg_tensor *fg_div(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_DIV, a, b); }

/* ============================================================================================
 * scalar ops: out = a + s, out = a * s
 * ============================================================================================ */

/* What the backward needs: the factor of dout, 1 for add_scalar and s for mul_scalar. */
typedef struct {
    double alpha;
} scalar_state;

/* forward: out = a + s  ->  da += dout;   forward: out = a * s  ->  da += s * dout */
static fg_status scalar_backward(fg_node *n) {
    const scalar_state *s = FG_NODE_STATE(n, scalar_state);
    fg_tensor *ga;
    FG_TRY(fg_grad_get(n->inputs[0], &ga));
    if (!ga) return FG_OK;
    fg_tensor *dy = fg_op_grad_out(n);
    fg_status st = dy ? fg_op_add_into(ga, dy, s->alpha) : fg_last_status();
    fg_release(dy);
    return st;
}

static fg_tensor *scalar(const char *op, fg_binary_op kind, fg_tensor *a, double s) {
    if (fg_op_check(op, "a", a) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(a->device, op);
    if (!k) return NULL;
    if (!k->elementwise.scalar) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }
    fg_tensor *out = fg_empty(a->dtype, a->device, a->ndim, a->shape);
    if (!out) return NULL;
    if (k->elementwise.scalar(kind, a->dtype, fg_data(out), fg_data(a), a->strides, a->ndim, a->shape, s) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    fg_node *node = fg_record(out, op, scalar_backward, 1, (fg_tensor *[]){a});
    if (node) FG_NODE_STATE(node, scalar_state)->alpha = kind == FG_BINARY_MUL ? s : 1.0;
    return out;
}

fg_tensor *fg_add_scalar(fg_tensor *a, double s) { return scalar("add_scalar", FG_BINARY_ADD, a, s); }
fg_tensor *fg_mul_scalar(fg_tensor *a, double s) { return scalar("mul_scalar", FG_BINARY_MUL, a, s); }
