/* test_npy_map.c — zero-copy loading of .npy files (fg_npy_map, tensor/npy.h): a view of the
 * mapped file when the data is aligned, a copy otherwise, and fg_npy_load's checks and refusals
 * either way. References: the same bytes through fg_npy_parse. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/npy.h"
#include "tests/common.h"

static char g_dir[64];

static void make_dir(void) { fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_npymap_XXXXXX"); }
static void remove_dir(void) { fgt_remove_tmpdir(g_dir); }

TestSuite(npy_map, .init = make_dir, .fini = remove_dir, .timeout = 60);

/* A .npy image (the dict padded with spaces to make preamble + header `hdr` bytes long, or just
 * '\n' when hdr is 0), then ndata bytes of data: the float32 values 0.5·i, or bytes i for odd
 * ndata. Caller frees. */
static unsigned char *make_npy(const char *dict, size_t hdr, size_t ndata, size_t *n) {
    const size_t pre = 10;
    size_t hlen = hdr ? hdr - pre : strlen(dict) + 1;
    *n = pre + hlen + ndata;
    unsigned char *b = malloc(*n + 1);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)(hlen & 0xff);
    b[9] = (unsigned char)(hlen >> 8);
    memset(b + pre, ' ', hlen);
    memcpy(b + pre, dict, strlen(dict));
    b[pre + hlen - 1] = '\n';
    for (size_t i = 0; i < ndata; i++) b[pre + hlen + i] = (unsigned char)i;
    for (size_t i = 0; ndata % 4 == 0 && i < ndata / 4; i++) {
        const float f = 0.5f * (float)i;
        memcpy(b + pre + hlen + 4 * i, &f, 4);
    }
    return b;
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void expect_same(const fg_tensor *a, const fg_tensor *b, const char *what) {
    cr_assert_eq(a->dtype, b->dtype, "%s: dtype", what);
    cr_assert(fg_same_shape(a, b), "%s: shape", what);
    cr_assert(fg_is_contiguous(a), "%s: not contiguous", what);
    cr_assert(memcmp(fg_data(a), fg_data(b), fg_nbytes(b)) == 0, "%s: data differs", what);
}

Test(npy_map, an_aligned_file_is_a_view_of_the_mapping) {
    size_t n;
    unsigned char *b = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", 128, 60, &n);
    char path[128];
    snprintf(path, sizeof path, "%s/a.npy", g_dir);
    write_bytes(path, b, n);
    fg_npy_mapping m;
    fg_tensor *t = fg_npy_map(path, &m);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_assert_not_null(m.addr, "an aligned regular file was copied, not mapped");
    cr_expect_eq(m.len, n);
    cr_expect_eq((const unsigned char *)fg_data(t), (const unsigned char *)m.addr + 128,
                 "the data is not the mapping's");
    fg_tensor *want = fg_npy_parse(b, n);
    cr_assert_not_null(want, "%s", fg_last_error());
    expect_same(t, want, "mapped");
    cr_expect_eq(fg_get(t, 7), 3.5);
    fg_release(t);
    fg_npy_unmap(&m);
    cr_expect_null(m.addr);
    fg_npy_unmap(&m); /* twice is harmless */
    fg_release(want);
    free(b);
}

Test(npy_map, a_misaligned_file_is_copied) {
    size_t n;
    /* preamble + header = 75 bytes: the float32 data starts at an odd offset */
    unsigned char *b = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 75, 16, &n);
    char path[128];
    snprintf(path, sizeof path, "%s/odd.npy", g_dir);
    write_bytes(path, b, n);
    fg_npy_mapping m;
    fg_tensor *t = fg_npy_map(path, &m);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_expect_null(m.addr, "a misaligned file was left mapped");
    cr_expect_eq((uintptr_t)fg_data(t) % 4, 0);
    fg_tensor *want = fg_npy_parse(b, n);
    cr_assert_not_null(want, "%s", fg_last_error());
    expect_same(t, want, "copied");
    fg_release(t);
    fg_release(want);
    fg_npy_unmap(&m);
    free(b);
}

Test(npy_map, refuses_what_load_refuses_with_the_same_messages) {
    char path[128];
    fg_npy_mapping m;
    snprintf(path, sizeof path, "%s/missing.npy", g_dir);
    cr_expect_null(fg_npy_map(path, &m));
    cr_expect_eq(fg_last_status(), FG_ERR_IO);
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), strerror(ENOENT)), "%s", fg_last_error());
    cr_expect_null(fg_npy_map(g_dir, &m));
    cr_expect(strstr(fg_last_error(), "is a directory"), "%s", fg_last_error());
    cr_expect_null(fg_npy_map("/dev/zero", &m));
    cr_expect(strstr(fg_last_error(), "character device"), "%s", fg_last_error());
    cr_expect_null(m.addr);

    size_t n;
    unsigned char *b = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 128, 20, &n);
    snprintf(path, sizeof path, "%s/short.npy", g_dir);
    write_bytes(path, b, n);
    free(b);
    cr_expect_null(fg_npy_map(path, &m));
    cr_expect_eq(fg_last_status(), FG_ERR_FORMAT);
    cr_expect(strstr(fg_last_error(), path) &&
                  strstr(fg_last_error(), "file holds 20 bytes of data, shape (2, 3) needs 24"),
              "%s", fg_last_error());
    cr_expect_null(m.addr, "a refused file was left mapped");
    b = make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 128, 24, &n);
    snprintf(path, sizeof path, "%s/fortran.npy", g_dir);
    write_bytes(path, b, n);
    free(b);
    cr_expect_null(fg_npy_map(path, &m));
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), "ortran"), "%s", fg_last_error());
    snprintf(path, sizeof path, "%s/empty.npy", g_dir);
    write_bytes(path, "", 0);
    cr_expect_null(fg_npy_map(path, &m));
    cr_expect_eq(fg_last_status(), FG_ERR_FORMAT);
    cr_expect(strstr(fg_last_error(), path), "%s", fg_last_error());
    snprintf(path, sizeof path, "%s/fifo.npy", g_dir);
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
    cr_expect_null(fg_npy_map(path, &m)); /* no writer: refused at once (the suite's timeout catches a hang) */
    cr_expect(strstr(fg_last_error(), path) && strstr(fg_last_error(), "FIFO"), "%s", fg_last_error());
}

Test(npy_map, a_pipe_is_read_whole_into_a_copy) {
    size_t n;
    unsigned char *b = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 128, 24, &n);
    char path[64];
    int fd = fgt_pipe_with(b, n, path, sizeof path);
    fg_npy_mapping m;
    fg_tensor *t = fg_npy_map(path, &m);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_expect_null(m.addr);
    fg_tensor *want = fg_npy_parse(b, n);
    cr_assert_not_null(want, "%s", fg_last_error());
    expect_same(t, want, "from a pipe");
    fg_release(t);
    fg_release(want);
    close(fd);
    free(b);
}
