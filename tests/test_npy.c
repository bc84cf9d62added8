/* test_npy.c — .npy reading and writing (tensor/npy.h), cross-checked against NumPy when
 * /usr/bin/python3 has it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/npy.h"
#include "tests/common.h"

static char g_dir[64];

static void make_dir(void) { fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_npy_XXXXXX"); }
static void remove_dir(void) { fgt_remove_tmpdir(g_dir); }

TestSuite(npy, .init = make_dir, .fini = remove_dir, .timeout = 60);

/* ---- helpers ---- */

/* A .npy image: magic, version major.minor, the dict text padded with spaces and '\n' to a
 * multiple of `align` (0: no padding, just '\n'), then `ndata` bytes of data (value = index).
 * Caller frees. */
static unsigned char *make_npy(int major, int minor, const char *dict, size_t ndata, int align, size_t *n) {
    size_t pre = major == 1 ? 10 : 12;
    size_t hlen = strlen(dict) + 1;
    if (align) hlen += (align - (pre + hlen) % align) % align;
    *n = pre + hlen + ndata;
    unsigned char *b = malloc(*n + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = (unsigned char)minor;
    for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(hlen >> (8 * i));
    memset(b + pre, ' ', hlen);
    memcpy(b + pre, dict, strlen(dict));
    b[pre + hlen - 1] = '\n';
    for (size_t i = 0; i < ndata; i++) b[pre + hlen + i] = (unsigned char)i;
    return b;
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* The cross-check formula (NumPy computes the same in float64, then casts). */
static double formula(int64_t k) { return (double)k * 0.37 - 1.1; }

static fg_tensor *formula_tensor(fg_dtype dt, int ndim, const int64_t *shape) {
    fg_tensor *t = fg_empty(dt, FG_CPU, ndim, shape);
    cr_assert_not_null(t, "%s", fg_last_error());
    for (int64_t k = 0; k < fg_numel(t); k++) fg_set(t, k, formula(k));
    return t;
}

/* Same dtype, shape and bits; reports the first differing element. */
static void expect_same_tensor(const fg_tensor *got, const fg_tensor *want, const char *what) {
    char a[96], b[96];
    cr_assert_eq(got->dtype, want->dtype, "%s: dtype %d vs %d", what, got->dtype, want->dtype);
    cr_assert(fg_same_shape(got, want), "%s: shape %s vs %s", what, fg_shape_str(got, a, sizeof a),
              fg_shape_str(want, b, sizeof b));
    for (int64_t k = 0; k < fg_numel(want); k++) {
        double x = fg_get(got, k), y = fg_get(want, k);
        cr_assert(memcmp(&x, &y, sizeof x) == 0,
                  "%s: first difference at flat index %lld: %.17g vs "
                  "%.17g",
                  what, (long long)k, x, y);
    }
}

/* ---- round trips ---- */

static const struct {
    int ndim;
    int64_t shape[FG_MAX_DIMS];
} g_shapes[] = {
    {0, {0}},    {1, {1}},       {1, {5}},          {2, {1, 1}},
    {2, {2, 3}}, {3, {3, 1, 4}}, {4, {2, 3, 4, 5}}, {6, {1, 2, 1, 2, 1, 3}},
    {2, {0, 3}}, {1, {0}},
};

static void round_trip(fg_dtype dt) {
    for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++) {
        fg_tensor *t = fg_rand_normal(dt, FG_CPU, g_shapes[i].ndim, g_shapes[i].shape, 0.0, 1.0, 1234, i);
        cr_assert_not_null(t, "%s", fg_last_error());
        char path[128], sb[96], what[160];
        snprintf(path, sizeof path, "%s/t%zu.npy", g_dir, i);
        snprintf(what, sizeof what, "%s %s", fg_dtype_name(dt), fg_shape_str(t, sb, sizeof sb));
        cr_assert_eq(fg_npy_save(path, t), FG_OK, "%s: save: %s", what, fg_last_error());
        fg_tensor *u = fg_npy_load(path);
        cr_assert_not_null(u, "%s: load: %s", what, fg_last_error());
        expect_same_tensor(u, t, what);
        cr_expect(fg_is_contiguous(u) && u->device == FG_CPU, "%s: not a contiguous CPU tensor", what);

        /* the file itself: version 1.0, data 64-aligned, exactly the data after the header */
        FILE *f = fopen(path, "rb");
        unsigned char head[10];
        cr_assert_eq(fread(head, 1, 10, f), 10);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        size_t hlen = head[8] | (size_t)head[9] << 8;
        cr_expect_eq(head[6], 1, "%s: version %d", what, head[6]);
        cr_expect_eq((10 + hlen) % 64, 0, "%s: data starts at %zu", what, 10 + hlen);
        cr_expect_eq((size_t)size, 10 + hlen + fg_nbytes(t), "%s: file size %ld", what, size);
        fg_release(t);
        fg_release(u);
    }
}

Test(npy, round_trip_f32_keeps_every_bit) { round_trip(FG_F32); }
Test(npy, round_trip_f64_keeps_every_bit) { round_trip(FG_F64); }

Test(npy, save_of_a_strided_view_writes_c_order) {
    int64_t shape[3] = {2, 3, 4};
    fg_tensor *t = formula_tensor(FG_F32, 3, shape);
    int perm[3] = {2, 0, 1};
    fg_tensor *v = fg_view_permute(t, perm); /* (4, 2, 3), not contiguous */
    cr_assert_not_null(v, "%s", fg_last_error());
    char path[128];
    snprintf(path, sizeof path, "%s/perm.npy", g_dir);
    cr_assert_eq(fg_npy_save(path, v), FG_OK, "%s", fg_last_error());
    fg_tensor *u = fg_npy_load(path);
    cr_assert_not_null(u, "%s", fg_last_error());
    cr_assert_eq(u->ndim, 3);
    cr_assert(u->shape[0] == 4 && u->shape[1] == 2 && u->shape[2] == 3);
    /* u[k][i][j] == t[i][j][k] == formula(12 i + 4 j + k) as float */
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                double got = fg_get(u, (k * 2 + i) * 3 + j), want = (float)formula(12 * i + 4 * j + k);
                cr_assert_eq(got, want, "u[%d][%d][%d] = %g, expected %g", k, i, j, got, want);
            }
    fg_release(u);
    fg_release(v);
    fg_release(t);
}

Test(npy, save_raw_writes_v1_header_numpy_style) {
    float data[2] = {1.0f, -2.0f};
    int64_t shape[1] = {2};
    char path[128];
    snprintf(path, sizeof path, "%s/raw.npy", g_dir);
    cr_assert_eq(fg_npy_save_raw(path, FG_F32, 1, shape, data), FG_OK, "%s", fg_last_error());
    FILE *f = fopen(path, "rb");
    unsigned char b[256];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    cr_assert_eq(n, 128 + 8, "file has %zu bytes", n);
    cr_expect(memcmp(b, "\x93NUMPY\x01\x00\x76\x00", 10) == 0, "bad preamble");
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    cr_expect(memcmp(b + 10, dict, strlen(dict)) == 0, "header: %.60s", (char *)b + 10);
    for (size_t i = 10 + strlen(dict); i < 127; i++) cr_assert_eq(b[i], ' ', "padding byte %zu is 0x%02x", i, b[i]);
    cr_expect_eq(b[127], '\n');
    cr_expect(memcmp(b + 128, data, 8) == 0, "data differs");
}

/* ---- headers written by other tools ---- */

Test(npy, parses_header_variants) {
    static const struct {
        int major;
        const char *dict;
        int align;
        int ndim;
        int64_t shape[3];
        fg_dtype dt;
    } cases[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 64, 2, {2, 3}, FG_F32},
        {1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f8'}", 64, 2, {2, 3}, FG_F64},
        {1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (4,)}", 16, 1, {4}, FG_F32},
        {1, "{ 'descr' : '<f4' ,\n 'fortran_order' :False,'shape':( 2 ,3 , ) , }", 0, 2, {2, 3}, FG_F32},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3L, 2L), }", 16, 2, {3, 2}, FG_F64},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 64, 0, {0}, FG_F64},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 0, 3), }", 64, 3, {1, 0, 3}, FG_F32},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1), }", 64, 2, {3, 1}, FG_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t numel = 1;
        for (int d = 0; d < cases[i].ndim; d++) numel *= cases[i].shape[d];
        size_t es = cases[i].dt == FG_F64 ? 8 : 4, n;
        unsigned char *b = make_npy(cases[i].major, 0, cases[i].dict, (size_t)numel * es, cases[i].align, &n);
        fg_npy_info info;
        fg_status st = fg_npy_parse_header(b, n, &info);
        cr_assert_eq(st, FG_OK, "case %zu (%s): %s", i, cases[i].dict, fg_last_error());
        cr_expect_eq(info.version_major, cases[i].major, "case %zu", i);
        cr_expect_eq(info.dtype, cases[i].dt, "case %zu", i);
        cr_assert_eq(info.ndim, cases[i].ndim, "case %zu: ndim %d", i, info.ndim);
        for (int d = 0; d < info.ndim; d++)
            cr_expect_eq(info.shape[d], cases[i].shape[d], "case %zu dim %d: %lld", i, d, (long long)info.shape[d]);
        fg_tensor *t = fg_npy_parse(b, n);
        cr_assert_not_null(t, "case %zu: %s", i, fg_last_error());
        cr_expect(memcmp(fg_data(t), b + info.data_offset, info.data_bytes) == 0, "case %zu data", i);
        fg_release(t);
        free(b);
    }
}

Test(npy, parses_v2_header) {
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }";
    size_t n;
    unsigned char *b = make_npy(2, 0, dict, 32, 64, &n);
    double v[4] = {0.5, -1.25, 3e100, -0.0};
    memcpy(b + n - 32, v, sizeof v);
    fg_tensor *t = fg_npy_parse(b, n);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_assert(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 2 && t->dtype == FG_F64);
    for (int k = 0; k < 4; k++) cr_expect_eq(fg_get(t, k), v[k], "element %d: %g", k, fg_get(t, k));
    fg_release(t);
    free(b);
}

/* ---- refusals: every one FG_ERR_FORMAT with a message that names the problem ---- */

Test(npy, refuses_unsupported_or_malformed_headers) {
    static const struct {
        int major, minor;
        const char *dict;
        size_t ndata;
        const char *want;
    } cases[] = {
        {1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8,
         "npy: dtype '<i4' is not supported (float32, float64 and bfloat16 '<V2' only)"},
        {1, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8,
         "npy: dtype '>f4' is not supported (big-endian"},
        {1, 0, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, "npy: dtype '|O' is not supported"},
        {1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
         "structured dtypes are not supported"},
        {1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16,
         "npy: fortran_order arrays are not supported"},
        {3, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, "npy: version 3.0 is not supported"},
        {1, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, "npy: version 1.1 is not supported"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20,
         "npy: file holds 20 bytes of data, shape (2, 3) needs 24"},
        {1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 25,
         "npy: file holds 25 bytes of data, shape (3,) needs 24"},
        {1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 0,
         "npy: file holds 0 bytes of data, shape () needs 8"},
        {1, 0, "{'descr': '<f4', 'shape': (2,), }", 8, "header lacks key 'fortran_order'"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, "unexpected key 'x'"},
        {1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
         "key 'descr' appears twice"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", 8, "is not a tuple"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, "negative dimension"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1), }", 4,
         "rank 7 arrays are not supported"},
        {1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
         "4294967296), }",
         8, "has too many elements"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8,
         "dimension in shape is too large"},
        {1, 0, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8, "'fortran_order' must be True or False"},
        {1, 0, "{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (2,), }", 8,
         "'fortran_order' must be True or False"},
        {1, 0, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 8, "header:"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, "expected ',' or '}' in dict"},
        {1, 0, "['descr', '<f4']", 8, "header is not a dict"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", 8, "after the dict"},
        {1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 8, "expected ',' or ')' in shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        unsigned char *b = make_npy(cases[i].major, cases[i].minor, cases[i].dict, cases[i].ndata, 64, &n);
        fg_clear_error();
        fg_tensor *t = fg_npy_parse(b, n);
        cr_expect_null(t, "case %zu (%s) was accepted", i, cases[i].dict);
        cr_expect_eq(fg_last_status(), FG_ERR_FORMAT, "case %zu: status %d", i, fg_last_status());
        cr_expect(strstr(fg_last_error(), cases[i].want) != NULL, "case %zu: message \"%s\" lacks \"%s\"", i,
                  fg_last_error(), cases[i].want);
        fg_release(t);
        free(b);
    }
}

Test(npy, refuses_bad_magic_and_truncated_preambles) {
    size_t n;
    unsigned char *good = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 64, &n);
    static const struct {
        size_t keep; /* bytes of the good file kept */
        const char *want;
    } cuts[] = {
        {0, "not a .npy file"},
        {4, "not a .npy file"},
        {7, "truncated file (no format version)"},
        {9, "truncated file (no header length)"},
        {40, "truncated header (header says 118 bytes"},
        {127, "truncated header"},
        {130, "file holds 2 bytes of data, shape (2,) needs 8"},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        /* a copy of exactly `keep` bytes, so ASan catches any read past it */
        unsigned char *b = malloc(cuts[i].keep ? cuts[i].keep : 1);
        memcpy(b, good, cuts[i].keep);
        fg_tensor *t = fg_npy_parse(b, cuts[i].keep);
        cr_expect_null(t, "cut at %zu accepted", cuts[i].keep);
        cr_expect_eq(fg_last_status(), FG_ERR_FORMAT);
        cr_expect(strstr(fg_last_error(), cuts[i].want), "cut at %zu: \"%s\" lacks \"%s\"", cuts[i].keep,
                  fg_last_error(), cuts[i].want);
        fg_release(t);
        free(b);
    }
    unsigned char garbage[64];
    memset(garbage, 'G', sizeof garbage);
    cr_expect_null(fg_npy_parse(garbage, sizeof garbage));
    cr_expect(strstr(fg_last_error(), "npy: not a .npy file"), "%s", fg_last_error());
    /* a header length far beyond the file */
    good[8] = 0xff;
    good[9] = 0xff;
    cr_expect_null(fg_npy_parse(good, n));
    cr_expect(strstr(fg_last_error(), "truncated header (header says 65535 bytes"), "%s", fg_last_error());
    free(good);
}

Test(npy, load_errors_name_the_file) {
    char path[128];
    snprintf(path, sizeof path, "%s/missing.npy", g_dir);
    cr_expect_null(fg_npy_load(path));
    cr_expect_eq(fg_last_status(), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), strerror(ENOENT)), "%s", fg_last_error());
    cr_expect_null(fg_npy_load(g_dir));
    cr_expect(strstr(fg_last_error(), "is a directory"), "%s", fg_last_error());

    size_t n;
    unsigned char *b = make_npy(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8, 64, &n);
    snprintf(path, sizeof path, "%s/int.npy", g_dir);
    write_bytes(path, b, n);
    free(b);
    cr_expect_null(fg_npy_load(path));
    cr_expect_eq(fg_last_status(), FG_ERR_FORMAT);
    cr_expect(strstr(fg_last_error(), path) &&
                  strstr(fg_last_error(), "dtype '<i4' is not supported (float32, float64 and bfloat16 '<V2' only)"),
              "%s", fg_last_error());

    b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, 64, &n);
    snprintf(path, sizeof path, "%s/short.npy", g_dir);
    write_bytes(path, b, n);
    free(b);
    cr_expect_null(fg_npy_load(path));
    cr_expect(strstr(fg_last_error(), "file holds 20 bytes of data, shape (2, 3) needs 24"), "%s", fg_last_error());
}

Test(npy, load_refuses_devices_and_a_fifo_without_writer_at_once) {
    cr_expect_null(fg_npy_load("/dev/zero"));
    cr_expect_eq(fg_last_status(), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), "/dev/zero") && strstr(fg_last_error(), "character device"), "%s",
              fg_last_error());
    char path[128];
    snprintf(path, sizeof path, "%s/fifo.npy", g_dir);
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
    cr_expect_null(fg_npy_load(path)); /* the suite's timeout catches a hang in open or read */
    cr_expect_eq(fg_last_status(), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), "FIFO"), "%s", fg_last_error());
}

Test(npy, load_reads_a_pipe_whole) {
    size_t n;
    unsigned char *b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, 64, &n);
    char path[64];
    int fd = fgt_pipe_with(b, n, path, sizeof path);
    fg_tensor *t = fg_npy_load(path);
    cr_assert_not_null(t, "%s", fg_last_error());
    fg_tensor *want = fg_npy_parse(b, n);
    cr_assert_not_null(want, "%s", fg_last_error());
    expect_same_tensor(t, want, "from a pipe");
    fg_release(t);
    fg_release(want);
    close(fd);
    /* a truncated stream is a format error naming the pipe */
    fd = fgt_pipe_with(b, n - 4, path, sizeof path);
    cr_expect_null(fg_npy_load(path));
    cr_expect(strstr(fg_last_error(), path), "%s", fg_last_error());
    close(fd);
    free(b);
}

Test(npy, save_refuses_bad_arguments_and_unwritable_paths) {
    int64_t shape[1] = {-1};
    float x = 0;
    char path[128];
    snprintf(path, sizeof path, "%s/x.npy", g_dir);
    cr_expect_eq(fg_npy_save_raw(path, FG_F32, 1, shape, &x), FG_ERR_ARG);
    cr_expect_eq(fg_npy_save(path, NULL), FG_ERR_ARG);
    int64_t one[1] = {1};
    snprintf(path, sizeof path, "%s/nodir/x.npy", g_dir);
    cr_expect_eq(fg_npy_save_raw(path, FG_F32, 1, one, &x), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path), "%s", fg_last_error());
}

/* ---- NumPy cross-check ---- */

static const char *g_numpy_script =
    "import sys, os, numpy as np\n"
    "d, phase = sys.argv[1], sys.argv[2]\n"
    "def F(shape, dt):\n"
    "    n = int(np.prod(shape)) if len(shape) else 1\n"
    "    return (np.arange(n) * 0.37 - 1.1).astype(dt).reshape(shape)\n"
    "if phase == 'write':\n"
    "    np.save(os.path.join(d, 'np_a.npy'), F((3, 4), np.float32))\n"
    "    np.save(os.path.join(d, 'np_b.npy'), F((), np.float64))\n"
    "    np.save(os.path.join(d, 'np_c.npy'), F((5,), np.float32))\n"
    "    np.save(os.path.join(d, 'np_d.npy'), F((2, 1, 3), np.float64))\n"
    "    with open(os.path.join(d, 'np_v2.npy'), 'wb') as f:\n"
    "        np.lib.format.write_array(f, F((2, 3), np.float32), version=(2, 0))\n"
    "    np.save(os.path.join(d, 'np_i4.npy'), np.arange(4, dtype=np.int32))\n"
    "    np.save(os.path.join(d, 'np_be.npy'), F((4,), '>f4'))\n"
    "    np.save(os.path.join(d, 'np_fo.npy'), np.asfortranarray(F((2, 3), np.float32)))\n"
    "    print('wrote')\n"
    "else:\n"
    "    bad = []\n"
    "    base = F((3, 4), np.float32)\n"
    "    want = {'fg_a.npy': F((3, 4), np.float32), 'fg_b.npy': F((), np.float64),\n"
    "            'fg_c.npy': F((1,), np.float32), 'fg_d.npy': F((2, 1, 3, 1, 2), np.float64),\n"
    "            'fg_t.npy': np.ascontiguousarray(base.T)}\n"
    "    for name, w in want.items():\n"
    "        a = np.load(os.path.join(d, name))\n"
    "        if a.dtype != w.dtype or a.shape != w.shape or not np.array_equal(a, w):\n"
    "            bad.append('%s: got %s %s, want %s %s' % (name, a.dtype, a.shape, w.dtype, w.shape))\n"
    "    print('\\n'.join(bad) if bad else 'OK')\n"
    "    sys.exit(1 if bad else 0)\n";

Test(npy, numpy_cross_check_both_ways) {
    const char *missing = fgt_python_missing("numpy");
    if (missing) {
        remove_dir(); /* .fini does not run after a skip */
        fgt_skip("NumPy cross-check", missing);
    }
    char script[128], out[4096];
    snprintf(script, sizeof script, "%s/cross.py", g_dir);
    write_bytes(script, g_numpy_script, strlen(g_numpy_script));
    char args[160];
    snprintf(args, sizeof args, "%s write", g_dir);
    int rc = fgt_python_run(NULL, script, args, out, sizeof out);
    cr_assert_eq(rc, 0, "numpy writer failed: %s", out);

    /* NumPy's files that we must read */
    static const struct {
        const char *name;
        fg_dtype dt;
        int ndim;
        int64_t shape[3];
    } ok[] = {
        {"np_a.npy", FG_F32, 2, {3, 4}},    {"np_b.npy", FG_F64, 0, {0}},     {"np_c.npy", FG_F32, 1, {5}},
        {"np_d.npy", FG_F64, 3, {2, 1, 3}}, {"np_v2.npy", FG_F32, 2, {2, 3}},
    };
    char path[160];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, ok[i].name);
        fg_tensor *t = fg_npy_load(path);
        cr_assert_not_null(t, "%s: %s", ok[i].name, fg_last_error());
        fg_tensor *want = formula_tensor(ok[i].dt, ok[i].ndim, ok[i].shape);
        expect_same_tensor(t, want, ok[i].name);
        fg_release(want);
        fg_release(t);
    }
    /* NumPy's files that we must refuse, with the reason */
    static const struct {
        const char *name, *want;
    } refused[] = {
        {"np_i4.npy", "dtype '<i4' is not supported (float32, float64 and bfloat16 '<V2' only)"},
        {"np_be.npy", "dtype '>f4' is not supported"},
        {"np_fo.npy", "fortran_order arrays are not supported"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, refused[i].name);
        cr_expect_null(fg_npy_load(path), "%s accepted", refused[i].name);
        cr_expect(strstr(fg_last_error(), refused[i].want), "%s: \"%s\" lacks \"%s\"", refused[i].name, fg_last_error(),
                  refused[i].want);
    }

    /* our files that NumPy must read */
    static const struct {
        const char *name;
        fg_dtype dt;
        int ndim;
        int64_t shape[5];
    } ours[] = {
        {"fg_a.npy", FG_F32, 2, {3, 4}},
        {"fg_b.npy", FG_F64, 0, {0}},
        {"fg_c.npy", FG_F32, 1, {1}},
        {"fg_d.npy", FG_F64, 5, {2, 1, 3, 1, 2}},
    };
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
        fg_tensor *t = formula_tensor(ours[i].dt, ours[i].ndim, ours[i].shape);
        snprintf(path, sizeof path, "%s/%s", g_dir, ours[i].name);
        cr_assert_eq(fg_npy_save(path, t), FG_OK, "%s: %s", ours[i].name, fg_last_error());
        fg_release(t);
    }
    int64_t shape[2] = {3, 4};
    fg_tensor *base = formula_tensor(FG_F32, 2, shape);
    fg_tensor *tr = fg_view_transpose(base, 0, 1);
    snprintf(path, sizeof path, "%s/fg_t.npy", g_dir);
    cr_assert_eq(fg_npy_save(path, tr), FG_OK, "%s", fg_last_error());
    fg_release(tr);
    fg_release(base);
    snprintf(args, sizeof args, "%s check", g_dir);
    rc = fgt_python_run(NULL, script, args, out, sizeof out);
    cr_expect_eq(rc, 0, "numpy could not read our files: %s", out);
}
