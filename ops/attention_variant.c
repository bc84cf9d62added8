/* attention_variant.c — the user variants' objects: block masks (a mask callback summarized per
 * flash tile), tensor masks as user variants, and the registry of named user variants. The code
 * that applies the variants to a tile of scores is the CPU kernels' (ops/cpu/attention_variant_body.h),
 * their tile classification too (fg_attn_tile_kind, ops/cpu/attention.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_kernels.h"

#include "ops/attention.h"
#include "tensor/alloc.h"

/* ---- block masks ---- */
struct fg_attn_block_mask {
    int64_t B, H, Nq, Nk;
    int block_q, block_k;
    int64_t nqt, nkt;
    int refs;
    uint8_t *kind; /* (B, H, nqt, nkt) fg_tile_kind */
};

fg_attn_block_mask *fg_attn_block_mask_create(fg_attn_mask_fn mask, void *user, int64_t B, int64_t H, int64_t Nq,
                                              int64_t Nk, int block_q, int block_k) {
    if (!mask) {
        fg_error(FG_ERR_ARG, "attention block mask: the mask callback is NULL");
        return NULL;
    }
    if (B < 1 || H < 1 || Nq < 0 || Nk < 0 || B > INT32_MAX || H > INT32_MAX || Nq > INT32_MAX || Nk > INT32_MAX) {
        fg_error(FG_ERR_SHAPE,
                 "attention block mask: need 1 <= B, H and 0 <= Nq, Nk (all < 2^31), got B=%lld H=%lld "
                 "Nq=%lld Nk=%lld",
                 (long long)B, (long long)H, (long long)Nq, (long long)Nk);
        return NULL;
    }
    if (block_q < 0 || block_q > FG_ATTN_MAX_BLOCK || block_k < 0 || block_k > FG_ATTN_MAX_BLOCK) {
        fg_error(FG_ERR_ARG, "attention block mask: block sizes must be in [1, %d] (0 = default), got %d, %d",
                 FG_ATTN_MAX_BLOCK, block_q, block_k);
        return NULL;
    }
    const int bq = block_q ? block_q : FG_ATTN_DEFAULT_BLOCK_Q, bk = block_k ? block_k : FG_ATTN_DEFAULT_BLOCK_K;
    const int64_t nqt = fg_attn_ntiles(Nq, bq), nkt = fg_attn_ntiles(Nk, bk);
    const double n = (double)B * (double)H * (double)nqt * (double)nkt;
    if (n > 1e12) {
        fg_error(FG_ERR_SHAPE, "attention block mask: %g tiles is too many; use larger blocks", n);
        return NULL;
    }
    fg_attn_block_mask *bm = fg_alloc(FG_CPU, sizeof *bm);
    uint8_t *kind = bm ? fg_alloc(FG_CPU, (size_t)n > 0 ? (size_t)n : 1) : NULL;
    if (!bm || !kind) {
        if (bm) fg_free(FG_CPU, bm);
        fg_error(FG_ERR_OOM, "attention block mask: cannot allocate %g bytes", n);
        return NULL;
    }
    *bm = (fg_attn_block_mask){.B = B,
                               .H = H,
                               .Nq = Nq,
                               .Nk = Nk,
                               .block_q = bq,
                               .block_k = bk,
                               .nqt = nqt,
                               .nkt = nkt,
                               .refs = 1,
                               .kind = kind};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t qt = 0; qt < nqt; qt++)
                for (int64_t kt = 0; kt < nkt; kt++) {
                    const int64_t i0 = qt * bq, i1 = i0 + bq < Nq ? i0 + bq : Nq;
                    const int64_t j0 = kt * bk, j1 = j0 + bk < Nk ? j0 + bk : Nk;
                    int64_t seen = 0;
                    for (int64_t i = i0; i < i1; i++)
                        for (int64_t j = j0; j < j1; j++) seen += mask(b, h, i, j, user) != 0;
                    const int64_t all = (i1 - i0) * (j1 - j0);
                    kind[((b * H + h) * nqt + qt) * nkt + kt] = (uint8_t)(seen == 0     ? FG_TILE_MASKED
                                                                          : seen == all ? FG_TILE_FULL
                                                                                        : FG_TILE_PARTIAL);
                }
    return bm;
}

fg_attn_block_mask *fg_attn_block_mask_retain(const fg_attn_block_mask *bm) {
    fg_attn_block_mask *m = (fg_attn_block_mask *)bm;
    if (m) m->refs++;
    return m;
}

void fg_attn_block_mask_release(const fg_attn_block_mask *bm) {
    fg_attn_block_mask *m = (fg_attn_block_mask *)bm;
    if (!m || --m->refs > 0) return;
    fg_free(FG_CPU, m->kind);
    fg_free(FG_CPU, m);
}

fg_tile_kind fg_attn_block_mask_kind(const fg_attn_block_mask *bm, int64_t b, int64_t h, int64_t qt, int64_t kt) {
    if (!bm || qt < 0 || kt < 0 || qt >= bm->nqt || kt >= bm->nkt) return FG_TILE_MASKED;
    b %= bm->B;
    h %= bm->H;
    return (fg_tile_kind)bm->kind[((b * bm->H + h) * bm->nqt + qt) * bm->nkt + kt];
}

int64_t fg_attn_block_mask_count(const fg_attn_block_mask *bm, fg_tile_kind kind) {
    if (!bm) return 0;
    int64_t n = 0, all = bm->B * bm->H * bm->nqt * bm->nkt;
    for (int64_t t = 0; t < all; t++) n += bm->kind[t] == (uint8_t)kind;
    return n;
}

void fg_attn_block_mask_dims(const fg_attn_block_mask *bm, int64_t *B, int64_t *H, int64_t *Nq, int64_t *Nk,
                             int *block_q, int *block_k) {
    if (B) *B = bm->B;
    if (H) *H = bm->H;
    if (Nq) *Nq = bm->Nq;
    if (Nk) *Nk = bm->Nk;
    if (block_q) *block_q = bm->block_q;
    if (block_k) *block_k = bm->block_k;
}

/* ---- the registry of named user variants ---- */
#define FG_ATTN_REGISTRY_MAX 32
static struct {
    char name[48];
    char help[160];
    fg_attn_custom c;
} registry[FG_ATTN_REGISTRY_MAX];
static int registry_n, registry_ready;

/* ---- tensor masks: element (b, h, i, j) read through the strides ---- */
static int64_t tmask_at(const fg_attn_tensor_mask *m, int64_t b, int64_t h, int64_t i, int64_t j) {
    return b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j * m->stride[3];
}
static int tmask_bool(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    const fg_attn_tensor_mask *m = user;
    return ((const uint8_t *)m->data)[tmask_at(m, b, h, i, j)] != 0;
}
static double tmask_bias(const fg_attn_tensor_mask *m, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t e = tmask_at(m, b, h, i, j);
    return m->kind == FG_ATTN_TMASK_F32 ? (double)((const float *)m->data)[e] : ((const double *)m->data)[e];
}
/* a bias of −inf hides the element: as a mask, so that all-−inf tiles are skipped */
static int tmask_bias_visible(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    return tmask_bias(user, b, h, i, j) != -INFINITY;
}
static double tmask_bias_add(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    return s + tmask_bias(user, b, h, i, j);
}
static double tmask_bias_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)s, (void)b, (void)h, (void)i, (void)j, (void)user;
    return 1.0;
}

fg_attn_custom fg_attn_tensor_mask_custom(const fg_attn_tensor_mask *m) {
    if (!m || !m->data) return (fg_attn_custom){0};
    void *u = (void *)m;
    switch (m->kind) {
    case FG_ATTN_TMASK_BOOL:
        return (fg_attn_custom){.mask = tmask_bool, .user = u};
    case FG_ATTN_TMASK_F32:
    case FG_ATTN_TMASK_F64:
        return (fg_attn_custom){
            .score_mod = tmask_bias_add, .score_mod_grad = tmask_bias_grad, .mask = tmask_bias_visible, .user = u};
    default:
        return (fg_attn_custom){0};
    }
}

/* "softcap-cb": softcap 5 as a score_mod, the same math as opts.variant.softcap = 5 */
static double example_softcap_mod(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)i, (void)j, (void)user;
    return 5.0 * tanh(s / 5.0);
}
static double example_softcap_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)i, (void)j, (void)user;
    const double t = tanh(s / 5.0);
    return 1.0 - t * t;
}
/* "doc-mask": documents of 5 tokens; a query sees the keys of its own document */
static int example_doc_mask(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)user;
    return i / 5 == j / 5;
}

static void registry_init(void) {
    if (registry_ready) return;
    registry_ready = 1;
    fg_attn_register_custom(
        "softcap-cb", "softcap 5 written as a score_mod callback (equals --softcap 5)",
        &(fg_attn_custom){.score_mod = example_softcap_mod, .score_mod_grad = example_softcap_grad});
    fg_attn_register_custom("doc-mask", "mask callback: documents of 5 tokens, query i sees key j iff i/5 == j/5",
                            &(fg_attn_custom){.mask = example_doc_mask});
}

fg_status fg_attn_register_custom(const char *name, const char *help, const fg_attn_custom *c) {
    registry_init();
    if (!name || !*name || !c)
        return fg_error(FG_ERR_ARG, "attention: register a custom variant with a name and callbacks");
    if (strlen(name) >= sizeof registry[0].name)
        return fg_error(FG_ERR_ARG, "attention: custom variant name '%s' is longer than %zu characters", name,
                        sizeof registry[0].name - 1);
    int at = registry_n;
    for (int i = 0; i < registry_n; i++)
        if (!strcmp(registry[i].name, name)) at = i;
    if (at == FG_ATTN_REGISTRY_MAX)
        return fg_error(FG_ERR_OOM, "attention: the table of custom variants is full (%d)", FG_ATTN_REGISTRY_MAX);
    snprintf(registry[at].name, sizeof registry[at].name, "%s", name);
    snprintf(registry[at].help, sizeof registry[at].help, "%s", help ? help : "");
    registry[at].c = *c;
    if (at == registry_n) registry_n++;
    return FG_OK;
}

const fg_attn_custom *fg_attn_find_custom(const char *name) {
    registry_init();
    for (int i = 0; name && i < registry_n; i++)
        if (!strcmp(registry[i].name, name)) return &registry[i].c;
    return NULL;
}

const char *fg_attn_custom_name(int i, const char **help) {
    registry_init();
    if (i < 0 || i >= registry_n) return NULL;
    if (help) *help = registry[i].help;
    return registry[i].name;
}
