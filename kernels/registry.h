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

/* Calls `visit` on every entry of the library (for tests). */
void loom_kernel_library_each(void (*visit)(const loom_kernel_entry *entry, void *user),
                              void *user);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_REGISTRY_H */
