/* Histograms over linear or arbitrary bin edges: each launch item counts one
 * fixed block of the input into its own row of partials (the CPU's bin
 * selection, in the element type); the caller sums the rows. Contract in
 * loom/kernels/histogram.h. */
#include "kernels/reduce/histogram.h"

#include "kernels/registry.h"
#include "loom/status.h"

/* The first index in edges[lo, hi) whose edge exceeds x (std::upper_bound). */
#define HIST_UPPER(NAME, T)                                               \
  static int64_t NAME(const T *edges, int64_t lo, int64_t hi, T x) {      \
    while (lo < hi) {                                                     \
      const int64_t mid = lo + (hi - lo) / 2;                             \
      if (x < edges[mid]) hi = mid;                                       \
      else lo = mid + 1;                                                  \
    }                                                                     \
    return lo;                                                            \
  }
HIST_UPPER(hist_upper_f32, float)
HIST_UPPER(hist_upper_f64, double)

#define HIST_RUN(NAME, T, UPPER)                                                      \
  static void NAME(const loom_kernel_args *args, int64_t begin, int64_t end) {        \
    T *part = (T *)args->tensors[0].data;                                             \
    const T *x = (const T *)args->tensors[1].data;                                    \
    const T *w = (const T *)args->tensors[2].data;                                    \
    const T *edges = (const T *)args->tensors[3].data;                                \
    const int64_t n = args->tensors[1].sizes[0], nb = args->tensors[0].sizes[1];      \
    const int algorithm = (int)args->scalars[0].i;                                    \
    const int64_t block = args->scalars[1].i;                                         \
    const T left = edges[0], right = edges[nb];                                       \
    for (int64_t p = begin; p < end; ++p) {                                           \
      T *h = part + p * nb;                                                           \
      for (int64_t b = 0; b < nb; ++b) h[b] = 0;                                      \
      const int64_t i1 = (p + 1) * block < n ? (p + 1) * block : n;                   \
      for (int64_t i = p * block; i < i1; ++i) {                                      \
        const T e = x[i];                                                             \
        if (!(e >= left && e <= right)) continue; /* outside, or NaN */               \
        int64_t pos;                                                                  \
        if (algorithm == LOOM_HIST_BINARY) {                                          \
          pos = UPPER(edges, 0, nb + 1, e) - 1;                                       \
        } else {                                                                      \
          pos = (int64_t)((e - left) * (T)nb / (right - left));                       \
          if (algorithm == LOOM_HIST_LINEAR_SEARCH) {                                 \
            const int64_t lo = pos - 1 > 0 ? pos - 1 : 0;                             \
            const int64_t hi = pos + 2 < nb + 1 ? pos + 2 : nb + 1;                   \
            pos = UPPER(edges, lo, hi, e) - 1;                                        \
          }                                                                           \
        }                                                                             \
        if (pos == nb) pos -= 1; /* the last bin holds its right edge */              \
        if (pos < 0 || pos >= nb) continue;                                           \
        h[pos] += w ? w[i] : (T)1;                                                    \
      }                                                                               \
    }                                                                                 \
  }
HIST_RUN(hist_run_f32, float, hist_upper_f32)
HIST_RUN(hist_run_f64, double, hist_upper_f64)

int loom_histogram_bins(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *part = &args->tensors[0], *x = &args->tensors[1];
  const loom_tensor *w = &args->tensors[2], *edges = &args->tensors[3];
  const int algorithm = (int)args->scalars[0].i;
  if (part->rank != 2 || x->rank != 1 || edges->rank != 1 || part->sizes[1] < 1 ||
      edges->sizes[0] != part->sizes[1] + 1 || args->scalars[1].i < 1 ||
      part->sizes[0] * args->scalars[1].i < x->sizes[0] ||
      (algorithm != LOOM_HIST_LINEAR && algorithm != LOOM_HIST_LINEAR_SEARCH &&
       algorithm != LOOM_HIST_BINARY))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (part->dtype != x->dtype || edges->dtype != x->dtype ||
      (w->data && (w->dtype != x->dtype || w->rank != 1 || w->sizes[0] != x->sizes[0])))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (x->dtype == LOOM_FLOAT32) hist_run_f32(args, begin, end);
  else if (x->dtype == LOOM_FLOAT64) hist_run_f64(args, begin, end);
  else return LOOM_ERROR_NOT_SUPPORTED;
  return LOOM_OK;
}

const loom_kernel_entry loom_histogram_kernels[] = {
    {"histogram.bins", loom_histogram_bins, NULL},
    {NULL, NULL, NULL},
};
