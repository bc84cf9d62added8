/* muon.c — Muon for the hidden matrices (see muon.h); the per-matrix kernel is ops/flat.h's
 * fg_flat_muon (ops/cpu/muon.c on the CPU). */
#include "train/muon.h"

#include <math.h>
#include <string.h>

#include "ops/flat.h"

static const char *const adjust_names[FG_MUON_ADJUST_COUNT] = {"original", "match_rms_adamw", "spectral_unclamped"};
static const char *const optim_names[FG_OPTIM_COUNT] = {"adamw", "muon"};

const char *fg_muon_adjust_name(fg_muon_adjust a) {
    return a >= 0 && a < FG_MUON_ADJUST_COUNT ? adjust_names[a] : "?";
}
int fg_muon_adjust_parse(const char *s) {
    for (int i = 0; i < FG_MUON_ADJUST_COUNT; i++)
        if (s && !strcmp(s, adjust_names[i])) return i;
    return -1;
}
const char *fg_optim_name(fg_optim_kind k) {
    return k >= 0 && k < FG_OPTIM_COUNT ? optim_names[k] : "?";
}
int fg_optim_parse(const char *s) {
    for (int i = 0; i < FG_OPTIM_COUNT; i++)
        if (s && !strcmp(s, optim_names[i])) return i;
    return -1;
}

fg_muon_config fg_muon_default_config(void) {
    return (fg_muon_config){.lr = 0.02, .momentum = 0.95, .nesterov = 1, .ns_steps = 5, .weight_decay = 0.0,
                            .adjust = FG_MUON_ADJUST_ORIGINAL};
}

fg_status fg_muon_config_check(const fg_muon_config *c) {
    if (!(c->lr > 0 && c->lr <= 10)) return fg_error(FG_ERR_ARG, "muon-lr %g is outside (0, 10]", c->lr);
    if (!(c->momentum >= 0 && c->momentum < 1))
        return fg_error(FG_ERR_ARG, "muon-momentum %g must be in [0, 1)", c->momentum);
    if (c->nesterov != 0 && c->nesterov != 1) return fg_error(FG_ERR_ARG, "muon nesterov %d is not 0 or 1", c->nesterov);
    if (c->ns_steps < 1 || c->ns_steps > FG_MUON_MAX_NS_STEPS)
        return fg_error(FG_ERR_ARG, "muon-ns-steps %d is outside 1..%d", c->ns_steps, FG_MUON_MAX_NS_STEPS);
    if (!(c->weight_decay >= 0 && c->weight_decay <= 1e6))
        return fg_error(FG_ERR_ARG, "muon-weight-decay %g is outside [0, 1e6]", c->weight_decay);
    if (c->adjust < 0 || c->adjust >= FG_MUON_ADJUST_COUNT)
        return fg_error(FG_ERR_ARG, "muon: unknown learning-rate adjustment %d", (int)c->adjust);
    return FG_OK;
}

int fg_muon_takes(const fg_gpt_param *p) {
    return p->ndim == 2 && p->layer >= 0;
}

double fg_muon_adjusted_lr(fg_muon_adjust a, double lr, int64_t rows, int64_t cols) {
    const double A = (double)rows, B = (double)cols;
    switch (a) {
    case FG_MUON_ADJUST_MATCH_RMS_ADAMW:
        return lr * 0.2 * sqrt(A > B ? A : B);
    case FG_MUON_ADJUST_SPECTRAL_UNCLAMPED:
        return lr * sqrt(A / B);
    default:
        return lr * sqrt(A / B > 1.0 ? A / B : 1.0);
    }
}

fg_status fg_muon_init(fg_muon *o, const fg_muon_config *c, const fg_gpt *g) {
    memset(o, 0, sizeof *o);
    FG_TRY(fg_muon_config_check(c));
    if (g->cfg.device != FG_CPU)
        return fg_error(FG_ERR_DEVICE, "--optimizer muon runs on the CPU only (the model is on %s)",
                        fg_device_name(g->cfg.device));
    int64_t n = 0, work = 0;
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *pp = &g->params[j];
        if (!fg_muon_takes(pp)) continue;
        n += pp->numel;
        const int64_t w = fg_flat_muon_work(pp->shape[0], pp->shape[1]);
        if (w > work) work = w;
    }
    if (n == 0) return fg_error(FG_ERR_ARG, "muon: the model has no 2-d matrix inside its blocks");
    o->cfg = *c;
    o->n = n;
    o->buf = fg_zeros(g->cfg.dtype, FG_CPU, 1, &n);
    o->work = o->buf ? fg_zeros(g->cfg.dtype, FG_CPU, 1, &work) : NULL;
    if (!o->work) {
        fg_muon_free(o);
        return fg_last_status();
    }
    return FG_OK;
}

void fg_muon_free(fg_muon *o) {
    fg_release(o->buf);
    fg_release(o->work);
    o->buf = o->work = NULL;
}

fg_status fg_muon_update(fg_muon *o, fg_gpt *g, double lr, double gscale) {
    if (!o->buf) return fg_error(FG_ERR_STATE, "muon: not initialized");
    const fg_muon_config *c = &o->cfg;
    fg_muon_step ms = {.momentum = c->momentum, .nesterov = c->nesterov, .ns_steps = c->ns_steps,
                       .a = FG_MUON_NS_A, .b = FG_MUON_NS_B, .c = FG_MUON_NS_C, .eps = FG_MUON_EPS,
                       .decay_factor = 1.0 - lr * c->weight_decay};
    int64_t boff = 0;
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *pp = &g->params[j];
        if (!fg_muon_takes(pp)) continue;
        ms.lr = fg_muon_adjusted_lr(c->adjust, lr, pp->shape[0], pp->shape[1]);
        FG_TRY(fg_flat_muon(g->params_flat, g->grads_flat, gscale, pp->offset, pp->shape[0], pp->shape[1], o->buf,
                            boff, &ms, o->work));
        boff += pp->numel;
    }
    o->t++;
    return FG_OK;
}
