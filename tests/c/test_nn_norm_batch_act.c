/* Batch norm + ReLU fused (kernels/nn/norm_batch_act.c) against the unfused
 * library sequence: "norm.batch_forward", then the residual add and the
 * ReLU per element in float; backward, the ReLU's threshold mask, then
 * "norm.batch_backward". Bit for bit, in chunks of any size (the plane
 * loops both share, and their builds' agreement, are
 * test_nn_norm_batch_planes.c's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/norm.h"
#include "kernels/nn/norm_batch_act.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* more channels than one block walk covers (kernels/nn/norm_batch_rows.h) */
enum { N = 3, C = 37, S = 37, T = N * C * S };

static float frandf(void) { return (float)frand() * 3.0f + 0.5f; }

static int same(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void test_forward_and_backward(int with_residual) {
  static float x[T], r[T], g[T], y[T], ref[T], w[C], b[C], rm[C], rv[C];
  static float smean[C], sinv[C], rm2[C], rv2[C], rsm[C], rsi[C], rrm[C], rrv[C];
  static float dx[T], dw[C], db[C], masked[T], keep[T], dx2[T], rdx[T], rdw[C], rdb[C];
  for (int i = 0; i < T; ++i) x[i] = frandf(), r[i] = frandf() - 1.0f, g[i] = frandf();
  for (int c = 0; c < C; ++c) w[c] = frandf(), b[c] = frandf() - 1.5f, rm[c] = frandf(),
                              rv[c] = frandf() + 1.0f;
  const int64_t s3[3] = {N, C, S}, s1[1] = {C};
  /* fused */
  memcpy(rrm, rm, sizeof rm), memcpy(rrv, rv, sizeof rv);
  loom_tensor f[11] = {dense(x, LOOM_FLOAT32, 3, s3), dense(w, LOOM_FLOAT32, 1, s1),
                       dense(b, LOOM_FLOAT32, 1, s1), dense(rm, LOOM_FLOAT32, 1, s1),
                       dense(rv, LOOM_FLOAT32, 1, s1),
                       with_residual ? dense(r, LOOM_FLOAT32, 3, s3) : none(),
                       dense(y, LOOM_FLOAT32, 3, s3), dense(smean, LOOM_FLOAT32, 1, s1),
                       dense(sinv, LOOM_FLOAT32, 1, s1), dense(rm2, LOOM_FLOAT32, 1, s1),
                       dense(rv2, LOOM_FLOAT32, 1, s1)};
  loom_scalar fs[2] = {sf(0.1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_relu_forward, f, 11, fs, 2, C, 2) == LOOM_OK);
  /* the library's batch norm (running statistics moved in place), then add, ReLU */
  loom_tensor l[8] = {f[0], f[1], f[2], dense(rrm, LOOM_FLOAT32, 1, s1),
                      dense(rrv, LOOM_FLOAT32, 1, s1), dense(ref, LOOM_FLOAT32, 3, s3),
                      dense(rsm, LOOM_FLOAT32, 1, s1), dense(rsi, LOOM_FLOAT32, 1, s1)};
  loom_scalar ls[3] = {si(1), sf(0.1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_forward, l, 8, ls, 3, C, 3) == LOOM_OK);
  for (int i = 0; i < T; ++i) {
    float v = with_residual ? ref[i] + r[i] : ref[i];
    ref[i] = v <= 0.0f ? 0.0f : v;
  }
  CHECK(same(y, ref, T));
  CHECK(same(smean, rsm, C) && same(sinv, rsi, C) && same(rm2, rrm, C) && same(rv2, rrv, C));
  /* backward, with and without the masked gradient kept */
  loom_tensor bt[10] = {dense(g, LOOM_FLOAT32, 3, s3), f[6], f[0], f[1], f[7], f[8],
                        dense(dx, LOOM_FLOAT32, 3, s3), dense(dw, LOOM_FLOAT32, 1, s1),
                        dense(db, LOOM_FLOAT32, 1, s1), none()};
  CHECK(run_chunks(loom_batch_norm_relu_backward, bt, 10, NULL, 0, C, 4) == LOOM_OK);
  for (int i = 0; i < T; ++i) masked[i] = y[i] <= 0.0f ? 0.0f : g[i];
  loom_tensor lb[10] = {dense(masked, LOOM_FLOAT32, 3, s3), f[0], f[1], none(), none(),
                        f[7], f[8], dense(rdx, LOOM_FLOAT32, 3, s3),
                        dense(rdw, LOOM_FLOAT32, 1, s1), dense(rdb, LOOM_FLOAT32, 1, s1)};
  loom_scalar bs[2] = {si(1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_backward, lb, 10, bs, 2, C, 1) == LOOM_OK);
  CHECK(same(dx, rdx, T) && same(dw, rdw, C) && same(db, rdb, C));
  bt[6] = dense(dx2, LOOM_FLOAT32, 3, s3);
  bt[9] = dense(keep, LOOM_FLOAT32, 3, s3);
  CHECK(run_chunks(loom_batch_norm_relu_backward, bt, 10, NULL, 0, C, C) == LOOM_OK);
  CHECK(same(keep, masked, T) && same(dx2, rdx, T));
  /* a wrong-sized operand is refused, not read */
  loom_tensor bad[11];
  memcpy(bad, f, sizeof bad);
  const int64_t s_bad[1] = {C - 1};
  bad[1] = dense(w, LOOM_FLOAT32, 1, s_bad);
  CHECK(run_chunks(loom_batch_norm_relu_forward, bad, 11, fs, 2, C, C) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(run_chunks(loom_batch_norm_relu_forward, f, 5, fs, 2, C, C) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(7);
  test_forward_and_backward(0);
  test_forward_and_backward(1);
  TEST_MAIN_END();
}
