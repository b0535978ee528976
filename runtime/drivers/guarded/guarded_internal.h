/* The guarded driver's internals: the two address reservations and the
 * fault handler that names a stray host access. */
#ifndef LOOM_GUARDED_INTERNAL_H
#define LOOM_GUARDED_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

/* Segments are placed at multiples of this in both reservations, so that a
 * segment's alias can use transparent huge pages as the host driver's do. */
#define GUARDED_GRANULE ((size_t)2 << 20)

/* A run of unused offsets in the reservations. */
typedef struct guarded_extent {
  size_t offset, length;
} guarded_extent;

/* Two reservations of `size` bytes: `guard` (PROT_NONE forever: the device
 * addresses) and `alias` (PROT_NONE except where a segment is mapped
 * read-write). A segment at guard + o lives at alias + o, so translating
 * an address is one subtraction and one comparison, with no lock. */
typedef struct guarded_arena {
  char *guard, *alias;         /* GUARDED_GRANULE-aligned; NULL if not reserved */
  size_t size;
  void *guard_map, *alias_map; /* what munmap gets back */
  size_t map_size;
  pthread_mutex_t lock;        /* guards the free list */
  guarded_extent *free_list;   /* sorted by offset, never adjacent */
  size_t num_free, free_capacity, num_segments;
} guarded_arena;

/* Reserves two ranges of `size` bytes (rounded up to the granule), or as
 * much as the address space gives down to 1 GiB. */
loom_status guarded_arena_reserve(guarded_arena *a, size_t size);
/* Unmaps both reservations and every segment still in them. */
void guarded_arena_release(guarded_arena *a);
/* Maps `size` bytes of fresh zeroed memory; *out_device is its device
 * address (in `guard`). */
loom_status guarded_arena_map(guarded_arena *a, size_t size, void **out_device);
/* Returns the pages of a segment from guarded_arena_map to the system. */
void guarded_arena_unmap(guarded_arena *a, void *device, size_t size);

/* The alias of a device address; any other address unchanged. */
static inline void *guarded_to_alias(const guarded_arena *a, const void *p) {
  const uintptr_t offset = (uintptr_t)p - (uintptr_t)a->guard;
  return offset < a->size ? a->alias + offset : (void *)p;
}

static inline int guarded_is_device(const guarded_arena *a, const void *p) {
  return (uintptr_t)p - (uintptr_t)a->guard < a->size;
}

/* Installs the SIGSEGV/SIGBUS handler once per process; the previous
 * handlers still get every fault it does not claim. */
void guarded_fault_install(void);
/* The ranges the handler names: faults in [guard, guard + size) are host
 * code touching device memory, faults in [alias, alias + size) a command
 * touching memory no live segment holds. size 0 forgets them. */
void guarded_fault_watch(const void *guard, const void *alias, size_t size);

#endif
