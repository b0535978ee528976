/* Deterministic embedding backward: bucket, then reduce per row. */
#include "kernels/index/embedding.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* Columns accumulated per pass over a row's occurrences. */
#define EMB_COLUMN_BLOCK 256

int loom_embedding_backward_bucket(const loom_kernel_args *args,
                                   int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (begin != 0) return LOOM_OK;
  const loom_tensor *idx = &args->tensors[0];
  int64_t *offsets = (int64_t *)args->tensors[1].data;
  int64_t *order = (int64_t *)args->tensors[2].data;
  const int64_t nw = args->scalars[0].i, n = loom_nn_numel(idx);
  for (int64_t r = 0; r <= nw; ++r) offsets[r] = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = loom_nn_load_index(idx->data, idx->dtype, i);
    if (r < 0 || r >= nw) {
      /* leave empty buckets behind: the row pass that may still run on
       * this stream then reads nothing */
      for (int64_t k = 0; k <= nw; ++k) offsets[k] = 0;
      return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,
                        "index %lld is out of range for %lld embeddings",
                        (long long)r, (long long)nw);
    }
    offsets[r + 1]++;
  }
  for (int64_t r = 0; r < nw; ++r) offsets[r + 1] += offsets[r];
  /* Fill in position order; offsets[r] walks forward and is restored below. */
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = loom_nn_load_index(idx->data, idx->dtype, i);
    order[offsets[r]++] = i;
  }
  for (int64_t r = nw; r > 0; --r) offsets[r] = offsets[r - 1];
  offsets[0] = 0;
  return LOOM_OK;
}

int loom_embedding_backward_rows(const loom_kernel_args *args, int64_t begin,
                                 int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *go = &args->tensors[0], *gw = &args->tensors[3];
  const int64_t *offsets = (const int64_t *)args->tensors[1].data;
  const int64_t *order = (const int64_t *)args->tensors[2].data;
  const int64_t padding_idx = args->scalars[0].i;
  const int scale_by_freq = args->scalars[1].i != 0;
  if (go->rank != 2 || gw->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t d = gw->sizes[1];
  double acc[EMB_COLUMN_BLOCK];
  for (int64_t r = begin; r < end; ++r) {
    const int64_t o0 = offsets[r], o1 = offsets[r + 1];
    if (o0 < 0 || o1 < o0 || o1 > args->tensors[2].sizes[0])
      return LOOM_ERROR_INVALID_ARGUMENT;
    const int skip = r == padding_idx || o0 == o1;
    const double scale = scale_by_freq && o1 > o0 ? 1.0 / (double)(o1 - o0) : 1.0;
    for (int64_t j0 = 0; j0 < d; j0 += EMB_COLUMN_BLOCK) {
      const int64_t j1 = j0 + EMB_COLUMN_BLOCK < d ? j0 + EMB_COLUMN_BLOCK : d;
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] = 0.0;
      if (!skip) {
        for (int64_t o = o0; o < o1; ++o) {
          if (order[o] < 0 || order[o] >= go->sizes[0]) return LOOM_ERROR_INVALID_ARGUMENT;
          const int64_t row = order[o] * go->strides[0];
          for (int64_t j = j0; j < j1; ++j)
            acc[j - j0] += loom_nn_load(go->data, go->dtype, row + j * go->strides[1]);
        }
      }
      for (int64_t j = j0; j < j1; ++j)
        loom_nn_store(gw->data, gw->dtype, r * d + j, acc[j - j0] * scale);
    }
  }
  return LOOM_OK;
}

/* The p-norm of row r of w (p = +-inf: max / min magnitude, p = 0: count of
 * nonzeros), in double over the elements in order, rounded to w's dtype as
 * the CPU's norm returns it. */
static double emb_row_norm(const loom_tensor *w, int64_t r, double p) {
  const int64_t d = w->sizes[1], base = r * w->strides[0];
  double acc = isinf(p) && p < 0 ? INFINITY : 0.0;
  for (int64_t j = 0; j < d; ++j) {
    const double a = fabs(loom_nn_load(w->data, w->dtype, base + j * w->strides[1]));
    if (isinf(p)) acc = p > 0 ? (a > acc || a != a ? a : acc) : (a < acc || a != a ? a : acc);
    else if (p == 0) acc += a != 0;
    else if (p == 1) acc += a;
    else if (p == 2) acc += a * a;
    else acc += pow(a, p);
  }
  if (!isinf(p) && p != 0 && p != 1) acc = p == 2 ? sqrt(acc) : pow(acc, 1.0 / p);
  uint64_t cell = 0;
  loom_nn_store(&cell, w->dtype, 0, acc);
  return loom_nn_load(&cell, w->dtype, 0);
}

int loom_embedding_renorm_rows(const loom_kernel_args *args, int64_t begin,
                               int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t *offsets = (const int64_t *)args->tensors[0].data;
  const loom_tensor *w = &args->tensors[1];
  if (w->rank != 2 || !loom_nn_is_float(w->dtype)) return LOOM_ERROR_INVALID_ARGUMENT;
  const double max_norm = args->scalars[0].f, p = args->scalars[1].f;
  const int64_t d = w->sizes[1];
  for (int64_t r = begin; r < end; ++r) {
    if (offsets[r + 1] == offsets[r]) continue;
    const double norm = emb_row_norm(w, r, p);
    if (!(norm > max_norm)) continue;
    double scale = max_norm / (norm + 1e-7);
    /* the CPU multiplies by the scale as a scalar of the row's math type */
    if (w->dtype != LOOM_FLOAT64) scale = (double)(float)scale;
    const int64_t base = r * w->strides[0];
    for (int64_t j = 0; j < d; ++j) {
      const int64_t at = base + j * w->strides[1];
      loom_nn_store(w->data, w->dtype, at, loom_nn_load(w->data, w->dtype, at) * scale);
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_embedding_kernels[] = {
    {"embedding.renorm_rows", loom_embedding_renorm_rows, NULL},
    {"embedding.backward_bucket", loom_embedding_backward_bucket, NULL},
    {"embedding.backward_rows", loom_embedding_backward_rows, NULL},
    {NULL, NULL, NULL},
};
