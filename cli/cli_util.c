/* cli_util.c — see cli_util.h. */
#include "cli/cli_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/cpu.h"

int fg_parse_int(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) return -1;
    *out = v;
    return 0;
}

int fg_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int fg_parse_size(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0 || *s == '+' || *s == '-' || isspace((unsigned char)*s)) return -1;
    double unit = 1;
    if (!strcmp(end, "") || !strcmp(end, "B"))
        unit = 1;
    else if (!strcmp(end, "KiB"))
        unit = 1024.0;
    else if (!strcmp(end, "MiB"))
        unit = 1024.0 * 1024;
    else if (!strcmp(end, "GiB"))
        unit = 1024.0 * 1024 * 1024;
    else
        return -1;
    const double b = floor(v * unit);
    if (!(b >= 1 && b <= 0x1p60)) return -1;
    *out = (int64_t)b;
    return 0;
}

int fg_parse_int_list(const char *s, int64_t *out, int cap, int *n, int64_t lo, int64_t hi) {
    *n = 0;
    if (!s || !*s) return -1;
    const char *p = s;
    while (*p) {
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf || *n >= cap) return -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        int64_t v;
        if (fg_parse_int(buf, &v) || v < lo || v > hi) return -1;
        out[(*n)++] = v;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p) return -1;
        }
    }
    return 0;
}

void fg_cli_vline(const char *prefix, const char *fmt, va_list ap) {
    char stack[4096], *line = stack;
    va_list aq;
    va_copy(aq, ap);
    const int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    const size_t want = strlen(prefix) + (size_t)(n > 0 ? n : 0) + 2; /* with '\n' and the NUL */
    size_t cap = sizeof stack;
    if (want > cap && (line = malloc(want)) != NULL)
        cap = want;
    else if (!line)
        line = stack; /* no memory for a long line: its start, cut to fit */
    snprintf(line, cap, "%s", prefix);
    size_t len = strlen(line);
    vsnprintf(line + len, cap - len, fmt, ap);
    len = strlen(line);
    if (len > cap - 2) len = cap - 2;
    line[len++] = '\n';
    fflush(stderr); /* anything stdio still holds goes first */
    for (size_t off = 0; off < len;) {
        const ssize_t w = write(STDERR_FILENO, line + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    if (line != stack) free(line);
}

void fg_cli_line(const char *prefix, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fg_cli_vline(prefix, fmt, ap);
    va_end(ap);
}

double fg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fg_device_sync(fg_device d) {
    const fg_device_backend *be = fg_backend(d);
    if (be && be->synchronize) be->synchronize();
}

void fg_cpu_model_name(char *out, size_t n) {
    snprintf(out, n, "unknown cpu");
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (!ci) return;
    char line[512];
    while (fgets(line, sizeof line, ci)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                snprintf(out, n, "%s", c);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(ci);
}

void fg_print_machine_line(FILE *f) {
    char model[256];
    fg_cpu_model_name(model, sizeof model);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    fprintf(f, "machine: %s, %ld cpus; OpenBLAS kernel %s with %d threads (OPENBLAS_CORETYPE=%s)\n", model,
            sysconf(_SC_NPROCESSORS_ONLN), fg_blas_core_name(), fg_blas_threads(), ct ? ct : "unset");
}

FILE *fg_csv_open_atomic(fg_csv_file *c, const char *path) {
    c->f = NULL;
    if (fg_atomic_begin(&c->af, path) != FG_OK) return NULL;
    int fd = dup(c->af.fd);
    if (fd < 0 || !(c->f = fdopen(fd, "w"))) {
        fg_error(FG_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        fg_atomic_abort(&c->af);
        return NULL;
    }
    return c->f;
}

int fg_csv_commit(fg_csv_file *c) {
    errno = 0;
    int bad = ferror(c->f) || fflush(c->f) != 0;
    int e = errno ? errno : EIO; /* ferror alone keeps no errno: the write that failed set it long ago */
    if (fclose(c->f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    c->f = NULL;
    if (bad) {
        fg_error(FG_ERR_IO, "cannot write '%s': %s", c->af.path, strerror(e));
        fg_atomic_abort(&c->af);
        return -1;
    }
    return fg_atomic_commit(&c->af) == FG_OK ? 0 : -1;
}

void fg_csv_abort(fg_csv_file *c) {
    if (c->f) fclose(c->f);
    c->f = NULL;
    fg_atomic_abort(&c->af);
}

void fg_blas_hint(FILE *f) {
    const char *core = fg_blas_core_name();
    /* OpenBLAS 0.3.21 (Debian 12) falls back to its generic Prescott kernels on CPUs it does not
     * recognize, such as virtual machines that hide the CPU model; its AVX2 kernels are ~3x faster. */
    if (core && !strcmp(core, "Prescott") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        !getenv("OPENBLAS_CORETYPE"))
        fprintf(f, "note: OpenBLAS chose its generic Prescott kernels on a CPU with AVX2; "
                   "OPENBLAS_CORETYPE=Haswell makes its matmuls about 3x faster here\n");
}

int fg_stdout_close_check(const char *cmd) {
    int earlier = ferror(stdout);
    errno = 0;
    int flush_failed = fflush(stdout) != 0;
    int e = errno;
    int close_failed = fclose(stdout) != 0;
    if (close_failed && !flush_failed) e = errno;
    /* fclose of an already closed descriptor (EBADF) loses nothing once the flush succeeded. */
    if (!earlier && !flush_failed && !(close_failed && e != EBADF)) return 0;
    if (flush_failed || close_failed)
        fprintf(stderr, "flashgrad%s%s: cannot write to standard output: %s\n", cmd ? " " : "", cmd ? cmd : "",
                strerror(e));
    else
        fprintf(stderr, "flashgrad%s%s: cannot write to standard output (a write failed earlier)\n", cmd ? " " : "",
                cmd ? cmd : "");
    return 1;
}
