/* Deterministic embedding backward: bucket, then reduce per row. */
#include "kernels/index/embedding.h"

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

const loom_kernel_entry loom_embedding_kernels[] = {
    {"embedding.backward_bucket", loom_embedding_backward_bucket, NULL},
    {"embedding.backward_rows", loom_embedding_backward_rows, NULL},
    {NULL, NULL, NULL},
};
