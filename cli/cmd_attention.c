/* cmd_attention.c — `flashgrad attention`: attention on .npy inputs, written back as .npy.
 *
 *   flashgrad attention --q Q.npy --k K.npy --v V.npy [--do dO.npy] [--impl naive|flash] [--causal]
 *                       [--dropout P --seed S] [--scale X] [--block-q N --block-k N]
 *                       [--gqa HKV] [--window L,R] [--alibi] [--softcap C] [--custom NAME]
 *                       [--device cpu|cuda] [--dtype float32|float64|bfloat16] --out DIR
 *
 * Q is (B, H, Nq, d), K and V (B, H_kv, Nk, d) with H a multiple of H_kv (--gqa HKV, when given,
 * must equal K's heads), float32 or float64 (all three alike). Writes DIR/o.npy
 * (B, H, Nq, d) and DIR/lse.npy (B, H, Nq); with --do (dO, shaped like O) also dq.npy, dk.npy and
 * dv.npy. Outputs have the inputs' dtype. DIR is created if missing.
 * --dtype converts every input to that dtype first (fg_to: bfloat16 rounds to nearest even) and
 * computes in it. The inputs may also be bfloat16 .npy files (ml_dtypes' '<V2', tensor/npy.h).
 * bfloat16 runs on the GPU only (--device cuda, the flash kernels): o, dq, dk, dv are written as
 * bfloat16 ('<V2') and lse as float32; on the CPU, or in a build without CUDA, it is a usage
 * error.
 *
 * The five names are one output set, replaced as a whole: every output is computed first, then the
 * set is written (and fsync'ed) into a temporary folder inside DIR, then each file is renamed into
 * place and the previous run's members of the set that this run does not produce (dq, dk, dv after
 * a run without --do) are removed. So after exit 0, DIR's o/lse/dq/dk/dv.npy are exactly this run's;
 * after a failed write (a full disk, say) they are exactly the previous run's, and no temporary
 * file or folder is left. Only a kill during the final renames (a few system calls) can mix the
 * two sets, and a kill before them can leave a ".flashgrad-attention.*" folder behind. Other files
 * in DIR are never touched.
 * The inputs are mapped, not read (fg_npy_map, tensor/npy.h): they must not be truncated while the
 * command runs.
 * --device cuda reads the files on the host, moves the tensors to the GPU (fg_to), runs the same
 * fg_attention there and writes the results back as .npy (fg_npy_save copies them to the host).
 * Exit status: 0 ok, 1 runtime error (unreadable or mismatched input, failed write, no usable
 * GPU in a CUDA build, scores that overflow the dtype), 2 usage error (also --device cuda in a build
 * without CUDA, --custom with --device cuda: see fg_attn_device_ready in cli/attn_flags.h; and a
 * --scale or --softcap the inputs' dtype cannot hold, as fg_attn_problem_check_dtype says; and
 * bfloat16 on the CPU, --impl naive with bfloat16, or a head dim its kernels lack). A variant the
 * device's kernels lack for the dtype (bfloat16 with --softcap or --alibi) is a runtime error (1),
 * refused by fg_attention with one line.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "ops/attention.h"
#include "tensor/fileio.h"
#include "tensor/npy.h"
#include "cli/attn_flags.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

static const char attention_usage[] =
    "usage: flashgrad attention --q Q.npy --k K.npy --v V.npy [--do dO.npy] [--impl naive|flash] [--causal]\n"
    "                           [--dropout P --seed S] [--scale X] [--block-q N --block-k N]\n"
    "                           [--gqa HKV] [--window L,R] [--alibi] [--softcap C] [--custom NAME]\n"
    "                           [--device cpu|cuda] [--dtype float32|float64|bfloat16] --out DIR\n"
    "\n"
    "  Q (B,H,Nq,d), K and V (B,H_kv,Nk,d), H a multiple of H_kv: float32, float64 or bfloat16 ('<V2',\n"
    "  ml_dtypes) .npy files of one dtype.\n"
    "  Writes DIR/o.npy (B,H,Nq,d) and DIR/lse.npy (B,H,Nq); with --do dO.npy (shaped like O) also\n"
    "  dq.npy, dk.npy, dv.npy. Outputs have the inputs' dtype. The set replaces the previous run's as a\n"
    "  whole: after success DIR holds exactly this run's o/lse/dq/dk/dv.npy, after a failure the old ones.\n"
    "\n"
    "  --impl naive|flash   implementation (default flash)\n"
    "  --causal             causal mask aligned to the bottom-right: query i sees key j iff j <= i + Nk - Nq\n"
    "  --dropout P          dropout on the attention weights, 0 <= P < 1 (default 0)\n"
    "  --seed S             dropout seed, an integer >= 0 (default 0)\n"
    "  --scale X            score scale, finite and nonzero (default 1/sqrt(d))\n"
    "  --block-q N          flash query tile rows, 1..65536 (default 64)\n"
    "  --block-k N          flash key tile rows, 1..65536 (default 64)\n"
    "  --device cpu|cuda    where to compute (default cpu). cuda needs a CUDA build (build-cuda/flashgrad);\n"
    "                       the GPU picks its own flash tiles (--block-q/--block-k are for the CPU) and\n"
    "                       --custom is refused there (callbacks run on the CPU only)\n"
    "  --dtype D            convert the inputs to D and compute in it (default: the inputs' dtype).\n"
    "                       bfloat16 needs --device cuda (flash; no --alibi, --softcap, --custom); it\n"
    "                       writes o, dq, dk, dv as bfloat16 .npy ('<V2') and lse as float32\n"
    "variants (any combination; see ops/attention.h for the exact semantics):\n";

#define CMD "flashgrad attention"
#define BF16_ON_CPU                                                                                                    \
    "bfloat16 compute needs --device cuda (the CPU stores bfloat16 but computes in float32 or float64: "              \
    "use --dtype float32)"

static int usage_error(const char *fmt, const char *a, const char *b) {
    char what[1024];
    snprintf(what, sizeof what, fmt, a, b);
    fg_cli_line(CMD ": ", "%s (flashgrad attention --help)", what);
    return 2;
}

/* mkdir -p: 0 on success, -1 with errno. */
static int make_dirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Replaces the output set in folder `out` (see the top of the file): ts[i] is written as
 * out/<names[i]>.npy, and out/<names[i]>.npy is removed where ts[i] is NULL. 0, or 1 after printing
 * one line on stderr. */
static int write_outputs(const char *out, const char *const *names, const fg_tensor *const *ts, int n) {
    char path[4200], tmpdir[4200], tmp[4400];
    for (int i = 0; i < n; i++) { /* a folder where a file goes would fail a rename midway: refuse it first */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
        if (ts[i] && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, CMD ": cannot write %s: it is a directory (nothing in %s was changed)\n", path, out);
            return 1;
        }
        /* a device, FIFO or socket where an output goes (or where one would be removed) is never
         * replaced: fileio.h's rule for every writer */
        if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode) && fg_check_replaceable(path) != FG_OK) {
            fprintf(stderr, CMD ": %s\n", fg_last_error());
            return 1;
        }
    }
    errno = ENAMETOOLONG;
    if (snprintf(tmpdir, sizeof tmpdir, "%s/.flashgrad-attention.XXXXXX", out) >= (int)sizeof tmpdir ||
        !mkdtemp(tmpdir)) {
        fprintf(stderr, CMD ": cannot create a temporary folder in %s: %s\n", out, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        snprintf(tmp, sizeof tmp, "%s/%s.npy", tmpdir, names[i]);
        if (fg_npy_save(tmp, ts[i]) != FG_OK) {
            fprintf(stderr, CMD ": cannot write %s/%s.npy (nothing in %s was changed): %s\n", out, names[i], out,
                    fg_last_error());
            fg_remove_flat_dir(tmpdir);
            return 1;
        }
    }
    for (int i = 0, moved = 0; i < n; i++) {
        if (!ts[i]) continue;
        snprintf(tmp, sizeof tmp, "%s/%s.npy", tmpdir, names[i]);
        snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
        if (fg_rename_replace(tmp, path) != FG_OK) {
            fprintf(stderr, CMD ": cannot move %s into place: %s (%s)\n", path, fg_last_error(),
                    moved ? "the folder now mixes this run's outputs with the previous run's"
                          : "nothing in the folder was changed");
            fg_remove_flat_dir(tmpdir);
            return 1;
        }
        moved++;
    }
    rmdir(tmpdir);
    for (int i = 0; i < n; i++) { /* the previous run's members of the set that this run did not write */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
        if (ts[i] || lstat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) continue;
        if (unlink(path) != 0) {
            fprintf(stderr, CMD ": wrote the outputs but cannot remove the previous run's %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
    }
    /* make the renames and removals durable (a folder that cannot be fsync'ed loses nothing more) */
    if (fg_fsync_dir(out) != 0) {
        fprintf(stderr, CMD ": wrote the outputs but cannot fsync %s: %s\n", out, strerror(errno));
        return 1;
    }
    return 0;
}

int fg_cmd_attention(int argc, char **argv) {
    const char *qp = NULL, *kp = NULL, *vp = NULL, *dop = NULL, *out = NULL;
    fg_attn_opts opts = fg_attn_defaults();
    fg_device dev = FG_CPU;
    int want_dt = -1; /* --dtype, or -1: the inputs' */
    fg_attn_flags af;
    fg_attn_flags_init(&af, "attention", FG_AF_ALL & ~FG_AF_BIT(FG_AF_IMPL_BOTH));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(attention_usage, stdout);
            fputs(fg_attn_variant_flags_help, stdout);
            return 0;
        }
        const int af_rc = fg_attn_flags_take(&af, argc, argv, &i);
        if (af_rc == 2) return 2;
        if (af_rc == 3) return 0;
        if (af_rc == 1) continue;
        static const char *valued[] = {"--q", "--k", "--v", "--do", "--out", "--scale", "--dtype"};
        int known = 0;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= !strcmp(a, valued[j]);
        if (!known) return usage_error("unknown option '%s'%s", a, "");
        if (i + 1 >= argc) return usage_error("%s needs a value%s", a, "");
        const char *val = argv[++i];
        double dv;
        if (!strcmp(a, "--dtype")) {
            const fg_dtype dts[] = {FG_F32, FG_F64, FG_BF16};
            want_dt = -1;
            for (int j = 0; j < 3; j++)
                if (!strcmp(val, fg_dtype_name(dts[j]))) want_dt = (int)dts[j];
            if (want_dt < 0) return usage_error("--dtype must be float32, float64 or bfloat16, got '%s'%s", val, "");
            continue;
        }
        if (strcmp(a, "--scale") && !*val) return usage_error("%s: empty path%s", a, "");
        if (!strcmp(a, "--q"))
            qp = val;
        else if (!strcmp(a, "--k"))
            kp = val;
        else if (!strcmp(a, "--v"))
            vp = val;
        else if (!strcmp(a, "--do"))
            dop = val;
        else if (!strcmp(a, "--out"))
            out = val;
        else { /* --scale */
            if (fg_parse_double(val, &dv) || dv == 0)
                return usage_error("--scale must be a finite nonzero number, got '%s'%s", val, "");
            opts.scale = dv;
        }
    }
    if (fg_attn_flags_apply(&af, &opts, &dev)) return 2;
    if (!qp || !kp || !vp) return usage_error("--q, --k and --v are required%s%s", "", "");
    if (!out) return usage_error("--out DIR is required%s%s", "", "");
    if (want_dt == FG_BF16 && dev == FG_CPU) return usage_error(BF16_ON_CPU "%s%s", "", "");
    int drc = fg_attn_device_ready(CMD, dev, &opts);
    if (drc) return drc;

    int rc = 1;
    fg_tensor *q = NULL, *k = NULL, *v = NULL, *dout = NULL, *o = NULL, *lse = NULL;
    /* the inputs are read-only views of their mapped files where the files allow (fg_npy_map): no
     * copy and no first touch of fresh memory; the mappings outlive the tensors */
    fg_npy_mapping maps[4] = {{0}};
    const char *what = NULL;
    if (!(q = fg_npy_map(qp, &maps[0])))
        what = qp;
    else if (!(k = fg_npy_map(kp, &maps[1])))
        what = kp;
    else if (!(v = fg_npy_map(vp, &maps[2])))
        what = vp;
    else if (dop && !(dout = fg_npy_map(dop, &maps[3])))
        what = dop;
    if (what) {
        const char *msg = fg_last_error();
        if (strstr(msg, what))
            fprintf(stderr, CMD ": %s\n", msg); /* the message names the file already */
        else
            fprintf(stderr, CMD ": %s: %s\n", what, msg);
        goto done;
    }
    if (dev == FG_CPU && want_dt < 0 && (q->dtype == FG_BF16 || k->dtype == FG_BF16 || v->dtype == FG_BF16)) {
        rc = usage_error("the inputs are bfloat16: " BF16_ON_CPU "%s%s", "", "");
        goto done;
    }
    if (dev != FG_CPU || want_dt >= 0) { /* the same tensors on the device, in their own dtype or --dtype's */
        fg_tensor **ts[4] = {&q, &k, &v, &dout};
        for (int t = 0; t < 4; t++) {
            if (!*ts[t]) continue;
            const fg_dtype dt = want_dt >= 0 ? (fg_dtype)want_dt : (*ts[t])->dtype;
            if (dev == FG_CPU && dt == (*ts[t])->dtype) continue;
            fg_tensor *moved = fg_to(*ts[t], dev, dt);
            if (!moved) {
                fprintf(stderr, CMD ": cannot move the inputs to %s: %s\n", fg_device_name(dev), fg_last_error());
                goto done;
            }
            fg_release(*ts[t]);
            *ts[t] = moved;
        }
    }
    if (dout) {
        fg_set_requires_grad(q, 1);
        fg_set_requires_grad(k, 1);
        fg_set_requires_grad(v, 1);
    }
    o = fg_attention(q, k, v, &opts, &lse);
    if (!o) {
        fprintf(stderr, CMD ": %s\n", fg_last_error());
        /* FG_ERR_ARG: an option the inputs' dtype cannot hold (the flags' own checks passed) */
        if (fg_last_status() == FG_ERR_ARG) rc = 2;
        goto done;
    }
    if (dout) {
        char b1[96], b2[96];
        if (dout->dtype != o->dtype || !fg_same_shape(dout, o)) {
            fprintf(stderr, CMD ": --do %s is %s %s, but O is %s %s\n", dop, fg_dtype_name(dout->dtype),
                    fg_shape_str(dout, b1, sizeof b1), fg_dtype_name(o->dtype), fg_shape_str(o, b2, sizeof b2));
            goto done;
        }
        if (fg_backward(o, dout) != FG_OK) {
            fprintf(stderr, CMD ": backward: %s\n", fg_last_error());
            goto done;
        }
    }
    if (make_dirs(out) != 0) {
        fprintf(stderr, CMD ": cannot create the output folder %s: %s\n", out, strerror(errno));
        goto done;
    }
    const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
    const fg_tensor *ts[5] = {o, lse, dout ? q->grad : NULL, dout ? k->grad : NULL, dout ? v->grad : NULL};
    rc = write_outputs(out, names, ts, 5);
done:
    fg_release(o);
    fg_release(lse);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
    for (int i = 0; i < 4; i++) fg_npy_unmap(&maps[i]);
    return rc;
}
