/* npy.h — NumPy .npy files: float32 and float64, C order, format versions 1.0 and 2.0, and
 * bfloat16 as ml_dtypes' np.save writes it: descr '<V2', two bytes of bf16 bits per element (load
 * it in Python with np.load(path).view(ml_dtypes.bfloat16)). '|V2', '<u2', '<i2' and '<f2' are
 * refused: nothing in them says the bits are bfloat16.
 *
 * Anything else (other dtypes, big-endian data, Fortran order, version 3.0, object arrays, rank
 * above FG_MAX_DIMS) is refused with FG_ERR_FORMAT and a message naming what is unsupported.
 * A truncated or malformed file is refused the same way; nothing is ever read past the buffer.
 */
#ifndef FG_NPY_H
#define FG_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a .npy header says. data_offset is where the array bytes start in the file; data_bytes is
 * numel * element size (the file must hold exactly that many bytes after the header). */
typedef struct {
    int version_major;          /* 1 or 2 */
    fg_dtype dtype;             /* FG_F32 ('<f4'), FG_F64 ('<f8') or FG_BF16 ('<V2') */
    int ndim;                   /* 0 .. FG_MAX_DIMS */
    int64_t shape[FG_MAX_DIMS]; /* outermost first */
    size_t data_offset;
    size_t data_bytes;
} fg_npy_info;

/* Parses and checks the header of a whole .npy file held in buf (n bytes: the header and all the
 * data), including that exactly data_bytes follow the header. No allocation; FG_ERR_FORMAT with a
 * message naming the problem. */
fg_status fg_npy_parse_header(const void *buf, size_t n, fg_npy_info *info);

/* A new contiguous CPU tensor (caller releases), or NULL with fg_last_error(). Regular files are
 * read straight into the tensor (no second copy of the data). A FIFO/pipe (bash's <(...),
 * /dev/stdin of a pipe) is read whole, up to FG_NPY_STREAM_MAX_BYTES, without waiting for a writer
 * (see fg_read_file); directories and devices such as /dev/zero are refused. */
fg_tensor *fg_npy_load(const char *path);
/* The largest .npy taken from a FIFO/pipe (1 GiB); larger arrays must come from a regular file. */
#define FG_NPY_STREAM_MAX_BYTES ((size_t)1 << 30)
/* Zero-copy loading: a regular file is mapped read-only (mmap, MAP_PRIVATE) and, when its data is
 * aligned for its dtype (numpy aligns it to 64 bytes), the tensor is a view of the mapping (its
 * data belongs to the mapping: never write to it, release the tensor before fg_npy_unmap(m)). The
 * header gets fg_npy_load's checks, and what fg_npy_load refuses is refused the same way; a
 * FIFO/pipe, a misaligned data offset or a file system without mmap give a copy as fg_npy_load
 * does (m->addr is then NULL). The mapping holds the file's pages, not a copy: another process that
 * truncates the file while it is mapped makes later reads fault (SIGBUS), as with numpy's
 * mmap_mode — for inputs a run owns, as `flashgrad attention`'s. The tensor is a new reference, or
 * NULL with fg_last_error() (m->addr NULL). */
typedef struct {
    void *addr; /* NULL: nothing mapped (the tensor is a copy) */
    size_t len;
} fg_npy_mapping;
fg_tensor *fg_npy_map(const char *path, fg_npy_mapping *m);
/* Unmaps what fg_npy_map mapped (nothing when m->addr is NULL); m is cleared. */
void fg_npy_unmap(fg_npy_mapping *m);
/* The same from bytes in memory (used by the file loader and the fuzzer). */
fg_tensor *fg_npy_parse(const void *buf, size_t n);
/* Writes version 1.0 (2.0 if the header needs it), atomically: a temporary file in the same
 * folder, fsync, rename. Any device; the data is copied to the host first. */
fg_status fg_npy_save(const char *path, const fg_tensor *t);
/* The same for a host buffer of `dt` elements in C order, shape (ndim, shape) — no tensor needed. */
fg_status fg_npy_save_raw(const char *path, fg_dtype dt, int ndim, const int64_t *shape, const void *data);

#ifdef __cplusplus
}
#endif
#endif /* FG_NPY_H */
