/* The caching allocator's records, shared by its files (caching_allocator.c:
 * blocks and segments; snapshot.c: what tools see of them). Nothing outside
 * runtime/alloc/ includes this. */
#ifndef LOOM_ALLOC_CACHING_ALLOCATOR_INTERNAL_H
#define LOOM_ALLOC_CACHING_ALLOCATOR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "runtime/alloc/block_map.h"
#include "runtime/alloc/caching_allocator.h"
#include "runtime/alloc/segment_table.h"

typedef struct block {
  uintptr_t ptr;
  size_t size;
  /* Bytes asked for; kept after the free until the block is reusable,
   * since a pending block is still active. */
  size_t requested;
  uint64_t stream_id;
  int pool; /* LOOM_POOL_SMALL or LOOM_POOL_LARGE */
  int allocated, in_free_list, counted_split;
  struct block *prev, *next; /* neighbours within the segment */
  /* Other streams that used the block (retained), and the events that
   * guard its reuse once freed. */
  loom_stream_t **uses;
  int num_uses, cap_uses;
  loom_event_t **events;
  int num_events;
  struct block *pending_next;
} block;

typedef struct free_list {
  block **items;
  size_t count, capacity;
} free_list;

struct loom_allocator {
  pthread_mutex_t lock;
  const loom_driver *driver;
  int device;
  int quiet; /* being destroyed: the observer hears nothing */
  uint64_t limit;
  loom_memory_stats stats;
  free_list pools[LOOM_POOL_COUNT]; /* [SMALL], [LARGE] used */
  size_t free_list_bytes;
  loom_block_map live; /* allocated blocks by address */
  block *pending;      /* freed, waiting for other streams */
  /* Graph pools in use (their ids key blocks like stream ids), with the
   * number of captures and graphs using each: their segments stay, free
   * blocks included, since replays write there. */
  uint64_t *pool_ids;
  int *pool_refs;
  int num_pools, cap_pools;
  /* Records of blocks that splits made and coalescing merged away, kept
   * for the next split (linked through `next`): a small tensor's
   * allocation and free then call neither malloc nor free. */
  block *spare;
  int num_spare;
};

/* Every device's segments; an entry's data is the segment's first block
 * (which coalescing never frees: it has no predecessor). */
extern loom_segment_table loom_device_segments;

/* The installed observer (snapshot.c), or NULL. */
extern _Atomic(const loom_memory_observer *) loom_allocator_observer;

/* Tells the observer, if any; with a->lock held. */
static inline void loom_allocator_notify(loom_allocator *a, const loom_memory_event *event) {
  const loom_memory_observer *o =
      atomic_load_explicit(&loom_allocator_observer, memory_order_acquire);
  if (o && !a->quiet) o->fn(o->user, event);
}

/* Moves pending blocks whose guarding events completed into the cache;
 * with a->lock held. */
void loom_allocator_process_pending(loom_allocator *a);

#endif
