/* test_bf16.c — bfloat16 tensors on the GPU: conversions, the attention kernel table's bf16 entry,
 * and `flashgrad attention --dtype bfloat16 --device cuda`.
 *
 *   conversions  float32 / float64 -> bfloat16 on the device (the copy kernel) against bits worked
 *                out here by integer rounding (ties to even, NaN, overflow to inf, subnormals,
 *                float64 values a double rounding through float32 would get wrong); fill and
 *                axpy against the host's.
 *   attention    fg_attention on bf16 cuda tensors, forward and backward through autograd, against
 *                the CPU's float64 attention of the same (bf16-valued) inputs at bf16 tolerance
 *                (relative 1e-2, as fg_attn_bf16_emu's mirror-vs-float64 check): plain, causal
 *                with Nq != Nk, GQA, multi-query with dropout, sliding window. Output dtypes: o
 *                and the gradients bf16, lse float32.
 *   refusals     softcap, ALiBi, naive, callbacks, an odd head dim, a bf16 matmul: clean errors
 *                that name what is refused.
 *   command      --dtype bfloat16 on float32 files against the CPU's float64 run on the rounded
 *                inputs; bf16 .npy inputs ('<V2') give the same bytes as --dtype bfloat16.
 * Every case needs the device (it skips in --cpu-self-test); the CPU side's refusals are Criterion
 * tests (tests/test_tensor.c, tests/test_cli_io.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "cli/commands.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/ops.h"
#include "tensor/npy.h"
#include "tensor/philox.h"
#include "tests/bf16_ref.h"
#include "tests/cuda/cuda_test.h"


static fg_tensor *bits_of(const fg_tensor *t, uint16_t *out) { return fg_to_host(t, out) == FG_OK ? (fg_tensor *)t : NULL; }

static int bf16_conversions_on_the_device_match_the_host(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    enum { NS = 16, NR = 4000, N = NS + NR };
    float x[N];
    /* specials: ties both ways, the edge of overflow, inf, NaN, signed zero, subnormals */
    const uint32_t special[NS] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0xbf808000u, 0x7f7f7fffu,
                                  0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                  0x80000000u, 0x00008000u, 0x00018000u, 0x00000001u};
    for (int i = 0; i < NS; i++) x[i] = fgt_f32_bits(special[i]);
    /* random bit patterns over every exponent (NaNs included) */
    for (int i = 0; i < NR; i++) x[NS + i] = fgt_f32_bits(fg_philox_u32(77, 1, (uint64_t)i));
    const int64_t sh[1] = {N};
    fg_tensor *h = fg_from_buffer(FG_F32, FG_CPU, 1, sh, x);
    fg_tensor *d = h ? fg_to(h, FG_CUDA, FG_F32) : NULL;
    fg_tensor *db = d ? fg_to(d, FG_CUDA, FG_BF16) : NULL; /* the device's copy kernel converts */
    FGT_NOTNULL(db);
    uint16_t got[N];
    FGT_NOTNULL(bits_of(db, got));
    for (int i = 0; i < N; i++) {
        const uint16_t want = fgt_ref_bf16(x[i]);
        if (isnan(x[i]))
            FGT_CHECK(fgt_bf16_is_nan(got[i]), "element %d: NaN (0x%08x) became 0x%04x", i, (unsigned)special[i % NS],
                      got[i]);
        else
            FGT_CHECK(got[i] == want, "element %d: float32 %a gave bf16 0x%04x, expected 0x%04x", i, (double)x[i],
                      got[i], want);
    }
    /* the named ones, spelled out: 1 + 2^-8 is a tie that goes down to even 1.0, 1 + 3·2^-8 one
     * that goes up; the largest float32 and the tie above the largest bf16 overflow to inf */
    FGT_CHECK(got[0] == 0x3f80 && got[1] == 0x3f80 && got[2] == 0x3f82 && got[3] == 0x3f81,
              "1.0 family: %04x %04x %04x %04x", got[0], got[1], got[2], got[3]);
    FGT_CHECK(got[5] == 0x7f7f && got[6] == 0x7f80 && got[7] == 0x7f80, "overflow: %04x %04x %04x", got[5], got[6],
              got[7]);
    /* back to float32 on the device: exact */
    fg_tensor *back = fg_to(db, FG_CUDA, FG_F32);
    FGT_NOTNULL(back);
    float xb[N];
    FGT_OK(fg_to_host(back, xb));
    for (int i = 0; i < N; i++) {
        const float want = fgt_f32_bits((uint32_t)got[i] << 16);
        FGT_CHECK((isnan(want) && isnan(xb[i])) || !memcmp(&want, &xb[i], 4), "element %d back to float32: %a vs %a",
                  i, (double)xb[i], (double)want);
    }
    fg_release(h), fg_release(d), fg_release(db), fg_release(back);

    /* float64 -> bf16 on the device rounds once: these float64 values round to a float32 tie, on
     * the far side of which they lie, so going through float32 would round the other way */
    const double xd[4] = {1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-8 - 0x1p-40, 1 + 0x1p-7 + 0x1p-8 - 0x1p-40, -(1 + 0x1p-8 + 0x1p-40)};
    const uint16_t wd[4] = {0x3f81, 0x3f80, 0x3f81, 0xbf81};
    const int64_t s4[1] = {4};
    fg_tensor *h64 = fg_from_buffer(FG_F64, FG_CPU, 1, s4, xd);
    fg_tensor *d64 = h64 ? fg_to(h64, FG_CUDA, FG_F64) : NULL;
    fg_tensor *b64 = d64 ? fg_to(d64, FG_CUDA, FG_BF16) : NULL;
    fg_tensor *c64 = h64 ? fg_to(h64, FG_CPU, FG_BF16) : NULL;
    FGT_NOTNULL(b64);
    FGT_NOTNULL(c64);
    uint16_t g4[4], c4[4];
    FGT_NOTNULL(bits_of(b64, g4));
    FGT_NOTNULL(bits_of(c64, c4));
    for (int i = 0; i < 4; i++)
        FGT_CHECK(g4[i] == wd[i] && c4[i] == wd[i], "float64 %a: device 0x%04x, host 0x%04x, expected 0x%04x", xd[i],
                  g4[i], c4[i], wd[i]);
    fg_release(h64), fg_release(d64), fg_release(b64), fg_release(c64);

    /* a strided view converts through its strides; fill and axpy round like the host */
    const int64_t s2[2] = {37, 23};
    fg_tensor *r = fgt_rand(FG_F32, FG_CPU, 2, s2, -3, 3, 5);
    fg_tensor *rd = r ? fg_to(r, FG_CUDA, FG_F32) : NULL;
    fg_tensor *rt = rd ? fg_view_transpose(rd, 0, 1) : NULL, *ht = r ? fg_view_transpose(r, 0, 1) : NULL;
    fg_tensor *bt = rt ? fg_to(rt, FG_CUDA, FG_BF16) : NULL, *ct = ht ? fg_to(ht, FG_CPU, FG_BF16) : NULL;
    FGT_NOTNULL(bt);
    FGT_NOTNULL(ct);
    uint16_t gt[37 * 23], wt[37 * 23];
    FGT_NOTNULL(bits_of(bt, gt));
    for (int i = 0; i < 23; i++)
        for (int j = 0; j < 37; j++) wt[i * 37 + j] = fgt_ref_bf16(((const float *)fg_data(r))[j * 23 + i]);
    FGT_CHECK(!memcmp(gt, wt, sizeof gt), "transposed view converted on the device differs from the host's bits");
    fg_tensor *fd = fg_full(FG_BF16, FG_CUDA, 2, s2, 1 + 0x1p-8 + 0x1p-30);
    FGT_NOTNULL(fd);
    FGT_CHECK(fg_get(fd, 5) == 1 + 0x1p-7, "fill of 1 + 2^-8 + 2^-30 gave %a, expected 1 + 2^-7", fg_get(fd, 5));
    fg_tensor *ch = fg_to(ct, FG_CPU, FG_BF16);
    fg_tensor *cd = fg_to(ct, FG_CUDA, FG_BF16);
    FGT_NOTNULL(cd);
    FGT_OK(fg_axpy(ch, 0.3, ct));
    FGT_OK(fg_axpy(cd, 0.3, bt));
    uint16_t ga[37 * 23], wa[37 * 23];
    FGT_NOTNULL(bits_of(cd, ga));
    FGT_NOTNULL(bits_of(ch, wa));
    for (int i = 0; i < 37 * 23; i++) {
        const float y = fgt_f32_bits((uint32_t)wt[i] << 16);
        const uint16_t want = fgt_ref_bf16(y + 0.3f * y);
        FGT_CHECK(ga[i] == want && wa[i] == want, "axpy element %d: device 0x%04x, host 0x%04x, expected 0x%04x", i,
                  ga[i], wa[i], want);
    }
    fg_release(r), fg_release(rd), fg_release(rt), fg_release(ht), fg_release(bt), fg_release(ct), fg_release(fd);
    fg_release(ch), fg_release(cd);
    return FGT_PASS;
}

typedef struct {
    int64_t B, H, Hkv, Nq, Nk, d;
    int causal;
    double p;
    int win;
    int64_t wl, wr;
} bf16_case;

/* fg_attention of bf16 cuda leaves (q, k, v from Philox) with autograd, and the CPU's float64
 * attention of the same values; o, lse, dq, dk, dv compared at bf16 tolerance. */
static int bf16_case_matches_float64(const bf16_case *c) {
    const int64_t qs[4] = {c->B, c->H, c->Nq, c->d}, ks[4] = {c->B, c->Hkv, c->Nk, c->d};
    fg_attn_opts op = fg_attn_defaults();
    op.causal = c->causal, op.dropout_p = c->p, op.seed = 99;
    op.variant.window = c->win, op.variant.window_left = c->wl, op.variant.window_right = c->wr;
    fg_tensor *h32[4] = {fgt_rand(FG_F32, FG_CPU, 4, qs, -2, 2, 11), fgt_rand(FG_F32, FG_CPU, 4, ks, -2, 2, 12),
                         fgt_rand(FG_F32, FG_CPU, 4, ks, -1, 1, 13), fgt_rand(FG_F32, FG_CPU, 4, qs, -1, 1, 14)};
    fg_tensor *g[4], *r[4];
    for (int i = 0; i < 4; i++) {
        FGT_NOTNULL(h32[i]);
        g[i] = fg_to(h32[i], FG_CUDA, FG_BF16);
        FGT_NOTNULL(g[i]);
        fg_tensor *hb = fg_to(g[i], FG_CPU, FG_BF16); /* the device's rounding, back on the host */
        FGT_NOTNULL(hb);
        r[i] = fg_to(hb, FG_CPU, FG_F64);
        FGT_NOTNULL(r[i]);
        fg_release(hb);
        if (i < 3) fg_set_requires_grad(g[i], 1), fg_set_requires_grad(r[i], 1);
    }
    fg_tensor *lg = NULL, *lr = NULL;
    fg_tensor *og = fg_attention(g[0], g[1], g[2], &op, &lg);
    FGT_NOTNULL(og);
    fg_tensor *orf = fg_attention(r[0], r[1], r[2], &op, &lr);
    FGT_NOTNULL(orf);
    FGT_CHECK(og->dtype == FG_BF16 && og->device == FG_CUDA && lg->dtype == FG_F32,
              "outputs are o %s on %s, lse %s; expected bfloat16 on cuda and float32", fg_dtype_name(og->dtype),
              fg_device_name(og->device), fg_dtype_name(lg->dtype));
    FGT_OK(fg_backward(og, g[3]));
    FGT_OK(fg_backward(orf, r[3]));
    char what[128];
    const char *nm[5] = {"o", "lse", "dq", "dk", "dv"};
    const fg_tensor *got[5] = {og, lg, g[0]->grad, g[1]->grad, g[2]->grad};
    const fg_tensor *want[5] = {orf, lr, r[0]->grad, r[1]->grad, r[2]->grad};
    int rc = FGT_PASS;
    for (int i = 0; i < 5 && rc == FGT_PASS; i++) {
        snprintf(what, sizeof what, "bf16 %s (B %lld H %lld/%lld Nq %lld Nk %lld d %lld causal %d p %g window %d)",
                 nm[i], (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->Nq, (long long)c->Nk,
                 (long long)c->d, c->causal, c->p, c->win);
        if (i >= 2 && (!got[i] || got[i]->dtype != FG_BF16)) {
            printf("    %s: the gradient is %s, expected bfloat16\n", what, got[i] ? fg_dtype_name(got[i]->dtype) : "missing");
            rc = FGT_FAIL;
            break;
        }
        rc = fgt_compare_tensors(what, got[i], want[i], 1e-2);
    }
    for (int i = 0; i < 4; i++) fg_release(h32[i]), fg_release(g[i]), fg_release(r[i]);
    fg_release(og), fg_release(orf), fg_release(lg), fg_release(lr);
    return rc;
}

static int bf16_attention_matches_the_float64_reference(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    static const bf16_case cases[] = {
        {1, 2, 2, 37, 37, 64, 0, 0, 0, 0, 0},   /* plain, a partial tile */
        {1, 4, 2, 50, 70, 32, 1, 0, 0, 0, 0},   /* causal, Nq < Nk (bottom-right), GQA */
        {1, 2, 1, 65, 33, 16, 0, 0.1, 0, 0, 0}, /* multi-query, dropout, Nq > Nk */
        {2, 2, 2, 40, 40, 64, 1, 0, 1, 8, 0},   /* causal sliding window */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int rc = bf16_case_matches_float64(&cases[i]);
        if (rc != FGT_PASS) return rc;
    }
    return FGT_PASS;
}

/* One refused call: status st and a message naming `word`. */
#define REFUSED(call, st, word)                                                                                        \
    do {                                                                                                               \
        fg_clear_error();                                                                                              \
        fg_tensor *r_ = (call);                                                                                        \
        FGT_CHECK(!r_, "%s was not refused", #call);                                                                   \
        FGT_CHECK(fg_last_status() == (st) && strstr(fg_last_error(), (word)),                                         \
                  "%s: status %s, message '%s' (expected %s naming '%s')", #call, fg_status_name(fg_last_status()),     \
                  fg_last_error(), fg_status_name(st), (word));                                                        \
    } while (0)

static int mask_all(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)user, (void)b, (void)h, (void)i, (void)j;
    return 1;
}

static int bf16_refusals_name_what_is_refused(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int64_t s[4] = {1, 2, 8, 16}, s12[4] = {1, 2, 8, 12};
    fg_tensor *q = fg_zeros(FG_BF16, FG_CUDA, 4, s), *q12 = fg_zeros(FG_BF16, FG_CUDA, 4, s12);
    fg_tensor *f = fg_zeros(FG_F32, FG_CUDA, 4, s);
    FGT_NOTNULL(q);
    FGT_NOTNULL(q12);
    FGT_NOTNULL(f);
    fg_attn_opts op = fg_attn_defaults();
    op.variant.softcap = 5;
    REFUSED(fg_attention(q, q, q, &op, NULL), FG_ERR_DEVICE, "softcapping");
    op = fg_attn_defaults();
    op.variant.alibi = 1;
    REFUSED(fg_attention(q, q, q, &op, NULL), FG_ERR_DEVICE, "ALiBi");
    op = fg_attn_defaults();
    op.custom.mask = mask_all;
    REFUSED(fg_attention(q, q, q, &op, NULL), FG_ERR_DEVICE, "user callbacks");
    op = fg_attn_defaults();
    op.impl = FG_ATTN_NAIVE;
    REFUSED(fg_attention(q, q, q, &op, NULL), FG_ERR_ARG, "flash kernels only");
    REFUSED(fg_attention(q12, q12, q12, NULL, NULL), FG_ERR_ARG, "multiple of 8");
    REFUSED(fg_attention(q, f, q, NULL, NULL), FG_ERR_DTYPE, "bfloat16");
    REFUSED(fg_add(q, q), FG_ERR_DTYPE, "attention only");
    fg_release(q), fg_release(q12), fg_release(f);
    return FGT_PASS;
}

static int quiet_attention(int argc, char **argv) {
    fflush(stdout);
    fflush(stderr);
    return fg_cmd_attention(argc, argv);
}

/* --dtype bfloat16 --device cuda on float32 files, against --device cpu in float64 on the
 * bf16-rounded inputs; then bf16 .npy inputs without --dtype give the very same files */
static int bf16_attention_command_matches_the_float64_reference(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    char dir[] = "/tmp/fg_cuda_bf16.XXXXXX";
    FGT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    const int64_t qs[4] = {1, 4, 29, 32}, ks[4] = {1, 2, 41, 32};
    const int64_t *sh[4] = {qs, ks, ks, qs};
    const char *in[4] = {"q", "k", "v", "do"};
    char p32[4][512], p64[4][512], pb[4][512];
    for (int i = 0; i < 4; i++) {
        fg_tensor *t = fgt_rand(FG_F32, FG_CPU, 4, sh[i], -1.5, 1.5, 60 + (uint64_t)i);
        fg_tensor *b = t ? fg_to(t, FG_CPU, FG_BF16) : NULL, *t64 = b ? fg_to(b, FG_CPU, FG_F64) : NULL;
        FGT_NOTNULL(t64);
        snprintf(p32[i], sizeof p32[i], "%s/%s32.npy", dir, in[i]);
        snprintf(p64[i], sizeof p64[i], "%s/%s64.npy", dir, in[i]);
        snprintf(pb[i], sizeof pb[i], "%s/%sbf.npy", dir, in[i]);
        FGT_OK(fg_npy_save(p32[i], t));
        FGT_OK(fg_npy_save(p64[i], t64));
        FGT_OK(fg_npy_save(pb[i], b));
        fg_release(t), fg_release(b), fg_release(t64);
    }
    char out[3][560];
    const char *sub[3] = {"gpu", "cpu", "gpubf"};
    for (int r = 0; r < 3; r++) {
        snprintf(out[r], sizeof out[r], "%s/%s", dir, sub[r]);
        char(*p)[512] = r == 0 ? p32 : r == 1 ? p64 : pb;
        char *argv[] = {"attention", "--q",    p[0],     "--k",      p[1],  "--v",    p[2],
                        "--do",      p[3],     "--causal", "--gqa",  "2",   "--dropout", "0.1",
                        "--seed",    "3",      "--device", r == 1 ? "cpu" : "cuda",    "--out",  out[r],
                        "--dtype",   "bfloat16"};
        const int argc = (int)(sizeof argv / sizeof argv[0]) - (r == 0 ? 0 : 2); /* --dtype only for run 0 */
        const int rc = quiet_attention(argc, argv);
        FGT_CHECK(rc == 0, "flashgrad attention run %s exited %d", sub[r], rc);
    }
    /* a variant the bf16 kernels lack is refused with the kernel table's line; naive is a usage error */
    for (int r = 0; r < 2; r++) {
        char o4[600];
        snprintf(o4, sizeof o4, "%s/refused", dir);
        char *argv[] = {"attention", "--q", p32[0], "--k", p32[1], "--v", p32[2], "--device", "cuda", "--dtype",
                        "bfloat16", "--out", o4, r ? "--impl" : "--softcap", r ? "naive" : "5"};
        const int rc = quiet_attention((int)(sizeof argv / sizeof argv[0]), argv);
        FGT_CHECK(rc == (r ? 2 : 1), "--dtype bfloat16 %s exited %d, expected %d", r ? "--impl naive" : "--softcap", rc,
                  r ? 2 : 1);
        FGT_CHECK(access(o4, F_OK) != 0, "a refused run created %s", o4);
    }
    const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
    int rc = FGT_PASS;
    for (int i = 0; i < 5 && rc == FGT_PASS; i++) {
        char pg[600], pc[600], pgb[600], what[96];
        snprintf(pg, sizeof pg, "%s/%s.npy", out[0], names[i]);
        snprintf(pc, sizeof pc, "%s/%s.npy", out[1], names[i]);
        snprintf(pgb, sizeof pgb, "%s/%s.npy", out[2], names[i]);
        fg_tensor *g = fg_npy_load(pg), *c = fg_npy_load(pc), *gb = fg_npy_load(pgb);
        FGT_NOTNULL(g);
        FGT_NOTNULL(c);
        FGT_NOTNULL(gb);
        const fg_dtype want_dt = i == 1 ? FG_F32 : FG_BF16;
        FGT_CHECK(g->dtype == want_dt && gb->dtype == want_dt, "%s.npy is %s / %s, expected %s", names[i],
                  fg_dtype_name(g->dtype), fg_dtype_name(gb->dtype), fg_dtype_name(want_dt));
        snprintf(what, sizeof what, "flashgrad attention --dtype bfloat16: %s.npy", names[i]);
        rc = fgt_compare_tensors(what, g, c, 1e-2);
        if (rc == FGT_PASS && memcmp(fg_data(g), fg_data(gb), fg_nbytes(g))) {
            printf("    %s.npy from bf16 .npy inputs differs from the --dtype bfloat16 run's\n", names[i]);
            rc = FGT_FAIL;
        }
        fg_release(g), fg_release(c), fg_release(gb);
        unlink(pg), unlink(pc), unlink(pgb);
    }
    for (int i = 0; i < 4; i++) unlink(p32[i]), unlink(p64[i]), unlink(pb[i]);
    for (int r = 0; r < 3; r++) rmdir(out[r]);
    rmdir(dir);
    return rc;
}

const fgt_case fgt_bf16_cases[] = {
    {"bf16_conversions_on_the_device_match_the_host", bf16_conversions_on_the_device_match_the_host},
    {"bf16_attention_matches_the_float64_reference", bf16_attention_matches_the_float64_reference},
    {"bf16_refusals_name_what_is_refused", bf16_refusals_name_what_is_refused},
    {"bf16_attention_command_matches_the_float64_reference", bf16_attention_command_matches_the_float64_reference},
    {NULL, NULL},
};
