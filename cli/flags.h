/* flags.h — table-driven command-line flags for the subcommands: one table gives the parser, the
 * range checks, the error lines and the --help text.
 *
 *     fg_flag flags[] = {
 *         {"--steps", FG_FLAG_INT, "N", "optimizer steps", .lo = 1, .hi = 1e9, .i = 2000},
 *         ...
 *     };
 *     int rc = fg_flags_parse("train", flags, n, argc, argv);   // 0 ok, 2 usage error, -1 --help
 *
 * Accepted forms: --name value and --name=value; a bool flag takes no value. Numbers must be whole
 * strings (no trailing junk) inside [lo, hi] (lo excluded when lo_open); the first problem prints
 * one line, "flashgrad <cmd>: --name: <what is wrong>", on stderr.
 */
#ifndef FG_FLAGS_H
#define FG_FLAGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum { FG_FLAG_INT, FG_FLAG_F64, FG_FLAG_STR, FG_FLAG_BOOL, FG_FLAG_U64 } fg_flag_type;

typedef struct {
    const char *name; /* "--n-layer" */
    fg_flag_type type;
    const char *meta; /* "N", "FILE", ... (shown in --help) */
    const char *help; /* one line; the default is appended unless the text has "(default" */
    double lo, hi;    /* range of INT and F64 values (both 0: any) */
    int lo_open;      /* 1: the value must be > lo */
    /* the value (set the default before parsing) and whether the command line gave it */
    int64_t i;
    double d;
    const char *s;
    uint64_t u;
    int given;
} fg_flag;

/* 0: parsed; 2: usage error (line printed); -1: --help or -h was given (nothing printed). */
int fg_flags_parse(const char *cmd, fg_flag *flags, int n, int argc, char **argv);
/* The flag called `name` (with its dashes), or NULL. */
fg_flag *fg_flags_find(fg_flag *flags, int n, const char *name);
/* "usage: flashgrad <cmd> <synopsis>" then one line per flag with its default. */
void fg_flags_help(FILE *f, const char *cmd, const char *synopsis, const fg_flag *flags, int n);
/* The same, with a second table of defaults for another mode: where alt's default differs, the line
 * reads "(default X; <alt_label> Y)". */
void fg_flags_help_alt(FILE *f, const char *cmd, const char *synopsis, const fg_flag *flags, const fg_flag *alt,
                       const char *alt_label, int n);

#endif /* FG_FLAGS_H */
