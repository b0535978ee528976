/* The caching device allocator: sits above a driver's raw segments and
 * gives out blocks with c10-style statistics, per-stream reuse and a
 * memory limit. One instance per device; every function is thread-safe.
 * The HAL front end calls it; it uses the HAL only through the public
 * event and stream calls (loom/hal.h) and the driver's segment slots
 * (loom/driver.h), never the front end's internals. */
#ifndef LOOM_ALLOC_CACHING_ALLOCATOR_H
#define LOOM_ALLOC_CACHING_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

#include "loom/driver.h"
#include "loom/hal.h"

typedef struct loom_allocator loom_allocator;

/* Granularity of block sizes, the small/large pool boundary, and the size of
 * the segments the small pool is carved from. */
#define LOOM_ALLOC_ROUND ((size_t)512)
#define LOOM_ALLOC_SMALL_LIMIT ((size_t)1 << 20)
#define LOOM_ALLOC_SMALL_SEGMENT ((size_t)2 << 20)
#define LOOM_ALLOC_LARGE_SEGMENT ((size_t)20 << 20)
#define LOOM_ALLOC_MID_LIMIT ((size_t)10 << 20)

loom_status loom_allocator_create(const loom_driver *driver, int device, uint64_t limit,
                                  loom_allocator **out);
/* Returns every segment to the driver, live blocks included. */
void loom_allocator_destroy(loom_allocator *a);

/* `stream` is the stream the block is for (not NULL). */
loom_status loom_allocator_malloc(loom_allocator *a, size_t size, loom_stream_t *stream,
                                  uint64_t stream_id, void **out_ptr);
loom_status loom_allocator_free(loom_allocator *a, void *ptr);
/* Takes the live block at `ptr` out of the allocator with its segment when
 * it fills the segment (a free tail aside) and the driver hands the
 * segment over (driver segment_detach): *out_fd and *out_size are then the
 * segment's memfd and size, and the caller owns the mapping at `ptr` and
 * the descriptor. LOOM_ERROR_NOT_SUPPORTED otherwise (nothing changes),
 * with no error message set. */
loom_status loom_allocator_detach(loom_allocator *a, void *ptr, int *out_fd, size_t *out_size);
loom_status loom_allocator_record_stream(loom_allocator *a, void *ptr, loom_stream_t *stream,
                                         uint64_t stream_id);
/* A stream is gone (its queue drained): its blocks join `new_id`'s pool. */
void loom_allocator_retire_stream(loom_allocator *a, uint64_t old_id, uint64_t new_id);
/* A graph pool (an id from the stream ids' space) gains a user: while it
 * has one, its segments are never returned to the driver. */
loom_status loom_allocator_pool_retain(loom_allocator *a, uint64_t pool_id);
/* It loses one; at the last, its wholly free segments go back to the
 * driver and its other blocks join `heir_id`'s pool (a stream's). */
void loom_allocator_pool_release(loom_allocator *a, uint64_t pool_id, uint64_t heir_id);
void loom_allocator_stats(loom_allocator *a, loom_memory_stats *out);
void loom_allocator_reset_peak(loom_allocator *a);
void loom_allocator_reset_accumulated(loom_allocator *a);
void loom_allocator_empty_cache(loom_allocator *a);
void loom_allocator_info(loom_allocator *a, size_t *out_free, size_t *out_total);

/* Device owning the segment that contains `ptr`, or -1; *out_allocator
 * receives its allocator when not NULL. O(log segments). */
int loom_allocator_owner(const void *ptr, loom_allocator **out_allocator);
/* Bytes from `ptr` to the end of its block (0 if `ptr` is not inside a live
 * block). */
size_t loom_allocator_extent(loom_allocator *a, const void *ptr);

/* For tools (snapshot.c). The walk copies under the lock and calls `fn`
 * without it. */
loom_status loom_allocator_snapshot(loom_allocator *a, loom_memory_segment_fn fn, void *user);
loom_status loom_allocator_block_query(loom_allocator *a, const void *ptr,
                                       uint64_t *out_stream_id, loom_memory_block_info *out);
/* Process-wide (every allocator, across restarts); NULL removes it. */
void loom_allocator_set_observer(const loom_memory_observer *observer);
/* Returns once no observer call runs on `a`. */
void loom_allocator_quiesce(loom_allocator *a);

/* "1.50 GiB"-style formatting into buf. */
const char *loom_format_bytes(uint64_t bytes, char *buf, size_t len);

#endif
