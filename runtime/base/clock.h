/* Monotonic time and polite spinning. */
#ifndef LOOM_BASE_CLOCK_H
#define LOOM_BASE_CLOCK_H

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

#endif
