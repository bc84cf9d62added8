/* llmc_files.c — llm.c model files in and out (see model_files.h).
 *
 * Shapes: L blocks, H heads, C = n_embd, V vocabulary, Vp llm.c's padded vocabulary, T positions.
 * llm.c keeps the matmul weights as flashgrad does, (out, in), in its own order of tensors.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/bf16.h"
#include "tensor/fileio.h"
#include "train/model_files.h"
#include "train/model_files_internal.h"

#define LLMC_HEADER_INTS 256
#define LLMC_PAD 128

/* ---- llm.c ---- */

fg_model_file *fg__llmc_load(const char *path) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(path, 0, &buf, &n) != FG_OK) return NULL;
    fg_model_file *m = NULL;
    fg_gpt *g = NULL;
    int32_t hd[LLMC_HEADER_INTS];
    if (n < sizeof hd) {
        fg_error(FG_ERR_FORMAT, "%s: %zu bytes, shorter than llm.c's 1024-byte header", path, n);
        goto fail;
    }
    memcpy(hd, buf, sizeof hd);
    if (hd[0] != FG__LLMC_MAGIC) {
        fg_error(FG_ERR_FORMAT, "%s: not an llm.c model file (magic %d, expected %d)", path, hd[0], FG__LLMC_MAGIC);
        goto fail;
    }
    if (hd[1] != 3 && hd[1] != 5) {
        fg_error(FG_ERR_FORMAT,
                 "%s: llm.c model file version %d; flashgrad reads 3 (float32) and 5 (bfloat16), the padded-vocabulary "
                 "versions",
                 path, hd[1]);
        goto fail;
    }
    const int T = hd[2], V = hd[3], L = hd[4], H = hd[5], C = hd[6], Vp = hd[7];
    if (T < 1 || V < 1 || L < 1 || H < 1 || C < 1 || Vp < V || C % H || V > FG_GPT_MAX_VOCAB || Vp > FG_GPT_MAX_VOCAB ||
        L > FG_GPT_MAX_LAYER || C > FG_GPT_MAX_EMBD || T > FG_GPT_MAX_BLOCK) {
        fg_error(FG_ERR_FORMAT,
                 "%s: implausible llm.c header (maxT %d, V %d, L %d, H %d, C %d, Vp %d: each positive, H divides C, "
                 "V <= Vp)",
                 path, T, V, L, H, C, Vp);
        goto fail;
    }
    fg_gpt_config mc = fg_gpt_default_config();
    mc.n_layer = L;
    mc.n_head = H;
    mc.n_embd = C;
    mc.block_size = T;
    mc.vocab_size = V;
    const size_t es = hd[1] == 3 ? 4 : 2;
    /* elements in the file: the model's plus the padding rows */
    const uint64_t per_block = 12ull * C * C + 13ull * C;
    const uint64_t total = (uint64_t)Vp * C + (uint64_t)T * C + (uint64_t)L * per_block + 2ull * C;
    if ((uint64_t)(n - sizeof hd) != total * es) {
        fg_error(FG_ERR_FORMAT,
                 "%s: %zu bytes of parameters, but its header (V %d padded to %d, maxT %d, L %d, C %d, %s) needs "
                 "%llu: %s",
                 path, n - sizeof hd, V, Vp, T, L, C, es == 4 ? "float32" : "bfloat16",
                 (unsigned long long)(total * es),
                 (uint64_t)(n - sizeof hd) < total * es ? "truncated" : "extra bytes");
        goto fail;
    }
    if (!(g = fg_gpt_create_empty(&mc))) goto fail;
    float *flat = fg_data(g->params_flat);
    const unsigned char *s = (const unsigned char *)buf + sizeof hd;
    uint64_t at = 0; /* element index into the file's parameters */
#define TAKE_ELEMS(dst, cnt)                                                                                           \
    for (int64_t e_ = 0; e_ < (int64_t)(cnt); e_++, at++) {                                                            \
        if (es == 4) {                                                                                                 \
            memcpy(&(dst)[e_], s + at * 4, 4);                                                                         \
        } else {                                                                                                       \
            uint16_t b_;                                                                                               \
            memcpy(&b_, s + at * 2, 2);                                                                                \
            (dst)[e_] = fg_bf16_to_f32(b_);                                                                            \
        }                                                                                                              \
    }
    /* wte: the V real rows, then skip the padding */
    const fg_gpt_param *wte = fg_gpt_find(g, "transformer.wte.weight");
    TAKE_ELEMS(flat + wte->offset, wte->numel)
    at += (uint64_t)(Vp - V) * C;
    const fg_gpt_param *wpe = fg_gpt_find(g, "transformer.wpe.weight");
    TAKE_ELEMS(flat + wpe->offset, wpe->numel)
    for (int k = 0; k < FG_GPT_KIND_COUNT; k++) {
        if (k == FG_GPT_WTE || k == FG_GPT_WPE || k == FG_GPT_LNF_W || k == FG_GPT_LNF_B) continue;
        for (int l = 0; l < L; l++) {
            const fg_tensor *w = fg_gpt_weight(g, (fg_gpt_kind)k, l);
            if (!w) continue; /* an entry GPT-2 does not have */
            float *d = fg_data(w);
            TAKE_ELEMS(d, fg_numel(w))
        }
    }
    for (int k = FG_GPT_LNF_W; k <= FG_GPT_LNF_B; k++) {
        const fg_tensor *w = fg_gpt_weight(g, (fg_gpt_kind)k, 0);
        float *d = fg_data(w);
        TAKE_ELEMS(d, fg_numel(w))
    }
#undef TAKE_ELEMS
    for (int64_t i = 0; i < g->num_elements; i++)
        if (!isfinite(flat[i])) {
            fg_error(FG_ERR_FORMAT, "%s: a weight is not finite (element %lld of the model)", path, (long long)i);
            goto fail;
        }
    if (!(m = calloc(1, sizeof *m))) {
        fg_error(FG_ERR_OOM, "out of memory");
        goto fail;
    }
    m->format = FG_MODEL_LLMC;
    m->model = g;
    m->padded_vocab = Vp;
    m->llmc_version = hd[1];
    free(buf);
    return m;
fail:
    fg_gpt_free(g);
    free(buf);
    return NULL;
}

int fg__llmc_file_magic(const char *path) {
    int fd;
    int64_t size;
    if (fg_open_read(path, 0, &fd, &size) != FG_OK) {
        fg_clear_error();
        return 0;
    }
    int32_t m = 0;
    int yes = pread(fd, &m, 4, 0) == 4 && m == FG__LLMC_MAGIC;
    close(fd);
    return yes;
}

fg_status fg_llmc_save(const fg_gpt *g, const char *out_file, int version, int overwrite) {
    if (!g || !out_file || !*out_file) return fg_error(FG_ERR_ARG, "export: no model or no output file");
    if (version != 3 && version != 5)
        return fg_error(FG_ERR_ARG, "export: llm.c version %d (3: float32, 5: bfloat16)", version);
    char why[256];
    if (fg__gpt2_cannot(&g->cfg, why, sizeof why))
        return fg_error(FG_ERR_ARG,
                        "export --to llmc: an llm.c model file holds GPT-2 models only (this one is arch %s%s%s)",
                        fg_gpt_arch_name(g->cfg.arch), g->cfg.arch == FG_ARCH_GPT2 ? ", with " : "",
                        g->cfg.arch == FG_ARCH_GPT2 ? why : "");
    struct stat sb;
    if (lstat(out_file, &sb) == 0) {
        if (!overwrite) return fg_error(FG_ERR_ARG, "%s already exists; pass --overwrite to replace it", out_file);
        if (!S_ISREG(sb.st_mode) || !fg__llmc_file_magic(out_file))
            return fg_error(FG_ERR_ARG, "%s exists and is not an llm.c model file; not replacing it", out_file);
    } else if (errno != ENOENT) {
        return fg_error(FG_ERR_IO, "%s: %s", out_file, strerror(errno));
    }
    fg__export_remove_leftovers(out_file, 0);
    const fg_gpt_config *c = &g->cfg;
    const int64_t V = c->vocab_size, C = c->n_embd, Vp = (V + LLMC_PAD - 1) / LLMC_PAD * LLMC_PAD;
    const size_t es = version == 3 ? 4 : 2;
    const int64_t total = g->num_elements + (Vp - V) * C;
    /* the parameters in the file's dtype, converted once from the model's own (fg_to: tensor/bf16.h's
     * round to nearest even, from float64 without a float32 step that could round twice) */
    fg_tensor *host = fg_to(g->params_flat, FG_CPU, version == 3 ? FG_F32 : FG_BF16);
    const unsigned char *flat = host ? fg_data(host) : NULL;
    unsigned char *data = flat ? calloc((size_t)total, es) : NULL;
    if (!data) {
        fg_release(host);
        return flat ? fg_error(FG_ERR_OOM, "export: out of memory") : fg_last_status();
    }
    int32_t hd[LLMC_HEADER_INTS] = {0};
    hd[0] = FG__LLMC_MAGIC;
    hd[1] = version;
    hd[2] = c->block_size;
    hd[3] = c->vocab_size;
    hd[4] = c->n_layer;
    hd[5] = c->n_head;
    hd[6] = c->n_embd;
    hd[7] = (int32_t)Vp;
    int64_t at = 0;
#define PUT_ELEMS(offset, cnt)                                                                                         \
    do {                                                                                                               \
        memcpy(data + at * es, flat + es * (offset), es * (size_t)(cnt));                                              \
        at += (cnt);                                                                                                   \
    } while (0)
    const fg_gpt_param *wte = fg_gpt_find(g, "transformer.wte.weight"), *wpe = fg_gpt_find(g, "transformer.wpe.weight");
    PUT_ELEMS(wte->offset, wte->numel);
    at += (Vp - V) * C; /* the padding rows: zero (calloc) */
    PUT_ELEMS(wpe->offset, wpe->numel);
    for (int k = 0; k < FG_GPT_KIND_COUNT; k++) {
        if (k == FG_GPT_WTE || k == FG_GPT_WPE || k == FG_GPT_LNF_W || k == FG_GPT_LNF_B) continue;
        for (int l = 0; l < c->n_layer; l++)
            for (int i = 0; i < g->n_params; i++)
                if (g->params[i].kind == (fg_gpt_kind)k && g->params[i].layer == l) {
                    PUT_ELEMS(g->params[i].offset, g->params[i].numel);
                }
    }
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].kind == FG_GPT_LNF_W) {
            PUT_ELEMS(g->params[i].offset, g->params[i].numel);
        }
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].kind == FG_GPT_LNF_B) {
            PUT_ELEMS(g->params[i].offset, g->params[i].numel);
        }
#undef PUT_ELEMS
    const void *parts[2] = {hd, data};
    size_t sizes[2] = {sizeof hd, (size_t)total * es};
    fg_status st = fg_write_file_atomic(out_file, parts, sizes, 2);
    free(data);
    fg_release(host);
    return st;
}
