/* bpe_train.c — byte-level BPE training (see bpe_train.h).
 *
 * Counting: every piece of the pre-tokenized text goes into a hash table of distinct pieces with
 * their counts (a corpus of gigabytes has only millions of distinct pieces). Each distinct piece
 * becomes a "word": its current tokens and its count.
 *
 * Merging keeps, for every adjacent pair of tokens, its frequency (the sum of the counts of the
 * words it occurs in, once per occurrence) and the list of words it may occur in; a max-heap orders
 * the pairs by (frequency, then smaller ids first). A merge rewrites only the words on its pair's
 * list and updates the frequencies of the pairs around each occurrence, so each merge costs in
 * proportion to the occurrences it touches. Heap entries are not updated in place: an entry whose
 * frequency is no longer the pair's is recognised when it comes to the top and pushed again with
 * the right one.
 */
#include "datasets/bpe_train.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "datasets/bpe_internal.h"
#include "tensor/fileio.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- distinct pieces and their counts ---- */
typedef struct {
    uint64_t hash;
    size_t off;
    uint32_t len;
    int64_t count;
} piece;

typedef struct {
    piece *e;          /* the table; len 0: empty slot */
    size_t cap, n;
    unsigned char *pool;
    size_t pool_n, pool_cap;
} piece_table;

static fg_status piece_grow(piece_table *pt) {
    size_t cap = pt->cap ? pt->cap * 2 : 1 << 16;
    piece *e = calloc(cap, sizeof *e);
    if (!e) return fg_error(FG_ERR_OOM, "tokenizer train: out of memory counting pieces");
    for (size_t i = 0; i < pt->cap; i++) {
        if (!pt->e[i].len) continue;
        size_t h = pt->e[i].hash & (cap - 1);
        while (e[h].len) h = (h + 1) & (cap - 1);
        e[h] = pt->e[i];
    }
    free(pt->e);
    pt->e = e;
    pt->cap = cap;
    return FG_OK;
}

static fg_status count_piece(const unsigned char *p, size_t n, void *ctx) {
    piece_table *pt = ctx;
    if (n == 0) return FG_OK;
    if (n >= UINT32_MAX) return fg_error(FG_ERR_ARG, "tokenizer train: a piece of 4 GiB or more");
    if (2 * (pt->n + 1) > pt->cap) FG_TRY(piece_grow(pt));
    uint64_t h = fg_xxh64(p, n, 0);
    size_t i = h & (pt->cap - 1);
    for (; pt->e[i].len; i = (i + 1) & (pt->cap - 1))
        if (pt->e[i].hash == h && pt->e[i].len == n && memcmp(pt->pool + pt->e[i].off, p, n) == 0) {
            pt->e[i].count++;
            return FG_OK;
        }
    if (pt->pool_n + n > pt->pool_cap) {
        size_t cap = pt->pool_cap ? pt->pool_cap : 1 << 20;
        while (cap < pt->pool_n + n) cap *= 2;
        unsigned char *q = realloc(pt->pool, cap);
        if (!q) return fg_error(FG_ERR_OOM, "tokenizer train: out of memory counting pieces");
        pt->pool = q;
        pt->pool_cap = cap;
    }
    memcpy(pt->pool + pt->pool_n, p, n);
    pt->e[i] = (piece){h, pt->pool_n, (uint32_t)n, 1};
    pt->pool_n += n;
    pt->n++;
    return FG_OK;
}

/* ---- pairs: frequency and the words they may occur in ---- */
typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0: empty */
    int64_t freq;
    uint32_t *words; /* may repeat a word, or name one the pair has left */
    uint32_t nw, cw;
} pair;

typedef struct {
    pair *e;
    size_t cap, n;
} pair_table;

static pair *pair_get(pair_table *pt, int32_t a, int32_t b, int create) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    if (create && 2 * (pt->n + 1) > pt->cap) {
        size_t cap = pt->cap ? pt->cap * 2 : 1 << 16;
        pair *e = calloc(cap, sizeof *e);
        if (!e) return NULL;
        for (size_t i = 0; i < pt->cap; i++) {
            if (!pt->e[i].key) continue;
            size_t h = fg_bpe__mix64(pt->e[i].key) & (cap - 1);
            while (e[h].key) h = (h + 1) & (cap - 1);
            e[h] = pt->e[i];
        }
        free(pt->e);
        pt->e = e;
        pt->cap = cap;
    }
    if (!pt->cap) return NULL;
    for (size_t h = fg_bpe__mix64(key) & (pt->cap - 1);; h = (h + 1) & (pt->cap - 1)) {
        if (pt->e[h].key == key) return &pt->e[h];
        if (!pt->e[h].key) {
            if (!create) return NULL;
            pt->e[h].key = key;
            pt->n++;
            return &pt->e[h];
        }
    }
}

/* Adds `delta` occurrences (weighted) of (a, b); a positive delta also notes word w. NULL result
 * means out of memory. */
static int pair_add(pair_table *pt, int32_t a, int32_t b, int64_t delta, uint32_t w) {
    pair *p = pair_get(pt, a, b, delta > 0);
    if (!p) return delta <= 0;
    p->freq += delta;
    if (delta > 0 && (p->nw == 0 || p->words[p->nw - 1] != w)) {
        if (p->nw == p->cw) {
            uint32_t cw = p->cw ? p->cw * 2 : 4;
            uint32_t *ws = realloc(p->words, cw * sizeof *ws);
            if (!ws) return 0;
            p->words = ws;
            p->cw = cw;
        }
        p->words[p->nw++] = w;
    }
    return 1;
}

/* ---- the max-heap of (frequency, pair): larger frequency first, then smaller ids ---- */
typedef struct {
    int64_t freq;
    uint64_t key;
} hent;

static int above(const hent *x, const hent *y) { return x->freq != y->freq ? x->freq > y->freq : x->key < y->key; }

typedef struct {
    hent *h;
    size_t n, cap;
} heap;

static int heap_push(heap *hp, int64_t freq, uint64_t key) {
    if (hp->n == hp->cap) {
        size_t cap = hp->cap ? hp->cap * 2 : 1 << 16;
        hent *h = realloc(hp->h, cap * sizeof *h);
        if (!h) return 0;
        hp->h = h;
        hp->cap = cap;
    }
    hent v = {freq, key};
    size_t i = hp->n++;
    while (i && above(&v, &hp->h[(i - 1) / 2])) {
        hp->h[i] = hp->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    hp->h[i] = v;
    return 1;
}

static hent heap_pop(heap *hp) {
    hent top = hp->h[0], v = hp->h[--hp->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= hp->n) break;
        if (c + 1 < hp->n && above(&hp->h[c + 1], &hp->h[c])) c++;
        if (!above(&hp->h[c], &v)) break;
        hp->h[i] = hp->h[c];
        i = c;
    }
    hp->h[i] = v;
    return top;
}

/* ---- the tokenizer.json text ---- */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->s, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->s = q;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A JSON string of the UTF-8 text s[0..n). */
static void put_json_string(sbuf *b, const char *s, size_t n) {
    puts_(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, put(b, esc, 2);
        else if (c < 0x20) put(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
        else put(b, (const char *)&c, 1);
    }
    puts_(b, "\"");
}

/* A token's bytes as GPT-2's byte characters, as a JSON string. */
static void put_token(sbuf *b, const unsigned char *t, size_t n, const uint32_t cp_of[256]) {
    char tmp[4 * 64], *w = tmp;
    puts_(b, "\"");
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cp_of[t[i]];
        if (cp == '"' || cp == '\\') *w++ = '\\', *w++ = (char)cp;
        else if (cp < 0x80) *w++ = (char)cp;
        else *w++ = (char)(0xc0 | cp >> 6), *w++ = (char)(0x80 | (cp & 0x3f));
        if (w - tmp > (long)sizeof tmp - 8) put(b, tmp, (size_t)(w - tmp)), w = tmp;
    }
    put(b, tmp, (size_t)(w - tmp));
    puts_(b, "\"");
}

/* ---- training ---- */
typedef struct {
    int32_t *tok;
    uint32_t len;
    int64_t count;
    uint32_t stamp; /* the last merge that visited it */
} word;

typedef struct {
    const char *const *specials;
    int n;
    piece_table *pt;
    const fg_bpe__regex *re;
} split_ctx;

/* Counts the pieces of text[0..n), special tokens cut out first (never counted, never merged). */
static fg_status count_text(const split_ctx *c, const unsigned char *text, size_t n) {
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        size_t hit = 0;
        for (int k = 0; k < c->n; k++) {
            size_t len = strlen(c->specials[k]);
            if (len > hit && len <= n - i && memcmp(text + i, c->specials[k], len) == 0) hit = len;
        }
        if (!hit) {
            i++;
            continue;
        }
        FG_TRY(fg_bpe__pieces(c->re, text + start, i - start, count_piece, c->pt));
        i += hit;
        start = i;
    }
    return fg_bpe__pieces(c->re, text + start, n - start, count_piece, c->pt);
}

fg_status fg_bpe_train(const char *const *files, int nfiles, const fg_bpe_train_opts *o, char **json, size_t *len) {
    if (!o || !json || !len || (nfiles > 0 && !files)) return fg_error(FG_ERR_ARG, "fg_bpe_train: NULL argument");
    *json = NULL;
    *len = 0;
    const char *pattern = o->pattern ? fg_bpe__named_pattern(o->pattern) : NULL;
    if (!pattern) return fg_error(FG_ERR_ARG, "tokenizer train: unknown pattern '%s' (gpt2, cl100k_base or o200k_base)", o->pattern ? o->pattern : "");
    if (nfiles < 1) return fg_error(FG_ERR_ARG, "tokenizer train: no text files");
    const int32_t n_merges = o->vocab_size - 256 - o->n_specials;
    if (o->vocab_size > (1 << 24) || n_merges < 0)
        return fg_error(FG_ERR_ARG, "tokenizer train: a vocabulary of %d cannot hold the 256 bytes and %d special tokens (at most %d)",
                        (int)o->vocab_size, o->n_specials, 1 << 24);
    if (o->min_frequency < 1) return fg_error(FG_ERR_ARG, "tokenizer train: min_frequency must be at least 1");
    for (int k = 0; k < o->n_specials; k++)
        if (!o->specials[k] || !*o->specials[k]) return fg_error(FG_ERR_ARG, "tokenizer train: an empty special token");
    fg_bpe__regex *re = fg_bpe__regex_compile(pattern, 0, o->pattern);
    if (!re) return fg_last_status();

    /* 1. count the distinct pieces */
    piece_table pt = {0};
    split_ctx sc = {o->specials, o->n_specials, &pt, re};
    fg_status st = FG_OK;
    double t0 = now_s();
    size_t bytes = 0;
    for (int f = 0; f < nfiles && st == FG_OK; f++) {
        void *text;
        size_t n;
        int fd;
        int64_t size;
        if ((st = fg_open_read(files[f], 0, &fd, &size)) != FG_OK) break;
        st = fg_read_fd(fd, files[f], 0, &text, &n);
        close(fd);
        if (st != FG_OK) break;
        st = count_text(&sc, text, n);
        bytes += n;
        free(text);
    }
    fg_bpe__regex_free(re);
    double t1 = now_s();
    if (st == FG_OK && o->progress)
        fprintf(o->progress, "tokenizer train: %.1f MB pre-tokenized in %.2f s (%.1f MB/s), %zu distinct pieces\n", bytes / 1e6, t1 - t0,
                bytes / 1e6 / (t1 - t0 > 0 ? t1 - t0 : 1e-9), pt.n);

    /* 2. words, and the pairs in them */
    word *w = st == FG_OK ? calloc(pt.n ? pt.n : 1, sizeof *w) : NULL;
    size_t nw = 0;
    if (st == FG_OK && !w) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
    for (size_t i = 0; i < pt.cap && st == FG_OK; i++) {
        if (!pt.e[i].len) continue;
        word *x = &w[nw++];
        x->len = pt.e[i].len;
        x->count = pt.e[i].count;
        if (!(x->tok = malloc(x->len * sizeof *x->tok))) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
        for (uint32_t k = 0; st == FG_OK && k < x->len; k++) x->tok[k] = pt.pool[pt.e[i].off + k];
    }
    free(pt.e);
    free(pt.pool);
    pair_table pairs = {0};
    heap hp = {0};
    for (size_t i = 0; i < nw && st == FG_OK; i++)
        for (uint32_t k = 0; k + 1 < w[i].len; k++)
            if (!pair_add(&pairs, w[i].tok[k], w[i].tok[k + 1], w[i].count, (uint32_t)i)) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
    for (size_t i = 0; i < pairs.cap && st == FG_OK; i++)
        if (pairs.e[i].key && !heap_push(&hp, pairs.e[i].freq, pairs.e[i].key - 1)) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");

    /* 3. merge */
    int32_t *ml = malloc(((size_t)n_merges + 1) * sizeof *ml), *mr = malloc(((size_t)n_merges + 1) * sizeof *mr);
    unsigned char **tb = calloc((size_t)256 + n_merges, sizeof *tb); /* token bytes */
    uint32_t *tl = calloc((size_t)256 + n_merges, sizeof *tl);
    uint64_t *touched = NULL;
    size_t ntouched = 0, ctouched = 0;
    if (st == FG_OK && (!ml || !mr || !tb || !tl)) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
    unsigned char byte_tok[256];
    for (int b = 0; b < 256 && st == FG_OK; b++) byte_tok[b] = (unsigned char)b, tb[b] = &byte_tok[b], tl[b] = 1;
    int32_t done = 0;
    double last = now_s();
    while (st == FG_OK && done < n_merges && hp.n) {
        hent top = heap_pop(&hp);
        int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(uint32_t)top.key;
        pair *p = pair_get(&pairs, a, b, 0);
        if (!p || p->freq != top.freq) { /* a stale entry: its pair's frequency has moved */
            if (p && p->freq > 0 && !heap_push(&hp, p->freq, top.key)) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
            continue;
        }
        if (p->freq < o->min_frequency) break;
        const int32_t x = 256 + done;
        ml[done] = a, mr[done] = b;
        if (!(tb[x] = malloc(tl[a] + tl[b]))) {
            st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
            break;
        }
        memcpy(tb[x], tb[a], tl[a]);
        memcpy(tb[x] + tl[a], tb[b], tl[b]);
        tl[x] = tl[a] + tl[b];
        done++;
        /* rewrite every word the pair may occur in; the list is taken over, since the loop adds */
        uint32_t *list = p->words, nlist = p->nw;
        p->words = NULL, p->nw = p->cw = 0;
        ntouched = 0;
        for (uint32_t li = 0; li < nlist && st == FG_OK; li++) {
            word *wd = &w[list[li]];
            if (wd->stamp == (uint32_t)x) continue;
            wd->stamp = (uint32_t)x;
            uint32_t k = 0, out = 0;
            int32_t *t = wd->tok;
            while (k < wd->len) {
                if (k + 1 < wd->len && t[k] == a && t[k + 1] == b) {
                    /* ... p a b q ... -> ... p x q ...: the pairs (p,a), (a,b), (b,q) lose one
                     * occurrence each, (p,x) and (x,q) gain one */
                    int ok = 1;
                    if (out > 0) ok &= pair_add(&pairs, t[out - 1], a, -wd->count, 0) && pair_add(&pairs, t[out - 1], x, wd->count, list[li]);
                    if (k + 2 < wd->len) ok &= pair_add(&pairs, b, t[k + 2], -wd->count, 0) && pair_add(&pairs, x, t[k + 2], wd->count, list[li]);
                    ok &= pair_add(&pairs, a, b, -wd->count, 0);
                    if (!ok) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
                    if (ntouched + 2 > ctouched) {
                        ctouched = ctouched ? 2 * ctouched : 1024;
                        uint64_t *tt = realloc(touched, ctouched * sizeof *tt);
                        if (!tt) {
                            st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
                            break;
                        }
                        touched = tt;
                    }
                    if (out > 0) touched[ntouched++] = (uint64_t)(uint32_t)t[out - 1] << 32 | (uint32_t)x;
                    if (k + 2 < wd->len) touched[ntouched++] = (uint64_t)(uint32_t)x << 32 | (uint32_t)t[k + 2];
                    t[out++] = x;
                    k += 2;
                } else {
                    t[out++] = t[k++];
                }
            }
            wd->len = out;
        }
        free(list);
        /* the pairs that gained occurrences go into the heap with their new frequency */
        for (size_t i = 0; i < ntouched && st == FG_OK; i++) {
            pair *q = pair_get(&pairs, (int32_t)(touched[i] >> 32), (int32_t)(uint32_t)touched[i], 0);
            if (q && q->freq > 0 && !heap_push(&hp, q->freq, touched[i])) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
        }
        if (o->progress && now_s() - last > 1.0) {
            last = now_s();
            fprintf(o->progress, "tokenizer train: %d / %d merges (the last seen %lld times), %.1f s\n", (int)done, (int)n_merges,
                    (long long)top.freq, last - t1);
        }
    }
    double t2 = now_s();
    if (st == FG_OK && o->progress)
        fprintf(o->progress, "tokenizer train: %d merges in %.2f s%s; vocabulary %d\n", (int)done, t2 - t1,
                done < n_merges ? " (no pair left that occurs often enough)" : "", 256 + (int)done + o->n_specials);

    /* 4. the tokenizer.json */
    sbuf js = {0};
    if (st == FG_OK) {
        uint32_t cp_of[256];
        fg_bpe__byte_chars(cp_of);
        const int gpt2 = pattern == fg_bpe__named_pattern("gpt2");
        char num[64];
        puts_(&js, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
        for (int k = 0; k < o->n_specials; k++) {
            snprintf(num, sizeof num, "%s\n    {\"id\": %d, \"content\": ", k ? "," : "", 256 + (int)done + k);
            puts_(&js, num);
            put_json_string(&js, o->specials[k], strlen(o->specials[k]));
            puts_(&js, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}");
        }
        puts_(&js, "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": ");
        if (gpt2) {
            puts_(&js, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}");
        } else {
            /* Oniguruma (Hugging Face) reads X{1,3}+ as (?:X{1,3})+, not as tiktoken's possessive
             * repeat; in these patterns the repeat ends its alternative, where nothing can make it
             * give digits back, so the plain X{1,3} means the same in both engines */
            char *hf = strdup(pattern);
            if (!hf) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory");
            for (char *q = hf; q && (q = strstr(q, "{1,3}+"));) memmove(q + 5, q + 6, strlen(q + 6) + 1);
            puts_(&js, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
            if (hf) put_json_string(&js, hf, strlen(hf));
            free(hf);
            puts_(&js, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                       "\"trim_offsets\": true, \"use_regex\": false}]}");
        }
        puts_(&js, ",\n  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                   "\"trim_offsets\": true, \"use_regex\": true},\n  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                   "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, "
                   "\"ignore_merges\": false,\n    \"vocab\": {");
        for (int32_t id = 0; id < 256 + done; id++) {
            puts_(&js, id ? ", " : "");
            put_token(&js, tb[id], tl[id], cp_of);
            snprintf(num, sizeof num, ": %d", (int)id);
            puts_(&js, num);
        }
        puts_(&js, "},\n    \"merges\": [");
        for (int32_t m = 0; m < done; m++) {
            puts_(&js, m ? ",\n      [" : "\n      [");
            put_token(&js, tb[ml[m]], tl[ml[m]], cp_of);
            puts_(&js, ", ");
            put_token(&js, tb[mr[m]], tl[mr[m]], cp_of);
            puts_(&js, "]");
        }
        puts_(&js, "\n    ]\n  }\n}\n");
        if (js.oom) st = fg_error(FG_ERR_OOM, "tokenizer train: out of memory writing tokenizer.json");
    }
    for (size_t i = 0; i < nw; i++) free(w[i].tok);
    free(w);
    for (size_t i = 0; i < pairs.cap; i++) free(pairs.e[i].words);
    free(pairs.e);
    free(hp.h);
    free(touched);
    for (int32_t i = 256; tb && i < 256 + done; i++) free(tb[i]);
    free(tb);
    free(tl);
    free(ml);
    free(mr);
    if (st != FG_OK) {
        free(js.s);
        return st;
    }
    *json = js.s;
    *len = js.n;
    return FG_OK;
}
