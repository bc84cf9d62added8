/* run_folder.c — a training run's folder: lock, set-aside, temporaries, log (see run_folder.h). */
#include "train/run_folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "train/checkpoint.h"

/* What a run keeps in its folder, the only entries ever moved or removed: its files, then the
 * folder of an interrupted state (FG_RUN_RESUME_DIR, a checkpoint of its own). */
static const char *const run_files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE,
                                        FG_RUN_LOG_FILE, FG_RUN_RESUME_DIR};
#define N_RUN_ENTRIES (sizeof run_files / sizeof run_files[0])
#define N_RUN_FILES (N_RUN_ENTRIES - 1)
/* The files of a checkpoint (in the run folder and in FG_RUN_RESUME_DIR). */
static const char *const ckpt_files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE};
#define N_CKPT_FILES (sizeof ckpt_files / sizeof ckpt_files[0])

static void note(const fg_run_folder *rf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const fg_run_folder *rf, const char *fmt, ...) {
    if (!rf->note) return;
    char line[8800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    rf->note(line);
}

fg_run_folder fg_run_folder_at(const char *dir, void (*note_fn)(const char *line)) {
    return (fg_run_folder){.dir = dir, .lock_fd = -1, .note = note_fn};
}

static int path_exists(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && lstat(p, &sb) == 0;
}

fg_status fg_run_folder_make(const char *out) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", out);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return fg_error(FG_ERR_IO, "--out: cannot create '%s': %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return fg_error(FG_ERR_IO, "--out: cannot create '%s': %s", tmp, strerror(errno));
    struct stat sb;
    if (stat(tmp, &sb) != 0 || !S_ISDIR(sb.st_mode)) return fg_error(FG_ERR_IO, "--out: '%s' is not a folder", out);
    if (access(tmp, W_OK) != 0) return fg_error(FG_ERR_IO, "--out: cannot write to '%s': %s", out, strerror(errno));
    return FG_OK;
}

fg_status fg_run_folder_lock(fg_run_folder *rf) {
    const char *out = rf->dir;
    char p[4096];
    if (snprintf(p, sizeof p, "%s/%s", out, FG_RUN_LOCK_FILE) >= (int)sizeof p)
        return fg_error(FG_ERR_ARG, "--out: the path is too long");
    /* O_NONBLOCK: a FIFO put there must not hang the open; it is refused just below */
    int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    rf->made_lock = 0;
    if (fd < 0 && errno == ENOENT) {
        fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0666);
        rf->made_lock = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    }
    if (fd < 0) return fg_error(FG_ERR_IO, "--out: cannot open the lock file '%s': %s", p, strerror(errno));
    /* The pid is written into the lock file: only into a regular file of its own, never into a
     * device or into a file that has other names (a hard link to someone's file). */
    struct stat sb;
    fg_status st = FG_OK;
    if (fstat(fd, &sb) != 0)
        st = fg_error(FG_ERR_IO, "--out: cannot stat the lock file '%s': %s", p, strerror(errno));
    else if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1)
        st = fg_error(FG_ERR_IO,
                      "--out: the lock file '%s' is %s; flashgrad writes only to a file of its own there: move it away",
                      p, !S_ISREG(sb.st_mode) ? "not a regular file" : "a hard link to another file");
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e == EWOULDBLOCK)
            st = fg_error(FG_ERR_STATE,
                          "--out: another `flashgrad train`%s%s%s is writing to '%s' (it holds %s); wait for it to end "
                          "or choose another --out",
                          *pid ? " (pid " : "", pid, *pid ? ")" : "", out, p);
        else
            st = fg_error(FG_ERR_IO, "--out: cannot lock '%s': %s", p, strerror(e));
    }
    if (st != FG_OK) {
        close(fd);
        return st;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) { /* the pid is only for messages */
    }
    rf->lock_fd = fd;
    return FG_OK;
}

void fg_run_folder_close(fg_run_folder *rf) {
    if (rf->lock_fd >= 0) close(rf->lock_fd);
    rf->lock_fd = -1;
}

void fg_run_folder_refused(fg_run_folder *rf) {
    char p[4200];
    /* removed while still held: no other writer can have taken it meanwhile */
    if (rf->made_lock && rf->lock_fd >= 0 && snprintf(p, sizeof p, "%s/%s", rf->dir, FG_RUN_LOCK_FILE) < (int)sizeof p)
        unlink(p);
    rf->made_lock = 0;
    fg_run_folder_close(rf);
}

int fg_is_temporary_of(const char *name, const char *base) {
    size_t a = strlen(base), b = strlen(FG_TMP_MARK);
    if (strncmp(name, base, a) || strncmp(name + a, FG_TMP_MARK, b)) return 0;
    const char *x = name + a + b;
    int k = 0;
    while (k < 6 && ((x[k] >= 'a' && x[k] <= 'z') || (x[k] >= 'A' && x[k] <= 'Z') || (x[k] >= '0' && x[k] <= '9')))
        k++;
    return k == 6 && x[6] == '\0';
}

int fg_run_folder_is_temporary(const char *name) {
    for (size_t i = 0; i < N_RUN_FILES; i++)
        if (fg_is_temporary_of(name, run_files[i])) return 1;
    return 0;
}

/* 1 when name is a temporary of a name that ok(name) accepts. */
static int temporary_of_ok(const char *name, int (*ok)(const char *name)) {
    size_t L = strlen(name), m = strlen(FG_TMP_MARK);
    if (L <= m + 6 || L >= 4096) return 0;
    char base[4096];
    memcpy(base, name, L - m - 6);
    base[L - m - 6] = '\0';
    return ok(base) && fg_is_temporary_of(name, base);
}

/* A folder a writer built (and died building): removed when it holds only regular files that ok()
 * accepts or their temporaries; otherwise left as it is. */
static void remove_built_dir(const char *path, int (*ok)(const char *name)) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    int only_ours = 1;
    char p[8400];
    struct stat sb;
    while (only_ours && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            only_ours = (ok(e->d_name) || temporary_of_ok(e->d_name, ok)) &&
                        snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p && lstat(p, &sb) == 0 &&
                        S_ISREG(sb.st_mode);
    if (only_ours) {
        rewinddir(d);
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p)
                unlink(p);
    }
    closedir(d);
    if (only_ours) rmdir(path);
}

void fg_remove_leftovers(const char *dir, int (*is_ours)(const char *name, const void *ctx), const void *ctx,
                         int (*dirs_ok)(const char *name)) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_ours(e->d_name, ctx)) continue;
        char path[4352];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path || lstat(path, &sb) != 0)
            continue;
        /* a writer's temporary has one name; a live writer holds its lock */
        if (S_ISREG(sb.st_mode) && sb.st_nlink == 1 && fg_tmp_abandoned(path))
            unlink(path);
        else if (S_ISDIR(sb.st_mode) && dirs_ok && fg_tmp_abandoned(path))
            remove_built_dir(path, dirs_ok);
    }
    closedir(d);
}

static int run_temporary(const char *name, const void *ctx) {
    (void)ctx;
    return fg_run_folder_is_temporary(name);
}

void fg_run_folder_remove_temporaries(const char *out) {
    fg_remove_leftovers(out, run_temporary, NULL, NULL);
    char r[4200];
    if (snprintf(r, sizeof r, "%s/%s", out, FG_RUN_RESUME_DIR) < (int)sizeof r)
        fg_remove_leftovers(r, run_temporary, NULL, NULL);
}

/* ---- the one rule for replacing a folder ---- */

static int is_ckpt_file(const char *n) {
    for (size_t i = 0; i < N_CKPT_FILES; i++)
        if (!strcmp(n, ckpt_files[i])) return 1;
    return 0;
}

/* 1 when the file at p starts with one of flashgrad's log headers and its newline. */
static int log_is_ours(const char *p) {
    int fd = open(p, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    char b[128];
    ssize_t r = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? pread(fd, b, sizeof b - 1, 0) : -1;
    close(fd);
    if (r <= 0) return 0;
    b[r] = '\0';
    static const char *const headers[] = {FG_RUN_LOG_HEADER "\n", FG_RUN_LOG_HEADER_NO_BPB "\n",
                                          FG_RUN_LOG_HEADER_NO_PEAK "\n", FG_RUN_LOG_HEADER_NO_MFU "\n"};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++)
        if (!strncmp(b, headers[i], strlen(headers[i]))) return 1;
    return 0;
}

static int is_file_or_link(const struct stat *sb) { return S_ISREG(sb->st_mode) || S_ISLNK(sb->st_mode); }

int fg_is_hf_shard_name(const char *n) {
    unsigned i, k;
    int end = 0;
    return sscanf(n, "model-%5u-of-%5u.safetensors%n", &i, &k, &end) == 2 && end == (int)strlen(n) &&
           strlen(n) == strlen("model-00001-of-00002.safetensors") && i >= 1 && i <= k;
}

/* Why entry `name` of a folder of `kind` is not flashgrad's (into why[0..n)), or NULL when it is. */
static const char *foreign_why(const char *dir, const char *name, fg_folder_kind kind, int in_resume, char *why,
                               size_t n) {
    char p[8400];
    struct stat sb;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p || lstat(p, &sb) != 0)
        return snprintf(why, n, "which cannot be looked at: %s", strerror(errno)), why;
    if (kind == FG_FOLDER_HF_EXPORT) {
        /* the model, its config, and the tokenizer files an export writes beside them */
        static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "vocab.json",
                                            "merges.txt", "model.safetensors.index.json"};
        int written = 0;
        for (size_t i = 0; i < sizeof files / sizeof *files; i++)
            written |= (i != 1 && !strcmp(name, files[i])) || fg_is_temporary_of(name, files[i]);
        size_t nl = strlen(name);
        written |= nl > 9 && !strcmp(name + nl - 9, ".tiktoken");
        if (written)
            return S_ISREG(sb.st_mode) ? NULL : (snprintf(why, n, "which is not a regular file"), why);
        if (!strcmp(name, "model.safetensors") || fg_is_hf_shard_name(name))
            return S_ISREG(sb.st_mode) && fg_st_peek_metadata(p, "fg_export", NULL, 0)
                       ? NULL
                       : (snprintf(why, n, "which flashgrad's export did not write (no fg_export metadata)"), why);
        return snprintf(why, n, "which a Hugging Face export does not write"), why;
    }
    if (is_ckpt_file(name))
        return is_file_or_link(&sb) && fg_st_peek_metadata(p, "fg_kind", NULL, 0)
                   ? NULL
                   : (snprintf(why, n, "which is not a flashgrad checkpoint file (no flashgrad metadata)"), why);
    if (fg_run_folder_is_temporary(name))
        return S_ISREG(sb.st_mode) ? NULL : (snprintf(why, n, "which is not a regular file"), why);
    /* a link in the log's place is replaced as a link (what it points to is never touched) */
    if (!in_resume && !strcmp(name, FG_RUN_LOG_FILE))
        return S_ISLNK(sb.st_mode) || (S_ISREG(sb.st_mode) && log_is_ours(p))
                   ? NULL
                   : (snprintf(why, n, "which is not a flashgrad log (its first line is not flashgrad's header)"), why);
    if (!in_resume && !strcmp(name, FG_RUN_LOCK_FILE))
        return S_ISREG(sb.st_mode) ? NULL : (snprintf(why, n, "which is not a regular file"), why);
    if (!in_resume && (!strcmp(name, FG_RUN_ASIDE_MOVING) || !strcmp(name, FG_RUN_ASIDE_DONE)))
        return S_ISDIR(sb.st_mode) ? NULL : (snprintf(why, n, "which is not a folder"), why);
    if (!in_resume && !strcmp(name, FG_RUN_RESUME_DIR)) {
        if (!S_ISDIR(sb.st_mode)) return snprintf(why, n, "which is not a folder"), why;
        DIR *d = opendir(p);
        if (!d) return snprintf(why, n, "which cannot be read: %s", strerror(errno)), why;
        struct dirent *e;
        const char *w = NULL;
        char inner[512];
        while (!w && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                (w = foreign_why(p, e->d_name, kind, 1, inner, sizeof inner)))
                snprintf(why, n, "whose '%.200s' is %.280s", e->d_name, inner);
        closedir(d);
        return w ? why : NULL;
    }
    return snprintf(why, n, "which flashgrad does not write in a run folder"), why;
}

fg_status fg_folder_check_ours(const char *dir, fg_folder_kind kind, const char *flag) {
    DIR *d = opendir(dir);
    if (!d) return fg_error(FG_ERR_IO, "%s: cannot read '%s': %s", flag, dir, strerror(errno));
    struct dirent *e;
    fg_status st = FG_OK;
    char why[600];
    while (st == FG_OK && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            foreign_why(dir, e->d_name, kind, 0, why, sizeof why))
            st = kind == FG_FOLDER_RUN
                     ? fg_error(FG_ERR_ARG,
                                "%s: '%s' holds '%s', %s; --overwrite replaces a flashgrad run and nothing else: "
                                "move it away, or choose another --out",
                                flag, dir, e->d_name, why)
                     : fg_error(FG_ERR_ARG, "%s: '%s' holds '%s', %s; not replacing that folder", flag, dir,
                                e->d_name, why);
    closedir(d);
    return st;
}

/* 1 when DIR/log.csv is one of ours with a header and no row (what a run that failed at its first
 * step used to leave), and nothing else of a run is there. */
static int log_has_no_rows(const char *out) {
    for (size_t i = 0; i < N_RUN_ENTRIES; i++)
        if (strcmp(run_files[i], FG_RUN_LOG_FILE) && path_exists(out, run_files[i])) return 0;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", out, FG_RUN_LOG_FILE);
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(p, 4096, &buf, &n) != FG_OK) {
        fg_clear_error();
        return 0;
    }
    const char *b = buf;
    int empty = (n == sizeof FG_RUN_LOG_HEADER && !memcmp(b, FG_RUN_LOG_HEADER "\n", n)) ||
                (n == sizeof FG_RUN_LOG_HEADER_NO_BPB && !memcmp(b, FG_RUN_LOG_HEADER_NO_BPB "\n", n)) ||
                (n == sizeof FG_RUN_LOG_HEADER_NO_PEAK && !memcmp(b, FG_RUN_LOG_HEADER_NO_PEAK "\n", n)) ||
                (n == sizeof FG_RUN_LOG_HEADER_NO_MFU && !memcmp(b, FG_RUN_LOG_HEADER_NO_MFU "\n", n));
    free(buf);
    return empty;
}

fg_status fg_run_folder_other_run(const fg_run_folder *rf, int overwrite, int64_t *step_out) {
    const char *out = rf->dir;
    *step_out = -1;
    int any = 0;
    for (size_t i = 0; i < N_RUN_ENTRIES; i++) any |= path_exists(out, run_files[i]);
    if (!any) return FG_OK;
    /* what --overwrite would replace must all be a flashgrad run's: a user's files are never
     * deleted or left beside a new run */
    if (overwrite && !log_has_no_rows(out)) {
        fg_status st = fg_folder_check_ours(out, FG_FOLDER_RUN, "--overwrite");
        if (st != FG_OK) return st;
    }
    int64_t step = 0;
    char what[512] = "", mp[4200];
    snprintf(mp, sizeof mp, "%s/%s", out, FG_CKPT_MODEL_FILE);
    if (!overwrite && path_exists(out, FG_CKPT_MODEL_FILE) && !fg_st_peek_metadata(mp, "fg_kind", NULL, 0))
        return fg_error(FG_ERR_ARG,
                        "--out '%s' holds a model.safetensors that is not a flashgrad checkpoint (no flashgrad "
                        "metadata); choose another --out",
                        out);
    char rd[4200];
    snprintf(rd, sizeof rd, "%s/%s", out, FG_RUN_RESUME_DIR);
    const int has_ckpt = path_exists(out, FG_CKPT_MODEL_FILE) || path_exists(out, FG_CKPT_OPTIM_FILE);
    if (has_ckpt || path_exists(out, FG_RUN_RESUME_DIR)) {
        fg_ckpt *c = fg_ckpt_open(has_ckpt ? out : rd, 0);
        if (c) {
            step = fg_ckpt_get_info(c)->step;
            snprintf(what, sizeof what, "a checkpoint at step %lld", (long long)step);
            fg_ckpt_close(c);
        } else {
            snprintf(what, sizeof what, "a checkpoint that does not load (%.300s)", fg_last_error());
            fg_clear_error();
            step = 0;
        }
        if (!overwrite)
            return fg_error(FG_ERR_ARG,
                            "--out '%s' already holds %s; continue that run with --resume, or replace it with "
                            "--overwrite",
                            out, what);
        *step_out = step > 0 ? step : 0;
        return FG_OK;
    }
    if (log_has_no_rows(out)) return FG_OK; /* a header alone records no step: nothing to keep */
    if (!overwrite)
        return fg_error(FG_ERR_ARG,
                        "--out '%s' already holds the log.csv of an earlier run (no checkpoint); replace it with "
                        "--overwrite, or choose another --out",
                        out);
    *step_out = 0;
    return FG_OK;
}

/* ---- the set-aside ---- */
/* Moves the run files that are in `from` to `to` (folders), skipping names `to` already holds.
 * 0, or -1 with errno at the first failure (what moved stays moved). */
static int move_run_files(const char *from, const char *to) {
    for (size_t i = 0; i < N_RUN_ENTRIES; i++) {
        char a[4200], b[4200];
        struct stat sb;
        snprintf(a, sizeof a, "%s/%s", from, run_files[i]);
        snprintf(b, sizeof b, "%s/%s", to, run_files[i]);
        if (lstat(a, &sb) != 0 || lstat(b, &sb) == 0) continue;
        if (rename(a, b) != 0) return -1;
    }
    fg_fsync_dir(from);
    fg_fsync_dir(to);
    return 0;
}

/* The interrupted state's checkpoint folder: its checkpoint files and their temporaries (regular
 * files), then the folder itself when nothing else is in it. */
static void remove_resume_dir(const char *p) {
    DIR *dd = opendir(p);
    if (dd) {
        struct dirent *e;
        char q[8400];
        struct stat sb;
        while ((e = readdir(dd)))
            if ((is_ckpt_file(e->d_name) || fg_run_folder_is_temporary(e->d_name)) &&
                snprintf(q, sizeof q, "%s/%s", p, e->d_name) < (int)sizeof q && lstat(q, &sb) == 0 &&
                S_ISREG(sb.st_mode))
                unlink(q);
        closedir(dd);
    }
    rmdir(p);
}

void fg_run_folder_remove_resume(fg_run_folder *rf) {
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", rf->dir, FG_RUN_RESUME_DIR);
    if (lstat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
    remove_resume_dir(p);
    if (lstat(p, &sb) == 0)
        note(rf, "note: could not remove '%s' (an older interrupted state; the checkpoint beside it is newer)", p);
    fg_fsync_dir(rf->dir);
}

/* Removes the run files of folder d: regular files, and with links also symbolic links (a link the
 * earlier run had in its place was set aside with it; removing a link never touches its target). */
static void remove_run_files(const char *d, int links) {
    for (size_t i = 0; i < N_RUN_ENTRIES; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", d, run_files[i]);
        if (lstat(p, &sb) != 0) continue;
        if (S_ISREG(sb.st_mode) || (links && S_ISLNK(sb.st_mode)))
            unlink(p);
        else if (S_ISDIR(sb.st_mode) && !strcmp(run_files[i], FG_RUN_RESUME_DIR))
            remove_resume_dir(p);
    }
    fg_fsync_dir(d);
}

static void aside_path(char *p, size_t n, const char *out, const char *which) { snprintf(p, n, "%s/%s", out, which); }

/* The earlier run's files back into out, this run's removed; ASIDE_DONE goes. 0 or -1 (errno). */
static int restore(const char *out) {
    char d[4200];
    aside_path(d, sizeof d, out, FG_RUN_ASIDE_DONE);
    remove_run_files(out, 0);
    if (move_run_files(d, out) != 0) return -1;
    if (rmdir(d) != 0) return -1;
    fg_fsync_dir(out);
    return 0;
}

fg_status fg_run_folder_restore_aside(fg_run_folder *rf) {
    if (restore(rf->dir) != 0)
        return fg_error(FG_ERR_IO, "--overwrite: cannot move the earlier run back into '%s': %s", rf->dir,
                        strerror(errno));
    return FG_OK;
}

void fg_run_folder_discard_aside(fg_run_folder *rf) {
    char d[4200];
    aside_path(d, sizeof d, rf->dir, FG_RUN_ASIDE_DONE);
    remove_run_files(d, 1);
    if (rmdir(d) != 0 && errno != ENOENT)
        note(rf, "note: could not remove '%s' (the replaced run's folder): %s", d, strerror(errno));
    fg_fsync_dir(rf->dir);
}

fg_status fg_run_folder_recover(fg_run_folder *rf) {
    const char *out = rf->dir;
    char m[4200], d[4200], mp[4200];
    struct stat sb;
    aside_path(m, sizeof m, out, FG_RUN_ASIDE_MOVING);
    aside_path(d, sizeof d, out, FG_RUN_ASIDE_DONE);
    snprintf(mp, sizeof mp, "%s/%s", out, FG_CKPT_MODEL_FILE);
    char rmp[4200];
    snprintf(rmp, sizeof rmp, "%s/%s/%s", out, FG_RUN_RESUME_DIR, FG_CKPT_MODEL_FILE);
    if (lstat(m, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (move_run_files(m, out) != 0 || rmdir(m) != 0)
            return fg_error(FG_ERR_IO,
                            "--out: an interrupted --overwrite left the earlier run's files in '%s' and they cannot "
                            "be moved back: %s; move them back into '%s' by hand",
                            m, strerror(errno), out);
        fg_fsync_dir(out);
        note(rf, "note: put back the earlier run's files that an interrupted --overwrite had begun to set aside");
    }
    if (lstat(d, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        /* the new run's first checkpoint: in out, or its interrupted state's folder */
        if (lstat(mp, &sb) == 0 || lstat(rmp, &sb) == 0) {
            fg_run_folder_discard_aside(rf);
            note(rf, "note: removed the run that an --overwrite killed after its first checkpoint had replaced");
        } else if (restore(out) != 0) {
            return fg_error(FG_ERR_IO,
                            "--out: an interrupted --overwrite left the earlier run in '%s' and it cannot be moved "
                            "back: %s; move its files back into '%s' by hand",
                            d, strerror(errno), out);
        } else {
            note(rf,
                 "note: an --overwrite was interrupted before its first checkpoint: the earlier run is back in '%s'",
                 out);
        }
    }
    return FG_OK;
}

fg_status fg_run_folder_set_aside(fg_run_folder *rf) {
    const char *out = rf->dir;
    char m[4200], d[4200];
    aside_path(m, sizeof m, out, FG_RUN_ASIDE_MOVING);
    aside_path(d, sizeof d, out, FG_RUN_ASIDE_DONE);
    if (mkdir(m, 0700) != 0)
        return fg_error(FG_ERR_IO,
                        "--overwrite: cannot create '%s' to set the earlier run aside: %s ('%s' still holds it, "
                        "untouched)",
                        m, strerror(errno), out);
    if (move_run_files(out, m) != 0 || rename(m, d) != 0) {
        int e = errno;
        if (move_run_files(m, out) == 0 && rmdir(m) == 0)
            return fg_error(FG_ERR_IO,
                            "--overwrite: cannot set the earlier run aside: %s ('%s' still holds it, untouched)",
                            strerror(e), out);
        return fg_error(FG_ERR_IO,
                        "--overwrite: cannot set the earlier run aside: %s; its files are in '%s' (the next "
                        "`flashgrad train --out %s` puts them back)",
                        strerror(e), m, out);
    }
    fg_fsync_dir(out);
    return FG_OK;
}

/* ---- which checkpoint to read ---- */

/* The step of the checkpoint in folder d (its model file's), or -1 when it does not load. */
static int64_t ckpt_step(const char *d) {
    fg_ckpt *c = fg_ckpt_open(d, 0);
    int64_t s = c ? fg_ckpt_get_info(c)->step : -1;
    if (!c) fg_clear_error();
    fg_ckpt_close(c);
    return s;
}

void fg_run_folder_resume_from(const char *dir, char *path, size_t n) {
    char r[4200];
    snprintf(path, n, "%s", dir);
    snprintf(r, sizeof r, "%s/%s", dir, FG_RUN_RESUME_DIR);
    if (!path_exists(r, FG_CKPT_MODEL_FILE)) return;
    if (!path_exists(dir, FG_CKPT_MODEL_FILE) || ckpt_step(r) > ckpt_step(dir)) snprintf(path, n, "%s", r);
}

static void reader_note(const char *line) { fprintf(stderr, "flashgrad: %s\n", line); }

/* The earlier run is read from where an interrupted --overwrite set it aside, and the new run's files
 * beside it keep this reader from putting it back: where it is, and the command that does. */
static void reader_note_f(const char *dir, const char *aside) {
    /* said once: a command may open the folder more than once (eval: the model, then the run) */
    static char said[4200];
    if (!strcmp(said, aside)) return;
    snprintf(said, sizeof said, "%s", aside);
    fprintf(stderr,
            "flashgrad: note: the earlier run was set aside in %s by an interrupted --overwrite (reading it from "
            "there); restore it with: flashgrad train --resume --out %s\n",
            aside, dir);
}

fg_status fg_run_folder_for_reading(const char *dir, char *path, size_t n) {
    char m[4200], d[4200], r[4200], lk[4200];
    struct stat sb;
    snprintf(path, n, "%s", dir);
    if (path_exists(dir, FG_CKPT_MODEL_FILE)) return FG_OK;
    aside_path(m, sizeof m, dir, FG_RUN_ASIDE_MOVING);
    aside_path(d, sizeof d, dir, FG_RUN_ASIDE_DONE);
    aside_path(r, sizeof r, dir, FG_RUN_RESUME_DIR);
    aside_path(lk, sizeof lk, dir, FG_RUN_LOCK_FILE);
    const int moving = lstat(m, &sb) == 0 && S_ISDIR(sb.st_mode), done = lstat(d, &sb) == 0 && S_ISDIR(sb.st_mode);
    /* set aside, and the new run's first checkpoint complete (in its interrupted state's folder):
     * the new run is the folder's run, as the next writer's recovery decides */
    const int replaced = done && !moving && path_exists(r, FG_CKPT_MODEL_FILE);
    if ((moving || done) && !replaced) {
        /* the writer is dead when its lock is free (the kernel released it) or was never there */
        int fd = open(lk, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        const int dead = fd >= 0 ? fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0
                                 : errno == ENOENT;
        int new_files = 0; /* the new run's, in dir (while moving, what is in dir is the earlier run's) */
        for (size_t i = 0; i < N_RUN_ENTRIES; i++) new_files |= path_exists(dir, run_files[i]);
        if (dead && (moving || !new_files)) {
            /* nothing of the new run is there: putting the earlier run back is what the next writer
             * would do first; done now, under the lock */
            fg_run_folder rf = fg_run_folder_at(dir, reader_note);
            rf.lock_fd = fd;
            fg_status st = fg_run_folder_recover(&rf);
            if (fd >= 0) close(fd);
            if (st == FG_OK) return fg_run_folder_for_reading(dir, path, n);
            if (!done || !path_exists(d, FG_CKPT_MODEL_FILE)) return st;
            fg_clear_error(); /* a folder this reader may not write: read the run where it is */
            fd = -1;
        }
        if (fd >= 0) close(fd);
        if (done && path_exists(d, FG_CKPT_MODEL_FILE)) {
            /* until the new run's first checkpoint, the earlier run is the folder's run */
            if (dead) reader_note_f(dir, d);
            snprintf(path, n, "%s", d);
            return FG_OK;
        }
        if (moving && !dead)
            return fg_error(FG_ERR_STATE,
                            "%s: a running `flashgrad train --overwrite` is setting the run in it aside right now; "
                            "try again in a moment",
                            dir);
    }
    if (path_exists(r, FG_CKPT_MODEL_FILE)) snprintf(path, n, "%s", r);
    return FG_OK;
}

fg_status fg_run_folder_file_for_reading(const char *file, char *path, size_t n) {
    struct stat sb;
    snprintf(path, n, "%s", file);
    const char *slash = strrchr(file, '/'), *base = slash ? slash + 1 : file;
    if (lstat(file, &sb) == 0 || errno != ENOENT || strcmp(base, FG_CKPT_MODEL_FILE)) return FG_OK;
    char dir[4096], run[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == file ? 1 : (int)(slash - file)) : 1, slash ? file : ".");
    fg_status st = fg_run_folder_for_reading(dir, run, sizeof run);
    if (st == FG_OK && strcmp(run, dir)) snprintf(path, n, "%s/%s", run, FG_CKPT_MODEL_FILE);
    return st;
}

/* ---- the log ---- */
int fg_run_log_add(fg_run_log *l, const char *row) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 1024;
        char **r = realloc(l->rows, (size_t)cap * sizeof *r);
        if (!r) return -1;
        l->rows = r;
        l->cap = cap;
    }
    l->rows[l->n] = strdup(row);
    return l->rows[l->n++] ? 0 : -1;
}

void fg_run_log_free(fg_run_log *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->rows[i]);
    free(l->rows);
    l->rows = NULL;
    l->n = l->cap = 0;
}

fg_status fg_run_log_write(const fg_run_log *l, const char *path) {
    size_t n = sizeof FG_RUN_LOG_HEADER + 1; /* the header, its newline and the final NUL sprintf writes */
    for (int64_t i = 0; i < l->n; i++) n += strlen(l->rows[i]) + 1;
    char *buf = malloc(n), *p = buf;
    if (!buf) return fg_error(FG_ERR_OOM, "out of memory for the log (%zu bytes)", n);
    p += sprintf(p, "%s\n", FG_RUN_LOG_HEADER);
    for (int64_t i = 0; i < l->n; i++) p += sprintf(p, "%s\n", l->rows[i]);
    const void *parts[1] = {buf};
    size_t sizes[1] = {(size_t)(p - buf)};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    free(buf);
    return st;
}

void fg_run_log_load(fg_run_log *l, const char *path, int64_t step) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(path, (size_t)1 << 30, &buf, &n) != FG_OK) {
        fg_clear_error();
        return;
    }
    char *s = buf, *save = NULL;
    int first = 1, missing = 0; /* columns the old log lacks */
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (first) {
            first = 0;
            missing = !strcmp(line, FG_RUN_LOG_HEADER_NO_MFU)    ? 3
                      : !strcmp(line, FG_RUN_LOG_HEADER_NO_PEAK) ? 2
                      : !strcmp(line, FG_RUN_LOG_HEADER_NO_BPB)  ? 1
                                                                 : 0;
            if (strcmp(line, FG_RUN_LOG_HEADER) && !missing) break; /* not our log: start over */
            continue;
        }
        char *end;
        long long st = strtoll(line, &end, 10);
        if (end == line || *end != ',' || st < 1 || st > step) continue;
        char row[512];
        if (missing && snprintf(row, sizeof row, "%s%.*s", line, missing, ",,,") >= (int)sizeof row) continue;
        if (fg_run_log_add(l, missing ? row : line)) break;
    }
    free(buf);
}

double fg_run_log_best_val(const fg_run_log *l) {
    double best = INFINITY;
    for (int64_t i = 0; i < l->n; i++) {
        const char *p = l->rows[i];
        for (int c = 0; c < 5 && p; c++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        if (!p || *p == ',' || !*p) continue;
        double v = strtod(p, NULL);
        if (v < best) best = v;
    }
    return best;
}
