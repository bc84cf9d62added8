/* emu_runtime.cpp — the runtime of the CUDA emulator (cuda_emu.h): fibers and their scheduler,
 * barriers and warp rendezvous, the memory-access hooks behind -fsanitize=thread (shared-memory
 * race, initialization and bounds checks, alignment, host-memory checks, the undo log that lets a
 * block run under several schedules), the device address range and its page protection, and the
 * reports. This file is compiled without instrumentation; everything it runs is invisible to the
 * hooks.
 *
 * Shared memory shadow (racecheck semantics): per 4-byte word, the barrier interval ("epoch") and
 * thread of the last write, and the epoch and first two threads of the reads in the current
 * epoch. Epochs are numbered across the whole run, so a new block needs no reset: a word whose
 * last write is older than the block's first epoch is uninitialized. A thread's own accesses
 * never conflict; shuffles do not order shared memory (as on the GPU, where only __syncwarp and
 * barriers do).
 */
#include "tests/cuda/emu/cuda_emu.h"
#include "tests/cuda/emu/emu_internal.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

/* x86-64 switches fibers with a few instructions; elsewhere (or with -DFG_EMU_UCONTEXT) ucontext */
#if defined(__x86_64__) && !defined(FG_EMU_UCONTEXT)
#define FG_EMU_ASM_SWITCH 1
#else
#define FG_EMU_ASM_SWITCH 0
#endif

/* ============================================================================================
 * state
 * ============================================================================================ */

enum { T_RUN, T_BAR, T_WARP, T_DONE };

struct fg_emu_fiber {
    fg_emu_thread th; /* first: fg_emu_cur points here */
    int state;
    const void *wait_pc; /* where it waits (T_BAR, T_WARP) */
    uint64_t result;     /* of its last warp op */
#if FG_EMU_ASM_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    char *stack_lo, *stack_hi;
};

/* one pending warp rendezvous: the lanes of `mask` meeting at one intrinsic */
struct fg_emu_rdv {
    int active, op;
    unsigned mask, arrived;
    const void *pc;
    const char *shape;        /* FG_EMU_COLLECTIVE: the instruction and shape the lanes must agree on */
    fg_emu_collective_fn fn;  /* FG_EMU_COLLECTIVE: runs once, when the last lane arrives */
    uint64_t val[32];
    int arg[32], width[32];
};
#define FG_EMU_RDV_PER_WARP 4

struct fg_emu_shadow { /* one 4-byte word of shared memory */
    uint64_t w_ep, r_ep;
    const void *w_pc, *r_pc, *r2_pc;
    uint16_t w_tid, r_tid, r2_tid, r_multi;
};
#define FG_EMU_NOBODY 0xffffu

fg_emu_thread *fg_emu_cur;
fg_emu_launch_state fg_emu_ls;
alignas(64) unsigned char fg_emu_param_space[FG_EMU_PARAM_LIMIT + 128];

static constexpr size_t STACK_BYTES = 256 * 1024, PAGE = 4096, SMEM_GUARD = 64 * 1024;
static constexpr size_t DEV_RESERVE = (size_t)256 << 30; /* address space for device allocations */
static constexpr size_t DEV_CAPACITY = (size_t)8 << 30;  /* totalGlobalMem of the emulated device */

static struct {
    int ready;
    int schedules;
    uint64_t seed;
    /* address ranges the hooks classify against */
    uintptr_t stack_lo, stack_len; /* all fiber stacks, with their guard pages */
    uintptr_t smem_lo, smem_span;  /* the dynamic shared memory buffer and its guard */
    size_t smem_size;              /* of the running launch */
    uintptr_t tls_lo, tls_len;     /* static shared memory: the main thread's TLS block */
    uintptr_t dev_lo, dev_len;     /* the device range */
    uintptr_t img_lo, img_len;     /* the program's static image (code, rodata, data, bss) */
    /* the running launch */
    int in_kernel; /* fibers are running: the hooks check */
    const void *kernel;
    void (*body)();
    unsigned nthreads;
    uint64_t launch_serial;
    int sched; /* schedule of the running block */
    fg_emu_fiber fibers[1024];
    void *sched_sp;
    ucontext_t sched_ctx;
    int bar_count;
    fg_emu_rdv rdv[32][FG_EMU_RDV_PER_WARP];
    uint64_t ep, blk_ep0;
    fg_emu_shadow *sh_dyn, *sh_tls;
    /* reports */
    int errors, fatal;
    int reported; /* printed in this launch */
    /* undo log of global writes (only when a block runs under several schedules) */
    int logging;
    uint32_t ugen;
} R; /* trivially constructed: usable before and during static initialization */

/* the containers of the runtime, created by init() */
static struct fg_emu_heap {
    std::vector<std::pair<const void *, const void *>> seen; /* (pc, pc) pairs already reported */
    std::vector<uintptr_t> ukey;                             /* undo log: 8-byte granules, first-write order */
    std::vector<uint64_t> uold, ufinal;
    std::vector<uint32_t> utab, utab_gen; /* granule -> index, valid where utab_gen == R.ugen */
} * H;

#if FG_EMU_ASM_SWITCH
static uint32_t fg_emu_csr_init[2]; /* mxcsr and the x87 control word a new fiber starts with */
#endif

/* ============================================================================================
 * symbols and reports
 * ============================================================================================ */

static uintptr_t g_exe_base;
static char g_exe_path[4096];

/* "file:line (function)" of a code address, innermost inline frame first, via addr2line */
static std::string where(const void *pc, bool is_return_address = true) {
    static std::map<const void *, std::string> cache;
    auto it = cache.find(pc);
    if (it != cache.end()) return it->second;
    char buf[64];
    snprintf(buf, sizeof buf, "%p", pc);
    std::string out = buf;
    Dl_info di;
    if (pc && dladdr(pc, &di) && di.dli_fname) {
        const bool exe = (uintptr_t)di.dli_fbase == g_exe_base;
        uintptr_t off = (uintptr_t)pc - (exe ? g_exe_base : (uintptr_t)di.dli_fbase) - (is_return_address ? 1 : 0);
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", exe ? g_exe_path : di.dli_fname,
                 (unsigned long)off);
        fflush(NULL);
        if (FILE *p = popen(cmd, "r")) {
            char fn[2048], loc[2048];
            std::vector<std::pair<std::string, std::string>> frames;
            while (fgets(fn, sizeof fn, p) && fgets(loc, sizeof loc, p)) {
                fn[strcspn(fn, "\n")] = 0;
                loc[strcspn(loc, "\n")] = 0;
                char *l = loc;
                char cwd[1024];
                if (getcwd(cwd, sizeof cwd) && !strncmp(l, cwd, strlen(cwd)) && l[strlen(cwd)] == '/')
                    l += strlen(cwd) + 1;
                if (char *d = strstr(l, " (discriminator")) *d = 0;
                std::string f = fn;
                if (f.size() > 90) f = f.substr(0, 87) + "...";
                frames.push_back({l, f});
            }
            pclose(p);
            /* the innermost frame outside the emulator's own header and the device wrappers of
             * cuda/ptx_async.cuh (their intrinsics are inlined) */
            size_t i = 0;
            while (i + 1 < frames.size() && (frames[i].first.find("tests/cuda/emu/cuda_emu.h") != std::string::npos ||
                                             frames[i].first.find("cuda/ptx_async.cuh") != std::string::npos))
                i++;
            if (!frames.empty() && frames[i].first.find("??") == std::string::npos) {
                out = frames[i].first + " (" + frames[i].second + ")";
                if (i + 1 < frames.size()) out += " inlined into " + frames.back().first;
            }
        }
    }
    cache[pc] = out;
    return out;
}

static std::string kernel_name() {
    static std::map<const void *, std::string> cache;
    auto it = cache.find(R.kernel);
    if (it != cache.end()) return it->second;
    std::string s = "?";
    Dl_info di;
    if (R.kernel && dladdr(R.kernel, &di) && (uintptr_t)di.dli_fbase == g_exe_base) {
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "addr2line -C -f -e '%s' 0x%lx 2>/dev/null", g_exe_path,
                 (unsigned long)((uintptr_t)R.kernel - g_exe_base));
        fflush(NULL);
        if (FILE *p = popen(cmd, "r")) {
            char fn[4096];
            if (fgets(fn, sizeof fn, p)) {
                fn[strcspn(fn, "\n")] = 0;
                if (strcmp(fn, "??")) s = fn;
            }
            pclose(p);
        }
    }
    if (s.size() > 160) s = s.substr(0, 157) + "...";
    return cache[R.kernel] = s;
}

static const char *sched_name(int s) {
    static char buf[64];
    if (s == 0) return "thread-id order";
    if (s == 1) return "reversed order";
    snprintf(buf, sizeof buf, "random order %d (FG_EMU_SEED=%llu)", s - 1, (unsigned long long)R.seed);
    return buf;
}

static void print_host_stack(int skip) {
    void *frames[48];
    int n = backtrace(frames, 48);
    fprintf(stderr, "cuda_emu: host call stack:\n");
    for (int i = skip; i < n; i++) {
        std::string w = where(frames[i]);
        if (w.find("emu_runtime.cpp") != std::string::npos || w.find("csu/") != std::string::npos ||
            w.rfind("0x", 0) == 0)
            continue;
        fprintf(stderr, "    %s\n", w.c_str());
    }
}

/* the context line of a report from inside a launch */
static void report_head() {
    if (R.reported++ == 0)
        fprintf(stderr, "cuda_emu: in kernel %s, block (%u, %u, %u) of grid (%u, %u, %u) x %u threads, %s:\n",
                kernel_name().c_str(), fg_emu_ls.bidx.x, fg_emu_ls.bidx.y, fg_emu_ls.bidx.z, fg_emu_ls.gdim.x,
                fg_emu_ls.gdim.y, fg_emu_ls.gdim.z, R.nthreads, sched_name(R.sched));
}

/* an error inside a launch; the launch aborts at the end of the block (or at once when fatal) */
static void vreport(const char *fmt, va_list ap) {
    R.errors++;
    if (R.reported > 12) return;
    report_head();
    if (R.reported > 12) {
        fprintf(stderr, "  (further reports of this launch suppressed)\n");
        return;
    }
    fprintf(stderr, "  ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}
void fg_emu_report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}
std::string fg_emu_where(const void *pc) { return where(pc); }

[[noreturn]] static void launch_abort() {
    fprintf(stderr, "cuda_emu: %d problem%s in kernel %s; the launch came from:\n", R.errors, R.errors == 1 ? "" : "s",
            kernel_name().c_str());
    print_host_stack(2);
    fflush(NULL);
    abort();
}

void fg_emu_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    print_host_stack(1);
    fflush(NULL);
    abort();
}

/* ============================================================================================
 * fibers
 * ============================================================================================ */

#if FG_EMU_ASM_SWITCH
/* fg_emu_switch(&save_sp, to_sp): save the callee-saved registers and the FP control words on
 * this stack, switch stacks, restore them from the other (no signal-mask syscall, unlike
 * swapcontext) */
extern "C" void fg_emu_switch(void **save, void *to);
asm(R"(
    .pushsection .text
    .globl fg_emu_switch
    .type fg_emu_switch, @function
fg_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fg_emu_switch, .-fg_emu_switch
    .popsection
)");
#endif

static void fiber_entry();

static void to_scheduler(fg_emu_fiber *f) {
#if FG_EMU_ASM_SWITCH
    fg_emu_switch(&f->sp, R.sched_sp);
#else
    swapcontext(&f->ctx, &R.sched_ctx);
#endif
}
static void to_fiber(fg_emu_fiber *f) {
    fg_emu_cur = &f->th;
#if FG_EMU_ASM_SWITCH
    fg_emu_switch(&R.sched_sp, f->sp);
#else
    swapcontext(&R.sched_ctx, &f->ctx);
#endif
}
static void fiber_start(fg_emu_fiber *f) {
#if FG_EMU_ASM_SWITCH
    uint64_t *sp = (uint64_t *)((uintptr_t)f->stack_hi & ~(uintptr_t)15);
    *--sp = 0;                             /* entry's return address: none */
    *--sp = (uint64_t)&fiber_entry;        /* where fg_emu_switch returns to */
    for (int i = 0; i < 6; i++) *--sp = 0; /* rbp rbx r12 r13 r14 r15 */
    --sp;
    memcpy(sp, fg_emu_csr_init, 8); /* mxcsr, x87 control word */
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack_lo;
    f->ctx.uc_stack.ss_size = (size_t)(f->stack_hi - f->stack_lo);
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_entry, 0);
#endif
}

/* ============================================================================================
 * device memory: a reserved range, PROT_NONE outside device work
 * ============================================================================================ */

struct fg_emu_alloc {
    uintptr_t region, region_len; /* data pages + the guard page after them */
    uintptr_t base;
    size_t n;
    int live;
};
static std::map<uintptr_t, fg_emu_alloc> &allocs() { /* by region; never destroyed (exit-time frees use it) */
    static auto *m = new std::map<uintptr_t, fg_emu_alloc>;
    return *m;
}
static uintptr_t g_dev_next;
static size_t g_dev_live;
static thread_local int tl_dev_depth;
static fg_emu_alloc *g_opened[8192];
static int g_nopened;

static fg_emu_alloc *alloc_at(uintptr_t a) {
    auto it = allocs().upper_bound(a);
    if (it == allocs().begin()) return nullptr;
    --it;
    fg_emu_alloc &al = it->second;
    return a < al.region + al.region_len ? &al : nullptr;
}

static void init();

void *fg_emu_dev_malloc(size_t n) {
    init();
    if (n > DEV_CAPACITY || g_dev_live + n > DEV_CAPACITY) return nullptr;
    const size_t bytes = ((n ? n : 1) + 255) & ~(size_t)255;
    const size_t pages = (bytes + PAGE - 1) / PAGE;
    const uintptr_t region = g_dev_next, len = (pages + 1) * PAGE;
    if (region + len > R.dev_lo + R.dev_len) return nullptr; /* the range is used up (never reused) */
    g_dev_next += len;
    fg_emu_alloc al = {region, len, region + pages * PAGE - bytes, n, 1};
    allocs()[region] = al;
    g_dev_live += n;
    /* device memory starts as garbage: NaN bytes */
    mprotect((void *)region, pages * PAGE, PROT_READ | PROT_WRITE);
    memset((void *)al.base, 0xff, bytes);
    if (tl_dev_depth == 0)
        mprotect((void *)region, pages * PAGE, PROT_NONE);
    else
        g_opened[g_nopened++] = &allocs()[region];
    return (void *)al.base;
}

int fg_emu_dev_free(void *p) {
    fg_emu_alloc *al = alloc_at((uintptr_t)p);
    if (!al || !al->live || al->base != (uintptr_t)p) return -1;
    al->live = 0;
    g_dev_live -= al->n;
    for (int i = 0; i < g_nopened; i++)
        if (g_opened[i] == al) g_opened[i] = g_opened[--g_nopened];
    /* the pages stay reserved and PROT_NONE: a later use of the pointer faults */
    mprotect((void *)al->region, al->region_len, PROT_NONE);
    madvise((void *)al->region, al->region_len, MADV_DONTNEED);
    return 0;
}

int fg_emu_dev_find(const void *p, uintptr_t *base, size_t *size) {
    const uintptr_t a = (uintptr_t)p;
    if (a - R.dev_lo >= R.dev_len) return 0;
    fg_emu_alloc *al = alloc_at(a);
    if (!al || !al->live || a < al->base || a >= al->base + (al->n ? al->n : 1)) return -1;
    if (base) *base = al->base;
    if (size) *size = al->n;
    return 1;
}

/* "byte 12 of a 4096-byte device allocation at 0x…", or why it is in none */
static std::string describe_device(uintptr_t a) {
    char buf[200];
    fg_emu_alloc *al = alloc_at(a);
    if (!al)
        snprintf(buf, sizeof buf, "an address of the device range that was never allocated");
    else if (a >= al->base && a < al->base + al->n)
        snprintf(buf, sizeof buf, "byte %zu of a %zu-byte device allocation at %p%s", (size_t)(a - al->base), al->n,
                 (void *)al->base, al->live ? "" : " that was freed");
    else if (a >= al->base)
        snprintf(buf, sizeof buf, "%zu bytes past the end of a %zu-byte device allocation at %p%s",
                 (size_t)(a - al->base - al->n), al->n, (void *)al->base, al->live ? "" : " (freed)");
    else
        snprintf(buf, sizeof buf, "%zu bytes before a %zu-byte device allocation at %p%s", (size_t)(al->base - a),
                 al->n, (void *)al->base, al->live ? "" : " (freed)");
    return buf;
}

bool fg_emu_dev_check(const void *p, size_t n, const char *what) {
    uintptr_t base;
    size_t size;
    const int k = fg_emu_dev_find(p, &base, &size);
    if (k == 1 && (uintptr_t)p + n <= base + size) return true;
    if (k == 0)
        fprintf(stderr, "cuda_emu: %s: %p is a host pointer, not device memory\n", what, p);
    else if (k < 0)
        fprintf(stderr, "cuda_emu: %s: %p is %s\n", what, p, describe_device((uintptr_t)p).c_str());
    else
        fprintf(stderr, "cuda_emu: %s: %zu bytes at %p run %zu bytes past the end of its %zu-byte device allocation\n",
                what, n, p, (size_t)((uintptr_t)p + n - base - size), size);
    return false;
}

void fg_emu_dev_enter(void) {
    init();
    tl_dev_depth++;
}
void fg_emu_dev_exit(void) {
    if (--tl_dev_depth > 0) return;
    for (int i = 0; i < g_nopened; i++)
        mprotect((void *)g_opened[i]->region, g_opened[i]->region_len - PAGE, PROT_NONE);
    g_nopened = 0;
}

static void segv_write(const char *s) { (void)!write(2, s, strlen(s)); }

/* Faults in the device range: inside device work, open the allocation (lazily) or report an
 * out-of-bounds access; in host code, report the dereference. Other faults inside a kernel are
 * reported with the kernel's position; the rest crash as usual. */
static void on_segv(int sig, siginfo_t *si, void *ucv) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    ucontext_t *uc = (ucontext_t *)ucv;
    const void *fault_pc = nullptr;
#if defined(__x86_64__)
    fault_pc = (const void *)uc->uc_mcontext.gregs[REG_RIP];
#else
    (void)uc;
#endif
    char msg[1024];
    if (a - R.dev_lo < R.dev_len) {
        fg_emu_alloc *al = alloc_at(a);
        if (tl_dev_depth > 0 && al && al->live && a < al->region + al->region_len - PAGE && g_nopened < 8192) {
            mprotect((void *)al->region, al->region_len - PAGE, PROT_READ | PROT_WRITE);
            g_opened[g_nopened++] = al;
            return;
        }
        if (tl_dev_depth > 0 && R.in_kernel) {
            report_head();
            snprintf(msg, sizeof msg, "  thread %u accessed device memory out of bounds at %p: %s (at %s)\n",
                     fg_emu_cur ? fg_emu_cur->tid.x : 0u, (void *)a, describe_device(a).c_str(),
                     where(fault_pc, false).c_str());
            segv_write(msg);
            R.errors++;
            launch_abort();
        }
        if (tl_dev_depth > 0)
            snprintf(msg, sizeof msg, "cuda_emu: device-side access out of bounds at %p: %s (at %s)\n", (void *)a,
                     describe_device(a).c_str(), where(fault_pc, false).c_str());
        else
            snprintf(msg, sizeof msg,
                     "cuda_emu: host code dereferenced a device pointer at %p: %s (at %s; device memory is for "
                     "kernels and cudaMemcpy* only)\n",
                     (void *)a, describe_device(a).c_str(), where(fault_pc, false).c_str());
        segv_write(msg);
        print_host_stack(1);
        fflush(NULL);
        abort();
    }
    if (a - R.stack_lo < R.stack_len && R.in_kernel) {
        report_head();
        snprintf(msg, sizeof msg, "  thread %u overflowed its %zu-byte stack (at %s)\n",
                 fg_emu_cur ? fg_emu_cur->tid.x : 0u, STACK_BYTES, where(fault_pc, false).c_str());
        segv_write(msg);
        abort();
    }
    if (R.in_kernel) {
        report_head();
        snprintf(msg, sizeof msg, "  thread %u: segmentation fault at %p (at %s)\n",
                 fg_emu_cur ? fg_emu_cur->tid.x : 0u, (void *)a, where(fault_pc, false).c_str());
        segv_write(msg);
    }
    signal(sig, SIG_DFL);
}

/* ============================================================================================
 * initialization
 * ============================================================================================ */

extern "C" char __executable_start[], _end[];

static int find_tls(struct dl_phdr_info *info, size_t, void *) {
    if (info->dlpi_name && info->dlpi_name[0]) return 0; /* the main program only */
    g_exe_base = info->dlpi_addr;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS && info->dlpi_tls_data) {
            R.tls_lo = (uintptr_t)info->dlpi_tls_data;
            R.tls_len = info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

static void init() {
    if (R.ready) return;
    R.ready = 1;
    const char *s = getenv("FG_EMU_SCHEDULES");
    R.schedules = s && *s ? atoi(s) : 3;
    if (R.schedules < 1) R.schedules = 1;
    s = getenv("FG_EMU_SEED");
    R.seed = s && *s ? strtoull(s, nullptr, 0) : 1;
    H = new fg_emu_heap;
    const ssize_t k = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
    g_exe_path[k > 0 ? k : 0] = 0;
    dl_iterate_phdr(find_tls, nullptr);
    R.sh_tls = new fg_emu_shadow[R.tls_len / 4 + 8]();
    R.img_lo = (uintptr_t)__executable_start;
    R.img_len = (uintptr_t)_end - R.img_lo;
    /* stacks: 1024 of them, each above a guard page */
    const size_t stride = STACK_BYTES + PAGE;
    char *st = (char *)mmap(nullptr, 1024 * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
    void *sm =
        mmap(nullptr, FG_EMU_SMEM_LIMIT + SMEM_GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* as much address space as the process may have, up to DEV_RESERVE (an ulimit -v can cap it) */
    size_t dev_len = DEV_RESERVE;
    void *dv = MAP_FAILED;
    for (; dev_len >= ((size_t)1 << 30) && dv == MAP_FAILED; dev_len /= 4)
        dv = mmap(nullptr, dev_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    dev_len *= 4;
    if (st == MAP_FAILED || sm == MAP_FAILED || dv == MAP_FAILED) {
        fprintf(stderr, "cuda_emu: cannot reserve the emulator's memory\n");
        abort();
    }
    for (int t = 0; t < 1024; t++) {
        mprotect(st + t * stride, PAGE, PROT_NONE);
        R.fibers[t].stack_lo = st + t * stride + PAGE;
        R.fibers[t].stack_hi = st + (t + 1) * stride;
    }
    R.stack_lo = (uintptr_t)st;
    R.stack_len = 1024 * stride;
    R.smem_lo = (uintptr_t)sm;
    R.smem_span = FG_EMU_SMEM_LIMIT + SMEM_GUARD;
    R.sh_dyn = new fg_emu_shadow[R.smem_span / 4 + 8]();
    R.dev_lo = g_dev_next = (uintptr_t)dv;
    R.dev_len = dev_len;
    fg_emu_ls.smem = (unsigned char *)sm;
#if FG_EMU_ASM_SWITCH
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(fg_emu_csr_init[0]), "=m"(fg_emu_csr_init[1]));
    fg_emu_csr_init[1] &= 0xffff;
#endif
    static char altstack[64 * 1024];
    stack_t ss = {};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    R.ep = 1;
    R.ugen = 1;
}

/* ============================================================================================
 * the memory-access hooks (GCC -fsanitize=thread calls these before every access)
 * ============================================================================================ */

static bool seen_pair(const void *a, const void *b) {
    for (auto &p : H->seen)
        if (p.first == a && p.second == b) return true;
    H->seen.push_back({a, b});
    return false;
}

static void shared_access(fg_emu_shadow *shv, const char *kind, uintptr_t off, unsigned n, bool write, const void *pc) {
    const uint16_t t = (uint16_t)fg_emu_cur->tid.x;
    const uint64_t ep = R.ep;
    for (uintptr_t w = off >> 2; w <= (off + n - 1) >> 2; w++) {
        fg_emu_shadow &e = shv[w];
        if (!write) {
            if (e.w_ep < R.blk_ep0) {
                if (!seen_pair(pc, nullptr))
                    report(
                        "thread %u read %s shared memory at byte %zu that no thread of this block has written (at %s)",
                        t, kind, (size_t)(w * 4), where(pc).c_str());
                e.w_ep = R.blk_ep0;
                e.w_tid = FG_EMU_NOBODY;
            } else if (e.w_ep == ep && e.w_tid != t && e.w_tid != FG_EMU_NOBODY && !seen_pair(e.w_pc, pc)) {
                report("race on %s shared memory at byte %zu: thread %u wrote it (at %s) and thread %u read it "
                       "(at %s) with no __syncthreads between (read-after-write hazard)",
                       kind, (size_t)(w * 4), e.w_tid, where(e.w_pc).c_str(), t, where(pc).c_str());
            }
            if (e.r_ep != ep) {
                e.r_ep = ep;
                e.r_tid = t;
                e.r_pc = pc;
                e.r_multi = 0;
            } else if (e.r_tid != t && !e.r_multi) {
                e.r_multi = 1;
                e.r2_tid = t;
                e.r2_pc = pc;
            }
        } else {
            if (e.w_ep == ep && e.w_tid != t && e.w_tid != FG_EMU_NOBODY && !seen_pair(e.w_pc, pc))
                report("race on %s shared memory at byte %zu: threads %u (at %s) and %u (at %s) both wrote it with no "
                       "__syncthreads between (write-after-write hazard)",
                       kind, (size_t)(w * 4), e.w_tid, where(e.w_pc).c_str(), t, where(pc).c_str());
            if (e.r_ep == ep && (e.r_tid != t || e.r_multi)) {
                const uint16_t o = e.r_tid != t ? e.r_tid : e.r2_tid;
                const void *opc = e.r_tid != t ? e.r_pc : e.r2_pc;
                if (!seen_pair(opc, pc))
                    report("race on %s shared memory at byte %zu: thread %u read it (at %s) and thread %u wrote it "
                           "(at %s) with no __syncthreads between (write-after-read hazard)",
                           kind, (size_t)(w * 4), o, where(opc).c_str(), t, where(pc).c_str());
            }
            e.w_ep = ep;
            e.w_tid = t;
            e.w_pc = pc;
        }
    }
}

static void log_write(uintptr_t a, unsigned n) {
    for (uintptr_t g = a & ~(uintptr_t)7; g < a + n; g += 8) {
        if (H->ukey.size() * 2 >= H->utab.size()) { /* grow and rehash */
            const size_t cap = H->utab.empty() ? 4096 : H->utab.size() * 2;
            H->utab.assign(cap, 0);
            H->utab_gen.assign(cap, 0);
            R.ugen = 1;
            for (size_t i = 0; i < H->ukey.size(); i++) {
                size_t h = (H->ukey[i] >> 3) * 0x9E3779B97F4A7C15ull >> 20 & (cap - 1);
                while (H->utab_gen[h] == R.ugen) h = (h + 1) & (cap - 1);
                H->utab[h] = (uint32_t)i;
                H->utab_gen[h] = R.ugen;
            }
        }
        const size_t mask = H->utab.size() - 1;
        size_t h = (g >> 3) * 0x9E3779B97F4A7C15ull >> 20 & mask;
        bool found = false;
        while (H->utab_gen[h] == R.ugen) {
            if (H->ukey[H->utab[h]] == g) {
                found = true;
                break;
            }
            h = (h + 1) & mask;
        }
        if (found) continue;
        H->utab[h] = (uint32_t)H->ukey.size();
        H->utab_gen[h] = R.ugen;
        H->ukey.push_back(g);
        H->uold.push_back((uint64_t) * (volatile uint64_t *)g); /* before the write: the hook runs first */
    }
}

static void host_access(uintptr_t a, unsigned n, bool write, const void *pc) {
    if (!seen_pair(pc, (const void *)1))
        report("thread %u %s %u bytes of host memory at %p, which a GPU cannot reach (a host pointer passed to the "
               "kernel?) (at %s)",
               fg_emu_cur->tid.x, write ? "wrote" : "read", n, (void *)a, where(pc).c_str());
}

static inline void access(uintptr_t a, unsigned n, bool write, bool aligned, const void *pc) {
    if (a - R.stack_lo < R.stack_len) return; /* the thread's own locals */
    if (aligned && (a & (n - 1)) && !seen_pair(pc, (const void *)2))
        report("thread %u %s %u bytes at %p, which is not %u-byte aligned (a misaligned address on the GPU) (at %s)",
               fg_emu_cur->tid.x, write ? "wrote" : "read", n, (void *)a, n, where(pc).c_str());
    if (a - R.smem_lo < R.smem_span) {
        const uintptr_t off = a - R.smem_lo;
        if (off + n > R.smem_size) {
            report("thread %u %s %u bytes at byte %zu of dynamic shared memory, past the launch's %zu bytes (at %s)",
                   fg_emu_cur->tid.x, write ? "wrote" : "read", n, (size_t)off, R.smem_size, where(pc).c_str());
            R.fatal = 1;
            return;
        }
        if (fg_emu_async_live) fg_emu_async_check(1, off >> 2, (off + n - 1) >> 2, write, pc);
        shared_access(R.sh_dyn, "dynamic", off, n, write, pc);
        return;
    }
    if (a - R.tls_lo < R.tls_len) {
        const uintptr_t off = a - R.tls_lo;
        if (fg_emu_async_live) fg_emu_async_check(2, off >> 2, (off + n - 1) >> 2, write, pc);
        shared_access(R.sh_tls, "static", off, n, write, pc);
        return;
    }
    if (a - R.dev_lo >= R.dev_len && a - R.img_lo >= R.img_len) host_access(a, n, write, pc);
    if (write && R.logging) log_write(a, n);
}

void fg_emu_access(const void *p, unsigned n, bool write, const void *pc) {
    if (R.in_kernel) access((uintptr_t)p, n, write, true, pc);
}
int fg_emu_shared_word(const void *p, size_t *word) {
    const uintptr_t a = (uintptr_t)p;
    if (a - R.smem_lo < R.smem_span) {
        *word = (a - R.smem_lo) >> 2;
        return 1;
    }
    if (a - R.tls_lo < R.tls_len) {
        *word = (a - R.tls_lo) >> 2;
        return 2;
    }
    return 0;
}

#define FG_EMU_PC __builtin_extract_return_addr(__builtin_return_address(0))
extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
#define FG_EMU_HOOKS(n)                                                                                                \
    void __tsan_read##n(void *p) {                                                                                     \
        if (R.in_kernel) access((uintptr_t)p, n, false, true, FG_EMU_PC);                                              \
    }                                                                                                                  \
    void __tsan_write##n(void *p) {                                                                                    \
        if (R.in_kernel) access((uintptr_t)p, n, true, true, FG_EMU_PC);                                               \
    }                                                                                                                  \
    void __tsan_unaligned_read##n(void *p) {                                                                           \
        if (R.in_kernel) access((uintptr_t)p, n, false, false, FG_EMU_PC);                                             \
    }                                                                                                                  \
    void __tsan_unaligned_write##n(void *p) {                                                                          \
        if (R.in_kernel) access((uintptr_t)p, n, true, false, FG_EMU_PC);                                              \
    }
FG_EMU_HOOKS(1)
FG_EMU_HOOKS(2)
FG_EMU_HOOKS(4)
FG_EMU_HOOKS(8)
FG_EMU_HOOKS(16)
void __tsan_read_range(void *p, unsigned long n) {
    if (R.in_kernel && n) access((uintptr_t)p, (unsigned)n, false, false, FG_EMU_PC);
}
void __tsan_write_range(void *p, unsigned long n) {
    if (R.in_kernel && n) access((uintptr_t)p, (unsigned)n, true, false, FG_EMU_PC);
}
void __tsan_vptr_update(void **p, void *) {
    if (R.in_kernel) access((uintptr_t)p, 8, true, true, FG_EMU_PC);
}
void __tsan_vptr_read(void **p) {
    if (R.in_kernel) access((uintptr_t)p, 8, false, true, FG_EMU_PC);
}
/* atomics (host code: static-local guards and the like; kernels here use none), done as asked */
#define FG_EMU_ATOMICS(bits, T)                                                                                        \
    T __tsan_atomic##bits##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }            \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }            \
    T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }  \
    T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }  \
    T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }  \
    T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }  \
    T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }    \
    T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }  \
    T __tsan_atomic##bits##_fetch_nand(volatile T *a, T v, int) {                                                      \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                            \
    }                                                                                                                  \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {                            \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
    }                                                                                                                  \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {                              \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
    }                                                                                                                  \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                                  \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
        return c;                                                                                                      \
    }
FG_EMU_ATOMICS(8, uint8_t)
FG_EMU_ATOMICS(16, uint16_t)
FG_EMU_ATOMICS(32, uint32_t)
FG_EMU_ATOMICS(64, uint64_t)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}

/* ============================================================================================
 * barriers and warp intrinsics
 * ============================================================================================ */

static fg_emu_fiber *cur_fiber() { return (fg_emu_fiber *)fg_emu_cur; }

void __syncthreads() {
    fg_emu_fiber *f = cur_fiber();
    f->state = T_BAR;
    f->wait_pc = FG_EMU_PC;
    if (++R.bar_count == (int)R.nthreads) { /* the last one: everybody into the next interval */
        R.bar_count = 0;
        R.ep++;
        for (unsigned t = 0; t < R.nthreads; t++) R.fibers[t].state = T_RUN;
    }
    to_scheduler(f);
}

static int shfl_src(int op, int lane, int arg, int width) {
    const int lo = lane & ~(width - 1), hi = lo + width - 1;
    int j;
    switch (op) {
    case FG_EMU_SHFL_IDX:
        return lo + (arg & (width - 1));
    case FG_EMU_SHFL_UP:
        j = lane - arg;
        return j >= lo ? j : lane;
    case FG_EMU_SHFL_DOWN:
        j = lane + arg;
        return j <= hi ? j : lane;
    default:
        j = lane ^ arg;
        return j <= hi ? j : lane; /* xor: earlier segments allowed, later ones not */
    }
}

static const char *op_name(int op, const char *shape = nullptr) {
    static const char *n[] = {"__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync",     "__all_sync"};
    return op == FG_EMU_COLLECTIVE ? shape : n[op];
}

static void rdv_complete(unsigned warp, fg_emu_rdv &r) {
    if (r.op == FG_EMU_COLLECTIVE) { /* the instruction's warp-wide step, over every lane's operands */
        void *lanes[32];
        for (int l = 0; l < 32; l++) lanes[l] = (void *)(uintptr_t)r.val[l];
        r.fn(lanes);
        for (int l = 0; l < 32; l++) R.fibers[warp * 32 + l].state = T_RUN;
        r.active = 0;
        return;
    }
    uint64_t vote = 0;
    for (int l = 0; l < 32; l++)
        if (r.mask >> l & 1u) vote |= (uint64_t)(r.val[l] != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(r.mask >> l & 1u)) continue;
        fg_emu_fiber &f = R.fibers[warp * 32 + l];
        uint64_t res;
        switch (r.op) {
        case FG_EMU_BALLOT:
            res = vote;
            break;
        case FG_EMU_ANY:
            res = vote != 0;
            break;
        case FG_EMU_ALL:
            res = vote == r.mask;
            break;
        default: {
            const int src = shfl_src(r.op, l, r.arg[l], r.width[l]);
            if (!(r.mask >> src & 1u)) {
                report("%s (mask 0x%08x) at %s: lane %d of warp %u reads lane %d, which is not in the mask (an "
                       "undefined value)",
                       op_name(r.op, r.shape), r.mask, where(r.pc).c_str(), l, warp, src);
                res = r.val[l];
            } else {
                res = r.val[src];
            }
        }
        }
        f.result = res;
        f.state = T_RUN;
    }
    r.active = 0;
}

static uint64_t warp_meet(int op, unsigned mask, uint64_t v, int arg, int width, const char *shape,
                          fg_emu_collective_fn fn, const void *pc) {
    fg_emu_fiber *f = cur_fiber();
    const unsigned t = f->th.tid.x, warp = t / 32, lane = t % 32;
    const unsigned warp_threads = R.nthreads - warp * 32 < 32 ? R.nthreads - warp * 32 : 32;
    const unsigned exist = warp_threads == 32 ? 0xffffffffu : (1u << warp_threads) - 1;
    if (!(mask >> lane & 1u)) {
        report("%s at %s: thread %u (lane %u) calls it with mask 0x%08x, which does not name it", op_name(op, shape),
               where(pc).c_str(), t, lane, mask);
        R.fatal = 1;
        to_scheduler(f);
    }
    if (mask & ~exist) {
        report("%s at %s: mask 0x%08x names lanes 0x%08x of warp %u, which do not exist (the block has %u threads)",
               op_name(op, shape), where(pc).c_str(), mask, mask & ~exist, warp, R.nthreads);
        R.fatal = 1;
        to_scheduler(f);
    }
    if (op <= FG_EMU_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1)))) {
        report("%s at %s: width %d is not a power of 2 in 1..32", op_name(op, shape), where(pc).c_str(), width);
        R.fatal = 1;
        to_scheduler(f);
    }
    fg_emu_rdv *r = nullptr, *fr = nullptr;
    for (auto &c : R.rdv[warp]) {
        if (!c.active) {
            if (!fr) fr = &c;
            continue;
        }
        if (c.mask == mask)
            r = &c;
        else if (c.mask & mask) {
            report("lanes of warp %u meet with different masks: %s (mask 0x%08x) at %s waits for lane %u, which calls "
                   "%s with mask 0x%08x at %s",
                   warp, op_name(c.op, c.shape), c.mask, where(c.pc).c_str(), lane, op_name(op, shape), mask, where(pc).c_str());
            R.fatal = 1;
            to_scheduler(f);
        }
    }
    if (r && r->op == op && op == FG_EMU_COLLECTIVE && strcmp(r->shape, shape) != 0) {
        report("lanes of warp %u meet with different shapes: %s at %s, and lane %u with %s at %s", warp, r->shape,
               where(r->pc).c_str(), lane, shape, where(pc).c_str());
        R.fatal = 1;
        to_scheduler(f);
    }
    if (r && r->op != op) {
        report("lanes of warp %u meet at different intrinsics: %s at %s and %s at %s (same mask 0x%08x)", warp,
               op_name(r->op, r->shape), where(r->pc).c_str(), op_name(op, shape), where(pc).c_str(), mask);
        R.fatal = 1;
        to_scheduler(f);
    }
    if (!r) {
        if (!fr) fg_emu_fatal("more than %d concurrent warp rendezvous in one warp", FG_EMU_RDV_PER_WARP);
        r = fr;
        r->active = 1;
        r->op = op;
        r->mask = mask;
        r->arrived = 0;
        r->pc = pc;
        r->shape = shape;
        r->fn = fn;
    }
    r->val[lane] = v;
    r->arg[lane] = arg;
    r->width[lane] = width;
    r->arrived |= 1u << lane;
    f->state = T_WARP;
    f->wait_pc = pc;
    if (r->arrived == mask) rdv_complete(warp, *r);
    to_scheduler(f);
    return f->result;
}

uint64_t fg_emu_warp_op(int op, unsigned mask, uint64_t v, int arg, int width) {
    return warp_meet(op, mask, v, arg, width, nullptr, nullptr, FG_EMU_PC);
}
void fg_emu_warp_collective(const char *shape, fg_emu_collective_fn fn, void *lane) {
    warp_meet(FG_EMU_COLLECTIVE, 0xffffffffu, (uint64_t)(uintptr_t)lane, 0, 32, shape, fn, FG_EMU_PC);
}
bool fg_emu_in_shared(const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p;
    return (a - R.smem_lo < R.smem_span && a - R.smem_lo + n <= R.smem_size) || (a - R.tls_lo < R.tls_len && a - R.tls_lo + n <= R.tls_len);
}

/* ============================================================================================
 * the scheduler
 * ============================================================================================ */

static void fiber_entry() {
    R.body();
    fg_emu_fiber *f = cur_fiber();
    f->state = T_DONE;
    to_scheduler(f);
    abort(); /* never resumed */
}

static uint64_t splitmix(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* "threads 0-31, 64" */
static std::string ranges(const std::vector<unsigned> &ts) {
    std::string s;
    char buf[48];
    for (size_t i = 0; i < ts.size();) {
        size_t j = i;
        while (j + 1 < ts.size() && ts[j + 1] == ts[j] + 1) j++;
        if (j == i)
            snprintf(buf, sizeof buf, "%s%u", s.empty() ? "" : ", ", ts[i]);
        else
            snprintf(buf, sizeof buf, "%s%u-%u", s.empty() ? "" : ", ", ts[i], ts[j]);
        s += buf;
        i = j + 1;
    }
    return s;
}

/* No thread can run but not all have returned: say who waits where, and for whom. */
static void deadlock() {
    report("deadlock: no thread can continue");
    std::map<std::pair<int, const void *>, std::vector<unsigned>> groups;
    for (unsigned t = 0; t < R.nthreads; t++)
        groups[{R.fibers[t].state, R.fibers[t].state == T_DONE ? nullptr : R.fibers[t].wait_pc}].push_back(t);
    for (auto &g : groups) {
        const char *what = g.first.first == T_BAR    ? "wait at __syncthreads"
                           : g.first.first == T_WARP ? "wait at a warp intrinsic"
                                                     : "returned";
        fprintf(stderr, "    threads %s %s%s%s\n", ranges(g.second).c_str(), what, g.first.second ? " at " : "",
                g.first.second ? where(g.first.second).c_str() : "");
    }
    for (unsigned w = 0; w < 32; w++)
        for (auto &r : R.rdv[w]) {
            if (!r.active) continue;
            std::vector<unsigned> missing;
            for (int l = 0; l < 32; l++)
                if ((r.mask >> l & 1u) && !(r.arrived >> l & 1u)) missing.push_back((unsigned)l);
            fprintf(stderr, "    %s (mask 0x%08x) at %s in warp %u never completes: lane%s %s of the mask %s\n",
                    op_name(r.op, r.shape), r.mask, where(r.pc).c_str(), w, missing.size() == 1 ? "" : "s",
                    ranges(missing).c_str(), "did not arrive (they returned or wait elsewhere; see above)");
        }
    R.fatal = 1;
}

static void run_fibers(int sched, uint64_t block_serial) {
    const unsigned n = R.nthreads;
    static unsigned order[1024];
    for (unsigned t = 0; t < n; t++) {
        fg_emu_fiber &f = R.fibers[t];
        f.th.tid = {t, 0, 0};
        f.state = T_RUN;
        fiber_start(&f);
    }
    R.bar_count = 0;
    for (auto &w : R.rdv)
        for (auto &r : w) r.active = 0;
    uint64_t rng = R.seed * 0x2545F4914F6CDD1Dull ^ (uint64_t)sched << 48 ^ R.launch_serial << 20 ^ block_serial;
    unsigned done = 0;
    R.in_kernel = 1;
    while (done < n) {
        unsigned m = 0;
        for (unsigned i = 0; i < n; i++) {
            const unsigned t = sched == 1 ? n - 1 - i : i;
            if (R.fibers[t].state == T_RUN) order[m++] = t;
        }
        if (sched >= 2)
            for (unsigned i = m; i > 1; i--) std::swap(order[i - 1], order[splitmix(rng) % i]);
        if (m == 0) {
            R.in_kernel = 0;
            deadlock();
            return;
        }
        for (unsigned i = 0; i < m; i++) {
            fg_emu_fiber &f = R.fibers[order[i]];
            if (f.state != T_RUN) continue;
            to_fiber(&f);
            if (f.state == T_DONE) done++;
            if (R.fatal) {
                R.in_kernel = 0;
                return;
            }
        }
    }
    R.in_kernel = 0;
}

static void undo_clear() {
    H->ukey.clear();
    H->uold.clear();
    H->ufinal.clear();
    if (++R.ugen == 0) {
        std::fill(H->utab_gen.begin(), H->utab_gen.end(), 0);
        R.ugen = 1;
    }
}

static void run_block(size_t smem, uint64_t block_serial) {
    const int nsched = R.nthreads > 1 ? R.schedules : 1;
    R.logging = nsched > 1;
    for (int s = 0; s < nsched; s++) {
        R.sched = s;
        memset(fg_emu_ls.smem, 0xff, smem); /* NaN bytes: unwritten shared memory poisons results too */
        R.blk_ep0 = R.ep = R.ep + 1;
        fg_emu_async_reset(); /* cp.async copies belong to one run of the block */
        run_fibers(s, block_serial);
        fg_emu_async_reset();
        if (R.errors || R.fatal) launch_abort();
        if (nsched == 1) break;
        if (s == 0) {
            H->ufinal.resize(H->ukey.size());
            for (size_t i = 0; i < H->ukey.size(); i++) H->ufinal[i] = *(volatile uint64_t *)H->ukey[i];
        } else {
            for (size_t i = 0; i < H->ukey.size(); i++) {
                const uint64_t want = i < H->ufinal.size() ? H->ufinal[i] : H->uold[i];
                const uint64_t got = *(volatile uint64_t *)H->ukey[i];
                if (got == want) continue;
                const uintptr_t a = H->ukey[i];
                float wf[2], gf[2];
                double wd, gd;
                memcpy(wf, &want, 8), memcpy(gf, &got, 8), memcpy(&wd, &want, 8), memcpy(&gd, &got, 8);
                report(
                    "the result depends on the thread schedule: the 8 bytes at %p (%s) are 0x%016llx (floats %g %g, "
                    "double %g) after %s but 0x%016llx (floats %g %g, double %g) after %s; threads of the block race "
                    "on global memory",
                    (void *)a, a - R.dev_lo < R.dev_len ? describe_device(a).c_str() : "host memory",
                    (unsigned long long)want, wf[0], wf[1], wd, sched_name(0), (unsigned long long)got, gf[0], gf[1],
                    gd, sched_name(s));
                launch_abort();
            }
        }
        if (s + 1 < nsched) /* roll back what this schedule wrote */
            for (size_t i = H->ukey.size(); i-- > 0;) *(volatile uint64_t *)H->ukey[i] = H->uold[i];
    }
    undo_clear();
    R.logging = 0;
}

void fg_emu_run_grid(fg_emu_dim3 grid, unsigned threads, size_t smem, const void *kernel, void (*body)(),
                     size_t param_bytes) {
    init();
    R.kernel = kernel;
    R.body = body;
    R.errors = R.fatal = R.reported = 0;
    H->seen.clear();
    if (threads == 0 || threads > 1024)
        fg_emu_fatal("kernel %s: %u threads per block (need 1 to 1024)", kernel_name().c_str(), threads);
    if (smem > FG_EMU_SMEM_LIMIT)
        fg_emu_fatal("kernel %s: %zu bytes of shared memory per block exceed Hopper's %d", kernel_name().c_str(), smem,
                     FG_EMU_SMEM_LIMIT);
    if (param_bytes > FG_EMU_PARAM_LIMIT)
        fg_emu_fatal("kernel %s: %zu bytes of parameters exceed CUDA's %d", kernel_name().c_str(), param_bytes,
                     FG_EMU_PARAM_LIMIT);
    fg_emu_dev_enter();
    R.launch_serial++;
    R.nthreads = threads;
    R.smem_size = smem;
    fg_emu_ls.gdim = grid;
    fg_emu_ls.bdim = {threads, 1, 1};
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    /* block order: grid order, or (with several schedules) reversed or shuffled by launch */
    const int border = R.schedules > 1 ? (int)(R.launch_serial % 3) : 0;
    std::vector<uint64_t> order;
    if (border == 2) {
        order.resize(nblocks);
        for (uint64_t i = 0; i < nblocks; i++) order[i] = i;
        uint64_t rng = R.seed ^ R.launch_serial * 0x9E3779B97F4A7C15ull;
        for (uint64_t i = nblocks; i > 1; i--) std::swap(order[i - 1], order[splitmix(rng) % i]);
    }
    for (uint64_t i = 0; i < nblocks; i++) {
        const uint64_t b = border == 0 ? i : border == 1 ? nblocks - 1 - i : order[i];
        fg_emu_ls.bidx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y)};
        run_block(smem, b);
    }
    fg_emu_dev_exit();
    R.kernel = nullptr;
}
