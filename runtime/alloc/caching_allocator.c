/* Caching device allocator (see caching_allocator.h).
 *
 * Blocks live in segments obtained from the driver; within a segment they
 * form an address-ordered list so that freed neighbours coalesce. Free
 * blocks sit in one size-ordered list per pool keyed by (stream, size,
 * address): a block is only reused by the stream it was allocated for,
 * which keeps reuse safe without synchronization because a stream runs in
 * order. Blocks also used by other streams (loom_record_stream) are held on
 * a pending list until events recorded on those streams at free time have
 * completed. */
#include "runtime/alloc/caching_allocator.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/fuse.h"
#include "loom/graph.h"
#include "runtime/alloc/caching_allocator_internal.h"

loom_segment_table loom_device_segments = LOOM_SEGMENT_TABLE_INIT;

/* ---- statistics ------------------------------------------------------------ */

static void stat_update(loom_stat *s, int64_t amount) {
  s->current += amount;
  if (amount > 0) s->allocated += amount; else s->freed -= amount;
  if (s->current > s->peak) s->peak = s->current;
}

static void stat_pool(loom_stat *stats, int pool, int64_t amount) {
  stat_update(&stats[LOOM_POOL_ALL], amount);
  stat_update(&stats[pool], amount);
}

const char *loom_format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  if (u == 0) snprintf(buf, len, "%" PRIu64 " bytes", bytes);
  else snprintf(buf, len, "%.2f %s", v, units[u]);
  return buf;
}

/* ---- free lists ------------------------------------------------------------ */

static int block_less(const block *a, uint64_t stream_id, size_t size, uintptr_t ptr) {
  if (a->stream_id != stream_id) return a->stream_id < stream_id;
  if (a->size != size) return a->size < size;
  return a->ptr < ptr;
}

static size_t lower_bound(const free_list *l, uint64_t stream_id, size_t size, uintptr_t ptr) {
  size_t lo = 0, hi = l->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (block_less(l->items[mid], stream_id, size, ptr)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int is_split(const block *b) { return b->prev || b->next; }

/* The accounting of `b` joining / leaving its pool's free list. */
static void list_joined(loom_allocator *a, block *b) {
  b->in_free_list = 1;
  a->free_list_bytes += b->size;
  if (is_split(b)) {
    b->counted_split = 1;
    stat_pool(a->stats.inactive_split, b->pool, 1);
    stat_pool(a->stats.inactive_split_bytes, b->pool, (int64_t)b->size);
  }
}

static void list_left(loom_allocator *a, block *b) {
  b->in_free_list = 0;
  a->free_list_bytes -= b->size;
  if (b->counted_split) {
    b->counted_split = 0;
    stat_pool(a->stats.inactive_split, b->pool, -1);
    stat_pool(a->stats.inactive_split_bytes, b->pool, -(int64_t)b->size);
  }
}

static int free_list_insert(loom_allocator *a, block *b) {
  free_list *l = &a->pools[b->pool];
  if (l->count == l->capacity) {
    size_t cap = l->capacity ? 2 * l->capacity : 64;
    block **grown = realloc(l->items, cap * sizeof *grown);
    if (!grown) return -1;
    l->items = grown;
    l->capacity = cap;
  }
  size_t i = lower_bound(l, b->stream_id, b->size, b->ptr);
  memmove(&l->items[i + 1], &l->items[i], (l->count - i) * sizeof *l->items);
  l->items[i] = b;
  ++l->count;
  list_joined(a, b);
  return 0;
}

static void free_list_remove(loom_allocator *a, block *b) {
  free_list *l = &a->pools[b->pool];
  size_t i = lower_bound(l, b->stream_id, b->size, b->ptr);
  if (i < l->count && l->items[i] == b) {
    memmove(&l->items[i], &l->items[i + 1], (l->count - i - 1) * sizeof *l->items);
    --l->count;
  }
  list_left(a, b);
}

/* Puts `in` (in no list) where `out` (listed) is: in place when `in` sorts between out's
 * neighbours, as a segment's free tail does when a split shrinks it or a free grows it;
 * else by removal and insertion (-1: no host memory; `out` is out of the list). */
static int free_list_replace(loom_allocator *a, block *out, block *in) {
  free_list *l = &a->pools[out->pool];
  const size_t i = lower_bound(l, out->stream_id, out->size, out->ptr);
  if (in->pool == out->pool && i < l->count && l->items[i] == out &&
      (i == 0 || block_less(l->items[i - 1], in->stream_id, in->size, in->ptr)) &&
      (i + 1 == l->count || block_less(in, l->items[i + 1]->stream_id, l->items[i + 1]->size,
                                       l->items[i + 1]->ptr))) {
    list_left(a, out);
    l->items[i] = in;
    list_joined(a, in);
    return 0;
  }
  free_list_remove(a, out);
  return free_list_insert(a, in);
}

/* ---- segments ---------------------------------------------------------------- */

static size_t round_size(size_t size) {
  if (size < LOOM_ALLOC_ROUND) return LOOM_ALLOC_ROUND;
  return (size + LOOM_ALLOC_ROUND - 1) / LOOM_ALLOC_ROUND * LOOM_ALLOC_ROUND;
}

static size_t segment_size_for(size_t rounded) {
  if (rounded <= LOOM_ALLOC_SMALL_LIMIT) return LOOM_ALLOC_SMALL_SEGMENT;
  if (rounded < LOOM_ALLOC_MID_LIMIT) return LOOM_ALLOC_LARGE_SEGMENT;
  const size_t g = LOOM_ALLOC_SMALL_SEGMENT;
  return (rounded + g - 1) / g * g;
}

static block *segment_alloc(loom_allocator *a, size_t seg_size, int pool, uint64_t stream_id) {
  const int64_t reserved = a->stats.reserved_bytes[LOOM_POOL_ALL].current;
  if ((uint64_t)reserved + seg_size > a->limit) return NULL;
  block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  void *ptr = NULL;
  if (a->driver->segment_alloc(a->driver->context, a->device, seg_size, &ptr) != LOOM_OK || !ptr) {
    free(b);
    return NULL;
  }
  if (loom_segment_table_insert(&loom_device_segments, ptr, seg_size, a->device, b) != 0) {
    a->driver->segment_free(a->driver->context, a->device, ptr, seg_size);
    free(b);
    return NULL;
  }
  *b = (block){.ptr = (uintptr_t)ptr, .size = seg_size, .stream_id = stream_id, .pool = pool};
  stat_pool(a->stats.segment, pool, 1);
  stat_pool(a->stats.reserved_bytes, pool, (int64_t)seg_size);
  a->stats.num_device_alloc++;
  loom_allocator_notify(a, &(loom_memory_event){.kind = LOOM_MEMORY_EVENT_SEGMENT_ALLOC,
                                                .device = a->device, .address = b->ptr,
                                                .size = seg_size, .stream_id = stream_id});
  return b;
}

static void segment_release(loom_allocator *a, block *b) {
  loom_allocator_notify(a, &(loom_memory_event){.kind = LOOM_MEMORY_EVENT_SEGMENT_FREE,
                                                .device = a->device, .address = b->ptr,
                                                .size = b->size, .stream_id = b->stream_id});
  loom_segment_table_remove(&loom_device_segments, (void *)b->ptr);
  a->driver->segment_free(a->driver->context, a->device, (void *)b->ptr, b->size);
  stat_pool(a->stats.segment, b->pool, -1);
  stat_pool(a->stats.reserved_bytes, b->pool, -(int64_t)b->size);
  a->stats.num_device_free++;
  free(b);
}

static int pool_index(const loom_allocator *a, uint64_t id) {
  for (int i = 0; i < a->num_pools; ++i)
    if (a->pool_ids[i] == id) return i;
  return -1;
}

/* Returns whole free segments to the driver, but for those of graph pools
 * in use. */
static void release_cached(loom_allocator *a) {
  for (int pool = LOOM_POOL_SMALL; pool <= LOOM_POOL_LARGE; ++pool) {
    free_list *l = &a->pools[pool];
    for (size_t i = l->count; i-- > 0;) {
      block *b = l->items[i];
      if (is_split(b)) continue;
      if (a->num_pools && pool_index(a, b->stream_id) >= 0) continue;
      free_list_remove(a, b);
      segment_release(a, b);
    }
  }
}

/* ---- blocks ------------------------------------------------------------------ */

/* At most this many spare block records are kept per allocator. */
#define SPARE_BLOCKS_MAX 256

/* A zeroed block record: a spare one when there is one. */
static block *block_new(loom_allocator *a) {
  block *b = a->spare;
  if (!b) return calloc(1, sizeof *b);
  a->spare = b->next;
  --a->num_spare;
  return memset(b, 0, sizeof *b);
}

/* Gives back the record of a block merged into a neighbour; a freed block
 * owns no stream uses or events any more. */
static void block_recycle(loom_allocator *a, block *b) {
  if (a->num_spare >= SPARE_BLOCKS_MAX) {
    free(b);
    return;
  }
  b->next = a->spare;
  a->spare = b;
  ++a->num_spare;
}

/* A freed block becomes inactive: coalesce with free neighbours, cache it. */
static void block_deactivate(loom_allocator *a, block *b) {
  loom_allocator_notify(a, &(loom_memory_event){.kind = LOOM_MEMORY_EVENT_FREE_COMPLETED,
                                                .device = a->device, .address = b->ptr,
                                                .size = b->size, .requested_size = b->requested,
                                                .stream_id = b->stream_id});
  b->requested = 0;
  stat_pool(a->stats.active, b->pool, -1);
  stat_pool(a->stats.active_bytes, b->pool, -(int64_t)b->size);
  block *prev = b->prev, *next = b->next;
  if (prev && prev->in_free_list) {
    free_list_remove(a, prev);
    prev->size += b->size;
    prev->next = next;
    if (next) next->prev = prev;
    block_recycle(a, b);
    b = prev;
  }
  /* Allocation of a list slot can only fail under host memory exhaustion;
   * the block then stays out of the cache until the segment goes. */
  next = b->next;
  if (next && next->in_free_list) {
    b->size += next->size;
    b->next = next->next;
    if (b->next) b->next->prev = b;
    (void)free_list_replace(a, next, b); /* next's key is unchanged */
    block_recycle(a, next);
    return;
  }
  (void)free_list_insert(a, b);
}

static int events_done(block *b) {
  for (int i = 0; i < b->num_events; ++i)
    if (loom_event_query(b->events[i]) == LOOM_ERROR_NOT_READY) return 0;
  return 1;
}

static void release_events(block *b) {
  for (int i = 0; i < b->num_events; ++i) loom_event_release(b->events[i]);
  free(b->events);
  b->events = NULL;
  b->num_events = 0;
}

void loom_allocator_process_pending(loom_allocator *a) {
  block **link = &a->pending;
  while (*link) {
    block *b = *link;
    if (events_done(b)) {
      *link = b->pending_next;
      b->pending_next = NULL;
      release_events(b);
      block_deactivate(a, b);
    } else {
      link = &b->pending_next;
    }
  }
}

/* Waits (without the lock) for every pending block's events. */
static void drain_pending(loom_allocator *a) {
  while (a->pending) {
    block *b = a->pending;
    loom_event_t *wait_for = NULL;
    for (int i = 0; i < b->num_events && !wait_for; ++i)
      if (loom_event_query(b->events[i]) == LOOM_ERROR_NOT_READY) wait_for = b->events[i];
    if (wait_for) {
      loom_event_retain(wait_for);
      pthread_mutex_unlock(&a->lock);
      loom_event_synchronize(wait_for);
      loom_event_release(wait_for);
      pthread_mutex_lock(&a->lock);
    }
    loom_allocator_process_pending(a);
  }
}

/* The smallest free block of `stream_id` of at least `size` bytes, left in
 * its list (take_block takes it out). */
static block *find_free(loom_allocator *a, int pool, uint64_t stream_id, size_t size) {
  free_list *l = &a->pools[pool];
  size_t i = lower_bound(l, stream_id, size, 0);
  if (i < l->count && l->items[i]->stream_id == stream_id) return l->items[i];
  return NULL;
}

static int should_split(const block *b, size_t size) {
  const size_t rest = b->size - size;
  return b->pool == LOOM_POOL_SMALL ? rest >= LOOM_ALLOC_ROUND : rest > LOOM_ALLOC_SMALL_LIMIT;
}

/* Takes `b` (free, in its list or a new segment's) for an allocation of
 * `rounded` bytes, splitting off the rest when it is large enough: the rest
 * takes b's place in the list when it can. */
static void take_block(loom_allocator *a, block *b, size_t rounded) {
  block *rest = should_split(b, rounded) ? block_new(a) : NULL;
  if (!rest) {
    if (b->in_free_list) free_list_remove(a, b);
    return;
  }
  *rest = (block){.ptr = b->ptr + rounded, .size = b->size - rounded,
                  .stream_id = b->stream_id, .pool = b->pool, .prev = b, .next = b->next};
  /* (b's key is still the one its list slot was sorted by.) */
  if ((b->in_free_list ? free_list_replace(a, b, rest) : free_list_insert(a, rest)) != 0) {
    /* no host memory for the tail's slot: b stays whole */
    block_recycle(a, rest);
    return;
  }
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = rounded;
}

/* Bytes that could still be handed out under the limit. */
static uint64_t bytes_free(const loom_allocator *a) {
  const uint64_t reserved = (uint64_t)a->stats.reserved_bytes[LOOM_POOL_ALL].current;
  const uint64_t in_use = reserved - a->free_list_bytes;
  return a->limit > in_use ? a->limit - in_use : 0;
}

static void notify_oom(loom_allocator *a, size_t size, uint64_t stream_id) {
  loom_allocator_notify(a, &(loom_memory_event){.kind = LOOM_MEMORY_EVENT_OOM,
                                                .device = a->device, .size = size,
                                                .stream_id = stream_id,
                                                .device_free = (size_t)bytes_free(a)});
}

static void oom_message(loom_allocator *a, size_t size) {
  char req[32], fr[32], lim[32], alloc[32], res[32];
  const uint64_t reserved = (uint64_t)a->stats.reserved_bytes[LOOM_POOL_ALL].current;
  const uint64_t active = (uint64_t)a->stats.active_bytes[LOOM_POOL_ALL].current;
  const uint64_t free_bytes = a->limit > active ? a->limit - active : 0;
  loom_error(LOOM_ERROR_OUT_OF_MEMORY,
             "tried to allocate %s on loom:%d; %s free of %s limit; "
             "%s allocated, %s reserved",
             loom_format_bytes(size, req, sizeof req), a->device,
             loom_format_bytes(free_bytes, fr, sizeof fr),
             loom_format_bytes(a->limit, lim, sizeof lim),
             loom_format_bytes((uint64_t)a->stats.allocated_bytes[LOOM_POOL_ALL].current, alloc,
                               sizeof alloc),
             loom_format_bytes(reserved, res, sizeof res));
}

static block *segment_alloc_fitting(loom_allocator *a, size_t rounded, int pool,
                                    uint64_t stream_id) {
  const size_t seg = segment_size_for(rounded);
  block *b = segment_alloc(a, seg, pool, stream_id);
  /* Near the limit, a segment of exactly the (2 MiB-rounded) size may fit
   * where the usual larger one does not. */
  if (!b && pool == LOOM_POOL_LARGE) {
    const size_t g = LOOM_ALLOC_SMALL_SEGMENT, exact = (rounded + g - 1) / g * g;
    if (exact < seg) b = segment_alloc(a, exact, pool, stream_id);
  }
  return b;
}

loom_status loom_allocator_malloc(loom_allocator *a, size_t size, loom_stream_t *stream,
                                  uint64_t stream_id, void **out_ptr) {
  (void)stream;
  if (size > ((size_t)1 << 62)) {
    char req[32];
    pthread_mutex_lock(&a->lock);
    a->stats.num_ooms++;
    notify_oom(a, size, stream_id);
    pthread_mutex_unlock(&a->lock);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "tried to allocate %s on loom:%d",
                      loom_format_bytes(size, req, sizeof req), a->device);
  }
  const size_t rounded = round_size(size);
  const int pool = rounded <= LOOM_ALLOC_SMALL_LIMIT ? LOOM_POOL_SMALL : LOOM_POOL_LARGE;
  pthread_mutex_lock(&a->lock);
  if (a->pending) loom_allocator_process_pending(a);
  block *b = find_free(a, pool, stream_id, rounded);
  if (!b) b = segment_alloc_fitting(a, rounded, pool, stream_id);
  if (!b) {
    a->stats.num_alloc_retries++;
    drain_pending(a);
    b = find_free(a, pool, stream_id, rounded);
    if (!b) {
      release_cached(a);
      b = segment_alloc_fitting(a, rounded, pool, stream_id);
    }
  }
  if (!b) {
    a->stats.num_ooms++;
    notify_oom(a, size, stream_id);
    oom_message(a, size);
    pthread_mutex_unlock(&a->lock);
    return LOOM_ERROR_OUT_OF_MEMORY;
  }
  if (loom_block_map_put(&a->live, (void *)b->ptr, b) != 0) {
    if (!b->in_free_list) (void)free_list_insert(a, b);
    pthread_mutex_unlock(&a->lock);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_malloc: out of host memory");
  }
  take_block(a, b, rounded);
  b->allocated = 1;
  b->requested = size;
  stat_pool(a->stats.allocation, pool, 1);
  stat_pool(a->stats.active, pool, 1);
  stat_pool(a->stats.allocated_bytes, pool, (int64_t)b->size);
  stat_pool(a->stats.active_bytes, pool, (int64_t)b->size);
  stat_pool(a->stats.requested_bytes, pool, (int64_t)size);
  *out_ptr = (void *)b->ptr;
  pthread_mutex_unlock(&a->lock);
  return LOOM_OK;
}

/* Adaptive eager hears of blocks no other stream used as they are freed:
 * a compiled region need not store a value no tensor holds (loom/fuse.h). */
static _Atomic(loom_fuse_release_fn) release_hook;

void loom_fuse_set_release_hook(loom_fuse_release_fn fn) { atomic_store(&release_hook, fn); }

loom_status loom_allocator_free(loom_allocator *a, void *ptr) {
  pthread_mutex_lock(&a->lock);
  block *b = loom_block_map_take(&a->live, ptr);
  if (!b) {
    pthread_mutex_unlock(&a->lock);
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_free: %p is not the start of a live block on loom:%d", ptr, a->device);
  }
  b->allocated = 0;
  stat_pool(a->stats.allocation, b->pool, -1);
  stat_pool(a->stats.allocated_bytes, b->pool, -(int64_t)b->size);
  stat_pool(a->stats.requested_bytes, b->pool, -(int64_t)b->requested);
  loom_stream_t **uses = b->uses;
  const int num_uses = b->num_uses;
  b->uses = NULL;
  b->num_uses = b->cap_uses = 0;
  if (num_uses == 0) {
    /* Told before the block can be handed out again. */
    const loom_fuse_release_fn hook = atomic_load_explicit(&release_hook, memory_order_acquire);
    if (hook) hook(b->stream_id, b->ptr, b->size);
    block_deactivate(a, b);
    pthread_mutex_unlock(&a->lock);
    return LOOM_OK;
  }
  b->events = calloc((size_t)num_uses, sizeof *b->events);
  for (int i = 0; i < num_uses; ++i) {
    loom_event_t *ev = NULL;
    if (b->events && loom_event_create(a->device, 0, &ev) == LOOM_OK &&
        loom_event_record_uncaptured(ev, uses[i]) == LOOM_OK) {
      b->events[b->num_events++] = ev;
    } else if (ev) {
      loom_event_release(ev);
      /* No event means no way to know when the stream is done: wait now. */
      loom_stream_synchronize(uses[i]);
    } else {
      loom_stream_synchronize(uses[i]);
    }
  }
  b->pending_next = a->pending;
  a->pending = b;
  pthread_mutex_unlock(&a->lock);
  /* Dropping the last reference may destroy a stream, which waits for its
   * queue: never do that under the allocator lock. */
  for (int i = 0; i < num_uses; ++i) loom_stream_release(uses[i]);
  free(uses);
  return LOOM_OK;
}

loom_status loom_allocator_detach(loom_allocator *a, void *ptr, int *out_fd, size_t *out_size) {
  *out_fd = -1;
  *out_size = 0;
  if (!(a->driver->api_version >= 4 && a->driver->segment_detach))
    return LOOM_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&a->lock);
  block *b = loom_block_map_get(&a->live, ptr);
  /* The block must be its segment's first, with at most a free tail, have
   * no other stream's use to wait for, and not belong to a graph's pool
   * (replays write there). */
  block *tail = b ? b->next : NULL;
  if (!b || b->prev || (tail && (!tail->in_free_list || tail->next)) || b->num_uses ||
      pool_index(a, b->stream_id) >= 0) {
    pthread_mutex_unlock(&a->lock);
    return LOOM_ERROR_NOT_SUPPORTED;
  }
  const size_t seg_size = b->size + (tail ? tail->size : 0);
  int fd = -1;
  if (a->driver->segment_detach(a->driver->context, a->device, ptr, seg_size, &fd) != LOOM_OK) {
    pthread_mutex_unlock(&a->lock);
    return LOOM_ERROR_NOT_SUPPORTED;
  }
  /* As if the block were freed and its segment returned to the driver. */
  (void)loom_block_map_take(&a->live, ptr);
  stat_pool(a->stats.allocation, b->pool, -1);
  stat_pool(a->stats.allocated_bytes, b->pool, -(int64_t)b->size);
  stat_pool(a->stats.requested_bytes, b->pool, -(int64_t)b->requested);
  stat_pool(a->stats.active, b->pool, -1);
  stat_pool(a->stats.active_bytes, b->pool, -(int64_t)b->size);
  if (tail) {
    free_list_remove(a, tail);
    free(tail);
  }
  b->size = seg_size;
  b->next = NULL;
  loom_allocator_notify(a, &(loom_memory_event){.kind = LOOM_MEMORY_EVENT_SEGMENT_FREE,
                                                .device = a->device, .address = b->ptr,
                                                .size = b->size, .stream_id = b->stream_id});
  loom_segment_table_remove(&loom_device_segments, (void *)b->ptr);
  stat_pool(a->stats.segment, b->pool, -1);
  stat_pool(a->stats.reserved_bytes, b->pool, -(int64_t)b->size);
  a->stats.num_device_free++;
  free(b);
  pthread_mutex_unlock(&a->lock);
  *out_fd = fd;
  *out_size = seg_size;
  return LOOM_OK;
}

loom_status loom_allocator_record_stream(loom_allocator *a, void *ptr, loom_stream_t *stream,
                                         uint64_t stream_id) {
  pthread_mutex_lock(&a->lock);
  block *b = loom_block_map_get(&a->live, ptr);
  if (!b) {
    pthread_mutex_unlock(&a->lock);
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_record_stream: %p is not the start of a live block on loom:%d", ptr,
                      a->device);
  }
  if (stream_id == b->stream_id) goto done;
  for (int i = 0; i < b->num_uses; ++i)
    if (b->uses[i] == stream) goto done;
  if (b->num_uses == b->cap_uses) {
    int cap = b->cap_uses ? 2 * b->cap_uses : 4;
    loom_stream_t **grown = realloc(b->uses, (size_t)cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&a->lock);
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_record_stream: out of host memory");
    }
    b->uses = grown;
    b->cap_uses = cap;
  }
  loom_stream_retain(stream);
  b->uses[b->num_uses++] = stream;
done:
  pthread_mutex_unlock(&a->lock);
  return LOOM_OK;
}

/* ---- lifetime, queries ------------------------------------------------------- */

loom_status loom_allocator_create(const loom_driver *driver, int device, uint64_t limit,
                                  loom_allocator **out) {
  loom_allocator *a = calloc(1, sizeof *a);
  if (!a) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_init: out of host memory");
  pthread_mutex_init(&a->lock, NULL);
  a->driver = driver;
  a->device = device;
  a->limit = limit;
  a->stats.max_split_size = -1; /* no limit, as c10 reports SIZE_MAX */
  *out = a;
  return LOOM_OK;
}

void loom_allocator_destroy(loom_allocator *a) {
  pthread_mutex_lock(&a->lock);
  a->quiet = 1;
  drain_pending(a);
  /* Live blocks die with the runtime: put them back so segments coalesce. */
  block *b;
  while ((b = loom_block_map_any(&a->live)) != NULL) {
    loom_block_map_take(&a->live, (void *)b->ptr);
    for (int i = 0; i < b->num_uses; ++i) loom_stream_release(b->uses[i]);
    free(b->uses);
    b->uses = NULL;
    b->num_uses = 0;
    b->allocated = 0;
    block_deactivate(a, b);
  }
  a->num_pools = 0; /* everything goes, graph pools included */
  release_cached(a);
  free(a->pool_ids);
  free(a->pool_refs);
  for (int pool = 0; pool < LOOM_POOL_COUNT; ++pool) free(a->pools[pool].items);
  loom_block_map_free(&a->live);
  for (block *next; a->spare; a->spare = next) next = a->spare->next, free(a->spare);
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

/* ---- graph pools --------------------------------------------------------------- */

loom_status loom_allocator_pool_retain(loom_allocator *a, uint64_t pool_id) {
  pthread_mutex_lock(&a->lock);
  const int i = pool_index(a, pool_id);
  if (i >= 0) {
    a->pool_refs[i]++;
    pthread_mutex_unlock(&a->lock);
    return LOOM_OK;
  }
  if (a->num_pools == a->cap_pools) {
    const int cap = a->cap_pools ? 2 * a->cap_pools : 8;
    uint64_t *ids = realloc(a->pool_ids, (size_t)cap * sizeof *ids);
    if (ids) a->pool_ids = ids;
    int *refs = ids ? realloc(a->pool_refs, (size_t)cap * sizeof *refs) : NULL;
    if (refs) a->pool_refs = refs;
    if (!ids || !refs) {
      pthread_mutex_unlock(&a->lock);
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "graph capture: out of host memory");
    }
    a->cap_pools = cap;
  }
  a->pool_ids[a->num_pools] = pool_id;
  a->pool_refs[a->num_pools++] = 1;
  pthread_mutex_unlock(&a->lock);
  return LOOM_OK;
}

void loom_allocator_pool_release(loom_allocator *a, uint64_t pool_id, uint64_t heir_id) {
  pthread_mutex_lock(&a->lock);
  const int i = pool_index(a, pool_id);
  if (i < 0 || --a->pool_refs[i] > 0) {
    pthread_mutex_unlock(&a->lock);
    return;
  }
  a->pool_ids[i] = a->pool_ids[a->num_pools - 1];
  a->pool_refs[i] = a->pool_refs[a->num_pools - 1];
  a->num_pools--;
  /* The pool's segments: collected first, since returning one to the
   * driver changes the table. */
  block **heads = NULL;
  size_t n = 0;
  pthread_rwlock_rdlock(&loom_device_segments.lock);
  for (size_t k = 0; k < loom_device_segments.count; ++k) {
    const loom_segment_entry *e = &loom_device_segments.entries[k];
    const block *head = e->data;
    if (e->owner == a->device && head->stream_id == pool_id) ++n;
  }
  heads = n ? malloc(n * sizeof *heads) : NULL;
  n = 0;
  for (size_t k = 0; heads && k < loom_device_segments.count; ++k) {
    const loom_segment_entry *e = &loom_device_segments.entries[k];
    block *head = e->data;
    if (e->owner == a->device && head->stream_id == pool_id) heads[n++] = head;
  }
  pthread_rwlock_unlock(&loom_device_segments.lock);
  for (size_t k = 0; k < n; ++k) {
    block *head = heads[k];
    if (!is_split(head) && head->in_free_list) {
      free_list_remove(a, head);
      segment_release(a, head);
      continue;
    }
    for (block *b = head; b; b = b->next) {
      const int cached = b->in_free_list;
      if (cached) free_list_remove(a, b);
      b->stream_id = heir_id;
      if (cached) (void)free_list_insert(a, b);
    }
  }
  free(heads);
  pthread_mutex_unlock(&a->lock);
  /* Without memory for the list, the pool's blocks stay under its id: the
   * next empty_cache returns its free segments, as it now may. */
}

void loom_allocator_stats(loom_allocator *a, loom_memory_stats *out) {
  pthread_mutex_lock(&a->lock);
  if (a->pending) loom_allocator_process_pending(a);
  *out = a->stats;
  pthread_mutex_unlock(&a->lock);
}

static void reset_peak(loom_stat *s, int n) {
  for (int i = 0; i < n; ++i) s[i].peak = s[i].current;
}

static void reset_accumulated(loom_stat *s, int n) {
  for (int i = 0; i < n; ++i) s[i].allocated = s[i].freed = 0;
}

#define FOR_EACH_POOL_STAT(X, st)                                                       \
  X((st).allocation, LOOM_POOL_COUNT); X((st).segment, LOOM_POOL_COUNT);                \
  X((st).active, LOOM_POOL_COUNT); X((st).inactive_split, LOOM_POOL_COUNT);             \
  X((st).allocated_bytes, LOOM_POOL_COUNT); X((st).reserved_bytes, LOOM_POOL_COUNT);    \
  X((st).active_bytes, LOOM_POOL_COUNT); X((st).inactive_split_bytes, LOOM_POOL_COUNT); \
  X((st).requested_bytes, LOOM_POOL_COUNT); X(&(st).oversize_allocations, 1);           \
  X(&(st).oversize_segments, 1)

void loom_allocator_reset_peak(loom_allocator *a) {
  pthread_mutex_lock(&a->lock);
  FOR_EACH_POOL_STAT(reset_peak, a->stats);
  pthread_mutex_unlock(&a->lock);
}

void loom_allocator_reset_accumulated(loom_allocator *a) {
  pthread_mutex_lock(&a->lock);
  FOR_EACH_POOL_STAT(reset_accumulated, a->stats);
  a->stats.num_alloc_retries = 0;
  a->stats.num_ooms = 0;
  a->stats.num_sync_all_streams = 0;
  a->stats.num_device_alloc = 0;
  a->stats.num_device_free = 0;
  pthread_mutex_unlock(&a->lock);
}

void loom_allocator_empty_cache(loom_allocator *a) {
  pthread_mutex_lock(&a->lock);
  /* As c10 does: blocks held back for other streams are waited for, so
   * that their segments can go too. */
  drain_pending(a);
  release_cached(a);
  pthread_mutex_unlock(&a->lock);
}

void loom_allocator_info(loom_allocator *a, size_t *out_free, size_t *out_total) {
  pthread_mutex_lock(&a->lock);
  if (a->pending) loom_allocator_process_pending(a);
  *out_free = (size_t)bytes_free(a);
  *out_total = (size_t)a->limit;
  pthread_mutex_unlock(&a->lock);
}

int loom_allocator_owner(const void *ptr, loom_allocator **out_allocator) {
  loom_segment_entry e;
  if (!ptr || !loom_segment_table_find(&loom_device_segments, ptr, &e)) return -1;
  (void)out_allocator;
  return e.owner;
}

void loom_allocator_retire_stream(loom_allocator *a, uint64_t old_id, uint64_t new_id) {
  pthread_mutex_lock(&a->lock);
  pthread_rwlock_rdlock(&loom_device_segments.lock);
  for (size_t i = 0; i < loom_device_segments.count; ++i) {
    const loom_segment_entry *e = &loom_device_segments.entries[i];
    if (e->owner != a->device) continue;
    block *head = e->data;
    if (head->stream_id != old_id) continue; /* a segment serves one stream */
    for (block *b = head; b; b = b->next) {
      const int cached = b->in_free_list;
      if (cached) free_list_remove(a, b);
      b->stream_id = new_id;
      if (cached) (void)free_list_insert(a, b);
    }
  }
  pthread_rwlock_unlock(&loom_device_segments.lock);
  pthread_mutex_unlock(&a->lock);
}

size_t loom_allocator_extent(loom_allocator *a, const void *ptr) {
  const uintptr_t addr = (uintptr_t)ptr;
  size_t extent = 0;
  /* Look the segment up under the allocator lock: segments are only
   * released under it, so the block list cannot vanish while we walk it. */
  pthread_mutex_lock(&a->lock);
  const block *start = loom_block_map_get(&a->live, ptr);
  if (start) { /* the usual case: a block's own address */
    extent = start->size;
    pthread_mutex_unlock(&a->lock);
    return extent;
  }
  loom_segment_entry e;
  if (loom_segment_table_find(&loom_device_segments, ptr, &e) && e.owner == a->device) {
    for (block *b = e.data; b; b = b->next) {
      if (addr >= b->ptr && addr - b->ptr < b->size) {
        if (b->allocated) extent = b->size - (addr - b->ptr);
        break;
      }
    }
  }
  pthread_mutex_unlock(&a->lock);
  return extent;
}
