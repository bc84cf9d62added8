/* addition.h — the synthetic multi-digit addition task (`make train`'s default dataset).
 *
 * Each example is one fixed-length sequence "a+b=c\n" for n-digit operands (n = n_digits, 1..9):
 *
 *     position   0 .. n-1    n    n+1 .. 2n   2n+1   2n+2 .. 3n+2        3n+3
 *     content    a (n dig.)  '+'  b (n dig.)  '='    c REVERSED (n+1)    '\n'
 *
 * a and b are uniform in [0, 10^n), written most significant digit first and zero-padded to n
 * digits; c = a + b is zero-padded to n+1 digits and written least significant digit first. The
 * reversal makes the answer learnable left to right: digit k of c depends only on digits k of a
 * and b and the carry out of digit k-1, which the model has just written. Example, n = 3:
 * 123 + 989 = 1112 is the 13-token sequence "123+989=2111\n".
 *
 * Sequence length L = 3n+4; a batch row is x = seq[0 .. L-1), y = seq[1 .. L), so the model's
 * block size is T = 3n+3 (12 for the default n = 3).
 *
 * Vocabulary (13 tokens): the char-level tokenizer of "\n+0123456789=" (sorted bytes), i.e.
 *     '\n' = 0, '+' = 1, '0'..'9' = 2..11, '=' = 12
 * so a checkpoint stores an ordinary "char-v1:..." tokenizer and `flashgrad sample` can decode it.
 *
 * Loss optimum. With all targets counted, y[t] = seq[t+1] is:
 *     t = 0 .. n-2       digits 2..n of a   uniform over 10 digits -> ln 10 each (n-1 targets)
 *     t = n-1            '+'                determined             -> 0
 *     t = n .. 2n-1      digits of b        uniform                -> ln 10 each (n targets)
 *     t = 2n .. 3n+2     '=', c, '\n'       determined by the prompt -> 0
 * so the best mean cross-entropy is (2n-1) ln 10 / (3n+3) (n = 3: 5 ln 10 / 12 = 0.95940...).
 * In answer-only mode (answer_only = 1) every target except the n+1 answer digits and the final
 * '\n' (t = 2n+1 .. 3n+2) is -1 (ignored by fg_cross_entropy) and the optimum is 0.
 * Fine print: training pairs exclude the held-out ~10%, so a model that memorised which pairs are
 * held out could push the last operand digits slightly below ln 10; the figure above is exact for
 * any model that does not (and exactly the optimum on held-out batches).
 *
 * Held-out split: pair (a, b) is a validation problem iff
 *     fg_philox_u32(split_seed, FG_ADDITION_SPLIT_STREAM, a * 10^n + b) < val_fraction * 2^32
 * — a fixed pseudo-random ~val_fraction of all pairs, independent of the training seed. Training
 * batches only contain training pairs and validation batches only validation pairs (rejection
 * sampling: draw (a, b), redraw while it is in the wrong split).
 *
 * Determinism: row r of batch `step` of split s draws attempt k from
 *     fg_philox_block(seed, FG_ADDITION_STREAM(s), ((step * B + r) << 16) + k)
 * (words 0-1 -> a, words 2-3 -> b, each a 64-bit number reduced to [0, 10^n) by unbiased rejection);
 * after 2^16 rejected attempts (never in practice) it scans forward from the last draw. Batches are
 * pure functions of (config, split, B, seed, step). Evaluation problem i of split s is drawn the same
 * way from fg_philox_block(split_seed, FG_ADDITION_EVAL_STREAM(s), (i << 16) + k): it does not
 * depend on the training seed, so every run is scored on the same problems.
 */
#ifndef FG_ADDITION_H
#define FG_ADDITION_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"
#include "datasets/tokenizer.h"
#include "datasets/text.h" /* fg_split */

#ifdef __cplusplus
extern "C" {
#endif

/* Token ids (see the vocabulary above). */
#define FG_ADD_TOK_NL 0
#define FG_ADD_TOK_PLUS 1
#define FG_ADD_TOK_DIGIT(d) (2 + (d))
#define FG_ADD_TOK_EQ 12
#define FG_ADD_VOCAB 13
#define FG_ADD_MAX_DIGITS 9

/* Philox streams ("ADD+" in the high word). */
#define FG_ADDITION_STREAM(split) ((((uint64_t)0x4144442Bu) << 32) | (uint64_t)(split))
#define FG_ADDITION_EVAL_STREAM(split) ((((uint64_t)0x4144442Bu) << 32) | (0x100u + (uint64_t)(split)))
#define FG_ADDITION_SPLIT_STREAM ((((uint64_t)0x4144442Bu) << 32) | 0x200u)

typedef struct {
    int n_digits;        /* operand digits, 1..9; default 3 */
    int answer_only;     /* 1: targets outside the answer are -1 (loss mask); default 0 */
    double val_fraction; /* share of all (a, b) pairs held out, in (0, 0.5]; default 0.1 */
    uint64_t split_seed; /* selects the held-out set and the evaluation problems; default 0 */
} fg_addition_config;

fg_addition_config fg_addition_default_config(void);

/* Opaque. Immutable after creation (safe to share between threads). */
typedef struct fg_addition fg_addition;

/* Validates cfg (FG_ERR_ARG naming the bad field) and makes sure neither split is empty: for
 * n <= 2 it counts the held-out pairs exactly; for n >= 3 it requires val_fraction * 10^(2n) >= 1000.
 * Caller frees. */
fg_addition *fg_addition_create(const fg_addition_config *cfg);
/* NULL is a no-op. */
void fg_addition_free(fg_addition *t);

const fg_addition_config *fg_addition_get_config(const fg_addition *t);
/* The task's tokenizer (borrowed; char-level over "\n+0123456789="). */
const fg_tokenizer *fg_addition_tokenizer(const fg_addition *t);
int fg_addition_vocab_size(const fg_addition *t); /* 13 */
int fg_addition_seq_len(const fg_addition *t);    /* L = 3n+4 */
int fg_addition_block_size(const fg_addition *t); /* T = 3n+3 */
int fg_addition_prompt_len(const fg_addition *t); /* 2n+2: "a+b=" */
int fg_addition_answer_len(const fg_addition *t); /* n+2: reversed c, then '\n' */

/* 1 if (a, b) is a held-out (validation) problem, 0 if training; -1 (+ fg_error) if a or b is
 * outside [0, 10^n). */
int fg_addition_is_val(const fg_addition *t, uint64_t a, uint64_t b);

/* Writes the full L-token sequence of a + b into seq[0 .. L). a, b must be < 10^n. */
fg_status fg_addition_encode(const fg_addition *t, uint64_t a, uint64_t b, int32_t *seq);

/* Reads an L-token sequence back: checks the layout (digits, '+', '=', '\n' where they belong) and
 * returns a, b and the answer c as written (un-reversed). Does NOT check c == a + b, so it can score
 * a model's output. Malformed layout is FG_ERR_FORMAT naming the first bad position. Outputs may
 * be NULL. */
fg_status fg_addition_decode(const fg_addition *t, const int32_t *seq, uint64_t *a, uint64_t *b, uint64_t *c);

/* Fills x and y, both (B, T) int32 row-major with T = fg_addition_block_size(t) (the T argument
 * must equal it: FG_ERR_ARG otherwise), with batch `step` of split s. One problem per row;
 * y[r, t] = x[r, t+1] except the last column, which is '\n'; in answer_only mode the non-answer
 * targets are -1. */
fg_status fg_addition_batch(const fg_addition *t, fg_split s, int B, int T, uint64_t seed, uint64_t step, int32_t *x,
                            int32_t *y);

/* Evaluation problem i of split s (deterministic in (split_seed, s, i); may repeat for small n):
 * prompt[0 .. prompt_len) = "a+b=" and answer[0 .. answer_len) = reversed c then '\n', as tokens.
 * a_out/b_out may be NULL. To score a model: feed the prompt, greedily decode answer_len tokens,
 * and count an exact match when all answer_len tokens agree. */
fg_status fg_addition_problem(const fg_addition *t, fg_split s, uint64_t i, int32_t *prompt, int32_t *answer,
                              uint64_t *a_out, uint64_t *b_out);

/* The best achievable mean cross-entropy over the targets of fg_addition_batch (nats):
 * (2n-1) ln 10 / (3n+3), or 0 in answer_only mode. */
double fg_addition_optimal_loss(const fg_addition *t);

/* A model as a completion function: given prompt[0 .. prompt_len), write out[0 .. out_len)
 * (greedy decoding). Return FG_OK, or an error status that aborts the evaluation. */
typedef fg_status (*fg_addition_complete_fn)(void *ctx, const int32_t *prompt, int prompt_len, int32_t *out,
                                             int out_len);

/* Exact-match accuracy over evaluation problems 0 .. K-1 of split s: the share whose completion
 * equals the answer in all answer_len tokens. Writes it to *accuracy (in [0, 1]). K >= 1. */
fg_status fg_addition_accuracy(const fg_addition *t, fg_split s, int K, fg_addition_complete_fn fn, void *ctx,
                               double *accuracy);

#ifdef __cplusplus
}
#endif
#endif /* FG_ADDITION_H */
