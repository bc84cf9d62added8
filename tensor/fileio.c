/* fileio.c — atomic whole-file writes, bounded whole-file reads, XXH64 (libxxhash).
 *
 * Atomic write, step by step (POSIX rename(2) replaces the target in one step):
 *   1. mkstemp("<path>" FG_TMP_MARK "XXXXXX") in the target's own folder (rename cannot cross filesystems);
 *   2. fchmod to the mode the file should have (mkstemp makes it 0600);
 *   3. write every part, fsync, close (close can report a delayed write error, so it is checked);
 *   4. rename over the target;
 *   5. fsync the folder, so the rename itself survives a power cut.
 * Any failure before 4 unlinks the temporary file and leaves the target as it was. Before 1 and
 * again before 4 the target must be absent, a regular file or a symlink (fg_check_replaceable): a
 * device, FIFO or socket at the path is refused, never replaced.
 */
#include "tensor/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flashgrad's file formats assume a little-endian host"
#endif

/* ---------------------------------------------------------------------------------------------
 * atomic write
 * ------------------------------------------------------------------------------------------- */

/* The process umask without changing it (umask(2) can only read by writing): Linux reports it in
 * /proc/self/status since 4.7; otherwise assume the common 022. */
unsigned fg_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    mode_t m = 022;
    if (!f) return m;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned v;
        if (sscanf(line, "Umask: %o", &v) == 1) {
            m = (mode_t)(v & 0777);
            break;
        }
    }
    fclose(f);
    return m;
}

/* write(2) until all n bytes are out; retries on EINTR and short writes. 0 or errno. */
static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* "a directory", "a character device", ... for messages about what a path is instead of a file. */
static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISFIFO(m)) return "a FIFO/pipe";
    return "not a regular file";
}

fg_status fg_check_replaceable(const char *path) {
    if (!path || !*path) return fg_error(FG_ERR_ARG, "write: empty file path");
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return FG_OK;
        return fg_error(FG_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return FG_OK;
    return fg_error(FG_ERR_IO, "cannot write '%s': it is %s, not a regular file (nothing was written)", path,
                    file_kind(st.st_mode));
}

fg_status fg_rename_replace(const char *from, const char *to) {
    fg_status st = fg_check_replaceable(to);
    if (st != FG_OK) return st;
    if (rename(from, to) != 0) return fg_error(FG_ERR_IO, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
    return FG_OK;
}

static void atomic_free(fg_atomic_file *af) {
    free(af->path);
    free(af->tmp);
    free(af->dir);
    af->path = af->tmp = af->dir = NULL;
    af->fd = -1;
}

fg_status fg_atomic_begin(fg_atomic_file *af, const char *path) {
    if (!af) return fg_error(FG_ERR_ARG, "write: NULL handle");
    af->fd = -1;
    af->path = af->tmp = af->dir = NULL;
    fg_status rc = fg_check_replaceable(path);
    if (rc != FG_OK) return rc;
    /* The new file keeps the mode of the one it replaces (a checkpoint someone made group-readable
     * stays so); a new file (or one replacing a symlink) gets the usual 0666 & ~umask. */
    struct stat st;
    mode_t mode = lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_mode & 07777 : 0666 & ~(mode_t)fg_umask();

    size_t plen = strlen(path);
    af->path = strdup(path);
    af->tmp = malloc(plen + sizeof FG_TMP_MARK + 7);
    af->dir = malloc(plen + 2);
    if (!af->path || !af->tmp || !af->dir) {
        atomic_free(af);
        return fg_error(FG_ERR_OOM, "write '%s': out of memory for the file name", path);
    }
    memcpy(af->tmp, path, plen);
    memcpy(af->tmp + plen, FG_TMP_MARK "XXXXXX", sizeof FG_TMP_MARK + 6);
    /* The folder to fsync after the rename: everything before the last '/'. */
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(af->dir, ".");
    } else if (slash == path) {
        strcpy(af->dir, "/");
    } else {
        memcpy(af->dir, path, (size_t)(slash - path));
        af->dir[slash - path] = '\0';
    }
    af->fd = mkstemp(af->tmp);
    if (af->fd < 0) {
        rc = fg_error(FG_ERR_IO, "cannot write '%s': cannot create a temporary file in '%s': %s", path, af->dir,
                      strerror(errno));
        atomic_free(af);
        return rc;
    }
    if (fchmod(af->fd, mode) != 0 || fg_tmp_hold(af->fd) != 0) {
        rc = fg_error(FG_ERR_IO, "cannot write '%s': cannot set up temporary file '%s': %s", path, af->tmp,
                      strerror(errno));
        fg_atomic_abort(af);
        return rc;
    }
    return FG_OK;
}

int fg_fsync_dir(const char *dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return 0;
    int rc = 0, err = 0;
    if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
        err = errno;
        rc = -1;
    }
    close(dfd);
    if (rc) errno = err;
    return rc;
}

void fg_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[8192];
            if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

void fg_atomic_abort(fg_atomic_file *af) {
    if (!af) return;
    if (af->fd >= 0) close(af->fd);
    if (af->tmp) unlink(af->tmp);
    atomic_free(af);
}

fg_status fg_atomic_commit(fg_atomic_file *af) {
    if (!af || af->fd < 0 || !af->tmp) return fg_error(FG_ERR_ARG, "write: commit of a handle that is not open");
    int err = 0;
    const char *what = "";
    if (fsync(af->fd) != 0) {
        err = errno;
        what = "fsync";
    }
    if (close(af->fd) != 0 && !err) {
        err = errno;
        what = "close";
    }
    af->fd = -1;
    /* the target may have changed since the begin: a special file put there meanwhile is refused */
    fg_status rc = err ? FG_OK : fg_check_replaceable(af->path);
    if (rc != FG_OK) {
        unlink(af->tmp);
        atomic_free(af);
        return rc;
    }
    if (!err && rename(af->tmp, af->path) != 0) {
        err = errno;
        what = "rename into place";
    }
    if (err) {
        unlink(af->tmp);
        rc = fg_error(FG_ERR_IO, "cannot write '%s': %s of temporary file '%s' failed: %s", af->path, what, af->tmp,
                      strerror(err));
        atomic_free(af);
        return rc;
    }
    /* The data is in place; make the rename durable. Some filesystems cannot fsync a directory
     * (EINVAL): nothing more can be done there, so that is not an error. */
    if (fg_fsync_dir(af->dir) != 0)
        rc = fg_error(FG_ERR_IO, "wrote '%s' but could not fsync its folder '%s': %s", af->path, af->dir,
                      strerror(errno));
    atomic_free(af);
    return rc;
}

fg_status fg_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes, int nparts) {
    if (!path || !*path) return fg_error(FG_ERR_ARG, "write: empty file path");
    if (nparts < 0 || (nparts > 0 && (!parts || !sizes)))
        return fg_error(FG_ERR_ARG, "write '%s': bad part list (nparts %d)", path, nparts);
    for (int i = 0; i < nparts; i++)
        if (sizes[i] > 0 && !parts[i])
            return fg_error(FG_ERR_ARG, "write '%s': part %d has %zu bytes but no data", path, i, sizes[i]);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fg_error(FG_ERR_IO, "cannot write '%s': it is a directory", path);
    fg_atomic_file af;
    fg_status rc = fg_atomic_begin(&af, path);
    if (rc != FG_OK) return rc;
    for (int i = 0; i < nparts; i++) {
        int err = write_all(af.fd, parts[i], sizes[i]);
        if (err) {
            rc = fg_error(FG_ERR_IO, "cannot write '%s': write of temporary file '%s' failed: %s", path, af.tmp,
                          strerror(err));
            fg_atomic_abort(&af);
            return rc;
        }
    }
    return fg_atomic_commit(&af);
}

/* ---------------------------------------------------------------------------------------------
 * whole-file read
 *
 * The open never blocks: O_NONBLOCK keeps open(2) of a FIFO from waiting for a writer (and of a
 * terminal or serial line from waiting for a carrier); it is cleared right after, so reads wait for
 * data as usual. A read(2) of a FIFO that no process holds open for writing returns 0 at once, so a
 * FIFO with no writer reads as empty instead of hanging, and fg_read_fd reports it as such.
 * ------------------------------------------------------------------------------------------- */

fg_status fg_open_read(const char *path, int allow_stream, int *fd, int64_t *size) {
    if (!fd || !size) return fg_error(FG_ERR_ARG, "read: NULL output pointer");
    *fd = -1;
    *size = -1;
    if (!path || !*path) return fg_error(FG_ERR_ARG, "read: empty file path");
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) return fg_error(FG_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return fg_error(FG_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    fg_status rc = FG_OK;
    if (S_ISFIFO(st.st_mode) && !allow_stream)
        rc = fg_error(FG_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, file_kind(st.st_mode));
    else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        rc = fg_error(FG_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, file_kind(st.st_mode));
    else {
        int fl = fcntl(f, F_GETFL);
        if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0)
            rc = fg_error(FG_ERR_IO, "cannot read '%s': fcntl: %s", path, strerror(errno));
    }
    if (rc != FG_OK) {
        close(f);
        return rc;
    }
    *fd = f;
    *size = S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
    return FG_OK;
}

fg_status fg_read_fd(int fd, const char *path, size_t max_bytes, void **buf, size_t *n) {
    if (!buf || !n) return fg_error(FG_ERR_ARG, "read: NULL output pointer");
    *buf = NULL;
    *n = 0;
    if (!path) path = "(file)";
    struct stat st;
    if (fstat(fd, &st) != 0) return fg_error(FG_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    int regular = S_ISREG(st.st_mode);
    if (!regular && !S_ISFIFO(st.st_mode))
        return fg_error(FG_ERR_IO, "cannot read '%s': it is %s, not a regular file", path, file_kind(st.st_mode));
    if (!regular && max_bytes == 0)
        return fg_error(FG_ERR_ARG, "cannot read '%s': it is a FIFO/pipe and no size limit was given", path);
    if (max_bytes > SIZE_MAX / 4) max_bytes = SIZE_MAX / 4; /* keeps the capacity math in range */
    if (regular && (uint64_t)st.st_size > (uint64_t)(max_bytes ? max_bytes : SIZE_MAX / 4))
        return fg_error(FG_ERR_IO, "cannot read '%s': it is too large (%lld bytes, limit %zu)", path,
                        (long long)st.st_size, max_bytes ? max_bytes : SIZE_MAX / 4);
    /* The most bytes accepted: the limit, or for a regular file without one its size at the fstat
     * (a file that grows while it is read is refused rather than followed). */
    size_t limit = max_bytes ? max_bytes : (size_t)st.st_size;
    /* Regular files: allocate their size (+1 to detect growth, +1 for the '\0'). FIFOs: grow as
     * data comes, up to the limit. */
    size_t cap = regular ? (size_t)st.st_size + 2 : (limit + 2 < 65536 ? limit + 2 : 65536);
    unsigned char *p = malloc(cap);
    if (!p) return fg_error(FG_ERR_OOM, "cannot read '%s': out of memory for %zu bytes", path, cap);
    size_t len = 0;
    for (;;) {
        if (len + 1 >= cap) { /* full: grow, at most to limit + 2 (one byte past the limit, the '\0') */
            size_t ncap = cap * 2 < limit + 2 ? cap * 2 : limit + 2;
            FG_ASSERT(ncap > cap, "len <= limit keeps a buffer of limit + 2 bytes from filling");
            unsigned char *q = realloc(p, ncap);
            if (!q) {
                free(p);
                return fg_error(FG_ERR_OOM, "cannot read '%s': out of memory for %zu bytes", path, ncap);
            }
            p = q;
            cap = ncap;
        }
        size_t want = cap - 1 - len;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        ssize_t r = read(fd, p + len, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(p);
            return fg_error(FG_ERR_IO, "error reading '%s': %s", path, strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > limit) {
            free(p);
            if (regular && !max_bytes)
                return fg_error(FG_ERR_IO, "cannot read '%s': it grew while being read (%lld bytes at the start)", path,
                                (long long)st.st_size);
            return fg_error(FG_ERR_IO, "cannot read '%s': it is too large (more than %zu bytes)", path, limit);
        }
    }
    if (!regular && len == 0) {
        free(p);
        return fg_error(FG_ERR_IO,
                        "cannot read '%s': it is a FIFO/pipe that gave no data (no process has it "
                        "open for writing, or the writer wrote nothing)",
                        path);
    }
    p[len] = '\0';
    *buf = p;
    *n = len;
    return FG_OK;
}

fg_status fg_read_file(const char *path, size_t max_bytes, void **buf, size_t *n) {
    if (!buf || !n) return fg_error(FG_ERR_ARG, "read: NULL output pointer");
    *buf = NULL;
    *n = 0;
    int fd;
    int64_t size;
    fg_status rc = fg_open_read(path, 0, &fd, &size);
    if (rc != FG_OK) return rc;
    rc = fg_read_fd(fd, path, max_bytes, buf, n);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * mapped inputs: a fixed table of ranges the SIGBUS handler can read without locks (each slot's
 * path, a heap copy, is in place before its range is published; the range is cleared before the
 * path is freed or the slot reused), and the note kept in two buffers, the handler reading
 * whichever was published last. The ranges sit apart from the paths so a scan touches little
 * memory: a dataset of thousands of mapped shards fits.
 * ------------------------------------------------------------------------------------------- */

#include <pthread.h>
#include <signal.h>

enum { MAPPED_SLOTS = 8192, MAPPED_TEXT = 1200 };
typedef struct {
    _Atomic(uintptr_t) lo, hi; /* [lo, hi), 0 when free */
    char *_Atomic path;        /* malloc'd; NULL when its copy failed */
} mapped_slot;
static mapped_slot g_mapped[MAPPED_SLOTS];
static char g_note[2][MAPPED_TEXT];
static _Atomic int g_note_cur = -1;
static char g_prog[64] = "flashgrad";
static pthread_mutex_t g_mapped_mu = PTHREAD_MUTEX_INITIALIZER;

int fg_mapped_register(const void *addr, size_t len, const char *path) {
    if (!addr || !len) return -1;
    int got = -1;
    char *copy = strdup(path ? path : "(a mapped file)");
    pthread_mutex_lock(&g_mapped_mu);
    for (int i = 0; i < MAPPED_SLOTS && got < 0; i++)
        if (!g_mapped[i].hi) {
            g_mapped[i].path = copy;
            g_mapped[i].lo = (uintptr_t)addr;
            g_mapped[i].hi = (uintptr_t)addr + len;
            got = i;
        }
    pthread_mutex_unlock(&g_mapped_mu);
    if (got < 0) free(copy);
    return got < 0 ? -1 : 0;
}

void fg_mapped_unregister(const void *addr) {
    pthread_mutex_lock(&g_mapped_mu);
    for (int i = 0; i < MAPPED_SLOTS; i++)
        if (g_mapped[i].hi && g_mapped[i].lo == (uintptr_t)addr) {
            g_mapped[i].hi = 0;
            g_mapped[i].lo = 0;
            free(g_mapped[i].path);
            g_mapped[i].path = NULL;
        }
    pthread_mutex_unlock(&g_mapped_mu);
}

void fg_mapped_set_note(const char *note) {
    pthread_mutex_lock(&g_mapped_mu);
    int next = g_note_cur == 0 ? 1 : 0;
    snprintf(g_note[next], sizeof g_note[next], "%s", note ? note : "");
    g_note_cur = next;
    pthread_mutex_unlock(&g_mapped_mu);
}

static void put_str(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Only async-signal-safe calls here: strlen, write, _exit, sigaction, raise. */
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < MAPPED_SLOTS; i++) {
        uintptr_t lo = g_mapped[i].lo, hi = g_mapped[i].hi;
        if (!hi || a < lo || a >= hi) continue;
        put_str("\n");
        put_str(g_prog);
        put_str(": '");
        const char *path = g_mapped[i].path;
        put_str(path ? path : "(a mapped file)");
        put_str("' changed while it was being read (it is memory-mapped: truncated or rewritten by another "
                "process, or its disk failed); stopped");
        int k = g_note_cur;
        if (k >= 0) put_str(g_note[k]);
        put_str("\n");
        _exit(1);
    }
    struct sigaction dfl = {0};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* not one of ours: the default action (the faulting access repeats if it was a fault) */
}

void fg_mapped_install_sigbus(const char *prog) {
    if (prog) snprintf(g_prog, sizeof g_prog, "%s", prog);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * XXH64: libxxhash's (Debian's libxxhash-dev), compiled into this file from its header
 * (XXH_INLINE_ALL: nothing to link, so the static and shared libraries need no libxxhash at run
 * time). Where the header cannot be installed the build finds tensor/compat/xxhash.h under the same
 * name instead (see there). fg_xxh64_state is opaque storage for the library's state: copied in
 * and out with memcpy, so the state's type never aliases the storage's.
 * ------------------------------------------------------------------------------------------- */

#define XXH_INLINE_ALL
#include <xxhash.h>

_Static_assert(sizeof(XXH64_state_t) <= sizeof(((fg_xxh64_state *)0)->opaque),
               "fg_xxh64_state (tensor/fileio.h) is too small for XXH64_state_t");

void fg_xxh64_init(fg_xxh64_state *s, uint64_t seed) {
    XXH64_state_t x;
    XXH64_reset(&x, seed);
    memcpy(s->opaque, &x, sizeof x);
}

void fg_xxh64_update(fg_xxh64_state *s, const void *data, size_t n) {
    if (n == 0) return;
    XXH64_state_t x;
    memcpy(&x, s->opaque, sizeof x);
    XXH64_update(&x, data, n);
    memcpy(s->opaque, &x, sizeof x);
}

uint64_t fg_xxh64_digest(const fg_xxh64_state *s) {
    XXH64_state_t x;
    memcpy(&x, s->opaque, sizeof x);
    return XXH64_digest(&x);
}

uint64_t fg_xxh64(const void *data, size_t n, uint64_t seed) { return XXH64(data, n, seed); }

int fg_tmp_hold(int fd) { return flock(fd, LOCK_EX | LOCK_NB); }

int fg_tmp_abandoned(const char *path) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    int free_now = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd); /* drops the lock just taken */
    return free_now;
}
