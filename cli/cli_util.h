/* cli_util.h — small helpers shared by the subcommands: strict number parsing, clocks, the
 * machine line benchmarks print, and CSV files written atomically. (A command starts its device
 * with fg_device_start, ops/device.h.) */
#ifndef FG_CLI_UTIL_H
#define FG_CLI_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/fileio.h"

#include "tensor/tensor.h"

/* 0 on success; -1 if s is not entirely a number (no trailing junk, no overflow). */
int fg_parse_int(const char *s, int64_t *out);
int fg_parse_double(const char *s, double *out);
/* A size in bytes: a number (decimals allowed) with an optional suffix B, KiB, MiB or GiB (powers
 * of 1024), "1.5GiB", "512MiB", "4096"; rounded down to whole bytes, at least 1 and at most 2^60.
 * 0 on success; -1 on junk, another suffix (KB, MB: ambiguous) or out of range. */
int fg_parse_size(const char *s, int64_t *out);
/* "256,512,1024" -> out[0..*n); each in [lo, hi]. -1 on junk, range or more than cap items. */
int fg_parse_int_list(const char *s, int64_t *out, int cap, int *n, int64_t lo, int64_t hi);

/* One message line on stderr: prefix, the formatted text and '\n', handed to the kernel in one
 * write(2) (stdio may split a line made of several calls into several writes), so that another
 * process writing to the same pipe or terminal (mpirun's abort banner, the other ranks) cannot
 * land inside it: a pipe keeps a write of up to PIPE_BUF (4096) bytes whole. */
void fg_cli_line(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fg_cli_vline(const char *prefix, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Monotonic seconds. */
double fg_now(void);
/* Wait for the device's queued work (no-op on the CPU). */
void fg_device_sync(fg_device d);

/* "machine: <cpu model>, <n> cpus; OpenBLAS <core> with <t> threads" (and the GPU in a CUDA build). */
void fg_print_machine_line(FILE *f);
/* The CPU's model, as /proc/cpuinfo's first "model name" says, into out (n bytes); "unknown cpu"
 * when there is none. */
void fg_cpu_model_name(char *out, size_t n);

/* Prints one line to f when OpenBLAS runs its slow generic kernels on a CPU that has AVX2 (and
 * OPENBLAS_CORETYPE is unset): the product never changes that variable itself. */
void fg_blas_hint(FILE *f);

/* Flushes and closes stdout and reports whether everything the command printed there was written:
 * 0 if so; otherwise prints one line "flashgrad <cmd>: cannot write to standard output: <reason>"
 * on stderr (cmd NULL: "flashgrad: ...") and returns 1. A write error earlier in the run (stdio
 * keeps it in ferror) counts too, and so does a pipe whose reader went away (EPIPE, for a command
 * that ignores SIGPIPE); a stdout closed by the caller (>&-) is fine when nothing was printed.
 * main.c calls it once, after the subcommand returns; stdout must not be used afterwards. */
int fg_stdout_close_check(const char *cmd);

/* A CSV (or any text) file written atomically through tensor/fileio.h's fg_atomic_* (the same
 * temporary naming and target checks as every other writer: a device, FIFO or socket at `path` is
 * refused): fg_csv_open_atomic gives a stream on the temporary (NULL + fg_last_error on failure,
 * nothing to end then); fg_csv_commit flushes and closes the stream and renames the temporary over
 * `path` (0 on success, -1 + fg_last_error; a write that failed earlier, as ferror(f) records, fails
 * it too and leaves the old file); fg_csv_abort drops it. Each ends the handle. */
typedef struct {
    FILE *f;
    fg_atomic_file af;
} fg_csv_file;
FILE *fg_csv_open_atomic(fg_csv_file *c, const char *path);
int fg_csv_commit(fg_csv_file *c);
void fg_csv_abort(fg_csv_file *c);

#endif /* FG_CLI_UTIL_H */
