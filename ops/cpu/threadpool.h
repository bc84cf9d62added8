/* threadpool.h — the library's one pool of worker threads, for parallel loops inside ops.
 *
 * The machines this runs on have few cores (two, here), and BLAS has threads of its own: two sets
 * of busy threads on two cores fight and both slow down. So flashgrad owns its threading in one
 * place. The pool is created on first use (with fg_pool_threads() − 1 workers; the calling thread
 * is the remaining one) and lives until the process ends; every op that wants a parallel loop hands
 * it one through fg_pool_run. Nothing is allocated per run.
 *
 * The contract of a parallel loop, fg_pool_run(n, fn, ctx, flags):
 *   - fn(ctx, item, worker) is called exactly once for every item in [0, n), items handed out in
 *     increasing order to whichever thread is free (dynamic scheduling: put the costly items first).
 *   - worker is in [0, fg_pool_threads()) and no two calls running at the same time share it: use
 *     it to index per-thread scratch. Allocate that scratch before the run, one buffer for each of
 *     the first min(fg_pool_threads(), n) workers (the only ones that take part): which workers get
 *     items depends on the schedule, so scratch taken lazily inside fn makes the allocator's traffic
 *     schedule-dependent too. The caller's thread is worker 0.
 *   - fg_pool_run returns when every call has returned. It has no error channel: record failures in
 *     ctx (fg_error's message is per thread; set it on the calling thread after the run).
 *   - Determinism is the op's job: a loop whose items write disjoint outputs, each computed in a
 *     fixed order, gives the same bits for any thread count and any schedule. flash attention
 *     (ops/cpu/attention_flash_body.h) is written that way.
 *   - A loop inside a loop (fn calling fg_pool_run), a run while another thread's run is in
 *     progress, a single item or a pool of one thread all run serially on the calling thread, in
 *     item order, with worker = 0.
 *   - flags & FG_POOL_BLAS_SERIAL: OpenBLAS is set to one thread for the duration of the run (and
 *     restored after), for loops whose items call BLAS: the pool's threads are the parallelism.
 *     Without the flag, fn must not call a threaded BLAS.
 *   - fork(): a child process starts with no workers; its first run creates them again.
 *
 * Thread count: FG_NUM_THREADS in the environment when set (1 to 64), else the CPUs this process
 * may run on (sched_getaffinity), at most 64; fg_pool_set_threads overrides both.
 *
 * Between runs the workers spin for up to 0.2 ms, then sleep (ops/cpu_threadpool.c says why); a worker
 * that is not scheduled in time is simply left out of a run, so it never delays the caller.
 *
 * Use it for any loop whose iterations are independent and each worth at least tens of
 * microseconds (a run costs a few microseconds of wake-up). Examples: attention over (batch, head,
 * query block); a row-wise op (layernorm, softmax, cross-entropy) over blocks of rows; the
 * optimizer over blocks of parameters.
 */
#ifndef FG_THREADPOOL_H
#define FG_THREADPOOL_H

#include <stdint.h>

#include "ops/cpu.h" /* the public part: fg_pool_threads, fg_pool_set_threads, fg_pool_run, fg_pool_set_team */

#ifdef __cplusplus
extern "C" {
#endif

/* 1 inside a pool item (on any thread), else 0. */
int fg_pool_in_run(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_THREADPOOL_H */
