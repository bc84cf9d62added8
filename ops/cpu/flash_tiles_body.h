/* flash_tiles_body.h — the tables of tile operations of CPU flash attention (ops/cpu/flash_tiles.h),
 * two per dtype: the portable one (BLAS tile products, libm's exp, the online softmax row by row),
 * and the x86 one's plain C forms and run-time dispatch (its vector forms: ops/cpu/flash_x86.c).
 *
 * A template body: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c include it once each, with
 * T the dtype; GEMM, EXP the portable table's product and exp; GEMM_SMALL, EXP_REF the x86 table's
 * (the register-blocked products, the vectorized exp's plain C form); X86_AVX512 whether the dtype
 * has AVX-512 forms (float32; float64 runs its AVX2 forms on AVX-512 CPUs); and the vector forms'
 * names (SOFTMAX_COLS_AVX2, ..., ROW_DOTS_AVX2, TRANSPOSE_AVX512). The instantiation defines the tables
 * fg_flash_portable_<dt> = FLASH_PORTABLE_TABLE and fg_flash_x86_<dt> = FLASH_X86_TABLE, and the
 * explicit fg_attn_online_update_<dt> and fg_flash_transpose_scalar_<dt> over online_update and
 * transpose_scalar.
 */
/* (no include guard: included once per dtype translation unit) */

/* BLAS with the table's rowscale; a no-op on empty sizes (BLAS wants leading dimensions >= 1 even
 * then) */
static void flash_gemm(int ta, int tb, int64_t m, int64_t n, int64_t kk, T alpha, const T *A, int64_t lda, const T *Bm,
                       int64_t ldb, T *C, int64_t ldc, const T *rowscale, int acc) {
    if (m == 0 || n == 0) return;
    if (acc && rowscale)
        for (int64_t r = 0; r < m; r++)
            if (rowscale[r] != 1)
                for (int64_t c = 0; c < n; c++) C[r * ldc + c] *= rowscale[r];
    const T beta = acc ? 1 : 0;
    if (kk == 0) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) C[r * ldc + c] = beta == 0 ? 0 : beta * C[r * ldc + c];
        return;
    }
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)kk, alpha,
         A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
}

static T online_update(T *m, T *l, T *s, int64_t n) {
    T m_old = *m, m_new = m_old;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > m_new) m_new = s[j];
    if (m_new == -INFINITY) { /* nothing seen yet: every weight is 0, nothing to rescale */
        T sum = 0;
        for (int64_t j = 0; j < n; j++) { /* each score -inf or NaN: a NaN stays, and makes l NaN */
            if (s[j] == -INFINITY) s[j] = 0;
            sum += s[j];
        }
        *l += sum;
        return 1;
    }
    /* exp(-inf - m') = 0, so the first block (m = -inf) gets alpha = 0 and l starts from 0 */
    T alpha = EXP(m_old - m_new), sum = 0;
    for (int64_t j = 0; j < n; j++) {
        s[j] = EXP(s[j] - m_new);
        sum += s[j];
    }
    *m = m_new;
    *l = alpha * *l + sum;
    return alpha;
}

/* the online softmax on the rows of S (nq × nk, row-major) */
static void softmax_rows(T *S, int64_t ld, int64_t nq, int64_t nk, T *m, T *l, T *alpha) {
    for (int64_t r = 0; r < nq; r++) alpha[r] = online_update(&m[r], &l[r], S + r * ld, nk);
}

/* P = exp((S − L_r) − lo_r) on the rows of S, with the exp ex: libm's (portable) or the vectorized
 * exp's plain C form (x86) */
static void exp_rows_with(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo, T (*ex)(T)) {
    for (int64_t r = 0; r < nq; r++) {
        T *row = S + r * ld;
        const T Lr = L[r], lr = lo ? lo[r] : 0;
        if (Lr == -INFINITY) { /* the row sees no key at all */
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = ex((row[j] - Lr) - lr);
    }
}

static void exp_rows_libm(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    exp_rows_with(S, ld, nq, nk, L, lo, EXP);
}

/* also the x86 table's plain C form: the same elementwise arithmetic */
static void flash_ds_rows(T *dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D) {
    for (int64_t r = 0; r < nq; r++) {
        T *dsrow = dS + r * ld;
        const T *prow = P + r * ld;
        const T Di = D[r];
        for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - Di);
    }
}

/* D_r = Σ_c a[r, c]·b[r, c] in double, each row's sum in column order; eight rows at a time, so
 * that eight independent chains of additions overlap (one chain alone waits on its own latency).
 * Also the x86 table's plain C form: its vector forms keep each row's order, so give these bits. */
static void flash_row_dots(T *D, const T *a, int64_t lda, const T *b, int64_t ldb, int64_t rows, int64_t d) {
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t c = 0; c < d; c++)
            for (int r = 0; r < 8; r++) s[r] += (double)a[(i + r) * lda + c] * (double)b[(i + r) * ldb + c];
        for (int r = 0; r < 8; r++) D[i + r] = (T)s[r];
    }
    for (; i < rows; i++) {
        double s = 0;
        for (int64_t c = 0; c < d; c++) s += (double)a[i * lda + c] * (double)b[i * ldb + c];
        D[i] = (T)s;
    }
}

#define FLASH_PORTABLE_TABLE                                                                                           \
    {                                                                                                                  \
        .packs = 0, .pool_flags = FG_POOL_BLAS_SERIAL, .gemm = flash_gemm, .softmax = softmax_rows,                    \
        .exp_rows = exp_rows_libm, .ds_rows = flash_ds_rows, .row_dots = flash_row_dots, .transpose = NULL             \
    }

/* ---- the x86 table: plain C forms and dispatch ---- */

/* the online softmax down the columns of Sᵀ.
 * ST is nk × nq (row j: key j0 + j; column r: query i0 + r), row stride ld. For every column r:
 *     m' = max(m_r, max_j ST[j][r]);  m̃ = m' (0 while m' = −inf, so that exp(−inf − m̃) = 0)
 *     ST[j][r] = exp(ST[j][r] − m̃);  alpha_r = exp(m_r − m̃);  l_r = alpha_r·l_r + Σ_j ST[j][r]
 * (the sum in key order j = 0, 1, ...), m_r = m'. The same step as fg_attn_online_update, with the
 * vectorized exp; alpha is 0 rather than 1 while a row has seen no key (O and l are 0 then). */
static void softmax_cols_scalar(T *ST, int64_t ld, int64_t nk, int64_t r0, int64_t r1, T *m, T *l, T *alpha) {
    for (int64_t r = r0; r < r1; r++) {
        T mx = m[r];
        for (int64_t j = 0; j < nk; j++) {
            const T s = ST[j * ld + r];
            mx = s > mx ? s : mx; /* a NaN score does not become the max (as vmaxps(s, mx)) */
        }
        const T ms = mx == -INFINITY ? 0 : mx;
        const T a = EXP_REF(m[r] - ms);
        T sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            const T p = EXP_REF(ST[j * ld + r] - ms);
            ST[j * ld + r] = p;
            sum += p;
        }
        l[r] = a * l[r] + sum;
        m[r] = mx;
        alpha[r] = a;
    }
}

/* X86_VECTOR(avx512_fn, avx2_fn, args…): run the vector form at the level the CPU runs (AVX-512 for float32,
 * AVX2+FMA for both dtypes) and return; without one, go on (to the plain C form that follows). */
#if FG_SIMD_X86
static int x86_level(void) { /* 2 AVX-512 (float32 only), 1 AVX2+FMA, 0 none */
    const fg_simd_level s = fg_simd_active();
    if (X86_AVX512 && s == FG_SIMD_AVX512) return 2;
    return s >= FG_SIMD_AVX2;
}
#if X86_AVX512
#define X86_AVX512_FORM(lv, fn, ...)                                                                                   \
    if (lv == 2) {                                                                                                     \
        fn(__VA_ARGS__);                                                                                               \
        return;                                                                                                        \
    }
#else
#define X86_AVX512_FORM(lv, fn, ...)
#endif
#define X86_VECTOR(avx512_fn, avx2_fn, ...)                                                                            \
    do {                                                                                                               \
        const int lv = x86_level();                                                                                    \
        X86_AVX512_FORM(lv, avx512_fn, __VA_ARGS__)                                                                    \
        if (lv == 1) {                                                                                                 \
            avx2_fn(__VA_ARGS__);                                                                                      \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)
#else
#define X86_VECTOR(avx512_fn, avx2_fn, ...) ((void)0)
#endif

static void x86_softmax(T *ST, int64_t ld, int64_t nq, int64_t nk, T *m, T *l, T *alpha) {
    X86_VECTOR(SOFTMAX_COLS_AVX512, SOFTMAX_COLS_AVX2, ST, ld, nk, nq, m, l, alpha);
    softmax_cols_scalar(ST, ld, nk, 0, nq, m, l, alpha);
}

static void x86_exp_rows(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    X86_VECTOR(EXP_ROWS_AVX512, EXP_ROWS_AVX2, S, ld, nq, nk, L, lo);
    exp_rows_with(S, ld, nq, nk, L, lo, EXP_REF);
}

/* dS = P ∘ (dP − D_r): element by element, so the vector forms give the portable form's bits */
static void x86_ds_rows(T *dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D) {
    X86_VECTOR(DS_ROWS_AVX512, DS_ROWS_AVX2, dS, P, ld, nq, nk, D);
    flash_ds_rows(dS, P, ld, nq, nk, D);
}
static void x86_row_dots(T *D, const T *a, int64_t lda, const T *b, int64_t ldb, int64_t rows, int64_t d) {
    X86_VECTOR(ROW_DOTS_AVX512, ROW_DOTS_AVX2, D, a, lda, b, ldb, rows, d);
    flash_row_dots(D, a, lda, b, ldb, rows, d);
}

/* in 8 × 8 blocks, so that both sides are read and written a cache line at a time */
static void transpose_scalar(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static void x86_transpose(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    X86_VECTOR(TRANSPOSE_AVX512, TRANSPOSE_AVX2, dst, ldd, src, lds, rows, cols);
    transpose_scalar(dst, ldd, src, lds, rows, cols);
}

#undef X86_VECTOR
#undef X86_AVX512_FORM

/* the register-blocked products with BLAS's transpose flags (B is always row-major: the table packs) */
static void x86_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t lda, const T *B,
                     int64_t ldb, T *C, int64_t ldc, const T *rowscale, int acc) {
    (void)tb;
    GEMM_SMALL(m, n, k, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, rowscale, acc);
}

#define FLASH_X86_TABLE                                                                                                \
    {                                                                                                                  \
        .packs = 1, .pool_flags = 0, .gemm = x86_gemm, .softmax = x86_softmax, .exp_rows = x86_exp_rows,               \
        .ds_rows = x86_ds_rows, .row_dots = x86_row_dots, .transpose = x86_transpose                                   \
    }
