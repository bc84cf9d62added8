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
#include <unistd.h>

#include "datasets/tokenizer.h"
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

/* Targets of 0 bytes (special tokens) leave both sums, and longer tokens weigh by their bytes: a
 * table of 0, 1, 2 bytes by id mod 3 against the same independent computation. */
Test(bpb, zero_byte_targets_are_left_out_and_tokens_weigh_by_their_bytes, .init = make_tmpdir,
     .fini = remove_tmpdir) {
    char path[400];
    snprintf(path, sizeof path, "%s/t.txt", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 40; i++) fprintf(f, "All:\nSpeak, speak. Resolved, resolved %d times.\n", i);
    fclose(f);
    const int T = 16, B = 3, iters = 3;
    fg_text_options to = fg_text_default_options(T);
    fg_source *s = fg_source_text(path, &to);
    cr_assert(s, "%s", fg_last_error());
    const int V = fg_source_vocab_size(s);
    fg_gpt_config gc = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, T, V, 0);
    fg_gpt *g = fg_gpt_create(&gc, 9);
    cr_assert(g, "%s", fg_last_error());
    int32_t *tb = malloc((size_t)V * sizeof *tb), *x = malloc((size_t)B * T * sizeof *x),
            *y = malloc((size_t)B * T * sizeof *y);
    for (int v = 0; v < V; v++) tb[v] = v % 3;
    double loss, loss_plain, bpb;
    cr_assert_eq(fg_eval_batches(g, s, FG_SPLIT_VAL, B, T, iters, 5, tb, x, y, &loss, &bpb), FG_OK, "%s",
                 fg_last_error());
    cr_assert_eq(fg_eval_batches(g, s, FG_SPLIT_VAL, B, T, iters, 5, NULL, x, y, &loss_plain, NULL), FG_OK);
    cr_expect(loss == loss_plain, "the loss depends on the byte table: %.17g vs %.17g", loss, loss_plain);
    double nats = 0, bytes = 0;
    int zeros = 0;
    for (int i = 0; i < iters; i++) {
        cr_assert_eq(fg_source_batch(s, FG_SPLIT_VAL, B, T, fg_trainer_eval_seed(5), (uint64_t)i, x, y), FG_OK);
        fg_tensor *lg = fg_gpt_forward(g, x, B, T, NULL);
        cr_assert(lg, "%s", fg_last_error());
        const float *z = fg_data(lg);
        for (int r = 0; r < B * T; r++) {
            if (tb[y[r]] == 0) {
                zeros++;
                continue;
            }
            double mx = -INFINITY, se = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, z[(size_t)r * V + v]);
            for (int v = 0; v < V; v++) se += exp(z[(size_t)r * V + v] - mx);
            nats += mx + log(se) - z[(size_t)r * V + y[r]];
            bytes += tb[y[r]];
        }
        fg_release(lg);
    }
    cr_assert(zeros > 0, "no target of 0 bytes in the batches: the test does not test the masking");
    const double want = nats / (log(2.0) * bytes);
    cr_expect(fabs(bpb - want) <= 1e-5 * want, "bpb %.9g, independent %.9g (%d targets of 0 bytes)", bpb, want,
              zeros);
    free(tb);
    free(x);
    free(y);
    fg_gpt_free(g);
    fg_source_free(s);
}

/* A BPE token counts its bytes; <|endoftext|> and unused ids count none. A tiktoken rank file with
 * the 256 bytes, "ab" and "abc" (GPT-2's encoding puts <|endoftext|> at 50256). */
Test(bpb, bpe_tokens_count_their_bytes_and_special_tokens_none, .init = make_tmpdir, .fini = remove_tmpdir) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char path[400];
    snprintf(path, sizeof path, "%s/gpt2.tiktoken", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int b = 0; b < 256; b++) /* one byte: 2 base64 digits and == */
        fprintf(f, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    fprintf(f, "YWI= 256\nYWJj 257\n"); /* "ab", "abc" */
    fclose(f);
    fg_tokenizer *t = fg_tokenizer_bpe_load(path, NULL);
    cr_assert(t, "%s", fg_last_error());
    cr_expect_eq(fg_tokenizer_token_bytes(t, 'a'), 1);
    cr_expect_eq(fg_tokenizer_token_bytes(t, 256), 2);
    cr_expect_eq(fg_tokenizer_token_bytes(t, 257), 3);
    cr_expect_eq(fg_tokenizer_token_bytes(t, 1000), 0, "an unused id");
    cr_expect_eq(fg_tokenizer_token_bytes(t, 50256), 0, "<|endoftext|>");
    cr_expect_eq(fg_tokenizer_token_bytes(t, 50257), 0, "outside the vocabulary");
    fg_tokenizer_free(t);
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

/* train's evaluation line, log.csv's val_bpb column and `flashgrad eval` report bits per byte; a
 * character-level model's is its val loss over ln 2. */
Test(bpb, train_log_and_eval_report_val_bpb, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char path[400], cmd[2048], out[16384];
    snprintf(path, sizeof path, "%s/t.txt", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 60; i++) fprintf(f, "First Citizen:\nBefore we proceed any further, hear me speak %d.\n", i);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' train --data t.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 "
             "--steps 4 --eval-every 2 --eval-iters 2 --samples 0 --threads 1 --out r 2>&1",
             tmpdir, fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
    const char *e = strstr(out, "step 4: train loss");
    cr_assert(e, "no evaluation line:\n%s", out);
    double tl, vl, vb;
    cr_assert_eq(sscanf(e, "step 4: train loss %lf, val loss %lf, val bpb %lf", &tl, &vl, &vb), 3, "%s", e);
    cr_expect(fabs(vb - vl / log(2.0)) < 2e-4, "val bpb %g, val loss / ln 2 = %g", vb, vl / log(2.0));
    /* log.csv: the header's last column, filled at the evaluations (steps 2 and 4) */
    snprintf(path, sizeof path, "%s/r/log.csv", tmpdir);
    f = fopen(path, "r");
    cr_assert(f);
    char line[512];
    cr_assert(fgets(line, sizeof line, f));
    cr_expect_str_eq(line, "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb\n");
    for (int step = 1; step <= 4 && fgets(line, sizeof line, f); step++) {
        const char *last = strrchr(line, ',');
        cr_assert(last, "%s", line);
        if (step % 2)
            cr_expect_str_eq(last, ",\n", "step %d has a val_bpb: %s", step, line);
        else
            cr_expect(atof(last + 1) > 0, "step %d has no val_bpb: %s", step, line);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' eval --ckpt r 2>&1", tmpdir, fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
    e = strstr(out, "step 4: train loss");
    cr_assert(e, "%s", out);
    cr_assert_eq(sscanf(e, "step 4: train loss %lf, val loss %lf, val bpb %lf", &tl, &vl, &vb), 3, "%s", e);
    cr_expect(fabs(vb - vl / log(2.0)) < 2e-4, "eval: val bpb %g, val loss / ln 2 = %g", vb, vl / log(2.0));
}
