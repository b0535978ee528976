/* The row maps of kernels registered at run time (loom/hal.h):
 * an open-addressed set of (kernel, map), read without a lock (the host
 * driver asks for every launch it may group). Compiles of different keys
 * may declare at once: a slot is taken by a compare-exchange, and a reader
 * that finds the kernel before its map is stored sees none (the launch
 * runs unfused). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/hal.h"

#define ROW_MAP_SLOTS 4096
static struct {
  _Atomic(loom_kernel_fn) fn;
  _Atomic(loom_kernel_row_map_fn) map;
} row_maps[ROW_MAP_SLOTS];

static size_t slot_of(loom_kernel_fn fn) {
  const uint64_t h = (uint64_t)(uintptr_t)fn * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 52) & (ROW_MAP_SLOTS - 1);
}

loom_kernel_row_map_fn loom_kernel_row_map(loom_kernel_fn fn) {
  if (!fn) return NULL;
  for (size_t i = slot_of(fn), n = 0; n < ROW_MAP_SLOTS; ++n, i = (i + 1) & (ROW_MAP_SLOTS - 1)) {
    const loom_kernel_fn f = atomic_load_explicit(&row_maps[i].fn, memory_order_acquire);
    if (f == fn) return atomic_load_explicit(&row_maps[i].map, memory_order_acquire);
    if (!f) return NULL;
  }
  return NULL;
}

void loom_kernel_declare_row_map(loom_kernel_fn fn, loom_kernel_row_map_fn map) {
  if (!fn || !map) return;
  for (size_t i = slot_of(fn), n = 0; n < ROW_MAP_SLOTS; ++n, i = (i + 1) & (ROW_MAP_SLOTS - 1)) {
    loom_kernel_fn f = NULL;
    if (atomic_compare_exchange_strong_explicit(&row_maps[i].fn, &f, fn, memory_order_acq_rel,
                                                memory_order_acquire)) {
      atomic_store_explicit(&row_maps[i].map, map, memory_order_release);
      return;
    }
    if (f == fn) return;
  }
}

void loom_kernel_forget_row_maps(void) {
  for (size_t i = 0; i < ROW_MAP_SLOTS; ++i) {
    atomic_store_explicit(&row_maps[i].map, NULL, memory_order_relaxed);
    atomic_store_explicit(&row_maps[i].fn, NULL, memory_order_release);
  }
}
