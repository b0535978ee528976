/* kernels/registry.h — the kernel library's names.
 *
 * Each kernel family lists its entry points in a table named
 * loom_<family>_kernels (in its own .c file, ended by {NULL, NULL}) under
 * the names its public header in include/loom/kernels/ gives; registry.c
 * gathers the tables. The host driver resolves launches through
 * loom_kernel_library_find. A family with ISA variants registers one entry
 * per name and chooses the variant inside. */
#ifndef LOOM_KERNELS_REGISTRY_H
#define LOOM_KERNELS_REGISTRY_H

#include <stddef.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A named entry point: a kernel, its planner (for families whose launch
 * geometry depends on the ISA they choose, e.g. the GEMM's tiles), or both. */
typedef struct loom_kernel_entry {
  const char *name;
  loom_kernel_fn fn;
  loom_kernel_plan_fn plan;
} loom_kernel_entry;

/* The library's entry named `name`, or NULL. */
const loom_kernel_entry *loom_kernel_library_find(const char *name);

/* What the library's kernel named `name` declares about itself: the
 * LOOM_KERNEL_* bits of loom/kernel_abi.h (kernels/declarations.c), 0 for
 * a kernel that declares nothing or a name the library lacks. */
uint32_t loom_kernel_library_flags(const char *name);

/* Row maps (kernels/declarations.c). A row-wise kernel (layer norm,
 * softmax over the last dim) may describe a launch as walking rows of `n`
 * elements, `range` counting the rows. The call for rows [r0, r1) then
 * touches
 *   - of each tensor in `row_tensors` (contiguous, range * n elements),
 *     exactly the elements [r0 * n, r1 * n) in row-major order;
 *   - of each tensor in `whole_tensors`, any of its elements, reading only;
 *   - of any other tensor, only elements that belong to rows [r0, r1)
 *     (per-row statistics);
 * and nothing else in memory; it writes only the tensors in `written`, and
 * each row's bytes do not depend on how the rows are split. The host
 * driver's adaptive eager (loom/fuse.h) may then run rows [r0, r1) of such
 * a launch between the elements [r0 * n, r1 * n) of elementwise launches
 * over the same elements. tests/test_fusion.py runs each declared kernel
 * at many grains and compares the bytes. */
typedef struct loom_row_map {
  int64_t n;              /* elements per row */
  uint32_t row_tensors;   /* bit i: tensor i is walked row by row */
  uint32_t whole_tensors; /* bit i: tensor i is read whole by every call */
  uint32_t written;       /* bit i: the kernel writes tensor i */
} loom_row_map;

/* Fills `out` and returns 1 if this launch walks rows as above, else 0. */
typedef int (*loom_row_map_fn)(const loom_kernel_args *args, loom_row_map *out);

/* The row map of the library kernel `fn` (a registry entry's fn), NULL
 * for a kernel that declares none. */
loom_row_map_fn loom_kernel_library_row_map(loom_kernel_fn fn);

/* The names of the kernels that declare a row map (up to `capacity`). */
size_t loom_kernel_library_row_kernels(const char **out, size_t capacity);

/* Calls `visit` on every entry of the library (for tests). */
void loom_kernel_library_each(void (*visit)(const loom_kernel_entry *entry, void *user),
                              void *user);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_REGISTRY_H */
