/* Channels-last pooling (kernels/nn/pool_nhwc.c) against the plane kernels
 * ("pool.forward" / "pool.backward") reading the same channels-last memory
 * through its strides: max (values and indices, with ties), average and
 * adaptive average, forward and backward, bit for bit, in uneven chunks;
 * max pooling's gradient one image per item (pool.max_backward_nhwc) bit
 * for bit too; the AVX-512 and baseline loops bit for bit; bad operands
 * refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/nn/pool.h"
#include "kernels/nn/pool_internal.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { N = 2, C = 35, H = 11, W = 9 };

/* (N, C, 1, h, w) over channels-last memory. */
static loom_tensor cl5(void *data, int32_t dtype, int64_t h, int64_t w) {
  const int64_t sizes[5] = {N, C, 1, h, w}, strides[5] = {h * w * C, 1, 0, w * C, C};
  return tensor(data, dtype, 5, sizes, strides);
}

/* The scalars of a 2-d pooling: mode, a k x k window, stride s, padding p. */
static void scalars(loom_scalar *sc, int64_t mode, int64_t k, int64_t s, int64_t p) {
  const int64_t v[LOOM_POOL_NUM_SCALARS] = {mode, 1, k, k, 1, s, s, 0, p, p, 1, 1, 1, 0, 0};
  for (int i = 0; i < LOOM_POOL_NUM_SCALARS; ++i) sc[i] = si(v[i]);
}

static void test_against_the_plane_kernels(int64_t mode, int64_t k, int64_t s, int64_t p,
                                           int64_t oh, int64_t ow) {
  static float x[N * C * H * W], y[N * C * H * W], ry[N * C * H * W];
  static float g[N * C * H * W], gi[N * C * H * W], rgi[N * C * H * W];
  static int64_t ind[N * C * H * W], rind[N * C * H * W];
  const int64_t no = N * C * oh * ow, ni = N * C * H * W;
  const int is_max = mode == LOOM_POOL_MAX;
  /* small integers: ties */
  for (int64_t i = 0; i < ni; ++i) x[i] = (float)(rand() % 5), gi[i] = rgi[i] = NAN;
  for (int64_t i = 0; i < no; ++i) g[i] = (float)frand();
  loom_scalar sc[LOOM_POOL_NUM_SCALARS];
  scalars(sc, mode, k, s, p);
  loom_tensor tn[3] = {cl5(x, LOOM_FLOAT32, H, W), cl5(y, LOOM_FLOAT32, oh, ow),
                       cl5(ind, LOOM_INT64, oh, ow)};
  loom_tensor tr[3] = {tn[0], cl5(ry, LOOM_FLOAT32, oh, ow), cl5(rind, LOOM_INT64, oh, ow)};
  CHECK(run_chunks(loom_pool_nhwc_forward_kernel, tn, is_max ? 3 : 2, sc, LOOM_POOL_NUM_SCALARS,
                   N * oh, 3) == LOOM_OK);
  CHECK(run_chunks(loom_pool_kernel, tr, is_max ? 3 : 2, sc, LOOM_POOL_NUM_SCALARS, N * C, 4) ==
        LOOM_OK);
  CHECK(memcmp(y, ry, (size_t)no * sizeof(float)) == 0);
  if (is_max) CHECK(memcmp(ind, rind, (size_t)no * sizeof(int64_t)) == 0);
  loom_tensor bn[3] = {cl5(gi, LOOM_FLOAT32, H, W), cl5(g, LOOM_FLOAT32, oh, ow), tn[2]};
  loom_tensor br[3] = {cl5(rgi, LOOM_FLOAT32, H, W), bn[1], tn[2]};
  CHECK(run_chunks(loom_pool_nhwc_backward_kernel, bn, is_max ? 3 : 2, sc,
                   LOOM_POOL_NUM_SCALARS, N * H, 5) == LOOM_OK);
  CHECK(run_chunks(loom_pool_backward_kernel, br, is_max ? 3 : 2, sc, LOOM_POOL_NUM_SCALARS,
                   N * C, 3) == LOOM_OK);
  CHECK(memcmp(gi, rgi, (size_t)ni * sizeof(float)) == 0);
  if (!is_max) return;
  /* the same gradient one image per item */
  for (int64_t i = 0; i < ni; ++i) gi[i] = NAN;
  CHECK(run_chunks(loom_pool_nhwc_max_backward_kernel, bn, 3, sc, LOOM_POOL_NUM_SCALARS, N, 1) ==
        LOOM_OK);
  CHECK(memcmp(gi, rgi, (size_t)ni * sizeof(float)) == 0);
}

static void test_loops_agree(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  enum { CC = 37, TAPS = 5 };
  static float in[TAPS * CC], a[CC], b[CC], ga[CC], gb[CC];
  static int64_t ia[CC], ib[CC];
  double da[CC] = {0}, db[CC] = {0};
  int64_t off[TAPS], idx[TAPS];
  for (int i = 0; i < TAPS * CC; ++i) in[i] = (float)(rand() % 4);
  in[7] = NAN;
  for (int t = 0; t < TAPS; ++t) off[t] = t * CC, idx[t] = 10 * t;
  loom_pool_nhwc_max_first_generic(in, 0, CC, a, ia);
  loom_pool_nhwc_max_taps_generic(in, off + 1, idx + 1, TAPS - 1, CC, a, ia);
  loom_pool_nhwc_max_first_avx512(in, 0, CC, b, ib);
  loom_pool_nhwc_max_taps_avx512(in, off + 1, idx + 1, TAPS - 1, CC, b, ib);
  CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(ia, ib, sizeof ia) == 0);
  loom_pool_nhwc_avg_taps_generic(in, off, TAPS, CC, da);
  loom_pool_nhwc_avg_taps_avx512(in, off, TAPS, CC, db);
  CHECK(memcmp(da, db, sizeof da) == 0);
  memset(ga, 0, sizeof ga), memset(gb, 0, sizeof gb);
  for (int t = 0; t < TAPS; ++t) {
    loom_pool_nhwc_max_grad_generic(in + t * CC, ia, 10 * t, CC, ga);
    loom_pool_nhwc_max_grad_avx512(in + t * CC, ia, 10 * t, CC, gb);
    loom_pool_nhwc_avg_grad_generic(in + t * CC, 3.0, CC, ga);
    loom_pool_nhwc_avg_grad_avx512(in + t * CC, 3.0, CC, gb);
  }
  CHECK(memcmp(ga, gb, sizeof ga) == 0);
}

static void test_bad_operands(void) {
  static float x[N * C * H * W], y[N * C * H * W];
  loom_scalar sc[LOOM_POOL_NUM_SCALARS];
  scalars(sc, LOOM_POOL_AVG, 3, 2, 1);
  loom_tensor t[2] = {cl5(x, LOOM_FLOAT32, H, W), cl5(y, LOOM_FLOAT32, 6, 5)};
  t[1].rank = 4;
  CHECK(run_chunks(loom_pool_nhwc_forward_kernel, t, 2, sc, LOOM_POOL_NUM_SCALARS, 1, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  t[1].rank = 5;
  CHECK(run_chunks(loom_pool_nhwc_forward_kernel, t, 2, sc, 3, 1, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  /* the one-image-per-item gradient: max modes only, a dense image only */
  static int64_t ind[N * C * H * W];
  loom_tensor b[3] = {cl5(x, LOOM_FLOAT32, H, W), cl5(y, LOOM_FLOAT32, 6, 5),
                      cl5(ind, LOOM_INT64, 6, 5)};
  CHECK(run_chunks(loom_pool_nhwc_max_backward_kernel, b, 3, sc, LOOM_POOL_NUM_SCALARS, N, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  scalars(sc, LOOM_POOL_MAX, 3, 2, 1);
  b[0].strides[4] = 2 * C;
  CHECK(run_chunks(loom_pool_nhwc_max_backward_kernel, b, 3, sc, LOOM_POOL_NUM_SCALARS, N, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  b[0].strides[4] = C, b[2].dtype = LOOM_INT32;
  CHECK(run_chunks(loom_pool_nhwc_max_backward_kernel, b, 3, sc, LOOM_POOL_NUM_SCALARS, N, 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(5);
  test_against_the_plane_kernels(LOOM_POOL_MAX, 3, 2, 1, 6, 5);
  test_against_the_plane_kernels(LOOM_POOL_MAX, 3, 1, 1, 11, 9);
  test_against_the_plane_kernels(LOOM_POOL_AVG, 3, 2, 1, 6, 5);
  test_against_the_plane_kernels(LOOM_POOL_AVG, 2, 1, 0, 10, 8);
  test_against_the_plane_kernels(LOOM_POOL_ADAPTIVE_AVG, 1, 1, 0, 4, 3);
  test_loops_agree();
  test_bad_operands();
  TEST_MAIN_END();
}
