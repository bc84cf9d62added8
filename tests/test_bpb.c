/* test_bpb.c — bits per byte beside the validation loss (fg_trainer_eval): against an independent
 * computation from the model's logits (log-softmax in float64 over the same fixed batches), the
 * loss unchanged bit for bit, NAN where tokens do not map to bytes, and the tokenizer's byte
 * lengths. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common.h"
#include "train/trainer.h"

static char tmpdir[256];
static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fg_bpb_test_XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}
static void remove_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
}

Test(bpb, val_bpb_is_the_summed_nats_over_ln2_bytes_of_the_same_batches, .init = make_tmpdir, .fini = remove_tmpdir) {
    char path[400];
    snprintf(path, sizeof path, "%s/t.txt", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 40; i++) fprintf(f, "First Citizen:\nBefore we proceed any further, hear me speak %d.\n", i);
    fclose(f);
    const int T = 16;
    fg_text_options to = fg_text_default_options(T);
    fg_source *s = fg_source_text(path, &to);
    cr_assert(s, "%s", fg_last_error());
    fg_train_config c = fgt_tiny_train_config(s, T, 4, 4, 3, 5);
    fg_trainer *tr = fg_trainer_create(&c, s);
    cr_assert(tr, "%s", fg_last_error());
    for (int i = 0; i < 2; i++) cr_assert_eq(fg_trainer_step(tr, NULL), FG_OK, "%s", fg_last_error());
    double loss, loss_only, bpb;
    cr_assert_eq(fg_trainer_eval(tr, FG_SPLIT_VAL, &loss, &bpb), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &loss_only), FG_OK, "%s", fg_last_error());
    cr_expect(loss == loss_only, "the loss changed: %.17g with bpb, %.17g without", loss, loss_only);
    /* independently: every target's -log p from the logits in float64; a character is one byte */
    const int B = c.batch_size, V = c.model.vocab_size;
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    double nats = 0, bytes = 0;
    for (int i = 0; i < c.eval_iters; i++) {
        cr_assert_eq(fg_source_batch(s, FG_SPLIT_VAL, B, T, fg_trainer_eval_seed(c.seed), (uint64_t)i, x, y), FG_OK);
        fg_tensor *lg = fg_gpt_forward(tr->model, x, B, T, NULL);
        cr_assert(lg, "%s", fg_last_error());
        const float *z = fg_data(lg);
        for (int r = 0; r < B * T; r++) {
            double mx = -INFINITY, se = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, z[(size_t)r * V + v]);
            for (int v = 0; v < V; v++) se += exp(z[(size_t)r * V + v] - mx);
            nats += mx + log(se) - z[(size_t)r * V + y[r]];
            bytes += 1;
        }
        fg_release(lg);
    }
    const double want = nats / (log(2.0) * bytes);
    cr_expect(fabs(bpb - want) <= 1e-5 * want, "val bpb %.9g, independent %.9g", bpb, want);
    /* a char-level loss in nats per char over ln 2 */
    cr_expect(fabs(bpb - loss / log(2.0)) <= 1e-5 * bpb, "char level: bpb %.9g, loss / ln 2 = %.9g", bpb,
              loss / log(2.0));
    free(x);
    free(y);
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(bpb, tasks_without_bytes_have_no_bpb) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *s = fg_source_addition(&ac);
    fg_train_config c = fgt_tiny_train_config(s, fg_source_fixed_block(s), 4, 4, 2, 5);
    fg_trainer *tr = fg_trainer_create(&c, s);
    cr_assert(tr, "%s", fg_last_error());
    double loss, bpb = 0;
    cr_assert_eq(fg_trainer_eval(tr, FG_SPLIT_VAL, &loss, &bpb), FG_OK, "%s", fg_last_error());
    cr_expect(isnan(bpb), "the addition task got a bpb of %g", bpb);
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(bpb, token_bytes_are_one_per_char_and_byte_and_zero_outside) {
    fg_tokenizer *b = fg_tokenizer_byte();
    cr_assert(b);
    cr_expect_eq(fg_tokenizer_token_bytes(b, 0), 1);
    cr_expect_eq(fg_tokenizer_token_bytes(b, 255), 1);
    cr_expect_eq(fg_tokenizer_token_bytes(b, 256), 0);
    cr_expect_eq(fg_tokenizer_token_bytes(b, -1), 0);
    fg_tokenizer_free(b);
    fg_tokenizer *ch = fg_tokenizer_char_from_text("abc", 3);
    cr_assert(ch);
    cr_expect_eq(fg_tokenizer_token_bytes(ch, 2), 1);
    cr_expect_eq(fg_tokenizer_token_bytes(ch, 3), 0);
    fg_tokenizer_free(ch);
}
