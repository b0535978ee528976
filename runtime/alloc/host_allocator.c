/* Pinned host memory: blocks of power-of-two sizes, each its own mapping,
 * cached per size class. Locking the pages is best effort: a refused
 * mlock (RLIMIT_MEMLOCK) leaves ordinary memory that still works.
 * Registered ranges (loom_host_register: memory the caller mapped, such as
 * a shared segment) join the same table as blocks that are never cached,
 * counted or unmapped here. */
#include "runtime/alloc/host_allocator.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "loom/hal.h"
#include "runtime/alloc/segment_table.h"

#define HOST_MIN_SHIFT 12 /* one page */
#define HOST_CLASSES 64

typedef struct host_block {
  void *ptr;
  size_t size;
  int size_class;
  int registered; /* the caller's memory (loom_host_register) */
  _Atomic int allocated;
  struct host_block *next_free;
} host_block;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block *free_blocks[HOST_CLASSES];
static loom_host_stats host_stats;
static loom_segment_table host_segments = LOOM_SEGMENT_TABLE_INIT;

static void stat_update(loom_stat *s, int64_t amount) {
  s->current += amount;
  if (amount > 0) s->allocated += amount; else s->freed -= amount;
  if (s->current > s->peak) s->peak = s->current;
}

static int class_of(size_t size) {
  int c = HOST_MIN_SHIFT;
  while (c < HOST_CLASSES - 1 && ((size_t)1 << c) < size) ++c;
  return c;
}

loom_status loom_host_malloc(size_t size, void **out_ptr) {
  if (!out_ptr) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_host_malloc: out_ptr is NULL");
  *out_ptr = NULL;
  if (size == 0) return LOOM_OK;
  if (size > ((size_t)1 << 62))
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_host_malloc: cannot pin %zu bytes", size);
  const int c = class_of(size);
  const size_t block_size = (size_t)1 << c;
  pthread_mutex_lock(&host_lock);
  host_block *b = free_blocks[c];
  if (b) {
    free_blocks[c] = b->next_free;
  } else {
    pthread_mutex_unlock(&host_lock);
    void *p = mmap(NULL, block_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_host_malloc: cannot map %zu bytes",
                        block_size);
    (void)mlock(p, block_size);
    b = calloc(1, sizeof *b);
    if (!b || loom_segment_table_insert(&host_segments, p, block_size, 0, b) != 0) {
      free(b);
      munmap(p, block_size);
      return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_host_malloc: out of host memory");
    }
    b->ptr = p;
    b->size = block_size;
    b->size_class = c;
    pthread_mutex_lock(&host_lock);
    stat_update(&host_stats.segment, 1);
    stat_update(&host_stats.reserved_bytes, (int64_t)block_size);
    host_stats.num_host_alloc++;
  }
  atomic_store(&b->allocated, 1);
  stat_update(&host_stats.allocation, 1);
  stat_update(&host_stats.allocated_bytes, (int64_t)b->size);
  pthread_mutex_unlock(&host_lock);
  *out_ptr = b->ptr;
  return LOOM_OK;
}

loom_status loom_host_free(void *ptr) {
  if (!ptr) return LOOM_OK;
  loom_segment_entry e;
  if (!loom_segment_table_find(&host_segments, ptr, &e) || (void *)e.base != ptr ||
      ((host_block *)e.data)->registered)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_host_free: %p is not a pinned block from loom_host_malloc", ptr);
  host_block *b = e.data;
  pthread_mutex_lock(&host_lock);
  if (!atomic_load(&b->allocated)) {
    pthread_mutex_unlock(&host_lock);
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_host_free: %p was already freed", ptr);
  }
  atomic_store(&b->allocated, 0);
  stat_update(&host_stats.allocation, -1);
  stat_update(&host_stats.allocated_bytes, -(int64_t)b->size);
  b->next_free = free_blocks[b->size_class];
  free_blocks[b->size_class] = b;
  pthread_mutex_unlock(&host_lock);
  return LOOM_OK;
}

int loom_host_is_pinned(const void *ptr) {
  return loom_host_block_base(ptr) != NULL;
}

void *loom_host_block_base(const void *ptr) {
  loom_segment_entry e;
  if (!ptr || !loom_segment_table_find(&host_segments, ptr, &e)) return NULL;
  host_block *b = e.data;
  /* The entry may be stale by now only if the block is being unmapped by
   * empty_cache, which only takes free blocks: allocated implies alive. */
  return atomic_load(&b->allocated) ? b->ptr : NULL;
}

loom_status loom_host_register(void *ptr, size_t size) {
  if (!ptr || size == 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_host_register: empty range %p +%zu",
                      ptr, size);
  if (loom_segment_table_find(&host_segments, ptr, NULL) ||
      loom_segment_table_find(&host_segments, (char *)ptr + size - 1, NULL))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_host_register: [%p, +%zu) overlaps pinned memory", ptr, size);
  host_block *b = calloc(1, sizeof *b);
  if (!b) return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_host_register: out of host memory");
  b->ptr = ptr;
  b->size = size;
  b->registered = 1;
  atomic_store(&b->allocated, 1);
  if (loom_segment_table_insert(&host_segments, ptr, size, 0, b) != 0) {
    free(b);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_host_register: out of host memory");
  }
  return LOOM_OK;
}

loom_status loom_host_unregister(void *ptr) {
  loom_segment_entry e;
  if (!ptr || !loom_segment_table_find(&host_segments, ptr, &e) || (void *)e.base != ptr ||
      !((host_block *)e.data)->registered)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "loom_host_unregister: %p does not start a registered range", ptr);
  loom_segment_table_remove(&host_segments, ptr);
  free(e.data);
  return LOOM_OK;
}

loom_status loom_host_empty_cache(void) {
  pthread_mutex_lock(&host_lock);
  for (int c = 0; c < HOST_CLASSES; ++c) {
    while (free_blocks[c]) {
      host_block *b = free_blocks[c];
      free_blocks[c] = b->next_free;
      loom_segment_table_remove(&host_segments, b->ptr);
      munmap(b->ptr, b->size);
      stat_update(&host_stats.segment, -1);
      stat_update(&host_stats.reserved_bytes, -(int64_t)b->size);
      host_stats.num_host_free++;
      free(b);
    }
  }
  pthread_mutex_unlock(&host_lock);
  return LOOM_OK;
}

loom_status loom_host_stats_get(loom_host_stats *out) {
  if (!out) return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "loom_host_stats_get: out is NULL");
  pthread_mutex_lock(&host_lock);
  *out = host_stats;
  pthread_mutex_unlock(&host_lock);
  return LOOM_OK;
}

loom_status loom_host_reset_peak(void) {
  pthread_mutex_lock(&host_lock);
  loom_stat *s[] = {&host_stats.allocation, &host_stats.segment, &host_stats.allocated_bytes,
                    &host_stats.reserved_bytes};
  for (size_t i = 0; i < 4; ++i) s[i]->peak = s[i]->current;
  pthread_mutex_unlock(&host_lock);
  return LOOM_OK;
}

loom_status loom_host_reset_accumulated(void) {
  pthread_mutex_lock(&host_lock);
  loom_stat *s[] = {&host_stats.allocation, &host_stats.segment, &host_stats.allocated_bytes,
                    &host_stats.reserved_bytes};
  for (size_t i = 0; i < 4; ++i) s[i]->allocated = s[i]->freed = 0;
  host_stats.num_host_alloc = host_stats.num_host_free = 0;
  pthread_mutex_unlock(&host_lock);
  return LOOM_OK;
}

/* Shutdown frees every pinned block, live ones too, so that a process that
 * shuts the runtime down leaves nothing behind; registrations end (their
 * memory stays mapped: it is the caller's). */
void loom_host_allocator_shutdown(void) {
  loom_host_empty_cache();
  pthread_mutex_lock(&host_lock);
  loom_segment_entry e;
  for (;;) {
    pthread_rwlock_rdlock(&host_segments.lock);
    int any = host_segments.count > 0;
    if (any) e = host_segments.entries[0];
    pthread_rwlock_unlock(&host_segments.lock);
    if (!any) break;
    host_block *b = e.data;
    loom_segment_table_remove(&host_segments, b->ptr);
    if (!b->registered) munmap(b->ptr, b->size); /* a registered range is its owner's */
    free(b);
  }
  loom_segment_table_clear(&host_segments);
  memset(&host_stats, 0, sizeof host_stats);
  pthread_mutex_unlock(&host_lock);
}
