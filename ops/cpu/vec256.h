/* vec256.h — one dtype's AVX2 vector operations under dtype-free names, for the kernels that are
 * written once for float and double (ops/cpu/smallgemm_body.h, ops/cpu/flash_x86_body.h: each is
 * included once per dtype's translation unit, with these names bound to that dtype's operations).
 *
 * Not a normal header: it has no include guard, on purpose. Include it with FG_VEC256_DOUBLE
 * defined to 0 (VT = __m256, 8 float lanes) or 1 (VT = __m256d, 4 double lanes); define
 * FG_VEC256_UNDEF and include it again to release the names (it undefines FG_VEC256_UNDEF too).
 * The including file needs <immintrin.h> and code compiled for AVX2+FMA (FG_TARGET_AVX2). */
#if defined(FG_VEC256_UNDEF)
#undef VT
#undef LANES
#undef V_ZERO
#undef V_SET1
#undef V_LOADU
#undef V_STOREU
#undef V_MASKLOAD
#undef V_MASKSTORE
#undef V_BROADCAST
#undef V_FMADD
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_BLENDV
#undef V_CMP_EQ
#undef V_TAIL_MASK
#undef FG_VEC256_UNDEF
#elif FG_VEC256_DOUBLE
#define VT __m256d
#define LANES 4
#define V_ZERO _mm256_setzero_pd
#define V_SET1 _mm256_set1_pd
#define V_LOADU _mm256_loadu_pd
#define V_STOREU _mm256_storeu_pd
#define V_MASKLOAD _mm256_maskload_pd
#define V_MASKSTORE _mm256_maskstore_pd
#define V_BROADCAST _mm256_broadcast_sd
#define V_FMADD _mm256_fmadd_pd
#define V_MUL _mm256_mul_pd
#define V_ADD _mm256_add_pd
#define V_SUB _mm256_sub_pd
#define V_MAX _mm256_max_pd
#define V_BLENDV _mm256_blendv_pd
#define V_CMP_EQ(a, b) _mm256_cmp_pd(a, b, _CMP_EQ_OQ)
/* the integer mask with lanes [0, tail) on, for V_MASKLOAD and V_MASKSTORE */
#define V_TAIL_MASK(tail) _mm256_cmpgt_epi64(_mm256_set1_epi64x(tail), _mm256_setr_epi64x(0, 1, 2, 3))
#else
#define VT __m256
#define LANES 8
#define V_ZERO _mm256_setzero_ps
#define V_SET1 _mm256_set1_ps
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_MASKLOAD _mm256_maskload_ps
#define V_MASKSTORE _mm256_maskstore_ps
#define V_BROADCAST _mm256_broadcast_ss
#define V_FMADD _mm256_fmadd_ps
#define V_MUL _mm256_mul_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MAX _mm256_max_ps
#define V_BLENDV _mm256_blendv_ps
#define V_CMP_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define V_TAIL_MASK(tail) _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#endif
