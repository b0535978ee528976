/* Waits for peers: a short spin, then futex sleeps on the shared word in
 * slices of at most 50 ms, each followed by a look at whether the peer
 * still lives (gone[]: marked by the watcher when its socket closes, or by
 * the peer itself when it leaves or its communicator breaks) and at the
 * deadline. A post stores the value and wakes only if someone sleeps: the
 * sleeper counts itself before its last look at the value, the poster
 * stores before looking at the count (both sequentially consistent), so a
 * wake-up is never lost; the slices bound the damage if one were. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/ccl/ccl_internal.h"

#define SLICE_NS 50000000ull
#define SPIN_NS 20000ull

static int reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

/* Shared (not FUTEX_PRIVATE): the word lives in a segment other processes map. */
static void futex_sleep(_Atomic uint32_t *word, uint32_t seen, uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

void ccl_wake(ccl_word *word) {
  syscall(SYS_futex, (uint32_t *)&word->value, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void ccl_post(ccl_word *word, uint32_t value) {
  atomic_store(&word->value, value);
  if (atomic_load(&word->waiters) != 0) ccl_wake(word);
}

static const char *gone_reason(int state) {
  switch (state) {
    case CCL_LEFT: return "left (destroyed its process group)";
    case CCL_DIED: return "died";
    default: return "failed (its communicator broke)";
  }
}

loom_status ccl_wait(loom_ccl_comm_t *comm, ccl_word *word, uint32_t target, int peer,
                     const char *what) {
  if (reached(atomic_load_explicit(&word->value, memory_order_acquire), target)) return LOOM_OK;
  loom_spin spin = loom_spin_start(SPIN_NS);
  while (loom_spin_more(&spin))
    if (reached(atomic_load_explicit(&word->value, memory_order_acquire), target)) return LOOM_OK;
  const uint64_t start = loom_now_ns(), deadline = start + comm->timeout_ns;
  for (;;) {
    atomic_fetch_add(&word->waiters, 1);
    const uint32_t seen = atomic_load(&word->value);
    if (reached(seen, target)) {
      atomic_fetch_sub(&word->waiters, 1);
      return LOOM_OK;
    }
    const int state = (int)atomic_load(&comm->gone[peer].value);
    const uint64_t now = loom_now_ns();
    if (state != CCL_ALIVE || atomic_load(&comm->failed) || now >= deadline) {
      atomic_fetch_sub(&word->waiters, 1);
      if (state != CCL_ALIVE)
        return loom_error(LOOM_ERROR_DEVICE, "%s: rank %d %s", what, peer, gone_reason(state));
      if (atomic_load(&comm->failed))
        return loom_error(LOOM_ERROR_DEVICE, "%s: the communicator was aborted", what);
      return loom_error(LOOM_ERROR_DEVICE, "%s: timed out after %llu ms waiting for rank %d", what,
                        (unsigned long long)(comm->timeout_ns / 1000000u), peer);
    }
    const uint64_t left = deadline - now;
    futex_sleep(&word->value, seen, left < SLICE_NS ? left : SLICE_NS);
    atomic_fetch_sub(&word->waiters, 1);
  }
}
