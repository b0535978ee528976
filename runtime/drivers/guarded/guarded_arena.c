/* The guarded driver's address reservations and the offsets in them.
 *
 * Both reservations are PROT_NONE and MAP_NORESERVE, so they cost address
 * space only. A segment takes a run of offsets (first fit over a sorted
 * free list) and maps that run read-write in the alias reservation alone;
 * freeing maps it PROT_NONE again, which hands the pages back at once. */
#define _GNU_SOURCE /* MAP_NORESERVE, MADV_HUGEPAGE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/drivers/guarded/guarded_internal.h"

#define GUARDED_MIN_RESERVATION ((size_t)1 << 30)

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t page_size(void) {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

static void *reserve(size_t size) {
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static char *aligned(void *p) {
  return (char *)(((uintptr_t)p + GUARDED_GRANULE - 1) & ~(uintptr_t)(GUARDED_GRANULE - 1));
}

loom_status guarded_arena_reserve(guarded_arena *a, size_t size) {
  size = round_up(size < GUARDED_MIN_RESERVATION ? GUARDED_MIN_RESERVATION : size, GUARDED_GRANULE);
  /* A process limited in address space (ulimit -v, sanitizers' shadow)
   * still gets a smaller device rather than none. */
  for (; size >= GUARDED_MIN_RESERVATION; size /= 2) {
    const size_t map_size = size + GUARDED_GRANULE; /* slack for the alignment */
    void *guard = reserve(map_size);
    void *alias = guard ? reserve(map_size) : NULL;
    if (guard && alias) {
      guarded_extent *list = malloc(16 * sizeof *list);
      if (!list) {
        munmap(guard, map_size);
        munmap(alias, map_size);
        return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "loom_init: out of host memory");
      }
      list[0] = (guarded_extent){.offset = 0, .length = size};
      pthread_mutex_lock(&a->lock);
      a->guard_map = guard;
      a->alias_map = alias;
      a->map_size = map_size;
      a->guard = aligned(guard);
      a->alias = aligned(alias);
      a->size = size;
      a->free_list = list;
      a->num_free = 1;
      a->free_capacity = 16;
      a->num_segments = 0;
      pthread_mutex_unlock(&a->lock);
      return LOOM_OK;
    }
    if (guard) munmap(guard, map_size);
  }
  return loom_error(LOOM_ERROR_UNAVAILABLE,
                    "guarded driver: cannot reserve address space for device memory");
}

void guarded_arena_release(guarded_arena *a) {
  pthread_mutex_lock(&a->lock);
  if (a->guard_map) munmap(a->guard_map, a->map_size);
  if (a->alias_map) munmap(a->alias_map, a->map_size);
  free(a->free_list);
  a->guard_map = a->alias_map = NULL;
  a->guard = a->alias = NULL;
  a->size = a->map_size = 0;
  a->free_list = NULL;
  a->num_free = a->free_capacity = a->num_segments = 0;
  pthread_mutex_unlock(&a->lock);
}

/* Takes `length` offsets, first fit. Keeps room in the free list for the
 * extent that freeing every live segment could add, so that giving back
 * never allocates (segment_free cannot fail). Under the lock. */
static int take(guarded_arena *a, size_t length, size_t *out_offset) {
  if (a->free_capacity < a->num_segments + 3) {
    const size_t capacity = 2 * (a->num_segments + 3);
    guarded_extent *grown = realloc(a->free_list, capacity * sizeof *grown);
    if (!grown) return -1;
    a->free_list = grown;
    a->free_capacity = capacity;
  }
  for (size_t i = 0; i < a->num_free; ++i) {
    guarded_extent *e = &a->free_list[i];
    if (e->length < length) continue;
    *out_offset = e->offset;
    e->offset += length;
    e->length -= length;
    if (e->length == 0) {
      memmove(e, e + 1, (a->num_free - i - 1) * sizeof *e);
      --a->num_free;
    }
    ++a->num_segments;
    return 0;
  }
  return -1;
}

/* Returns offsets to the free list, merging with its neighbours. Under the
 * lock. */
static void give(guarded_arena *a, size_t offset, size_t length) {
  size_t i = 0;
  while (i < a->num_free && a->free_list[i].offset < offset) ++i;
  guarded_extent *list = a->free_list;
  const int joins_left = i > 0 && list[i - 1].offset + list[i - 1].length == offset;
  const int joins_right = i < a->num_free && offset + length == list[i].offset;
  if (joins_left && joins_right) {
    list[i - 1].length += length + list[i].length;
    memmove(&list[i], &list[i + 1], (a->num_free - i - 1) * sizeof *list);
    --a->num_free;
  } else if (joins_left) {
    list[i - 1].length += length;
  } else if (joins_right) {
    list[i].offset = offset;
    list[i].length += length;
  } else {
    memmove(&list[i + 1], &list[i], (a->num_free - i) * sizeof *list);
    list[i] = (guarded_extent){.offset = offset, .length = length};
    ++a->num_free;
  }
  --a->num_segments;
}

loom_status guarded_arena_map(guarded_arena *a, size_t size, void **out_device) {
  *out_device = NULL;
  if (size == 0 || size > SIZE_MAX - GUARDED_GRANULE)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "guarded driver: cannot map %zu bytes", size);
  const size_t length = round_up(size, GUARDED_GRANULE);
  size_t offset = 0;
  pthread_mutex_lock(&a->lock);
  const int taken = take(a, length, &offset);
  pthread_mutex_unlock(&a->lock);
  if (taken != 0)
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY,
                      "guarded driver: no room for %zu bytes in the %zu-byte device address space",
                      size, a->size);
  char *alias = a->alias + offset;
  const size_t mapped = round_up(size, page_size());
  if (mmap(alias, mapped, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
    pthread_mutex_lock(&a->lock);
    give(a, offset, length);
    pthread_mutex_unlock(&a->lock);
    return loom_error(LOOM_ERROR_OUT_OF_MEMORY, "guarded driver: cannot map %zu bytes", size);
  }
#ifdef MADV_HUGEPAGE
  /* As on the host driver: a streaming kernel must not stall at every 4 KiB page. */
  if (size >= GUARDED_GRANULE) (void)madvise(alias, mapped, MADV_HUGEPAGE);
#endif
  *out_device = a->guard + offset;
  return LOOM_OK;
}

void guarded_arena_unmap(guarded_arena *a, void *device, size_t size) {
  const size_t offset = (size_t)((char *)device - a->guard);
  char *alias = a->alias + offset;
  const size_t mapped = round_up(size, page_size());
  /* Mapping PROT_NONE over the segment drops its pages and makes a stale
   * translated pointer fault, as the device address itself does. */
  if (mmap(alias, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0) == MAP_FAILED) {
    (void)madvise(alias, mapped, MADV_DONTNEED);
    (void)mprotect(alias, mapped, PROT_NONE);
  }
  pthread_mutex_lock(&a->lock);
  give(a, offset, round_up(size, GUARDED_GRANULE));
  pthread_mutex_unlock(&a->lock);
}
