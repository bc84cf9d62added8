/* test_bf16.c — the bfloat16 dtype on the CPU: conversions (tensor/bf16.h through fg_to, fg_set,
 * fg_fill, fg_axpy), .npy ('<V2', ml_dtypes' np.save) and safetensors ("BF16") files checked
 * against NumPy and PyTorch, and the refusals: CPU ops, CPU attention, `flashgrad attention
 * --dtype bfloat16` without --device cuda. The GPU side is tests/cuda/test_bf16.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "ops/attention.h"
#include "ops/ops.h"
#include "tensor/bf16.h"
#include "tensor/npy.h"
#include "tensor/philox.h"
#include "tensor/safetensors.h"
#include "tests/bf16_ref.h"
#include "tests/common.h"

static char g_dir[64];
static void make_dir(void) { fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_bf16_XXXXXX"); }
static void remove_dir(void) { fgt_remove_tmpdir(g_dir); }
TestSuite(bf16, .init = make_dir, .fini = remove_dir, .timeout = 120);

Test(bf16, dtype_name_and_size) {
    cr_expect_str_eq(fg_dtype_name(FG_BF16), "bfloat16");
    cr_expect_eq(fg_dtype_size(FG_BF16), 2);
    const int64_t s[2] = {3, 5};
    fg_tensor *t = fg_zeros(FG_BF16, FG_CPU, 2, s);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_expect_eq(fg_nbytes(t), 30);
    fg_release(t);
}

Test(bf16, float32_to_bf16_rounds_to_nearest_even) {
    enum { NS = 14, NR = 20000, N = NS + NR };
    static float x[N];
    const uint32_t special[NS] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu,
                                  0xbf808000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0x7f800000u,
                                  0x80000000u, 0x00008000u, 0x00018000u, 0x00000001u};
    for (int i = 0; i < NS; i++) x[i] = fgt_f32_bits(special[i]);
    for (int i = 0; i < NR; i++) x[NS + i] = fgt_f32_bits(fg_philox_u32(3, 9, (uint64_t)i));
    const int64_t sh[1] = {N};
    fg_tensor *f = fg_from_buffer(FG_F32, FG_CPU, 1, sh, x);
    fg_tensor *b = fg_to(f, FG_CPU, FG_BF16);
    cr_assert_not_null(b, "%s", fg_last_error());
    const uint16_t *h = fg_data(b);
    for (int i = 0; i < N; i++) {
        if (isnan(x[i]))
            cr_assert(isnan(fg_get(b, i)), "element %d: NaN became 0x%04x", i, h[i]);
        else
            cr_assert_eq(h[i], fgt_ref_bf16(x[i]), "element %d: %a -> 0x%04x, expected 0x%04x", i, (double)x[i], h[i],
                         fgt_ref_bf16(x[i]));
    }
    /* the known values: 1.0 is 0x3F80; 1 + 2^-8 is a tie that goes down to even, 1 + 3·2^-8 one
     * that goes up; 0x7F7F8000 is the tie above the largest bf16: inf; subnormals kept */
    cr_expect_eq(h[0], 0x3f80);
    cr_expect_eq(h[1], 0x3f80);
    cr_expect_eq(h[2], 0x3f82);
    cr_expect_eq(h[3], 0x3f81);
    cr_expect_eq(h[4], 0x3f80);
    cr_expect_eq(h[5], 0xbf80);
    cr_expect_eq(h[6], 0x7f7f);
    cr_expect_eq(h[7], 0x7f80);
    cr_expect_eq(h[8], 0x7f80);
    cr_expect_eq(h[10], 0x8000);
    cr_expect_eq(h[11], 0x0000);
    cr_expect_eq(h[12], 0x0002);
    /* and back: exact */
    fg_tensor *back = fg_to(b, FG_CPU, FG_F32);
    cr_assert_not_null(back);
    for (int i = 0; i < N; i++) {
        const float w = fgt_f32_bits((uint32_t)h[i] << 16), g = ((const float *)fg_data(back))[i];
        cr_assert((isnan(w) && isnan(g)) || !memcmp(&w, &g, 4), "element %d back: %a vs %a", i, (double)g, (double)w);
    }
    fg_release(f), fg_release(b), fg_release(back);
}

Test(bf16, nan_stays_nan_and_float64_rounds_once) {
    const int64_t s[1] = {6};
    const double x[6] = {NAN, -NAN, 1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-8 - 0x1p-40, 1 + 0x1p-7 + 0x1p-8 - 0x1p-40, 1e39};
    fg_tensor *d = fg_from_buffer(FG_F64, FG_CPU, 1, s, x);
    fg_tensor *b = fg_to(d, FG_CPU, FG_BF16);
    cr_assert_not_null(b, "%s", fg_last_error());
    const uint16_t *h = fg_data(b);
    cr_expect(isnan(fg_get(b, 0)) && isnan(fg_get(b, 1)), "NaN: 0x%04x 0x%04x", h[0], h[1]);
    /* float32 would land on the tie 1 + 2^-8 (or 1 + 3·2^-8) and go to even: wrong side */
    cr_expect_eq(h[2], 0x3f81, "1 + 2^-8 + 2^-40 -> 0x%04x", h[2]);
    cr_expect_eq(h[3], 0x3f80, "1 + 2^-8 - 2^-40 -> 0x%04x", h[3]);
    cr_expect_eq(h[4], 0x3f81, "1 + 3 2^-8 - 2^-40 -> 0x%04x", h[4]);
    cr_expect_eq(h[5], 0x7f80, "1e39 -> 0x%04x", h[5]);
    /* fg_set and fg_fill round the same way */
    cr_assert_eq(fg_set(b, 0, 1 + 0x1p-8 + 0x1p-40), FG_OK);
    cr_expect_eq(h[0], 0x3f81);
    cr_assert_eq(fg_fill(b, 1 + 0x1p-8), FG_OK);
    for (int i = 0; i < 6; i++) cr_expect_eq(h[i], 0x3f80);
    /* axpy: y = bf16(y + a x) computed in float32 */
    fg_tensor *y = fg_full(FG_BF16, FG_CPU, 1, s, 1.0);
    cr_assert_eq(fg_axpy(y, 1.0, b), FG_OK, "%s", fg_last_error());
    cr_expect_eq(fg_get(y, 0), 2.0);
    fg_release(d), fg_release(b), fg_release(y);
}

/* NumPy writes float32 data, the RNE bits it works out itself (uint32 arithmetic) in a '<V2'
 * file exactly as ml_dtypes' np.save lays it out, and refused files; then reads ours. */
static const char *g_numpy_script =
    "import sys, os, numpy as np\n"
    "d, phase = sys.argv[1], sys.argv[2]\n"
    "def bits(x):\n"
    "    u = x.view(np.uint32).astype(np.uint64)\n"
    "    keep, rest = u >> 16, u & 0xffff\n"
    "    up = (rest > 0x8000) | ((rest == 0x8000) & ((keep & 1) == 1))\n"
    "    return (keep + up).astype(np.uint16)\n"
    "def save_v2(path, b):\n"
    "    with open(path, 'wb') as f:\n"
    "        np.lib.format.write_array_header_1_0(f, {'descr': '<V2', 'fortran_order': False, 'shape': b.shape})\n"
    "        b.tofile(f)\n"
    "rng = np.random.default_rng(5)\n"
    "x = (rng.standard_normal((7, 11)) * 10).astype(np.float32)\n"
    "x[0, :4] = np.array([1.0, 1.00390625, 1.01171875, 3.3961514e38], dtype=np.float32)\n"
    "if phase == 'write':\n"
    "    np.save(os.path.join(d, 'x32.npy'), x)\n"
    "    save_v2(os.path.join(d, 'xbf.npy'), bits(x))\n"
    "    np.save(os.path.join(d, 'void.npy'), bits(x).view('|V2'))\n"
    "    np.save(os.path.join(d, 'u16.npy'), bits(x))\n"
    "    np.save(os.path.join(d, 'f16.npy'), x.astype(np.float16))\n"
    "    print('wrote')\n"
    "else:\n"
    "    a = np.load(os.path.join(d, 'ours.npy'))\n"
    "    head = open(os.path.join(d, 'ours.npy'), 'rb').read(128)\n"
    "    ok = b\"'descr': '<V2'\" in head and a.dtype.kind == 'V' and a.dtype.itemsize == 2\n"
    "    ok = ok and a.shape == x.shape and np.array_equal(a.view('<u2'), bits(x))\n"
    "    print('OK' if ok else 'ours.npy: %s %s' % (a.dtype.str, a.shape))\n"
    "    sys.exit(0 if ok else 1)\n";

/* The interpreter for the cross-checks: $FG_TORCH_PYTHON (PyTorch 2 with NumPy) when set, else
 * the system one. */
static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

/* 0 when torch_python() imports `modules` (e.g. "numpy" or "torch, numpy"). */
static int python_has(const char *modules) {
    char cmd[512], out[256];
    snprintf(cmd, sizeof cmd, "%s -c 'import %s' 2>&1", torch_python(), modules);
    return fgt_run_cmd(cmd, out, sizeof out);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(s, f);
    fclose(f);
}

Test(bf16, npy_files_match_numpy_bits_and_ambiguous_ones_are_refused) {
    if (python_has("numpy") != 0) {
        remove_dir();
        fgt_skip("NumPy bf16 cross-check", "no python with numpy (set FG_TORCH_PYTHON)");
    }
    char script[128], out[4096], cmd[512], path[160];
    snprintf(script, sizeof script, "%s/bf.py", g_dir);
    write_text(script, g_numpy_script);
    snprintf(cmd, sizeof cmd, "%s %s %s write 2>&1", torch_python(), script, g_dir);
    cr_assert_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "numpy writer: %s", out);
    snprintf(path, sizeof path, "%s/x32.npy", g_dir);
    fg_tensor *x = fg_npy_load(path);
    snprintf(path, sizeof path, "%s/xbf.npy", g_dir);
    fg_tensor *want = fg_npy_load(path);
    cr_assert_not_null(x, "%s", fg_last_error());
    cr_assert_not_null(want, "%s", fg_last_error());
    cr_assert_eq(want->dtype, FG_BF16, "'<V2' read as %s", fg_dtype_name(want->dtype));
    fg_tensor *got = fg_to(x, FG_CPU, FG_BF16);
    cr_assert_not_null(got);
    cr_assert(fg_same_shape(got, want));
    cr_expect(!memcmp(fg_data(got), fg_data(want), fg_nbytes(got)), "our rounding differs from NumPy's bits");
    /* and mapped: the same */
    fg_npy_mapping m = {0};
    fg_tensor *mp = fg_npy_map(path, &m);
    cr_assert_not_null(mp, "%s", fg_last_error());
    cr_expect(mp->dtype == FG_BF16 && !memcmp(fg_data(mp), fg_data(want), fg_nbytes(want)));
    fg_release(mp);
    fg_npy_unmap(&m);
    /* ours, read by NumPy */
    snprintf(path, sizeof path, "%s/ours.npy", g_dir);
    cr_assert_eq(fg_npy_save(path, got), FG_OK, "%s", fg_last_error());
    snprintf(cmd, sizeof cmd, "%s %s %s check 2>&1", torch_python(), script, g_dir);
    cr_expect_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "numpy check: %s", out);
    /* raw two-byte data that does not say it is bfloat16 */
    const char *refused[3][2] = {{"void.npy", "'|V2'"}, {"u16.npy", "'<u2'"}, {"f16.npy", "'<f2'"}};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, refused[i][0]);
        cr_expect_null(fg_npy_load(path), "%s accepted", refused[i][0]);
        cr_expect(strstr(fg_last_error(), refused[i][1]) && strstr(fg_last_error(), "not known to hold bfloat16"),
                  "%s: %s", refused[i][0], fg_last_error());
        cr_expect(!strchr(fg_last_error(), '\n'), "not one line: %s", fg_last_error());
    }
    fg_release(x), fg_release(want), fg_release(got);
}

/* PyTorch's own bfloat16 rounding and a safetensors file laid out by hand from its bits; then our
 * file read back by PyTorch. */
static const char *g_torch_script =
    "import sys, os, json, struct, numpy as np, torch\n"
    "d, phase = sys.argv[1], sys.argv[2]\n"
    "g = torch.Generator().manual_seed(7)\n"
    "x = torch.randn(5, 13, generator=g) * 100\n"
    "x[0, :3] = torch.tensor([1.0, 1.00390625, 1.01171875])\n"
    "b = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)\n"
    "def save(path, tensors):\n"
    "    hdr, data = {}, b''\n"
    "    for name, (dt, arr) in tensors.items():\n"
    "        raw = arr.tobytes()\n"
    "        hdr[name] = {'dtype': dt, 'shape': list(arr.shape), 'data_offsets': [len(data), len(data) + len(raw)]}\n"
    "        data += raw\n"
    "    h = json.dumps(hdr).encode()\n"
    "    h += b' ' * ((8 - len(h) % 8) % 8)\n"
    "    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)\n"
    "if phase == 'write':\n"
    "    save(os.path.join(d, 'torch.safetensors'), {'x': ('F32', x.numpy()), 'xb': ('BF16', b)})\n"
    "    print('wrote')\n"
    "else:\n"
    "    raw = open(os.path.join(d, 'ours.safetensors'), 'rb').read()\n"
    "    n = struct.unpack('<Q', raw[:8])[0]\n"
    "    e = json.loads(raw[8:8 + n])['xb']\n"
    "    a, z = e['data_offsets']\n"
    "    t = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + z]), dtype=torch.bfloat16).reshape(e['shape'])\n"
    "    ok = e['dtype'] == 'BF16' and torch.equal(t, x.to(torch.bfloat16))\n"
    "    print('OK' if ok else 'ours: %s' % e)\n"
    "    sys.exit(0 if ok else 1)\n";

Test(bf16, safetensors_bf16_matches_torch) {
    char script[128], out[4096], cmd[1024], path[160];
    if (python_has("torch, numpy") != 0) {
        remove_dir();
        fgt_skip("PyTorch bf16 safetensors cross-check", "no python with torch and numpy (set FG_TORCH_PYTHON)");
    }
    snprintf(script, sizeof script, "%s/st.py", g_dir);
    write_text(script, g_torch_script);
    snprintf(cmd, sizeof cmd, "%s %s %s write 2>&1", torch_python(), script, g_dir);
    cr_assert_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "torch writer: %s", out);
    snprintf(path, sizeof path, "%s/torch.safetensors", g_dir);
    fg_st_file *f = fg_st_load(path);
    cr_assert_not_null(f, "%s", fg_last_error());
    fg_tensor *x = fg_st_tensor(f, "x"), *xb = fg_st_tensor(f, "xb");
    cr_assert_not_null(x, "%s", fg_last_error());
    cr_assert_not_null(xb, "%s", fg_last_error());
    cr_assert_eq(xb->dtype, FG_BF16);
    fg_tensor *ours = fg_to(x, FG_CPU, FG_BF16);
    cr_expect(!memcmp(fg_data(ours), fg_data(xb), fg_nbytes(xb)), "our rounding differs from torch's bfloat16");
    /* read_into a bf16 tensor of the right shape; a float32 destination is a dtype error */
    fg_tensor *dst = fg_zeros(FG_BF16, FG_CPU, xb->ndim, xb->shape), *d32 = fg_zeros(FG_F32, FG_CPU, 2, xb->shape);
    cr_assert_eq(fg_st_read_into(f, "xb", dst), FG_OK, "%s", fg_last_error());
    cr_expect(!memcmp(fg_data(dst), fg_data(xb), fg_nbytes(xb)));
    cr_expect_eq(fg_st_read_into(f, "xb", d32), FG_ERR_DTYPE);
    fg_st_close(f);
    /* ours, read by torch */
    fg_st_writer *w = fg_st_writer_new();
    cr_assert_eq(fg_st_writer_add_tensor(w, "xb", ours), FG_OK, "%s", fg_last_error());
    snprintf(path, sizeof path, "%s/ours.safetensors", g_dir);
    cr_assert_eq(fg_st_writer_write(w, path), FG_OK, "%s", fg_last_error());
    fg_st_writer_free(w);
    snprintf(cmd, sizeof cmd, "%s %s %s check 2>&1", torch_python(), script, g_dir);
    cr_expect_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "torch check: %s", out);
    fg_release(x), fg_release(xb), fg_release(ours), fg_release(dst), fg_release(d32);
}

/* ---- tensor/bf16.h's converter at the edges ---- */

/* float32 -> bfloat16 by the definition, apart from tensor/bf16.h's and bf16_ref.h's bit tricks: the
 * two bf16 neighbours of x (truncated, and one bf16 ulp further from 0; past the largest finite
 * that is inf, at distance as if it were 2^128), compared by exact distance in double (both
 * distances are exact: their operands have at most 24 significant bits); the nearer wins, a tie
 * goes to the one with an even last bit. NaN: a NaN with x's sign. */
static uint16_t def_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    if (isnan(x)) return (uint16_t)(sign | 0x7fc0u);
    if (isinf(x)) return (uint16_t)(sign | 0x7f80u);
    const uint16_t lo = (uint16_t)((u & 0x7fffffffu) >> 16), hi = (uint16_t)(lo + 1);
    const double ax = fabs((double)x), vlo = fgt_f32_bits((uint32_t)lo << 16);
    const double vhi = hi == 0x7f80u ? 0x1p128 : fgt_f32_bits((uint32_t)hi << 16);
    const double dlo = ax - vlo, dhi = vhi - ax;
    const uint16_t mag = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u) ? hi : lo;
    return (uint16_t)(sign | mag);
}

/* Edge float32s: for exponents at the subnormal, normal, 1.0 and top ends, both signs, kept parts
 * with an even and an odd last bit and all ones (a carry into the exponent), each with dropped
 * halves just below, at and above the halfway point; then ±0, ±inf, the largest finite and the
 * tie above it, and NaNs of both signs (quiet, and signalling ones whose payload is only in the
 * dropped half, which truncation would turn into inf). Returns the count (at most cap). */
static int edge_values(uint32_t *out, int cap) {
    static const uint32_t exps[] = {0, 1, 2, 100, 126, 127, 128, 200, 253, 254};
    static const uint32_t kept[] = {0x00, 0x01, 0x02, 0x3f, 0x40, 0x7e, 0x7f};
    static const uint32_t rest[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu,
                                       0x7f7f8000u, 0xff7f8000u, 0x7f7f7fffu, 0x7f7f0000u, 0x7fc00000u, 0xffc00000u,
                                       0x7f800001u, 0xff800001u, 0x7f808000u, 0x7fffffffu, 0xffffffffu, 0x7f80ffffu,
                                       0x00008000u, 0x00018000u, 0x007f8000u, 0x807f8000u, 0x00000001u, 0x80000001u};
    int n = 0;
    for (size_t i = 0; i < sizeof special / sizeof *special && n < cap; i++) out[n++] = special[i];
    for (int sg = 0; sg < 2; sg++)
        for (size_t e = 0; e < sizeof exps / sizeof *exps; e++)
            for (size_t k = 0; k < sizeof kept / sizeof *kept; k++)
                for (size_t r = 0; r < sizeof rest / sizeof *rest && n < cap; r++)
                    out[n++] = (uint32_t)sg << 31 | exps[e] << 23 | kept[k] << 16 | rest[r];
    return n;
}

Test(bf16, converter_rounds_ties_to_even_by_the_definition_at_every_edge) {
    enum { CAP = 1200, NR = 200000 };
    static uint32_t bits[CAP + NR];
    int n = edge_values(bits, CAP);
    for (int i = 0; i < NR; i++) bits[n + i] = fg_philox_u32(21, 4, (uint64_t)i);
    n += NR;
    int ties_even = 0, ties_odd = 0, carries = 0, to_inf = 0, nans = 0;
    for (int i = 0; i < n; i++) {
        const float x = fgt_f32_bits(bits[i]);
        const uint16_t got = fg_bf16_from_f32(x), want = def_bf16(x);
        if (isnan(x)) {
            nans++;
            cr_assert(fgt_bf16_is_nan(got) && (got & 0x8000u) == (want & 0x8000u),
                      "NaN 0x%08x -> 0x%04x: not a NaN of the same sign", bits[i], got);
            continue;
        }
        cr_assert_eq(got, want, "0x%08x (%a) -> 0x%04x, the nearest (ties to even) is 0x%04x", bits[i], (double)x, got,
                     want);
        cr_assert_eq(got, fgt_ref_bf16(x), "0x%08x: 0x%04x, bf16_ref.h says 0x%04x", bits[i], got, fgt_ref_bf16(x));
        /* exact back: bf16 -> float32 is the top half */
        const float back = fg_bf16_to_f32(got), top = fgt_f32_bits((uint32_t)got << 16);
        cr_assert(!memcmp(&back, &top, 4), "0x%04x back to float32", got);
        if ((bits[i] & 0xffffu) == 0x8000u) (bits[i] >> 16 & 1u) ? ties_odd++ : ties_even++;
        if ((got & 0x7f80u) != (bits[i] >> 16 & 0x7f80u)) carries++;
        if ((got & 0x7fffu) == 0x7f80u && !isinf(x)) to_inf++;
    }
    /* the edge list did reach every case it is for */
    cr_expect(ties_even > 50 && ties_odd > 50 && carries > 20 && to_inf >= 4 && nans >= 8,
              "ties even %d odd %d, exponent carries %d, rounded to inf %d, NaNs %d", ties_even, ties_odd, carries,
              to_inf, nans);
}

/* PyTorch's float32 -> bfloat16 on the same edge values and random bits. Only NaN-ness is compared for
 * NaN (torch makes every NaN 0x7fc0, sign dropped; ours keeps the sign, checked above). */
static const char *g_torch_cast_script = "import sys, numpy as np, torch\n"
                                         "x = np.fromfile(sys.argv[1], dtype='<u4').view('<f4')\n"
                                         "b = torch.from_numpy(x.copy()).to(torch.bfloat16)\n"
                                         "b.view(torch.int16).numpy().astype('<u2').tofile(sys.argv[2])\n"
                                         "print(len(x))\n";

Test(bf16, converter_matches_torch_at_every_edge) {
    enum { CAP = 1200, NR = 100000 };
    static uint32_t bits[CAP + NR];
    if (python_has("torch, numpy") != 0) {
        remove_dir();
        fgt_skip("PyTorch float32->bfloat16 edge cross-check", "no python with torch and numpy (set FG_TORCH_PYTHON)");
    }
    int n = edge_values(bits, CAP);
    for (int i = 0; i < NR; i++) bits[n + i] = fg_philox_u32(22, 4, (uint64_t)i);
    n += NR;
    char script[160], in[160], outp[160], cmd[1024], out[256];
    snprintf(script, sizeof script, "%s/cast.py", g_dir);
    snprintf(in, sizeof in, "%s/x.f32", g_dir);
    snprintf(outp, sizeof outp, "%s/x.bf16", g_dir);
    write_text(script, g_torch_cast_script);
    FILE *f = fopen(in, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bits, 4, (size_t)n, f), (size_t)n);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s %s %s 2>&1", torch_python(), script, in, outp);
    cr_assert_eq(fgt_run_cmd(cmd, out, sizeof out), 0, "torch: %s", out);
    uint16_t *t = malloc((size_t)n * 2);
    f = fopen(outp, "rb");
    cr_assert(f && t);
    cr_assert_eq(fread(t, 2, (size_t)n, f), (size_t)n, "torch wrote fewer than %d values", n);
    fclose(f);
    for (int i = 0; i < n; i++) {
        const float x = fgt_f32_bits(bits[i]);
        const uint16_t got = fg_bf16_from_f32(x);
        if (isnan(x))
            cr_assert(fgt_bf16_is_nan(got) && fgt_bf16_is_nan(t[i]), "NaN 0x%08x: ours 0x%04x, torch 0x%04x", bits[i],
                      got, t[i]);
        else
            cr_assert_eq(got, t[i], "0x%08x (%a): ours 0x%04x, torch 0x%04x", bits[i], (double)x, got, t[i]);
    }
    free(t);
}

/* Every CPU op refuses a bfloat16 tensor with one line naming the op and the way out. */
static void expect_cpu_refusal(fg_tensor *r, const char *op) {
    cr_expect_null(r, "%s accepted bfloat16 on the CPU", op);
    cr_expect_eq(fg_last_status(), FG_ERR_DTYPE, "%s: status %s", op, fg_status_name(fg_last_status()));
    const char *m = fg_last_error();
    cr_expect(strstr(m, op) && strstr(m, "bf16 compute needs --device cuda") && strstr(m, "fg_to"), "%s: '%s'", op,
              m);
    cr_expect(!strchr(m, '\n'), "not one line: %s", m);
    fg_release(r);
}

Test(bf16, cpu_ops_refuse_bf16_naming_the_op) {
    const int64_t s2[2] = {4, 8}, s4[4] = {1, 2, 4, 8};
    fg_tensor *a = fg_ones(FG_BF16, FG_CPU, 2, s2), *q = fg_ones(FG_BF16, FG_CPU, 4, s4);
    fg_tensor *af = fg_ones(FG_F32, FG_CPU, 2, s2);
    cr_assert_not_null(q);
    expect_cpu_refusal(fg_add(a, a), "add");
    expect_cpu_refusal(fg_mul(af, a), "mul");
    fg_tensor *at = fg_ones(FG_BF16, FG_CPU, 2, (int64_t[]){8, 4});
    expect_cpu_refusal(fg_matmul(a, at), "matmul");
    fg_release(at);
    expect_cpu_refusal(fg_sum(a, 0, 0), "sum");
    expect_cpu_refusal(fg_gelu(a), "gelu");
    expect_cpu_refusal(fg_softmax(a), "softmax");
    expect_cpu_refusal(fg_reshape(a, 1, (int64_t[]){32}), "reshape");
    expect_cpu_refusal(fg_attention(q, q, q, NULL, NULL), "attention");
    /* converted with fg_to, the same math runs */
    fg_tensor *c = fg_to(a, FG_CPU, FG_F32), *s = fg_sum(c, 0, 0);
    cr_assert_not_null(s, "%s", fg_last_error());
    cr_expect_eq(fg_get(s, 0), 4.0);
    fg_release(a), fg_release(q), fg_release(af), fg_release(c), fg_release(s);
}

/* `flashgrad attention`: --dtype bfloat16 without --device cuda, and bf16 files on the CPU, are
 * usage errors (exit 2, one line); --dtype float64 on float32 files equals the float64 files' run. */
Test(bf16, attention_command_refuses_bf16_on_the_cpu) {
    const int64_t s[4] = {1, 2, 5, 8};
    char p32[3][160], pb[3][160], p64[3][160], cmd[2048], log[4096];
    const char *nm[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        fg_tensor *t = fg_rand_uniform(FG_F32, FG_CPU, 4, s, -1, 1, 20 + (uint64_t)i, 0);
        fg_tensor *b = fg_to(t, FG_CPU, FG_BF16), *d = fg_to(t, FG_CPU, FG_F64);
        snprintf(p32[i], sizeof p32[i], "%s/%s32.npy", g_dir, nm[i]);
        snprintf(pb[i], sizeof pb[i], "%s/%sbf.npy", g_dir, nm[i]);
        snprintf(p64[i], sizeof p64[i], "%s/%s64.npy", g_dir, nm[i]);
        cr_assert_eq(fg_npy_save(p32[i], t), FG_OK);
        cr_assert_eq(fg_npy_save(pb[i], b), FG_OK);
        cr_assert_eq(fg_npy_save(p64[i], d), FG_OK);
        fg_release(t), fg_release(b), fg_release(d);
    }
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --dtype bfloat16 --out %s/o1 2>&1", fgt_bin(),
             p32[0], p32[1], p32[2], g_dir);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "--dtype bfloat16 on the CPU: %s", log);
    cr_expect(strstr(log, "bfloat16 compute needs --device cuda") && strchr(log, '\n') == strrchr(log, '\n'),
              "%s", log);
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --out %s/o2 2>&1", fgt_bin(), pb[0], pb[1], pb[2],
             g_dir);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "bf16 inputs on the CPU: %s", log);
    cr_expect(strstr(log, "the inputs are bfloat16") && strchr(log, '\n') == strrchr(log, '\n'), "%s", log);
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --dtype half --out %s/o3 2>&1", fgt_bin(), p32[0],
             p32[1], p32[2], g_dir);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "--dtype half: %s", log);
    cr_expect(strstr(log, "--dtype must be float32, float64 or bfloat16"), "%s", log);
    /* --dtype float64 converts: the same outputs as float64 files */
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --dtype float64 --causal --out %s/a 2>&1", fgt_bin(),
             p32[0], p32[1], p32[2], g_dir);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --causal --out %s/b 2>&1", fgt_bin(), p64[0], p64[1],
             p64[2], g_dir);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    char pa[200], pbb[200];
    snprintf(pa, sizeof pa, "%s/a/o.npy", g_dir);
    snprintf(pbb, sizeof pbb, "%s/b/o.npy", g_dir);
    fg_tensor *oa = fg_npy_load(pa), *ob = fg_npy_load(pbb);
    cr_assert_not_null(oa);
    cr_assert_not_null(ob);
    cr_expect(oa->dtype == FG_F64 && !memcmp(fg_data(oa), fg_data(ob), fg_nbytes(ob)), "--dtype float64 differs");
    fg_release(oa), fg_release(ob);
    for (int i = 0; i < 3; i++) unlink(p32[i]), unlink(pb[i]), unlink(p64[i]);
    const char *sub[2] = {"a", "b"};
    for (int r = 0; r < 2; r++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s/%s'", g_dir, sub[r]);
        if (system(cmd)) {}
    }
}
