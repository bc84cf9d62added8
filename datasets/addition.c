/* addition.c — the synthetic "a+b=c" task: encoding, held-out split, batches, scoring.
 * Layout, vocabulary, loss optimum and the sampling rule are documented in addition.h.
 */
#include "datasets/addition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/source.h"
#include "tensor/philox.h"

#define MAX_L (3 * FG_ADD_MAX_DIGITS + 4)
#define MAX_ATTEMPTS (1u << 16)

struct fg_addition {
    fg_addition_config cfg;
    fg_tokenizer *tok;
    int n;              /* digits */
    uint64_t p10;       /* 10^n: operands are in [0, p10) */
    uint32_t val_below; /* (a, b) is held out iff its split draw < val_below */
};

fg_addition_config fg_addition_default_config(void) {
    fg_addition_config c;
    c.n_digits = 3;
    c.answer_only = 0;
    c.val_fraction = 0.1;
    c.split_seed = 0;
    return c;
}

void fg_addition_free(fg_addition *t) {
    if (!t) return;
    fg_tokenizer_free(t->tok);
    free(t);
}

static int is_val(const fg_addition *t, uint64_t a, uint64_t b) {
    return fg_philox_u32(t->cfg.split_seed, FG_ADDITION_SPLIT_STREAM, a * t->p10 + b) < t->val_below;
}

fg_addition *fg_addition_create(const fg_addition_config *cfg) {
    if (!cfg) {
        fg_error(FG_ERR_ARG, "addition: config is NULL");
        return NULL;
    }
    if (cfg->n_digits < 1 || cfg->n_digits > FG_ADD_MAX_DIGITS) {
        fg_error(FG_ERR_ARG, "addition: n_digits must be in 1..%d, got %d", FG_ADD_MAX_DIGITS, cfg->n_digits);
        return NULL;
    }
    if (!(cfg->val_fraction > 0.0 && cfg->val_fraction <= 0.5)) {
        fg_error(FG_ERR_ARG, "addition: val_fraction must be in (0, 0.5], got %g", cfg->val_fraction);
        return NULL;
    }
    if (cfg->answer_only != 0 && cfg->answer_only != 1) {
        fg_error(FG_ERR_ARG, "addition: answer_only must be 0 or 1, got %d", cfg->answer_only);
        return NULL;
    }
    fg_addition *t = calloc(1, sizeof *t);
    if (!t) {
        fg_error(FG_ERR_OOM, "addition: out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    t->n = cfg->n_digits;
    t->p10 = 1;
    for (int i = 0; i < t->n; i++) t->p10 *= 10;
    t->val_below = (uint32_t)(cfg->val_fraction * 4294967296.0); /* <= 2^31: no overflow */

    /* Both splits must be nonempty or rejection sampling could never finish. For n <= 2 (<= 10^4
     * pairs) count exactly; beyond, require >= 1000 held-out pairs in expectation, which makes an
     * empty split (probability ~e^-1000) impossible in practice. */
    double pairs = (double)t->p10 * (double)t->p10;
    if (t->n <= 2) {
        uint64_t n_val = 0, total = t->p10 * t->p10;
        for (uint64_t a = 0; a < t->p10; a++)
            for (uint64_t b = 0; b < t->p10; b++) n_val += (uint64_t)is_val(t, a, b);
        if (n_val == 0 || n_val == total) {
            fg_error(FG_ERR_ARG,
                     "addition: with n_digits=%d and val_fraction=%g the %s split is empty "
                     "(%llu of %llu pairs held out); raise val_fraction or n_digits",
                     t->n, cfg->val_fraction, n_val == 0 ? "validation" : "training", (unsigned long long)n_val,
                     (unsigned long long)total);
            fg_addition_free(t);
            return NULL;
        }
    } else if (pairs * cfg->val_fraction < 1000.0) {
        fg_error(FG_ERR_ARG, "addition: val_fraction %g holds out fewer than 1000 of %.0f pairs; raise it",
                 cfg->val_fraction, pairs);
        fg_addition_free(t);
        return NULL;
    }

    static const char vocab[] = "\n+0123456789="; /* sorted: '\n' < '+' < digits < '=' */
    t->tok = fg_tokenizer_char_from_vocab(vocab, sizeof vocab - 1);
    if (!t->tok) {
        fg_addition_free(t);
        return NULL;
    }
    FG_ASSERT(
        fg_tokenizer_token_of(t->tok, '\n') == FG_ADD_TOK_NL && fg_tokenizer_token_of(t->tok, '+') == FG_ADD_TOK_PLUS &&
            fg_tokenizer_token_of(t->tok, '0') == FG_ADD_TOK_DIGIT(0) &&
            fg_tokenizer_token_of(t->tok, '9') == FG_ADD_TOK_DIGIT(9) &&
            fg_tokenizer_token_of(t->tok, '=') == FG_ADD_TOK_EQ && fg_tokenizer_vocab_size(t->tok) == FG_ADD_VOCAB,
        "the FG_ADD_TOK_* ids must match the sorted vocabulary");
    return t;
}

const fg_addition_config *fg_addition_get_config(const fg_addition *t) { return &t->cfg; }
const fg_tokenizer *fg_addition_tokenizer(const fg_addition *t) { return t->tok; }
int fg_addition_vocab_size(const fg_addition *t) {
    (void)t;
    return FG_ADD_VOCAB;
}
int fg_addition_seq_len(const fg_addition *t) { return 3 * t->n + 4; }
int fg_addition_block_size(const fg_addition *t) { return 3 * t->n + 3; }
int fg_addition_prompt_len(const fg_addition *t) { return 2 * t->n + 2; }
int fg_addition_answer_len(const fg_addition *t) { return t->n + 2; }

int fg_addition_is_val(const fg_addition *t, uint64_t a, uint64_t b) {
    if (a >= t->p10 || b >= t->p10) {
        fg_error(FG_ERR_ARG, "addition: operands must be < %llu, got %llu and %llu", (unsigned long long)t->p10,
                 (unsigned long long)a, (unsigned long long)b);
        return -1;
    }
    return is_val(t, a, b);
}

/* seq[0 .. 3n+4) = a '+' b '=' reversed(c) '\n' (layout in addition.h). */
static void encode(const fg_addition *t, uint64_t a, uint64_t b, int32_t *seq) {
    int n = t->n;
    uint64_t c = a + b;
    for (int i = n - 1; i >= 0; i--, a /= 10) seq[i] = FG_ADD_TOK_DIGIT((int)(a % 10));
    seq[n] = FG_ADD_TOK_PLUS;
    for (int i = 2 * n; i >= n + 1; i--, b /= 10) seq[i] = FG_ADD_TOK_DIGIT((int)(b % 10));
    seq[2 * n + 1] = FG_ADD_TOK_EQ;
    for (int i = 0; i <= n; i++, c /= 10) seq[2 * n + 2 + i] = FG_ADD_TOK_DIGIT((int)(c % 10)); /* LSD first */
    seq[3 * n + 3] = FG_ADD_TOK_NL;
}

fg_status fg_addition_encode(const fg_addition *t, uint64_t a, uint64_t b, int32_t *seq) {
    if (!t || !seq) return fg_error(FG_ERR_ARG, "addition: encode needs a task and an output buffer");
    if (a >= t->p10 || b >= t->p10)
        return fg_error(FG_ERR_ARG, "addition: operands must be < %llu, got %llu and %llu", (unsigned long long)t->p10,
                        (unsigned long long)a, (unsigned long long)b);
    encode(t, a, b, seq);
    return FG_OK;
}

static int digit_of(int32_t tok) {
    return (tok >= FG_ADD_TOK_DIGIT(0) && tok <= FG_ADD_TOK_DIGIT(9)) ? tok - FG_ADD_TOK_DIGIT(0) : -1;
}

fg_status fg_addition_decode(const fg_addition *t, const int32_t *seq, uint64_t *a_out, uint64_t *b_out,
                             uint64_t *c_out) {
    if (!t || !seq) return fg_error(FG_ERR_ARG, "addition: decode needs a task and a sequence");
    int n = t->n, L = 3 * n + 4;
    uint64_t a = 0, b = 0, c = 0, place = 1;
    for (int i = 0; i < L; i++) {
        int32_t want = i == n           ? FG_ADD_TOK_PLUS
                       : i == 2 * n + 1 ? FG_ADD_TOK_EQ
                       : i == L - 1     ? FG_ADD_TOK_NL
                                        : -1; /* -1: a digit belongs here */
        int d = digit_of(seq[i]);
        if (want >= 0 ? seq[i] != want : d < 0)
            return fg_error(FG_ERR_FORMAT, "addition: token %d at position %d is not %s", (int)seq[i], i,
                            want == FG_ADD_TOK_PLUS ? "'+'"
                            : want == FG_ADD_TOK_EQ ? "'='"
                            : want == FG_ADD_TOK_NL ? "'\\n'"
                                                    : "a digit");
        if (want >= 0) continue;
        if (i < n)
            a = a * 10 + (uint64_t)d;
        else if (i <= 2 * n)
            b = b * 10 + (uint64_t)d;
        else {
            c += (uint64_t)d * place;
            place *= 10;
        }
    }
    if (a_out) *a_out = a;
    if (b_out) *b_out = b;
    if (c_out) *c_out = c;
    return FG_OK;
}

/* A problem of split `want_val` from Philox (seed, stream), counter blocks base, base+1, ...:
 * words 0-1 and 2-3 are two 64-bit numbers, reduced to [0, 10^n) without bias (reject the top
 * 2^64 mod 10^n values); a pair in the other split is redrawn. After MAX_ATTEMPTS rejections
 * (never seen in practice: each try succeeds with probability >= val_fraction) scan forward through
 * all pairs from the last draw; create() made sure the wanted split is not empty. */
static void sample_problem(const fg_addition *t, uint64_t seed, uint64_t stream, uint64_t base, int want_val,
                           uint64_t *a, uint64_t *b) {
    const uint64_t P = t->p10, max_ok = UINT64_MAX - (0 - P) % P;
    uint64_t pa = 0, pb = 0;
    for (uint32_t k = 0; k < MAX_ATTEMPTS; k++) {
        uint32_t w[4];
        fg_philox_block(seed, stream, base + k, w);
        uint64_t xa = ((uint64_t)w[0] << 32) | w[1], xb = ((uint64_t)w[2] << 32) | w[3];
        if (xa > max_ok || xb > max_ok) continue;
        pa = xa % P;
        pb = xb % P;
        if (is_val(t, pa, pb) == want_val) {
            *a = pa;
            *b = pb;
            return;
        }
    }
    uint64_t idx = pa * P + pb, total = P * P;
    for (uint64_t j = 0; j < total; j++) {
        idx = idx + 1 == total ? 0 : idx + 1;
        if (is_val(t, idx / P, idx % P) == want_val) break;
    }
    *a = idx / P;
    *b = idx % P;
}

fg_status fg_addition_batch(const fg_addition *t, fg_split s, int B, int T, uint64_t seed, uint64_t step, int32_t *x,
                            int32_t *y) {
    if (!t || !x || !y) return fg_error(FG_ERR_ARG, "addition batch: NULL task or output buffer");
    if (s < 0 || s >= FG_SPLIT_COUNT) return fg_error(FG_ERR_ARG, "addition batch: unknown split %d", (int)s);
    int n = t->n, L = 3 * n + 4;
    if (B < 1) return fg_error(FG_ERR_ARG, "addition batch: need B >= 1, got %d", B);
    if (T != L - 1)
        return fg_error(FG_ERR_ARG,
                        "addition batch: T must be the task's block size 3n+3 = %d for "
                        "n_digits=%d, got %d",
                        L - 1, n, T);
    /* x is (B, T) = seq[0 .. L-1); y is (B, T) = seq[1 .. L), or -1 before the answer if masked. */
    int32_t seq[MAX_L];
    for (int r = 0; r < B; r++) {
        uint64_t a, b;
        sample_problem(t, seed, FG_ADDITION_STREAM(s), (step * (uint64_t)B + (uint64_t)r) << 16, s == FG_SPLIT_VAL, &a,
                       &b);
        encode(t, a, b, seq);
        int32_t *xr = x + (size_t)r * T, *yr = y + (size_t)r * T;
        for (int i = 0; i < T; i++) {
            xr[i] = seq[i];
            /* y[i] = seq[i+1]; the answer's first digit is seq[2n+2], i.e. target i = 2n+1. */
            yr[i] = (t->cfg.answer_only && i < 2 * n + 1) ? -1 : seq[i + 1];
        }
    }
    return FG_OK;
}

fg_status fg_addition_problem(const fg_addition *t, fg_split s, uint64_t i, int32_t *prompt, int32_t *answer,
                              uint64_t *a_out, uint64_t *b_out) {
    if (!t || !prompt || !answer) return fg_error(FG_ERR_ARG, "addition problem: NULL task or buffer");
    if (s < 0 || s >= FG_SPLIT_COUNT) return fg_error(FG_ERR_ARG, "addition problem: unknown split %d", (int)s);
    uint64_t a, b;
    sample_problem(t, t->cfg.split_seed, FG_ADDITION_EVAL_STREAM(s), i << 16, s == FG_SPLIT_VAL, &a, &b);
    int32_t seq[MAX_L];
    encode(t, a, b, seq);
    int pl = fg_addition_prompt_len(t), al = fg_addition_answer_len(t);
    memcpy(prompt, seq, (size_t)pl * sizeof *prompt);
    memcpy(answer, seq + pl, (size_t)al * sizeof *answer);
    if (a_out) *a_out = a;
    if (b_out) *b_out = b;
    return FG_OK;
}

double fg_addition_optimal_loss(const fg_addition *t) {
    if (t->cfg.answer_only) return 0.0;
    /* (n-1) digits of a after the first and n digits of b are uniform: ln 10 each; the other
     * targets follow from the prompt. Mean over the T = 3n+3 targets of a row. */
    return (2.0 * t->n - 1.0) * log(10.0) / (3.0 * t->n + 3.0);
}

fg_status fg_addition_accuracy(const fg_addition *t, fg_split s, int K, fg_addition_complete_fn fn, void *ctx,
                               double *accuracy) {
    if (!t || !fn || !accuracy) return fg_error(FG_ERR_ARG, "addition accuracy: NULL task, function or result");
    if (K < 1) return fg_error(FG_ERR_ARG, "addition accuracy: need K >= 1 problems, got %d", K);
    int pl = fg_addition_prompt_len(t), al = fg_addition_answer_len(t);
    int32_t prompt[MAX_L], answer[MAX_L], out[MAX_L];
    int correct = 0;
    for (int i = 0; i < K; i++) {
        fg_status st = fg_addition_problem(t, s, (uint64_t)i, prompt, answer, NULL, NULL);
        if (st != FG_OK) return st;
        st = fn(ctx, prompt, pl, out, al);
        if (st != FG_OK) return st;
        correct += memcmp(out, answer, (size_t)al * sizeof *out) == 0;
    }
    *accuracy = (double)correct / K;
    return FG_OK;
}

/* ---- the addition task as a training source (datasets/source.h) ---- */
static const fg_tokenizer *add_tokenizer(const fg_source *d) { return fg_addition_tokenizer(d->add); }
static int add_vocab_size(const fg_source *d) { return fg_addition_vocab_size(d->add); }
static int add_fixed_block(const fg_source *d) { return fg_addition_block_size(d->add); }
static fg_status add_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                           int32_t *y) {
    return fg_addition_batch(d->add, s, B, T, seed, index, x, y);
}
static double add_optimal_loss(const fg_source *d) { return fg_addition_optimal_loss(d->add); }
static void add_free(fg_source *d) { fg_addition_free(d->add); }
/* The task's configuration: it makes the same problems and split again. */
static fg_status add_describe(const fg_source *d, const fg_meta_writer *w) {
    const fg_addition_config *ac = fg_addition_get_config(d->add);
    fg_status st = fg_meta_put_i64(w, "addition.n_digits", ac->n_digits);
    if (st == FG_OK) st = fg_meta_put_i64(w, "addition.answer_only", ac->answer_only);
    if (st == FG_OK) st = fg_meta_put_f64(w, "addition.val_fraction", ac->val_fraction);
    if (st == FG_OK) st = fg_meta_put_u64(w, "addition.split_seed", ac->split_seed);
    return st;
}

/* The task's configuration back, checked by the task itself, against the tokenizer and the
 * sequence length recorded with the model. */
static void add_read(const fg_meta_reader *r, const char *tokstr, fg_source_identity *id, fg_tokenizer **tok) {
    fg_meta_read_tokenizer(r, tokstr, id->vocab_size, tok);
    if (r->status(r->ctx) != FG_OK) return;
    fg_addition_config *ac = &id->addition;
    *ac = fg_addition_default_config();
    ac->n_digits = (int)r->i64(r->ctx, "addition.n_digits", 1, FG_ADD_MAX_DIGITS);
    ac->answer_only = (int)r->i64(r->ctx, "addition.answer_only", 0, 1);
    ac->val_fraction = r->f64(r->ctx, "addition.val_fraction", 0, 0.5, 0);
    ac->split_seed = r->u64(r->ctx, "addition.split_seed");
    if (r->status(r->ctx) != FG_OK) return;
    fg_addition *task = fg_addition_create(ac);
    char *want = task ? fg_tokenizer_serialize(fg_addition_tokenizer(task)) : NULL;
    if (!task)
        fg_meta_fail(r, "the metadata describes no valid addition task: %s", fg_last_error());
    else if (!want)
        r->fail_status(r->ctx, fg_last_status());
    else if (strcmp(want, tokstr))
        fg_meta_fail(r, "the tokenizer is not the addition task's");
    else if (id->block_size < fg_addition_block_size(task))
        fg_meta_fail(r, "block_size %d is shorter than the addition task's sequences (%d)", id->block_size,
                     fg_addition_block_size(task));
    free(want);
    fg_addition_free(task);
}
/* The same problems and split again: nothing to find on disk. */
static fg_source *add_reopen(const fg_source_identity *id, const fg_tokenizer *tok, const char *given) {
    (void)tok;
    (void)given;
    return fg_source_addition(&id->addition);
}
static int add_kept(const fg_source_identity *id, const char *flag, int64_t *v) {
    if (!strcmp(flag, "--digits")) *v = id->addition.n_digits;
    else if (!strcmp(flag, "--answer-only")) *v = id->addition.answer_only;
    else return 0;
    return 1;
}
static void add_print(const fg_source *d, char *out, size_t n) {
    const fg_addition_config *ac = fg_addition_get_config(d->add);
    snprintf(out, n, "addition task, %d-digit operands (%.0f%% of pairs held out; loss %s, optimum %.4f)",
             ac->n_digits, 100 * ac->val_fraction, ac->answer_only ? "on the answers only" : "on every token",
             fg_addition_optimal_loss(d->add));
}

static const char *const add_flags[] = {"--task", "--digits", "--eval-problems", "--answer-only", NULL};
const fg_source_ops fg_addition_source_ops = {.tokenizer = add_tokenizer,
                                              .vocab_size = add_vocab_size,
                                              .fixed_block = add_fixed_block,
                                              .batch = add_batch,
                                              .optimal_loss = add_optimal_loss,
                                              .free_data = add_free,
                                              .describe = add_describe,
                                              .kind = FG_SOURCE_ADDITION,
                                              .what = "the addition task",
                                              .data_flag = NULL,
                                              .flags = add_flags,
                                              .exact_match = 1,
                                              .read = add_read,
                                              .reopen = add_reopen,
                                              .kept = add_kept,
                                              .print = add_print};

fg_source *fg_source_addition(const fg_addition_config *c) {
    fg_source *d = calloc(1, sizeof *d);
    if (!d) {
        fg_error(FG_ERR_OOM, "data: out of memory");
        return NULL;
    }
    d->ops = &fg_addition_source_ops;
    d->kind = FG_SOURCE_ADDITION;
    d->add = fg_addition_create(c);
    if (!d->add) {
        free(d);
        return NULL;
    }
    return d;
}
