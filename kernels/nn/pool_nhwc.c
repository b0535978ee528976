/* kernels/nn/pool_nhwc.c — pooling over channels-last volumes (contracts in
 * loom/kernels/pool.h): one output row (forward) or input row (backward)
 * of all channels per item, the channels innermost, so a position's
 * channels are one unit-stride run. The values are pool.c's: the same
 * comparisons, and the same sums in the same order, per channel. */
#include <math.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/nn/nn_util.h"
#include "kernels/nn/pool.h"
#include "kernels/nn/pool_internal.h"
#include "kernels/registry.h"
#include "loom/status.h"

#define LOOM_POOL_ISA _generic
#include "kernels/nn/pool_nhwc_loops.inc"

/* Taps a loop takes per call; channels an average sums at a time. */
#define NHWC_TAPS 64
#define NHWC_CHANNELS 256

typedef struct nhwc_loops {
  void (*max_first)(const float *, int64_t, int64_t, float *, int64_t *);
  void (*max_taps)(const float *, const int64_t *, const int64_t *, int64_t, int64_t, float *,
                   int64_t *);
  void (*avg_taps)(const float *, const int64_t *, int64_t, int64_t, double *);
  void (*max_grad)(const float *, const int64_t *, int64_t, int64_t, float *);
  void (*avg_grad)(const float *, double, int64_t, float *);
} nhwc_loops;

static nhwc_loops nhwc_loops_here(void) {
  if (loom_cpu_features() & LOOM_FEATURE_AVX512F)
    return (nhwc_loops){loom_pool_nhwc_max_first_avx512, loom_pool_nhwc_max_taps_avx512,
                        loom_pool_nhwc_avg_taps_avx512, loom_pool_nhwc_max_grad_avx512,
                        loom_pool_nhwc_avg_grad_avx512};
  return (nhwc_loops){loom_pool_nhwc_max_first_generic, loom_pool_nhwc_max_taps_generic,
                      loom_pool_nhwc_avg_taps_generic, loom_pool_nhwc_max_grad_generic,
                      loom_pool_nhwc_avg_grad_generic};
}

static int pool_is_max(const loom_pool_params *q) {
  return q->mode == LOOM_POOL_MAX || q->mode == LOOM_POOL_ADAPTIVE_MAX;
}

/* The element offset of (n, c, z, y, x) in t (rank 5). */
static inline int64_t nhwc_at(const loom_tensor *t, int64_t n, int64_t c, int64_t z, int64_t y,
                              int64_t x) {
  return n * t->strides[0] + c * t->strides[1] + z * t->strides[2] + y * t->strides[3] +
         x * t->strides[4];
}

/* Whether t's channels are one unit-stride run at each position. */
static int nhwc_dense_channels(const loom_tensor *t) {
  return t->strides[1] == 1 || t->sizes[1] == 1;
}

/* The taps of the window w (three axes) of volume n: their offsets in `in`
 * and their indices (d * H + h) * W + w, from tap `from` on, at most
 * NHWC_TAPS; returns how many. */
static int64_t nhwc_taps(const loom_tensor *in, const loom_pool_window *w, int64_t from,
                         int64_t *off, int64_t *idx) {
  const int64_t ih = in->sizes[3], iw = in->sizes[4];
  const int64_t total = w[0].count * w[1].count * w[2].count;
  if (from >= total) return 0;
  /* tap `from`'s place in the window, then stepped along: no division per tap */
  int64_t c = from % w[2].count, b = from / w[2].count % w[1].count;
  int64_t a = from / (w[2].count * w[1].count), n = 0;
  for (int64_t t = from; t < total && n < NHWC_TAPS; ++t, ++n) {
    const int64_t dd = w[0].start + a * w[0].step, hh = w[1].start + b * w[1].step;
    const int64_t xx = w[2].start + c * w[2].step;
    off[n] = dd * in->strides[2] + hh * in->strides[3] + xx * in->strides[4];
    idx[n] = (dd * ih + hh) * iw + xx;
    if (++c == w[2].count) {
      c = 0;
      if (++b == w[1].count) b = 0, ++a;
    }
  }
  return n;
}

/* One output position's channels, float32 with unit-stride channels. */
static void nhwc_forward_f32(const nhwc_loops *f, const loom_pool_params *q, const loom_tensor *in,
                             const float *ip, const loom_pool_window *w, float *op,
                             int64_t *xp) {
  const int64_t c = in->sizes[1];
  const int64_t total = w[0].count * w[1].count * w[2].count;
  int64_t off[NHWC_TAPS], idx[NHWC_TAPS];
  if (pool_is_max(q)) {
    if (total == 0) {
      for (int64_t j = 0; j < c; ++j) op[j] = -INFINITY, xp[j] = 0;
      return;
    }
    for (int64_t from = 0; from < total;) {
      const int64_t n = nhwc_taps(in, w, from, off, idx);
      if (from == 0) {
        f->max_first(ip + off[0], idx[0], c, op, xp);
        f->max_taps(ip, off + 1, idx + 1, n - 1, c, op, xp);
      } else {
        f->max_taps(ip, off, idx, n, c, op, xp);
      }
      from += n;
    }
    return;
  }
  const int64_t div = loom_pool_divisor(q, w);
  double acc[NHWC_CHANNELS];
  for (int64_t c0 = 0; c0 < c; c0 += NHWC_CHANNELS) {
    const int64_t cn = c - c0 < NHWC_CHANNELS ? c - c0 : NHWC_CHANNELS;
    for (int64_t j = 0; j < cn; ++j) acc[j] = 0.0;
    for (int64_t from = 0; from < total;) {
      const int64_t n = nhwc_taps(in, w, from, off, idx);
      f->avg_taps(ip + c0, off, n, cn, acc);
      from += n;
    }
    for (int64_t j = 0; j < cn; ++j) op[c0 + j] = (float)(div ? acc[j] / (double)div : NAN);
  }
}

/* One output position's channels, any dtype and strides, in double. */
static void nhwc_forward_any(const loom_pool_params *q, const loom_tensor *in,
                             const loom_tensor *out, const loom_tensor *ind, int64_t n, int64_t z,
                             int64_t y, int64_t x, const loom_pool_window *w) {
  const int64_t c = in->sizes[1], ih = in->sizes[3], iw = in->sizes[4];
  const int is_max = pool_is_max(q);
  const int64_t div = is_max ? 0 : loom_pool_divisor(q, w);
  for (int64_t j = 0; j < c; ++j) {
    double acc = is_max ? -INFINITY : 0.0;
    int64_t best_i = -1;
    for (int64_t a = 0; a < w[0].count; ++a)
      for (int64_t b = 0; b < w[1].count; ++b)
        for (int64_t e = 0; e < w[2].count; ++e) {
          const int64_t dd = w[0].start + a * w[0].step, hh = w[1].start + b * w[1].step;
          const int64_t xx = w[2].start + e * w[2].step;
          const double v = loom_nn_load(in->data, in->dtype, nhwc_at(in, n, j, dd, hh, xx));
          if (!is_max) {
            acc += v;
          } else if (best_i < 0 || v > acc || v != v) {
            acc = v, best_i = (dd * ih + hh) * iw + xx;
          }
        }
    const int64_t o = nhwc_at(out, n, j, z, y, x);
    if (is_max) {
      loom_nn_store(out->data, out->dtype, o, acc);
      ((int64_t *)ind->data)[nhwc_at(ind, n, j, z, y, x)] = best_i < 0 ? 0 : best_i;
    } else {
      loom_nn_store(out->data, out->dtype, o, div ? acc / (double)div : NAN);
    }
  }
}

int loom_pool_nhwc_forward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  const int is_max = pool_is_max(&q);
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0], *out = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (in->rank != 5 || out->rank != 5 || (ind && (ind->rank != 5 || ind->dtype != LOOM_INT64)) ||
      in->sizes[1] != out->sizes[1])
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t id = in->sizes[2], ih = in->sizes[3], iw = in->sizes[4];
  const int64_t od = out->sizes[2], oh = out->sizes[3], ow = out->sizes[4];
  const int f32 = in->dtype == LOOM_FLOAT32 && out->dtype == LOOM_FLOAT32 &&
                  nhwc_dense_channels(in) && nhwc_dense_channels(out) &&
                  (!ind || nhwc_dense_channels(ind));
  const nhwc_loops f = nhwc_loops_here();
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / (od * oh), z = item / oh % od, y = item % oh;
    loom_pool_window w[3];
    w[0] = loom_pool_window_of(&q, 0, z, od, id);
    w[1] = loom_pool_window_of(&q, 1, y, oh, ih);
    for (int64_t x = 0; x < ow; ++x) {
      w[2] = loom_pool_window_of(&q, 2, x, ow, iw);
      if (!f32) {
        nhwc_forward_any(&q, in, out, ind, n, z, y, x, w);
        continue;
      }
      const float *ip = (const float *)in->data + n * in->strides[0];
      float *op = (float *)out->data + nhwc_at(out, n, 0, z, y, x);
      int64_t *xp = ind ? (int64_t *)ind->data + nhwc_at(ind, n, 0, z, y, x) : NULL;
      nhwc_forward_f32(&f, &q, in, ip, w, op, xp);
    }
  }
  return 0;
}

/* The gradient of one input position (n, z, y, x): the outputs whose
 * windows hold it, in the order of the outputs (the order in which pool.c
 * adds their shares), each adding its gradient where its index is this
 * position (max modes; an index naming no position adds nowhere) or its
 * share (average modes). */
static void nhwc_backward_at(const nhwc_loops *f, const loom_pool_params *q, const loom_tensor *gi,
                            const loom_tensor *go, const loom_tensor *ind, int f32, int64_t n,
                            int64_t z, int64_t y, int64_t x, const int64_t *lo,
                            const int64_t *hi) {
  const int64_t c = gi->sizes[1], id = gi->sizes[2], ih = gi->sizes[3], iw = gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4];
  const int is_max = pool_is_max(q);
  const int64_t target = (z * ih + y) * iw + x;
  int64_t xlo, xhi;
  loom_pool_cover(q, 2, x, ow, iw, &xlo, &xhi);
  float *g = f32 ? (float *)gi->data + nhwc_at(gi, n, 0, z, y, x) : NULL;
  if (f32) memset(g, 0, (size_t)c * sizeof(float));
  else
    for (int64_t j = 0; j < c; ++j)
      loom_nn_store(gi->data, gi->dtype, nhwc_at(gi, n, j, z, y, x), 0.0);
  for (int64_t oz = lo[0]; oz <= hi[0]; ++oz)
    for (int64_t oy = lo[1]; oy <= hi[1]; ++oy)
      for (int64_t ox = xlo; ox <= xhi; ++ox) {
        double div = 0.0;
        if (!is_max) {
          const loom_pool_window w[3] = {loom_pool_window_of(q, 0, oz, od, id),
                                         loom_pool_window_of(q, 1, oy, oh, ih),
                                         loom_pool_window_of(q, 2, ox, ow, iw)};
          const int64_t dv = loom_pool_divisor(q, w);
          div = dv ? (double)dv : NAN;
        }
        if (f32) {
          const float *gp = (const float *)go->data + nhwc_at(go, n, 0, oz, oy, ox);
          if (is_max)
            f->max_grad(gp, (const int64_t *)ind->data + nhwc_at(ind, n, 0, oz, oy, ox), target, c,
                        g);
          else
            f->avg_grad(gp, div, c, g);
          continue;
        }
        for (int64_t j = 0; j < c; ++j) {
          if (is_max && ((const int64_t *)ind->data)[nhwc_at(ind, n, j, oz, oy, ox)] != target)
            continue;
          const double v = loom_nn_load(go->data, go->dtype, nhwc_at(go, n, j, oz, oy, ox));
          const int64_t e = nhwc_at(gi, n, j, z, y, x);
          loom_nn_store(gi->data, gi->dtype, e,
                        loom_nn_load(gi->data, gi->dtype, e) + (is_max ? v : v / div));
        }
      }
}

int loom_pool_nhwc_backward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  const int is_max = pool_is_max(&q);
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (gi->rank != 5 || go->rank != 5 || (ind && (ind->rank != 5 || ind->dtype != LOOM_INT64)) ||
      gi->sizes[1] != go->sizes[1])
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t id = gi->sizes[2], ih = gi->sizes[3], iw = gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3];
  const int f32 = gi->dtype == LOOM_FLOAT32 && go->dtype == LOOM_FLOAT32 &&
                  nhwc_dense_channels(gi) && nhwc_dense_channels(go) &&
                  (!ind || nhwc_dense_channels(ind));
  const nhwc_loops f = nhwc_loops_here();
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / (id * ih), z = item / ih % id, y = item % ih;
    int64_t lo[2], hi[2];
    loom_pool_cover(&q, 0, z, od, id, &lo[0], &hi[0]);
    loom_pool_cover(&q, 1, y, oh, ih, &lo[1], &hi[1]);
    for (int64_t x = 0; x < iw; ++x) nhwc_backward_at(&f, &q, gi, go, ind, f32, n, z, y, x, lo, hi);
  }
  return 0;
}

/* Whether t (rank 5) is dense channels-last: (N, D, H, W, C) in memory
 * order with no gaps inside an image. */
static int nhwc_dense_image(const loom_tensor *t) {
  const int64_t c = t->sizes[1], iw = t->sizes[4], ih = t->sizes[3], id = t->sizes[2];
  return (t->strides[1] == 1 || c == 1) && (t->strides[4] == c || iw == 1) &&
         (t->strides[3] == iw * c || ih == 1) && (t->strides[2] == ih * iw * c || id == 1);
}

static int nhwc_same_sizes(const loom_tensor *a, const loom_tensor *b) {
  for (int d = 0; d < 5; ++d)
    if (a->sizes[d] != b->sizes[d]) return 0;
  return 1;
}

/* One image's max-pooling gradient, float32: zeroed, then each output's
 * channels added where their indices point, the outputs in order. */
static void nhwc_max_scatter_f32(float *gi, int64_t c, int64_t volume, const loom_tensor *go,
                                 const loom_tensor *ind, int64_t n) {
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4];
  memset(gi, 0, (size_t)(volume * c) * sizeof(float));
  for (int64_t z = 0; z < od; ++z)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        const float *g = (const float *)go->data + nhwc_at(go, n, 0, z, y, x);
        const int64_t *t = (const int64_t *)ind->data + nhwc_at(ind, n, 0, z, y, x);
        for (int64_t j = 0; j < c; ++j)
          if ((uint64_t)t[j] < (uint64_t)volume) gi[t[j] * c + j] += g[j];
      }
}

int loom_pool_nhwc_max_backward_kernel(const loom_kernel_args *args, int64_t begin,
                                       int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  if (!pool_is_max(&q) || args->num_tensors < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1], *ind = &args->tensors[2];
  if (gi->rank != 5 || go->rank != 5 || ind->rank != 5 || ind->dtype != LOOM_INT64 ||
      gi->sizes[0] != go->sizes[0] || gi->sizes[1] != go->sizes[1] ||
      !nhwc_same_sizes(go, ind) || !nhwc_dense_image(gi))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t c = gi->sizes[1], volume = gi->sizes[2] * gi->sizes[3] * gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4];
  const int f32 = gi->dtype == LOOM_FLOAT32 && go->dtype == LOOM_FLOAT32 &&
                  nhwc_dense_channels(go) && nhwc_dense_channels(ind);
  for (int64_t n = begin; n < end; ++n) {
    if (f32) {
      nhwc_max_scatter_f32((float *)gi->data + n * gi->strides[0], c, volume, go, ind, n);
      continue;
    }
    const int64_t base = n * gi->strides[0];
    for (int64_t e = 0; e < volume * c; ++e) loom_nn_store(gi->data, gi->dtype, base + e, 0.0);
    for (int64_t z = 0; z < od; ++z)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t j = 0; j < c; ++j) {
            const int64_t t = ((const int64_t *)ind->data)[nhwc_at(ind, n, j, z, y, x)];
            if ((uint64_t)t >= (uint64_t)volume) continue;
            const int64_t e = base + t * c + j;
            const double v = loom_nn_load(go->data, go->dtype, nhwc_at(go, n, j, z, y, x));
            loom_nn_store(gi->data, gi->dtype, e, loom_nn_load(gi->data, gi->dtype, e) + v);
          }
  }
  return 0;
}

const loom_kernel_entry loom_pool_nhwc_kernels[] = {
    {"pool.forward_nhwc", loom_pool_nhwc_forward_kernel, NULL},
    {"pool.backward_nhwc", loom_pool_nhwc_backward_kernel, NULL},
    {"pool.max_backward_nhwc", loom_pool_nhwc_max_backward_kernel, NULL},
    {NULL, NULL, NULL},
};
