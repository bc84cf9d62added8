/* adamw.c — AdamW, the learning-rate schedule and gradient clipping (see adamw.h). */
#include "train/adamw.h"

#include <math.h>
#include <string.h>

#ifdef FG_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

double fg_lr_at(const fg_adamw_config *c, int64_t s) {
    if (s < c->warmup) return c->lr * (double)(s + 1) / (double)(c->warmup + 1);
    if (s >= c->decay_steps) return c->min_lr;
    double ratio = (double)(s - c->warmup) / (double)(c->decay_steps - c->warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio)); /* 1 -> 0 */
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

fg_status fg_adamw_init(fg_adamw *o, const fg_adamw_config *c, fg_dtype dt, fg_device dev, int64_t P) {
    memset(o, 0, sizeof *o);
    if (P < 1) return fg_error(FG_ERR_ARG, "adamw: %lld parameters", (long long)P);
#ifdef FG_WITH_CUDA
    if (dev != FG_CPU && dev != FG_CUDA) return fg_error(FG_ERR_DEVICE, "adamw: unsupported device %d", (int)dev);
#else
    if (dev != FG_CPU) return fg_error(FG_ERR_DEVICE, "adamw: only the CPU is supported in this build");
#endif
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
    int64_t n = fg_numel(grads);
    double s = 0;
#ifdef FG_WITH_CUDA
    /* the device sums in float64 too, in a fixed (tree) order; an error reads as a NaN norm */
    if (grads->device == FG_CUDA)
        return fg_cuda_sum_squares(grads->dtype, fg_data(grads), n, &s) == FG_OK ? sqrt(s) : NAN;
#endif
    if (grads->dtype == FG_F32) {
        const float *g = fg_data(grads);
        for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    } else {
        const double *g = fg_data(grads);
        for (int64_t i = 0; i < n; i++) s += g[i] * g[i];
    }
    return sqrt(s);
}

void fg_grad_scale(fg_tensor *grads, double s) {
    int64_t n = fg_numel(grads);
#ifdef FG_WITH_CUDA
    if (grads->device == FG_CUDA) {
        (void)fg_cuda_scale(grads->dtype, fg_data(grads), n, s); /* a failure surfaces at the next checked call */
        return;
    }
#endif
    if (grads->dtype == FG_F32) {
        float *g = fg_data(grads), sf = (float)s;
        for (int64_t i = 0; i < n; i++) g[i] *= sf;
    } else {
        double *g = fg_data(grads);
        for (int64_t i = 0; i < n; i++) g[i] *= s;
    }
}

double fg_clip_grad_norm(fg_tensor *grads, double clip) {
    double norm = fg_grad_norm(grads);
    if (clip > 0 && isfinite(norm)) {
        double coef = clip / (norm + 1e-6);
        if (coef < 1.0) fg_grad_scale(grads, coef);
    }
    return norm;
}

/* The update of one range [0, n) of the arrays; T is float or double. */
#define ADAMW_RANGE(T, p, g, m, v, n, decay_factor, b1, b2, step_size, bc2_sqrt, eps)      \
    for (int64_t i = 0; i < (n); i++) {                                                    \
        T gi = (g)[i];                                                                     \
        T mi = (m)[i] = (T)(b1) * (m)[i] + (T)(1.0 - (b1)) * gi;                           \
        T vi = (v)[i] = (T)(b2) * (v)[i] + (T)(1.0 - (b2)) * gi * gi;                      \
        T denom = (T)sqrt((double)vi) / (T)(bc2_sqrt) + (T)(eps);                          \
        (p)[i] = (p)[i] * (T)(decay_factor) - (T)(step_size) * mi / denom;                 \
    }

fg_status fg_adamw_update(fg_adamw *o, fg_gpt *g, double lr) {
    if (g->num_elements != o->n) return fg_error(FG_ERR_SHAPE, "adamw: %lld moments for %lld parameters",
                                                 (long long)o->n, (long long)g->num_elements);
    o->t++;
    const fg_adamw_config *c = &o->cfg;
    const double bc1 = 1.0 - pow(c->beta1, (double)o->t), bc2 = 1.0 - pow(c->beta2, (double)o->t);
    const double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *pp = &g->params[j];
        const double df = pp->decay ? 1.0 - lr * c->weight_decay : 1.0;
        const int64_t off = pp->offset, n = pp->numel;
#ifdef FG_WITH_CUDA
        if (g->params_flat->device == FG_CUDA) {
            /* the same range update on device pointers (cuda/adamw.cu mirrors ADAMW_RANGE) */
            const size_t es = fg_dtype_size(g->cfg.dtype), b = (size_t)off * es;
            fg_status st = fg_cuda_adamw_range(g->cfg.dtype, (char *)fg_data(g->params_flat) + b,
                                               (const char *)fg_data(g->grads_flat) + b, (char *)fg_data(o->m) + b,
                                               (char *)fg_data(o->v) + b, n, df, c->beta1, c->beta2, step_size,
                                               bc2_sqrt, c->eps);
            if (st != FG_OK) return st;
            continue;
        }
#endif
        if (g->cfg.dtype == FG_F32) {
            float *p = (float *)fg_data(g->params_flat) + off, *gr = (float *)fg_data(g->grads_flat) + off;
            float *m = (float *)fg_data(o->m) + off, *v = (float *)fg_data(o->v) + off;
            ADAMW_RANGE(float, p, gr, m, v, n, df, c->beta1, c->beta2, step_size, bc2_sqrt, c->eps)
        } else {
            double *p = (double *)fg_data(g->params_flat) + off, *gr = (double *)fg_data(g->grads_flat) + off;
            double *m = (double *)fg_data(o->m) + off, *v = (double *)fg_data(o->v) + off;
            ADAMW_RANGE(double, p, gr, m, v, n, df, c->beta1, c->beta2, step_size, bc2_sqrt, c->eps)
        }
    }
    return FG_OK;
}
