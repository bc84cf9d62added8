/* test_tensor.c — tensors, views, the caching allocator and the Philox RNG. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor/philox.h"
#include "tensor/tensor.h"

/* ---- Philox against the published known-answer vectors ---- */
Test(philox, matches_known_answer_vectors) {
    FILE *f = fopen("../shared/reference/philox4x32_10_kat.txt", "r");
    if (!f) cr_skip_test("../shared/reference/philox4x32_10_kat.txt not found (tests run from the repo root)");
    char line[512];
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char name[32];
        unsigned rounds, c[4], k[2], e[4];
        int got = sscanf(line, "%31s %u %x %x %x %x %x %x %x %x %x %x", name, &rounds, &c[0], &c[1], &c[2], &c[3],
                         &k[0], &k[1], &e[0], &e[1], &e[2], &e[3]);
        if (got != 12 || strcmp(name, "philox4x32") || rounds != 10) continue;
        uint32_t ctr[4] = {c[0], c[1], c[2], c[3]}, key[2] = {k[0], k[1]}, out[4];
        fg_philox4x32_10(ctr, key, out);
        for (int i = 0; i < 4; i++)
            cr_expect_eq(out[i], e[i], "vector %d word %d: got %08x, expected %08x", checked, i, out[i], e[i]);
        checked++;
    }
    fclose(f);
    cr_assert_geq(checked, 3, "read only %d vectors", checked);
}

Test(philox, u32_indexing_follows_curand_layout) {
    /* number `index` of (seed, stream) is word index%4 of counter (index/4, 0, stream, 0) */
    uint64_t seed = 0x1234567890abcdefULL, stream = 7;
    for (uint64_t idx = 0; idx < 12; idx++) {
        uint32_t ctr[4] = {(uint32_t)(idx / 4), 0, (uint32_t)stream, 0};
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
        fg_philox4x32_10(ctr, key, out);
        cr_expect_eq(fg_philox_u32(seed, stream, idx), out[idx % 4]);
    }
}

Test(philox, uniform_is_in_half_open_unit_interval) {
    cr_expect_gt(fg_u32_to_uniform(0), 0.0f);
    cr_expect_leq(fg_u32_to_uniform(0xFFFFFFFFu), 1.0f);
    cr_expect_gt(fg_u32_to_uniform_f64(0), 0.0);
    cr_expect_leq(fg_u32_to_uniform_f64(0xFFFFFFFFu), 1.0);
}

Test(philox, normals_have_unit_moments) {
    int64_t shape[1] = {200000};
    fg_tensor *t = fg_rand_normal(FG_F64, FG_CPU, 1, shape, 0.0, 1.0, 42, 0);
    cr_assert_not_null(t);
    double s = 0, s2 = 0;
    for (int64_t k = 0; k < shape[0]; k++) {
        double v = fg_get(t, k);
        s += v;
        s2 += v * v;
    }
    double mean = s / shape[0], var = s2 / shape[0] - mean * mean;
    /* standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032; allow 5 sigma */
    cr_expect(fabs(mean) < 0.0112, "mean %g", mean);
    cr_expect(fabs(var - 1) < 0.016, "variance %g", var);
    fg_release(t);
}

Test(philox, random_tensors_are_reproducible_and_dtype_independent) {
    int64_t shape[2] = {3, 5};
    fg_tensor *a = fg_rand_uniform(FG_F32, FG_CPU, 2, shape, -1, 1, 9, 3);
    fg_tensor *b = fg_rand_uniform(FG_F64, FG_CPU, 2, shape, -1, 1, 9, 3);
    fg_tensor *c = fg_rand_uniform(FG_F32, FG_CPU, 2, shape, -1, 1, 9, 4);
    int differ = 0;
    for (int k = 0; k < 15; k++) {
        cr_expect(fabs(fg_get(a, k) - fg_get(b, k)) < 1e-6, "element %d: %g vs %g", k, fg_get(a, k), fg_get(b, k));
        cr_expect(fg_get(a, k) > -1 && fg_get(a, k) <= 1);
        differ += fg_get(a, k) != fg_get(c, k);
    }
    cr_expect_gt(differ, 10, "another stream should give other numbers");
    fg_release(a);
    fg_release(b);
    fg_release(c);
}

/* ---- views ---- */
static fg_tensor *arange(fg_dtype dt, int ndim, const int64_t *shape) {
    fg_tensor *t = fg_empty(dt, FG_CPU, ndim, shape);
    for (int64_t k = 0; k < fg_numel(t); k++) fg_set(t, k, (double)k);
    return t;
}

Test(view, permute_and_slice_index_the_original) {
    int64_t shape[3] = {2, 3, 4};
    fg_tensor *t = arange(FG_F32, 3, shape);
    int perm[3] = {2, 0, 1};
    fg_tensor *p = fg_view_permute(t, perm); /* p[i][j][k] = t[j][k][i] */
    cr_assert_not_null(p);
    cr_expect_eq(p->shape[0], 4);
    cr_expect_not(fg_is_contiguous(p));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++) cr_expect_eq(fg_get(p, (i * 2 + j) * 3 + k), fg_get(t, (j * 3 + k) * 4 + i));
    fg_tensor *s = fg_view_slice(t, 1, 1, 3); /* (2, 2, 4): rows 1..2 of dim 1 */
    cr_assert_not_null(s);
    cr_expect_eq(fg_get(s, 0), 4.0);
    cr_expect_eq(fg_get(s, 8), 16.0);
    fg_release(p);
    fg_release(s);
    fg_release(t);
}

Test(view, a_view_writes_through_and_a_contiguous_copy_does_not) {
    int64_t shape[2] = {3, 4};
    fg_tensor *t = arange(FG_F64, 2, shape);
    fg_tensor *tr = fg_view_transpose(t, 0, 1);
    fg_set(tr, 1, -5.0); /* tr[0][1] is t[1][0] */
    cr_expect_eq(fg_get(t, 4), -5.0);
    fg_tensor *c = fg_contiguous(tr);
    cr_assert_neq(c->storage, t->storage);
    cr_expect_eq(fg_get(c, 1), -5.0);
    fg_set(c, 1, 100.0);
    cr_expect_eq(fg_get(t, 4), -5.0, "the copy must not write the original");
    int64_t flat[1] = {12};
    fg_tensor *r = fg_view_reshape(t, 1, flat);
    cr_assert_not_null(r);
    fg_set(r, 11, 7.0);
    cr_expect_eq(fg_get(t, 11), 7.0);
    fg_tensor *bad = fg_view_reshape(tr, 1, flat);
    cr_expect_null(bad, "reshaping a non-contiguous view without a copy must fail");
    cr_expect_eq(fg_last_status(), FG_ERR_ARG);
    fg_release(r);
    fg_release(c);
    fg_release(tr);
    fg_release(t);
}

Test(view, reshape_infers_one_size_and_checks_counts) {
    int64_t shape[2] = {6, 4};
    fg_tensor *t = arange(FG_F32, 2, shape);
    int64_t ok[3] = {2, -1, 4}, bad[2] = {5, 5}, two[2] = {-1, -1};
    fg_tensor *r = fg_view_reshape(t, 3, ok);
    cr_assert_not_null(r);
    cr_expect_eq(r->shape[1], 3);
    cr_expect_null(fg_view_reshape(t, 2, bad));
    cr_expect_eq(fg_last_status(), FG_ERR_SHAPE);
    cr_expect_null(fg_view_reshape(t, 2, two));
    cr_expect_eq(fg_last_status(), FG_ERR_ARG);
    fg_release(r);
    fg_release(t);
}

Test(view, errors_are_returned_not_crashes) {
    int64_t shape[2] = {2, 3}, neg[2] = {2, -3};
    cr_expect_null(fg_empty(FG_F32, FG_CPU, 2, neg));
    cr_expect_eq(fg_last_status(), FG_ERR_ARG);
    cr_expect_null(fg_empty(FG_F32, FG_CPU, FG_MAX_DIMS + 1, shape));
    cr_expect_null(fg_empty(FG_F32, FG_CUDA, 2, shape), "no CUDA backend is registered in the CPU build");
    cr_expect_eq(fg_last_status(), FG_ERR_DEVICE);
    fg_tensor *t = fg_zeros(FG_F32, FG_CPU, 2, shape);
    int perm[2] = {0, 0};
    cr_expect_null(fg_view_permute(t, perm));
    cr_expect_null(fg_view_slice(t, 1, 2, 5));
    cr_expect_null(fg_view_transpose(t, 0, 2));
    fg_tensor *u = fg_zeros(FG_F32, FG_CPU, 1, shape);
    cr_expect_eq(fg_copy_into(t, u), FG_ERR_SHAPE);
    cr_expect_eq(fg_axpy(t, 1.0, u), FG_ERR_SHAPE);
    cr_expect_neq(strlen(fg_last_error()), 0);
    fg_release(u);
    fg_release(t);
}

Test(view, dtype_conversion_copy) {
    int64_t shape[2] = {2, 2};
    fg_tensor *a = arange(FG_F32, 2, shape);
    fg_tensor *b = fg_to(a, FG_CPU, FG_F64);
    cr_assert_not_null(b);
    cr_expect_eq(b->dtype, FG_F64);
    for (int k = 0; k < 4; k++) cr_expect_eq(fg_get(b, k), (double)k);
    fg_release(a);
    fg_release(b);
}

/* ---- the caching allocator and its counter ---- */
Test(alloc, counts_current_and_peak_and_reuses_blocks) {
    fg_alloc_stats s0 = fg_alloc_get_stats(FG_CPU);
    int64_t shape[1] = {1000};
    fg_tensor *a = fg_zeros(FG_F32, FG_CPU, 1, shape);
    fg_alloc_stats s1 = fg_alloc_get_stats(FG_CPU);
    cr_expect_geq(s1.current - s0.current, 4000);
    cr_expect_lt(s1.current - s0.current, 4000 + 4000 / 8 + 64, "size class overhead at most 1/8");
    void *first = a->storage->data;
    fg_release(a);
    fg_alloc_stats s2 = fg_alloc_get_stats(FG_CPU);
    cr_expect_eq(s2.current, s0.current);
    cr_expect_geq(s2.peak, s1.current);
    /* the same size again comes from the cache, not the system */
    fg_tensor *b = fg_zeros(FG_F32, FG_CPU, 1, shape);
    fg_alloc_stats s3 = fg_alloc_get_stats(FG_CPU);
    cr_expect_eq(b->storage->data, first);
    cr_expect_eq(s3.system_allocs, s2.system_allocs);
    fg_alloc_reset_peak(FG_CPU);
    cr_expect_eq(fg_alloc_get_stats(FG_CPU).peak, s3.current);
    fg_release(b);
}

Test(alloc, views_share_storage_and_free_it_once) {
    fg_alloc_stats s0 = fg_alloc_get_stats(FG_CPU);
    int64_t shape[2] = {64, 64};
    fg_tensor *a = fg_ones(FG_F64, FG_CPU, 2, shape);
    fg_tensor *v = fg_view_transpose(a, 0, 1);
    fg_release(a); /* the view keeps the storage alive */
    cr_expect_eq(fg_get(v, 5), 1.0);
    cr_expect_gt(fg_alloc_get_stats(FG_CPU).current, s0.current);
    fg_release(v);
    cr_expect_eq(fg_alloc_get_stats(FG_CPU).current, s0.current);
}

/* Element k of a normal fill is Box-Muller's first normal of numbers 2k and 2k+1 of the stream
 * (the contract the GPU fill and bench/train_torch_cpu.py rely on), in both dtypes, for even
 * and odd sizes. */
Test(philox, normal_fill_is_box_muller_of_numbers_2k_and_2k_plus_1) {
    const int64_t sizes[3] = {1, 6, 11};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 3; s++) {
            fg_tensor *t = fg_rand_normal(dt ? FG_F64 : FG_F32, FG_CPU, 1, &sizes[s], 0.5, 0.02, 77, 5);
            cr_assert(t, "%s", fg_last_error());
            for (int64_t k = 0; k < sizes[s]; k++) {
                double n0, n1;
                fg_box_muller(fg_philox_u32(77, 5, 2 * (uint64_t)k), fg_philox_u32(77, 5, 2 * (uint64_t)k + 1), &n0,
                              &n1);
                const double want = dt ? 0.5 + 0.02 * n0 : (double)(float)(0.5 + 0.02 * n0);
                cr_expect_eq(fg_get(t, k), want, "size %lld element %lld: %.17g, want %.17g", (long long)sizes[s],
                             (long long)k, fg_get(t, k), want);
            }
            fg_release(t);
        }
}
