/* Adaptive eager (loom/fuse.h): the mode, the counters, and which kernels
 * may join a group (kernels/declarations.c says what each declares; the
 * host driver tells host_fuse_declare as it resolves library names). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/registry.h"
#include "loom/fuse.h"
#include "loom/hal.h"
#include "runtime/drivers/host/host_fuse.h"

/* ---- mode and counters ------------------------------------------------------ */

static atomic_int fuse_mode = -1; /* -1: LOOM_FUSE not read yet */
static _Atomic uint64_t stat_groups, stat_ops, stat_reordered, stat_cached, stat_verified,
    stat_verify_skipped, stat_not_written, stat_regions;

static loom_fuse_mode mode_from_env(void) {
  const char *v = getenv("LOOM_FUSE");
  if (!v || !*v) return LOOM_FUSE_ON;
  if (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "false")) return LOOM_FUSE_OFF;
  if (!strcasecmp(v, "verify")) return LOOM_FUSE_VERIFY;
  return LOOM_FUSE_ON;
}

loom_fuse_mode loom_fuse_get_mode(void) {
  int m = atomic_load_explicit(&fuse_mode, memory_order_relaxed);
  if (m >= 0) return (loom_fuse_mode)m;
  int expected = -1;
  m = mode_from_env();
  if (!atomic_compare_exchange_strong(&fuse_mode, &expected, m)) m = expected;
  return (loom_fuse_mode)m;
}

void loom_fuse_set_mode(loom_fuse_mode mode) {
  if (mode >= LOOM_FUSE_OFF && mode <= LOOM_FUSE_VERIFY) atomic_store(&fuse_mode, (int)mode);
}

void loom_fuse_stats_get(loom_fuse_stats *out) {
  if (!out) return;
  *out = (loom_fuse_stats){
      .groups = atomic_load(&stat_groups),
      .ops_fused = atomic_load(&stat_ops),
      .reordered = atomic_load(&stat_reordered),
      .bytes_cached = atomic_load(&stat_cached),
      .bytes_not_written = atomic_load(&stat_not_written),
      .compiled_regions = atomic_load(&stat_regions),
      .verified = atomic_load(&stat_verified),
      .verify_skipped = atomic_load(&stat_verify_skipped),
  };
}

void loom_fuse_stats_reset(void) {
  atomic_store(&stat_groups, 0);
  atomic_store(&stat_ops, 0);
  atomic_store(&stat_reordered, 0);
  atomic_store(&stat_cached, 0);
  atomic_store(&stat_verified, 0);
  atomic_store(&stat_verify_skipped, 0);
  atomic_store(&stat_not_written, 0);
  atomic_store(&stat_regions, 0);
}

void host_fuse_count_region(uint64_t not_written) {
  atomic_fetch_add(&stat_regions, 1);
  atomic_fetch_add(&stat_not_written, not_written);
}

void host_fuse_count_not_written(uint64_t bytes) {
  atomic_fetch_add_explicit(&stat_not_written, bytes, memory_order_relaxed);
}

void host_fuse_count_group(int ops, int reordered, uint64_t cached) {
  atomic_fetch_add_explicit(&stat_groups, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&stat_ops, (uint64_t)ops, memory_order_relaxed);
  atomic_fetch_add_explicit(&stat_reordered, (uint64_t)reordered, memory_order_relaxed);
  atomic_fetch_add_explicit(&stat_cached, cached, memory_order_relaxed);
}

void host_fuse_count_verified(int compared) {
  atomic_fetch_add_explicit(compared ? &stat_verified : &stat_verify_skipped, 1,
                            memory_order_relaxed);
}

/* ---- which kernels may join ------------------------------------------------- */

#define MAX_DECLARED 64
static _Atomic(loom_kernel_fn) declared[MAX_DECLARED];
static atomic_int declared_count;
static pthread_mutex_t declare_lock = PTHREAD_MUTEX_INITIALIZER;

int host_fuse_is_elementwise(loom_kernel_fn fn) {
  const int n = atomic_load_explicit(&declared_count, memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (atomic_load_explicit(&declared[i], memory_order_relaxed) == fn) return 1;
  return 0;
}

/* The library's kernels touch only memory their tensor descriptors span (a
 * kernel compiled at run time may reach past them: a Triton-style kernel
 * indexes from a pointer), so only a launch of theirs may be passed over;
 * any other ends the look. An open-addressed set of the implementations
 * the driver resolved from the library; when it is full, launches of the
 * kernels left out end looks, which is safe. */
#define LIBRARY_SLOTS 4096
static _Atomic(loom_kernel_fn) library[LIBRARY_SLOTS];

static size_t library_slot(loom_kernel_fn fn) {
  uint64_t h = (uint64_t)(uintptr_t)fn * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 52) & (LIBRARY_SLOTS - 1);
}

int host_fuse_is_library(loom_kernel_fn fn) {
  for (size_t i = library_slot(fn), n = 0; n < LIBRARY_SLOTS; ++n, i = (i + 1) & (LIBRARY_SLOTS - 1)) {
    const loom_kernel_fn f = atomic_load_explicit(&library[i], memory_order_acquire);
    if (f == fn) return 1;
    if (!f) return 0;
  }
  return 0;
}

static void add_library_locked(loom_kernel_fn fn) {
  for (size_t i = library_slot(fn), n = 0; n < LIBRARY_SLOTS; ++n, i = (i + 1) & (LIBRARY_SLOTS - 1)) {
    const loom_kernel_fn f = atomic_load_explicit(&library[i], memory_order_relaxed);
    if (f == fn) return;
    if (!f) {
      atomic_store_explicit(&library[i], fn, memory_order_release);
      return;
    }
  }
}

/* Row-wise kernels and their row maps (kernels/registry.h). */
#define MAX_ROWWISE 16
static struct {
  _Atomic(loom_kernel_fn) fn;
  _Atomic(loom_row_map_fn) map;
} rowwise[MAX_ROWWISE];
static atomic_int rowwise_count;

static loom_row_map_fn library_row_map(loom_kernel_fn fn) {
  const int n = atomic_load_explicit(&rowwise_count, memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (atomic_load_explicit(&rowwise[i].fn, memory_order_relaxed) == fn)
      return atomic_load_explicit(&rowwise[i].map, memory_order_relaxed);
  return NULL;
}

/* A kernel compiled at run time declares its row map to the runtime
 * (loom/hal.h: the JIT's row_map_symbol, the map of a torch_loom.tile
 * kernel proved row-wise). */
loom_row_map_fn host_fuse_row_map(loom_kernel_fn fn) {
  const loom_row_map_fn map = library_row_map(fn);
  return map ? map : loom_kernel_row_map(fn);
}

void host_fuse_declare(loom_kernel_fn fn, uint32_t flags) {
  if (!fn) return;
  const loom_row_map_fn map = loom_kernel_library_row_map(fn);
  pthread_mutex_lock(&declare_lock);
  add_library_locked(fn);
  const int r = atomic_load(&rowwise_count);
  if (map && !library_row_map(fn) && r < MAX_ROWWISE) {
    atomic_store_explicit(&rowwise[r].fn, fn, memory_order_relaxed);
    atomic_store_explicit(&rowwise[r].map, map, memory_order_relaxed);
    atomic_store_explicit(&rowwise_count, r + 1, memory_order_release);
  }
  pthread_mutex_unlock(&declare_lock);
  if (!(flags & LOOM_KERNEL_ELEMENTWISE)) return;
  pthread_mutex_lock(&declare_lock);
  const int n = atomic_load(&declared_count);
  if (!host_fuse_is_elementwise(fn) && n < MAX_DECLARED) {
    atomic_store_explicit(&declared[n], fn, memory_order_relaxed);
    atomic_store_explicit(&declared_count, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&declare_lock);
}

typedef struct name_list {
  const char **out;
  size_t capacity, count;
} name_list;

static void collect_elementwise(const loom_kernel_entry *e, void *user) {
  name_list *l = user;
  if (!(loom_kernel_library_flags(e->name) & LOOM_KERNEL_ELEMENTWISE)) return;
  if (l->count < l->capacity) l->out[l->count] = e->name;
  ++l->count;
}

size_t loom_fuse_elementwise_kernels(const char **out, size_t capacity) {
  name_list l = {.out = out, .capacity = out ? capacity : 0};
  loom_kernel_library_each(collect_elementwise, &l);
  return l.count;
}
