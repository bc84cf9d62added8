/* nanogpt.c — see nanogpt.h. */
#include "cli/nanogpt.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"

/* ---- names: nanoGPT's train.py settings and ours ---- */
/* The settings whose flag of ours does what nanoGPT's does, in its units. gradient_accumulation_steps
 * counts every process's micro-batches, as nanoGPT's (which divides it by the world size): the
 * command divides it by the number of processes (by_alias tells it so). */
static const struct {
    const char *ours, *theirs;
} aliases[] = {
    {"--out", "--out_dir"},
    {"--eval-every", "--eval_interval"},
    {"--log-every", "--log_interval"},
    {"--eval-iters", "--eval_iters"},
    {"--eval-only", "--eval_only"},
    {"--grad-accum", "--gradient_accumulation_steps"},
    {"--batch-size", "--batch_size"},
    {"--block-size", "--block_size"},
    {"--n-layer", "--n_layer"},
    {"--n-head", "--n_head"},
    {"--n-embd", "--n_embd"},
    {"--lr", "--learning_rate"},
    {"--steps", "--max_iters"},
    {"--weight-decay", "--weight_decay"},
    {"--grad-clip", "--grad_clip"},
    {"--warmup", "--warmup_iters"},
    {"--lr-decay-steps", "--lr_decay_iters"},
    {"--min-lr", "--min_lr"},
    {"--init-from", "--init_from"},
};
#define N_ALIASES (sizeof aliases / sizeof aliases[0])

const char *fg_nanogpt_init_from_refusal(const char *value) {
    static const char *const hub[] = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"};
    struct stat st;
    if (!strcmp(value, "resume"))
        return "nanoGPT's way to continue the run in out_dir; here that is --resume";
    for (size_t k = 0; k < sizeof hub / sizeof hub[0]; k++)
        if (!strcmp(value, hub[k]) && stat(value, &st) != 0)
            return "nanoGPT downloads this model from the Hugging Face hub, and flashgrad downloads nothing: give "
                   "the path of a GPT-2 folder you have (config.json + model.safetensors) or an llm.c model file";
    return NULL;
}

void fg_nanogpt_aliases(fg_flag *f, int n) {
    for (size_t k = 0; k < N_ALIASES; k++) {
        fg_flag *x = fg_flags_find(f, n, aliases[k].ours);
        if (x) x->alias = aliases[k].theirs;
    }
}

void fg_nanogpt_flag_defaults(fg_flag *f, int n) {
    static const struct {
        const char *name;
        int truth;
        const char *s;
    } d[] = {
        {"--dataset", 0, NULL},       {"--always_save_checkpoint", 1, NULL}, {"--decay_lr", 1, NULL},
        {"--compile", 0, NULL},       {"--bias", 1, NULL},
        {"--backend", 0, "nccl"},     {"--wandb_log", 0, NULL},              {"--wandb_project", 0, "owt"},
        {"--wandb_run_name", 0, "gpt2"},
    };
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) {
        fg_flag *x = fg_flags_find(f, n, d[k].name);
        if (!x) continue;
        x->i = d[k].truth;
        x->s = d[k].s;
    }
}

/* train.py's defaults block, of the settings that have a flag here (device, dtype, compile, bias,
 * backend and init_from stay this program's: see fg_nanogpt_help). */
static const char train_py_defaults[] = "out_dir = 'out'\n"
                                        "eval_interval = 2000\n"
                                        "log_interval = 1\n"
                                        "eval_iters = 200\n"
                                        "eval_only = False\n"
                                        "always_save_checkpoint = True\n"
                                        "wandb_log = False\n"
                                        "wandb_project = 'owt'\n"
                                        "wandb_run_name = 'gpt2'\n"
                                        "dataset = 'openwebtext'\n"
                                        "gradient_accumulation_steps = 5 * 8\n"
                                        "batch_size = 12\n"
                                        "block_size = 1024\n"
                                        "n_layer = 12\n"
                                        "n_head = 12\n"
                                        "n_embd = 768\n"
                                        "dropout = 0.0\n"
                                        "learning_rate = 6e-4\n"
                                        "max_iters = 600000\n"
                                        "weight_decay = 1e-1\n"
                                        "beta1 = 0.9\n"
                                        "beta2 = 0.95\n"
                                        "grad_clip = 1.0\n"
                                        "decay_lr = True\n"
                                        "warmup_iters = 2000\n"
                                        "lr_decay_iters = 600000\n"
                                        "min_lr = 6e-5\n";

/* ---- the config-file reader ---- */
/* A value being parsed: the rest of the line. */
typedef struct {
    const char *p;
    const char *why; /* the first problem */
} cursor;

typedef struct {
    int is_int;
    long long i;
    double d;
} num;

static void skip_ws(cursor *c) {
    while (*c->p == ' ' || *c->p == '\t') c->p++;
}

static int fail(cursor *c, const char *why) {
    if (!c->why) c->why = why;
    return -1;
}

static int parse_expr(cursor *c, num *out);

/* A number literal: decimal (with _ between digits), 0x/0o/0b integers, floats with . or e. */
static int parse_number(cursor *c, num *out) {
    char buf[128];
    size_t k = 0;
    const char *s = c->p;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X' || s[1] == 'o' || s[1] == 'O' || s[1] == 'b' || s[1] == 'B')) {
        int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
        s += 2;
        while ((isalnum((unsigned char)*s) || *s == '_') && k < sizeof buf - 1)
            if (*s == '_')
                s++;
            else
                buf[k++] = *s++;
        buf[k] = '\0';
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, base);
        if (!k || *end || errno) return fail(c, "not a number");
        c->p = s;
        *out = (num){.is_int = 1, .i = v, .d = (double)v};
        return 0;
    }
    int is_float = 0;
    while (k < sizeof buf - 1) {
        if (isdigit((unsigned char)*s)) {
            buf[k++] = *s++;
        } else if (*s == '_' && k && isdigit((unsigned char)s[1])) {
            s++;
        } else if (*s == '.') {
            is_float = 1;
            buf[k++] = *s++;
        } else if ((*s == 'e' || *s == 'E') && k) {
            is_float = 1;
            buf[k++] = *s++;
            if ((*s == '+' || *s == '-') && k < sizeof buf - 1) buf[k++] = *s++;
        } else {
            break;
        }
    }
    buf[k] = '\0';
    if (isalpha((unsigned char)*s) || *s == '_') return fail(c, "not a number");
    char *end;
    errno = 0;
    if (is_float) {
        double v = strtod(buf, &end);
        if (!k || *end || !isfinite(v)) return fail(c, "not a number");
        *out = (num){.is_int = 0, .d = v};
    } else {
        long long v = strtoll(buf, &end, 10);
        if (!k || *end || errno) return fail(c, "not a number (or too large)");
        if (k > 1 && buf[0] == '0') {
            for (size_t j = 0; j < k; j++)
                if (buf[j] != '0') return fail(c, "leading zeros in a decimal integer");
        }
        *out = (num){.is_int = 1, .i = v, .d = (double)v};
    }
    c->p = s;
    return 0;
}

static int parse_atom(cursor *c, num *out) {
    skip_ws(c);
    if (*c->p == '(') {
        c->p++;
        if (parse_expr(c, out)) return -1;
        skip_ws(c);
        if (*c->p != ')') return fail(c, "a '(' without its ')'");
        c->p++;
        return 0;
    }
    if (isdigit((unsigned char)*c->p) || (*c->p == '.' && isdigit((unsigned char)c->p[1]))) return parse_number(c, out);
    return fail(c, "not a literal (a number, a string, True or False)");
}

static int parse_unary(cursor *c, num *out);

/* power: atom ['**' unary] (right-associative, binds tighter than a unary minus on its left) */
static int parse_power(cursor *c, num *out) {
    if (parse_atom(c, out)) return -1;
    skip_ws(c);
    if (c->p[0] == '*' && c->p[1] == '*') {
        c->p += 2;
        num e;
        if (parse_unary(c, &e)) return -1;
        if (out->is_int && e.is_int && e.i >= 0) {
            long long r = 1;
            for (long long k = 0; k < e.i; k++) {
                if (llabs(r) > INT64_MAX / (llabs(out->i) ? llabs(out->i) : 1)) return fail(c, "integer overflow");
                r *= out->i;
            }
            *out = (num){.is_int = 1, .i = r, .d = (double)r};
        } else {
            double v = pow(out->d, e.d);
            if (!isfinite(v)) return fail(c, "not a finite number");
            *out = (num){.is_int = 0, .d = v};
        }
    }
    return 0;
}

static int parse_unary(cursor *c, num *out) {
    skip_ws(c);
    if (*c->p == '-' || *c->p == '+') {
        int neg = *c->p == '-';
        c->p++;
        if (parse_unary(c, out)) return -1;
        if (neg) {
            out->i = -out->i;
            out->d = -out->d;
        }
        return 0;
    }
    return parse_power(c, out);
}

static int parse_term(cursor *c, num *out) {
    if (parse_unary(c, out)) return -1;
    for (;;) {
        skip_ws(c);
        int op;
        if (c->p[0] == '*' && c->p[1] != '*')
            op = '*', c->p++;
        else if (c->p[0] == '/' && c->p[1] == '/')
            op = 'f', c->p += 2;
        else if (c->p[0] == '/')
            op = '/', c->p++;
        else if (c->p[0] == '%')
            op = '%', c->p++;
        else
            return 0;
        num b;
        if (parse_unary(c, &b)) return -1;
        if ((op == '/' || op == 'f' || op == '%') && b.d == 0) return fail(c, "division by zero");
        if (out->is_int && b.is_int && op != '/') {
            long long r;
            if (op == '*') {
                if (__builtin_mul_overflow(out->i, b.i, &r)) return fail(c, "integer overflow");
            } else { /* Python's floor division and modulo */
                long long q = out->i / b.i, m = out->i % b.i;
                if (m != 0 && ((m < 0) != (b.i < 0))) q--, m += b.i;
                r = op == 'f' ? q : m;
            }
            *out = (num){.is_int = 1, .i = r, .d = (double)r};
        } else {
            double v = op == '*' ? out->d * b.d
                       : op == '/' ? out->d / b.d
                       : op == 'f' ? floor(out->d / b.d)
                                   : out->d - b.d * floor(out->d / b.d);
            *out = (num){.is_int = 0, .d = v};
        }
    }
}

static int parse_expr(cursor *c, num *out) {
    if (parse_term(c, out)) return -1;
    for (;;) {
        skip_ws(c);
        if (*c->p != '+' && *c->p != '-') return 0;
        int sub = *c->p == '-';
        c->p++;
        num b;
        if (parse_term(c, &b)) return -1;
        if (out->is_int && b.is_int) {
            long long r;
            if (sub ? __builtin_sub_overflow(out->i, b.i, &r) : __builtin_add_overflow(out->i, b.i, &r))
                return fail(c, "integer overflow");
            *out = (num){.is_int = 1, .i = r, .d = (double)r};
        } else {
            *out = (num){.is_int = 0, .d = sub ? out->d - b.d : out->d + b.d};
        }
    }
}

/* A string literal '...' or "..." (with Python's simple escapes) into out; c->p after it. */
static int parse_string(cursor *c, char *out, size_t n) {
    const char q = *c->p++;
    if (c->p[0] == q && c->p[1] == q) return fail(c, "triple-quoted strings are not read");
    size_t k = 0;
    for (;;) {
        char ch = *c->p++;
        if (ch == '\0' || ch == '\n') return fail(c, "a string without its closing quote");
        if (ch == q) break;
        if (ch == '\\') {
            char e = *c->p++;
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case '\\': ch = '\\'; break;
            case '\'': ch = '\''; break;
            case '"': ch = '"'; break;
            default: return fail(c, "an escape other than \\n \\t \\\\ \\' \\\" in a string");
            }
        }
        if (k + 1 >= n) return fail(c, "a string too long");
        out[k++] = ch;
    }
    out[k] = '\0';
    return 0;
}

/* The value of one line's right-hand side into e; 0, or -1 with c->why. */
static int parse_value(cursor *c, fg_pyconfig_entry *e) {
    skip_ws(c);
    const char *p = c->p;
    e->is_string = 0;
    if (*p == '\'' || *p == '"') {
        e->is_string = 1;
        if (parse_string(c, e->value, sizeof e->value)) return -1;
    } else if ((p[0] == 'r' || p[0] == 'b' || p[0] == 'f' || p[0] == 'u') && (p[1] == '\'' || p[1] == '"')) {
        return fail(c, "prefixed strings (r'', b'', f'', u'') are not read");
    } else {
        static const char *const words[] = {"True", "False", "None"};
        int word = -1;
        for (int k = 0; k < 3; k++) {
            size_t len = strlen(words[k]);
            if (!strncmp(p, words[k], len) && !isalnum((unsigned char)p[len]) && p[len] != '_') {
                word = k;
                c->p += len;
            }
        }
        if (word >= 0) {
            snprintf(e->value, sizeof e->value, "%s", words[word]);
        } else {
            num v;
            if (parse_expr(c, &v)) return -1;
            if (v.is_int)
                snprintf(e->value, sizeof e->value, "%lld", v.i);
            else
                snprintf(e->value, sizeof e->value, "%.17g", v.d);
        }
    }
    skip_ws(c);
    if (*c->p == '#') c->p += strlen(c->p);
    if (*c->p) return fail(c, "not a literal (a number, a string, True or False)");
    return 0;
}

/* Parses `text` (its name for messages: src) into entries. */
static int read_text(const char *src, char *text, fg_pyconfig_entry **out, char *err, size_t err_n) {
    int cap = 16, n = 0, lineno = 0;
    fg_pyconfig_entry *v = malloc((size_t)cap * sizeof *v);
    if (!v) {
        snprintf(err, err_n, "%s: out of memory", src);
        return -1;
    }
    for (char *line = text; line; ) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        lineno++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        cursor c = {.p = line};
        skip_ws(&c);
        const char *start = c.p;
        if (*c.p && *c.p != '#') {
            if (c.p != line) {
                snprintf(err, err_n, "%s:%d: an indented line (only top-level `key = literal` lines are read)", src,
                         lineno);
                goto bad;
            }
            const char *k0 = c.p;
            while (isalnum((unsigned char)*c.p) || *c.p == '_') c.p++;
            size_t klen = (size_t)(c.p - k0);
            skip_ws(&c);
            if (!klen || isdigit((unsigned char)*k0) || *c.p != '=' || c.p[1] == '=') {
                snprintf(err, err_n, "%s:%d: '%.60s' is not a `key = literal` line", src, lineno, start);
                goto bad;
            }
            c.p++;
            if (n == cap) {
                cap *= 2;
                fg_pyconfig_entry *w = realloc(v, (size_t)cap * sizeof *v);
                if (!w) {
                    snprintf(err, err_n, "%s: out of memory", src);
                    goto bad;
                }
                v = w;
            }
            fg_pyconfig_entry *e = &v[n];
            memset(e, 0, sizeof *e);
            e->line = lineno;
            if (klen >= sizeof e->key) {
                snprintf(err, err_n, "%s:%d: the key is too long", src, lineno);
                goto bad;
            }
            memcpy(e->key, k0, klen);
            e->key[klen] = '\0';
            if (parse_value(&c, e)) {
                const char *eq = strchr(start, '=');
                const char *val = eq ? eq + 1 : "";
                while (*val == ' ' || *val == '\t') val++;
                snprintf(err, err_n, "%s:%d: %s = %.60s: %s", src, lineno, e->key, val, c.why);
                goto bad;
            }
            n++;
        }
        line = nl ? nl + 1 : NULL;
    }
    *out = v;
    return n;
bad:
    free(v);
    return -1;
}

int fg_pyconfig_read(const char *path, fg_pyconfig_entry **out, char *err, size_t err_n) {
    *out = NULL;
    void *buf = NULL;
    size_t got = 0;
    /* a regular file of at most 1 MiB (fg_read_file: a FIFO, device or folder is refused unread) */
    if (fg_read_file(path, 1 << 20, &buf, &got) != FG_OK) {
        snprintf(err, err_n, "%s", fg_last_error());
        fg_clear_error();
        return -1;
    }
    char *text = buf;
    if (strlen(text) != got) {
        snprintf(err, err_n, "%s: holds a NUL byte (not a Python config file)", path);
        free(text);
        return -1;
    }
    int n = read_text(path, text, out, err, err_n);
    free(text);
    return n;
}

/* ---- applying entries to the flags ---- */
/* Strings the flags point at, alive for the whole process (reachable, so not a leak). */
static char *keep_string(const char *s) {
    static char *pool[256];
    static int used;
    char *d = strdup(s);
    if (d && used < (int)(sizeof pool / sizeof pool[0])) pool[used++] = d;
    return d;
}

/* One `key = value` entry (where: "FILE:LINE: "); as_default: set the value but leave the flag not
 * given. 0, or 2 after the line. */
static int apply_entry(fg_nanogpt *ng, const fg_pyconfig_entry *e, const char *where, int as_default) {
    if (!strcmp(e->key, "init_from")) {
        /* 'scratch' is a fresh run, what train does; anything else names the model to start from */
        const char *why = fg_nanogpt_init_from_refusal(e->value);
        if (e->is_string && !strcmp(e->value, "scratch")) return 0;
        if (why) {
            fprintf(stderr, "flashgrad %s: %sinit_from = '%s': %s\n", ng->cmd, where, e->value, why);
            return 2;
        }
    }
    char name[80];
    snprintf(name, sizeof name, "--%s", e->key);
    fg_flag *f = fg_flags_lookup(ng->flags, ng->n, name);
    /* a key is one of train.py's settings, or one of our flags whose name is one word (seed, steps) */
    if (!f) {
        fprintf(stderr,
                "flashgrad %s: %sunknown config key '%s' (neither a setting of nanoGPT's train.py nor a flag of "
                "flashgrad %s --help)\n",
                ng->cmd, where, e->key, ng->cmd);
        return 2;
    }
    const int numeric = f->type == FG_FLAG_INT || f->type == FG_FLAG_F64 || f->type == FG_FLAG_U64;
    if (numeric && e->is_string) {
        fprintf(stderr, "flashgrad %s: %s%s = '%s': a string, where a number is wanted\n", ng->cmd, where, e->key,
                e->value);
        return 2;
    }
    if (f->type == FG_FLAG_STR && !e->is_string) {
        fprintf(stderr, "flashgrad %s: %s%s = %s: a string is wanted (in quotes)\n", ng->cmd, where, e->key,
                e->value);
        return 2;
    }
    if ((f->type == FG_FLAG_TRUTH || f->type == FG_FLAG_BOOL) && strcmp(e->value, "True") && strcmp(e->value, "False")) {
        fprintf(stderr, "flashgrad %s: %s%s = %s%s%s: True or False is wanted\n", ng->cmd, where, e->key,
                e->is_string ? "'" : "", e->value, e->is_string ? "'" : "");
        return 2;
    }
    if (f->type == FG_FLAG_BOOL && f->alias == NULL) { /* one of our bare flags: True gives it */
        if (strcmp(e->value, "True")) return 0;
        return fg_flags_set(ng->cmd, ng->flags, ng->n, name, NULL, where);
    }
    const char *v = keep_string(e->value);
    if (!v) {
        fprintf(stderr, "flashgrad %s: out of memory\n", ng->cmd);
        return 2;
    }
    const int given = f->given, by_alias = f->by_alias;
    int rc = fg_flags_set(ng->cmd, ng->flags, ng->n, name, v, where);
    if (rc) return rc;
    if (as_default) {
        f->given = given;
        f->by_alias = f == fg_flags_find(ng->flags, ng->n, "--grad-accum") ? 1 : by_alias;
    }
    return 0;
}

int fg_nanogpt_train_defaults(fg_nanogpt *ng) {
    char text[sizeof train_py_defaults], err[512];
    memcpy(text, train_py_defaults, sizeof text);
    fg_pyconfig_entry *e = NULL;
    int n = read_text("train.py", text, &e, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "flashgrad %s: %s\n", ng->cmd, err);
        return 2;
    }
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) rc = apply_entry(ng, &e[k], "nanoGPT's train.py defaults: ", 1);
    free(e);
    return rc;
}

int fg_nanogpt_positional(const char *arg, void *ctx) {
    fg_nanogpt *ng = ctx;
    if (fg_flags_stray_bin(ng->cmd, arg)) return 2;
    fg_pyconfig_entry *e = NULL;
    char err[1024];
    int n = fg_pyconfig_read(arg, &e, err, sizeof err);
    if (n < 0) {
        int missing = access(arg, F_OK) != 0;
        fprintf(stderr, "flashgrad %s: %s%s\n", ng->cmd, err,
                missing ? " (an argument that is not a --flag is a nanoGPT config file)" : "");
        return missing ? 1 : 2;
    }
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        char where[4200];
        snprintf(where, sizeof where, "%s:%d: ", arg, e[k].line);
        rc = apply_entry(ng, &e[k], where, 0);
    }
    free(e);
    ng->configs++;
    return rc;
}

/* ---- after parsing ---- */
static fg_flag *flag(fg_nanogpt *ng, const char *name) { return fg_flags_find(ng->flags, ng->n, name); }

static void note(int on, const char *fmt, const char *arg) {
    if (!on) return;
    printf("note: ");
    printf(fmt, arg);
    putchar('\n');
}

int fg_nanogpt_resolve(fg_nanogpt *ng, int resuming, int notes) {
    const char *cmd = ng->cmd;
    fg_flag *ds = flag(ng, "--dataset"), *bin = flag(ng, "--data-bin"), *text = flag(ng, "--data"),
            *vocab = flag(ng, "--vocab-size");
    /* the data: dataset, when given, or train.py's default under a config file, unless the
     * command line names the data another way */
    if (ds && ds->s && (ds->given || ng->configs)) {
        if (ds->given && (bin->given || text->given)) {
            fprintf(stderr, "flashgrad %s: give either --dataset NAME (data/NAME/) or %s, not both\n", cmd,
                    bin->given ? "--data-bin PATH" : "--data FILE");
            return 2;
        }
        if (!bin->given && !text->given) {
            if (strchr(ds->s, '/') || !strcmp(ds->s, ".") || !strcmp(ds->s, "..")) {
                fprintf(stderr, "flashgrad %s: --dataset '%s': a name, not a path (it means data/NAME/)\n", cmd, ds->s);
                return 2;
            }
            snprintf(ng->data_bin, sizeof ng->data_bin, "data/%s", ds->s);
            bin->s = ng->data_bin;
            bin->given = 1;
            char meta[4300];
            snprintf(meta, sizeof meta, "%s/meta.pkl", ng->data_bin);
            /* with a meta.pkl, train reads the vocabulary (and the tokenizer) from it, as nanoGPT does;
             * a fine-tune takes the model's (GPT-2's 50257), as nanoGPT's from_pretrained does */
            fg_flag *init = flag(ng, "--init-from");
            int fine_tune = init && init->given && init->s && strcmp(init->s, "scratch") != 0;
            if (!vocab->given && !resuming && !fine_tune && access(meta, F_OK) != 0) {
                vocab->i = 50304;
                vocab->given = 1;
                if (notes) printf("note: vocabulary 50304, nanoGPT's without a meta.pkl (--vocab-size V sets it)\n");
            }
        }
    }
    fg_flag *decay = flag(ng, "--decay_lr");
    if (decay && decay->given && !decay->i) {
        /* train.py: lr = get_lr(iter_num) if decay_lr else learning_rate (no warm-up either) */
        fg_flag *w = flag(ng, "--warmup"), *mn = flag(ng, "--min-lr"), *lr = flag(ng, "--lr");
        w->i = 0;
        w->given = 1;
        mn->d = lr->d;
        mn->given = 1;
    }
    fg_flag *dev = flag(ng, "--device");
    if (dev && dev->given && dev->s && !strncmp(dev->s, "cuda:", 5)) {
        if (strcmp(dev->s, "cuda:0")) {
            fprintf(stderr, "flashgrad %s: --device %s: one GPU per process here (cuda:0, or mpirun for several)\n",
                    cmd, dev->s);
            return 2;
        }
        dev->s = "cuda";
    }
    fg_flag *bias = flag(ng, "--bias"); /* the model's own flag (train_flags.h): False drops every bias */
    fg_flag *be = flag(ng, "--backend");
    if (be && be->s && strcmp(be->s, "nccl") && strcmp(be->s, "gloo") && strcmp(be->s, "mpi")) {
        fprintf(stderr, "flashgrad %s: --backend '%s': unknown (nccl, gloo or mpi)\n", cmd, be->s);
        return 2;
    }
    if (be && be->given) note(notes, "--backend %s does nothing: under mpirun the transport is MPI's (NCCL on CUDA)", be->s);
    fg_flag *co = flag(ng, "--compile");
    if (co && co->given && co->i) note(notes, "--compile does nothing%s: there is no torch.compile here", "");
    fg_flag *wb = flag(ng, "--wandb_log");
    if (wb && wb->given && wb->i) note(notes, "--wandb_log does nothing%s: the curve is in log.csv (out_dir/log.csv)", "");
    fg_flag *as = flag(ng, "--always_save_checkpoint");
    ng->best_only = as && !as->i;
    ng->best_only_given = as && as->given;
    if (ng->configs && notes && !(bias && bias->given))
        printf("note: nanoGPT's train.py defaults to bias = False; here a GPT-2 has its biases (bias = True) unless "
               "the config or --bias=False says otherwise\n");
    return 0;
}

void fg_nanogpt_help(FILE *out) {
    fprintf(
        out,
        "\nnanoGPT: `flashgrad train CONFIG.py [--key=value | --key value ...]` reads a nanoGPT config file as its\n"
        "configurator.py does (in command-line order with the flags, later ones winning), over nanoGPT train.py's\n"
        "defaults (GPT-2 124M on data/openwebtext, ...), each line `key = literal` (a number, a constant expression\n"
        "of numbers such as 5 * 8, a string, True, False); any other line is refused, naming it. Without a config\n"
        "file the defaults are flashgrad's. nanoGPT's names, shown [nanoGPT: ...] above, do what train.py does:\n"
        "  batch_size is the micro-batch; gradient_accumulation_steps counts every process's micro-batches (under\n"
        "  mpirun it is divided among them, as nanoGPT divides it by the world size; --grad-accum is per process);\n"
        "  learning_rate, min_lr, warmup_iters, lr_decay_iters: train.py's get_lr, the same schedule; decay_lr =\n"
        "  False: a constant learning_rate; max_iters: the step of the last evaluation and checkpoint (nanoGPT\n"
        "  runs one more step after it and saves nothing of it); eval_interval: evaluate (and checkpoint) every N\n"
        "  steps and at the end (nanoGPT also evaluates before step 1); eval_iters, log_interval (printed off a\n"
        "  terminal; on one the progress line updates); out_dir: the run folder (model.safetensors, not ckpt.pt);\n"
        "  dataset: data/<dataset>/train.bin, val.bin under the working folder, vocabulary 50304 as nanoGPT's\n"
        "  without a meta.pkl (with one, its vocabulary and character tokenizer); always_save_checkpoint\n"
        "  = False: checkpoint only when the val loss is the best so far (log.csv then ends at that checkpoint);\n"
        "  eval_only = True: print train and val loss and write nothing (with --resume: of the run in out_dir);\n"
        "  device: cpu or cuda (cuda:0); n_layer, n_head, n_embd, block_size, dropout, weight_decay, beta1, beta2,\n"
        "  grad_clip: the same.\n"
        "  dtype: our --dtype (float32; bfloat16: mixed precision on cuda; float16 refused); bias: the same\n"
        "  (default True, GPT-2's, where train.py's is False);\n"
        "  compile, wandb_log, wandb_project, wandb_run_name, backend: accepted,\n"
        "  do nothing (a note says so); init_from: 'scratch' (a fresh run) or the path of a model to fine-tune (--init-from;\n"
        "  'resume' is refused: pass --resume instead; hub names such as 'gpt2' are refused: nothing is downloaded). The device\n"
        "  stays flashgrad's default (cpu) under a config file; seed is flashgrad's (nanoGPT fixes 1337, our default).\n");
}
