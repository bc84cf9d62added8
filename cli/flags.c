/* flags.c — see flags.h. */
#include "cli/flags.h"

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

static int bad(const char *cmd, const char *name, const char *fmt, const char *val, double lo, double hi) {
    fprintf(stderr, "flashgrad %s: %s: ", cmd, name);
    fprintf(stderr, fmt, val, lo, hi);
    fputc('\n', stderr);
    return 2;
}

static int set_value(const char *cmd, fg_flag *f, const char *v) {
    char *end;
    errno = 0;
    int ranged = !(f->lo == 0 && f->hi == 0);
    switch (f->type) {
    case FG_FLAG_INT: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return bad(cmd, f->name, "'%s' is not a whole number", v, 0, 0);
        if (ranged && ((f->lo_open ? x <= f->lo : x < f->lo) || x > f->hi))
            return bad(cmd, f->name, f->lo_open ? "%s is outside (%.15g, %.15g]" : "%s is outside [%.15g, %.15g]", v,
                       f->lo, f->hi);
        f->i = x;
        break;
    }
    case FG_FLAG_F64: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) return bad(cmd, f->name, "'%s' is not a finite number", v, 0, 0);
        if (ranged && ((f->lo_open ? x <= f->lo : x < f->lo) || x > f->hi))
            return bad(cmd, f->name, f->lo_open ? "%s is outside (%.15g, %.15g]" : "%s is outside [%.15g, %.15g]", v,
                       f->lo, f->hi);
        f->d = x;
        break;
    }
    case FG_FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-' || *v == '+')
            return bad(cmd, f->name, "'%s' is not a non-negative whole number", v, 0, 0);
        f->u = x;
        break;
    }
    case FG_FLAG_STR:
        if (!*v) return bad(cmd, f->name, "needs a non-empty value%s", "", 0, 0);
        f->s = v;
        break;
    case FG_FLAG_BOOL:
        f->i = 1;
        break;
    }
    f->given = 1;
    return 0;
}

int fg_flags_parse(const char *cmd, fg_flag *flags, int n, int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return -1;
        if (strncmp(arg, "--", 2)) {
            fprintf(stderr, "flashgrad %s: unexpected argument '%s' (flags start with --; see flashgrad %s --help)\n",
                    cmd, arg, cmd);
            return 2;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        fg_flag *f = NULL;
        for (int k = 0; k < n && !f; k++)
            if (strlen(flags[k].name) == len && !strncmp(flags[k].name, arg, len)) f = &flags[k];
        if (!f) {
            fprintf(stderr, "flashgrad %s: unknown flag '%.*s' (see flashgrad %s --help)\n", cmd, (int)len, arg, cmd);
            return 2;
        }
        if (f->type == FG_FLAG_BOOL) {
            if (eq) {
                fprintf(stderr, "flashgrad %s: %s takes no value\n", cmd, f->name);
                return 2;
            }
            f->i = 1;
            f->given = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (a + 1 >= argc) {
                fprintf(stderr, "flashgrad %s: %s needs a value (%s)\n", cmd, f->name, f->meta ? f->meta : "VALUE");
                return 2;
            }
            v = argv[++a];
        }
        int rc = set_value(cmd, f, v);
        if (rc) return rc;
    }
    return 0;
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
    }
}

void fg_flags_help_alt(FILE *out, const char *cmd, const char *synopsis, const fg_flag *flags, const fg_flag *alt,
                       const char *alt_label, int n) {
    fprintf(out, "usage: flashgrad %s %s\n\noptions:\n", cmd, synopsis);
    for (int k = 0; k < n; k++) {
        const fg_flag *f = &flags[k];
        char left[64], v[64], va[64];
        snprintf(left, sizeof left, "%s%s%s", f->name, f->type == FG_FLAG_BOOL ? "" : " ",
                 f->type == FG_FLAG_BOOL ? "" : (f->meta ? f->meta : "VALUE"));
        fprintf(out, "  %-22s %s", left, f->help ? f->help : "");
        if (!f->help || !strstr(f->help, "(default")) {
            value_str(f, v, sizeof v);
            if (alt) value_str(&alt[k], va, sizeof va);
            if (alt && strcmp(v, va))
                fprintf(out, " (default %s; %s %s)", v, alt_label, va);
            else if (v[0])
                fprintf(out, " (default %s)", v);
        }
        fputc('\n', out);
    }
    fprintf(out, "  %-22s %s\n", "--help", "show this help");
}

void fg_flags_help(FILE *out, const char *cmd, const char *synopsis, const fg_flag *flags, int n) {
    fg_flags_help_alt(out, cmd, synopsis, flags, NULL, NULL, n);
}
