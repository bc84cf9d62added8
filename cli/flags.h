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

/* FG_FLAG_TRUTH: a Python-style bool: --name alone, or --name=VALUE / --name VALUE with VALUE one of
 * True False true false 1 0 (nanoGPT's habit); the value is in .i (0 or 1). A FG_FLAG_BOOL given
 * by its alias takes such a value too (False then leaves it not given). */
typedef enum { FG_FLAG_INT, FG_FLAG_F64, FG_FLAG_STR, FG_FLAG_BOOL, FG_FLAG_U64, FG_FLAG_TRUTH } fg_flag_type;

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
    /* another accepted name, e.g. nanoGPT's "--n_layer" for "--n-layer" (NULL: none), shown in --help;
     * by_alias: the value last given came under it */
    const char *alias;
    int by_alias;
} fg_flag;

/* 0: parsed; 2: usage error (line printed); -1: --help or -h was given (nothing printed). */
int fg_flags_parse(const char *cmd, fg_flag *flags, int n, int argc, char **argv);
/* The same, where an argument that is not a flag goes to positional(arg, ctx) in its turn (so that
 * what it sets and the flags around it apply in command-line order); it returns 0 or the exit
 * status (its own line printed). NULL: such an argument is a usage error, as above. */
int fg_flags_parse_ex(const char *cmd, fg_flag *flags, int n, int argc, char **argv,
                      int (*positional)(const char *arg, void *ctx), void *ctx);
/* The arguments that are not flags, in order: give fg_flags_collect and a list whose `args` has room
 * for argc of them to fg_flags_parse_ex. */
typedef struct {
    const char **args;
    int n;
} fg_flag_args;
int fg_flags_collect(const char *arg, void *list);
/* An argument that is not a flag and ends in ".bin" is most likely a shard of a --data-bin pattern
 * the shell expanded: prints the one line that says to quote the pattern and returns 1; else 0. */
int fg_flags_stray_bin(const char *cmd, const char *arg);
/* Sets the flag named `name` (with its dashes; its alias counts) from the text `value` (NULL for a
 * bool given alone) as the command line would. Errors are one line "flashgrad <cmd>: <where><name>:
 * <what is wrong>" (where: e.g. "config/x.py:4: ", or ""). 0, or 2 after the line. */
int fg_flags_set(const char *cmd, fg_flag *flags, int n, const char *name, const char *value, const char *where);
/* The flag whose name or alias is `name`, or NULL. */
fg_flag *fg_flags_lookup(fg_flag *flags, int n, const char *name);
/* The flag called `name` (with its dashes), or NULL. */
fg_flag *fg_flags_find(fg_flag *flags, int n, const char *name);
/* "usage: flashgrad <cmd> <synopsis>" then one line per flag with its default. */
void fg_flags_help(FILE *f, const char *cmd, const char *synopsis, const fg_flag *flags, int n);
/* The same, with a second table of defaults for another mode: where alt's default differs, the line
 * reads "(default X; <alt_label> Y)". */
void fg_flags_help_alt(FILE *f, const char *cmd, const char *synopsis, const fg_flag *flags, const fg_flag *alt,
                       const char *alt_label, int n);

#endif /* FG_FLAGS_H */
