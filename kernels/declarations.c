/* What library kernels declare about themselves (loom/kernel_abi.h).
 *
 * LOOM_KERNEL_ELEMENTWISE: each of these walks the row-major linear range
 * [begin, end) of one shape shared by all its tensors (kernels/base/iter.h)
 * and touches nothing else, so the host driver may chain the chunks of
 * consecutive launches (adaptive eager). A kernel joins this list only with
 * that contract; tests/test_fusion.py runs each listed kernel at many grains
 * and compares the bytes. */
#include <string.h>

#include "kernels/registry.h"

static const struct {
  const char *name;
  uint32_t flags;
} declarations[] = {
    {"pointwise.apply", LOOM_KERNEL_ELEMENTWISE}, /* kernels/pointwise/pointwise.c */
    {"pointwise.special", LOOM_KERNEL_ELEMENTWISE}, /* kernels/pointwise/special.c */
    {"copy.strided", LOOM_KERNEL_ELEMENTWISE},    /* kernels/base/copy.c: copies, casts */
    {"fill.strided", LOOM_KERNEL_ELEMENTWISE},    /* kernels/base/fill.c */
};

uint32_t loom_kernel_library_flags(const char *name) {
  if (!name) return 0;
  for (size_t i = 0; i < sizeof declarations / sizeof *declarations; ++i)
    if (!strcmp(declarations[i].name, name)) return declarations[i].flags;
  return 0;
}
