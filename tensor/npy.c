/* npy.c — reading and writing NumPy .npy files (format versions 1.0 and 2.0).
 *
 * The format (numpy/lib/format.py documents it):
 *   bytes 0..5   magic "\x93NUMPY"
 *   byte  6, 7   major, minor version (1.0, 2.0; 3.0 only changes the header encoding to UTF-8)
 *   then         header length H: uint16 little-endian (1.0) or uint32 (2.0)
 *   then         H bytes of header: a Python dict literal, e.g.
 *                  {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 *                padded with spaces and ended with '\n' so the data starts at a multiple of 64
 *   then         the array bytes, C order when fortran_order is False.
 *
 * The header is parsed by a small recursive-descent reader of just that dict: three known keys in
 * any order, string / True / False / tuple-of-ints values, Python whitespace, an optional trailing
 * comma. Every read is checked against the end of the buffer (the parser is fuzzed).
 */
#include "tensor/npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tensor/fileio.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host ('<f4' data is used as is)"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* numpy itself refuses headers above 10000 bytes by default; a float array's header is < 200. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

/* All parse errors: "npy: <problem>", or "npy: '<path>': <problem>" when loading a file. */
static fg_status npy_fail(const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static fg_status npy_fail(const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path) return fg_error(FG_ERR_FORMAT, "npy: '%s': %s", path, msg);
    return fg_error(FG_ERR_FORMAT, "npy: %s", msg);
}

/* "(2, 3)" / "(5,)" / "()": Python's repr of a shape tuple, the way numpy writes it. */
static void shape_repr(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "(");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, ndim == 1 ? ",)" : ")");
}

/* ---------------------------------------------------------------------------------------------
 * header dict parser
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
    const char *path; /* for messages */
} npy_cursor;

static void skip_ws(npy_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* What is at the cursor, for messages: "'x'", "end of header". */
static const char *here(const npy_cursor *c, char *buf, size_t cap) {
    if (c->p >= c->end) return "the end of the header";
    unsigned ch = *c->p;
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(buf, cap, "'%c'", (char)ch);
    else
        snprintf(buf, cap, "byte 0x%02x", ch);
    return buf;
}

/* A Python string literal in single or double quotes, without escapes (no key or dtype needs
 * them). Copies up to cap-1 characters into out (non-printable ones as '?'); *len is the full
 * length. */
static fg_status parse_pystr(npy_cursor *c, char *out, size_t cap, size_t *len) {
    char hb[16];
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return npy_fail(c->path, "header: expected a quoted string, found %s", here(c, hb, sizeof hb));
    unsigned char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        unsigned char ch = *c->p;
        if (ch == '\\') return npy_fail(c->path, "header: escapes in strings are not supported");
        if (ch == '\n') break; /* an unterminated literal */
        if (n + 1 < cap) out[n] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        n++;
        c->p++;
    }
    if (c->p >= c->end || *c->p != q) return npy_fail(c->path, "header: unterminated string");
    c->p++;
    out[n + 1 < cap ? n : cap - 1] = '\0';
    *len = n;
    return FG_OK;
}

/* A non-negative Python int (numpy under Python 2 wrote "3L"). */
static fg_status parse_pyint(npy_cursor *c, int64_t *v) {
    char hb[16];
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') {
        if (c->p < c->end && *c->p == '-') return npy_fail(c->path, "header: negative dimension in shape");
        return npy_fail(c->path, "header: expected a dimension in shape, found %s", here(c, hb, sizeof hb));
    }
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return npy_fail(c->path, "header: dimension in shape is too large");
        x = x * 10 + d;
        c->p++;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++;
    *v = (int64_t)x;
    return FG_OK;
}

/* "(d0, d1, ...)" with Python's tuple rules: "()" is empty, "(5,)" is 1-d, "(5)" is not a tuple.
 * Counts dimensions beyond FG_MAX_DIMS without storing them, to name the rank in the message. */
static fg_status parse_shape(npy_cursor *c, int *ndim, int64_t *shape) {
    char hb[16];
    if (c->p >= c->end || *c->p != '(')
        return npy_fail(c->path, "header: 'shape' must be a tuple, found %s", here(c, hb, sizeof hb));
    c->p++;
    int n = 0, trailing_comma = 0;
    skip_ws(c);
    while (c->p < c->end && *c->p != ')') {
        int64_t d = 0;
        fg_status st = parse_pyint(c, &d);
        if (st) return st;
        if (n < FG_MAX_DIMS) shape[n] = d;
        if (n < 1000000) n++;
        skip_ws(c);
        trailing_comma = 0;
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            trailing_comma = 1;
            skip_ws(c);
        } else if (c->p < c->end && *c->p != ')') {
            return npy_fail(c->path, "header: expected ',' or ')' in shape, found %s", here(c, hb, sizeof hb));
        }
    }
    if (c->p >= c->end) return npy_fail(c->path, "header: unterminated shape tuple");
    c->p++; /* ')' */
    if (n == 1 && !trailing_comma)
        return npy_fail(c->path,
                        "header: shape (%lld) is not a tuple (a 1-d shape is written "
                        "(%lld,))",
                        (long long)shape[0], (long long)shape[0]);
    if (n > FG_MAX_DIMS)
        return npy_fail(c->path, "rank %d arrays are not supported (at most %d dimensions)", n, FG_MAX_DIMS);
    *ndim = n;
    return FG_OK;
}

static int match_word(npy_cursor *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
    /* "Trueish" is not True */
    if ((size_t)(c->end - c->p) > n) {
        unsigned char nx = c->p[n];
        if ((nx >= 'a' && nx <= 'z') || (nx >= 'A' && nx <= 'Z') || (nx >= '0' && nx <= '9') || nx == '_') return 0;
    }
    c->p += n;
    return 1;
}

/* The dtype string: little-endian float32 / float64, and bfloat16 as ml_dtypes writes it.
 * numpy has no bfloat16 of its own; ml_dtypes' bfloat16 (the one JAX, TensorFlow and Keras use)
 * is a numpy dtype of kind 'V' whose np.save descr is '<V2' — the only two-byte type ml_dtypes
 * has, and a byte order numpy itself never gives a void type. A plain two-byte void ('|V2') or
 * integer ('<u2', '<i2': torch's bf16.view(int16), or token ids) carries no claim that the bits
 * are bfloat16, and float16 ('<f2') is another format: each is refused with a line saying how to
 * write bfloat16 that is read as such. */
static fg_status check_descr(const char *path, const char *d, size_t len, fg_dtype *dt) {
    if (len == 3 && strcmp(d, "<V2") == 0) {
        *dt = FG_BF16;
        return FG_OK;
    }
    if (len == 3 && (strcmp(d, "|V2") == 0 || strcmp(d, "<u2") == 0 || strcmp(d, "<i2") == 0 || strcmp(d, "<f2") == 0))
        return npy_fail(path,
                        "dtype '%s' is not known to hold bfloat16 (bfloat16 is read from ml_dtypes' '<V2', "
                        "as np.save of an ml_dtypes.bfloat16 array writes it; or save float32)",
                        d);
    if (len == 3 && strcmp(d, "<f4") == 0) {
        *dt = FG_F32;
        return FG_OK;
    }
    if (len == 3 && strcmp(d, "<f8") == 0) {
        *dt = FG_F64;
        return FG_OK;
    }
    if (len == 3 && (strcmp(d, ">f4") == 0 || strcmp(d, ">f8") == 0))
        return npy_fail(path,
                        "dtype '%s' is not supported (big-endian data; float32 and float64 "
                        "little-endian only)",
                        d);
    return npy_fail(path, "dtype '%s%s' is not supported (float32, float64 and bfloat16 '<V2' only)", d,
                    len > 47 ? "..." : ""); /* 47: what parse_dict keeps */
}

static fg_status parse_dict(npy_cursor *c, fg_npy_info *info) {
    char hb[16];
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    int fortran = 0;
    char descr[48];
    size_t descr_len = 0;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{')
        return npy_fail(c->path, "header is not a dict: expected '{', found %s", here(c, hb, sizeof hb));
    c->p++;
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') break;
        char key[32];
        size_t klen;
        fg_status st = parse_pystr(c, key, sizeof key, &klen);
        if (st) return st;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':')
            return npy_fail(c->path, "header: expected ':' after key '%s', found %s", key, here(c, hb, sizeof hb));
        c->p++;
        skip_ws(c);
        if (klen == 5 && strcmp(key, "descr") == 0) {
            if (seen_descr) return npy_fail(c->path, "header: key 'descr' appears twice");
            seen_descr = 1;
            if (c->p < c->end && (*c->p == '[' || *c->p == '{'))
                return npy_fail(c->path, "structured dtypes are not supported (float32 and float64 "
                                         "only)");
            st = parse_pystr(c, descr, sizeof descr, &descr_len);
            if (st) return st;
        } else if (klen == 13 && strcmp(key, "fortran_order") == 0) {
            if (seen_fortran) return npy_fail(c->path, "header: key 'fortran_order' appears twice");
            seen_fortran = 1;
            if (match_word(c, "True"))
                fortran = 1;
            else if (match_word(c, "False"))
                fortran = 0;
            else
                return npy_fail(c->path, "header: 'fortran_order' must be True or False, found %s",
                                here(c, hb, sizeof hb));
        } else if (klen == 5 && strcmp(key, "shape") == 0) {
            if (seen_shape) return npy_fail(c->path, "header: key 'shape' appears twice");
            seen_shape = 1;
            st = parse_shape(c, &info->ndim, info->shape);
            if (st) return st;
        } else {
            return npy_fail(c->path,
                            "header: unexpected key '%s%s' (expected 'descr', "
                            "'fortran_order', 'shape')",
                            key, klen >= sizeof key ? "..." : "");
        }
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') break;
        return npy_fail(c->path, "header: expected ',' or '}' in dict, found %s", here(c, hb, sizeof hb));
    }
    c->p++; /* '}' */
    skip_ws(c);
    if (c->p < c->end) return npy_fail(c->path, "header: unexpected %s after the dict", here(c, hb, sizeof hb));
    if (!seen_descr || !seen_fortran || !seen_shape)
        return npy_fail(c->path, "header lacks key '%s'",
                        !seen_descr     ? "descr"
                        : !seen_fortran ? "fortran_order"
                                        : "shape");
    /* Checked after parsing, so a dtype problem is reported even when another key is odd. */
    fg_status st = check_descr(c->path, descr, descr_len, &info->dtype);
    if (st) return st;
    if (fortran) return npy_fail(c->path, "fortran_order arrays are not supported");
    return FG_OK;
}

/* The preamble (magic, version, length) and the dict. `b` holds at least `avail` bytes of the file,
 * whose full size is `total`; avail must cover the header (the caller ensures it, or the header is
 * reported truncated). */
static fg_status npy_header(const unsigned char *b, size_t avail, uint64_t total, const char *path, fg_npy_info *info) {
    memset(info, 0, sizeof *info);
    if (avail < NPY_MAGIC_LEN || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (total < NPY_MAGIC_LEN)
            return npy_fail(path, "not a .npy file (%llu bytes, too short for the magic string)",
                            (unsigned long long)total);
        return npy_fail(path, "not a .npy file (it does not start with \"\\x93NUMPY\")");
    }
    if (avail < 8) return npy_fail(path, "truncated file (no format version)");
    int major = b[6], minor = b[7];
    if ((major != 1 && major != 2) || minor != 0)
        return npy_fail(path, "version %d.%d is not supported (1.0 and 2.0 only)", major, minor);
    size_t lenbytes = major == 1 ? 2 : 4;
    if (avail < 8 + lenbytes) return npy_fail(path, "truncated file (no header length)");
    size_t hlen = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                             : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    size_t hstart = 8 + lenbytes;
    if (hlen > NPY_MAX_HEADER)
        return npy_fail(path, "header length %zu is implausibly large (limit %zu)", hlen, NPY_MAX_HEADER);
    if (hstart + hlen > total)
        return npy_fail(path,
                        "truncated header (header says %zu bytes, file has %llu after the "
                        "preamble)",
                        hlen, (unsigned long long)(total - hstart));
    if (hstart + hlen > avail) return npy_fail(path, "file shrank while being read");
    info->version_major = major;
    npy_cursor c = {b + hstart, b + hstart + hlen, path};
    fg_status st = parse_dict(&c, info);
    if (st) return st;

    /* bytes = prod(shape) * itemsize, refusing overflow of int64 / size_t */
    /* the nonzero sizes too: a tensor's strides are products of trailing sizes, whatever a zero
     * size elsewhere makes of the element count */
    uint64_t numel = 1, nonzero = 1;
    for (int i = 0; i < info->ndim; i++) {
        if (__builtin_mul_overflow(numel, (uint64_t)info->shape[i], &numel) || numel > (uint64_t)INT64_MAX ||
            (info->shape[i] > 0 && (__builtin_mul_overflow(nonzero, (uint64_t)info->shape[i], &nonzero) ||
                                    nonzero > (uint64_t)INT64_MAX / 8))) {
            char sb[160];
            shape_repr(sb, sizeof sb, info->ndim, info->shape);
            return npy_fail(path, "shape %s has too many elements", sb);
        }
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)fg_dtype_size(info->dtype), &bytes) || bytes > (uint64_t)INT64_MAX ||
        bytes > (uint64_t)SIZE_MAX) {
        char sb[160];
        shape_repr(sb, sizeof sb, info->ndim, info->shape);
        return npy_fail(path, "shape %s has too many elements", sb);
    }
    info->data_offset = hstart + hlen;
    info->data_bytes = (size_t)bytes;
    uint64_t have = total - info->data_offset;
    if (have != bytes) {
        char sb[160];
        shape_repr(sb, sizeof sb, info->ndim, info->shape);
        return npy_fail(path, "file holds %llu bytes of data, shape %s needs %llu", (unsigned long long)have, sb,
                        (unsigned long long)bytes);
    }
    return FG_OK;
}

fg_status fg_npy_parse_header(const void *buf, size_t n, fg_npy_info *info) {
    if (!info) return fg_error(FG_ERR_ARG, "npy: NULL info");
    if (!buf && n) return fg_error(FG_ERR_ARG, "npy: NULL buffer");
    return npy_header(buf ? buf : "", n, n, NULL, info);
}

static fg_tensor *tensor_from(const fg_npy_info *info, const void *data) {
    fg_tensor *t = fg_empty(info->dtype, FG_CPU, info->ndim, info->shape);
    if (!t) return NULL;
    if (info->data_bytes) memcpy(fg_data(t), data, info->data_bytes);
    return t;
}

fg_tensor *fg_npy_parse(const void *buf, size_t n) {
    fg_npy_info info;
    if (fg_npy_parse_header(buf, n, &info)) return NULL;
    return tensor_from(&info, (const unsigned char *)buf + info.data_offset);
}

/* ---------------------------------------------------------------------------------------------
 * load
 * ------------------------------------------------------------------------------------------- */

/* pread until n bytes or EOF; returns bytes read or -1 with errno. */
static ssize_t pread_full(int fd, void *dst, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - got;
        ssize_t r = pread(fd, (char *)dst + got, want, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* The load from a descriptor of fg_open_read (size: the regular file's, or -1 for a stream); closes
 * fd. */
static fg_tensor *load_fd(int fd, int64_t size, const char *path) {
    if (size < 0) {
        /* A FIFO/pipe: take it whole (up to FG_NPY_STREAM_MAX_BYTES) and parse from memory. */
        void *buf;
        size_t n;
        fg_status rs = fg_read_fd(fd, path, FG_NPY_STREAM_MAX_BYTES, &buf, &n);
        close(fd);
        if (rs != FG_OK) return NULL;
        fg_npy_info info;
        fg_tensor *t = NULL;
        if (npy_header(buf, n, n, path, &info) == FG_OK)
            t = tensor_from(&info, (const unsigned char *)buf + info.data_offset);
        free(buf);
        return t;
    }
    /* Regular file: read the preamble, then the header, then the data straight into the tensor. */
    uint64_t total = (uint64_t)size;
    unsigned char pre[12];
    fg_tensor *t = NULL;
    unsigned char *hdr = NULL;
    ssize_t got = pread_full(fd, pre, sizeof pre, 0);
    if (got < 0) {
        fg_error(FG_ERR_IO, "npy: error reading '%s': %s", path, strerror(errno));
        goto out;
    }
    size_t hend = (size_t)got;
    if (got >= 12 && memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) == 0 && (pre[6] == 1 || pre[6] == 2)) {
        size_t hlen = pre[6] == 1
                          ? (size_t)pre[8] | (size_t)pre[9] << 8
                          : (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        size_t hstart = pre[6] == 1 ? 10 : 12;
        if (hlen <= NPY_MAX_HEADER && hstart + hlen <= total) hend = hstart + hlen;
    }
    hdr = malloc(hend > sizeof pre ? hend : sizeof pre);
    if (!hdr) {
        fg_error(FG_ERR_OOM, "npy: out of memory reading the header of '%s'", path);
        goto out;
    }
    got = pread_full(fd, hdr, hend, 0);
    if (got < 0) {
        fg_error(FG_ERR_IO, "npy: error reading '%s': %s", path, strerror(errno));
        goto out;
    }
    fg_npy_info info;
    if (npy_header(hdr, (size_t)got, total, path, &info)) goto out;
    t = fg_empty(info.dtype, FG_CPU, info.ndim, info.shape);
    if (!t) goto out;
    if (info.data_bytes) {
        got = pread_full(fd, fg_data(t), info.data_bytes, (off_t)info.data_offset);
        if (got < 0 || (size_t)got != info.data_bytes) {
            if (got < 0)
                fg_error(FG_ERR_IO, "npy: error reading '%s': %s", path, strerror(errno));
            else
                fg_error(FG_ERR_FORMAT, "npy: '%s': file shrank while being read", path);
            fg_release(t);
            t = NULL;
        }
    }
out:
    free(hdr);
    close(fd);
    return t;
}

fg_tensor *fg_npy_load(const char *path) {
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "npy: empty file path");
        return NULL;
    }
    int fd;
    int64_t size;
    if (fg_open_read(path, 1, &fd, &size) != FG_OK) return NULL;
    return load_fd(fd, size, path);
}

fg_tensor *fg_npy_map(const char *path, fg_npy_mapping *m) {
    if (!m) {
        fg_error(FG_ERR_ARG, "npy: NULL mapping");
        return NULL;
    }
    m->addr = NULL;
    m->len = 0;
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "npy: empty file path");
        return NULL;
    }
    int fd;
    int64_t size;
    if (fg_open_read(path, 1, &fd, &size) != FG_OK) return NULL;
    if (size <= 0 || (uint64_t)size > (uint64_t)SIZE_MAX) return load_fd(fd, size, path); /* a stream, or empty */
    /* MAP_POPULATE: the page-table entries in one call, not one fault per page later */
    void *a = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (a == MAP_FAILED) return load_fd(fd, size, path); /* a file system without mmap */
    close(fd);
    fg_mapped_register(a, (size_t)size, path); /* a SIGBUS there names the file (fileio.h) */
    fg_npy_info info;
    if (npy_header(a, (size_t)size, (uint64_t)size, path, &info) != FG_OK) {
        fg_mapped_unregister(a);
        munmap(a, (size_t)size);
        return NULL;
    }
    unsigned char *data = (unsigned char *)a + info.data_offset;
    fg_tensor *t;
    if (info.data_offset % fg_dtype_size(info.dtype) == 0) { /* the mapping is page-aligned */
        t = fg_from_blob(info.dtype, info.ndim, info.shape, data);
        if (t) {
            m->addr = a;
            m->len = (size_t)size;
            return t;
        }
    } else
        t = tensor_from(&info, data);
    fg_mapped_unregister(a);
    munmap(a, (size_t)size);
    return t;
}

void fg_npy_unmap(fg_npy_mapping *m) {
    if (!m || !m->addr) return;
    fg_mapped_unregister(m->addr);
    munmap(m->addr, m->len);
    m->addr = NULL;
    m->len = 0;
}

/* ---------------------------------------------------------------------------------------------
 * save
 * ------------------------------------------------------------------------------------------- */

fg_status fg_npy_save_raw(const char *path, fg_dtype dt, int ndim, const int64_t *shape, const void *data) {
    if (!path || !*path) return fg_error(FG_ERR_ARG, "npy save: empty file path");
    if (dt != FG_F32 && dt != FG_F64 && dt != FG_BF16)
        return fg_error(FG_ERR_DTYPE, "npy save '%s': unsupported dtype %d", path, (int)dt);
    if (ndim < 0 || ndim > FG_MAX_DIMS || (ndim > 0 && !shape))
        return fg_error(FG_ERR_ARG, "npy save '%s': bad rank %d", path, ndim);
    uint64_t bytes = fg_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return fg_error(FG_ERR_ARG, "npy save '%s': negative dimension %lld", path, (long long)shape[i]);
        if (__builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes) || bytes > SIZE_MAX)
            return fg_error(FG_ERR_ARG, "npy save '%s': shape too large", path);
    }
    if (bytes && !data) return fg_error(FG_ERR_ARG, "npy save '%s': NULL data", path);

    char sb[FG_MAX_DIMS * 24 + 8];
    shape_repr(sb, sizeof sb, ndim, shape);
    char dict[sizeof sb + 96];
    int dlen = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                        dt == FG_F32 ? "<f4" : dt == FG_F64 ? "<f8" : "<V2", sb);
    /* Pad with spaces and a final '\n' so preamble + header is a multiple of 64 (numpy >= 1.14
     * does the same: aligned data can be memory-mapped and loaded with vector loads). Version 2.0
     * only when the header cannot fit a uint16 length. */
    size_t pre = 10, hlen = (size_t)dlen + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    int major = 1;
    if (hlen > 65535) {
        major = 2;
        pre = 12;
        hlen = (size_t)dlen + 1;
        hlen += (64 - (pre + hlen) % 64) % 64;
    }
    unsigned char *head = malloc(pre + hlen);
    if (!head) return fg_error(FG_ERR_OOM, "npy save '%s': out of memory", path);
    memcpy(head, NPY_MAGIC, NPY_MAGIC_LEN);
    head[6] = (unsigned char)major;
    head[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) head[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(head + pre, dict, (size_t)dlen);
    memset(head + pre + dlen, ' ', hlen - (size_t)dlen - 1);
    head[pre + hlen - 1] = '\n';

    const void *parts[2] = {head, data};
    size_t sizes[2] = {pre + hlen, (size_t)bytes};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 2);
    free(head);
    return st;
}

fg_status fg_npy_save(const char *path, const fg_tensor *t) {
    if (!t) return fg_error(FG_ERR_ARG, "npy save '%s': NULL tensor", path ? path : "");
    /* A contiguous CPU tensor is written from its own memory; anything else (a view with strides,
     * a device tensor) is first gathered in C order on the host. */
    if (t->device == FG_CPU && fg_is_contiguous(t))
        return fg_npy_save_raw(path, t->dtype, t->ndim, t->shape, fg_data(t));
    size_t nb = fg_nbytes(t);
    void *host = malloc(nb ? nb : 1);
    if (!host) return fg_error(FG_ERR_OOM, "npy save '%s': out of memory for %zu bytes", path, nb);
    fg_status st = fg_to_host(t, host);
    if (st == FG_OK) st = fg_npy_save_raw(path, t->dtype, t->ndim, t->shape, host);
    free(host);
    return st;
}
