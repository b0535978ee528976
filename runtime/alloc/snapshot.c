/* What tools see of the caching allocator: a snapshot of its segments and
 * blocks, a description of one live block, and the observer that hears of
 * what the allocator does on its own (segments obtained and returned,
 * deferred frees completing, out-of-memory). */
#include <stdlib.h>

#include "runtime/alloc/caching_allocator_internal.h"

_Atomic(const loom_memory_observer *) loom_allocator_observer;

void loom_allocator_set_observer(const loom_memory_observer *observer) {
  atomic_store_explicit(&loom_allocator_observer, observer, memory_order_release);
}

void loom_allocator_quiesce(loom_allocator *a) {
  /* The observer is only called under the lock: once we held it, calls
   * that loaded the previous observer have returned. */
  pthread_mutex_lock(&a->lock);
  pthread_mutex_unlock(&a->lock);
}

static int32_t block_state(const block *b) {
  if (b->allocated) return LOOM_BLOCK_ALLOCATED;
  /* Freed but neither cached nor coalesced: held for other streams. */
  return b->in_free_list ? LOOM_BLOCK_INACTIVE : LOOM_BLOCK_PENDING_FREE;
}

static loom_memory_block_info block_info(const block *b) {
  const int32_t state = block_state(b);
  return (loom_memory_block_info){
      .address = b->ptr, .size = b->size,
      .requested_size = state == LOOM_BLOCK_INACTIVE ? 0 : b->requested, .state = state};
}

/* Copies the segments of `a` and their blocks; with a->lock held, the
 * segment table's read lock taken here. */
static loom_status copy_segments(loom_allocator *a, loom_memory_segment_info **out_segments,
                                 size_t *out_num_segments, loom_memory_block_info **out_blocks) {
  *out_segments = NULL;
  *out_blocks = NULL;
  *out_num_segments = 0;
  loom_status st = LOOM_OK;
  pthread_rwlock_rdlock(&loom_device_segments.lock);
  size_t num_segments = 0, num_blocks = 0;
  for (size_t i = 0; i < loom_device_segments.count; ++i) {
    const loom_segment_entry *e = &loom_device_segments.entries[i];
    if (e->owner != a->device) continue;
    ++num_segments;
    for (const block *b = e->data; b; b = b->next) ++num_blocks;
  }
  loom_memory_segment_info *segments = calloc(num_segments ? num_segments : 1, sizeof *segments);
  loom_memory_block_info *blocks = calloc(num_blocks ? num_blocks : 1, sizeof *blocks);
  if (!segments || !blocks) {
    free(segments);
    free(blocks);
    st = loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_memory_snapshot: out of host memory");
    goto done;
  }
  size_t s = 0, k = 0;
  for (size_t i = 0; i < loom_device_segments.count; ++i) {
    const loom_segment_entry *e = &loom_device_segments.entries[i];
    if (e->owner != a->device) continue;
    const block *head = e->data;
    loom_memory_segment_info *seg = &segments[s++];
    *seg = (loom_memory_segment_info){.device = a->device, .pool = head->pool,
                                      .address = e->base, .total_size = e->size,
                                      .stream_id = head->stream_id};
    for (const block *b = head; b; b = b->next) {
      const loom_memory_block_info info = block_info(b);
      blocks[k++] = info;
      ++seg->num_blocks;
      if (info.state == LOOM_BLOCK_INACTIVE) continue;
      seg->active_size += info.size;
      seg->requested_size += info.requested_size;
      if (info.state == LOOM_BLOCK_ALLOCATED) seg->allocated_size += info.size;
    }
  }
  *out_segments = segments;
  *out_blocks = blocks;
  *out_num_segments = num_segments;
done:
  pthread_rwlock_unlock(&loom_device_segments.lock);
  return st;
}

loom_status loom_allocator_snapshot(loom_allocator *a, loom_memory_segment_fn fn, void *user) {
  loom_memory_segment_info *segments;
  loom_memory_block_info *blocks;
  size_t num_segments;
  pthread_mutex_lock(&a->lock);
  if (a->pending) loom_allocator_process_pending(a);
  const loom_status st = copy_segments(a, &segments, &num_segments, &blocks);
  pthread_mutex_unlock(&a->lock);
  if (st != LOOM_OK) return st;
  const loom_memory_block_info *first = blocks;
  for (size_t i = 0; i < num_segments; ++i) {
    if (fn(user, &segments[i], first)) break;
    first += segments[i].num_blocks;
  }
  free(segments);
  free(blocks);
  return LOOM_OK;
}

loom_status loom_allocator_block_query(loom_allocator *a, const void *ptr,
                                       uint64_t *out_stream_id, loom_memory_block_info *out) {
  pthread_mutex_lock(&a->lock);
  const block *b = loom_block_map_get(&a->live, ptr);
  if (b) {
    *out_stream_id = b->stream_id;
    *out = block_info(b);
  }
  pthread_mutex_unlock(&a->lock);
  if (!b)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_memory_block_query: %p is not the start of a live block on loom:%d",
                      ptr, a->device);
  return LOOM_OK;
}
