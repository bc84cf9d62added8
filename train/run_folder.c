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
#include "train/checkpoint.h"

/* The files a run keeps in its folder: the only ones ever moved or removed. */
static const char *const run_files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE,
                                        FG_RUN_LOG_FILE};
#define N_RUN_FILES (sizeof run_files / sizeof run_files[0])

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
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0666);
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

int fg_run_folder_is_temporary(const char *name) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        size_t a = strlen(run_files[i]), b = strlen(FG_TMP_MARK);
        if (strncmp(name, run_files[i], a) || strncmp(name + a, FG_TMP_MARK, b)) continue;
        const char *x = name + a + b;
        int k = 0;
        while (k < 6 && ((x[k] >= 'a' && x[k] <= 'z') || (x[k] >= 'A' && x[k] <= 'Z') || (x[k] >= '0' && x[k] <= '9')))
            k++;
        if (k == 6 && x[6] == '\0') return 1;
    }
    return 0;
}

void fg_run_folder_remove_temporaries(const char *out) {
    DIR *d = opendir(out);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!fg_run_folder_is_temporary(e->d_name)) continue;
        char path[4096];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", out, e->d_name) < (int)sizeof path && lstat(path, &sb) == 0 &&
            S_ISREG(sb.st_mode))
            unlink(path);
    }
    closedir(d);
}

/* 1 when DIR/log.csv is one of ours with a header and no row (what a run that failed at its first
 * step used to leave), and nothing else of a run is there. */
static int log_has_no_rows(const char *out) {
    for (size_t i = 0; i < N_RUN_FILES; i++)
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
                (n == sizeof FG_RUN_LOG_HEADER_NO_PEAK && !memcmp(b, FG_RUN_LOG_HEADER_NO_PEAK "\n", n)) ||
                (n == sizeof FG_RUN_LOG_HEADER_NO_MFU && !memcmp(b, FG_RUN_LOG_HEADER_NO_MFU "\n", n));
    free(buf);
    return empty;
}

fg_status fg_run_folder_other_run(const fg_run_folder *rf, int overwrite, int64_t *step_out) {
    const char *out = rf->dir;
    *step_out = -1;
    int any = 0;
    for (size_t i = 0; i < N_RUN_FILES; i++) any |= path_exists(out, run_files[i]);
    if (!any) return FG_OK;
    int64_t step = 0;
    char what[512] = "";
    if (path_exists(out, FG_CKPT_MODEL_FILE) || path_exists(out, FG_CKPT_OPTIM_FILE)) {
        fg_ckpt *c = fg_ckpt_open(out, 0);
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
static void fsync_dir(const char *d) {
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    if (fsync(fd) != 0) { /* a folder some filesystems cannot fsync: nothing more to do */
    }
    close(fd);
}

/* Moves the run files that are in `from` to `to` (folders), skipping names `to` already holds.
 * 0, or -1 with errno at the first failure (what moved stays moved). */
static int move_run_files(const char *from, const char *to) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        char a[4200], b[4200];
        struct stat sb;
        snprintf(a, sizeof a, "%s/%s", from, run_files[i]);
        snprintf(b, sizeof b, "%s/%s", to, run_files[i]);
        if (lstat(a, &sb) != 0 || lstat(b, &sb) == 0) continue;
        if (rename(a, b) != 0) return -1;
    }
    fsync_dir(from);
    fsync_dir(to);
    return 0;
}

/* Removes the run files of folder d: regular files, and with links also symbolic links (a link the
 * earlier run had in its place was set aside with it; removing a link never touches its target). */
static void remove_run_files(const char *d, int links) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", d, run_files[i]);
        if (lstat(p, &sb) == 0 && (S_ISREG(sb.st_mode) || (links && S_ISLNK(sb.st_mode)))) unlink(p);
    }
    fsync_dir(d);
}

static void aside_path(char *p, size_t n, const char *out, const char *which) { snprintf(p, n, "%s/%s", out, which); }

/* The earlier run's files back into out, this run's removed; ASIDE_DONE goes. 0 or -1 (errno). */
static int restore(const char *out) {
    char d[4200];
    aside_path(d, sizeof d, out, FG_RUN_ASIDE_DONE);
    remove_run_files(out, 0);
    if (move_run_files(d, out) != 0) return -1;
    if (rmdir(d) != 0) return -1;
    fsync_dir(out);
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
    fsync_dir(rf->dir);
}

fg_status fg_run_folder_recover(fg_run_folder *rf) {
    const char *out = rf->dir;
    char m[4200], d[4200], mp[4200];
    struct stat sb;
    aside_path(m, sizeof m, out, FG_RUN_ASIDE_MOVING);
    aside_path(d, sizeof d, out, FG_RUN_ASIDE_DONE);
    snprintf(mp, sizeof mp, "%s/%s", out, FG_CKPT_MODEL_FILE);
    if (lstat(m, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (move_run_files(m, out) != 0 || rmdir(m) != 0)
            return fg_error(FG_ERR_IO,
                            "--out: an interrupted --overwrite left the earlier run's files in '%s' and they cannot "
                            "be moved back: %s; move them back into '%s' by hand",
                            m, strerror(errno), out);
        fsync_dir(out);
        note(rf, "note: put back the earlier run's files that an interrupted --overwrite had begun to set aside");
    }
    if (lstat(d, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (lstat(mp, &sb) == 0) {
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
    fsync_dir(out);
    return FG_OK;
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
            missing = !strcmp(line, FG_RUN_LOG_HEADER_NO_MFU) ? 2 : !strcmp(line, FG_RUN_LOG_HEADER_NO_PEAK) ? 1 : 0;
            if (strcmp(line, FG_RUN_LOG_HEADER) && !missing) break; /* not our log: start over */
            continue;
        }
        char *end;
        long long st = strtoll(line, &end, 10);
        if (end == line || *end != ',' || st < 1 || st > step) continue;
        char row[512];
        if (missing && snprintf(row, sizeof row, "%s%s", line, missing == 2 ? ",," : ",") >= (int)sizeof row) continue;
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
