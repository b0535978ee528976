/* The bicubic, trilinear and anti-aliased resampling kernels, 3-d grid
 * sampling and fractional max pooling: identities (an unchanged size, an
 * identity grid, one-element windows) reproduce the input exactly,
 * constants stay constant, windows give their known maxima, gradients
 * conserve their sum where the weights sum to one, bad arguments are
 * refused, and chunking never changes a bit (the Python tests compare
 * with PyTorch's CPU). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/grid_sample3d.h"
#include "kernels/nn/upsample_nd.h"
#include "loom/kernels/pool.h"
#include "loom/kernels/pool_fractional.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

int loom_kernel_pool_fractional_max(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_pool_backward_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

enum { P = 6 }; /* planes: N = 2, C = 3 */

static void scalars(loom_scalar *s, int align, int filter, int axis) {
  s[0] = si(align);
  s[1] = si(filter);
  s[2] = si(axis);
  for (int i = 3; i < 6; ++i) s[i] = sf(0);
}

/* Runs fn over `planes` items once whole and once an item at a time into
 * out (bytes): the two must agree bit for bit. */
static void run_both(loom_kernel_fn fn, loom_tensor *t, int nt, loom_scalar *s, int ns,
                     int64_t planes, void *out, size_t bytes) {
  void *first = malloc(bytes);
  CHECK(run_chunks(fn, t, nt, s, ns, planes, planes) == 0);
  memcpy(first, out, bytes);
  memset(out, 0x7f, bytes);
  CHECK(run_chunks(fn, t, nt, s, ns, planes, 1) == 0);
  CHECK(memcmp(first, out, bytes) == 0);
  free(first);
}

static void test_bicubic(void) {
  enum { H = 5, W = 7, OH = 9, OW = 4 };
  static double in[P * H * W], out[P * OH * OW], same[P * H * W], go[P * OH * OW], gi[P * H * W];
  fill(in, P * H * W);
  const int64_t is[4] = {2, 3, H, W}, os[4] = {2, 3, OH, OW};
  loom_scalar s[6];
  for (int align = 0; align <= 1; ++align) {
    scalars(s, align, 0, 0);
    /* the same size: weights (0, 1, 0, 0), the input itself */
    loom_tensor t[2] = {dense(same, LOOM_FLOAT64, 4, is), dense(in, LOOM_FLOAT64, 4, is)};
    CHECK(run_chunks(loom_kernel_upsample_bicubic2d, t, 2, s, 6, P, 1) == 0);
    CHECK(memcmp(same, in, sizeof in) == 0);
    t[0] = dense(out, LOOM_FLOAT64, 4, os);
    run_both(loom_kernel_upsample_bicubic2d, t, 2, s, 6, P, out, sizeof out);
    /* the gradient's total: each output's weights sum to one */
    fill(go, P * OH * OW);
    loom_tensor b[2] = {dense(gi, LOOM_FLOAT64, 4, is), dense(go, LOOM_FLOAT64, 4, os)};
    run_both(loom_kernel_upsample_bicubic2d_backward, b, 2, s, 6, P, gi, sizeof gi);
    double a = 0, c = 0;
    for (int i = 0; i < P * OH * OW; ++i) a += go[i];
    for (int i = 0; i < P * H * W; ++i) c += gi[i];
    CHECK_NEAR(a, c, 1e-12);
  }
  /* a backward into a float16 gradient is refused */
  loom_tensor b[2] = {dense(gi, LOOM_FLOAT16, 4, is), dense(go, LOOM_FLOAT64, 4, os)};
  CHECK(run_chunks(loom_kernel_upsample_bicubic2d_backward, b, 2, s, 6, P, P) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_trilinear(void) {
  enum { D = 3, H = 4, W = 5, OD = 5, OH = 3, OW = 8 };
  static float in[P * D * H * W], out[P * OD * OH * OW], go[P * OD * OH * OW], gi[P * D * H * W];
  for (int i = 0; i < P * D * H * W; ++i) in[i] = 1.5f;
  const int64_t is[5] = {2, 3, D, H, W}, os[5] = {2, 3, OD, OH, OW};
  loom_scalar s[6];
  scalars(s, 0, 0, 0);
  loom_tensor t[2] = {dense(out, LOOM_FLOAT32, 5, os), dense(in, LOOM_FLOAT32, 5, is)};
  run_both(loom_kernel_upsample_trilinear3d, t, 2, s, 6, P, out, sizeof out);
  for (int i = 0; i < P * OD * OH * OW; ++i) CHECK(out[i] == 1.5f);
  for (int i = 0; i < P * OD * OH * OW; ++i) go[i] = (float)(i % 7) - 3.0f;
  loom_tensor b[2] = {dense(gi, LOOM_FLOAT32, 5, is), dense(go, LOOM_FLOAT32, 5, os)};
  run_both(loom_kernel_upsample_trilinear3d_backward, b, 2, s, 6, P, gi, sizeof gi);
  double a = 0, c = 0;
  for (int i = 0; i < P * OD * OH * OW; ++i) a += go[i];
  for (int i = 0; i < P * D * H * W; ++i) c += gi[i];
  CHECK_NEAR(a, c, 1e-3);
  t[1].rank = 4; /* volumes are rank 5 */
  CHECK(run_chunks(loom_kernel_upsample_trilinear3d, t, 2, s, 6, P, P) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

/* One anti-aliased pass along the columns, 12 -> 5 (triangle and cubic
 * filters): normalized weights keep a constant; the backward conserves the
 * gradient's sum. */
static void test_antialiased(void) {
  enum { H = 3, W = 12, OW = 5 };
  static double in[P * H * W], out[P * H * OW], go[P * H * OW], gi[P * H * W];
  for (int i = 0; i < P * H * W; ++i) in[i] = -2.25;
  const int64_t is[4] = {2, 3, H, W}, os[4] = {2, 3, H, OW};
  loom_scalar s[6];
  for (int filter = LOOM_UPSAMPLE_FILTER_LINEAR; filter <= LOOM_UPSAMPLE_FILTER_CUBIC; ++filter) {
    scalars(s, 0, filter, 3);
    loom_tensor t[2] = {dense(out, LOOM_FLOAT64, 4, os), dense(in, LOOM_FLOAT64, 4, is)};
    run_both(loom_kernel_upsample_aa_pass, t, 2, s, 6, P, out, sizeof out);
    for (int i = 0; i < P * H * OW; ++i) CHECK_NEAR(out[i], -2.25, 1e-14);
    fill(go, P * H * OW);
    loom_tensor b[2] = {dense(gi, LOOM_FLOAT64, 4, is), dense(go, LOOM_FLOAT64, 4, os)};
    run_both(loom_kernel_upsample_aa_backward, b, 2, s, 6, P, gi, sizeof gi);
    double a = 0, c = 0;
    for (int i = 0; i < P * H * OW; ++i) a += go[i];
    for (int i = 0; i < P * H * W; ++i) c += gi[i];
    CHECK_NEAR(a, c, 1e-12);
    s[2] = si(1); /* no such axis */
    CHECK(run_chunks(loom_kernel_upsample_aa_pass, t, 2, s, 6, P, P) ==
          LOOM_ERROR_INVALID_ARGUMENT);
  }
}

/* An identity grid over a 3x3x3 volume (align_corners: -1, 0, 1 land on
 * voxels) samples the input itself, trilinear and nearest; the backward
 * of a gradient at one output puts it on that voxel alone. */
static void test_grid_sample3d(void) {
  enum { C = 2, S = 3, V = S * S * S };
  static float in[2 * C * V], out[2 * C * V], grid[2 * V * 3], go[2 * C * V], gi[2 * C * V],
      gg[2 * V * 3];
  for (int i = 0; i < 2 * C * V; ++i) in[i] = (float)frand();
  for (int n = 0; n < 2; ++n)
    for (int z = 0; z < S; ++z)
      for (int y = 0; y < S; ++y)
        for (int x = 0; x < S; ++x) {
          float *g = grid + (((n * S + z) * S + y) * S + x) * 3;
          g[0] = (float)(x - 1), g[1] = (float)(y - 1), g[2] = (float)(z - 1);
        }
  const int64_t vs[5] = {2, C, S, S, S}, gs[5] = {2, S, S, S, 3};
  for (int nearest = 0; nearest <= 1; ++nearest) {
    loom_scalar s[3] = {si(nearest), si(0), si(1)};
    loom_tensor t[3] = {dense(out, LOOM_FLOAT32, 5, vs), dense(in, LOOM_FLOAT32, 5, vs),
                        dense(grid, LOOM_FLOAT32, 5, gs)};
    run_both(loom_kernel_grid_sample3d, t, 3, s, 3, 2 * S, out, sizeof out);
    CHECK(memcmp(out, in, sizeof in) == 0);
    memset(go, 0, sizeof go);
    go[C * V + V + 13] = 2.0f; /* image 1, channel 1, the centre */
    loom_tensor b[5] = {dense(gi, LOOM_FLOAT32, 5, vs), dense(gg, LOOM_FLOAT32, 5, gs),
                        dense(go, LOOM_FLOAT32, 5, vs), t[1], t[2]};
    run_both(loom_kernel_grid_sample3d_backward, b, 5, s, 3, 2, gi, sizeof gi);
    for (int i = 0; i < 2 * C * V; ++i) CHECK(gi[i] == (i == C * V + V + 13 ? 2.0f : 0.0f));
    b[0] = none(); /* the grid's gradient alone */
    CHECK(run_chunks(loom_kernel_grid_sample3d_backward, b, 5, s, 3, 2, 1) == 0);
  }
  loom_scalar bad[3] = {si(2), si(0), si(0)}; /* bicubic has no 3-d form */
  loom_tensor t[3] = {dense(out, LOOM_FLOAT32, 5, vs), dense(in, LOOM_FLOAT32, 5, vs),
                      dense(grid, LOOM_FLOAT32, 5, gs)};
  CHECK(run_chunks(loom_kernel_grid_sample3d, t, 3, bad, 3, 2 * S, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

/* Fractional max pooling with samples 0 over 4x4 planes, windows 2x2 and
 * 2 outputs a side: plain 2x2 max pooling; one-element windows of an
 * unchanged size: the input and its offsets. The backward adds each
 * output's gradient at its index. */
static void test_fractional(void) {
  enum { H = 4, W = 4 };
  static float in[P * H * W], out[P * H * W], samples[P * 2], go[P * 4], gi[P * H * W];
  int64_t ind[P * H * W];
  for (int i = 0; i < P * H * W; ++i) in[i] = (float)((i * 7) % 16);
  const int64_t is[5] = {2, 3, 1, H, W}, os[5] = {2, 3, 1, 2, 2}, ss[3] = {2, 3, 2};
  loom_scalar s[4] = {si(2), si(1), si(2), si(2)};
  loom_tensor t[4] = {dense(out, LOOM_FLOAT32, 5, os), dense(ind, LOOM_INT64, 5, os),
                      dense(in, LOOM_FLOAT32, 5, is), dense(samples, LOOM_FLOAT32, 3, ss)};
  run_both(loom_kernel_pool_fractional_max, t, 4, s, 4, P, out, 4 * P * sizeof(float));
  for (int p = 0; p < P; ++p)
    for (int o = 0; o < 4; ++o) {
      const int y0 = (o / 2) * 2, x0 = (o % 2) * 2;
      float best = -INFINITY;
      for (int y = y0; y < y0 + 2; ++y)
        for (int x = x0; x < x0 + 2; ++x) best = fmaxf(best, in[p * 16 + y * 4 + x]);
      CHECK(out[p * 4 + o] == best && in[p * 16 + ind[p * 4 + o]] == best);
    }
  for (int i = 0; i < P * 4; ++i) go[i] = 1.0f + (float)i;
  loom_scalar ps[LOOM_POOL_NUM_SCALARS];
  for (int i = 0; i < LOOM_POOL_NUM_SCALARS; ++i) ps[i] = si(0);
  ps[0] = si(LOOM_POOL_ADAPTIVE_MAX);
  loom_tensor b[3] = {dense(gi, LOOM_FLOAT32, 5, is), dense(go, LOOM_FLOAT32, 5, os), t[1]};
  run_both(loom_pool_backward_kernel, b, 3, ps, LOOM_POOL_NUM_SCALARS, P, gi, sizeof gi);
  for (int p = 0; p < P; ++p)
    for (int o = 0; o < 4; ++o) CHECK(gi[p * 16 + ind[p * 4 + o]] == go[p * 4 + o]);
  /* one-element windows, the size unchanged, samples anywhere in [0, 1) */
  for (int i = 0; i < P * 2; ++i) samples[i] = 0.9f * (float)i / (float)(P * 2);
  s[2] = si(1), s[3] = si(1);
  t[0] = dense(out, LOOM_FLOAT32, 5, is);
  t[1] = dense(ind, LOOM_INT64, 5, is);
  CHECK(run_chunks(loom_kernel_pool_fractional_max, t, 4, s, 4, P, 1) == 0);
  CHECK(memcmp(out, in, sizeof in) == 0);
  for (int i = 0; i < P * H * W; ++i) CHECK(ind[i] == i % 16);
  s[0] = si(4); /* 2-d or 3-d */
  CHECK(run_chunks(loom_kernel_pool_fractional_max, t, 4, s, 4, P, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(11);
  test_bicubic();
  test_trilinear();
  test_antialiased();
  test_grid_sample3d();
  test_fractional();
  TEST_MAIN_END();
}
