#include "runtime/alloc/segment_table.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first entry whose base is > addr. */
static size_t upper_bound(const loom_segment_table *t, uintptr_t addr) {
  size_t lo = 0, hi = t->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->entries[mid].base <= addr) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/* A thread's last lookup: the table, its generation then, and the entry
 * found. */
static _Thread_local struct {
  const loom_segment_table *table;
  uint64_t generation;
  loom_segment_entry entry;
} last_found;

/* With the write lock held, after a change. */
static void changed(loom_segment_table *t) {
  atomic_fetch_add_explicit(&t->generation, 1, memory_order_release);
}

int loom_segment_table_insert(loom_segment_table *t, const void *base, size_t size, int owner,
                              void *data) {
  pthread_rwlock_wrlock(&t->lock);
  if (t->count == t->capacity) {
    size_t cap = t->capacity ? 2 * t->capacity : 64;
    loom_segment_entry *grown = realloc(t->entries, cap * sizeof *grown);
    if (!grown) {
      pthread_rwlock_unlock(&t->lock);
      return -1;
    }
    t->entries = grown;
    t->capacity = cap;
  }
  const uintptr_t addr = (uintptr_t)base;
  size_t i = upper_bound(t, addr);
  memmove(&t->entries[i + 1], &t->entries[i], (t->count - i) * sizeof *t->entries);
  t->entries[i] = (loom_segment_entry){.base = addr, .size = size, .owner = owner, .data = data};
  ++t->count;
  changed(t);
  pthread_rwlock_unlock(&t->lock);
  return 0;
}

void loom_segment_table_remove(loom_segment_table *t, const void *base) {
  pthread_rwlock_wrlock(&t->lock);
  const uintptr_t addr = (uintptr_t)base;
  size_t i = upper_bound(t, addr);
  if (i > 0 && t->entries[i - 1].base == addr) {
    memmove(&t->entries[i - 1], &t->entries[i], (t->count - i) * sizeof *t->entries);
    --t->count;
    changed(t);
  }
  pthread_rwlock_unlock(&t->lock);
}

int loom_segment_table_find(loom_segment_table *t, const void *ptr, loom_segment_entry *out) {
  const uintptr_t addr = (uintptr_t)ptr;
  /* The entry this thread found last is still the table's while no change
   * was counted since (a change racing with this lookup orders after it). */
  if (last_found.table == t &&
      last_found.generation == atomic_load_explicit(&t->generation, memory_order_acquire) &&
      addr - last_found.entry.base < last_found.entry.size) {
    if (out) *out = last_found.entry;
    return 1;
  }
  int found = 0;
  pthread_rwlock_rdlock(&t->lock);
  size_t i = upper_bound(t, addr);
  if (i > 0 && addr - t->entries[i - 1].base < t->entries[i - 1].size) {
    if (out) *out = t->entries[i - 1];
    last_found.table = t;
    last_found.generation = atomic_load_explicit(&t->generation, memory_order_relaxed);
    last_found.entry = t->entries[i - 1];
    found = 1;
  }
  pthread_rwlock_unlock(&t->lock);
  return found;
}

void loom_segment_table_clear(loom_segment_table *t) {
  pthread_rwlock_wrlock(&t->lock);
  free(t->entries);
  t->entries = NULL;
  t->count = t->capacity = 0;
  changed(t);
  pthread_rwlock_unlock(&t->lock);
}
