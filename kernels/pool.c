/* kernels/pool.c — 2-d pooling (see kernels/pool.h). */
#include <math.h>

#include "kernels/nn_util.h"
#include "kernels/pool.h"
#include "loom/status.h"

typedef struct loom_pool_params {
  int64_t mode, k[2], s[2], p[2], d[2], include_pad, divisor;
} loom_pool_params;

static int loom_pool_params_read(const loom_kernel_args *args,
                                 loom_pool_params *q) {
  if (args->num_scalars < LOOM_POOL_NUM_SCALARS) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_scalar *s = args->scalars;
  q->mode = s[0].i;
  for (int i = 0; i < 2; ++i) {
    q->k[i] = s[1 + i].i, q->s[i] = s[3 + i].i;
    q->p[i] = s[5 + i].i, q->d[i] = s[7 + i].i;
  }
  q->include_pad = s[9].i, q->divisor = s[10].i;
  if (q->mode < LOOM_POOL_MAX || q->mode > LOOM_POOL_ADAPTIVE_MAX)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int adaptive = q->mode == LOOM_POOL_ADAPTIVE_AVG || q->mode == LOOM_POOL_ADAPTIVE_MAX;
  if (!adaptive)
    for (int i = 0; i < 2; ++i)
      if (q->k[i] < 1 || q->s[i] < 1 || q->d[i] < 1 || q->p[i] < 0)
        return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

/* The window of output o along `axis`: input taps start + t*step for
 * t < count, all inside [0, n_in); *div gets the average's divisor. */
typedef struct loom_pool_window {
  int64_t start, step, count, pad_size;
} loom_pool_window;

static loom_pool_window loom_pool_window_of(const loom_pool_params *q, int axis,
                                            int64_t o, int64_t n_out,
                                            int64_t n_in) {
  loom_pool_window w = {.step = 1};
  if (q->mode == LOOM_POOL_ADAPTIVE_AVG || q->mode == LOOM_POOL_ADAPTIVE_MAX) {
    int64_t a = (o * n_in) / n_out, b = ((o + 1) * n_in + n_out - 1) / n_out;
    w.start = a, w.count = b - a, w.pad_size = b - a;
    return w;
  }
  if (q->mode == LOOM_POOL_AVG) {
    int64_t a = o * q->s[axis] - q->p[axis];
    int64_t b = a + q->k[axis];
    if (b > n_in + q->p[axis]) b = n_in + q->p[axis];
    w.pad_size = b - a;
    if (a < 0) a = 0;
    if (b > n_in) b = n_in;
    w.start = a, w.count = b > a ? b - a : 0;
    return w;
  }
  /* max: dilated taps, skipping those in the padding */
  int64_t a = o * q->s[axis] - q->p[axis];
  int64_t t0 = 0, t1 = q->k[axis];
  while (t0 < t1 && a + t0 * q->d[axis] < 0) ++t0;
  while (t1 > t0 && a + (t1 - 1) * q->d[axis] >= n_in) --t1;
  w.start = a + t0 * q->d[axis], w.step = q->d[axis], w.count = t1 - t0;
  return w;
}

static int64_t loom_pool_plane(const loom_tensor *t, int64_t pl) {
  int64_t c = t->sizes[1];
  return (pl / c) * t->strides[0] + (pl % c) * t->strides[1];
}

static int64_t loom_pool_divisor(const loom_pool_params *q, loom_pool_window wh,
                                 loom_pool_window ww) {
  if (q->mode == LOOM_POOL_AVG && q->divisor) return q->divisor;
  if (q->mode == LOOM_POOL_AVG && q->include_pad) return wh.pad_size * ww.pad_size;
  return wh.count * ww.count;
}

/* Whether a max window's tap v replaces the best so far (best_i < 0: none
 * yet): as PyTorch, a NaN wins, and so does each later NaN. */
static inline int pool_takes(int64_t best_i, double v, double best) {
  return (best_i < 0) | (v > best) | (v != v);
}

/* Output columns whose windows pool2d_f32 computes once per call. */
#define POOL_COLS 256

/* loom_pool2d_kernel's loops for float32 planes, the elements read as they
 * are rather than through a dtype switch, the columns' windows computed
 * once: the same comparisons and the same double sums in the same order,
 * so the same bits. */
static void pool2d_f32(const loom_pool_params *q, const loom_tensor *in, const loom_tensor *out,
                       const loom_tensor *ind, int is_max, int64_t begin, int64_t end) {
  const int64_t ih = in->sizes[2], iw = in->sizes[3], oh = out->sizes[2], ow = out->sizes[3];
  const int64_t sh = in->strides[2], sw = in->strides[3];
  loom_pool_window cols[POOL_COLS];
  for (int64_t x = 0; x < ow && x < POOL_COLS; ++x) cols[x] = loom_pool_window_of(q, 1, x, ow, iw);
  for (int64_t pl = begin; pl < end; ++pl) {
    const float *ip = (const float *)in->data + loom_pool_plane(in, pl);
    float *op = (float *)out->data + loom_pool_plane(out, pl);
    int64_t *xp = is_max ? (int64_t *)ind->data + loom_pool_plane(ind, pl) : NULL;
    for (int64_t y = 0; y < oh; ++y) {
      const loom_pool_window wh = loom_pool_window_of(q, 0, y, oh, ih);
      for (int64_t x = 0; x < ow; ++x) {
        const loom_pool_window ww = x < POOL_COLS ? cols[x] : loom_pool_window_of(q, 1, x, ow, iw);
        float *o = op + y * out->strides[2] + x * out->strides[3];
        if (is_max) {
          float best = -INFINITY;
          int64_t best_i = -1;
          for (int64_t a = 0; a < wh.count; ++a) {
            const int64_t hh = wh.start + a * wh.step;
            for (int64_t b = 0; b < ww.count; ++b) {
              const int64_t xx = ww.start + b * ww.step;
              const float v = ip[hh * sh + xx * sw];
              /* a choice of values, not a branch (random data mispredicts) */
              const int take = pool_takes(best_i, v, best);
              best = take ? v : best;
              best_i = take ? hh * iw + xx : best_i;
            }
          }
          *o = best;
          xp[y * ind->strides[2] + x * ind->strides[3]] = best_i < 0 ? 0 : best_i;
        } else {
          double sum = 0.0;
          for (int64_t a = 0; a < wh.count; ++a) {
            const float *row = ip + (wh.start + a) * sh + ww.start * sw;
            for (int64_t b = 0; b < ww.count; ++b) sum += (double)row[b * sw];
          }
          const int64_t div = loom_pool_divisor(q, wh, ww);
          *o = (float)(div ? sum / (double)div : NAN);
        }
      }
    }
  }
}

int loom_pool2d_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  int is_max = q.mode == LOOM_POOL_MAX || q.mode == LOOM_POOL_ADAPTIVE_MAX;
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0], *out = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (in->rank != 4 || out->rank != 4 || (ind && (ind->rank != 4 || ind->dtype != LOOM_INT64)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t ih = in->sizes[2], iw = in->sizes[3], oh = out->sizes[2], ow = out->sizes[3];
  if (in->dtype == LOOM_FLOAT32 && out->dtype == LOOM_FLOAT32) {
    pool2d_f32(&q, in, out, ind, is_max, begin, end);
    return 0;
  }
  for (int64_t pl = begin; pl < end; ++pl) {
    int64_t ib = loom_pool_plane(in, pl), ob = loom_pool_plane(out, pl);
    int64_t xb = ind ? loom_pool_plane(ind, pl) : 0;
    for (int64_t y = 0; y < oh; ++y) {
      loom_pool_window wh = loom_pool_window_of(&q, 0, y, oh, ih);
      for (int64_t x = 0; x < ow; ++x) {
        loom_pool_window ww = loom_pool_window_of(&q, 1, x, ow, iw);
        int64_t o_off = ob + y * out->strides[2] + x * out->strides[3];
        if (is_max) {
          double best = -INFINITY;
          int64_t best_i = -1;
          for (int64_t a = 0; a < wh.count; ++a) {
            int64_t hh = wh.start + a * wh.step;
            for (int64_t b = 0; b < ww.count; ++b) {
              int64_t xx = ww.start + b * ww.step;
              double v = loom_nn_load(in->data, in->dtype,
                                      ib + hh * in->strides[2] + xx * in->strides[3]);
              if (pool_takes(best_i, v, best)) best = v, best_i = hh * iw + xx;
            }
          }
          loom_nn_store(out->data, out->dtype, o_off, best);
          ((int64_t *)ind->data)[xb + y * ind->strides[2] + x * ind->strides[3]] =
              best_i < 0 ? 0 : best_i;
        } else {
          double sum = 0.0;
          for (int64_t a = 0; a < wh.count; ++a)
            for (int64_t b = 0; b < ww.count; ++b)
              sum += loom_nn_load(in->data, in->dtype,
                                  ib + (wh.start + a) * in->strides[2] +
                                      (ww.start + b) * in->strides[3]);
          int64_t div = loom_pool_divisor(&q, wh, ww);
          loom_nn_store(out->data, out->dtype, o_off, div ? sum / (double)div : NAN);
        }
      }
    }
  }
  return 0;
}

int loom_pool2d_backward_kernel(const loom_kernel_args *args, int64_t begin,
                                int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  int is_max = q.mode == LOOM_POOL_MAX || q.mode == LOOM_POOL_ADAPTIVE_MAX;
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (gi->rank != 4 || go->rank != 4 || (ind && (ind->rank != 4 || ind->dtype != LOOM_INT64)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t ih = gi->sizes[2], iw = gi->sizes[3], oh = go->sizes[2], ow = go->sizes[3];
  for (int64_t pl = begin; pl < end; ++pl) {
    int64_t gib = loom_pool_plane(gi, pl), gob = loom_pool_plane(go, pl);
    int64_t xb = ind ? loom_pool_plane(ind, pl) : 0;
    for (int64_t y = 0; y < ih; ++y)
      for (int64_t x = 0; x < iw; ++x)
        loom_nn_store(gi->data, gi->dtype, gib + y * gi->strides[2] + x * gi->strides[3], 0.0);
    for (int64_t y = 0; y < oh; ++y) {
      loom_pool_window wh = loom_pool_window_of(&q, 0, y, oh, ih);
      for (int64_t x = 0; x < ow; ++x) {
        double g = loom_nn_load(go->data, go->dtype, gob + y * go->strides[2] + x * go->strides[3]);
        if (is_max) {
          int64_t idx = ((const int64_t *)ind->data)[xb + y * ind->strides[2] + x * ind->strides[3]];
          if (idx < 0 || idx >= ih * iw) return LOOM_ERROR_INVALID_ARGUMENT;
          int64_t off = gib + (idx / iw) * gi->strides[2] + (idx % iw) * gi->strides[3];
          loom_nn_store(gi->data, gi->dtype, off, loom_nn_load(gi->data, gi->dtype, off) + g);
          continue;
        }
        loom_pool_window ww = loom_pool_window_of(&q, 1, x, ow, iw);
        int64_t div = loom_pool_divisor(&q, wh, ww);
        double share = div ? g / (double)div : NAN;
        for (int64_t a = 0; a < wh.count; ++a)
          for (int64_t b = 0; b < ww.count; ++b) {
            int64_t off = gib + (wh.start + a) * gi->strides[2] + (ww.start + b) * gi->strides[3];
            loom_nn_store(gi->data, gi->dtype, off, loom_nn_load(gi->data, gi->dtype, off) + share);
          }
      }
    }
  }
  return 0;
}
