/* source.c — the source interface's calls (source.h); each dataset supplies its table. */
#include "datasets/source.h"

#include <math.h>
#include <stdlib.h>

void fg_source_free(fg_source *d) {
    if (!d) return;
    if (d->ops && d->ops->free_data) d->ops->free_data(d);
    free(d);
}

const fg_tokenizer *fg_source_tokenizer(const fg_source *d) { return d->ops->tokenizer(d); }
int fg_source_vocab_size(const fg_source *d) { return d->ops->vocab_size(d); }
int fg_source_fixed_block(const fg_source *d) { return d->ops->fixed_block ? d->ops->fixed_block(d) : 0; }
double fg_source_optimal_loss(const fg_source *d) { return d->ops->optimal_loss ? d->ops->optimal_loss(d) : NAN; }

fg_status fg_source_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                          int32_t *y) {
    return d->ops->batch(d, s, B, T, seed, index, x, y);
}
