/* kernels/conv/im2col_nhwc.c — im2col and col2im over channels-last rows
 * ("im2col.nhwc_to_col", "im2col.nhwc_to_image"; contracts in
 * loom/kernels/im2col.h). A row of the col matrix is one output position
 * and holds every tap's channels, (kd, kh, kw, c): with a channels-last
 * image each tap's channels are one contiguous run, and the convolution is
 * a plain GEMM of the rows with the weight laid out channels last. */
#include <string.h>

#include "kernels/conv/conv.h"
#include "loom/status.h"

typedef struct nhwc_geom {
  int64_t k[3], s[3], p[3], d[3], o[3];
  int64_t taps, len, c;
} nhwc_geom;

/* The geometry scalars and the (col, image) pair both kernels take. */
static int nhwc_read(const loom_kernel_args *args, const loom_tensor *col,
                     const loom_tensor *img, nhwc_geom *g) {
  if (args->num_scalars < LOOM_CONV_NUM_SCALARS || col->rank != 2 || img->rank != 5 ||
      col->dtype != LOOM_FLOAT32 || img->dtype != LOOM_FLOAT32)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < 3; ++i) {
    g->k[i] = args->scalars[i].i, g->s[i] = args->scalars[3 + i].i;
    g->p[i] = args->scalars[6 + i].i, g->d[i] = args->scalars[9 + i].i;
    g->o[i] = args->scalars[12 + i].i;
    if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1 || g->p[i] < 0 || g->o[i] < 0)
      return LOOM_ERROR_INVALID_ARGUMENT;
  }
  g->taps = g->k[0] * g->k[1] * g->k[2];
  g->len = g->o[0] * g->o[1] * g->o[2];
  g->c = img->sizes[1];
  if (col->sizes[0] != img->sizes[0] * g->len || col->sizes[1] != g->taps * g->c ||
      col->strides[1] != 1 || col->strides[0] < col->sizes[1])
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

int loom_im2col_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *col = &args->tensors[0], *img = &args->tensors[1];
  nhwc_geom g;
  int rc = nhwc_read(args, col, img, &g);
  if (rc) return rc;
  const int64_t *sz = img->sizes, *st = img->strides, c = g.c;
  if (end > col->sizes[0] || begin < 0) return LOOM_ERROR_INVALID_ARGUMENT;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.len, q = r % g.len;
    const int64_t ow = q % g.o[2], oh = q / g.o[2] % g.o[1], od = q / (g.o[2] * g.o[1]);
    float *dst = (float *)col->data + r * col->strides[0];
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, dst += c) {
          const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
          const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
          const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
          if (id < 0 || id >= sz[2] || ih < 0 || ih >= sz[3] || iw < 0 || iw >= sz[4]) {
            memset(dst, 0, (size_t)c * sizeof(float));
            continue;
          }
          const float *src =
              (const float *)img->data + n * st[0] + id * st[2] + ih * st[3] + iw * st[4];
          if (st[1] == 1) {
            memcpy(dst, src, (size_t)c * sizeof(float));
          } else {
            for (int64_t ch = 0; ch < c; ++ch) dst[ch] = src[ch * st[1]];
          }
        }
  }
  return 0;
}

/* dst[ch * stride] += src[ch] for ch < c; with first, dst[ch * stride] =
 * 0.0f + src[ch] (the zeroed sum's first addition, in one pass). */
static void nhwc_add(float *restrict dst, int64_t stride, const float *restrict src, int64_t c,
                     int first) {
  if (stride == 1 && first) {
    for (int64_t ch = 0; ch < c; ++ch) dst[ch] = 0.0f + src[ch];
  } else if (stride == 1) {
    for (int64_t ch = 0; ch < c; ++ch) dst[ch] += src[ch];
  } else if (first) {
    for (int64_t ch = 0; ch < c; ++ch) dst[ch * stride] = 0.0f + src[ch];
  } else {
    for (int64_t ch = 0; ch < c; ++ch) dst[ch * stride] += src[ch];
  }
}

enum {
  NHWC_TAPS = 16,     /* a window's taps along an axis with a table */
  NHWC_COLUMNS = 2048 /* (column, tap) pairs the column axis's table holds */
};

/* The taps along axis i that reach coordinate x: output coordinates
 * o = (x + p - k * d) / s inside the grid, in increasing tap order k;
 * their count. */
static int nhwc_axis_taps(const nhwc_geom *g, int i, int64_t x, int16_t *kv, int32_t *ov) {
  int n = 0;
  for (int64_t k = 0; k < g->k[i]; ++k) {
    const int64_t v = x + g->p[i] - k * g->d[i];
    if (v >= 0 && v % g->s[i] == 0 && v / g->s[i] < g->o[i])
      kv[n] = (int16_t)k, ov[n++] = (int32_t)(v / g->s[i]);
  }
  return n;
}

int loom_col2im_nhwc_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *img = &args->tensors[0], *col = &args->tensors[1];
  nhwc_geom g;
  int rc = nhwc_read(args, col, img, &g);
  if (rc) return rc;
  const int64_t *sz = img->sizes, *st = img->strides, c = g.c;
  const int64_t positions = sz[2] * sz[3] * sz[4];
  if (begin < 0 || end > sz[0] * positions) return LOOM_ERROR_INVALID_ARGUMENT;
  if (begin >= end) return 0;
  const float *cd = (const float *)col->data;
  const int64_t ld = col->strides[0];
  /* Taps in fixed (kd, kh, kw) order: output position o reads x at tap t
   * when o * s - p + t * d == x, axis by axis. Each axis's taps that reach
   * a coordinate are found once: the columns' for the whole row up front
   * (their divisions cost more than the sums at small channel counts), a
   * row's and a plane's when the position moves to the next; windows
   * wider than NHWC_TAPS along an axis take the same test per tap. */
  const int wide = g.k[0] > NHWC_TAPS || g.k[1] > NHWC_TAPS || g.k[2] > NHWC_TAPS;
  const int table = !wide && sz[4] * g.k[2] <= NHWC_COLUMNS;
  int16_t kw_t[NHWC_COLUMNS];
  int32_t ow_t[NHWC_COLUMNS];
  int8_t nw_t[NHWC_COLUMNS];
  for (int64_t x = 0; table && x < sz[4]; ++x)
    nw_t[x] = (int8_t)nhwc_axis_taps(&g, 2, x, kw_t + x * g.k[2], ow_t + x * g.k[2]);
  int16_t kv[3][NHWC_TAPS];
  int32_t ov[3][NHWC_TAPS];
  int nv[3] = {0, 0, 0};
  int64_t n = begin / positions, q = begin % positions;
  int64_t x[3] = {q / (sz[3] * sz[4]), q / sz[4] % sz[3], q % sz[4]};
  int64_t row_of = -1; /* the (n, d, h) row whose taps kv[0..1] hold */
  for (int64_t item = begin; item < end; ++item) {
    float *dst = (float *)img->data + n * st[0] + x[0] * st[2] + x[1] * st[3] + x[2] * st[4];
    int first = 1;
    if (!wide) {
      const int64_t row = (n * sz[2] + x[0]) * sz[3] + x[1];
      if (row != row_of) {
        nv[0] = nhwc_axis_taps(&g, 0, x[0], kv[0], ov[0]);
        nv[1] = nhwc_axis_taps(&g, 1, x[1], kv[1], ov[1]);
        row_of = row;
      }
      const int16_t *kw = table ? kw_t + x[2] * g.k[2] : kv[2];
      const int32_t *ow = table ? ow_t + x[2] * g.k[2] : ov[2];
      const int nw = table ? nw_t[x[2]] : (nv[2] = nhwc_axis_taps(&g, 2, x[2], kv[2], ov[2]));
      for (int a = 0; a < nv[0]; ++a)
        for (int b = 0; b < nv[1]; ++b) {
          const int64_t t0 = (kv[0][a] * g.k[1] + kv[1][b]) * g.k[2];
          const int64_t r0 = n * g.len + (ov[0][a] * g.o[1] + ov[1][b]) * g.o[2];
          for (int e = 0; e < nw; ++e, first = 0)
            nhwc_add(dst, st[1], cd + (r0 + ow[e]) * ld + (t0 + kw[e]) * c, c, first);
        }
    } else {
      int64_t t = 0;
      for (int64_t kd = 0; kd < g.k[0]; ++kd)
        for (int64_t kh = 0; kh < g.k[1]; ++kh)
          for (int64_t kw = 0; kw < g.k[2]; ++kw, ++t) {
            const int64_t kt[3] = {kd, kh, kw};
            int64_t o[3], ok = 1;
            for (int i = 0; i < 3 && ok; ++i) {
              const int64_t v = x[i] + g.p[i] - kt[i] * g.d[i];
              ok = v >= 0 && v % g.s[i] == 0 && v / g.s[i] < g.o[i];
              o[i] = ok ? v / g.s[i] : 0;
            }
            if (!ok) continue;
            const int64_t row = n * g.len + (o[0] * g.o[1] + o[1]) * g.o[2] + o[2];
            nhwc_add(dst, st[1], cd + row * ld + t * c, c, first);
            first = 0;
          }
    }
    if (first)
      for (int64_t ch = 0; ch < c; ++ch) dst[ch * st[1]] = 0.0f;
    /* the next position: column, row, plane, image */
    if (++x[2] == sz[4]) {
      x[2] = 0;
      if (++x[1] == sz[3]) {
        x[1] = 0;
        if (++x[0] == sz[2]) x[0] = 0, ++n;
      }
    }
  }
  return 0;
}
