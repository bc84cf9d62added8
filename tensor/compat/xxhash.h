/* tensor/compat/xxhash.h — a stand-in for xxHash's <xxhash.h> (XXH64 only), for machines that cannot
 * install Debian's libxxhash-dev.
 *
 * flashgrad's checksums are XXH64 from libxxhash, used header-only (tensor/fileio.c includes
 * <xxhash.h> with XXH_INLINE_ALL). Where that header is missing and nothing can be installed (the
 * GPU machines `make cuda` runs on), the build puts this folder on the include path instead
 * (FG_XXHASH=compat, which `make cuda` sets by itself there): the same five names, written from
 * the published algorithm description (github.com/Cyan4973/xxHash, doc/xxhash_spec.md). Its
 * digests equal the library's: make test compares the two over every length up to 1 KiB, split at
 * every point, and several seeds (tests/test_fileio.c), so a checkpoint written by either loads
 * in the other.
 *
 * Defining FG_XXH_COMPAT_PREFIXED_ONLY before including it leaves out the XXH names and keeps only
 * the fg_compat_xxh64_* ones, so that a test can hold both implementations in one file.
 */
#ifndef FG_COMPAT_XXHASH_H
#define FG_COMPAT_XXHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Four 64-bit lanes each absorb every 4th 8-byte word of 32-byte stripes:
 *     lane = rotl(lane + word * P2, 31) * P1
 * then the lanes are folded together, the tail (< 32 bytes) is mixed in 8, 4 and 1 byte at a time,
 * and a final avalanche (xor-shift / multiply) spreads every input bit over the result. Words are
 * read little-endian (the host is: tensor/fileio.c checks it). */

#define FG_XXH_P1 0x9E3779B185EBCA87ULL
#define FG_XXH_P2 0xC2B2AE3D27D4EB4FULL
#define FG_XXH_P3 0x165667B19E3779F9ULL
#define FG_XXH_P4 0x85EBCA77C2B2AE63ULL
#define FG_XXH_P5 0x27D4EB2F165667C5ULL

typedef struct {
    uint64_t total; /* bytes seen so far */
    uint64_t v[4];  /* the four lane accumulators */
    uint64_t seed;
    unsigned char buf[32]; /* a partial 32-byte stripe */
    unsigned buffered;     /* bytes in buf */
} fg_compat_xxh64_state;

static inline uint64_t fg_compat_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t fg_compat_rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t fg_compat_rd32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t fg_compat_xxh_round(uint64_t acc, uint64_t w) {
    acc += w * FG_XXH_P2;
    acc = fg_compat_rotl64(acc, 31);
    return acc * FG_XXH_P1;
}
static inline uint64_t fg_compat_xxh_merge(uint64_t h, uint64_t lane) {
    h ^= fg_compat_xxh_round(0, lane);
    return h * FG_XXH_P1 + FG_XXH_P4;
}
static inline void fg_compat_xxh_stripe(uint64_t v[4], const unsigned char *p) {
    v[0] = fg_compat_xxh_round(v[0], fg_compat_rd64(p));
    v[1] = fg_compat_xxh_round(v[1], fg_compat_rd64(p + 8));
    v[2] = fg_compat_xxh_round(v[2], fg_compat_rd64(p + 16));
    v[3] = fg_compat_xxh_round(v[3], fg_compat_rd64(p + 24));
}

static inline void fg_compat_xxh64_reset(fg_compat_xxh64_state *s, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + FG_XXH_P1 + FG_XXH_P2;
    s->v[1] = seed + FG_XXH_P2;
    s->v[2] = seed;
    s->v[3] = seed - FG_XXH_P1;
}

static inline void fg_compat_xxh64_update(fg_compat_xxh64_state *s, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    if (n == 0) return;
    s->total += n;
    if (s->buffered) { /* top up the partial stripe first */
        size_t take = 32 - s->buffered;
        if (take > n) take = n;
        memcpy(s->buf + s->buffered, p, take);
        s->buffered += (unsigned)take;
        p += take;
        n -= take;
        if (s->buffered < 32) return;
        fg_compat_xxh_stripe(s->v, s->buf);
        s->buffered = 0;
    }
    uint64_t v[4] = {s->v[0], s->v[1], s->v[2], s->v[3]};
    while (n >= 32) {
        fg_compat_xxh_stripe(v, p);
        p += 32;
        n -= 32;
    }
    memcpy(s->v, v, sizeof v);
    if (n) {
        memcpy(s->buf, p, n);
        s->buffered = (unsigned)n;
    }
}

static inline uint64_t fg_compat_xxh64_digest(const fg_compat_xxh64_state *s) {
    uint64_t h;
    if (s->total >= 32) {
        h = fg_compat_rotl64(s->v[0], 1) + fg_compat_rotl64(s->v[1], 7) + fg_compat_rotl64(s->v[2], 12) +
            fg_compat_rotl64(s->v[3], 18);
        for (int i = 0; i < 4; i++) h = fg_compat_xxh_merge(h, s->v[i]);
    } else {
        h = s->seed + FG_XXH_P5;
    }
    h += s->total;
    const unsigned char *p = s->buf;
    size_t n = s->buffered;
    while (n >= 8) {
        h ^= fg_compat_xxh_round(0, fg_compat_rd64(p));
        h = fg_compat_rotl64(h, 27) * FG_XXH_P1 + FG_XXH_P4;
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        h ^= (uint64_t)fg_compat_rd32(p) * FG_XXH_P1;
        h = fg_compat_rotl64(h, 23) * FG_XXH_P2 + FG_XXH_P3;
        p += 4;
        n -= 4;
    }
    while (n > 0) {
        h ^= (uint64_t)(*p) * FG_XXH_P5;
        h = fg_compat_rotl64(h, 11) * FG_XXH_P1;
        p++;
        n--;
    }
    /* avalanche */
    h ^= h >> 33;
    h *= FG_XXH_P2;
    h ^= h >> 29;
    h *= FG_XXH_P3;
    h ^= h >> 32;
    return h;
}

static inline uint64_t fg_compat_xxh64(const void *data, size_t n, uint64_t seed) {
    fg_compat_xxh64_state s;
    fg_compat_xxh64_reset(&s, seed);
    fg_compat_xxh64_update(&s, data, n);
    return fg_compat_xxh64_digest(&s);
}

#ifndef FG_XXH_COMPAT_PREFIXED_ONLY
/* xxhash.h's names for what flashgrad uses */
typedef uint64_t XXH64_hash_t;
typedef enum { XXH_OK = 0, XXH_ERROR } XXH_errorcode;
typedef fg_compat_xxh64_state XXH64_state_t;
static inline XXH_errorcode XXH64_reset(XXH64_state_t *s, XXH64_hash_t seed) {
    fg_compat_xxh64_reset(s, seed);
    return XXH_OK;
}
static inline XXH_errorcode XXH64_update(XXH64_state_t *s, const void *data, size_t n) {
    fg_compat_xxh64_update(s, data, n);
    return XXH_OK;
}
static inline XXH64_hash_t XXH64_digest(const XXH64_state_t *s) { return fg_compat_xxh64_digest(s); }
static inline XXH64_hash_t XXH64(const void *data, size_t n, XXH64_hash_t seed) {
    return fg_compat_xxh64(data, n, seed);
}
#endif

#endif /* FG_COMPAT_XXHASH_H */
