/* alloc.h — the caching allocator and the allocation counter, per device.
 *
 * Every tensor's storage comes from fg_alloc and goes back through fg_free. Freed blocks are kept in
 * per-size free lists and handed out again for the next request of the same rounded size, so a
 * training loop that builds the same graph every step takes nothing new from the system after its
 * first step (first-touched memory is slow on these machines: ~0.4 GB/s against ~20 GB/s warm).
 *
 * The counter: `current` is the bytes of blocks handed out and not yet freed (live tensors);
 * `peak` is the high-water mark of `current` since the last fg_alloc_reset_peak(); `reserved` is
 * current plus what the cache holds; `system_allocs` counts blocks taken from the system (a
 * training step after warm-up should not raise it). Counters are per device and thread-safe.
 *
 * Devices other than the CPU allocate through a backend table that the backend registers
 * (cuda/ registers FG_CUDA); until then fg_alloc on that device fails with FG_ERR_DEVICE.
 */
#ifndef FG_ALLOC_H
#define FG_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_CPU = 0, FG_CUDA = 1, FG_DEVICE_COUNT } fg_device;

const char *fg_device_name(fg_device d);

typedef struct {
    size_t current;         /* bytes live in tensors now */
    size_t peak;            /* high-water mark of current since the last reset */
    size_t reserved;        /* current + bytes parked in the cache */
    uint64_t system_allocs; /* blocks ever taken from the system (malloc / cudaMalloc) */
    uint64_t allocs;        /* fg_alloc calls that succeeded */
} fg_alloc_stats;

/* A backend's raw memory functions. alloc returns NULL on failure; copies are synchronous. */
typedef struct {
    void *(*alloc)(size_t nbytes);
    void (*free)(void *ptr);
    void (*memset0)(void *ptr, size_t nbytes);
    void (*copy_to_host)(void *dst_host, const void *src_dev, size_t nbytes);
    void (*copy_from_host)(void *dst_dev, const void *src_host, size_t nbytes);
    void (*copy_dev)(void *dst_dev, const void *src_dev, size_t nbytes);
    void (*synchronize)(void); /* wait for all queued work (for timing); may be NULL */
} fg_device_backend;

/* Register the backend of a non-CPU device (called by cuda/ at init). */
void fg_register_backend(fg_device d, const fg_device_backend *be);
/* The backend of a device, or NULL if none is registered. The CPU has none (plain memory). */
const fg_device_backend *fg_backend(fg_device d);

/* At least `nbytes` bytes, 64-byte aligned, uninitialized. NULL (with fg_last_error) on failure.
 * Caller frees with fg_free(d, ptr). */
void *fg_alloc(fg_device d, size_t nbytes);
void fg_free(fg_device d, void *ptr);

fg_alloc_stats fg_alloc_get_stats(fg_device d);
/* Set peak := current, so the next peak measures one region of code. */
void fg_alloc_reset_peak(fg_device d);
/* Give every cached (free) block back to the system. */
void fg_alloc_empty_cache(fg_device d);

#ifdef __cplusplus
}
#endif
#endif /* FG_ALLOC_H */
