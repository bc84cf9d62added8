/* fileio.h — whole-file reads, crash-safe whole-file writes, and the XXH64 checksum.
 *
 * Every file flashgrad writes (.npy, .safetensors checkpoints, logs that must not be half-written)
 * goes through fg_write_file_atomic: the bytes go to a temporary file in the target's folder, are
 * fsync'ed, and the temporary file is renamed over the target, then the folder is fsync'ed. A crash
 * or a full disk at any moment leaves either the old file or the new one, never a mixture, and a
 * failed write removes its temporary file. Readers take a whole file into memory with a size limit
 * (fg_read_file), so parsers work on a bounded buffer and never on a stream; an input is a regular
 * file (a FIFO, a device, a directory or a socket is refused in one line, never read or waited on),
 * unless its reader asks for a stream by name (fg_open_read).
 *
 * The checksum is XXH64 (Yann Collet's xxHash, 64-bit variant), from libxxhash (Debian's
 * libxxhash-dev, used header-only): fast (several GB/s), 64 bits, and checkable with any xxHash tool
 * (`xxhsum -H1`, Python's `xxhash.xxh64`): fg_xxh64(data, n, seed) is libxxhash's XXH64(data, n, seed).
 */
#ifndef FG_FILEIO_H
#define FG_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the concatenation of parts[0..nparts) (sizes[i] bytes each; a part with size 0 may be
 * NULL) to `path`, atomically as described above. The new file gets the mode of the file it
 * replaces, or 0666 minus the umask when there is none. On failure returns FG_ERR_IO (FG_ERR_ARG for
 * bad arguments) with the path and the system's reason; the old target, if any, is untouched and no
 * temporary file is left. What may be replaced: see fg_check_replaceable. */
fg_status fg_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes, int nparts);

/* FG_OK when a write-by-rename may put a new file at `path`: nothing is there, or a regular file, or
 * a symbolic link (the link itself is replaced, never followed: what it points to is untouched). A
 * regular file with other hard links is replaced by the rename too: this name gets the new file,
 * the other names keep the old one (nothing is ever written into an existing file). Anything else
 * (a directory, a character or block device such as /dev/null, a FIFO, a socket) is refused with
 * FG_ERR_IO, "cannot write '<path>': it is a character device, not a regular file (nothing was
 * written)", since renaming over it would replace the special file. Every writer of the tree
 * (fg_write_file_atomic, fg_atomic_*, fg_rename_replace) checks this before its temporary is made
 * and again just before its rename. */
fg_status fg_check_replaceable(const char *path);

/* A streaming write-by-rename, for writers that produce their file piece by piece (CSV tables):
 * fg_atomic_begin checks the target (fg_check_replaceable) and makes the temporary beside it
 * (af->fd is open for writing, mode set as fg_write_file_atomic's); fg_atomic_commit fsyncs and
 * closes it, checks the target again, renames it into place and fsyncs the folder; fg_atomic_abort
 * removes the temporary. Both end the handle (af->fd is -1 afterwards, nothing left to free). On a
 * failed begin nothing needs ending. A caller that writes through stdio fdopen()s a dup() of af->fd
 * and fcloses that stream (checking it) before committing. */
typedef struct {
    int fd;
    char *path, *tmp, *dir; /* owned copies; NULL once ended */
} fg_atomic_file;
fg_status fg_atomic_begin(fg_atomic_file *af, const char *path);
fg_status fg_atomic_commit(fg_atomic_file *af);
void fg_atomic_abort(fg_atomic_file *af);

/* rename(from, to) for a file the caller made (a temporary): refuses a `to` that
 * fg_check_replaceable refuses, and fsyncs nothing. FG_OK or FG_ERR_IO with both names. */
fg_status fg_rename_replace(const char *from, const char *to);

/* Makes the entries of folder `dir` durable (after a rename into it, or a removal from it): fsync of
 * the folder itself. 0, also when the folder cannot be opened or its filesystem cannot fsync a
 * folder (EINVAL, EROFS: nothing more can be done there); -1 with errno when the fsync failed. The
 * one way flashgrad fsyncs a folder (fg_atomic_commit and every writer of a folder of files). */
int fg_fsync_dir(const char *dir);

/* Removes the plain files in folder `dir` (one the caller made: a temporary output folder, or the
 * one an overwrite replaced), then `dir` itself; best effort, errors are ignored. */
void fg_remove_flat_dir(const char *dir);

/* The temporary of fg_write_file_atomic(path) is named path FG_TMP_MARK "XXXXXX" (mkstemp's six
 * letters and digits): distinctive, so that a writer's leftovers after a kill can be told from a
 * user's own files. */
#define FG_TMP_MARK ".flashgrad-tmp."

/* A writer holds an exclusive flock(2) on its temporary (a file, or a folder it builds) for as long
 * as it works on it; the kernel drops the lock when the writer's process ends, however it ends.
 * fg_tmp_abandoned(path) takes that lock without waiting: 1 when it could (no live writer owns the
 * temporary: what is there was left by one that died), 0 when a live writer holds it or `path`
 * cannot be opened (a symbolic link is never followed). fg_tmp_hold(fd) takes the lock for the
 * writer of fd; 0 or -1 (errno). */
int fg_tmp_abandoned(const char *path);
int fg_tmp_hold(int fd);

/* The process's umask, read without changing it (umask(2) would, for a moment, for every thread). */
unsigned fg_umask(void);

/* Reads the whole of the regular file `path` into a new malloc'ed buffer: *buf (caller frees with
 * free()) holds *n bytes followed by one extra '\0' (so text can be used as a C string). With
 * fg_open_read below (for readers that map or pread), it is how every input flashgrad parses is
 * opened (configs, checkpoints, model, tokenizer and token files, logs, caches): it never blocks
 * and never reads without a bound. `path` (or what a symbolic link at it points to) must be a
 * regular file: a FIFO or pipe (with or without a writer), a directory, a character device such as
 * /dev/zero or a terminal, a block device or a socket is refused without reading, "cannot read
 * '<path>': it is a FIFO/pipe, not a regular file". The file is refused when larger than
 * max_bytes; with max_bytes 0 its size is the only limit (and a file that grows while it is read is
 * refused, not followed). Streams are read only where a caller asks for them by name (fg_open_read
 * with allow_stream, then fg_read_fd). Failures are FG_ERR_IO (FG_ERR_OOM when memory runs out,
 * FG_ERR_ARG for NULL pointers or an empty path), with the path and the reason; *buf is then NULL
 * and *n is 0. */
fg_status fg_read_file(const char *path, size_t max_bytes, void **buf, size_t *n);

/* The two steps of fg_read_file, for readers that take regular files their own way (pread of a
 * header, mmap, the data straight into place), and for the few inputs that may also be a stream
 * (.npy arrays, which bash's <(...) and /dev/stdin of a pipe hand over).
 *
 * fg_open_read opens `path` read-only without blocking (O_NONBLOCK, so a FIFO's open never waits
 * for a writer), refuses what fg_read_file refuses (FIFOs/pipes too unless allow_stream) and gives
 * the descriptor in *fd (the caller closes it; reads on it block as usual) and *size = the size of
 * a regular file, or -1 for a FIFO/pipe. On failure *fd is -1.
 *
 * fg_read_fd reads an open descriptor from its current position to end of file, with fg_read_file's
 * limits; a FIFO/pipe needs max_bytes > 0, is read to end of file (a writer that never writes is
 * waited for: streams are for callers that asked for one), and is refused when it gives no data (a
 * FIFO that no process holds open for writing reads that way at once). `path` names it in
 * messages. It does not close fd. */
fg_status fg_open_read(const char *path, int allow_stream, int *fd, int64_t *size);
fg_status fg_read_fd(int fd, const char *path, size_t max_bytes, void **buf, size_t *n);

/* ---- memory-mapped inputs and SIGBUS ----
 * A file mapped into memory that another process truncates (or that sits on a disk that fails)
 * makes every later read of the lost pages raise SIGBUS, which would end the program with no
 * message. Mappers register each mapping; a program that calls fg_mapped_install_sigbus turns such
 * a SIGBUS into one line on stderr,
 *   "<prog>: '<path>' changed (truncated?) while it was being read ...<note>"
 * and exit status 1. A SIGBUS outside every registered mapping keeps the default action. */

/* Records [addr, addr + len) as a mapping of `path`. Returns 0, or -1 when the table is full (the
 * mapping works as before, only its SIGBUS stays unexplained). Safe from any thread. */
int fg_mapped_register(const void *addr, size_t len, const char *path);
/* Forgets the mapping at addr (call before munmap). */
void fg_mapped_unregister(const void *addr);
/* Installs the SIGBUS handler; prog starts the line ("flashgrad train"). Idempotent. */
void fg_mapped_install_sigbus(const char *prog);
/* Text appended to that line (e.g. "; the last good checkpoint is in DIR (step 40)"), copied; NULL
 * or "" for none. Safe to call while the handler may run. */
void fg_mapped_set_note(const char *note);

/* ---- XXH64 checksum ---- */

/* XXH64 of n bytes with a seed (use 0 unless you need separate hash families). */
uint64_t fg_xxh64(const void *data, size_t n, uint64_t seed);

/* Streaming form: the digest of several updates equals fg_xxh64 of their concatenation. The state
 * lives wherever the caller puts it (the stack is fine); its contents are the library's. */
typedef struct {
    uint64_t opaque[12];
} fg_xxh64_state;

void fg_xxh64_init(fg_xxh64_state *s, uint64_t seed);
void fg_xxh64_update(fg_xxh64_state *s, const void *data, size_t n);
uint64_t fg_xxh64_digest(const fg_xxh64_state *s);

#ifdef __cplusplus
}
#endif
#endif /* FG_FILEIO_H */
