/* Monotonic time and polite spinning. */
#ifndef LOOM_BASE_CLOCK_H
#define LOOM_BASE_CLOCK_H

#include <sched.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t loom_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void loom_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* A bounded spin: loom_spin_more() pauses once and says whether the budget
 * lasts; it reads the clock only every 64 pauses, since a clock read costs
 * as much as the pause itself. At each clock read it also yields: a spinner
 * must not keep a thread that has work (the submitting Python thread, a
 * worker holding a chunk) off its core. With more threads than cores, the
 * scheduler otherwise lets the spin run out first, and a runnable thread
 * that shares the core waits for it, or for a whole time slice. */
typedef struct loom_spin {
  uint64_t deadline;
  unsigned count;
} loom_spin;

static inline loom_spin loom_spin_start(uint64_t budget_ns) {
  return (loom_spin){.deadline = loom_now_ns() + budget_ns, .count = 0};
}

static inline int loom_spin_more(loom_spin *spin) {
  loom_cpu_relax();
  if ((++spin->count & 63) != 0) return 1;
  sched_yield();
  return loom_now_ns() < spin->deadline;
}

#endif
