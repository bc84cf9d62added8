/* test_sampling.c — the sampler (train/gpt.h, fg_gpt_sample_logits and fg_gpt_generate) against the
 * distribution it should draw from, computed here from gpt.h's rules alone: softmax(logits / T),
 * top_k keeping every logit >= the k-th largest (ties kept), then the nucleus of the first ids (by
 * decreasing probability, equal ones by smaller id) whose cumulative probability reaches top_p.
 * Draws use the generator's own uniforms (fg_philox_u32 on FG_GPT_SAMPLE_STREAM), so every outcome
 * is fixed by the seeds: the chi-square bounds below pass or fail the same way on every run.
 * The boundary cases use logits whose weights are exact in floating point (ties, powers of two), so
 * "the sum equals top_p" is exact and an off-by-one at the boundary moves whole tokens in or out. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/philox.h"
#include "tests/common.h"
#include "train/gpt.h"

#define MAXV 16

/* The distribution gpt.h documents, in long double: prob[i] (0 for every dropped id). */
static void expected_dist(const double *logit, int n, double T, int top_k, double top_p, long double *prob) {
    long double mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logit[i] > mx) mx = logit[i];
    long double total = 0;
    for (int i = 0; i < n; i++) {
        /* kept by top_k when fewer than k logits are strictly larger (so ties with the k-th stay) */
        int larger = 0;
        for (int j = 0; j < n; j++) larger += logit[j] > logit[i];
        int keep = top_k <= 0 || top_k >= n || larger < top_k;
        prob[i] = keep ? expl(((long double)logit[i] - mx) / (long double)T) : 0.0L;
        total += prob[i];
    }
    for (int i = 0; i < n; i++) prob[i] /= total;
    if (top_p > 0 && top_p < 1) {
        /* walk the ids by decreasing probability (selection, equal ones by smaller id) */
        int used[MAXV] = {0};
        long double acc = 0;
        int reached = 0;
        for (int r = 0; r < n; r++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!used[i] && (best < 0 || prob[i] > prob[best])) best = i;
            used[best] = 1;
            if (reached) {
                prob[best] = 0;
                continue;
            }
            acc += prob[best];
            /* "reaches": equal counts; 1e-15 absorbs this reference's own rounding of exp */
            if (acc >= (long double)top_p - 1e-15L) reached = 1;
        }
        long double kept = 0;
        for (int i = 0; i < n; i++) kept += prob[i];
        for (int i = 0; i < n; i++) prob[i] /= kept;
    }
}

/* The uniform fg_gpt_generate uses for draw j of seed s. */
static double draw_u(uint64_t s, uint64_t j) {
    return fg_u32_to_uniform_f64(fg_philox_u32(s, FG_GPT_SAMPLE_STREAM, j));
}

static int sample_once(const double *logit, int n, double T, int k, double p, double u) {
    double x[MAXV];
    int order[MAXV];
    memcpy(x, logit, (size_t)n * sizeof *x);
    return fg_gpt_sample_logits(x, n, T, k, p, u, order);
}

typedef struct {
    const char *name;
    int n;
    double logit[MAXV];
    double T;
    int top_k;
    double top_p;
} scase;

/* Spread logits, so that T, T² and 1 give far-apart distributions. */
static const scase cases[] = {
    {"T 1", 6, {2.0, 1.0, 0.5, 0.0, -1.0, -2.5}, 1.0, 0, 0},
    {"T 0.5", 6, {2.0, 1.0, 0.5, 0.0, -1.0, -2.5}, 0.5, 0, 0},
    {"T 2", 6, {2.0, 1.0, 0.5, 0.0, -1.0, -2.5}, 2.0, 0, 0},
    {"T 3", 6, {2.0, 1.0, 0.5, 0.0, -1.0, -2.5}, 3.0, 0, 0},
    {"T 0.7, top_k 3", 7, {0.3, 1.5, -0.2, 1.1, 0.9, -3.0, 0.0}, 0.7, 3, 0},
    {"T 2, top_k 3 with a tie at the 3rd", 7, {0.3, 1.5, 0.9, 1.1, 0.9, -3.0, 0.0}, 2.0, 3, 0},
    {"T 1.5, top_p 0.6", 8, {0.0, 2.0, 1.0, -1.0, 0.5, 1.7, -0.3, 0.2}, 1.5, 0, 0.6},
    {"T 0.8, top_k 5, top_p 0.9", 8, {0.0, 2.0, 1.0, -1.0, 0.5, 1.7, -0.3, 0.2}, 0.8, 5, 0.9},
    {"T 2, top_k 2 with 3 tied, top_p 0.7", 6, {1.0, 1.0, -0.5, 1.0, 0.3, 0.7}, 2.0, 2, 0.7},
};

/* Draws with distinct seeds and counters: the observed counts against N·prob. A draw of a dropped id
 * fails at once; else Pearson's chi-square must stay below a bound far above its df (deterministic
 * here: the seeds are fixed) and far below what a wrong temperature, top_k or top_p gives. */
Test(sampling, draws_follow_the_filtered_softmax) {
    const int N = 20000;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const scase *c = &cases[ci];
        long double prob[MAXV];
        expected_dist(c->logit, c->n, c->T, c->top_k, c->top_p, prob);
        long count[MAXV] = {0};
        for (int s = 0; s < N; s++) {
            /* seed and counter both vary: draw s/4 of seed 1000 + s%4 ... */
            int id = sample_once(c->logit, c->n, c->T, c->top_k, c->top_p,
                                 draw_u(1000 + (uint64_t)(s % 4), (uint64_t)(s / 4)));
            cr_assert(id >= 0 && id < c->n, "%s: id %d out of range", c->name, id);
            cr_assert(prob[id] > 0, "%s: drew id %d, which the rules drop (draw %d)", c->name, id, s);
            count[id]++;
        }
        double chi2 = 0;
        int df = -1;
        for (int i = 0; i < c->n; i++) {
            if (prob[i] == 0) continue;
            double e = (double)(N * prob[i]);
            chi2 += (count[i] - e) * (count[i] - e) / e;
            df++;
        }
        /* df <= 7: P(chi2 > 30) < 1e-4 for a correct sampler; one doubled temperature gives hundreds */
        cr_expect(chi2 < 30,
                  "%s: chi-square %.1f (df %d) against softmax(logits/T) filtered; first counts %ld %ld %ld, "
                  "expected %.0f %.0f %.0f",
                  c->name, chi2, df, count[0], count[1], count[2], (double)(N * prob[0]), (double)(N * prob[1]),
                  (double)(N * prob[2]));
    }
}

/* u swept over a fine grid: the share of the grid each id gets is its probability within 1/G
 * (the sampler inverts the CDF), so exact probabilities are checked to 1/G without noise. */
static void grid_shares(const double *logit, int n, double T, int k, double p, double *share) {
    const int G = 1 << 12;
    for (int i = 0; i < n; i++) share[i] = 0;
    for (int g = 0; g < G; g++) share[sample_once(logit, n, T, k, p, (g + 0.5) / G)] += 1.0 / G;
}

static void expect_shares(const char *what, const double *logit, int n, double T, int k, double p, const double *want) {
    double share[MAXV];
    grid_shares(logit, n, T, k, p, share);
    for (int i = 0; i < n; i++)
        cr_expect(fabs(share[i] - want[i]) <= 1.0 / 4096 + 1e-12, "%s: id %d drawn for %.5f of u, want %.5f", what, i,
                  share[i], want[i]);
}

Test(sampling, top_p_stops_where_the_cumulative_probability_equals_it_exactly) {
    /* four equal logits: 0.25 each; the sum after two ids is exactly 0.5 */
    const double flat[4] = {0, 0, 0, 0};
    expect_shares("4 ties, top_p 0.5", flat, 4, 1.0, 0, 0.5, (double[]){0.5, 0.5, 0, 0});
    expect_shares("4 ties, top_p 0.75", flat, 4, 1.0, 0, 0.75, (double[]){1 / 3.0, 1 / 3.0, 1 / 3.0, 0});
    expect_shares("4 ties, top_p 0.25", flat, 4, 1.0, 0, 0.25, (double[]){1, 0, 0, 0});
    /* probabilities 1/2, 1/8, 1/4, 1/8 (weights 1, 1/4, 1/2, 1/4: exp(-ln 2) and exp(-2 ln 2) are
     * exact), id order not the probability order */
    const double ln2 = log(2.0);
    const double dy[4] = {0, -2 * ln2, -ln2, -2 * ln2};
    cr_assert_eq(exp(-ln2), 0.5);
    cr_assert_eq(exp(-2 * ln2), 0.25);
    expect_shares("dyadic, top_p 0.5", dy, 4, 1.0, 0, 0.5, (double[]){1, 0, 0, 0});
    expect_shares("dyadic, top_p 0.75", dy, 4, 1.0, 0, 0.75, (double[]){2 / 3.0, 0, 1 / 3.0, 0});
    expect_shares("dyadic, top_p 0.875", dy, 4, 1.0, 0, 0.875, (double[]){4 / 7.0, 1 / 7.0, 2 / 7.0, 0});
    /* just above a boundary takes the next id */
    expect_shares("dyadic, top_p 0.7500001", dy, 4, 1.0, 0, 0.7500001, (double[]){4 / 7.0, 1 / 7.0, 2 / 7.0, 0});
    /* temperature 0.5 squares the weights: 1, 1/16, 1/4, 1/16 (probabilities 8/11, 1/22, 2/11,
     * 1/22); 0.8 is reached by the second; a temperature applied twice (weights 1, 1/256, 1/16,
     * 1/256) would stop at the first */
    expect_shares("dyadic, T 0.5, top_p 0.8", dy, 4, 0.5, 0, 0.8, (double[]){0.8, 0, 0.2, 0});
}

Test(sampling, top_k_keeps_every_logit_tied_with_the_kth) {
    /* the 2nd largest logit is 3, held by ids 1, 2, 3 and 5: all four stay, at 1/4 each */
    const double l[6] = {1, 3, 3, 3, 0, 3};
    expect_shares("top_k 2, four tied", l, 6, 1.0, 2, 0, (double[]){0, 0.25, 0.25, 0.25, 0, 0.25});
    expect_shares("top_k 1, four tied", l, 6, 1.0, 1, 0, (double[]){0, 0.25, 0.25, 0.25, 0, 0.25});
    /* the 5th largest is 1 (id 0): everything but id 4 */
    const double w = 1 / (4.0 + exp(-2.0));
    expect_shares("top_k 5", l, 6, 1.0, 5, 0, (double[]){exp(-2.0) * w, w, w, w, 0, w});
    /* top_p over the kept ties: the sum reaches 0.5 exactly after two of them, smaller ids first */
    expect_shares("top_k 2, top_p 0.5", l, 6, 1.0, 2, 0.5, (double[]){0, 0.5, 0.5, 0, 0, 0});
    /* a tie below the k-th does not matter: ids 1 and 3 are the top 2, 0 and 2 tie for 3rd */
    const double m[4] = {1, 5, 1, 4};
    expect_shares("top_k 2 above a tie", m, 4, 1.0, 2, 0,
                  (double[]){0, 1 / (1 + exp(-1.0)), 0, exp(-1.0) / (1 + exp(-1.0))});
    /* temperature 0: the first of the tied largest */
    cr_expect_eq(sample_once(l, 6, 0.0, 0, 0, 0.99), 1);
}

/* fg_gpt_generate draws from the same distribution: one new token per seed from a tiny model whose
 * embedding is scaled so its logits spread over several units (near-equal logits would hide a
 * temperature applied twice), checked against the rule on the model's own logits. */
Test(sampling, generate_draws_from_the_filtered_softmax_of_the_models_logits) {
    fg_gpt_config cfg = fgt_tiny_gpt_config(FG_F64, FG_ATTN_FLASH, 16, 8, 7, 0);
    fg_gpt *g = fg_gpt_create(&cfg, 17);
    cr_assert(g, "%s", fg_last_error());
    const fg_gpt_param *wte = fg_gpt_find(g, "transformer.wte.weight");
    cr_assert(wte);
    double *w = fg_data(wte->w);
    for (int64_t i = 0; i < wte->numel; i++) w[i] *= 40;
    const int32_t prompt[3] = {2, 5, 1};
    fg_tensor *lg = fg_gpt_forward(g, prompt, 1, 3, NULL);
    cr_assert(lg, "%s", fg_last_error());
    double logit[7];
    for (int v = 0; v < 7; v++) logit[v] = fg_get(lg, 2 * 7 + v);
    fg_release(lg);
    double lo = logit[0], hi = logit[0];
    for (int v = 1; v < 7; v++) lo = fmin(lo, logit[v]), hi = fmax(hi, logit[v]);
    cr_assert(hi - lo > 2, "the scaled model's logits span only %g", hi - lo);
    static const struct {
        double T;
        int k;
        double p;
    } opts[] = {{2.0, 0, 0}, {0.6, 0, 0}, {1.7, 4, 0.8}};
    const int N = 3000;
    for (size_t oi = 0; oi < sizeof opts / sizeof *opts; oi++) {
        long double prob[MAXV];
        expected_dist(logit, 7, opts[oi].T, opts[oi].k, opts[oi].p, prob);
        long count[7] = {0};
        for (int s = 0; s < N; s++) {
            int32_t tok[4] = {prompt[0], prompt[1], prompt[2], -1};
            fg_sample_opts o = {
                .temperature = opts[oi].T, .top_k = opts[oi].k, .top_p = opts[oi].p, .seed = 5000 + (uint64_t)s};
            cr_assert_eq(fg_gpt_generate(g, tok, 3, 1, &o), FG_OK, "%s", fg_last_error());
            cr_assert(tok[3] >= 0 && tok[3] < 7 && prob[tok[3]] > 0, "T %g: drew id %d, which the rules drop",
                      opts[oi].T, tok[3]);
            count[tok[3]]++;
        }
        double chi2 = 0;
        for (int i = 0; i < 7; i++) {
            if (prob[i] == 0) continue;
            double e = (double)(N * prob[i]);
            chi2 += (count[i] - e) * (count[i] - e) / e;
        }
        cr_expect(chi2 < 30, "T %g top_k %d top_p %g: chi-square %.1f of generate's draws", opts[oi].T, opts[oi].k,
                  opts[oi].p, chi2);
    }
    fg_gpt_free(g);
}
