/* emu_async.cpp — the emulator's model of cp.async (cuda/ptx_async.cuh): asynchronous copies from
 * global to shared memory that land only at the wait that covers them.
 *
 * Model, per thread of the running block (as PTX defines the groups):
 *  - fg_cp_async(dst, src, full) checks its operands (dst in shared memory, src inside one device
 *    allocation when it is read, both aligned to the copy's size), counts as a write of dst by the
 *    issuing thread in the current barrier interval (so a copy issued while other threads still
 *    read the buffer is a write-after-read race), fills dst with NaN bytes and marks it in flight;
 *  - fg_cp_async_commit() closes the thread's open copies into a group;
 *  - fg_cp_async_wait<N>() lands every group but the N most recent: the source bytes are read
 *    then (the copy happens at the wait), written to dst as a write by the issuing thread in the
 *    interval of the wait (so another thread reading it before the next __syncthreads is a
 *    read-after-write race), and the mark is cleared.
 * Any access to a word in flight, by any thread including the issuer, is reported with both
 * source lines: the read of a tile before its wait (a missing or too weak wait_group), or a write
 * into a buffer still being filled. A copy that is never waited for never lands.
 *
 * Compiled without instrumentation, like emu_runtime.cpp; it reaches the shared-memory shadow
 * through fg_emu_access (emu_internal.h).
 */
#include "tests/cuda/emu/cuda_emu.h"
#include "tests/cuda/emu/emu_internal.h"

#include <map>
#include <vector>

int fg_emu_async_live;

namespace {

struct copy_op {
    unsigned char *dst;
    const unsigned char *src;
    unsigned bytes;
    int full;
    int group; /* -1: not committed yet */
    int kind;  /* 1 dynamic, 2 static shared memory */
    size_t word;
    const void *pc;
};

struct thread_copies {
    std::vector<copy_op> ops;
    int committed; /* groups committed so far */
};

/* in-flight marks: the issuing thread + 1 per 4-byte word (0: none); dynamic shared memory by
 * word index, static by word in a map (rarely a cp.async destination) */
struct marks {
    std::vector<uint16_t> dyn;
    std::map<size_t, uint16_t> stat;
    uint16_t get(int kind, size_t w) const {
        if (kind == 1) return w < dyn.size() ? dyn[w] : 0;
        auto it = stat.find(w);
        return it == stat.end() ? 0 : it->second;
    }
    void set(int kind, size_t w, uint16_t v) {
        if (kind == 1) {
            if (w >= dyn.size()) dyn.resize(w + 1024, 0);
            dyn[w] = v;
        } else if (v) {
            stat[w] = v;
        } else {
            stat.erase(w);
        }
    }
};

thread_copies g_threads[1024];
marks g_marks;
std::vector<unsigned> g_busy; /* threads with copies outstanding */

const copy_op *find_op(unsigned t, int kind, size_t w) {
    for (const copy_op &o : g_threads[t].ops)
        if (o.kind == kind && w >= o.word && w < o.word + (o.bytes + 3) / 4) return &o;
    return nullptr;
}

void set_marks(const copy_op &o, uint16_t v) {
    for (size_t w = o.word; w < o.word + (o.bytes + 3) / 4; w++) g_marks.set(o.kind, w, v);
}

const char *kind_name(int kind) { return kind == 1 ? "dynamic" : "static"; }

} // namespace

void fg_emu_async_check(int kind, size_t word0, size_t word1, bool write, const void *pc) {
    for (size_t w = word0; w <= word1; w++) {
        const uint16_t m = g_marks.get(kind, w);
        if (!m) continue;
        const unsigned issuer = m - 1u, t = fg_emu_cur->tid.x;
        const copy_op *o = find_op(issuer, kind, w);
        const std::string at_issue = o ? fg_emu_where(o->pc) : std::string("?");
        if (write)
            fg_emu_report(
                "thread %u wrote %s shared memory at byte %zu while the cp.async of thread %u into it (at %s) "
                "is still in flight (at %s)",
                t, kind_name(kind), w * 4, issuer, at_issue.c_str(), fg_emu_where(pc).c_str());
        else
            fg_emu_report(
                "thread %u read %s shared memory at byte %zu before the cp.async of thread %u into it (at %s) "
                "landed: no cp.async wait_group covering it%s (at %s)",
                t, kind_name(kind), w * 4, issuer, at_issue.c_str(),
                issuer == t ? "" : ", or no __syncthreads after the wait", fg_emu_where(pc).c_str());
        return; /* one report per access */
    }
}

void fg_emu_async_reset() {
    for (unsigned t : g_busy) {
        for (const copy_op &o : g_threads[t].ops) set_marks(o, 0);
        g_threads[t].ops.clear();
        g_threads[t].committed = 0;
    }
    g_busy.clear();
    fg_emu_async_live = 0;
}

void fg_emu_cp_async(void *dst, const void *src, unsigned bytes, int full) {
    const void *pc = __builtin_extract_return_addr(__builtin_return_address(0));
    const unsigned t = fg_emu_cur->tid.x;
    size_t word = 0;
    const int kind = fg_emu_shared_word(dst, &word);
    if (!kind) {
        fg_emu_report("thread %u: cp.async destination %p is not shared memory (at %s)", t, dst,
                      fg_emu_where(pc).c_str());
        return;
    }
    if ((uintptr_t)dst % bytes) {
        fg_emu_report("thread %u: cp.async of %u bytes into shared memory at %p, which is not %u-byte aligned (at %s)",
                      t, bytes, dst, bytes, fg_emu_where(pc).c_str());
        return;
    }
    if (full) {
        uintptr_t base = 0;
        size_t size = 0;
        const int k = fg_emu_dev_find(src, &base, &size);
        if (k != 1 || (uintptr_t)src + bytes > base + size) {
            fg_emu_report("thread %u: cp.async reads %u bytes at %p, %s (at %s)", t, bytes, src,
                          k == 0  ? "which is host memory, not device memory"
                          : k < 0 ? "which is in no live device allocation (freed, or out of bounds)"
                                  : "which runs past the end of its device allocation",
                          fg_emu_where(pc).c_str());
            return;
        }
        if ((uintptr_t)src % bytes) {
            fg_emu_report("thread %u: cp.async of %u bytes from global memory at %p, which is not %u-byte aligned "
                          "(at %s)",
                          t, bytes, src, bytes, fg_emu_where(pc).c_str());
            return;
        }
    }
    /* the copy may land at any moment until its wait: a write of dst now (the shadow checks it
     * against this interval's readers, and against copies already in flight there) */
    fg_emu_access(dst, bytes, true, pc);
    const copy_op o = {(unsigned char *)dst, (const unsigned char *)src, bytes, full, -1, kind, word, pc};
    thread_copies &tc = g_threads[t];
    if (tc.ops.empty() && tc.committed == 0) g_busy.push_back(t);
    tc.ops.push_back(o);
    set_marks(o, (uint16_t)(t + 1));
    memset(dst, 0xff, bytes); /* not there yet: NaN bytes */
    fg_emu_async_live++;
}

void fg_emu_cp_async_commit() {
    const unsigned t = fg_emu_cur->tid.x;
    thread_copies &tc = g_threads[t];
    if (tc.ops.empty() && tc.committed == 0) g_busy.push_back(t);
    tc.committed++;
    for (copy_op &o : tc.ops)
        if (o.group < 0) o.group = tc.committed;
}

void fg_emu_cp_async_wait(int n) {
    thread_copies &tc = g_threads[fg_emu_cur->tid.x];
    const int upto = tc.committed - n; /* groups 1 .. upto must have landed */
    size_t keep = 0;
    for (size_t i = 0; i < tc.ops.size(); i++) {
        const copy_op o = tc.ops[i];
        if (o.group < 0 || o.group > upto) {
            tc.ops[keep++] = o;
            continue;
        }
        /* the copy happens now: the source as it is at the wait, written by the issuing thread */
        set_marks(o, 0);
        fg_emu_async_live--;
        fg_emu_access(o.dst, o.bytes, true, o.pc);
        if (o.full)
            memcpy(o.dst, o.src, o.bytes);
        else
            memset(o.dst, 0, o.bytes);
    }
    tc.ops.resize(keep);
}
