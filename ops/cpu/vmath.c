/* vmath.c — parallel ranges and the shared float32 array kernels (see vmath.h). */
#include "ops/cpu/vmath.h"

/* ---- parallel ranges ---- */

typedef struct {
    fg_range_fn fn;
    void *ctx;
    int64_t n, chunk;
} par_job;

static void par_item(void *c, int64_t item, int worker) {
    (void)worker;
    const par_job *j = c;
    const int64_t b = item * j->chunk, e = b + j->chunk < j->n ? b + j->chunk : j->n;
    j->fn(j->ctx, b, e);
}

static double par_min_ns = FG_PAR_MIN_NS;

double fg_par_set_min_ns(double ns) {
    const double old = par_min_ns;
    par_min_ns = ns < 0 ? FG_PAR_MIN_NS : ns;
    return old;
}

/* whether `pieces` pieces of `ns` nanoseconds of work in all are worth a pool run */
static int par_worth(int64_t pieces, double ns) {
    return pieces > 1 && ns >= par_min_ns && !fg_pool_in_run() && fg_pool_threads() > 1;
}

void fg_par_range(int64_t n, int64_t chunk, double ns_per_elem, fg_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    par_job job = {fn, ctx, n, chunk};
    const int64_t pieces = fg_par_pieces(n, chunk);
    if (par_worth(pieces, (double)n * ns_per_elem)) {
        fg_pool_run(pieces, par_item, &job, 0);
        return;
    }
    for (int64_t i = 0; i < pieces; i++) par_item(&job, i, 0);
}

/* ---- iterator pieces ---- */

typedef struct {
    const fg_iter *it;
    fg_rows_fn fn;
    void *ctx;
    int64_t rows_per, cols_per, col_pieces; /* col_pieces > 1: pieces of one row's columns */
} iter_job;

/* Position `it` (a copy of a fresh iterator) on row `row` of its outer dims, with `rows` to go. */
static void iter_seek(fg_iter *it, int64_t row, int64_t rows) {
    int64_t r = row;
    for (int d = it->ndim - 2; d >= 0; d--) {
        it->idx[d] = r % it->shape[d];
        r /= it->shape[d];
    }
    for (int k = 0; k < it->nops; k++) {
        it->off[k] = 0;
        for (int d = 0; d < it->ndim - 1; d++) it->off[k] += it->idx[d] * it->strides[k][d];
    }
    it->rows_left = rows;
    it->started = 0;
}

static void iter_piece(void *c, int64_t b, int64_t e) {
    const iter_job *j = c;
    for (int64_t p = b; p < e; p++) {
        fg_iter t = *j->it;
        if (j->col_pieces > 1) {
            const int64_t c0 = (p % j->col_pieces) * j->cols_per;
            iter_seek(&t, p / j->col_pieces, 1);
            t.n = t.n - c0 < j->cols_per ? t.n - c0 : j->cols_per;
            for (int k = 0; k < t.nops; k++) t.off[k] += c0 * t.inner[k];
        } else {
            const int64_t r0 = p * j->rows_per, left = j->it->rows_left - r0;
            iter_seek(&t, r0, left < j->rows_per ? left : j->rows_per);
        }
        j->fn(j->ctx, &t);
    }
}

void fg_par_iter(const fg_iter *it, int parallel, double ns_per_elem, fg_rows_fn fn, void *ctx) {
    const int64_t rows = it->rows_left, n = it->n;
    if (rows <= 0) return;
    iter_job j = {it, fn, ctx, 1, n, 1};
    if (n > FG_PAR_CHUNK) {
        j.cols_per = FG_PAR_CHUNK;
        j.col_pieces = fg_par_pieces(n, FG_PAR_CHUNK);
    } else {
        j.rows_per = fg_par_rows(n);
    }
    const int64_t pieces = j.col_pieces > 1 ? rows * j.col_pieces : fg_par_pieces(rows, j.rows_per);
    if (parallel && par_worth(pieces, ns_per_elem * (double)n * (double)rows)) {
        fg_pool_run(pieces, par_item, &(par_job){iter_piece, &j, pieces, 1}, 0);
        return;
    }
    fg_iter t = *it; /* serial: one pass over every row, no pieces */
    fn(ctx, &t);
}

int fg_no_broadcast(int ndim, const int64_t *shape, const int64_t *strides) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] > 1 && strides[d] == 0) return 0;
    return 1;
}

/* ---- array kernels ---- */

/* One element of y = a ∘ b: the scalar form of every level. */
static inline float vop(int op, float a, float b) {
    switch (op) {
    case FG_VOP_ADD:
        return a + b;
    case FG_VOP_SUB:
        return a - b;
    case FG_VOP_MUL:
        return a * b;
    default:
        return a / b;
    }
}

/* The levels share one body: OP is a compile-time constant in each instantiation (the switch on
 * `op` sits outside the loops), BS says whether b is one value (a scalar) or an array. */
#if FG_SIMD_X86
#define VOP512(op, x, y)                                                                                               \
    ((op) == FG_VOP_ADD   ? _mm512_add_ps(x, y)                                                                        \
     : (op) == FG_VOP_SUB ? _mm512_sub_ps(x, y)                                                                        \
     : (op) == FG_VOP_MUL ? _mm512_mul_ps(x, y)                                                                        \
                          : _mm512_div_ps(x, y))
#define VOP256(op, x, y)                                                                                               \
    ((op) == FG_VOP_ADD   ? _mm256_add_ps(x, y)                                                                        \
     : (op) == FG_VOP_SUB ? _mm256_sub_ps(x, y)                                                                        \
     : (op) == FG_VOP_MUL ? _mm256_mul_ps(x, y)                                                                        \
                          : _mm256_div_ps(x, y))

static inline __attribute__((always_inline)) FG_TARGET_AVX512 void
binary_avx512(const int op, const int bs, float *y, const float *a, const float *b, int64_t n) {
    int64_t i = 0;
    const __m512 vs = bs ? _mm512_set1_ps(b[0]) : _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, VOP512(op, _mm512_loadu_ps(a + i), bs ? vs : _mm512_loadu_ps(b + i)));
    if (i < n) {
        const __mmask16 m = fg_mask16(n - i);
        /* masked-off lanes compute on +0 and are not stored (0/0 raises no trap: exceptions are masked) */
        const __m512 vb = bs ? vs : _mm512_maskz_loadu_ps(m, b + i);
        _mm512_mask_storeu_ps(y + i, m, VOP512(op, _mm512_maskz_loadu_ps(m, a + i), vb));
    }
}
static inline __attribute__((always_inline)) FG_TARGET_AVX2 void
binary_avx2(const int op, const int bs, float *y, const float *a, const float *b, int64_t n) {
    int64_t i = 0;
    const __m256 vs = bs ? _mm256_set1_ps(b[0]) : _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, VOP256(op, _mm256_loadu_ps(a + i), bs ? vs : _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = vop(op, a[i], bs ? b[0] : b[i]);
}

/* the one-op kernel BINARY with op and bs as constants, so each case is its own loop */
#define BINARY_ALL_BODY(BINARY)                                                                                        \
    switch (op) {                                                                                                      \
    case FG_VOP_ADD:                                                                                                   \
        bs ? BINARY(FG_VOP_ADD, 1, y, a, b, n) : BINARY(FG_VOP_ADD, 0, y, a, b, n);                                    \
        break;                                                                                                         \
    case FG_VOP_SUB:                                                                                                   \
        bs ? BINARY(FG_VOP_SUB, 1, y, a, b, n) : BINARY(FG_VOP_SUB, 0, y, a, b, n);                                    \
        break;                                                                                                         \
    case FG_VOP_MUL:                                                                                                   \
        bs ? BINARY(FG_VOP_MUL, 1, y, a, b, n) : BINARY(FG_VOP_MUL, 0, y, a, b, n);                                    \
        break;                                                                                                         \
    default:                                                                                                           \
        bs ? BINARY(FG_VOP_DIV, 1, y, a, b, n) : BINARY(FG_VOP_DIV, 0, y, a, b, n);                                    \
        break;                                                                                                         \
    }
FG_TARGET_AVX512 static void binary_avx512_all(int op, int bs, float *y, const float *a, const float *b, int64_t n) {
    BINARY_ALL_BODY(binary_avx512);
}
FG_TARGET_AVX2 static void binary_avx2_all(int op, int bs, float *y, const float *a, const float *b, int64_t n) {
    BINARY_ALL_BODY(binary_avx2);
}

FG_TARGET_AVX512 static void axpy_avx512(float *y, float alpha, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, _mm512_loadu_ps(x + i))));
    if (i < n) {
        const __mmask16 m = fg_mask16(n - i);
        const __m512 t = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), t));
    }
}
FG_TARGET_AVX2 static void axpy_avx2(float *y, float alpha, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) y[i] += alpha * x[i];
}
FG_TARGET_AVX512 static void rows_avx512(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                         int64_t n, int add) {
    const __mmask16 tail = fg_mask16(n % 16);
    for (int64_t r = 0; r < rows; r++, dst += ldd, src += lds) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 x = _mm512_loadu_ps(src + i);
            _mm512_storeu_ps(dst + i, add ? _mm512_add_ps(_mm512_loadu_ps(dst + i), x) : x);
        }
        if (i < n) {
            const __m512 x = _mm512_maskz_loadu_ps(tail, src + i);
            _mm512_mask_storeu_ps(dst + i, tail, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(tail, dst + i), x) : x);
        }
    }
}
FG_TARGET_AVX2 static void rows_avx2(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t n,
                                     int add) {
    for (int64_t r = 0; r < rows; r++, dst += ldd, src += lds) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 x = _mm256_loadu_ps(src + i);
            _mm256_storeu_ps(dst + i, add ? _mm256_add_ps(_mm256_loadu_ps(dst + i), x) : x);
        }
        for (; i < n; i++) dst[i] = add ? dst[i] + src[i] : src[i];
    }
}
#endif /* FG_SIMD_X86 */

static void binary_scalar(int op, int bs, float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = vop(op, a[i], bs ? b[0] : b[i]);
}

static void binary_any(int op, int bs, float *y, const float *a, const float *b, int64_t n) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        binary_avx512_all(op, bs, y, a, b, n);
        return;
    case FG_SIMD_AVX2:
        binary_avx2_all(op, bs, y, a, b, n);
        return;
    default:
        break;
    }
#endif
    binary_scalar(op, bs, y, a, b, n);
}

void fg_vbinary_f32(int op, float *y, const float *a, const float *b, int64_t n) { binary_any(op, 0, y, a, b, n); }
void fg_vbinary_scalar_f32(int op, float *y, const float *a, float s, int64_t n) { binary_any(op, 1, y, a, &s, n); }

void fg_vaxpy_f32(float *y, float alpha, const float *x, int64_t n) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        axpy_avx512(y, alpha, x, n);
        return;
    case FG_SIMD_AVX2:
        axpy_avx2(y, alpha, x, n);
        return;
    default:
        break;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void fg_vrows_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t n, int add) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        rows_avx512(dst, ldd, src, lds, rows, n, add);
        return;
    case FG_SIMD_AVX2:
        rows_avx2(dst, ldd, src, lds, rows, n, add);
        return;
    default:
        break;
    }
#endif
    for (int64_t r = 0; r < rows; r++, dst += ldd, src += lds)
        for (int64_t i = 0; i < n; i++) dst[i] = add ? dst[i] + src[i] : src[i];
}
