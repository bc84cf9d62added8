/* iter.c — contiguous and broadcast strides, and the strided row iterator (ops/cpu/kernel.h). */
#include "ops/cpu/kernel.h"

#include <string.h>

void fg_contig_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

void fg_broadcast_strides(int t_ndim, const int64_t *t_shape, const int64_t *t_strides, int ndim, const int64_t *shape,
                          int64_t *out) {
    for (int i = 0; i < ndim; i++) {
        int it = i - (ndim - t_ndim);
        out[i] = (it >= 0 && t_shape[it] == shape[i]) ? t_strides[it] : 0;
    }
}

/* ---- the row iterator ---- */
void fg_iter_init(fg_iter *it, int ndim, const int64_t *shape, int nops, int64_t (*strides)[FG_MAX_DIMS]) {
    FG_ASSERT(nops >= 1 && nops <= FG_ITER_MAX_OPS && ndim >= 0 && ndim <= FG_MAX_DIMS, "fg_iter_init arguments");
    memset(it, 0, sizeof *it);
    it->nops = nops;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= shape[d];
    /* Drop size-1 dims (their strides never matter), then merge dim d into the dim before it when
     * every operand steps over the pair as one: stride[prev] == stride[d] * shape[d]. */
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (nd > 0) {
            int mergeable = 1;
            for (int k = 0; k < nops; k++)
                if (it->strides[k][nd - 1] != strides[k][d] * shape[d]) mergeable = 0;
            if (mergeable) {
                it->shape[nd - 1] *= shape[d];
                for (int k = 0; k < nops; k++) it->strides[k][nd - 1] = strides[k][d];
                continue;
            }
        }
        it->shape[nd] = shape[d];
        for (int k = 0; k < nops; k++) it->strides[k][nd] = strides[k][d];
        nd++;
    }
    if (nd == 0) { /* a single element */
        it->shape[0] = 1;
        for (int k = 0; k < nops; k++) it->strides[k][0] = 0;
        nd = 1;
    }
    it->ndim = nd;
    it->n = it->shape[nd - 1];
    for (int k = 0; k < nops; k++) it->inner[k] = it->strides[k][nd - 1];
    it->rows_left = total == 0 ? 0 : total / it->n;
}

int fg_iter_next(fg_iter *it) {
    if (it->rows_left <= 0) return 0;
    it->rows_left--;
    if (!it->started) {
        it->started = 1;
        return 1;
    }
    /* odometer over the outer dims 0 .. ndim-2 */
    for (int d = it->ndim - 2; d >= 0; d--) {
        it->idx[d]++;
        for (int k = 0; k < it->nops; k++) it->off[k] += it->strides[k][d];
        if (it->idx[d] < it->shape[d]) break;
        for (int k = 0; k < it->nops; k++) it->off[k] -= it->strides[k][d] * it->shape[d];
        it->idx[d] = 0;
    }
    return 1;
}
