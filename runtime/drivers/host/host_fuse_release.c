/* Adaptive eager: the allocator's release log, which tells the executor
 * that a value no tensor holds need not be stored (loom/fuse.h; compiled
 * regions, host_fuse_region.c, and GEMM epilogues, host_fuse_epilogue.c).
 *
 * Every host queue's submission takes a number from one clock, and the
 * caching allocator's free of a block that no other stream used notes the
 * clock (taken under the log's lock, so the log is ordered by it). A block
 * freed at clock c was held by no tensor after the command numbered c was
 * submitted: a command numbered above c that touches its memory belongs to
 * the block's next owner. */
#include <pthread.h>
#include <stdatomic.h>

#include "loom/fuse.h"
#include "runtime/drivers/host/host_fuse.h"

static _Atomic uint64_t fuse_clock;

uint64_t host_fuse_clock_tick(void) { return atomic_fetch_add(&fuse_clock, 1) + 1; }

#define RELEASE_LOG 4096
typedef struct release_entry {
  uint64_t stream, at; /* the clock when it was freed: commands up to `at` came before */
  uintptr_t lo, hi;
} release_entry;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static release_entry release_log[RELEASE_LOG];
static uint64_t log_count; /* entries ever logged; the last RELEASE_LOG are kept */

/* Logged while fusion is on: a release missed (logged with fusion off, or
 * pushed out of the log) only keeps a store. */
static void note_release(uint64_t stream_id, uintptr_t ptr, size_t size) {
  if (loom_fuse_get_mode() == LOOM_FUSE_OFF) return;
  pthread_mutex_lock(&log_lock);
  release_log[log_count % RELEASE_LOG] =
      (release_entry){stream_id, atomic_load(&fuse_clock), ptr, ptr + size};
  ++log_count;
  pthread_mutex_unlock(&log_lock);
}

void host_fuse_region_hook(int on) { loom_fuse_set_release_hook(on ? note_release : NULL); }

int host_fuse_released_within(uint64_t stream, span s, uint64_t from, uint64_t end,
                              uint64_t *at) {
  int found = 0;
  if (stream == 0 || s.lo >= s.hi) return 0;
  pthread_mutex_lock(&log_lock);
  const uint64_t first = log_count > RELEASE_LOG ? log_count - RELEASE_LOG : 0;
  uint64_t lo = first, hi = log_count; /* the first entry at or after `end` */
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (release_log[mid % RELEASE_LOG].at < end) lo = mid + 1;
    else hi = mid;
  }
  for (uint64_t i = lo; i-- > first;) {
    const release_entry *e = &release_log[i % RELEASE_LOG];
    if (e->at < from) break;
    if (e->stream == stream && e->lo <= s.lo && s.hi <= e->hi) {
      found = 1;
      *at = e->at;
      break;
    }
  }
  pthread_mutex_unlock(&log_lock);
  return found;
}
