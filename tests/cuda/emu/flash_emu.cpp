/* flash_emu.cpp — the GPU flash-attention kernels (cuda/attention_kernels.cuh), run by the CPU
 * emulator (cuda_emu.h) and checked against the CPU naive kernel in float64. `make cuda-emu` builds
 * and runs it; it needs no GPU and no nvcc, so CI can run the real kernel source.
 *
 * For each shape (odd sizes, Nq ≠ Nk both ways, rows with no key, Nk = 0, head dims 8..256 covering
 * every compile-time width), causal and not, with and without dropout, float32 and float64, and
 * with the built-in variants (GQA and multi-query, sliding windows, ALiBi with standard and user
 * slopes, softcapping, all of them at once):
 *   forward (O, lse poisoned with NaN first), then the three backward kernels into gradient
 *   buffers pre-filled with random values (the kernels must add), against the reference.
 * The buffers are emulated device memory (cudaMalloc'd, filled and read back with cudaMemcpy) with
 * guard zones on both sides, checked after the launches (a write out of bounds fails).
 * The launch geometry is the one cuda/attention.cu uses. First, the tile schedule of the kernels
 * (fa_tile_kind, fa_key_tiles with its FULL range, fa_query_tiles) is checked against
 * ops/shared/attn_variant.h's fg_attn_tile_kind_window and against brute force over the elements, for
 * many windows and sizes.
 * Exit status = number of failed cases.
 */
#include "tests/cuda/emu/cuda_emu.h"

#include <cuda_runtime.h>
#include <math.h>

#include "cuda/attention_kernels.cuh"
#include "ops/attention_kernels.h"

/* n elements of device memory between two guard zones, with a host copy (h) that upload() sends
 * and download() fetches */
template <typename T> struct gbuf {
    static constexpr size_t G = 1024;
    static constexpr double GUARD = -12345.5;
    size_t n;
    std::vector<T> h;
    T *d = nullptr;
    explicit gbuf(size_t n_) : n(n_), h(n_) {
        if (cudaMalloc(&d, (n + 2 * G) * sizeof(T)) != cudaSuccess) {
            fprintf(stderr, "flash_emu: cudaMalloc of %zu elements failed\n", n + 2 * G);
            exit(1);
        }
    }
    ~gbuf() { cudaFree(d); }
    gbuf(const gbuf &) = delete;
    gbuf &operator=(const gbuf &) = delete;
    T *p() { return d + G; }
    void upload() {
        std::vector<T> all(n + 2 * G, (T)GUARD);
        std::copy(h.begin(), h.end(), all.begin() + G);
        cudaMemcpy(d, all.data(), all.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
    /* false when a guard element changed */
    bool download() {
        std::vector<T> all(n + 2 * G);
        cudaMemcpy(all.data(), d, all.size() * sizeof(T), cudaMemcpyDeviceToHost);
        std::copy(all.begin() + G, all.begin() + G + n, h.begin());
        for (size_t i = 0; i < G; i++)
            if (all[i] != (T)GUARD || all[G + n + i] != (T)GUARD) return false;
        return true;
    }
};

static double urand(uint64_t seed, uint64_t i) { return 2.0 * fg_u32_to_uniform_f64(fg_philox_u32(seed, 7, i)) - 1.0; }

struct shape {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
    /* variants: K/V heads (0 = H), window (wl, wr; win 0 = none), alibi (1 standard slopes, 2 the
     * user's), softcap (0 = off), score scale (0 = 1/sqrt(d)) */
    int64_t Hkv = 0;
    int win = 0;
    int64_t wl = 0, wr = 0;
    int alibi = 0;
    double softcap = 0, scale = 0;
};

/* user ALiBi slopes (alibi = 2), for up to 8 heads: deliberately not the standard ones */
static const double user_slopes[8] = {0.3, 0.05, 1.25, 0.0, 0.7, 0.01, 0.5, 2.0};

static unsigned row_blocks(int64_t rows) { /* fg_cu_blocks(rows * 32) without the SM cap */
    int64_t b = (rows * 32 + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b);
}

template <typename T, int D, bool MODS> static void launch_all(fa_args<T> a, T *Drow, bool backward) {
    using C = flash_cfg<T, D>;
    if (!backward) {
        fg_emu_launch({(unsigned)fg_attn_ntiles(a.Nq, C::FBQ), (unsigned)a.H, (unsigned)a.B}, 256, fwd_smem<T, D>(),
                      flash_fwd_kernel<T, D, MODS>, a);
        return;
    }
    const int64_t rows = a.B * a.H * a.Nq;
    fg_emu_launch({row_blocks(rows), 1, 1}, 256, 0, flash_bwd_rowdot_kernel<T>, Drow, a.dout, a.o, rows, a.d);
    a.Drow = Drow;
    /* dK, dV: one block per (key tile, K/V head, b) */
    const unsigned nkt = (unsigned)fg_attn_ntiles(a.Nk, C::BBK);
    if (nkt)
        fg_emu_launch({nkt, (unsigned)a.Hkv, (unsigned)a.B}, 256, dkdv_smem<T, D>(), flash_bwd_dkdv_kernel<T, D, MODS>,
                      a);
    fg_emu_launch({(unsigned)fg_attn_ntiles(a.Nq, C::BBQ), (unsigned)a.H, (unsigned)a.B}, 256, dq_smem<T, D>(),
                  flash_bwd_dq_kernel<T, D, MODS>, a);
}

template <typename T, bool MODS> static void dispatch_d(int D, const fa_args<T> &a, T *Drow, bool backward) {
    switch (D) {
    case 32:
        launch_all<T, 32, MODS>(a, Drow, backward);
        break;
    case 64:
        launch_all<T, 64, MODS>(a, Drow, backward);
        break;
    case 128:
        launch_all<T, 128, MODS>(a, Drow, backward);
        break;
    default:
        launch_all<T, 256, MODS>(a, Drow, backward);
        break;
    }
}
template <typename T> static void dispatch(int D, const fa_args<T> &a, T *Drow, bool backward) {
    if (fa_mods(a))
        dispatch_d<T, true>(D, a, Drow, backward);
    else
        dispatch_d<T, false>(D, a, Drow, backward);
}

static int compare(const char *what, const char *label, const double *got, const double *want, size_t n, double tol) {
    double num = 0, den = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(want[i]) || !isfinite(got[i])) {
            if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) {
                printf("  FAIL %s %s: element %zu is %g, expected %g\n", label, what, i, got[i], want[i]);
                return 1;
            }
            continue;
        }
        double e = fabs(got[i] - want[i]);
        num += e * e;
        den += want[i] * want[i];
        if (e > worst) worst = e, wi = i;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (rel > tol) {
        printf("  FAIL %s %s: relative error %.3e > %.1e; worst element %zu: got %.9g, want %.9g\n", label, what, rel,
               tol, wi, got[wi], want[wi]);
        return 1;
    }
    return 0;
}

template <typename T> static int run(const shape &s, uint64_t seed) {
    const char *dn = sizeof(T) == 8 ? "float64" : "float32";
    char label[200];
    const int64_t Hkv = s.Hkv ? s.Hkv : s.H;
    char var[120] = "";
    if (s.Hkv) snprintf(var + strlen(var), sizeof var - strlen(var), " Hkv=%lld", (long long)s.Hkv);
    if (s.win)
        snprintf(var + strlen(var), sizeof var - strlen(var), " window=%lld,%lld", (long long)s.wl, (long long)s.wr);
    if (s.alibi) snprintf(var + strlen(var), sizeof var - strlen(var), " alibi%s", s.alibi == 2 ? "(user)" : "");
    if (s.softcap > 0) snprintf(var + strlen(var), sizeof var - strlen(var), " softcap=%g", s.softcap);
    if (s.scale) snprintf(var + strlen(var), sizeof var - strlen(var), " scale=%g", s.scale);
    /* tiles copied in 16-byte chunks (as fa_vec16 allows for these aligned buffers), or one case in
     * four element by element (the path for unaligned views and odd head dims) */
    const bool chunks = seed % 4 != 0;
    snprintf(label, sizeof label, "[B=%lld H=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g%s %s%s]", (long long)s.B,
             (long long)s.H, (long long)s.Nq, (long long)s.Nk, (long long)s.d, s.causal, s.p, var, dn,
             chunks ? "" : " element copies");
    fg_attn_opts op = fg_attn_defaults();
    op.causal = s.causal;
    op.dropout_p = s.p;
    op.seed = 1000 + seed;
    op.scale = s.scale;
    op.variant.n_kv_heads = Hkv;
    op.variant.window = s.win;
    op.variant.window_left = s.wl;
    op.variant.window_right = s.wr;
    op.variant.alibi = s.alibi != 0;
    op.variant.alibi_slopes = s.alibi == 2 ? user_slopes : nullptr;
    op.variant.softcap = s.softcap;
    if (s.alibi == 2 && s.H > 8) {
        printf("  FAIL %s: at most 8 heads with user slopes\n", label);
        return 1;
    }
    fg_attn_problem pr;
    if (fg_attn_problem_init(&pr, s.B, s.H, s.Nq, s.Nk, s.d, &op) != FG_OK) {
        printf("  FAIL %s: %s\n", label, fg_last_error());
        return 1;
    }
    const size_t nq = (size_t)(s.B * s.H * s.Nq * s.d), nk = (size_t)(s.B * Hkv * s.Nk * s.d);
    const size_t nl = (size_t)(s.B * s.H * s.Nq), np = (size_t)(s.B * s.H * s.Nq * s.Nk);
    /* inputs, rounded to T, and the float64 reference */
    std::vector<double> q(nq), k(nk), v(nk), dout(nq), g0q(nq), g0k(nk), g0v(nk);
    std::vector<double> *ins[] = {&q, &k, &v, &dout, &g0q, &g0k, &g0v};
    for (int a = 0; a < 7; a++)
        for (size_t i = 0; i < ins[a]->size(); i++) (*ins[a])[i] = (double)(T)urand(seed * 10 + a, i);
    std::vector<double> ro(nq + 1), rl(nl + 1), rp(np + 1), rdq = g0q, rdk = g0k, rdv = g0v;
    if (fg_attn_naive_forward_f64(ro.data(), rl.data(), rp.data(), q.data(), k.data(), v.data(), &pr) != FG_OK ||
        fg_attn_naive_backward_f64(rdq.data(), rdk.data(), rdv.data(), dout.data(), q.data(), k.data(), v.data(),
                                   rp.data(), &pr) != FG_OK) {
        printf("  FAIL %s reference: %s\n", label, fg_last_error());
        return 1;
    }
    /* the "device" buffers */
    gbuf<T> tq(nq), tk(nk), tv(nk), tdo(nq), to(nq), tl(nl), tlo(nl), tdq(nq), tdk(nk), tdv(nk), tD(nl);
    struct {
        gbuf<T> *b;
        const std::vector<double> *src;
    } fill[] = {{&tq, &q}, {&tk, &k}, {&tv, &v}, {&tdo, &dout}, {&tdq, &g0q}, {&tdk, &g0k}, {&tdv, &g0v}};
    for (auto &f : fill)
        for (size_t i = 0; i < f.b->n; i++) f.b->h[i] = (T)(*f.src)[i];
    for (size_t i = 0; i < nq; i++) to.h[i] = (T)NAN;
    for (size_t i = 0; i < nl; i++) tl.h[i] = (T)NAN, tlo.h[i] = (T)NAN, tD.h[i] = (T)NAN;
    gbuf<T> *all[] = {&tq, &tk, &tv, &tdo, &to, &tl, &tlo, &tdq, &tdk, &tdv, &tD};
    for (gbuf<T> *b : all) b->upload();
    /* user ALiBi slopes: device memory, as cuda/attention.cu uploads them */
    gbuf<double> slopes(pr.var.alibi_slopes ? (size_t)s.H : 0);
    if (pr.var.alibi_slopes) {
        for (int64_t h = 0; h < s.H; h++) slopes.h[(size_t)h] = pr.var.alibi_slopes[h];
        slopes.upload();
    }
    /* float32 runs with lse_lo (as fg_attention does), float64 without */
    T *lo = sizeof(T) == 4 ? tlo.p() : nullptr;
    fa_args<T> a = make_args<T>(&pr);
    a.slopes = pr.var.alibi_slopes ? slopes.p() : nullptr;
    a.q = tq.p(), a.k = tk.p(), a.v = tv.p(), a.o_out = to.p(), a.lse_out = tl.p(), a.lse_lo_out = lo;
    const int D = flash_width(s.d);
    a.vec16 = chunks ? fa_vec16(a) : 0;
    dispatch<T>(D, a, tD.p(), false);
    a.o = to.p(), a.lse = tl.p(), a.lse_lo = lo, a.dout = tdo.p(), a.dq = tdq.p(), a.dk = tdk.p(), a.dv = tdv.p();
    a.vec16 = chunks ? fa_vec16(a) : 0;
    dispatch<T>(D, a, tD.p(), true);
    for (gbuf<T> *b : all)
        if (!b->download()) {
            printf("  FAIL %s: a kernel wrote outside a global buffer\n", label);
            return 1;
        }
    auto as_f64 = [](gbuf<T> &b) {
        std::vector<double> r(b.n);
        for (size_t i = 0; i < b.n; i++) r[i] = (double)b.h[i];
        return r;
    };
    const double tol = sizeof(T) == 8 ? 1e-10 : 1e-4;
    int bad = 0;
    bad |= compare("O", label, as_f64(to).data(), ro.data(), nq, tol);
    bad |= compare("lse", label, as_f64(tl).data(), rl.data(), nl, tol);
    bad |= compare("dQ (+= into random)", label, as_f64(tdq).data(), rdq.data(), nq, tol);
    bad |= compare("dK (+= into random)", label, as_f64(tdk).data(), rdk.data(), nk, tol);
    bad |= compare("dV (+= into random)", label, as_f64(tdv).data(), rdv.data(), nk, tol);
    if (!bad) printf("  ok   %s\n", label);
    return bad;
}

/* The kernels' tile schedule against fg_attn_tile_kind_window and brute force, for tiles BQ × BK:
 * fa_tile_kind must give fg_attn_tile_kind_window's answer (FULL demoted to PARTIAL where key
 * padding follows), a MASKED tile must have no visible element and a FULL one only visible ones,
 * and every tile with a visible element must lie in fa_key_tiles of its query tile and in
 * fa_query_tiles of its key tile. Returns the number of failed configurations. */
template <int BQ, int BK>
static int check_schedule(int64_t Nq, int64_t Nk, int causal, int win, int64_t wl, int64_t wr) {
    fa_args<double> a;
    memset(&a, 0, sizeof a);
    a.Nq = Nq, a.Nk = Nk, a.causal = causal, a.window = win, a.wl = wl, a.wr = wr;
    const int64_t nqt = fg_attn_ntiles(Nq, BQ), nkt = fg_attn_ntiles(Nk, BK);
    for (int64_t qt = 0; qt < nqt; qt++)
        for (int64_t kt = 0; kt < nkt; kt++) {
            const int64_t i0 = qt * BQ, j0 = kt * BK;
            const int64_t nq = Nq - i0 < BQ ? Nq - i0 : BQ, nk = Nk - j0 < BK ? Nk - j0 : BK;
            int64_t seen = 0;
            for (int64_t i = i0; i < i0 + nq; i++)
                for (int64_t j = j0; j < j0 + nk; j++) seen += fg_attn_in_window(i, j, Nq, Nk, causal, win, wl, wr);
            fg_tile_kind ref = fg_attn_tile_kind_window(i0, nq, j0, nk, Nq, Nk, causal, win, wl, wr);
            if (ref == FG_TILE_FULL && nk < BK) ref = FG_TILE_PARTIAL;
            const fg_tile_kind got = fa_tile_kind<double, BQ, BK>(a, i0, j0);
            int64_t kt0, kt1, kf0, kf1, qt0, qt1;
            fa_key_tiles<double, BQ, BK>(a, i0, &kt0, &kt1, &kf0, &kf1);
            fa_query_tiles<double, BQ, BK>(a, j0, &qt0, &qt1);
            const fg_tile_kind fast = kt >= kf0 && kt < kf1 ? FG_TILE_FULL : FG_TILE_PARTIAL; /* forward, dQ */
            const char *bad = nullptr;
            if (got != ref)
                bad = "fa_tile_kind differs from fg_attn_tile_kind_window";
            else if (kt >= kt0 && kt < kt1 && fast != ref)
                bad = "fa_key_tiles' FULL range differs from fg_attn_tile_kind_window inside the key-tile range";
            else if (got == FG_TILE_MASKED && seen)
                bad = "a MASKED tile has visible elements";
            else if (got == FG_TILE_FULL && seen != nq * nk)
                bad = "a FULL tile has masked elements";
            else if (seen && (kt < kt0 || kt >= kt1))
                bad = "fa_key_tiles leaves out a tile with visible elements";
            else if (seen && (qt < qt0 || qt >= qt1))
                bad = "fa_query_tiles leaves out a tile with visible elements";
            if (bad) {
                printf(
                    "  FAIL schedule %dx%d Nq=%lld Nk=%lld causal=%d window=%d(%lld,%lld) tile (%lld, %lld): %s "
                    "(kind %d, reference %d, %lld of %lld visible, key tiles [%lld, %lld), query tiles [%lld, %lld))\n",
                    BQ, BK, (long long)Nq, (long long)Nk, causal, win, (long long)wl, (long long)wr, (long long)qt,
                    (long long)kt, bad, (int)got, (int)ref, (long long)seen, (long long)(nq * nk), (long long)kt0,
                    (long long)kt1, (long long)qt0, (long long)qt1);
                return 1;
            }
        }
    return 0;
}

static int check_schedules(int *n) {
    static const int64_t Nqs[] = {1, 5, 17, 64, 65, 100, 130}, Nks[] = {0, 1, 7, 64, 65, 99, 150};
    static const int64_t wins[][3] = {{0, 0, 0},   {1, 0, 0},  {1, 3, -1}, {1, -1, 2},  {1, 10, 5},
                                      {1, -1, -1}, {1, 70, 0}, {1, 0, 70}, {1, 1, 200}, {1, 33, 31}};
    int fails = 0;
    for (int64_t Nq : Nqs)
        for (int64_t Nk : Nks)
            for (int causal = 0; causal < 2; causal++)
                for (const auto &w : wins) {
                    fails += check_schedule<64, 64>(Nq, Nk, causal, (int)w[0], w[1], w[2]);
                    fails += check_schedule<32, 32>(Nq, Nk, causal, (int)w[0], w[1], w[2]);
                    fails += check_schedule<16, 16>(Nq, Nk, causal, (int)w[0], w[1], w[2]);
                    *n += 3;
                }
    return fails;
}

int main(int argc, char **argv) {
    const bool quick = (argc > 1 && !strcmp(argv[1], "--quick")) || getenv("FG_SANITIZE");
    static const shape shapes[] = {
        {1, 1, 1, 1, 8, 0, 0},
        {1, 2, 17, 17, 16, 1, 0},
        {1, 1, 65, 130, 32, 1, 0},
        {1, 1, 130, 65, 32, 1, 0.1},
        {1, 1, 100, 37, 40, 0, 0.2},
        {2, 1, 77, 77, 64, 1, 0.1},
        {1, 1, 129, 70, 100, 0, 0},
        {1, 1, 64, 64, 128, 1, 0},
        {1, 1, 33, 70, 256, 1, 0.3},
        {1, 1, 40, 1, 24, 1, 0},
        {1, 1, 7, 0, 16, 0, 0},
        {1, 1, 150, 150, 64, 0, 0},
        /* variants (B, H, Nq, Nk, d, causal, p, Hkv, window, wl, wr, alibi, softcap, scale) */
        {2, 4, 37, 53, 16, 1, 0, 2},                          /* GQA 4:2, Nq < Nk */
        {1, 3, 65, 40, 32, 0, 0.2, 1},                        /* multi-query, dropout, Nq > Nk */
        {1, 2, 140, 140, 32, 1, 0, 0, 1, 20, -1},             /* causal + left window: key tiles skipped */
        {1, 1, 70, 150, 24, 0, 0.1, 0, 1, 5, 7},              /* two-sided window, Nq < Nk, dropout */
        {1, 1, 150, 60, 40, 1, 0, 0, 1, 3, 3},                /* window ∧ causal with rows that see nothing */
        {1, 1, 45, 45, 16, 0, 0, 0, 1, 0, 0},                 /* diagonal only */
        {1, 6, 45, 77, 16, 1, 0, 0, 0, 0, 0, 1},              /* ALiBi, standard slopes of 6 heads */
        {2, 2, 33, 33, 32, 0, 0.25, 0, 0, 0, 0, 2},           /* ALiBi, user slopes, dropout */
        {1, 2, 64, 100, 64, 0, 0, 0, 0, 0, 0, 0, 3.0, 1.0},   /* softcap 3 on scores of scale 1 */
        {1, 1, 50, 50, 16, 1, 0.1, 0, 0, 0, 0, 0, 0.5},       /* softcap 0.5 (nearly every score capped) */
        {2, 4, 97, 75, 40, 1, 0.2, 2, 1, 16, 2, 1, 4.0, 0.8}, /* everything at once */
        {1, 2, 40, 70, 256, 1, 0, 1, 1, 9, -1, 2, 2.0},       /* d = 256 (smaller backward tiles), all */
    };
    int fails = 0, n = 0;
    printf("flash tile schedule (fa_tile_kind, fa_key_tiles, fa_query_tiles) against ops/shared/attn_variant.h\n");
    const int sched_fails = check_schedules(&n);
    printf("  %s %d configurations\n", sched_fails ? "FAIL" : "ok  ", n);
    fails += sched_fails;
    n = 0;
    printf("flash kernels under the CPU emulator (cuda/attention_kernels.cuh vs CPU naive float64)\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (quick && shapes[i].Nq * shapes[i].Nk > 5000) continue;
        fails += run<float>(shapes[i], i + 1);
        fails += run<double>(shapes[i], i + 101);
        n += 2;
    }
    printf("flash_emu: %d of %d cases failed (and %d tile-schedule configurations)\n", fails - sched_fails, n,
           sched_fails);
    return fails > 255 ? 255 : fails;
}
