/* An address-ordered table of memory segments, for finding the segment
 * that contains any address in O(log n). Thread-safe (readers share).
 * Each thread remembers the last entry it found, valid until the table
 * next changes: freeing a tensor looks up the segment of the block freed
 * just before it, and then takes no lock. */
#ifndef LOOM_ALLOC_SEGMENT_TABLE_H
#define LOOM_ALLOC_SEGMENT_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loom_segment_entry {
  uintptr_t base;
  size_t size;
  int owner;   /* device index (or 0 for host memory) */
  void *data;  /* the owner's record of the segment */
} loom_segment_entry;

typedef struct loom_segment_table {
  pthread_rwlock_t lock;
  loom_segment_entry *entries;
  size_t count, capacity;
  _Atomic uint64_t generation; /* changes, counted under the write lock */
} loom_segment_table;

#define LOOM_SEGMENT_TABLE_INIT {PTHREAD_RWLOCK_INITIALIZER, NULL, 0, 0, 0}

/* Returns 0 on success, -1 when out of host memory. */
int loom_segment_table_insert(loom_segment_table *t, const void *base, size_t size, int owner,
                              void *data);
void loom_segment_table_remove(loom_segment_table *t, const void *base);
/* Copies the entry containing `ptr` to *out; returns 1 if found, else 0. */
int loom_segment_table_find(loom_segment_table *t, const void *ptr, loom_segment_entry *out);
/* Frees the table's storage (the table must be empty or abandoned). */
void loom_segment_table_clear(loom_segment_table *t);

#endif
