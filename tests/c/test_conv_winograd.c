/* tests/c/test_conv_winograd.c — Winograd F(2x2, 3x3) (kernels/conv/conv.h)
 * against a direct 3x3 convolution in double, for the forward and the
 * flipped (input gradient) weight; its results must not depend on how the
 * items are split. Kernels are called directly. */
#include <math.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm.h"
#include "loom/status.h"
#include "test_util.h"

enum {
  MR = LOOM_CONV_WINOGRAD_MR, TILES = LOOM_CONV_WINOGRAD_TILES, PANELS = LOOM_CONV_WINOGRAD_PANELS,
  WG_M = LOOM_CONV_WINOGRAD_WG_M, WG_K = LOOM_CONV_WINOGRAD_WG_K,
};

static uint64_t rng = 777;
static float rnd(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static loom_tensor dense(void *data, int rank, const int64_t *sizes) {
  loom_tensor t = {.data = data, .dtype = LOOM_FLOAT32, .rank = rank};
  int64_t step = 1;
  for (int i = rank - 1; i >= 0; --i) t.sizes[i] = sizes[i], t.strides[i] = step, step *= sizes[i];
  return t;
}

/* t with channels-last strides: (N, C, H, W) as (N, H, W, C) in memory, or
 * rank 5 (N, C, 1, H, W) likewise. */
static loom_tensor channels_last(loom_tensor t) {
  const int64_t c = t.sizes[1], h = t.sizes[t.rank - 2], w = t.sizes[t.rank - 1];
  t.strides[0] = c * h * w, t.strides[1] = 1;
  t.strides[t.rank - 1] = c, t.strides[t.rank - 2] = w * c;
  if (t.rank == 5) t.strides[2] = h * w * c;
  return t;
}

/* NCHW src (n, c, h, w) laid out channels last into dst. */
static void to_channels_last(float *dst, const float *src, int64_t n, int64_t c, int64_t h,
                             int64_t w) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < h * w; ++i) dst[(b * h * w + i) * c + ch] = src[(b * c + ch) * h * w + i];
}

/* Runs fn over [0, range) in pieces of `grain` items. */
static void run(loom_kernel_fn fn, loom_tensor *ts, int nt, loom_scalar *sc, int ns,
                int64_t range, int64_t grain) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = (uint32_t)nt,
                        .tensors = ts, .num_scalars = (uint32_t)ns, .scalars = sc,
                        .range = range, .grain = grain};
  for (int64_t s = 0; s < range; s += grain) {
    int rc = fn(&a, s, s + grain < range ? s + grain : range);
    CHECK(rc == 0);
  }
}

/* A convolution of n images of k channels (h x w, padding p) into m
 * channels; with `flipped`, its weight is w (k, m, 3, 3) with channels
 * swapped and taps reversed, else w is (m, k, 3, 3). */
static void check(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t p,
                  int with_bias, int flipped) {
  const int64_t ho = h + 2 * p - 2, wo = w + 2 * p - 2, tho = (ho + 1) / 2, two = (wo + 1) / 2;
  const int64_t wq = (w + 2 * p + 1) / 2, gpos = (tho * wq + TILES - 1) / TILES * TILES;
  const int64_t prow = (h + 2 * p + 1) / 2 * wq;
  const int64_t need = gpos + wq + 1 > prow ? gpos + wq + 1 : prow, plane = (need + 15) / 16 * 16;
  const int64_t panels = (m + MR - 1) / MR;
  float *x = malloc(sizeof(float) * n * k * h * w), *wt = malloc(sizeof(float) * m * k * 9);
  float *bias = malloc(sizeof(float) * m), *xp = malloc(sizeof(float) * n * 4 * k * plane);
  float *u = malloc(sizeof(float) * 16 * panels * k * MR);
  float *y1 = malloc(sizeof(float) * n * m * ho * wo), *y2 = malloc(sizeof(float) * n * m * ho * wo);
  for (int64_t i = 0; i < n * k * h * w; ++i) x[i] = rnd();
  for (int64_t i = 0; i < m * k * 9; ++i) wt[i] = rnd();
  for (int64_t i = 0; i < m; ++i) bias[i] = rnd();
  CHECK(two + 1 <= wq);

  /* the phase planes, the transformed weight, then the convolution */
  const int64_t xs[5] = {n, k, 1, h, w}, ps[3] = {n, 4 * k, plane};
  loom_tensor pts[2] = {dense(xp, 3, ps), dense(x, 5, xs)};
  loom_scalar psc[5] = {{.i = p}, {.i = p}, {.i = wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, pts, 2, psc, 5, n * 4 * k, 7);
  const int64_t ws[4] = {flipped ? k : m, flipped ? m : k, 3, 3}, us[4] = {16, panels, k, MR};
  loom_tensor wts[2] = {dense(u, 4, us), dense(wt, 4, ws)};
  loom_scalar wsc[1] = {{.i = flipped}};
  run(loom_conv_winograd_weight_kernel, wts, 2, wsc, 1, panels, 1);
  const int64_t os[4] = {n, m, ho, wo}, bs[1] = {m};
  loom_tensor ts[4] = {dense(y1, 4, os), dense(u, 4, us), dense(xp, 3, ps), dense(bias, 1, bs)};
  loom_scalar sc[2] = {{.i = wq}, {.i = gpos}};
  const int64_t items = n * (gpos / TILES) * ((panels + PANELS - 1) / PANELS);
  run(loom_conv_winograd_kernel, ts, with_bias ? 4 : 3, sc, 2, items, items);
  ts[0].data = y2;
  run(loom_conv_winograd_kernel, ts, with_bias ? 4 : 3, sc, 2, items, 1);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0); /* the split changes nothing */

  int bad = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double ref = with_bias ? bias[o] : 0.0, mag = fabs(ref);
          for (int64_t c = 0; c < k; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t s = 0; s < 3; ++s) {
                const int64_t yy = i + r - p, xx = j + s - p;
                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                const float wv = flipped ? wt[((c * m + o) * 3 + 2 - r) * 3 + 2 - s]
                                         : wt[((o * k + c) * 3 + r) * 3 + s];
                const double t = (double)wv * x[((b * k + c) * h + yy) * w + xx];
                ref += t, mag += fabs(t);
              }
          const double err = fabs(y1[((b * m + o) * ho + i) * wo + j] - ref) / (mag + 1e-30);
          if (err > worst) worst = err;
          bad += err > 1e-6;
        }
  if (bad)
    fprintf(stderr, "n %ld k %ld m %ld %ldx%ld p %ld flipped %d: %d differ (worst %.3g)\n",
            (long)n, (long)k, (long)m, (long)h, (long)w, (long)p, flipped, bad, worst);
  CHECK(bad == 0);

  /* Channels last: the image padded from its channels-last copy, the
   * weight transformed from it, and the output written in it, give the
   * same bits as NCHW. */
  float *xc = malloc(sizeof(float) * n * k * h * w), *wc = malloc(sizeof(float) * m * k * 9);
  float *xp2 = malloc(sizeof(float) * n * 4 * k * plane), *u2 = malloc(sizeof(float) * 16 * panels * k * MR);
  float *y3 = malloc(sizeof(float) * n * m * ho * wo), *y4 = malloc(sizeof(float) * n * m * ho * wo);
  to_channels_last(xc, x, n, k, h, w);
  to_channels_last(wc, wt, ws[0], ws[1], 3, 3);
  for (int64_t i = 0; i < n * 4 * k * plane; ++i) xp2[i] = 7.0f;
  loom_tensor cpts[2] = {dense(xp2, 3, ps), channels_last(dense(xc, 5, xs))};
  run(loom_conv_pad_kernel, cpts, 2, psc, 5, n * 4 * k, 7);
  CHECK(memcmp(xp, xp2, sizeof(float) * n * 4 * k * plane) == 0);
  loom_tensor cwts[2] = {dense(u2, 4, us), channels_last(dense(wc, 4, ws))};
  run(loom_conv_winograd_weight_kernel, cwts, 2, wsc, 1, panels, 1);
  CHECK(memcmp(u, u2, sizeof(float) * 16 * panels * k * MR) == 0);
  loom_tensor cts[4] = {channels_last(dense(y3, 4, os)), dense(u2, 4, us), dense(xp2, 3, ps),
                        dense(bias, 1, bs)};
  run(loom_conv_winograd_kernel, cts, with_bias ? 4 : 3, sc, 2, items, items);
  to_channels_last(y4, y1, n, m, ho, wo);
  CHECK(memcmp(y3, y4, sizeof(float) * n * m * ho * wo) == 0);
  cts[0].data = y4;
  run(loom_conv_winograd_kernel, cts, with_bias ? 4 : 3, sc, 2, items, 1);
  CHECK(memcmp(y3, y4, sizeof(float) * n * m * ho * wo) == 0);
  /* the channels-last image read in place, no planes: the same bits, for
   * either output layout and any split */
  const int64_t xs4[4] = {n, k, h, w};
  loom_scalar isc[4] = {{.i = wq}, {.i = gpos}, {.i = p}, {.i = p}};
  cts[2] = channels_last(dense(xc, 4, xs4));
  for (int64_t i = 0; i < n * m * ho * wo; ++i) y4[i] = 9.0f;
  run(loom_conv_winograd_kernel, cts, with_bias ? 4 : 3, isc, 4, items, 1);
  CHECK(memcmp(y3, y4, sizeof(float) * n * m * ho * wo) == 0);
  ts[0].data = y2, ts[2] = cts[2];
  for (int64_t i = 0; i < n * m * ho * wo; ++i) y2[i] = 9.0f;
  run(loom_conv_winograd_kernel, ts, with_bias ? 4 : 3, isc, 4, items, 3);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0);
  /* the NCHW image read in place by rows: the same bits, for either
   * output layout and any split */
  ts[2] = dense(x, 4, xs4);
  for (int64_t i = 0; i < n * m * ho * wo; ++i) y2[i] = 9.0f;
  run(loom_conv_winograd_kernel, ts, with_bias ? 4 : 3, isc, 4, items, 2);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0);
  cts[2] = ts[2];
  for (int64_t i = 0; i < n * m * ho * wo; ++i) y4[i] = 9.0f;
  run(loom_conv_winograd_kernel, cts, with_bias ? 4 : 3, isc, 4, items, items);
  CHECK(memcmp(y3, y4, sizeof(float) * n * m * ho * wo) == 0);
  ts[2] = dense(xp, 3, ps);
  /* without its padding, or with neither channels nor columns adjacent,
   * the image is refused */
  loom_kernel_args ia = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = cts,
                         .num_scalars = 2, .scalars = isc, .range = 1, .grain = 1};
  CHECK(loom_conv_winograd_kernel(&ia, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  ia.num_scalars = 4, cts[2].strides[3] = 2, cts[2].strides[2] = 2 * w, cts[2].strides[1] = h * w;
  CHECK(loom_conv_winograd_kernel(&ia, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  free(xc), free(wc), free(xp2), free(u2), free(y3), free(y4);

  /* a grid one tile too narrow is refused */
  loom_scalar narrow[2] = {{.i = two}, {.i = gpos}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = ts,
                        .num_scalars = 2, .scalars = narrow, .range = 1, .grain = 1};
  CHECK(loom_conv_winograd_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  free(x), free(wt), free(bias), free(xp), free(u), free(y1), free(y2);
}

/* Padding `top` rows and `left` columns (top != left): the channels-last
 * image read in place gives the bits of the planes conv.pad makes of it. */
static void check_image_padding(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t top,
                                int64_t left) {
  const int64_t ho = h + 2 * top - 2, wo = w + 2 * left - 2, tho = (ho + 1) / 2, two = (wo + 1) / 2;
  const int64_t wq = (w + 2 * left + 1) / 2, gpos = (tho * wq + TILES - 1) / TILES * TILES;
  const int64_t prow = (h + 2 * top + 1) / 2 * wq;
  const int64_t need = gpos + wq + 1 > prow ? gpos + wq + 1 : prow, plane = (need + 15) / 16 * 16;
  const int64_t panels = (m + MR - 1) / MR, items = n * (gpos / TILES) * ((panels + PANELS - 1) / PANELS);
  float *x = malloc(sizeof(float) * n * k * h * w), *xc = malloc(sizeof(float) * n * k * h * w);
  float *wt = malloc(sizeof(float) * m * k * 9), *xp = malloc(sizeof(float) * n * 4 * k * plane);
  float *u = malloc(sizeof(float) * 16 * panels * k * MR);
  float *y1 = malloc(sizeof(float) * n * m * ho * wo), *y2 = malloc(sizeof(float) * n * m * ho * wo);
  for (int64_t i = 0; i < n * k * h * w; ++i) x[i] = rnd();
  for (int64_t i = 0; i < m * k * 9; ++i) wt[i] = rnd();
  to_channels_last(xc, x, n, k, h, w);
  const int64_t xs[4] = {n, k, h, w}, xs5[5] = {n, k, 1, h, w}, ps[3] = {n, 4 * k, plane};
  loom_tensor pts[2] = {dense(xp, 3, ps), channels_last(dense(xc, 5, xs5))};
  loom_scalar psc[5] = {{.i = top}, {.i = left}, {.i = wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, pts, 2, psc, 5, n * 4 * k, 7);
  const int64_t ws[4] = {m, k, 3, 3}, us[4] = {16, panels, k, MR}, os[4] = {n, m, ho, wo};
  loom_tensor wts[2] = {dense(u, 4, us), dense(wt, 4, ws)};
  loom_scalar wsc[1] = {{.i = 0}};
  run(loom_conv_winograd_weight_kernel, wts, 2, wsc, 1, panels, 1);
  loom_tensor ts[3] = {channels_last(dense(y1, 4, os)), dense(u, 4, us), dense(xp, 3, ps)};
  loom_scalar sc[4] = {{.i = wq}, {.i = gpos}, {.i = top}, {.i = left}};
  run(loom_conv_winograd_kernel, ts, 3, sc, 2, items, 1);
  const loom_tensor img = channels_last(dense(xc, 4, xs));
  ts[0].data = y2, ts[2] = img;
  run(loom_conv_winograd_kernel, ts, 3, sc, 4, items, 2);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0);
  /* and the NCHW image, read by rows */
  ts[2] = dense(x, 4, xs);
  for (int64_t i = 0; i < n * m * ho * wo; ++i) y2[i] = 9.0f;
  run(loom_conv_winograd_kernel, ts, 3, sc, 4, items, 3);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0);
  /* and the generic twin likewise */
  ts[0].data = y1, ts[2] = dense(xp, 3, ps);
  run(loom_conv_winograd_generic, ts, 3, sc, 2, items, 1);
  ts[0].data = y2, ts[2] = img;
  run(loom_conv_winograd_generic, ts, 3, sc, 4, items, 3);
  CHECK(memcmp(y1, y2, sizeof(float) * n * m * ho * wo) == 0);
  free(x), free(xc), free(wt), free(xp), free(u), free(y1), free(y2);
}

/* The weight gradient of that convolution (weight m x k x 3 x 3) against
 * a direct sum in double, from the phase planes of x and dy, for every
 * split of the items. */
static void check_wgrad(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t p,
                        int64_t tchunk) {
  const int64_t ho = h + 2 * p - 2, wo = w + 2 * p - 2, tho = (ho + 1) / 2;
  const int64_t wq = (w + 2 * p + 1) / 2, gpos = (tho * wq + TILES - 1) / TILES * TILES;
  const int64_t prow = (h + 2 * p + 1) / 2 * wq;
  const int64_t xplane = ((gpos + wq + 1 > prow ? gpos + wq + 1 : prow) + 15) / 16 * 16;
  const int64_t dplane = ((gpos > tho * wq ? gpos : tho * wq) + 15) / 16 * 16;
  const int64_t chunks = (n * gpos + tchunk - 1) / tchunk;
  const int64_t items = chunks * ((m + WG_M - 1) / WG_M) * ((k + WG_K - 1) / WG_K);
  float *x = malloc(sizeof(float) * n * k * h * w), *dy = malloc(sizeof(float) * n * m * ho * wo);
  float *xp = malloc(sizeof(float) * n * 4 * k * xplane);
  float *dyp = malloc(sizeof(float) * n * 4 * m * dplane);
  float *part = malloc(sizeof(float) * chunks * 16 * m * k);
  float *dw1 = malloc(sizeof(float) * m * k * 9), *dw2 = malloc(sizeof(float) * m * k * 9);
  for (int64_t i = 0; i < n * k * h * w; ++i) x[i] = rnd();
  for (int64_t i = 0; i < n * m * ho * wo; ++i) dy[i] = rnd();
  const int64_t xs[5] = {n, k, 1, h, w}, xps[3] = {n, 4 * k, xplane};
  const int64_t ds[5] = {n, m, 1, ho, wo}, dps[3] = {n, 4 * m, dplane};
  loom_tensor pts[2] = {dense(xp, 3, xps), dense(x, 5, xs)};
  loom_scalar psc[5] = {{.i = p}, {.i = p}, {.i = wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, pts, 2, psc, 5, n * 4 * k, 5);
  loom_tensor dts[2] = {dense(dyp, 3, dps), dense(dy, 5, ds)};
  loom_scalar dsc[5] = {{.i = 0}, {.i = 0}, {.i = wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, dts, 2, dsc, 5, n * 4 * m, 5);
  const int64_t partsz[4] = {chunks, 16, m, k}, dws[4] = {m, k, 3, 3};
  loom_tensor ts[3] = {dense(part, 4, partsz), dense(xp, 3, xps), dense(dyp, 3, dps)};
  loom_scalar sc[3] = {{.i = wq}, {.i = gpos}, {.i = tchunk}};
  loom_tensor fts[2] = {dense(dw1, 4, dws), dense(part, 4, partsz)};
  run(loom_conv_winograd_wgrad_kernel, ts, 3, sc, 3, items, items);
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, m);
  run(loom_conv_winograd_wgrad_kernel, ts, 3, sc, 3, items, 1);
  fts[0].data = dw2;
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, 3);
  CHECK(memcmp(dw1, dw2, sizeof(float) * m * k * 9) == 0); /* the split changes nothing */
  /* written channels last, as the gradient of a channels-last weight: the
   * same values */
  float *dw3 = malloc(sizeof(float) * m * k * 9);
  fts[0] = channels_last(dense(dw3, 4, dws));
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, 3);
  to_channels_last(dw2, dw1, m, k, 3, 3);
  CHECK(memcmp(dw2, dw3, sizeof(float) * m * k * 9) == 0);
  /* x and dy channels last, read in place: the same sums, for any split */
  float *xc = malloc(sizeof(float) * n * k * h * w), *dyc = malloc(sizeof(float) * n * m * ho * wo);
  to_channels_last(xc, x, n, k, h, w);
  to_channels_last(dyc, dy, n, m, ho, wo);
  const int64_t xs4[4] = {n, k, h, w}, ds4[4] = {n, m, ho, wo};
  loom_tensor its[3] = {dense(part, 4, partsz), channels_last(dense(xc, 4, xs4)),
                        channels_last(dense(dyc, 4, ds4))};
  loom_scalar isc[6] = {{.i = wq}, {.i = gpos}, {.i = tchunk}, {.i = 0}, {.i = p}, {.i = p}};
  for (int64_t i = 0; i < chunks * 16 * m * k; ++i) part[i] = 5.0f;
  run(loom_conv_winograd_wgrad_kernel, its, 3, isc, 6, items, 1);
  fts[0] = dense(dw3, 4, dws);
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, 3);
  CHECK(memcmp(dw1, dw3, sizeof(float) * m * k * 9) == 0);
  run(loom_conv_winograd_wgrad_kernel, its, 3, isc, 6, items, items);
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, m);
  CHECK(memcmp(dw1, dw3, sizeof(float) * m * k * 9) == 0);
  /* x and dy NCHW, read in place by rows: the same sums, for any split */
  loom_tensor rts[3] = {dense(part, 4, partsz), dense(x, 4, xs4), dense(dy, 4, ds4)};
  for (int64_t i = 0; i < chunks * 16 * m * k; ++i) part[i] = 5.0f;
  run(loom_conv_winograd_wgrad_kernel, rts, 3, isc, 6, items, 2);
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m, 3);
  CHECK(memcmp(dw1, dw3, sizeof(float) * m * k * 9) == 0);
  /* refused: x channels last beside an NCHW dy (k > 1: x's columns apart) */
  loom_kernel_args ma = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = rts,
                         .num_scalars = 6, .scalars = isc, .range = 1, .grain = 1};
  rts[1] = its[1];
  CHECK(k == 1 || loom_conv_winograd_wgrad_kernel(&ma, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  /* refused: one image beside planes, no padding scalars, padded-dy flag */
  loom_kernel_args ia = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = its,
                         .num_scalars = 4, .scalars = isc, .range = 1, .grain = 1};
  CHECK(loom_conv_winograd_wgrad_kernel(&ia, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  ia.num_scalars = 6, isc[3].i = 1;
  CHECK(loom_conv_winograd_wgrad_kernel(&ia, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  isc[3].i = 0, its[2] = dense(dyp, 3, dps);
  CHECK(loom_conv_winograd_wgrad_kernel(&ia, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  free(dw3), free(xc), free(dyc);
  int bad = 0;
  double worst = 0.0;
  for (int64_t o = 0; o < m; ++o)
    for (int64_t c = 0; c < k; ++c)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) {
          double ref = 0.0, mag = 0.0;
          for (int64_t b = 0; b < n; ++b)
            for (int64_t i = 0; i < ho; ++i)
              for (int64_t j = 0; j < wo; ++j) {
                const int64_t yy = i + r - p, xx = j + s - p;
                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                const double t = (double)dy[((b * m + o) * ho + i) * wo + j] *
                                 x[((b * k + c) * h + yy) * w + xx];
                ref += t, mag += fabs(t);
              }
          const double err = fabs(dw1[((o * k + c) * 3 + r) * 3 + s] - ref) / (mag + 1e-30);
          if (err > worst) worst = err;
          bad += err > 1e-6;
        }
  if (bad)
    fprintf(stderr, "weight grad n %ld k %ld m %ld %ldx%ld p %ld: %d differ (worst %.3g)\n",
            (long)n, (long)k, (long)m, (long)h, (long)w, (long)p, bad, worst);
  CHECK(bad == 0);
  free(x), free(dy), free(xp), free(dyp), free(part), free(dw1), free(dw2);
}

int main(void) {
  if (loom_gemm_isa_selected() == LOOM_GEMM_GENERIC) {
    test_skip("no AVX-512: these Winograd kernels are not used (test_conv_generic_winograd "
              "tests the generic ones)");
    TEST_MAIN_END();
  }
  /* one tile block, odd output sizes (a half tile at the right and bottom) */
  check(1, 3, 5, 7, 9, 1, 1, 0);
  /* several blocks and channel passes (k > 128), two panel groups (m > 96),
   * a partial last panel */
  check(2, 130, 101, 12, 10, 1, 1, 0);
  /* no padding, and padding 2 */
  check(2, 16, 24, 11, 14, 0, 0, 0);
  check(1, 8, 13, 9, 6, 2, 1, 0);
  /* the input gradient's flipped weight */
  check(2, 20, 17, 13, 15, 1, 0, 1);
  check(1, 140, 30, 8, 8, 1, 0, 1);
  /* rows of more than 16 positions per phase (the channels-last pad's
   * transposes in several column blocks), channels not a multiple of 16 */
  check(2, 21, 19, 5, 37, 1, 1, 0);
  check(1, 35, 40, 6, 70, 1, 0, 1);
  /* the channels-last image read in place with different row and column
   * padding */
  check_image_padding(2, 20, 14, 9, 13, 2, 0);
  check_image_padding(1, 33, 12, 8, 7, 0, 1);
  check_image_padding(1, 7, 9, 6, 40, 2, 1);
  /* weight gradients: one chunk; several chunks, two channel groups each
   * way (m > 96, k > 64) with partial panels; odd sizes, no padding */
  check_wgrad(1, 5, 7, 7, 9, 1, 32);
  check_wgrad(2, 70, 100, 10, 11, 1, 64);
  check_wgrad(2, 16, 20, 13, 8, 0, 32);
  /* rows of more than 16 tiles */
  check_wgrad(2, 12, 15, 5, 36, 1, 64);
  TEST_MAIN_END();
}
