/* kernels/nn/pool.c — 2-d and 3-d pooling (see kernels/nn/pool.h). */
#include <math.h>
#include <string.h>

#include "kernels/nn/nn_util.h"
#include "kernels/nn/pool.h"
#include "kernels/nn/pool_internal.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

static int64_t loom_pool_volume(const loom_tensor *t, int64_t pl) {
  int64_t c = t->sizes[1];
  return (pl / c) * t->strides[0] + (pl % c) * t->strides[1];
}

/* Whether a max window's tap v replaces the best so far (best_i < 0: none
 * yet): as PyTorch, a NaN wins, and so does each later NaN. */
static inline int pool_takes(int64_t best_i, double v, double best) {
  return (best_i < 0) | (v > best) | (v != v);
}

/* An output element's offset in t (rank 5) at (z, y, x) of volume base b. */
static inline int64_t loom_pool_at(const loom_tensor *t, int64_t b, int64_t z, int64_t y,
                                   int64_t x) {
  return b + z * t->strides[2] + y * t->strides[3] + x * t->strides[4];
}

/* Output columns whose windows pool_f32 computes once per call. */
#define POOL_COLS 256
/* Input rows (depth by height taps) of the vectorized max's windows. */
#define POOL_ROWS 64

/* Planes whose sums pool_avg_planes_f32 carries side by side. */
#define POOL_PLANES 8

/* An average pooling of one output per volume (the global pooling ahead of
 * a classifier): planes [begin, end) summed POOL_PLANES at a time, each in
 * its own double accumulator in pool_f32's order (the same bits), so the
 * planes' additions overlap instead of waiting on one chain. */
static void pool_avg_planes_f32(const loom_pool_params *q, const loom_tensor *in,
                                const loom_tensor *out, int64_t begin, int64_t end) {
  const int64_t sd = in->strides[2], sh = in->strides[3], sw = in->strides[4];
  const loom_pool_window w[3] = {loom_pool_window_of(q, 0, 0, 1, in->sizes[2]),
                                 loom_pool_window_of(q, 1, 0, 1, in->sizes[3]),
                                 loom_pool_window_of(q, 2, 0, 1, in->sizes[4])};
  const int64_t div = loom_pool_divisor(q, w);
  for (int64_t pl = begin; pl < end; pl += POOL_PLANES) {
    const int64_t n = end - pl < POOL_PLANES ? end - pl : POOL_PLANES;
    const float *ip[POOL_PLANES];
    double sum[POOL_PLANES];
    for (int64_t j = 0; j < POOL_PLANES; ++j) {
      /* absent planes repeat the last one, their sums unstored */
      ip[j] = (const float *)in->data + loom_pool_volume(in, pl + (j < n ? j : n - 1));
      sum[j] = 0.0;
    }
    for (int64_t a = 0; a < w[0].count; ++a)
      for (int64_t b = 0; b < w[1].count; ++b) {
        const int64_t row = (w[0].start + a) * sd + (w[1].start + b) * sh + w[2].start * sw;
        for (int64_t c = 0; c < w[2].count; ++c) {
          const int64_t off = row + c * sw;
          for (int64_t j = 0; j < POOL_PLANES; ++j) sum[j] += (double)ip[j][off];
        }
      }
    for (int64_t j = 0; j < n; ++j)
      ((float *)out->data)[loom_pool_volume(out, pl + j)] =
          (float)(div ? sum[j] / (double)div : NAN);
  }
}

/* loom_pool_kernel's loops for float32 volumes, the elements read as they
 * are rather than through a dtype switch, the columns' windows computed
 * once: the same comparisons and the same double sums in the same order,
 * so the same bits. */
static void pool_f32(const loom_pool_params *q, const loom_tensor *in, const loom_tensor *out,
                     const loom_tensor *ind, int is_max, int64_t begin, int64_t end) {
  const int64_t id = in->sizes[2], ih = in->sizes[3], iw = in->sizes[4];
  const int64_t od = out->sizes[2], oh = out->sizes[3], ow = out->sizes[4];
  const int64_t sd = in->strides[2], sh = in->strides[3], sw = in->strides[4];
  if (!is_max && od == 1 && oh == 1 && ow == 1) {
    pool_avg_planes_f32(q, in, out, begin, end);
    return;
  }
  loom_pool_window cols[POOL_COLS];
  for (int64_t x = 0; x < ow && x < POOL_COLS; ++x) cols[x] = loom_pool_window_of(q, 2, x, ow, iw);
  /* Max pooling's rows 16 columns at a time, where its column offsets and
   * indices fit the vector's 32-bit lanes. */
  const int vec = q->mode == LOOM_POOL_MAX && (loom_cpu_features() & LOOM_FEATURE_AVX512F) &&
                  out->strides[4] == 1 && ind->strides[4] == 1 &&
                  q->k[0] * q->k[1] <= POOL_ROWS && id * ih * iw < INT32_MAX &&
                  (ow * q->s[2] + q->k[2] * q->d[2] + iw) * sw < INT32_MAX;
  /* and average pooling's, whose divisors per column fit the window cache */
  const int vec_avg = q->mode == LOOM_POOL_AVG && (loom_cpu_features() & LOOM_FEATURE_AVX512F) &&
                      out->strides[4] == 1 && q->k[0] * q->k[1] <= POOL_ROWS &&
                      ow <= POOL_COLS && (ow * q->s[2] + q->k[2] + iw) * sw < INT32_MAX;
  for (int64_t pl = begin; pl < end; ++pl) {
    const float *ip = (const float *)in->data + loom_pool_volume(in, pl);
    float *op = (float *)out->data + loom_pool_volume(out, pl);
    int64_t *xp = is_max ? (int64_t *)ind->data + loom_pool_volume(ind, pl) : NULL;
    for (int64_t z = 0; z < od; ++z) {
      loom_pool_window w[3];
      w[0] = loom_pool_window_of(q, 0, z, od, id);
      for (int64_t y = 0; y < oh; ++y) {
        w[1] = loom_pool_window_of(q, 1, y, oh, ih);
        if (vec) {
          int64_t rows[POOL_ROWS], idx[POOL_ROWS], nrows = 0;
          for (int64_t a = 0; a < w[0].count; ++a)
            for (int64_t b = 0; b < w[1].count; ++b, ++nrows) {
              const int64_t dd = w[0].start + a * w[0].step, hh = w[1].start + b * w[1].step;
              rows[nrows] = dd * sd + hh * sh, idx[nrows] = (dd * ih + hh) * iw;
            }
          loom_pool_max_row_avx512(ip, rows, idx, nrows, iw, sw, q->k[2], q->s[2], q->p[2],
                                   q->d[2], ow, op + loom_pool_at(out, 0, z, y, 0),
                                   xp + loom_pool_at(ind, 0, z, y, 0));
          continue;
        }
        if (vec_avg) {
          int64_t rows[POOL_ROWS], div[POOL_COLS], nrows = 0;
          for (int64_t a = 0; a < w[0].count; ++a)
            for (int64_t b = 0; b < w[1].count; ++b)
              rows[nrows++] = (w[0].start + a) * sd + (w[1].start + b) * sh;
          for (int64_t x = 0; x < ow; ++x) {
            w[2] = cols[x];
            div[x] = loom_pool_divisor(q, w);
          }
          loom_pool_avg_row_avx512(ip, rows, nrows, iw, sw, q->k[2], q->s[2], q->p[2], ow, div,
                                   op + loom_pool_at(out, 0, z, y, 0));
          continue;
        }
        for (int64_t x = 0; x < ow; ++x) {
          w[2] = x < POOL_COLS ? cols[x] : loom_pool_window_of(q, 2, x, ow, iw);
          float *o = op + loom_pool_at(out, 0, z, y, x);
          if (is_max) {
            float best = -INFINITY;
            int64_t best_i = -1;
            for (int64_t a = 0; a < w[0].count; ++a) {
              const int64_t dd = w[0].start + a * w[0].step;
              for (int64_t b = 0; b < w[1].count; ++b) {
                const int64_t hh = w[1].start + b * w[1].step;
                for (int64_t c = 0; c < w[2].count; ++c) {
                  const int64_t xx = w[2].start + c * w[2].step;
                  const float v = ip[dd * sd + hh * sh + xx * sw];
                  /* a choice of values, not a branch (random data mispredicts) */
                  const int take = pool_takes(best_i, v, best);
                  best = take ? v : best;
                  best_i = take ? (dd * ih + hh) * iw + xx : best_i;
                }
              }
            }
            *o = best;
            xp[loom_pool_at(ind, 0, z, y, x)] = best_i < 0 ? 0 : best_i;
          } else {
            double sum = 0.0;
            for (int64_t a = 0; a < w[0].count; ++a)
              for (int64_t b = 0; b < w[1].count; ++b) {
                const float *row =
                    ip + (w[0].start + a) * sd + (w[1].start + b) * sh + w[2].start * sw;
                for (int64_t c = 0; c < w[2].count; ++c) sum += (double)row[c * sw];
              }
            const int64_t div = loom_pool_divisor(q, w);
            *o = (float)(div ? sum / (double)div : NAN);
          }
        }
      }
    }
  }
}

/* The other dtypes, through loads and stores that convert. */
static void pool_any(const loom_pool_params *q, const loom_tensor *in, const loom_tensor *out,
                     const loom_tensor *ind, int is_max, int64_t begin, int64_t end) {
  const int64_t id = in->sizes[2], ih = in->sizes[3], iw = in->sizes[4];
  const int64_t od = out->sizes[2], oh = out->sizes[3], ow = out->sizes[4];
  for (int64_t pl = begin; pl < end; ++pl) {
    const int64_t ib = loom_pool_volume(in, pl), ob = loom_pool_volume(out, pl);
    const int64_t xb = ind ? loom_pool_volume(ind, pl) : 0;
    for (int64_t z = 0; z < od; ++z)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          const loom_pool_window w[3] = {loom_pool_window_of(q, 0, z, od, id),
                                         loom_pool_window_of(q, 1, y, oh, ih),
                                         loom_pool_window_of(q, 2, x, ow, iw)};
          const int64_t o_off = loom_pool_at(out, ob, z, y, x);
          double acc = is_max ? -INFINITY : 0.0;
          int64_t best_i = -1;
          for (int64_t a = 0; a < w[0].count; ++a)
            for (int64_t b = 0; b < w[1].count; ++b)
              for (int64_t c = 0; c < w[2].count; ++c) {
                const int64_t dd = w[0].start + a * w[0].step, hh = w[1].start + b * w[1].step;
                const int64_t xx = w[2].start + c * w[2].step;
                const double v =
                    loom_nn_load(in->data, in->dtype, loom_pool_at(in, ib, dd, hh, xx));
                if (!is_max) acc += v;
                else if (pool_takes(best_i, v, acc)) acc = v, best_i = (dd * ih + hh) * iw + xx;
              }
          if (is_max) {
            loom_nn_store(out->data, out->dtype, o_off, acc);
            ((int64_t *)ind->data)[loom_pool_at(ind, xb, z, y, x)] = best_i < 0 ? 0 : best_i;
          } else {
            const int64_t div = loom_pool_divisor(q, w);
            loom_nn_store(out->data, out->dtype, o_off, div ? acc / (double)div : NAN);
          }
        }
  }
}

int loom_pool_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  int is_max = q.mode == LOOM_POOL_MAX || q.mode == LOOM_POOL_ADAPTIVE_MAX;
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *in = &args->tensors[0], *out = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (in->rank != 5 || out->rank != 5 || (ind && (ind->rank != 5 || ind->dtype != LOOM_INT64)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (in->dtype == LOOM_FLOAT32 && out->dtype == LOOM_FLOAT32)
    pool_f32(&q, in, out, ind, is_max, begin, end);
  else
    pool_any(&q, in, out, ind, is_max, begin, end);
  return 0;
}

/* The max modes' backward for float32 gradients over dense volumes: the
 * generic loop's additions in its order, without a dtype switch per
 * element (a float sum rounds as the generic double one stored to float). */
static int pool_max_backward_f32(const loom_tensor *gi, const loom_tensor *go,
                                 const loom_tensor *ind, int64_t begin, int64_t end) {
  const int64_t volume = gi->sizes[2] * gi->sizes[3] * gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4], no = od * oh * ow;
  /* each volume's outputs and indices one dense run */
  const int flat = go->strides[4] == 1 && ind->strides[4] == 1 && go->strides[3] == ow &&
                   ind->strides[3] == ow &&
                   (od == 1 || (go->strides[2] == oh * ow && ind->strides[2] == oh * ow));
  for (int64_t pl = begin; pl < end; ++pl) {
    float *g_in = (float *)gi->data + loom_pool_volume(gi, pl);
    const float *g_out = (const float *)go->data + loom_pool_volume(go, pl);
    const int64_t *ix = (const int64_t *)ind->data + loom_pool_volume(ind, pl);
    memset(g_in, 0, (size_t)volume * sizeof(float));
    if (flat) {
      /* one run of outputs: no offsets to compute, no branch per element */
      uint64_t bad = 0;
      for (int64_t o = 0; o < no; ++o) {
        const int64_t idx = ix[o];
        bad |= (uint64_t)idx >= (uint64_t)volume;
        g_in[bad ? 0 : idx] += g_out[o];
      }
      if (bad) return LOOM_ERROR_INVALID_ARGUMENT;
      continue;
    }
    for (int64_t z = 0; z < od; ++z)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t idx = ix[loom_pool_at(ind, 0, z, y, x)];
          if (idx < 0 || idx >= volume) return LOOM_ERROR_INVALID_ARGUMENT;
          g_in[idx] += g_out[loom_pool_at(go, 0, z, y, x)];
        }
  }
  return 0;
}

/* The average modes' backward for float32 gradients: the generic loop's
 * additions in its order, each rounded to float as its store does, without
 * a dtype switch per element and with the columns' windows computed once. */
static void pool_avg_backward_f32(const loom_pool_params *q, const loom_tensor *gi,
                                  const loom_tensor *go, int64_t begin, int64_t end) {
  const int64_t id = gi->sizes[2], ih = gi->sizes[3], iw = gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4];
  loom_pool_window cols[POOL_COLS];
  for (int64_t x = 0; x < ow && x < POOL_COLS; ++x) cols[x] = loom_pool_window_of(q, 2, x, ow, iw);
  const int64_t sx = gi->strides[4];
  const int single = od == 1 && oh == 1 && ow == 1;
  const loom_pool_window w1[3] = {loom_pool_window_of(q, 0, 0, 1, id),
                                  loom_pool_window_of(q, 1, 0, 1, ih),
                                  loom_pool_window_of(q, 2, 0, 1, iw)};
  for (int64_t pl = begin; pl < end; ++pl) {
    float *g_in = (float *)gi->data + loom_pool_volume(gi, pl);
    const float *g_out = (const float *)go->data + loom_pool_volume(go, pl);
    for (int64_t z = 0; z < id; ++z)
      for (int64_t y = 0; y < ih; ++y) {
        float *row = g_in + loom_pool_at(gi, 0, z, y, 0);
        if (sx == 1) memset(row, 0, (size_t)iw * sizeof(float));
        else
          for (int64_t x = 0; x < iw; ++x) row[x * sx] = 0.0f;
      }
    if (single) {
      /* one output per volume: its window's elements all take the zero
       * plus its share, rounded to float, as the loop below stores them */
      const int64_t div = loom_pool_divisor(q, w1);
      const double share = div ? (double)g_out[0] / (double)div : NAN;
      const float v = (float)(0.0 + share);
      for (int64_t a = 0; a < w1[0].count; ++a)
        for (int64_t b = 0; b < w1[1].count; ++b) {
          float *row = g_in + loom_pool_at(gi, 0, w1[0].start + a, w1[1].start + b, w1[2].start);
          if (sx == 1)
            for (int64_t c = 0; c < w1[2].count; ++c) row[c] = v;
          else
            for (int64_t c = 0; c < w1[2].count; ++c) row[c * sx] = v;
        }
      continue;
    }
    for (int64_t z = 0; z < od; ++z) {
      loom_pool_window w[3];
      w[0] = loom_pool_window_of(q, 0, z, od, id);
      for (int64_t y = 0; y < oh; ++y) {
        w[1] = loom_pool_window_of(q, 1, y, oh, ih);
        for (int64_t x = 0; x < ow; ++x) {
          w[2] = x < POOL_COLS ? cols[x] : loom_pool_window_of(q, 2, x, ow, iw);
          const int64_t div = loom_pool_divisor(q, w);
          const double share = div ? (double)g_out[loom_pool_at(go, 0, z, y, x)] / (double)div
                                   : NAN;
          for (int64_t a = 0; a < w[0].count; ++a)
            for (int64_t b = 0; b < w[1].count; ++b) {
              float *row = g_in + loom_pool_at(gi, 0, w[0].start + a, w[1].start + b, w[2].start);
              for (int64_t c = 0; c < w[2].count; ++c) {
                float *e = row + c * gi->strides[4];
                *e = (float)((double)*e + share);
              }
            }
        }
      }
    }
  }
}

int loom_pool_backward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  loom_pool_params q;
  int rc = loom_pool_params_read(args, &q);
  if (rc) return rc;
  int is_max = q.mode == LOOM_POOL_MAX || q.mode == LOOM_POOL_ADAPTIVE_MAX;
  if (args->num_tensors < (is_max ? 3u : 2u)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *gi = &args->tensors[0], *go = &args->tensors[1];
  const loom_tensor *ind = is_max ? &args->tensors[2] : NULL;
  if (gi->rank != 5 || go->rank != 5 || (ind && (ind->rank != 5 || ind->dtype != LOOM_INT64)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t id = gi->sizes[2], ih = gi->sizes[3], iw = gi->sizes[4];
  const int64_t od = go->sizes[2], oh = go->sizes[3], ow = go->sizes[4];
  /* a dense volume takes a max's index as the offset it is: no division */
  const int dense =
      gi->strides[4] == 1 && gi->strides[3] == iw && (id == 1 || gi->strides[2] == ih * iw);
  if (is_max && dense && gi->dtype == LOOM_FLOAT32 && go->dtype == LOOM_FLOAT32)
    return pool_max_backward_f32(gi, go, ind, begin, end);
  if (!is_max && gi->dtype == LOOM_FLOAT32 && go->dtype == LOOM_FLOAT32) {
    pool_avg_backward_f32(&q, gi, go, begin, end);
    return 0;
  }
  for (int64_t pl = begin; pl < end; ++pl) {
    const int64_t gib = loom_pool_volume(gi, pl), gob = loom_pool_volume(go, pl);
    const int64_t xb = ind ? loom_pool_volume(ind, pl) : 0;
    for (int64_t z = 0; z < id; ++z)
      for (int64_t y = 0; y < ih; ++y)
        for (int64_t x = 0; x < iw; ++x)
          loom_nn_store(gi->data, gi->dtype, loom_pool_at(gi, gib, z, y, x), 0.0);
    for (int64_t z = 0; z < od; ++z)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          const double g = loom_nn_load(go->data, go->dtype, loom_pool_at(go, gob, z, y, x));
          if (is_max) {
            const int64_t idx = ((const int64_t *)ind->data)[loom_pool_at(ind, xb, z, y, x)];
            if (idx < 0 || idx >= id * ih * iw) return LOOM_ERROR_INVALID_ARGUMENT;
            const int64_t off =
                dense ? gib + idx : loom_pool_at(gi, gib, idx / (ih * iw), idx / iw % ih, idx % iw);
            loom_nn_store(gi->data, gi->dtype, off, loom_nn_load(gi->data, gi->dtype, off) + g);
            continue;
          }
          const loom_pool_window w[3] = {loom_pool_window_of(&q, 0, z, od, id),
                                         loom_pool_window_of(&q, 1, y, oh, ih),
                                         loom_pool_window_of(&q, 2, x, ow, iw)};
          const int64_t div = loom_pool_divisor(&q, w);
          const double share = div ? g / (double)div : NAN;
          for (int64_t a = 0; a < w[0].count; ++a)
            for (int64_t b = 0; b < w[1].count; ++b)
              for (int64_t c = 0; c < w[2].count; ++c) {
                const int64_t off =
                    loom_pool_at(gi, gib, w[0].start + a, w[1].start + b, w[2].start + c);
                loom_nn_store(gi->data, gi->dtype, off,
                              loom_nn_load(gi->data, gi->dtype, off) + share);
              }
        }
  }
  return 0;
}

const loom_kernel_entry loom_pool_kernels[] = {
    {"pool.forward", loom_pool_kernel, NULL},
    {"pool.backward", loom_pool_backward_kernel, NULL},
    {NULL, NULL, NULL},
};
