/* What library kernels declare about themselves (loom/kernel_abi.h,
 * kernels/registry.h).
 *
 * LOOM_KERNEL_ELEMENTWISE: each of these walks the row-major linear range
 * [begin, end) of one shape shared by all its tensors (kernels/base/iter.h)
 * and touches nothing else, so the host driver may chain the chunks of
 * consecutive launches (adaptive eager). A kernel joins this list only with
 * that contract; tests/test_fusion.py runs each listed kernel at many grains
 * and compares the bytes.
 *
 * Row maps: the launches of these that walk contiguous rows of the last
 * dim say which tensors they walk by rows, which they read whole and which
 * they write (kernels/registry.h). */
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

/* ---- row maps ------------------------------------------------------------------ */

/* Whether `t` holds `count` elements contiguously (rank 0 holds one). */
static int contiguous_count(const loom_tensor *t, int64_t count) {
  if (!t->data || t->rank < 0 || t->rank > LOOM_MAX_DIMS) return 0;
  int64_t expect = 1;
  for (int32_t d = t->rank - 1; d >= 0; --d) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return 0;
    expect *= t->sizes[d];
  }
  return expect == count;
}

/* norm.layer_forward (kernels/nn/norm.c): tensors x, w, b, y, mean, rstd;
 * scalars n, eps, rms. Row r reads x[r*n, (r+1)*n), w and b whole, writes
 * y's row and mean[r], rstd[r]. */
static int layer_norm_rows(const loom_kernel_args *a, loom_row_map *out) {
  if (a->num_tensors < 6 || a->num_scalars < 3 || a->scalars[0].i <= 0) return 0;
  const int64_t n = a->scalars[0].i;
  if (a->range > INT64_MAX / n) return 0;
  const loom_tensor *t = a->tensors;
  if (!contiguous_count(&t[0], a->range * n) || !contiguous_count(&t[3], a->range * n)) return 0;
  if (!contiguous_count(&t[5], a->range) || (t[4].data && !contiguous_count(&t[4], a->range)))
    return 0;
  *out = (loom_row_map){.n = n, .row_tensors = 1u << 0 | 1u << 3,
                        .whole_tensors = 1u << 1 | 1u << 2,
                        .written = 1u << 3 | 1u << 4 | 1u << 5};
  return 1;
}

/* softmax.forward (kernels/nn/softmax.c): tensors in, out; scalars dim,
 * take_log. Over the last dim of contiguous tensors, row r is the
 * elements [r*n, (r+1)*n) of both. */
static int softmax_rows(const loom_kernel_args *a, loom_row_map *out) {
  if (a->num_tensors < 2 || a->num_scalars < 2) return 0;
  const loom_tensor *t = a->tensors;
  if (t[0].rank < 1 || t[0].rank > LOOM_MAX_DIMS || a->scalars[0].i != t[0].rank - 1) return 0;
  const int64_t n = t[0].sizes[t[0].rank - 1];
  if (n <= 0 || a->range > INT64_MAX / n) return 0;
  if (!contiguous_count(&t[0], a->range * n) || !contiguous_count(&t[1], a->range * n)) return 0;
  *out = (loom_row_map){.n = n, .row_tensors = 1u << 0 | 1u << 1, .written = 1u << 1};
  return 1;
}

static const struct {
  const char *name;
  loom_row_map_fn map;
} row_maps[] = {
    {"norm.layer_forward", layer_norm_rows},
    {"softmax.forward", softmax_rows},
};

loom_row_map_fn loom_kernel_library_row_map(loom_kernel_fn fn) {
  if (!fn) return NULL;
  for (size_t i = 0; i < sizeof row_maps / sizeof *row_maps; ++i) {
    const loom_kernel_entry *e = loom_kernel_library_find(row_maps[i].name);
    if (e && e->fn == fn) return row_maps[i].map;
  }
  return NULL;
}

size_t loom_kernel_library_row_kernels(const char **out, size_t capacity) {
  const size_t n = sizeof row_maps / sizeof *row_maps;
  for (size_t i = 0; i < n && i < capacity; ++i) out[i] = row_maps[i].name;
  return n;
}
