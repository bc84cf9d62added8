/* alloc.c — a caching allocator with per-device byte counters.
 *
 * Sizes are rounded up to a size class: multiples of 64 bytes below 4 KiB, then 8 steps per power
 * of two (at most 12.5% waste). A freed block goes onto the free list of its class and is handed
 * out again for the next request of that class; nothing goes back to the system until
 * fg_alloc_empty_cache(). The free lists live in an open-addressing hash table keyed by class size.
 *
 * A small header in front of each CPU block would misalign it; instead every live block is kept in
 * a second hash table (pointer -> class size) so fg_free knows the size. Both tables grow by
 * doubling. One mutex guards everything: allocation is per tensor, not per element, so contention
 * does not matter.
 */
#include "tensor/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const char *fg_device_name(fg_device d) {
    switch (d) {
    case FG_CPU:
        return "cpu";
    case FG_CUDA:
        return "cuda";
    default:
        return "unknown-device";
    }
}

/* ---- size classes ---- */
static size_t size_class(size_t n) {
    if (n == 0) n = 1;
    if (n <= 4096) return (n + 63) & ~(size_t)63;
    size_t p = 4096; /* the largest power of two <= n */
    while (p <= n / 2) p <<= 1;
    size_t step = p / 8;
    return (n + step - 1) / step * step;
}

/* ---- pointer -> size table (live blocks) ---- */
typedef struct {
    void *ptr;
    size_t size;
} live_entry;
/* ---- class size -> stack of free blocks ---- */
typedef struct {
    size_t size;
    void **blocks;
    size_t n, cap;
} free_list;

typedef struct {
    pthread_mutex_t mu;
    live_entry *live;
    size_t live_cap, live_n;
    free_list *lists;
    size_t lists_cap, lists_n;
    fg_alloc_stats st;
} device_pool;

static device_pool pools[FG_DEVICE_COUNT] = {
    {.mu = PTHREAD_MUTEX_INITIALIZER},
    {.mu = PTHREAD_MUTEX_INITIALIZER},
};
static const fg_device_backend *backends[FG_DEVICE_COUNT];

void fg_register_backend(fg_device d, const fg_device_backend *be) {
    if (d > FG_CPU && d < FG_DEVICE_COUNT) backends[d] = be;
}
const fg_device_backend *fg_backend(fg_device d) { return (d >= 0 && d < FG_DEVICE_COUNT) ? backends[d] : NULL; }

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}
static size_t hash_size(size_t s, size_t cap) {
    uint64_t x = s * 0x9E3779B97F4A7C15ULL;
    return (size_t)(x >> 20) & (cap - 1);
}

/* Linear probing with tombstones avoided: deletion re-inserts the rest of the cluster. */
static int live_insert(device_pool *p, void *ptr, size_t size);
static int live_grow(device_pool *p) {
    size_t ncap = p->live_cap ? p->live_cap * 2 : 1024;
    live_entry *old = p->live;
    size_t ocap = p->live_cap;
    live_entry *nt = calloc(ncap, sizeof *nt);
    if (!nt) return 0;
    p->live = nt;
    p->live_cap = ncap;
    p->live_n = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].ptr) live_insert(p, old[i].ptr, old[i].size);
    free(old);
    return 1;
}
static int live_insert(device_pool *p, void *ptr, size_t size) {
    if ((p->live_n + 1) * 2 > p->live_cap && !live_grow(p)) return 0;
    size_t i = hash_ptr(ptr, p->live_cap);
    while (p->live[i].ptr) i = (i + 1) & (p->live_cap - 1);
    p->live[i].ptr = ptr;
    p->live[i].size = size;
    p->live_n++;
    return 1;
}
static size_t live_remove(device_pool *p, void *ptr) {
    if (!p->live_cap) return 0;
    size_t i = hash_ptr(ptr, p->live_cap);
    while (p->live[i].ptr && p->live[i].ptr != ptr) i = (i + 1) & (p->live_cap - 1);
    if (!p->live[i].ptr) return 0;
    size_t size = p->live[i].size;
    p->live[i].ptr = NULL;
    p->live_n--;
    /* re-insert the rest of the cluster so probing stays correct */
    for (size_t j = (i + 1) & (p->live_cap - 1); p->live[j].ptr; j = (j + 1) & (p->live_cap - 1)) {
        live_entry e = p->live[j];
        p->live[j].ptr = NULL;
        p->live_n--;
        live_insert(p, e.ptr, e.size);
    }
    return size;
}

static free_list *list_find(device_pool *p, size_t size, int create) {
    if (p->lists_cap) {
        size_t i = hash_size(size, p->lists_cap);
        while (p->lists[i].size) {
            if (p->lists[i].size == size) return &p->lists[i];
            i = (i + 1) & (p->lists_cap - 1);
        }
    }
    if (!create) return NULL;
    if ((p->lists_n + 1) * 2 > p->lists_cap) {
        size_t ncap = p->lists_cap ? p->lists_cap * 2 : 256;
        free_list *nt = calloc(ncap, sizeof *nt);
        if (!nt) return NULL;
        for (size_t k = 0; k < p->lists_cap; k++) {
            if (!p->lists[k].size) continue;
            size_t i = hash_size(p->lists[k].size, ncap);
            while (nt[i].size) i = (i + 1) & (ncap - 1);
            nt[i] = p->lists[k];
        }
        free(p->lists);
        p->lists = nt;
        p->lists_cap = ncap;
    }
    size_t i = hash_size(size, p->lists_cap);
    while (p->lists[i].size) i = (i + 1) & (p->lists_cap - 1);
    p->lists[i].size = size;
    p->lists_n++;
    return &p->lists[i];
}

static void *system_alloc(fg_device d, size_t size) {
    if (d == FG_CPU) return aligned_alloc(64, size);
    const fg_device_backend *be = backends[d];
    return be ? be->alloc(size) : NULL;
}
static void system_free(fg_device d, void *ptr) {
    if (d == FG_CPU)
        free(ptr);
    else if (backends[d])
        backends[d]->free(ptr);
}

void *fg_alloc(fg_device d, size_t nbytes) {
    if (d < 0 || d >= FG_DEVICE_COUNT) {
        fg_error(FG_ERR_DEVICE, "alloc: unknown device %d", (int)d);
        return NULL;
    }
    if (d != FG_CPU && !backends[d]) {
        fg_error(FG_ERR_DEVICE, "alloc: device '%s' is not available in this build", fg_device_name(d));
        return NULL;
    }
    if (nbytes > ((size_t)1 << 46)) {
        fg_error(FG_ERR_OOM, "alloc: %zu bytes is more than any machine here has", nbytes);
        return NULL;
    }
    size_t size = size_class(nbytes);
    device_pool *p = &pools[d];
    pthread_mutex_lock(&p->mu);
    void *ptr = NULL;
    free_list *fl = list_find(p, size, 0);
    if (fl && fl->n) {
        ptr = fl->blocks[--fl->n];
    } else {
        ptr = system_alloc(d, size);
        if (!ptr) {
            /* give the cache back and try once more */
            pthread_mutex_unlock(&p->mu);
            fg_alloc_empty_cache(d);
            pthread_mutex_lock(&p->mu);
            ptr = system_alloc(d, size);
        }
        if (ptr) {
            p->st.system_allocs++;
            p->st.reserved += size;
        }
    }
    if (ptr && !live_insert(p, ptr, size)) {
        system_free(d, ptr); /* bookkeeping failed: hand it back */
        p->st.reserved -= size;
        ptr = NULL;
    }
    if (ptr) {
        p->st.allocs++;
        p->st.current += size;
        if (p->st.current > p->st.peak) p->st.peak = p->st.current;
    }
    pthread_mutex_unlock(&p->mu);
    if (!ptr) fg_error(FG_ERR_OOM, "alloc: out of memory for %zu bytes on %s", nbytes, fg_device_name(d));
    return ptr;
}

void fg_free(fg_device d, void *ptr) {
    if (!ptr || d < 0 || d >= FG_DEVICE_COUNT) return;
    device_pool *p = &pools[d];
    pthread_mutex_lock(&p->mu);
    size_t size = live_remove(p, ptr);
    FG_ASSERT(size != 0, "fg_free of a pointer fg_alloc did not hand out (double free?)");
    p->st.current -= size;
    free_list *fl = list_find(p, size, 1);
    if (fl && fl->n == fl->cap) {
        size_t ncap = fl->cap ? fl->cap * 2 : 8;
        void **nb = realloc(fl->blocks, ncap * sizeof *nb);
        if (nb) {
            fl->blocks = nb;
            fl->cap = ncap;
        }
    }
    if (fl && fl->n < fl->cap) {
        fl->blocks[fl->n++] = ptr;
    } else {
        system_free(d, ptr);
        p->st.reserved -= size;
    }
    pthread_mutex_unlock(&p->mu);
}

fg_alloc_stats fg_alloc_get_stats(fg_device d) {
    fg_alloc_stats s = {0};
    if (d < 0 || d >= FG_DEVICE_COUNT) return s;
    pthread_mutex_lock(&pools[d].mu);
    s = pools[d].st;
    pthread_mutex_unlock(&pools[d].mu);
    return s;
}

void fg_alloc_reset_peak(fg_device d) {
    if (d < 0 || d >= FG_DEVICE_COUNT) return;
    pthread_mutex_lock(&pools[d].mu);
    pools[d].st.peak = pools[d].st.current;
    pthread_mutex_unlock(&pools[d].mu);
}

void fg_alloc_empty_cache(fg_device d) {
    if (d < 0 || d >= FG_DEVICE_COUNT) return;
    device_pool *p = &pools[d];
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->lists_cap; i++) {
        free_list *fl = &p->lists[i];
        for (size_t k = 0; k < fl->n; k++) {
            system_free(d, fl->blocks[k]);
            p->st.reserved -= fl->size;
        }
        fl->n = 0;
    }
    pthread_mutex_unlock(&p->mu);
}

/* At exit, return cached blocks so leak checkers see only real leaks. */
__attribute__((destructor)) static void alloc_shutdown(void) {
    for (int d = 0; d < FG_DEVICE_COUNT; d++) {
        if (d != FG_CPU && !backends[d]) continue;
        fg_alloc_empty_cache((fg_device)d);
        device_pool *p = &pools[d];
        for (size_t i = 0; i < p->lists_cap; i++) free(p->lists[i].blocks);
        free(p->lists);
        p->lists = NULL;
        p->lists_cap = p->lists_n = 0;
        if (p->live_n == 0) {
            free(p->live);
            p->live = NULL;
            p->live_cap = 0;
        }
    }
}
