/* meta_pkl.c — the strict reader of nanoGPT's meta.pkl (see meta_pkl.h).
 *
 * Pickle is a stack machine: each opcode pushes a value, or pops some into a container. The
 * values here are ints, strings (a pointer into the input), dicts (an index into a small pool) and
 * the MARK that SETITEMS pops back to; the memo is an array of values that BINPUT/MEMOIZE fill and
 * BINGET reads. Opcodes from pickletools (Lib/pickletools.py): the byte, then its argument.
 */
#include "datasets/meta_pkl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fileio.h"

#define MAX_ITEMS (1u << 20) /* dict entries, memo entries and stack values, each */
#define MAX_DICTS 8

typedef enum { PV_MARK, PV_INT, PV_STR, PV_DICT } pv_kind;
typedef struct {
    pv_kind kind;
    int64_t i;       /* PV_INT value, PV_DICT index */
    const char *s;   /* PV_STR bytes (UTF-8, not NUL-terminated) */
    uint32_t len;
} pv;

typedef struct {
    pv *k, *v;
    uint32_t n, cap;
} pdict;

typedef struct {
    const unsigned char *p, *end;
    const char *label;
    pv *stack;
    uint32_t sp;
    pv *memo;
    uint32_t memo_n;
    pdict dicts[MAX_DICTS];
    int n_dicts;
} pk;

static fg_tokenizer *fail(pk *k, const char *fmt, const char *a, long long b) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a, b);
    fg_error(FG_ERR_FORMAT, "%s: %s", k->label, msg);
    return NULL;
}

static int push(pk *k, pv v) {
    if (k->sp >= MAX_ITEMS) return 0;
    k->stack[k->sp++] = v;
    return 1;
}

static int dict_add(pdict *d, pv key, pv val) {
    if (d->n == d->cap) {
        if (d->cap >= MAX_ITEMS) return 0;
        uint32_t c = d->cap ? d->cap * 2 : 64;
        pv *nk = realloc(d->k, c * sizeof *nk);
        if (!nk) return 0;
        d->k = nk;
        pv *nv = realloc(d->v, c * sizeof *nv);
        if (!nv) return 0;
        d->v = nv;
        d->cap = c;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
    return 1;
}

/* Little-endian unsigned of w bytes, or -1 when fewer are left. */
static int64_t arg(pk *k, int w) {
    if (k->end - k->p < w) return -1;
    uint64_t v = 0;
    for (int i = w - 1; i >= 0; i--) v = v << 8 | k->p[i];
    k->p += w;
    return (int64_t)v;
}

static const char *opcode_name(unsigned char op) {
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case ']': return "EMPTY_LIST";
    case ')': return "EMPTY_TUPLE";
    case 't': return "TUPLE";
    case 'l': return "LIST";
    case 'a': return "APPEND";
    case 'e': return "APPENDS";
    case 'G': return "BINFLOAT";
    case 'N': return "NONE";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 'I': return "INT";
    case 'V': return "UNICODE";
    case 'S': return "STRING";
    case 'd': return "DICT";
    case '0': return "POP";
    case '2': return "DUP";
    case '1': return "POP_MARK";
    case 'F': return "FLOAT";
    case 'L': return "LONG";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL; /* not an opcode of protocols 0..5, or one named where it is read */
    }
}

/* A str value of one ASCII character, or -1. */
static int one_char(const pv *v) {
    if (v->kind != PV_STR || v->len != 1 || (unsigned char)v->s[0] >= 0x80) return -1;
    return (unsigned char)v->s[0];
}

static fg_tokenizer *interpret(pk *k) {
    int framed_proto = 0;
    for (;;) {
        if (k->p >= k->end) return fail(k, "ends before the pickle's STOP%s (truncated)", "", 0);
        const unsigned char op = *k->p++;
        int64_t a;
        pv v = {0};
        switch (op) {
        case 0x80: /* PROTO n */
            a = arg(k, 1);
            if (a < 2 || a > 5 || framed_proto) return fail(k, "pickle protocol %s%lld (expected one PROTO of 2..5)", "", a);
            framed_proto = 1;
            break;
        case 0x95: /* FRAME n: a length hint, 8 bytes */
            a = arg(k, 8);
            if (a < 0 || a > k->end - k->p) return fail(k, "a FRAME %slonger than the file (%lld bytes)", "", a);
            break;
        case '}': /* EMPTY_DICT */
            if (k->n_dicts == MAX_DICTS) return fail(k, "more than %s%lld dicts", "", MAX_DICTS);
            v.kind = PV_DICT;
            v.i = k->n_dicts++;
            if (!push(k, v)) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        case '(': /* MARK */
            v.kind = PV_MARK;
            if (!push(k, v)) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        case 'K': /* BININT1 */
        case 'M': /* BININT2 */
        case 'J': /* BININT: signed 4 bytes */
            a = arg(k, op == 'K' ? 1 : op == 'M' ? 2 : 4);
            if (a < 0) return fail(k, "truncated integer%s (%lld bytes left)", "", (long long)(k->end - k->p));
            v.kind = PV_INT;
            v.i = op == 'J' ? (int64_t)(int32_t)(uint32_t)a : a;
            if (!push(k, v)) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        case 0x8a:   /* LONG1 n1, then n bytes */
        case 0x8b: { /* LONG4 n4, then n bytes */
            /* The integer is the n bytes as little-endian two's complement (pickletools'
             * decode_long; n = 0 is 0). Python writes ints outside BININT's 32 bits this way. Kept
             * when it fits int64: the bytes past the 8th must all repeat the sign of the 8th. */
            a = arg(k, op == 0x8a ? 1 : 4);
            if (a < 0 || a > k->end - k->p) return fail(k, "a LONG%s integer runs past the end (%lld bytes)", "", a);
            const unsigned char *b = k->p;
            const int w = a < 8 ? (int)a : 8;
            uint64_t u = 0;
            for (int i = w - 1; i >= 0; i--) u = u << 8 | b[i];
            if (w > 0 && w < 8 && (b[w - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * w); /* sign-extend */
            const unsigned char ext = w == 8 && (b[7] & 0x80) ? 0xff : 0x00;
            for (int64_t i = 8; i < a; i++)
                if (b[i] != ext) return fail(k, "a LONG%s integer outside the 64-bit range (%lld bytes)", "", a);
            k->p += a;
            v.kind = PV_INT;
            v.i = (int64_t)u;
            if (!push(k, v)) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        }
        case 0x8c: /* SHORT_BINUNICODE len1 */
        case 'X':  /* BINUNICODE len4 */
            a = arg(k, op == 'X' ? 4 : 1);
            if (a < 0 || a > k->end - k->p) return fail(k, "a string runs past the end%s (%lld bytes)", "", a);
            v.kind = PV_STR;
            v.s = (const char *)k->p;
            v.len = (uint32_t)a;
            k->p += a;
            if (!push(k, v)) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        case 0x94: /* MEMOIZE: memo[len(memo)] = top */
        case 'q':  /* BINPUT i1 */
        case 'r':  /* LONG_BINPUT i4 */
            a = op == 0x94 ? (int64_t)k->memo_n : arg(k, op == 'q' ? 1 : 4);
            if (k->sp == 0 || a < 0) return fail(k, "a memo store%s with nothing to store (%lld)", "", a);
            /* Python numbers memo entries 0, 1, 2, ... in order; anything else is not its output */
            if (a != (int64_t)k->memo_n || a >= MAX_ITEMS) return fail(k, "memo index %s%lld out of order", "", a);
            k->memo[k->memo_n++] = k->stack[k->sp - 1];
            break;
        case 'h': /* BINGET i1 */
        case 'j': /* LONG_BINGET i4 */
            a = arg(k, op == 'h' ? 1 : 4);
            if (a < 0 || a >= (int64_t)k->memo_n) return fail(k, "memo index %s%lld not stored", "", a);
            if (k->memo[a].kind == PV_DICT) return fail(k, "a dict used twice%s (memo %lld)", "", a);
            if (!push(k, k->memo[a])) return fail(k, "stack too deep%s (%lld values)", "", MAX_ITEMS);
            break;
        case 's':   /* SETITEM: dict key value */
        case 'u': { /* SETITEMS: dict MARK k v k v ... */
            uint32_t lo;
            if (op == 's') {
                if (k->sp < 3) return fail(k, "SETITEM%s on a short stack (%lld)", "", k->sp);
                lo = k->sp - 2;
            } else {
                uint32_t m = k->sp;
                while (m > 0 && k->stack[m - 1].kind != PV_MARK) m--;
                if (m == 0) return fail(k, "SETITEMS without a MARK%s (%lld)", "", 0);
                lo = m; /* items are stack[lo .. sp), the mark at lo - 1 */
                if (lo < 2) return fail(k, "SETITEMS%s with no dict below its MARK (%lld)", "", 0);
            }
            const uint32_t di = op == 's' ? lo - 1 : lo - 2;
            if (k->stack[di].kind != PV_DICT || (k->sp - lo) % 2)
                return fail(k, "SET%s of an odd number of values or not into a dict (%lld)", "ITEM(S)", k->sp - lo);
            pdict *d = &k->dicts[k->stack[di].i];
            for (uint32_t i = lo; i < k->sp; i += 2) {
                if (k->stack[i].kind == PV_MARK || k->stack[i + 1].kind == PV_MARK)
                    return fail(k, "a MARK inside SET%s (%lld)", "ITEMS", 0);
                if (!dict_add(d, k->stack[i], k->stack[i + 1])) return fail(k, "a dict too large%s (%lld)", "", MAX_ITEMS);
            }
            k->sp = di + 1;
            break;
        }
        case '.': /* STOP */
            goto done;
        default: {
            const char *nm = opcode_name(op);
            if (!nm) return fail(k, "pickle byte%s (0x%02llx) is not a pickle opcode; refused", "", op);
            return fail(k, "pickle opcode %s (0x%02llx) is not one nanoGPT's meta.pkl uses; refused", nm, op);
        }
        }
    }
done:
    if (k->p != k->end) return fail(k, "bytes%s after the pickle's STOP (%lld)", "", k->end - k->p);
    if (k->sp != 1 || k->stack[0].kind != PV_DICT) return fail(k, "the pickle is not one dict%s (%lld values)", "", k->sp);
    const pdict *top = &k->dicts[k->stack[0].i];
    const pdict *itos = NULL, *stoi = NULL;
    int64_t V = -1;
    int have_v = 0;
    for (uint32_t i = 0; i < top->n; i++) {
        const pv *key = &top->k[i], *val = &top->v[i];
        char name[16] = "";
        if (key->kind == PV_STR && key->len < sizeof name) memcpy(name, key->s, key->len);
        if (!strcmp(name, "vocab_size") && val->kind == PV_INT && !have_v) {
            V = val->i;
            have_v = 1;
        } else if (!strcmp(name, "itos") && val->kind == PV_DICT && !itos)
            itos = &k->dicts[val->i];
        else if (!strcmp(name, "stoi") && val->kind == PV_DICT && !stoi)
            stoi = &k->dicts[val->i];
        else
            return fail(k, "key '%s' (item %lld) is not nanoGPT's (vocab_size int, itos dict, stoi dict, once each)",
                        name, (long long)i);
    }
    if (V < 1 || V > 128 || !itos || !stoi)
        return fail(k, "%sneeds vocab_size (1..128 characters), itos and stoi; vocab_size is %lld",
                    !itos || !stoi ? "missing itos/stoi: " : "", V);
    if (itos->n != V || stoi->n != V)
        return fail(k, "itos and stoi must have vocab_size entries%s (vocab_size %lld)", "", V);
    unsigned char vocab[128];
    for (int64_t id = 0; id < V; id++) {
        if (itos->k[id].kind != PV_INT || itos->k[id].i != id)
            return fail(k, "itos's keys are not 0, 1, ..., vocab_size-1 in order%s (entry %lld)", "", id);
        int c = one_char(&itos->v[id]);
        if (c < 0) return fail(k, "itos[%s%lld] is not one ASCII character (flashgrad's tokenizer is per byte)", "", id);
        if (id > 0 && c <= vocab[id - 1])
            return fail(k, "itos's characters are not in increasing order%s (id %lld): not prepare.py's sorted set",
                        "", id);
        vocab[id] = (unsigned char)c;
    }
    for (int64_t i = 0; i < V; i++) {
        int c = one_char(&stoi->k[i]);
        const pv *val = &stoi->v[i];
        if (c < 0 || val->kind != PV_INT || val->i < 0 || val->i >= V || vocab[val->i] != c)
            return fail(k, "stoi is not the inverse of itos%s (entry %lld)", "", i);
    }
    return fg_tokenizer_char_from_vocab(vocab, (size_t)V);
}

fg_tokenizer *fg_meta_pkl_parse(const void *buf, size_t n, const char *label) {
    pk k = {.p = buf, .end = (const unsigned char *)buf + n, .label = label ? label : "meta.pkl"};
    if (!buf && n) {
        fg_error(FG_ERR_ARG, "meta.pkl: no bytes");
        return NULL;
    }
    /* every opcode takes at least one byte: n bounds the stack and the memo */
    const size_t cap = n < MAX_ITEMS ? n + 1 : MAX_ITEMS;
    k.stack = malloc(cap * sizeof *k.stack);
    k.memo = malloc(cap * sizeof *k.memo);
    fg_tokenizer *t = NULL;
    if (!k.stack || !k.memo)
        fg_error(FG_ERR_OOM, "%s: out of memory", k.label);
    else
        t = interpret(&k);
    free(k.stack);
    free(k.memo);
    for (int i = 0; i < k.n_dicts; i++) {
        free(k.dicts[i].k);
        free(k.dicts[i].v);
    }
    return t;
}

fg_tokenizer *fg_meta_pkl_load(const char *path) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(path, 64u << 20, &buf, &n) != FG_OK) return NULL;
    fg_tokenizer *t = fg_meta_pkl_parse(buf, n, path);
    free(buf);
    return t;
}
