/* Binary search of each value in its boundary row, with the CPU's
 * comparisons (!(b >= v) and !(b > v)), so NaN orders as it does there. */
#include "kernels/reduce/search.h"

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

int loom_kernel_searchsorted(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1], *bd = &args->tensors[2],
                    *st = &args->tensors[3];
  const int right = args->scalars[0].i != 0;
  const int64_t per_row = args->scalars[1].i;
  if (bd->rank < 1 || in->dtype != bd->dtype ||
      (out->dtype != LOOM_INT64 && out->dtype != LOOM_INT32) ||
      (st->data && st->dtype != LOOM_INT64) || per_row < 0)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t n = bd->sizes[bd->rank - 1];
  const int is_float = loom_nn_is_float(in->dtype);
  const int64_t *sorter = (const int64_t *)st->data;
  for (int64_t e = begin; e < end; ++e) {
    const int64_t row = per_row ? e / per_row * n : 0;
    int64_t lo = 0, hi = n;
    if (is_float) {
      const double v = loom_nn_load(in->data, in->dtype, e);
      while (lo < hi) {
        const int64_t mid = lo + ((hi - lo) >> 1);
        const int64_t at = row + (sorter ? sorter[row + mid] : mid);
        const double b = loom_nn_load(bd->data, bd->dtype, at);
        if (right ? !(b > v) : !(b >= v)) lo = mid + 1;
        else hi = mid;
      }
    } else {
      const int64_t v = loom_nn_load_index(in->data, in->dtype, e);
      while (lo < hi) {
        const int64_t mid = lo + ((hi - lo) >> 1);
        const int64_t b =
            loom_nn_load_index(bd->data, bd->dtype, row + (sorter ? sorter[row + mid] : mid));
        if (right ? !(b > v) : !(b >= v)) lo = mid + 1;
        else hi = mid;
      }
    }
    if (out->dtype == LOOM_INT64) ((int64_t *)out->data)[e] = lo;
    else ((int32_t *)out->data)[e] = (int32_t)lo;
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_search_kernels[] = {
    {"search.searchsorted", loom_kernel_searchsorted, NULL},
    {NULL, NULL, NULL},
};
