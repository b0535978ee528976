/* An open-addressing hash map from block address to its record. Not
 * thread-safe: the owner's lock guards it. */
#ifndef LOOM_ALLOC_BLOCK_MAP_H
#define LOOM_ALLOC_BLOCK_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct loom_block_map {
  uintptr_t *keys; /* 0 marks an empty slot */
  void **values;
  size_t count, capacity; /* capacity is a power of two */
} loom_block_map;

/* Returns 0, or -1 when out of host memory. */
int loom_block_map_put(loom_block_map *m, const void *key, void *value);
void *loom_block_map_get(const loom_block_map *m, const void *key);
/* Removes and returns the value for `key` (NULL if absent). */
void *loom_block_map_take(loom_block_map *m, const void *key);
/* Some value in the map, or NULL if empty. */
void *loom_block_map_any(const loom_block_map *m);
void loom_block_map_free(loom_block_map *m);

#endif
