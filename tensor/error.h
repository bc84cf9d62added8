/* error.h — how flashgrad reports a user's mistake.
 *
 * Library functions never exit or abort on bad input. They return a status (fg_status, 0 = ok) or
 * NULL, and leave a readable message in a per-thread buffer that fg_last_error() returns. The
 * message stays until the next error on the same thread. Internal invariants (bugs, not user
 * mistakes) go through FG_ASSERT, which prints file, line and a hint, then aborts.
 */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FG_OK = 0,
    FG_ERR_ARG,     /* a bad argument: negative size, NULL where a tensor is needed, ... */
    FG_ERR_SHAPE,   /* shapes that do not fit together */
    FG_ERR_DTYPE,   /* dtypes that differ or are unsupported here */
    FG_ERR_DEVICE,  /* tensors on different devices, or a device that is not built in */
    FG_ERR_OOM,     /* an allocation failed */
    FG_ERR_IO,      /* a file could not be opened, read or written */
    FG_ERR_FORMAT,  /* a file is malformed, truncated, corrupted or of an unsupported kind */
    FG_ERR_STATE,   /* an operation out of order: backward twice through a freed graph, ... */
    FG_ERR_NUMERIC, /* a non-finite value where a finite one is required */
    FG_STATUS_COUNT
} fg_status;

/* The message of the last error on this thread ("" if none). Owned by the library. */
const char *fg_last_error(void);
/* The status of the last error on this thread (FG_OK if none). */
fg_status fg_last_status(void);
/* Forget the last error. */
void fg_clear_error(void);
/* Record an error with a printf-style message; returns `st` so callers can `return fg_error(...)`. */
fg_status fg_error(fg_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Text that came from outside (a file's bytes, a path, another program's output) made fit for a
 * one-line message: the n bytes of `text` copied into out (cap >= 8 bytes, always NUL-terminated),
 * every byte outside printable ASCII (a NUL too) written as \xNN and a backslash as \\,
 * so that nothing reaches a terminal as a control sequence and the escapes read back unambiguously;
 * text that does not fit ends in "...". Returns out. */
const char *fg_printable(char *out, size_t cap, const char *text, size_t n);

/* A short name for a status, for messages. */
const char *fg_status_name(fg_status st);

/* Internal invariant: a failure here is a flashgrad bug, not a user error. */
void fg_assert_fail(const char *expr, const char *file, int line, const char *hint);
/* Return the status of `expr` from the enclosing function unless it is FG_OK. */
#define FG_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        fg_status fg_t_ = (expr);                                                                                      \
        if (fg_t_ != FG_OK) return fg_t_;                                                                              \
    } while (0)

#define FG_ASSERT(cond, hint)                                                                                          \
    do {                                                                                                               \
        if (!(cond)) fg_assert_fail(#cond, __FILE__, __LINE__, (hint));                                                \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* FG_ERROR_H */
