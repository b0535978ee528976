/* embedding_bag: one bag per launch item forward (rows added in index order
 * in the element type), the gradient bucketed by weight row (no atomics)
 * or, for max, one column per item. Contracts in
 * loom/kernels/embedding_bag.h. */
#include "kernels/index/embedding_bag.h"

#include <math.h>

#include "kernels/registry.h"
#include "loom/status.h"

/* Bag b's index range [*s, *e). */
static int embag_range(const loom_tensor *offsets, int64_t n, int64_t b, int last,
                       int64_t *s, int64_t *e) {
  const int64_t *o = (const int64_t *)offsets->data;
  const int64_t nb = offsets->sizes[0] - (last ? 1 : 0);
  *s = o[b];
  *e = b + 1 < nb || last ? o[b + 1] : n;
  if (o[0] != 0 || *s < 0 || *e < *s || *e > n) return LOOM_ERROR_INVALID_ARGUMENT;
  return LOOM_OK;
}

#define EMBAG_FORWARD(NAME, T, FMA)                                                         \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {               \
    const loom_tensor *out = &args->tensors[0], *w = &args->tensors[4];                     \
    int64_t *o2b = (int64_t *)args->tensors[1].data;                                        \
    int64_t *bag_size = (int64_t *)args->tensors[2].data;                                   \
    int64_t *max_idx = (int64_t *)args->tensors[3].data;                                    \
    const int64_t *idx = (const int64_t *)args->tensors[5].data;                            \
    const T *psw = (const T *)args->tensors[7].data;                                        \
    const int mode = (int)args->scalars[0].i, last = args->scalars[1].i != 0;               \
    const int64_t pad = args->scalars[2].i;                                                 \
    const int64_t n = args->tensors[5].sizes[0], nw = w->sizes[0], d = w->sizes[1];         \
    const int64_t ws0 = w->strides[0], ws1 = w->strides[1];                                 \
    const T *wd = (const T *)w->data;                                                       \
    for (int64_t b = begin; b < end; ++b) {                                                 \
      int64_t s, e;                                                                         \
      const int st = embag_range(&args->tensors[6], n, b, last, &s, &e);                    \
      if (st != LOOM_OK) return st;                                                         \
      T *y = (T *)out->data + b * d;                                                        \
      int64_t *mi = max_idx ? max_idx + b * d : NULL;                                       \
      for (int64_t j = 0; j < d; ++j) {                                                     \
        y[j] = 0;                                                                           \
        if (mi) mi[j] = 0;                                                                  \
      }                                                                                     \
      int64_t count = 0;                                                                    \
      for (int64_t i = s; i < e; ++i) {                                                     \
        o2b[i] = b;                                                                         \
        const int64_t r = idx[i];                                                           \
        if (r < 0 || r >= nw)                                                               \
          return loom_error(LOOM_ERROR_INDEX_OUT_OF_RANGE,                                  \
                            "index %lld is out of range for %lld embeddings",               \
                            (long long)r, (long long)nw);                                   \
        if (r == pad) continue;                                                             \
        const T *row = wd + r * ws0;                                                        \
        if (mode == LOOM_EMBAG_MAX) {                                                       \
          for (int64_t j = 0; j < d; ++j) {                                                 \
            const T v = row[j * ws1];                                                       \
            if (count == 0 || v > y[j]) {                                                   \
              y[j] = v;                                                                     \
              mi[j] = r;                                                                    \
            }                                                                               \
          }                                                                                 \
        } else if (psw) {                                                                   \
          const T f = psw[i];                                                               \
          for (int64_t j = 0; j < d; ++j) y[j] = FMA(f, row[j * ws1], y[j]);                \
        } else {                                                                            \
          for (int64_t j = 0; j < d; ++j) y[j] += row[j * ws1];                             \
        }                                                                                   \
        ++count;                                                                            \
      }                                                                                     \
      bag_size[b] = count;                                                                  \
      if (mode == LOOM_EMBAG_MEAN && count > 0)                                             \
        for (int64_t j = 0; j < d; ++j) y[j] /= (T)count;                                   \
    }                                                                                       \
    return LOOM_OK;                                                                         \
  }
EMBAG_FORWARD(embag_forward_f32, float, fmaf)
EMBAG_FORWARD(embag_forward_f64, double, fma)

static int embag_float(int32_t dt) { return dt == LOOM_FLOAT32 || dt == LOOM_FLOAT64; }

int loom_embedding_bag_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 8 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *t = args->tensors;
  const int mode = (int)args->scalars[0].i;
  if (!embag_float(t[4].dtype) || t[0].dtype != t[4].dtype || t[4].rank != 2 ||
      t[0].rank != 2 || t[0].sizes[1] != t[4].sizes[1] || t[5].dtype != LOOM_INT64 ||
      t[6].dtype != LOOM_INT64 || t[1].dtype != LOOM_INT64 || t[2].dtype != LOOM_INT64 ||
      t[6].sizes[0] < 1 || (mode == LOOM_EMBAG_MAX) != (t[3].data != NULL) ||
      (t[7].data && (mode != LOOM_EMBAG_SUM || t[7].dtype != t[4].dtype)) ||
      mode < LOOM_EMBAG_SUM || mode > LOOM_EMBAG_MAX)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return t[4].dtype == LOOM_FLOAT32 ? embag_forward_f32(args, begin, end)
                                    : embag_forward_f64(args, begin, end);
}

#define EMBAG_BACK_ROWS(NAME, T)                                                            \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {               \
    T *gw = (T *)args->tensors[0].data;                                                     \
    const loom_tensor *g = &args->tensors[1];                                               \
    const int64_t *offs = (const int64_t *)args->tensors[2].data;                           \
    const int64_t *order = (const int64_t *)args->tensors[3].data;                          \
    const int64_t *o2b = (const int64_t *)args->tensors[4].data;                            \
    const int64_t *bag_size = (const int64_t *)args->tensors[5].data;                       \
    const T *psw = (const T *)args->tensors[6].data;                                        \
    const int mode = (int)args->scalars[0].i;                                               \
    const int64_t pad = args->scalars[1].i;                                                 \
    const int by_freq = args->scalars[2].i != 0;                                            \
    const int64_t d = args->tensors[0].sizes[1], nbag = g->sizes[0];                        \
    const int64_t n = args->tensors[3].sizes[0];                                            \
    const T *gd = (const T *)g->data;                                                       \
    for (int64_t r = begin; r < end; ++r) {                                                 \
      T *y = gw + r * d;                                                                    \
      for (int64_t j = 0; j < d; ++j) y[j] = 0;                                             \
      const int64_t o0 = offs[r], o1 = offs[r + 1];                                         \
      if (o0 < 0 || o1 < o0 || o1 > n) return LOOM_ERROR_INVALID_ARGUMENT;                  \
      if (r == pad) continue;                                                               \
      for (int64_t o = o0; o < o1; ++o) {                                                   \
        const int64_t pos = order[o];                                                       \
        if (pos < 0 || pos >= n) return LOOM_ERROR_INVALID_ARGUMENT;                        \
        const int64_t bag = o2b[pos];                                                       \
        if (bag < 0) continue; /* after the last offset: in no bag */                      \
        if (bag >= nbag) return LOOM_ERROR_INVALID_ARGUMENT;                                \
        /* the scale in double, as the CPU forms it, rounded once */                       \
        double scale = 1.0;                                                                 \
        if (by_freq) scale /= (double)(o1 - o0);                                            \
        if (mode == LOOM_EMBAG_MEAN && bag_size[bag] != 0) scale /= (double)bag_size[bag];  \
        if (psw) scale *= (double)psw[pos];                                                 \
        const T f = (T)scale;                                                               \
        const T *gr = gd + bag * g->strides[0];                                             \
        for (int64_t j = 0; j < d; ++j) y[j] += f * gr[j * g->strides[1]];                  \
      }                                                                                     \
    }                                                                                       \
    return LOOM_OK;                                                                         \
  }
EMBAG_BACK_ROWS(embag_back_rows_f32, float)
EMBAG_BACK_ROWS(embag_back_rows_f64, double)

int loom_embedding_bag_backward_rows(const loom_kernel_args *args, int64_t begin,
                                     int64_t end) {
  if (args->num_tensors < 7 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *t = args->tensors;
  if (!embag_float(t[0].dtype) || t[1].dtype != t[0].dtype || t[0].rank != 2 ||
      t[1].rank != 2 || t[1].sizes[1] != t[0].sizes[1] ||
      (t[6].data && t[6].dtype != t[0].dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  return t[0].dtype == LOOM_FLOAT32 ? embag_back_rows_f32(args, begin, end)
                                    : embag_back_rows_f64(args, begin, end);
}

#define EMBAG_BACK_MAX(NAME, T)                                                             \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {               \
    T *gw = (T *)args->tensors[0].data;                                                     \
    const loom_tensor *g = &args->tensors[1];                                               \
    const int64_t *mi = (const int64_t *)args->tensors[2].data;                             \
    const int64_t *bag_size = (const int64_t *)args->tensors[3].data;                       \
    const int64_t nw = args->tensors[0].sizes[0], d = args->tensors[0].sizes[1];            \
    const T *gd = (const T *)g->data;                                                       \
    for (int64_t j = begin; j < end; ++j)                                                   \
      for (int64_t b = 0; b < g->sizes[0]; ++b) {                                           \
        if (bag_size[b] == 0) continue;                                                     \
        const int64_t r = mi[b * d + j];                                                    \
        if (r < 0 || r >= nw) return LOOM_ERROR_INVALID_ARGUMENT;                           \
        gw[r * d + j] += gd[b * g->strides[0] + j * g->strides[1]];                         \
      }                                                                                     \
    return LOOM_OK;                                                                         \
  }
EMBAG_BACK_MAX(embag_back_max_f32, float)
EMBAG_BACK_MAX(embag_back_max_f64, double)

int loom_embedding_bag_backward_max(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *t = args->tensors;
  if (!embag_float(t[0].dtype) || t[1].dtype != t[0].dtype || t[0].rank != 2 ||
      t[1].rank != 2 || t[1].sizes[1] != t[0].sizes[1] || t[2].dtype != LOOM_INT64)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return t[0].dtype == LOOM_FLOAT32 ? embag_back_max_f32(args, begin, end)
                                    : embag_back_max_f64(args, begin, end);
}

#define EMBAG_PSW(NAME, T)                                                                  \
  static int NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {               \
    T *out = (T *)args->tensors[0].data;                                                    \
    const loom_tensor *g = &args->tensors[1], *w = &args->tensors[2];                       \
    const int64_t *idx = (const int64_t *)args->tensors[3].data;                            \
    const int64_t *o2b = (const int64_t *)args->tensors[4].data;                            \
    const int64_t pad = args->scalars[0].i, d = w->sizes[1];                                \
    const T *gd = (const T *)g->data, *wd = (const T *)w->data;                             \
    for (int64_t i = begin; i < end; ++i) {                                                 \
      const int64_t r = idx[i], bag = o2b[i];                                               \
      if (r < 0 || r >= w->sizes[0] || bag >= g->sizes[0]) return LOOM_ERROR_INVALID_ARGUMENT; \
      T acc = 0;                                                                            \
      if (r != pad && bag >= 0)                                                             \
        for (int64_t j = 0; j < d; ++j)                                                     \
          acc += gd[bag * g->strides[0] + j * g->strides[1]] *                              \
                 wd[r * w->strides[0] + j * w->strides[1]];                                 \
      out[i] = acc;                                                                         \
    }                                                                                       \
    return LOOM_OK;                                                                         \
  }
EMBAG_PSW(embag_psw_f32, float)
EMBAG_PSW(embag_psw_f64, double)

int loom_embedding_bag_psw_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *t = args->tensors;
  if (!embag_float(t[0].dtype) || t[1].dtype != t[0].dtype || t[2].dtype != t[0].dtype ||
      t[1].rank != 2 || t[2].rank != 2 || t[1].sizes[1] != t[2].sizes[1])
    return LOOM_ERROR_INVALID_ARGUMENT;
  return t[0].dtype == LOOM_FLOAT32 ? embag_psw_f32(args, begin, end)
                                    : embag_psw_f64(args, begin, end);
}

const loom_kernel_entry loom_embedding_bag_kernels[] = {
    {"embedding_bag.forward", loom_embedding_bag_forward, NULL},
    {"embedding_bag.backward_rows", loom_embedding_bag_backward_rows, NULL},
    {"embedding_bag.backward_max", loom_embedding_bag_backward_max, NULL},
    {"embedding_bag.per_sample_weights_backward", loom_embedding_bag_psw_backward, NULL},
    {NULL, NULL, NULL},
};
