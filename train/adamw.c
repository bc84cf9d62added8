/* adamw.c — AdamW, the learning-rate schedule and gradient clipping (see adamw.h).
 *
 * The loops over the flat (P) arrays are the public ops of ops/flat.h, which run the `optimizer`
 * kernels of the arrays' device: ops/cpu/adamw.c on the CPU, cuda/adamw.cu on the GPU. */
#include "train/adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/flat.h"
#include "train/muon.h"

double fg_lr_at(const fg_adamw_config *c, int64_t s) {
    if (s < c->warmup) return c->lr * (double)(s + 1) / (double)(c->warmup + 1);
    if (s >= c->decay_steps) return c->min_lr;
    double ratio = (double)(s - c->warmup) / (double)(c->decay_steps - c->warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio)); /* 1 -> 0 */
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

fg_status fg_adamw_init(fg_adamw *o, const fg_adamw_config *c, fg_dtype dt, fg_device dev, int64_t P) {
    memset(o, 0, sizeof *o);
    if (P < 0) return fg_error(FG_ERR_ARG, "adamw: %lld parameters", (long long)P);
    FG_TRY(fg_flat_optimizer_on(dev, "adamw"));
    o->cfg = *c;
    o->n = P;
    o->m = fg_zeros(dt, dev, 1, &P);
    o->v = o->m ? fg_zeros(dt, dev, 1, &P) : NULL;
    if (!o->v) {
        fg_adamw_free(o);
        return fg_last_status();
    }
    return FG_OK;
}

void fg_adamw_free(fg_adamw *o) {
    fg_release(o->m);
    fg_release(o->v);
    o->m = o->v = NULL;
}

double fg_grad_norm(const fg_tensor *grads) {
    double s = 0;
    /* float64 sums in a fixed order on every device; an error reads as a NaN norm */
    if (fg_flat_sum_squares(grads, &s) != FG_OK) return NAN;
    return sqrt(s);
}

void fg_grad_scale(fg_tensor *grads, double s) {
    /* a failure surfaces at the next checked call */
    (void)fg_flat_scale_range(grads, 0, fg_numel(grads), s);
}

double fg_clip_grad_norm(fg_tensor *grads, double clip) {
    double norm = fg_grad_norm(grads);
    if (clip > 0 && isfinite(norm)) {
        double coef = clip / (norm + 1e-6);
        if (coef < 1.0) fg_grad_scale(grads, coef);
    }
    return norm;
}

fg_status fg_adamw_update(fg_adamw *o, fg_gpt *g, double lr) {
    return fg_adamw_update_range(o, g, lr, 1.0, 0, g->num_elements);
}

fg_status fg_adamw_update_range(fg_adamw *o, fg_gpt *g, double lr, double gscale, int64_t lo, int64_t hi) {
    if (lo < 0 || hi > g->num_elements || hi - lo != o->n)
        return fg_error(FG_ERR_SHAPE, "adamw: %lld moments for the parameters [%lld, %lld) of %lld", (long long)o->n,
                        (long long)lo, (long long)hi, (long long)g->num_elements);
    FG_TRY(fg_flat_optimizer_on(g->params_flat->device, "adamw"));
    /* one span per parameter range: weight decay only where the table says so */
    fg_adamw_span *spans = malloc((size_t)(g->n_params > 0 ? g->n_params : 1) * sizeof *spans);
    if (!spans) return fg_error(FG_ERR_OOM, "adamw: out of memory for %d parameter ranges", g->n_params);
    o->t++;
    const fg_adamw_config *c = &o->cfg;
    const double bc1 = 1.0 - pow(c->beta1, (double)o->t), bc2 = 1.0 - pow(c->beta2, (double)o->t);
    const double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
    int ns = 0;
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *pp = &g->params[j];
        if (o->muon && fg_muon_takes(pp)) continue;
        /* the range's part inside [lo, hi), relative to lo */
        int64_t a = pp->offset > lo ? pp->offset : lo, b = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
        if (b <= a) continue;
        spans[ns++] = (fg_adamw_span){a - lo, b - a, pp->decay ? 1.0 - lr * c->weight_decay : 1.0};
    }
    fg_status st = fg_flat_adamw(g->params_flat, g->grads_flat, gscale, o->m, o->v, lo, ns, spans, c->beta1, c->beta2,
                                 step_size, bc2_sqrt, c->eps);
    free(spans);
    return st;
}
