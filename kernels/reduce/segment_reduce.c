/* kernels/reduce/segment_reduce.c — segment_reduce forward and backward
 * (contracts in loom/kernels/segment_reduce.h): a launch item is an outer
 * row and a block of inner positions, walking the row's segments in order
 * in the dtype's arithmetic, as the CPU does element by element. */
#include <math.h>
#include <stdint.h>

#include "kernels/registry.h"
#include "loom/kernel_abi.h"
#include "loom/kernels/segment_reduce.h"
#include "loom/status.h"

typedef struct seg_shape {
  int64_t outer, n, inner, segs, blocks;
} seg_shape;

/* The (O, N, I) view of `data` and the segment count of `offsets`. */
static int seg_shape_of(const loom_tensor *data, const loom_tensor *offsets, const loom_tensor *res,
                        seg_shape *sh) {
  if (data->rank != 3 || offsets->rank != 2 || res->rank != 3 || offsets->dtype != LOOM_INT64)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "segment_reduce: expected (O, N, I) data and (O, S + 1) int64 offsets");
  sh->outer = data->sizes[0];
  sh->n = data->sizes[1];
  sh->inner = data->sizes[2];
  sh->segs = offsets->sizes[1] - 1;
  sh->blocks = (sh->inner + LOOM_SEGMENT_BLOCK - 1) / LOOM_SEGMENT_BLOCK;
  if (offsets->sizes[0] != sh->outer || sh->segs < 0 || res->sizes[0] != sh->outer ||
      res->sizes[1] != sh->segs || res->sizes[2] != sh->inner)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "segment_reduce: shapes disagree");
  return LOOM_OK;
}

static int seg_bounds(const int64_t *off, int64_t s, int64_t n, int64_t *b, int64_t *e) {
  *b = off[s];
  *e = off[s + 1];
  if (*b < 0 || *e < *b || *e > n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "segment_reduce: a segment [%lld, %lld) is not within the %lld elements",
                      (long long)*b, (long long)*e, (long long)n);
  return LOOM_OK;
}

#define SEG_KERNELS(SUFFIX, T)                                                                \
  static T seg_init_##SUFFIX(int red, int has_initial, double initial) {                      \
    if (has_initial) return (T)initial;                                                       \
    switch (red) {                                                                            \
      case LOOM_SEGMENT_MAX: return (T)-INFINITY;                                             \
      case LOOM_SEGMENT_MIN: return (T)INFINITY;                                              \
      case LOOM_SEGMENT_PROD: return (T)1;                                                    \
      default: return (T)0;                                                                   \
    }                                                                                         \
  }                                                                                           \
                                                                                              \
  static int seg_forward_##SUFFIX(const loom_kernel_args *args, const seg_shape *sh,           \
                                  int64_t begin, int64_t end) {                               \
    T *out = (T *)args->tensors[0].data;                                                      \
    const T *data = (const T *)args->tensors[1].data;                                         \
    const int red = (int)args->scalars[0].i, has_init = args->scalars[1].i != 0;              \
    const T init = seg_init_##SUFFIX(red, has_init, args->scalars[2].f);                      \
    for (int64_t item = begin; item < end; ++item) {                                          \
      const int64_t o = item / sh->blocks, i0 = (item % sh->blocks) * LOOM_SEGMENT_BLOCK;     \
      const int64_t nb = sh->inner - i0 < LOOM_SEGMENT_BLOCK ? sh->inner - i0 : LOOM_SEGMENT_BLOCK; \
      const int64_t *off = (const int64_t *)args->tensors[2].data + o * (sh->segs + 1);      \
      for (int64_t s = 0; s < sh->segs; ++s) {                                                \
        int64_t b, e;                                                                         \
        const int st = seg_bounds(off, s, sh->n, &b, &e);                                     \
        if (st != LOOM_OK) return st;                                                         \
        T *acc = out + (o * sh->segs + s) * sh->inner + i0;                                   \
        for (int64_t i = 0; i < nb; ++i) acc[i] = init;                                       \
        for (int64_t j = b; j < e; ++j) {                                                     \
          const T *x = data + (o * sh->n + j) * sh->inner + i0;                               \
          switch (red) {                                                                      \
            case LOOM_SEGMENT_MAX:                                                            \
              for (int64_t i = 0; i < nb; ++i)                                                \
                acc[i] = isnan(x[i]) ? x[i] : (acc[i] < x[i] ? x[i] : acc[i]);                \
              break;                                                                          \
            case LOOM_SEGMENT_MIN:                                                            \
              for (int64_t i = 0; i < nb; ++i)                                                \
                acc[i] = isnan(x[i]) ? x[i] : (x[i] < acc[i] ? x[i] : acc[i]);                \
              break;                                                                          \
            case LOOM_SEGMENT_PROD:                                                           \
              for (int64_t i = 0; i < nb; ++i) acc[i] = acc[i] * x[i];                        \
              break;                                                                          \
            default:                                                                          \
              for (int64_t i = 0; i < nb; ++i) acc[i] = acc[i] + x[i];                        \
              break;                                                                          \
          }                                                                                   \
        }                                                                                     \
        if (red == LOOM_SEGMENT_MEAN) {                                                       \
          const int64_t len = e - b;                                                          \
          for (int64_t i = 0; i < nb; ++i) {                                                  \
            if (len == 0 && !has_init)                                                        \
              acc[i] = (T)NAN;                                                                \
            else if (len > 0 && !isnan(acc[i]))                                               \
              acc[i] = acc[i] / (T)len;                                                       \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
    return LOOM_OK;                                                                           \
  }                                                                                           \
                                                                                              \
  static int seg_backward_##SUFFIX(const loom_kernel_args *args, const seg_shape *sh,          \
                                   int64_t begin, int64_t end) {                              \
    T *gin = (T *)args->tensors[0].data;                                                      \
    const T *grad = (const T *)args->tensors[1].data, *out = (const T *)args->tensors[2].data; \
    const T *data = (const T *)args->tensors[3].data;                                         \
    const int red = (int)args->scalars[0].i, has_init = args->scalars[1].i != 0;              \
    const T prod_init = has_init ? (T)args->scalars[2].f : (T)1;                              \
    const int64_t in = sh->inner;                                                             \
    for (int64_t item = begin; item < end; ++item) {                                          \
      const int64_t o = item / sh->blocks, i0 = (item % sh->blocks) * LOOM_SEGMENT_BLOCK;     \
      const int64_t nb = in - i0 < LOOM_SEGMENT_BLOCK ? in - i0 : LOOM_SEGMENT_BLOCK;         \
      const int64_t *off = (const int64_t *)args->tensors[4].data + o * (sh->segs + 1);      \
      for (int64_t s = 0; s < sh->segs; ++s) {                                                \
        int64_t b, e;                                                                         \
        const int st = seg_bounds(off, s, sh->n, &b, &e);                                     \
        if (st != LOOM_OK) return st;                                                         \
        if (e == b) continue;                                                                 \
        const int64_t r = (o * sh->segs + s) * in + i0, len = e - b;                          \
        const T *g = grad + r, *y = out + r;                                                  \
        T *gi0 = gin + o * sh->n * in + i0;                                                   \
        const T *x0 = data + o * sh->n * in + i0;                                             \
        for (int64_t i = 0; i < nb; ++i) {                                                    \
          if (red == LOOM_SEGMENT_MAX || red == LOOM_SEGMENT_MIN) {                           \
            int64_t count = 0;                                                                \
            for (int64_t j = b; j < e; ++j)                                                   \
              if (isnan(x0[j * in + i]) || x0[j * in + i] == y[i]) {                          \
                gi0[j * in + i] = g[i];                                                       \
                ++count;                                                                      \
              }                                                                               \
            if (count < 2) continue;                                                          \
            for (int64_t j = b; j < e; ++j)                                                   \
              if (gi0[j * in + i] > 0) gi0[j * in + i] = gi0[j * in + i] / (T)count;          \
          } else if (red == LOOM_SEGMENT_MEAN) {                                              \
            const T v = g[i] / (T)len;                                                        \
            for (int64_t j = b; j < e; ++j) gi0[j * in + i] = v;                              \
          } else if (red == LOOM_SEGMENT_SUM) {                                               \
            for (int64_t j = b; j < e; ++j) gi0[j * in + i] = g[i];                           \
          } else {                                                                            \
            const T gy = g[i] * y[i];                                                         \
            for (int64_t j = b; j < e; ++j) {                                                 \
              const T xj = x0[j * in + i];                                                    \
              if (isnan(xj) || xj == 0) {                                                     \
                T excl = prod_init;                                                           \
                for (int64_t k = b; k < e; ++k)                                               \
                  if (k != j) excl *= x0[k * in + i];                                         \
                gi0[j * in + i] = g[i] * excl;                                                \
              } else {                                                                        \
                gi0[j * in + i] = gy / xj;                                                    \
              }                                                                               \
            }                                                                                 \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
    return LOOM_OK;                                                                           \
  }

SEG_KERNELS(f32, float)
SEG_KERNELS(f64, double)

static int seg_check(const loom_kernel_args *args, int nt, const loom_tensor *data,
                     const loom_tensor *offsets, const loom_tensor *res, seg_shape *sh) {
  if (args->num_tensors < nt || args->num_scalars < 3)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "segment_reduce: missing arguments");
  const int st = seg_shape_of(data, offsets, res, sh);
  if (st != LOOM_OK) return st;
  const int64_t red = args->scalars[0].i;
  if (red < LOOM_SEGMENT_SUM || red > LOOM_SEGMENT_PROD)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "segment_reduce: unknown reduction");
  if (data->dtype != LOOM_FLOAT32 && data->dtype != LOOM_FLOAT64)
    return loom_error(LOOM_ERROR_NOT_SUPPORTED, "segment_reduce: float32 or float64 only");
  for (int t = 0; t < nt; ++t)
    if (&args->tensors[t] != offsets && args->tensors[t].dtype != data->dtype)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "segment_reduce: mixed dtypes");
  return LOOM_OK;
}

static int segment_reduce_forward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  seg_shape sh;
  const int st = seg_check(args, 3, &args->tensors[1], &args->tensors[2], &args->tensors[0], &sh);
  if (st != LOOM_OK) return st;
  return args->tensors[1].dtype == LOOM_FLOAT32 ? seg_forward_f32(args, &sh, begin, end)
                                                : seg_forward_f64(args, &sh, begin, end);
}

static int segment_reduce_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  seg_shape sh;
  const int st = seg_check(args, 5, &args->tensors[3], &args->tensors[4], &args->tensors[1], &sh);
  if (st != LOOM_OK) return st;
  const loom_tensor *gin = &args->tensors[0], *y = &args->tensors[2], *x = &args->tensors[3];
  for (int d = 0; d < 3; ++d)
    if (gin->rank != 3 || y->rank != 3 || gin->sizes[d] != x->sizes[d] ||
        y->sizes[d] != args->tensors[1].sizes[d])
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "segment_reduce: shapes disagree");
  return args->tensors[3].dtype == LOOM_FLOAT32 ? seg_backward_f32(args, &sh, begin, end)
                                                : seg_backward_f64(args, &sh, begin, end);
}

const loom_kernel_entry loom_segment_reduce_kernels[] = {
    {"segment_reduce.forward", segment_reduce_forward, NULL},
    {"segment_reduce.backward", segment_reduce_backward, NULL},
    {NULL, NULL, NULL},
};
