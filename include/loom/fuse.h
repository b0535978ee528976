/* loom/fuse.h — adaptive eager: a stream fuses the launches queued on it.
 *
 * When a stream's executor takes a launch of an elementwise kernel
 * (LOOM_KERNEL_ELEMENTWISE, loom/kernel_abi.h), it looks ahead in its own
 * queue, at what is already there (nothing waits for more), for later
 * elementwise launches over the same range: each joins the group unless a
 * tensor of it overlaps a tensor of a member through another element map
 * (same data, dtype and, once dims of size 1 are dropped and contiguous
 * dims merged, sizes and strides). Launches it passes over stay queued, in
 * order, and a later launch joins only if it overlaps none of them. A
 * row-wise kernel with a row map (layer norm, softmax over the last dim;
 * kernels/registry.h) joins over its rows' elements: the group's chunks
 * then hold whole rows, and its per-row outputs (statistics) go to scratch
 * and are copied in after the chunks, where no later member overwrote
 * them. A small library launch that cannot join but shares no written
 * memory with the group runs whole before its chunks, so that members
 * after it may read what it writes. A copy,
 * an event, a host callback, the end of the queue, or a budget (members,
 * commands looked at, launches passed over) ends the look. The worker pool
 * then runs chunk k of every member, in program order, before chunk k + 1:
 * one fork-join for the group, and what a member writes for the next stays
 * in the cache. Results are bitwise those of running the members one by
 * one; a failing member's error names it; the profiler sees one kernel
 * named for its members. The host driver (and the guarded driver, which
 * runs on its queues) fuse; drivers without it ignore the mode.
 *
 * The mode is the process's: LOOM_FUSE=0 (off), 1 (the default) or verify
 * (every group also runs unfused from the same inputs and the bytes are
 * compared; a difference is an error of the stream, naming the members). */
#ifndef LOOM_FUSE_H
#define LOOM_FUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loom_fuse_mode {
  LOOM_FUSE_OFF = 0,
  LOOM_FUSE_ON = 1,
  LOOM_FUSE_VERIFY = 2,
} loom_fuse_mode;

/* The mode in effect: the last set, else LOOM_FUSE's (read once). */
loom_fuse_mode loom_fuse_get_mode(void);
/* Takes effect at the next group an executor forms. */
void loom_fuse_set_mode(loom_fuse_mode mode);

typedef struct loom_fuse_stats {
  uint64_t groups;            /* groups of two or more launches run */
  uint64_t ops_fused;         /* launches that ran in those groups */
  uint64_t reordered;         /* of those, launches that ran before one they followed */
  uint64_t bytes_cached;      /* bytes members wrote for a later member of the
                                 same chunk (kept in the cache, not streamed) */
  uint64_t bytes_not_written; /* intermediates never written (compiled regions) */
  uint64_t compiled_regions;  /* groups run as one compiled loop */
  uint64_t verified;          /* groups LOOM_FUSE=verify compared */
  uint64_t verify_skipped;    /* groups it could not (memory with gaps, no scratch) */
} loom_fuse_stats;

/* Counts since the process started or the last reset. */
void loom_fuse_stats_get(loom_fuse_stats *out);
void loom_fuse_stats_reset(void);

/* The names of the running driver's kernels that declare
 * LOOM_KERNEL_ELEMENTWISE (up to `capacity` into `out`, static strings);
 * returns how many there are. */
size_t loom_fuse_elementwise_kernels(const char **out, size_t capacity);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_FUSE_H */
