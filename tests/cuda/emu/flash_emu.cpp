/* flash_emu.cpp — the GPU flash-attention kernels (cuda/attention_kernels.cuh), run by the CPU
 * emulator (cuda_emu.h) and checked against the CPU naive kernel in float64. `make cuda-emu` builds
 * and runs it; it needs no GPU and no nvcc, so CI can run the real kernel source.
 *
 * For each shape (odd sizes, Nq ≠ Nk both ways, rows with no key, Nk = 0, head dims 8..256 covering
 * every compile-time width), causal and not, with and without dropout, float32 and float64:
 *   forward (O, lse poisoned with NaN first), then the three backward kernels into gradient
 *   buffers pre-filled with random values (the kernels must add), against the reference.
 * Global buffers carry guard zones checked after every launch (a write out of bounds fails).
 * The launch geometry is the one cuda/attention.cu uses. Exit status = number of failed cases.
 */
#include "tests/cuda/emu/cuda_emu.h"

#include <math.h>

#include "cuda/attention_kernels.cuh"
#include "ops/attention.h"

/* an array with guard zones on both sides */
template <typename T> struct gbuf {
    static constexpr size_t G = 1024;
    std::vector<T> mem;
    size_t n;
    explicit gbuf(size_t n_) : mem(n_ + 2 * G), n(n_) {
        for (size_t i = 0; i < G; i++) mem[i] = mem[G + n + i] = (T)-12345.5;
    }
    T *p() { return mem.data() + G; }
    bool intact() const {
        for (size_t i = 0; i < G; i++)
            if (mem[i] != (T)-12345.5 || mem[G + n + i] != (T)-12345.5) return false;
        return true;
    }
};

static double urand(uint64_t seed, uint64_t i) { return 2.0 * fg_u32_to_uniform_f64(fg_philox_u32(seed, 7, i)) - 1.0; }

struct shape {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
};

static unsigned row_blocks(int64_t rows) { /* fg_cu_blocks(rows * 32) without the SM cap */
    int64_t b = (rows * 32 + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b);
}

template <typename T, int D>
static void launch_all(fa_args<T> a, T *Drow, bool backward) {
    using C = flash_cfg<T, D>;
    if (!backward) {
        fg_emu_launch({(unsigned)fg_attn_ntiles(a.Nq, C::FBQ), (unsigned)a.H, (unsigned)a.B}, 256, fwd_smem<T, D>(),
                      flash_fwd_kernel<T, D>, a);
        return;
    }
    const int64_t rows = a.B * a.H * a.Nq;
    fg_emu_launch({row_blocks(rows), 1, 1}, 256, 0, flash_bwd_rowdot_kernel<T>, Drow, a.dout, a.o, rows, a.d);
    a.Drow = Drow;
    const unsigned nkt = (unsigned)fg_attn_ntiles(a.Nk, C::BBK);
    if (nkt) fg_emu_launch({nkt, (unsigned)a.H, (unsigned)a.B}, 256, dkdv_smem<T, D>(), flash_bwd_dkdv_kernel<T, D>, a);
    fg_emu_launch({(unsigned)fg_attn_ntiles(a.Nq, C::BBQ), (unsigned)a.H, (unsigned)a.B}, 256, dq_smem<T, D>(),
                  flash_bwd_dq_kernel<T, D>, a);
}

template <typename T>
static void dispatch(int D, const fa_args<T> &a, T *Drow, bool backward) {
    switch (D) {
    case 32: launch_all<T, 32>(a, Drow, backward); break;
    case 64: launch_all<T, 64>(a, Drow, backward); break;
    case 128: launch_all<T, 128>(a, Drow, backward); break;
    default: launch_all<T, 256>(a, Drow, backward); break;
    }
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
        printf("  FAIL %s %s: relative error %.3e > %.1e; worst element %zu: got %.9g, want %.9g\n", label, what, rel, tol,
               wi, got[wi], want[wi]);
        return 1;
    }
    return 0;
}

template <typename T>
static int run(const shape &s, uint64_t seed) {
    const char *dn = sizeof(T) == 8 ? "float64" : "float32";
    char label[200];
    snprintf(label, sizeof label, "[B=%lld H=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g %s]", (long long)s.B,
             (long long)s.H, (long long)s.Nq, (long long)s.Nk, (long long)s.d, s.causal, s.p, dn);
    fg_attn_opts op = fg_attn_defaults();
    op.causal = s.causal;
    op.dropout_p = s.p;
    op.seed = 1000 + seed;
    fg_attn_problem pr;
    if (fg_attn_problem_init(&pr, s.B, s.H, s.Nq, s.Nk, s.d, &op) != FG_OK) {
        printf("  FAIL %s: %s\n", label, fg_last_error());
        return 1;
    }
    const size_t nq = (size_t)(s.B * s.H * s.Nq * s.d), nk = (size_t)(s.B * s.H * s.Nk * s.d);
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
        for (size_t i = 0; i < f.b->n; i++) f.b->p()[i] = (T)(*f.src)[i];
    for (size_t i = 0; i < nq; i++) to.p()[i] = (T)NAN;
    for (size_t i = 0; i < nl; i++) tl.p()[i] = (T)NAN, tlo.p()[i] = (T)NAN, tD.p()[i] = (T)NAN;
    /* float32 runs with lse_lo (as fg_attention does), float64 without */
    T *lo = sizeof(T) == 4 ? tlo.p() : nullptr;
    fa_args<T> a = make_args<T>(&pr);
    a.q = tq.p(), a.k = tk.p(), a.v = tv.p(), a.o_out = to.p(), a.lse_out = tl.p(), a.lse_lo_out = lo;
    const int D = flash_width(s.d);
    dispatch<T>(D, a, tD.p(), false);
    a.o = to.p(), a.lse = tl.p(), a.lse_lo = lo, a.dout = tdo.p(), a.dq = tdq.p(), a.dk = tdk.p(), a.dv = tdv.p();
    dispatch<T>(D, a, tD.p(), true);
    gbuf<T> *all[] = {&tq, &tk, &tv, &tdo, &to, &tl, &tlo, &tdq, &tdk, &tdv, &tD};
    for (gbuf<T> *b : all)
        if (!b->intact()) {
            printf("  FAIL %s: a kernel wrote outside a global buffer\n", label);
            return 1;
        }
    auto as_f64 = [](gbuf<T> &b) {
        std::vector<double> r(b.n);
        for (size_t i = 0; i < b.n; i++) r[i] = (double)b.p()[i];
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

int main(int argc, char **argv) {
    const bool quick = (argc > 1 && !strcmp(argv[1], "--quick")) || getenv("FG_SANITIZE");
    static const shape shapes[] = {
        {1, 1, 1, 1, 8, 0, 0},      {1, 2, 17, 17, 16, 1, 0},  {1, 1, 65, 130, 32, 1, 0},  {1, 1, 130, 65, 32, 1, 0.1},
        {1, 1, 100, 37, 40, 0, 0.2}, {2, 1, 77, 77, 64, 1, 0.1}, {1, 1, 129, 70, 100, 0, 0}, {1, 1, 64, 64, 128, 1, 0},
        {1, 1, 33, 70, 256, 1, 0.3}, {1, 1, 40, 1, 24, 1, 0},   {1, 1, 7, 0, 16, 0, 0},     {1, 1, 150, 150, 64, 0, 0},
    };
    int fails = 0, n = 0;
    printf("flash kernels under the CPU emulator (cuda/attention_kernels.cuh vs CPU naive float64)\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (quick && shapes[i].Nq * shapes[i].Nk > 5000) continue;
        fails += run<float>(shapes[i], i + 1);
        fails += run<double>(shapes[i], i + 101);
        n += 2;
    }
    printf("flash_emu: %d of %d cases failed\n", fails, n);
    return fails > 255 ? 255 : fails;
}
