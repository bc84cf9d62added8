/* peak_cache.c — see peak_cache.h. */
#include "cli/peak_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "ops/cpu.h"
#include "tensor/fileio.h"

#define HEADER "# flashgrad float32 FMA peak: GFLOP/s, simd, threads, cpu model (delete a line to measure it again)"
/* The measurement kept: the best of many short rounds (~0.5 s on 2 AVX2 cores), so that one of
 * them likely runs while no other process holds the cores. */
#define CACHE_ITERS 500000L
#define CACHE_ROUNDS 400
#define MAX_LINES 256

/* The CPU's model, tabs made spaces (the file's separator). */
static void cpu_model(char *out, size_t n) {
    fg_cpu_model_name(out, n);
    for (char *p = out; *p; p++)
        if (*p == '\t') *p = ' ';
}

/* $XDG_CACHE_HOME/flashgrad (an absolute XDG_CACHE_HOME only, as the spec says) or
 * $HOME/.cache/flashgrad, created; 0, or -1 when there is none. */
static int cache_dir(char *out, size_t n) {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[4000];
    if (x && x[0] == '/')
        snprintf(base, sizeof base, "%s", x);
    else if (home && home[0] == '/')
        snprintf(base, sizeof base, "%s/.cache", home);
    else
        return -1;
    if (mkdir(base, 0755) != 0 && errno != EEXIST) return -1;
    if (snprintf(out, n, "%s/flashgrad", base) >= (int)n) return -1;
    if (mkdir(out, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

typedef struct {
    double gflops;
    char simd[16];
    int threads;
    char cpu[256];
} entry;

/* One data line into e: 0, or -1 when it is not a valid line, with why[0..wn) saying what is wrong.
 * The figure is this file's one number that a run divides by: it must be finite and within
 * [FG_PEAK_MIN_GFLOPS, FG_PEAK_MAX_GFLOPS], or an MFU computed from it would be nonsense. */
static int parse_line(char *line, entry *e, char *why, size_t wn) {
    char *f[4], *save = NULL;
    int k = 0;
    snprintf(why, wn, "not <GFLOP/s> TAB <simd> TAB <threads> TAB <cpu model>");
    for (char *t = strtok_r(line, "\t", &save); t && k < 4; t = strtok_r(NULL, "\t", &save)) f[k++] = t;
    if (k != 4 || strtok_r(NULL, "\t", &save)) return -1;
    char *end;
    errno = 0;
    e->gflops = strtod(f[0], &end);
    if (end == f[0] || *end) return -1;
    if (!(e->gflops >= FG_PEAK_MIN_GFLOPS && e->gflops <= FG_PEAK_MAX_GFLOPS)) { /* NaN fails too */
        snprintf(why, wn, "%.20s GFLOP/s is outside %g..%g", f[0], FG_PEAK_MIN_GFLOPS, FG_PEAK_MAX_GFLOPS);
        return -1;
    }
    errno = 0;
    long t = strtol(f[2], &end, 10);
    if (end == f[2] || *end || errno || t < 1 || t > 1 << 20) {
        snprintf(why, wn, "thread count %.20s is outside 1..%d", f[2], 1 << 20);
        return -1;
    }
    e->threads = (int)t;
    if (!*f[1] || strlen(f[1]) >= sizeof e->simd || !*f[3] || strlen(f[3]) >= sizeof e->cpu) return -1;
    snprintf(e->simd, sizeof e->simd, "%s", f[1]);
    snprintf(e->cpu, sizeof e->cpu, "%s", f[3]);
    return 0;
}

/* The cache's entries into e (at most MAX_LINES); *bad: the first invalid line's number (0: none),
 * and why[0..wn) what is wrong with it. Returns the count; 0 for a missing file. */
static int load(const char *path, entry *e, int *bad, char *why, size_t wn) {
    *bad = 0;
    why[0] = '\0';
    void *buf = NULL;
    size_t n = 0;
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    if (fg_read_file(path, 1 << 20, &buf, &n) != FG_OK) {
        fg_clear_error();
        *bad = 1;
        return 0;
    }
    int count = 0, lineno = 0;
    char *save = NULL;
    if (strlen(buf) != n) *bad = 1; /* a NUL inside: not our text */
    for (char *line = strtok_r(buf, "\n", &save); line && !*bad; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, HEADER)) *bad = 1;
            continue;
        }
        entry x;
        if (parse_line(line, &x, why, wn) != 0) {
            *bad = lineno;
            continue;
        }
        if (count < MAX_LINES) e[count++] = x;
    }
    if (lineno == 0) *bad = 1; /* an empty file was not written by us */
    free(buf);
    return count;
}

static int save(const char *path, const entry *e, int n) {
    size_t cap = sizeof HEADER + 2 + (size_t)n * 320, len = 0;
    char *buf = malloc(cap);
    if (!buf) return -1;
    len += (size_t)snprintf(buf + len, cap - len, "%s\n", HEADER);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%.1f\t%s\t%d\t%s\n", e[i].gflops, e[i].simd, e[i].threads,
                                e[i].cpu);
    const void *parts[1] = {buf};
    size_t sizes[1] = {len};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    free(buf);
    return st == FG_OK ? 0 : -1;
}

void fg_peak_get(double given, int remeasure, fg_peak_info *out) {
    memset(out, 0, sizeof *out);
    cpu_model(out->cpu, sizeof out->cpu);
    snprintf(out->simd, sizeof out->simd, "%s", fg_simd_name(fg_simd_active()));
    out->threads = fg_pool_threads();
    if (given > 0) {
        out->gflops = given;
        out->origin = FG_PEAK_GIVEN;
        fg_fma_peak_set(given);
        return;
    }
    char dir[4096];
    if (cache_dir(dir, sizeof dir) != 0 || snprintf(out->path, sizeof out->path, "%s/peak.tsv", dir) >= 4096) {
        out->path[0] = '\0';
        fprintf(stderr, "flashgrad: no cache folder (set XDG_CACHE_HOME or HOME): the FMA peak is measured for "
                        "this run only\n");
        out->gflops = fg_fma_peak_measure(CACHE_ITERS, CACHE_ROUNDS);
        out->origin = FG_PEAK_MEASURED;
        fg_fma_peak_set(out->gflops);
        return;
    }
    /* the lock makes concurrent starts measure once: the second reads what the first wrote */
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s/peak.lock", dir);
    /* never blocks at the open, and only a regular file serves (a FIFO or device there is left alone:
     * the run goes on without the lock) */
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
    struct stat lsb;
    if (lock >= 0 && (fstat(lock, &lsb) != 0 || !S_ISREG(lsb.st_mode) || flock(lock, LOCK_EX) != 0)) {
        close(lock);
        lock = -1;
    }
    static entry e[MAX_LINES + 1];
    char why[128];
    int bad = 0, n = load(out->path, e, &bad, why, sizeof why);
    if (bad > 1)
        fprintf(stderr,
                "flashgrad: %s line %d (%s) is not a valid peak cache: measuring the peak again and rewriting it\n",
                out->path, bad, why);
    else if (bad)
        fprintf(stderr, "flashgrad: %s is not a valid peak cache: measuring the peak again and rewriting it\n",
                out->path);
    int found = -1;
    for (int i = 0; i < n; i++)
        if (e[i].threads == out->threads && !strcmp(e[i].simd, out->simd) && !strcmp(e[i].cpu, out->cpu)) found = i;
    if (found >= 0 && !remeasure && !bad) {
        out->gflops = e[found].gflops;
        out->origin = FG_PEAK_CACHED;
    } else {
        out->gflops = fg_fma_peak_measure(CACHE_ITERS, CACHE_ROUNDS);
        out->gflops = round(out->gflops * 10) / 10; /* the figure as the file keeps it */
        out->origin = FG_PEAK_MEASURED;
        if (found < 0) found = n < MAX_LINES ? n++ : n - 1;
        e[found] = (entry){.gflops = out->gflops, .threads = out->threads};
        snprintf(e[found].simd, sizeof e[found].simd, "%s", out->simd);
        snprintf(e[found].cpu, sizeof e[found].cpu, "%s", out->cpu);
        if (save(out->path, e, n) != 0) {
            fprintf(stderr, "flashgrad: cannot write the peak cache %s (%s): the peak is for this run only\n",
                    out->path, fg_last_error());
            fg_clear_error();
            out->path[0] = '\0';
        }
    }
    if (lock >= 0) close(lock); /* releases the lock */
    fg_fma_peak_set(out->gflops);
}

const char *fg_peak_origin_text(const fg_peak_info *p, char *buf, size_t n) {
    switch (p->origin) {
    case FG_PEAK_GIVEN: snprintf(buf, n, "given by --peak"); break;
    case FG_PEAK_CACHED: snprintf(buf, n, "cached in %s", p->path); break;
    case FG_PEAK_MEASURED:
        if (p->path[0])
            snprintf(buf, n, "measured now, cached in %s", p->path);
        else
            snprintf(buf, n, "measured now, not cached");
        break;
    }
    return buf;
}
