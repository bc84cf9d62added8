/* emu_internal.h — what the emulator's runtime (emu_runtime.cpp) and its add-on models (here
 * emu_async.cpp, cp.async) share. Not for emulated code: kernels see cuda_emu.h only.
 */
#ifndef FG_EMU_INTERNAL_H
#define FG_EMU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <string>

/* ---- provided by emu_runtime.cpp ---- */
/* An error of the running launch (one line, "cuda_emu: in kernel ..." heads the first); the
 * launch aborts at the end of the block. */
void fg_emu_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Check and record an access by the current thread at pc as if the kernel made it: alignment,
 * bounds, host memory, the shared-memory shadow (races, initialization), the undo log. */
void fg_emu_access(const void *p, unsigned n, bool write, const void *pc);
/* 1: p is dynamic shared memory, 2: static shared memory, 0: neither; *word = its 4-byte word */
int fg_emu_shared_word(const void *p, size_t *word);
/* "file:line (function)" of a kernel code address (a return address) */
std::string fg_emu_where(const void *pc);

/* ---- provided by emu_async.cpp ---- */
/* cp.async copies in flight in the running block; while nonzero, every shared-memory access is
 * passed to fg_emu_async_check first */
extern int fg_emu_async_live;
/* the access [word0, word1] of kind (1 dynamic, 2 static) by the current thread at pc: reports it
 * when it touches the destination of a copy still in flight */
void fg_emu_async_check(int kind, size_t word0, size_t word1, bool write, const void *pc);
/* forget every copy (a block starts, or a schedule ends) */
void fg_emu_async_reset();

#endif /* FG_EMU_INTERNAL_H */
