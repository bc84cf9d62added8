/* safetensors.h — checkpoints in the safetensors format, with a checksum.
 *
 * The format (huggingface/safetensors, "Format" in its README):
 *   8 bytes      N, the header length, unsigned little-endian
 *   N bytes      a JSON object, padded at the end with spaces:
 *                  {"__metadata__": {"key": "value", ...},
 *                   "wte": {"dtype": "F32", "shape": [64, 32], "data_offsets": [0, 8192]}, ...}
 *   the rest     the data buffer; each tensor's bytes (C order, little-endian) are
 *                [begin, end) of it; together they cover it exactly, with no overlap and no gap.
 *
 * flashgrad's writer pads the header so the data starts at a multiple of 8, lays the tensors out by
 * falling element size (so every tensor is aligned to its element size), lists the header in name
 * order, and stores "fg_checksum": "xxh64v2:<H>:<D>" in the metadata, H and D 16 lowercase hex
 * digits each, both XXH64 with seed 0 (fileio.h):
 *   D  of the whole data buffer;
 *   H  of the header's content in a canonical form, so that JSON whitespace, key order and escapes
 *      do not matter but every byte of every key, value, name, dtype, shape and offset does:
 *        u64 m, then m times (str key, str value)       metadata but fg_checksum, in key order
 *        u64 t, then t times (str name, str dtype,      tensors in name order; dtype as "F32"
 *                             u64 ndim, ndim u64 dims, u64 begin, u64 end)
 *      where u64 is 8 bytes little-endian, str is u64 byte length then the bytes (UTF-8 as decoded
 *      from the JSON), and "order" is byte order (strcmp).
 * Files are written atomically (fileio.h). Python's `safetensors` library reads them; flashgrad
 * reads files from other writers too: the checksum is checked only when present, and the form
 * "xxh64:<D>" of older flashgrad writers (data only) is checked too. fg_st_checksum_coverage says
 * which one a file had, so a caller that trusts its metadata can require the full one.
 *
 * The reader loads the whole file and validates it before anything is returned: header length
 * within the file, strict JSON (tensor/json.h) in the header's shape (objects, arrays, strings,
 * non-negative integers; no repeated key, no \u0000), known dtypes, shape
 * products that match the byte ranges, ranges that tile the data buffer, and the checksum. Every
 * error message starts with the file name and says what is wrong. Arrays of any of the format's
 * dtypes can be stored and read as raw bytes (optimizer moments, step counters, RNG state); F32 and
 * F64 ones also convert to and from fg_tensor.
 */
#ifndef FG_SAFETENSORS_H
#define FG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format's dtypes (its names: "F32", "I64", ...). Only grows at the end. */
typedef enum {
    FG_ST_F32 = 0,
    FG_ST_F64,
    FG_ST_I32,
    FG_ST_I64,
    FG_ST_U8,
    FG_ST_I8,
    FG_ST_I16,
    FG_ST_U16,
    FG_ST_U32,
    FG_ST_U64,
    FG_ST_F16,
    FG_ST_BF16,
    FG_ST_BOOL,
    FG_ST_F8_E4M3,
    FG_ST_F8_E5M2,
    FG_ST_DTYPE_COUNT
} fg_st_dtype;

/* "F32", "I64", ... ; "?" for an out-of-range value. */
const char *fg_st_dtype_name(fg_st_dtype dt);
/* Bytes per element; 0 for an out-of-range value. */
size_t fg_st_dtype_size(fg_st_dtype dt);
/* FG_F32 -> FG_ST_F32, FG_F64 -> FG_ST_F64, FG_BF16 -> FG_ST_BF16. */
fg_st_dtype fg_st_from_dtype(fg_dtype dt);

#define FG_ST_MAX_DIMS 8

/* One stored array. In a reader's table, name and data point into the reader (valid until
 * fg_st_close); data is aligned to the element size in files written by flashgrad, but may not be
 * in files from other writers — read it with memcpy, or use fg_st_read / fg_st_tensor. */
typedef struct {
    const char *name;
    fg_st_dtype dtype;
    int ndim;                      /* 0 .. FG_ST_MAX_DIMS */
    int64_t shape[FG_ST_MAX_DIMS]; /* outermost first */
    const void *data;
    size_t nbytes; /* numel * dtype size */
} fg_st_array;

/* ---- writing ---- */

typedef struct fg_st_writer fg_st_writer;

/* A new, empty writer (caller frees with fg_st_writer_free), or NULL on out-of-memory. */
fg_st_writer *fg_st_writer_new(void);
void fg_st_writer_free(fg_st_writer *w); /* NULL is fine */

/* Adds an array of `dt` elements in C order. BORROWS `data`: it is read during
 * fg_st_writer_write, so it must stay valid and unchanged until then. Names must be non-empty,
 * valid UTF-8, unique, and not "__metadata__". */
fg_status fg_st_writer_add(fg_st_writer *w, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                           const void *data);
/* The same, but copies the bytes now (for small state that lives on the stack: RNG, counters). */
fg_status fg_st_writer_add_copy(fg_st_writer *w, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                                const void *data);
/* Adds a tensor (any device, any strides). A contiguous CPU tensor is BORROWED like
 * fg_st_writer_add (keep it alive and unchanged until the write); others are copied to the host
 * now. Rank at most FG_MAX_DIMS. */
fg_status fg_st_writer_add_tensor(fg_st_writer *w, const char *name, const fg_tensor *t);
/* The metadata key of the checksum (see the top of the file): the writer's own, in every file it writes. */
#define FG_ST_CHECKSUM_KEY "fg_checksum"

/* Sets a metadata string (copied; a second call with the same key replaces the value). Keys and
 * values must be valid UTF-8 without NUL; "fg_checksum" is reserved for the writer. */
fg_status fg_st_writer_set_metadata(fg_st_writer *w, const char *key, const char *value);
/* Writes the file atomically, with the checksum. The writer stays usable (write again, add more). */
fg_status fg_st_writer_write(fg_st_writer *w, const char *path);
/* Everything fg_st_writer_write does before it opens the file (the header is built, its limits
 * checked); writes nothing. `path` names the file in messages. */
fg_status fg_st_writer_check(fg_st_writer *w, const char *path);
/* Metadata set so far: the value for `key` or NULL; all of it in the order it was first set (the
 * checksum is not among it). Owned by w. */
const char *fg_st_writer_metadata(const fg_st_writer *w, const char *key);
int fg_st_writer_metadata_count(const fg_st_writer *w);
void fg_st_writer_metadata_at(const fg_st_writer *w, int i, const char **key, const char **value);

/* ---- reading ---- */

typedef struct fg_st_file fg_st_file;

/* Reads and validates a whole file; NULL with fg_last_error() (FG_ERR_IO: cannot read;
 * FG_ERR_FORMAT: malformed, truncated, corrupted). Caller closes with fg_st_close. `path` must be
 * a regular file (bounded by its size): FIFOs/pipes, directories and devices such as /dev/zero are
 * refused at once, without reading or waiting for a writer. */
fg_st_file *fg_st_load(const char *path);
/* The same from bytes in memory (copied; `label` names them in messages, NULL = "safetensors").
 * Used by the loader's tests and the fuzzer. */
fg_st_file *fg_st_parse(const void *buf, size_t n, const char *label);
void fg_st_close(fg_st_file *f); /* NULL is fine */

/* The arrays, in name order: i in [0, fg_st_count). Owned by f. */
int fg_st_count(const fg_st_file *f);
const fg_st_array *fg_st_at(const fg_st_file *f, int i);
/* The array called `name`, or NULL when there is none (no error is recorded: absence may be
 * fine, e.g. optional state). */
const fg_st_array *fg_st_find(const fg_st_file *f, const char *name);

/* Copies array `name` into host memory dst (nbytes of it), after checking that it exists and has
 * exactly dtype dt and shape (ndim, shape): FG_ERR_ARG (missing), FG_ERR_DTYPE or FG_ERR_SHAPE
 * with a message that gives both. */
fg_status fg_st_read(const fg_st_file *f, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape, void *dst);
/* A new contiguous CPU tensor holding F32/F64/BF16 array `name` (BF16: an FG_BF16 tensor of the
 * same bits; caller releases), or NULL. */
fg_tensor *fg_st_tensor(const fg_st_file *f, const char *name);
/* Copies F32/F64 array `name` into an existing tensor of the same shape and dtype (any device,
 * any strides), e.g. a model parameter. */
fg_status fg_st_read_into(const fg_st_file *f, const char *name, fg_tensor *dst);

/* Metadata value for `key`, or NULL when absent. Owned by f. */
const char *fg_st_metadata(const fg_st_file *f, const char *key);
/* All metadata, in key order: i in [0, fg_st_metadata_count). */
int fg_st_metadata_count(const fg_st_file *f);
void fg_st_metadata_at(const fg_st_file *f, int i, const char **key, const char **value);

/* A peek at one metadata value of the safetensors file at `path` (a regular file, or a link to
 * one), from its header alone: the header is read, bounded like fg_st_load's, and parsed with the
 * same strict JSON reader, but the data and the checksum are not read. 1 when the header's
 * __metadata__ holds `key` with a string value, which is copied into out[0..cap) when out is not
 * NULL (0 when it does not fit); else 0. Leaves no error behind (a probe, not a load). */
int fg_st_peek_metadata(const char *path, const char *key, char *out, size_t cap);

/* What the file's checksum covered (it was verified when the file was read). */
typedef enum {
    FG_ST_SUM_NONE = 0, /* no checksum (another writer) */
    FG_ST_SUM_DATA,     /* "xxh64:": the data buffer only (older flashgrad writers) */
    FG_ST_SUM_ALL,      /* "xxh64v2:": the metadata, the tensor table and the data */
} fg_st_sum;
fg_st_sum fg_st_checksum_coverage(const fg_st_file *f);

#ifdef __cplusplus
}
#endif
#endif /* FG_SAFETENSORS_H */
