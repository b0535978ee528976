/* 2-d grid sampling. The coordinate steps (unnormalize, clip, reflect, and
 * their derivatives) are the CPU backend's; gs_source() returns the source
 * coordinate and the derivative of it with respect to the grid value. */
#include "kernels/nn/grid_sample.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* In T precision: float, or double for float64. */
#define GS_SOURCE(T, NAME, FLOOR, FMOD)                                          \
  static T NAME(T coord, int64_t size, const gs_params *q, T *grad) {                  \
    T g = q->align ? (T)(size - 1) / 2 : (T)size / 2;                                  \
    coord = q->align ? ((coord + 1) / 2) * (T)(size - 1)                             \
                     : ((coord + 1) * (T)size - 1) / 2;                                 \
    if (q->padding == 2) { /* reflect about the edges (or pixel borders) */            \
      const T lo2 = q->align ? 0 : -1;                                                 \
      const T hi2 = q->align ? (T)(2 * (size - 1)) : (T)(2 * size - 1);                \
      if (lo2 == hi2) {                                                                \
        coord = 0;                                                                     \
        g = 0;                                                                         \
      } else {                                                                         \
        const T min = lo2 / 2, span = (hi2 - lo2) / 2;                                 \
        T in = coord - min, sign = 1;                                                  \
        if (in < 0) {                                                                  \
          sign = -1;                                                                   \
          in = -in;                                                                    \
        }                                                                              \
        const T extra = FMOD(in, span);                                                \
        const int64_t flips = (int64_t)FLOOR(in / span);                               \
        coord = flips % 2 == 0 ? extra + min : span - extra + min;                     \
        g *= flips % 2 == 0 ? sign : -sign;                                            \
      }                                                                                \
    }                                                                                  \
    if (q->padding >= 1) { /* clip into the image */                                   \
      if (coord <= 0) {                                                                \
        coord = 0;                                                                     \
        g = 0;                                                                         \
      } else if (coord >= (T)(size - 1)) {                                             \
        coord = (T)(size - 1);                                                         \
        g = 0;                                                                         \
      }                                                                                \
    }                                                                                  \
    *grad = g;                                                                         \
    return coord;                                                                      \
  }
GS_SOURCE(float, gs_source_f, floorf, fmodf)
GS_SOURCE(double, gs_source_d, floor, fmod)
#undef GS_SOURCE

static int gs_read(const loom_kernel_args *args, gs_params *q, unsigned tensors) {
  const int rc = gs_read_params(args, q, tensors);
  if (rc) return rc;
  for (unsigned i = 0; i < tensors; ++i)
    if (args->tensors[i].rank != 4 || !loom_nn_is_float(args->tensors[i].dtype))
      return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

#define GS_AT(t, a, b, c, d)                                                     \
  ((a) * (t)->strides[0] + (b) * (t)->strides[1] + (c) * (t)->strides[2] +       \
   (d) * (t)->strides[3])

/* Where one grid point samples: the four corners and their weights (the
 * nearest pixel has weight 1 at the first corner), and the derivatives of
 * the source coordinates. */
typedef struct gs_point {
  int64_t x[4], y[4];
  double w[4];
  double ix, iy, gx, gy; /* source coordinates and d(coordinate)/d(grid) */
  int n;
} gs_point;

static gs_point gs_locate(const gs_params *q, int wide, double gxv, double gyv, int64_t h,
                          int64_t w) {
  gs_point p;
  if (wide) {
    p.ix = gs_source_d(gxv, w, q, &p.gx);
    p.iy = gs_source_d(gyv, h, q, &p.gy);
  } else {
    float gx, gy;
    p.ix = gs_source_f((float)gxv, w, q, &gx);
    p.iy = gs_source_f((float)gyv, h, q, &gy);
    p.gx = gx;
    p.gy = gy;
  }
  if (q->nearest) {
    p.n = 1;
    p.x[0] = (int64_t)nearbyint(p.ix);
    p.y[0] = (int64_t)nearbyint(p.iy);
    p.w[0] = 1;
    return p;
  }
  const int64_t x0 = (int64_t)floor(p.ix), y0 = (int64_t)floor(p.iy);
  const double ax = p.ix - (double)x0, ay = p.iy - (double)y0; /* (ix - x_nw), (iy - y_nw) */
  const double bx = (double)(x0 + 1) - p.ix, by = (double)(y0 + 1) - p.iy;
  p.n = 4;
  p.x[0] = x0, p.y[0] = y0, p.w[0] = bx * by;         /* nw */
  p.x[1] = x0 + 1, p.y[1] = y0, p.w[1] = ax * by;     /* ne */
  p.x[2] = x0, p.y[2] = y0 + 1, p.w[2] = bx * ay;     /* sw */
  p.x[3] = x0 + 1, p.y[3] = y0 + 1, p.w[3] = ax * ay; /* se */
  if (!wide)
    for (int k = 0; k < 4; ++k) p.w[k] = (float)p.w[k];
  return p;
}

/* gs_locate() for grid point (n, y, x). */
static gs_point gs_locate_at(const gs_params *q, int wide, const loom_tensor *grid, int64_t n,
                             int64_t y, int64_t x, int64_t h, int64_t w) {
  return gs_locate(q, wide, loom_nn_load(grid->data, grid->dtype, GS_AT(grid, n, y, x, 0)),
                   loom_nn_load(grid->data, grid->dtype, GS_AT(grid, n, y, x, 1)), h, w);
}

static int gs_inside(int64_t y, int64_t x, int64_t h, int64_t w) {
  return y >= 0 && y < h && x >= 0 && x < w;
}

int loom_kernel_grid_sample(const loom_kernel_args *args, int64_t begin, int64_t end) {
  gs_params q;
  int rc = gs_read(args, &q, 3);
  if (rc) return rc;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1], *grid = &args->tensors[2];
  const int64_t c = in->sizes[1], h = in->sizes[2], w = in->sizes[3], ho = out->sizes[2],
                wo = out->sizes[3];
  const int wide = in->dtype == LOOM_FLOAT64;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t n = row / ho, y = row % ho;
    for (int64_t x = 0; x < wo; ++x) {
      const gs_point p = gs_locate_at(&q, wide, grid, n, y, x, h, w);
      for (int64_t ch = 0; ch < c; ++ch) {
        double acc = 0;
        for (int k = 0; k < p.n; ++k)
          if (gs_inside(p.y[k], p.x[k], h, w)) {
            const int64_t o = GS_AT(in, n, ch, p.y[k], p.x[k]);
            const double v = loom_nn_load(in->data, in->dtype, o);
            acc = wide ? acc + v * p.w[k] : (double)((float)acc + (float)v * (float)p.w[k]);
          }
        loom_nn_store(out->data, out->dtype, GS_AT(out, n, ch, y, x), acc);
      }
    }
  }
  return LOOM_OK;
}

int loom_kernel_grid_sample_backward(const loom_kernel_args *args, int64_t begin, int64_t end) {
  gs_params q;
  int rc = gs_read(args, &q, 5);
  if (rc) return rc;
  const loom_tensor *gi = &args->tensors[0], *gg = &args->tensors[1], *go = &args->tensors[2],
                    *in = &args->tensors[3], *grid = &args->tensors[4];
  if (gi->dtype != LOOM_FLOAT32 && gi->dtype != LOOM_FLOAT64) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t c = in->sizes[1], h = in->sizes[2], w = in->sizes[3], ho = go->sizes[2],
                wo = go->sizes[3];
  const int wide = in->dtype == LOOM_FLOAT64;
  for (int64_t n = begin; n < end; ++n) {
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          loom_nn_store(gi->data, gi->dtype, GS_AT(gi, n, ch, y, x), 0);
    for (int64_t y = 0; y < ho; ++y)
      for (int64_t x = 0; x < wo; ++x) {
        const gs_point p = gs_locate_at(&q, wide, grid, n, y, x, h, w);
        /* d(weight)/d(ix), d(weight)/d(iy) of nw, ne, sw, se */
        const double ax = p.ix - floor(p.ix), ay = p.iy - floor(p.iy);
        const double dwx[4] = {-(1 - ay), 1 - ay, -ay, ay};
        const double dwy[4] = {-(1 - ax), -ax, 1 - ax, ax};
        double gx = 0, gy = 0;
        for (int64_t ch = 0; ch < c; ++ch) {
          const double g = loom_nn_load(go->data, go->dtype, GS_AT(go, n, ch, y, x));
          for (int k = 0; k < p.n; ++k) {
            if (!gs_inside(p.y[k], p.x[k], h, w)) continue;
            const int64_t o = GS_AT(gi, n, ch, p.y[k], p.x[k]);
            loom_nn_store(gi->data, gi->dtype, o,
                          loom_nn_load(gi->data, gi->dtype, o) + p.w[k] * g);
            if (p.n == 4) {
              const double v =
                  loom_nn_load(in->data, in->dtype, GS_AT(in, n, ch, p.y[k], p.x[k]));
              gx += v * dwx[k] * g;
              gy += v * dwy[k] * g;
            }
          }
        }
        loom_nn_store(gg->data, gg->dtype, GS_AT(gg, n, y, x, 0), p.gx * gx);
        loom_nn_store(gg->data, gg->dtype, GS_AT(gg, n, y, x, 1), p.gy * gy);
      }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_grid_sample_kernels[] = {
    {"grid_sample.forward", loom_kernel_grid_sample, NULL},
    {"grid_sample.backward", loom_kernel_grid_sample_backward, NULL},
    {NULL, NULL, NULL},
};
