#include "runtime/alloc/block_map.h"

#include <stdlib.h>

static size_t slot_of(uintptr_t key, size_t capacity) {
  /* Block addresses are multiples of 512: mix the high bits down. */
  uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 17) & (capacity - 1);
}

static int grow(loom_block_map *m) {
  size_t cap = m->capacity ? 2 * m->capacity : 256;
  uintptr_t *keys = calloc(cap, sizeof *keys);
  void **values = calloc(cap, sizeof *values);
  if (!keys || !values) {
    free(keys);
    free(values);
    return -1;
  }
  for (size_t i = 0; i < m->capacity; ++i) {
    if (!m->keys[i]) continue;
    size_t j = slot_of(m->keys[i], cap);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    values[j] = m->values[i];
  }
  free(m->keys);
  free(m->values);
  m->keys = keys;
  m->values = values;
  m->capacity = cap;
  return 0;
}

int loom_block_map_put(loom_block_map *m, const void *key, void *value) {
  if ((m->count + 1) * 2 > m->capacity && grow(m) != 0) return -1;
  const uintptr_t k = (uintptr_t)key;
  size_t i = slot_of(k, m->capacity);
  while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->capacity - 1);
  if (!m->keys[i]) ++m->count;
  m->keys[i] = k;
  m->values[i] = value;
  return 0;
}

static size_t find(const loom_block_map *m, uintptr_t k) {
  if (!m->capacity || !k) return SIZE_MAX;
  size_t i = slot_of(k, m->capacity);
  while (m->keys[i]) {
    if (m->keys[i] == k) return i;
    i = (i + 1) & (m->capacity - 1);
  }
  return SIZE_MAX;
}

void *loom_block_map_get(const loom_block_map *m, const void *key) {
  size_t i = find(m, (uintptr_t)key);
  return i == SIZE_MAX ? NULL : m->values[i];
}

void *loom_block_map_take(loom_block_map *m, const void *key) {
  size_t i = find(m, (uintptr_t)key);
  if (i == SIZE_MAX) return NULL;
  void *value = m->values[i];
  /* Backward-shift deletion keeps probe chains intact without tombstones. */
  const size_t mask = m->capacity - 1;
  size_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!m->keys[j]) break;
    size_t home = slot_of(m->keys[j], m->capacity);
    /* Move j into the hole unless its home lies cyclically in (hole, j]. */
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      m->keys[hole] = m->keys[j];
      m->values[hole] = m->values[j];
      hole = j;
    }
  }
  m->keys[hole] = 0;
  m->values[hole] = NULL;
  --m->count;
  return value;
}

void *loom_block_map_any(const loom_block_map *m) {
  for (size_t i = 0; i < m->capacity; ++i)
    if (m->keys[i]) return m->values[i];
  return NULL;
}

void loom_block_map_free(loom_block_map *m) {
  free(m->keys);
  free(m->values);
  *m = (loom_block_map){0};
}
