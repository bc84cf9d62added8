/* flags.c — see flags.h. */
#include "cli/flags.h"
#include "cli/cli_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

fg_flag *fg_flags_find(fg_flag *flags, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(flags[k].name, name)) return &flags[k];
    return NULL;
}

/* The flag whose name or alias is the first len bytes of s; *alias: it was the alias. */
static fg_flag *match(fg_flag *flags, int n, const char *s, size_t len, int *alias) {
    for (int k = 0; k < n; k++) {
        if (strlen(flags[k].name) == len && !strncmp(flags[k].name, s, len)) {
            *alias = 0;
            return &flags[k];
        }
        if (flags[k].alias && strlen(flags[k].alias) == len && !strncmp(flags[k].alias, s, len)) {
            *alias = 1;
            return &flags[k];
        }
    }
    return NULL;
}

fg_flag *fg_flags_lookup(fg_flag *flags, int n, const char *name) {
    int alias;
    return match(flags, n, name, strlen(name), &alias);
}

static int bad(const char *cmd, const char *where, const char *name, const char *fmt, const char *val, double lo,
               double hi) {
    char head[512], what[512];
    snprintf(head, sizeof head, "flashgrad %s: %s%s: ", cmd, where, name);
    snprintf(what, sizeof what, fmt, val, lo, hi);
    fg_cli_line(head, "%s", what);
    return 2;
}

/* A Python-style truth value: 1, 0, or -1 when v is none of True False true false 1 0. */
static int truth_of(const char *v) {
    if (!strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1")) return 1;
    if (!strcmp(v, "False") || !strcmp(v, "false") || !strcmp(v, "0")) return 0;
    return -1;
}

/* f takes a truth value (rather than none) when given under this name. */
static int takes_truth(const fg_flag *f, int alias) { return f->type == FG_FLAG_TRUTH || (f->type == FG_FLAG_BOOL && alias); }

/* Sets f from v (NULL: a bool alone), `nm` being the name it was given under. */
static int set_value(const char *cmd, const char *where, fg_flag *f, const char *nm, int alias, const char *v) {
    char *end;
    errno = 0;
    int ranged = !(f->lo == 0 && f->hi == 0);
    if (f->type == FG_FLAG_BOOL && !alias) {
        if (v) {
            fprintf(stderr, "flashgrad %s: %s%s takes no value\n", cmd, where, nm);
            return 2;
        }
        f->i = 1;
        f->given = 1;
        f->by_alias = 0;
        return 0;
    }
    if (takes_truth(f, alias)) {
        int t = v ? truth_of(v) : 1;
        if (t < 0) return bad(cmd, where, nm, "'%s' is not True or False", v, 0, 0);
        f->i = t;
        f->given = f->type == FG_FLAG_BOOL ? t : 1; /* a bool's False is its absence */
        f->by_alias = alias;
        return 0;
    }
    if (!v) {
        fprintf(stderr, "flashgrad %s: %s%s needs a value (%s)\n", cmd, where, nm, f->meta ? f->meta : "VALUE");
        return 2;
    }
    switch (f->type) {
    case FG_FLAG_INT: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return bad(cmd, where, nm, "'%s' is not a whole number", v, 0, 0);
        if (ranged && ((f->lo_open ? x <= f->lo : x < f->lo) || x > f->hi))
            return bad(cmd, where, nm, f->lo_open ? "%s is outside (%.15g, %.15g]" : "%s is outside [%.15g, %.15g]",
                       v, f->lo, f->hi);
        f->i = x;
        break;
    }
    case FG_FLAG_F64: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) return bad(cmd, where, nm, "'%s' is not a finite number", v, 0, 0);
        if (ranged && ((f->lo_open ? x <= f->lo : x < f->lo) || x > f->hi))
            return bad(cmd, where, nm, f->lo_open ? "%s is outside (%.15g, %.15g]" : "%s is outside [%.15g, %.15g]",
                       v, f->lo, f->hi);
        f->d = x;
        break;
    }
    case FG_FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-' || *v == '+')
            return bad(cmd, where, nm, "'%s' is not a non-negative whole number", v, 0, 0);
        f->u = x;
        break;
    }
    case FG_FLAG_STR:
        if (!*v) return bad(cmd, where, nm, "needs a non-empty value%s", "", 0, 0);
        f->s = v;
        break;
    case FG_FLAG_BOOL:
    case FG_FLAG_TRUTH:
        break;
    }
    f->given = 1;
    f->by_alias = alias;
    return 0;
}

int fg_flags_set(const char *cmd, fg_flag *flags, int n, const char *name, const char *value, const char *where) {
    int alias = 0;
    fg_flag *f = match(flags, n, name, strlen(name), &alias);
    if (!f) {
        fprintf(stderr, "flashgrad %s: %sunknown flag '%s' (see flashgrad %s --help)\n", cmd, where, name, cmd);
        return 2;
    }
    return set_value(cmd, where, f, name, alias, value);
}

int fg_flags_stray_bin(const char *cmd, const char *arg) {
    const size_t n = strlen(arg);
    if (n < 4 || strcmp(arg + n - 4, ".bin")) return 0;
    fprintf(stderr,
            "flashgrad %s: unexpected argument '%s': did the shell expand a --data-bin pattern? Quote it, as in "
            "--data-bin 'data/fineweb_train_*.bin', so that flashgrad lists the shards itself (in llm.c's order)\n",
            cmd, arg);
    return 1;
}

int fg_flags_parse_ex(const char *cmd, fg_flag *flags, int n, int argc, char **argv,
                      int (*positional)(const char *arg, void *ctx), void *ctx) {
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return -1;
        if (strncmp(arg, "--", 2)) {
            if (positional) {
                int rc = positional(arg, ctx);
                if (rc) return rc;
                continue;
            }
            if (fg_flags_stray_bin(cmd, arg)) return 2;
            fprintf(stderr, "flashgrad %s: unexpected argument '%s' (flags start with --; see flashgrad %s --help)\n",
                    cmd, arg, cmd);
            return 2;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        int alias = 0;
        fg_flag *f = match(flags, n, arg, len, &alias);
        if (!f) {
            fprintf(stderr, "flashgrad %s: unknown flag '%.*s' (see flashgrad %s --help)\n", cmd, (int)len, arg, cmd);
            return 2;
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%.*s", (int)len, arg);
        const char *v = eq ? eq + 1 : NULL;
        if (!v && takes_truth(f, alias)) {
            /* --name True: the next argument is the value only when it is a truth value */
            if (a + 1 < argc && truth_of(argv[a + 1]) >= 0) v = argv[++a];
        } else if (!v && f->type != FG_FLAG_BOOL) {
            if (a + 1 >= argc) {
                fprintf(stderr, "flashgrad %s: %s needs a value (%s)\n", cmd, nm, f->meta ? f->meta : "VALUE");
                return 2;
            }
            v = argv[++a];
        }
        int rc = set_value(cmd, "", f, nm, alias, v);
        if (rc) return rc;
    }
    return 0;
}

int fg_flags_parse(const char *cmd, fg_flag *flags, int n, int argc, char **argv) {
    return fg_flags_parse_ex(cmd, flags, n, argc, argv, NULL, NULL);
}

/* The default of f as text into buf ("" for a bool or an unset string). */
static void value_str(const fg_flag *f, char *buf, size_t n) {
    buf[0] = '\0';
    switch (f->type) {
    case FG_FLAG_INT:
        snprintf(buf, n, "%" PRId64, f->i);
        break;
    case FG_FLAG_F64:
        snprintf(buf, n, "%g", f->d);
        break;
    case FG_FLAG_U64:
        snprintf(buf, n, "%" PRIu64, f->u);
        break;
    case FG_FLAG_STR:
        if (f->s) snprintf(buf, n, "%s", f->s);
        break;
    case FG_FLAG_BOOL:
        break;
    case FG_FLAG_TRUTH:
        snprintf(buf, n, "%s", f->i ? "True" : "False");
        break;
    }
}

void fg_flags_help_alt(FILE *out, const char *cmd, const char *synopsis, const fg_flag *flags, const fg_flag *alt,
                       const char *alt_label, int n) {
    fprintf(out, "usage: flashgrad %s %s\n\noptions:\n", cmd, synopsis);
    for (int k = 0; k < n; k++) {
        const fg_flag *f = &flags[k];
        char left[64], v[64], va[64];
        const int bare = f->type == FG_FLAG_BOOL || f->type == FG_FLAG_TRUTH;
        snprintf(left, sizeof left, "%s%s%s", f->name, bare ? "" : " ", bare ? "" : (f->meta ? f->meta : "VALUE"));
        fprintf(out, "  %-22s %s", left, f->help ? f->help : "");
        if (!f->help || !strstr(f->help, "(default")) {
            value_str(f, v, sizeof v);
            if (alt) value_str(&alt[k], va, sizeof va);
            if (alt && strcmp(v, va))
                fprintf(out, " (default %s; %s %s)", v, alt_label, va);
            else if (v[0])
                fprintf(out, " (default %s)", v);
        }
        if (f->alias) fprintf(out, " [nanoGPT: %s]", f->alias);
        fputc('\n', out);
    }
    fprintf(out, "  %-22s %s\n", "--help", "show this help");
}

void fg_flags_help(FILE *out, const char *cmd, const char *synopsis, const fg_flag *flags, int n) {
    fg_flags_help_alt(out, cmd, synopsis, flags, NULL, NULL, n);
}

int fg_flags_collect(const char *arg, void *list) {
    fg_flag_args *l = list;
    l->args[l->n++] = arg;
    return 0;
}
