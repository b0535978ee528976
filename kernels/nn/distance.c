/* Pairwise p-norm distances (cdist without matrix products, pdist): one
 * launch item per row of the first operand, each pair accumulated over the
 * columns in order in the element type, as the CPU's loops do. Contract in
 * loom/kernels/distance.h. */
#include <math.h>
#include <stddef.h>

#include "kernels/nn/distance.h"
#include "kernels/registry.h"
#include "loom/kernels/distance.h"
#include "loom/status.h"

/* dist(a, b) over m columns for p (0, 1, 2, inf or any other p > 0). */
#define DIST_PAIR(NAME, T)                                                    \
  static T NAME(const T *a, const T *b, int64_t m, T p) {                     \
    T agg = 0;                                                                \
    if (p == 0) {                                                             \
      for (int64_t x = 0; x < m; ++x) {                                       \
        const T c = ceil(fabs(a[x] - b[x]));                                  \
        agg += (T)1 < c ? (T)1 : c; /* std::min(c, 1) */                      \
      }                                                                       \
      return agg;                                                             \
    }                                                                         \
    if (p == 1) {                                                             \
      for (int64_t x = 0; x < m; ++x) agg += fabs(a[x] - b[x]);               \
      return agg;                                                             \
    }                                                                         \
    if (p == 2) {                                                             \
      for (int64_t x = 0; x < m; ++x) {                                       \
        const T d = a[x] - b[x];                                              \
        agg += d * d;                                                         \
      }                                                                       \
      return sqrt(agg);                                                       \
    }                                                                         \
    if (isinf(p)) {                                                           \
      for (int64_t x = 0; x < m; ++x) {                                       \
        const T d = fabs(a[x] - b[x]);                                        \
        agg = agg < d ? d : agg;                                              \
      }                                                                       \
      return agg;                                                             \
    }                                                                         \
    for (int64_t x = 0; x < m; ++x) agg += pow(fabs(a[x] - b[x]), p);         \
    return pow(agg, (T)1 / p);                                                \
  }
DIST_PAIR(dist_f32, float)
DIST_PAIR(dist_f64, double)

#define DIST_RUN(NAME, T, PAIR)                                                          \
  static void NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {           \
    const loom_tensor *out = &args->tensors[0], *x1 = &args->tensors[1];                 \
    const T p = (T)args->scalars[1].f;                                                   \
    T *o = (T *)out->data;                                                               \
    if (args->scalars[0].i == LOOM_DIST_PDIST) {                                         \
      const int64_t n = x1->sizes[0], m = x1->sizes[1];                                  \
      const T *x = (const T *)x1->data;                                                  \
      for (int64_t i = begin; i < end; ++i) {                                            \
        int64_t k = i * n - i * (i + 1) / 2; /* pairs (r, s > r) before row i */        \
        for (int64_t j = i + 1; j < n; ++j) o[k++] = PAIR(x + i * m, x + j * m, m, p);   \
      }                                                                                  \
      return;                                                                            \
    }                                                                                    \
    const loom_tensor *x2 = &args->tensors[2];                                           \
    const int64_t r1 = x1->sizes[1], r2 = x2->sizes[1], m = x1->sizes[2];                \
    for (int64_t row = begin; row < end; ++row) { /* row = batch * r1 + i */             \
      const int64_t b = row / r1;                                                        \
      const T *a = (const T *)x1->data + row * m;                                        \
      const T *y = (const T *)x2->data + b * r2 * m;                                     \
      for (int64_t j = 0; j < r2; ++j) o[row * r2 + j] = PAIR(a, y + j * m, m, p);       \
    }                                                                                    \
  }
DIST_RUN(dist_run_f32, float, dist_f32)
DIST_RUN(dist_run_f64, double, dist_f64)

int loom_distance_pairs(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *x1 = &args->tensors[1];
  const int pdist = args->scalars[0].i == LOOM_DIST_PDIST;
  if (pdist ? x1->rank != 2
            : (args->num_tensors < 3 || x1->rank != 3 || args->tensors[2].rank != 3 ||
               args->tensors[2].dtype != x1->dtype || args->tensors[2].sizes[2] != x1->sizes[2]))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (out->dtype != x1->dtype || !(args->scalars[1].f >= 0)) return LOOM_ERROR_INVALID_ARGUMENT;
  if (x1->dtype == LOOM_FLOAT32) dist_run_f32(args, begin, end);
  else if (x1->dtype == LOOM_FLOAT64) dist_run_f64(args, begin, end);
  else return LOOM_ERROR_NOT_SUPPORTED;
  return LOOM_OK;
}

/* d dist(a, b) / d a for one column's difference diff = a - b, times grad,
 * in the CPU's case split on p. */
#define DIST_BACK(NAME, T)                                                      \
  static T NAME(T diff, T grad, T dist, T p) {                                  \
    const T sg = diff != diff ? diff : (T)((diff > 0) - (diff < 0));            \
    if (p == 0) return 0;                                                       \
    if (p == 1) return grad * sg;                                               \
    if (p < 2) {                                                                \
      if (diff == 0 && p < 1) return 0;                                         \
      return dist == 0 ? (T)0                                                   \
                       : sg * pow(fabs(diff), p - 1) * grad / pow(dist, p - 1); \
    }                                                                           \
    if (p == 2) return dist == 0 ? (T)0 : grad * diff / dist;                   \
    if (isinf(p)) {                                                             \
      const T c = ceil(fabs(fabs(diff) - dist));                                \
      return grad * sg * ((T)1 - ((T)1 < c ? (T)1 : c));                        \
    }                                                                           \
    return dist == 0 ? (T)0                                                     \
                     : diff * pow(fabs(diff), p - 2) * grad / pow(dist, p - 1); \
  }
DIST_BACK(dist_back_f32, float)
DIST_BACK(dist_back_f64, double)

#define DIST_BACK_RUN(NAME, T, BACK)                                                       \
  static void NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {             \
    T *res = (T *)args->tensors[0].data;                                                   \
    const T *grad = (const T *)args->tensors[1].data;                                      \
    const loom_tensor *x1 = &args->tensors[2];                                             \
    const T p = (T)args->scalars[1].f;                                                     \
    if (args->scalars[0].i == LOOM_DIST_PDIST) {                                           \
      const T *x = (const T *)x1->data, *dist = (const T *)args->tensors[3].data;          \
      const int64_t n = x1->sizes[0], m = x1->sizes[1];                                    \
      for (int64_t c = begin; c < end; ++c) { /* one column, in the CPU's pair order */    \
        for (int64_t r = 0; r < n; ++r) res[r * m + c] = 0;                                \
        int64_t k = 0;                                                                     \
        for (int64_t i = 0; i < n; ++i) {                                                  \
          T ri = res[i * m + c];                                                           \
          for (int64_t j = i + 1; j < n; ++j, ++k) {                                       \
            const T b = BACK(x[i * m + c] - x[j * m + c], grad[k], dist[k], p);            \
            ri = ri + b;                                                                   \
            res[j * m + c] = res[j * m + c] - b;                                           \
          }                                                                                \
          res[i * m + c] = ri;                                                             \
        }                                                                                  \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    const loom_tensor *x2 = &args->tensors[3];                                             \
    const T *dist = (const T *)args->tensors[4].data;                                      \
    const int64_t r1 = x1->sizes[1], r2 = x2->sizes[1], m = x1->sizes[2];                  \
    for (int64_t row = begin; row < end; ++row) {                                          \
      const T *a = (const T *)x1->data + row * m;                                          \
      const T *y = (const T *)x2->data + (row / r1) * r2 * m;                              \
      const T *g = grad + row * r2, *dd = dist + row * r2;                                 \
      for (int64_t c = 0; c < m; ++c) {                                                    \
        T acc = 0;                                                                         \
        for (int64_t j = 0; j < r2; ++j) acc = acc + BACK(a[c] - y[j * m + c], g[j], dd[j], p); \
        res[row * m + c] = acc;                                                            \
      }                                                                                    \
    }                                                                                      \
  }
DIST_BACK_RUN(dist_back_run_f32, float, dist_back_f32)
DIST_BACK_RUN(dist_back_run_f64, double, dist_back_f64)

int loom_distance_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *x1 = &args->tensors[2];
  const int pdist = args->scalars[0].i == LOOM_DIST_PDIST;
  if (pdist ? x1->rank != 2
            : (args->num_tensors < 5 || x1->rank != 3 || args->tensors[3].rank != 3 ||
               args->tensors[3].sizes[2] != x1->sizes[2]))
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < args->num_tensors; ++i)
    if (args->tensors[i].dtype != x1->dtype) return LOOM_ERROR_INVALID_ARGUMENT;
  if (x1->dtype == LOOM_FLOAT32) dist_back_run_f32(args, begin, end);
  else if (x1->dtype == LOOM_FLOAT64) dist_back_run_f64(args, begin, end);
  else return LOOM_ERROR_NOT_SUPPORTED;
  return LOOM_OK;
}

const loom_kernel_entry loom_distance_kernels[] = {
    {"distance.pairs", loom_distance_pairs, NULL},
    {"distance.backward", loom_distance_backward, NULL},
    {NULL, NULL, NULL},
};
