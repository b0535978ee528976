/* Channels-last batch norm (kernels/nn/norm_batch_nhwc.c) against the
 * general batch norm ("norm.batch_forward" / "norm.batch_backward") reading
 * the same memory as a strided [N, C, S] view: training and eval, float32
 * and bfloat16, chunks of rows that do not divide evenly, two channel
 * blocks; the fused ReLU / residual / mask bit for bit against the unfused
 * steps; the AVX-512 and baseline loops bit for bit (block widths odd and
 * multiples of 8); bad operands refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/base/dtype.h"
#include "kernels/nn/norm.h"
#include "kernels/nn/norm_batch_nhwc.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { N = 3, C = 67, S = 29, R = N * S, T = R * C, K = 4 };

static const int64_t s2[2] = {R, C}, s1[1] = {C}, sp[3] = {K, 2, C}, sca[2] = {3, C},
                     scd[2] = {4, C}, s3[3] = {N, C, S}, st3[3] = {S * C, 1, C};

static float frandf(void) { return (float)frand() * 3.0f + 0.5f; }

static int close_to(const float *a, const float *b, int64_t n, double tol) {
  for (int64_t i = 0; i < n; ++i)
    if (!(fabs((double)a[i] - b[i]) <= tol * (1.0 + fabs((double)b[i])))) {
      fprintf(stderr, "element %lld: %g vs %g\n", (long long)i, a[i], b[i]);
      return 0;
    }
  return 1;
}

static int same(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void test_against_the_general_kernels(int training) {
  static float x[T], g[T], y[T], ref[T], dx[T], rdx[T];
  static float w[C], b[C], rm[C], rv[C], rrm[C], rrv[C], sm[C], sinv[C], rsm[C], rsinv[C];
  static float dw[C], db[C], rdw[C], rdb[C], coef[4 * C];
  static double part[K * 2 * C];
  for (int i = 0; i < T; ++i) x[i] = frandf(), g[i] = frandf() - 1.0f;
  for (int c = 0; c < C; ++c)
    w[c] = frandf(), b[c] = frandf(), rm[c] = rrm[c] = frandf(), rv[c] = rrv[c] = fabsf(frandf()) + 0.5f;
  /* channels-last */
  loom_tensor x2 = dense(x, LOOM_FLOAT32, 2, s2), p = dense(part, LOOM_FLOAT64, 3, sp);
  loom_tensor ts[2] = {x2, p};
  if (training) CHECK(run_chunks(loom_bnh_stats, ts, 2, NULL, 0, K, 3) == LOOM_OK);
  loom_tensor tf[8] = {training ? p : none(), dense(w, LOOM_FLOAT32, 1, s1),
                       dense(b, LOOM_FLOAT32, 1, s1), dense(rm, LOOM_FLOAT32, 1, s1),
                       dense(rv, LOOM_FLOAT32, 1, s1), dense(sm, LOOM_FLOAT32, 1, s1),
                       dense(sinv, LOOM_FLOAT32, 1, s1), dense(coef, LOOM_FLOAT32, 2, sca)};
  loom_scalar sf4[4] = {si(training), sf(0.1), sf(1e-5), si(R)};
  CHECK(run_chunks(loom_bnh_finish, tf, 8, sf4, 4, C, 5) == LOOM_OK);
  loom_tensor ta[4] = {x2, tf[7], none(), dense(y, LOOM_FLOAT32, 2, s2)};
  loom_scalar relu0[1] = {si(0)};
  CHECK(run_chunks(loom_bnh_apply, ta, 4, relu0, 1, R, 7) == LOOM_OK);
  /* the general kernel over the same memory as [N, C, S] */
  loom_tensor l[8] = {tensor(x, LOOM_FLOAT32, 3, s3, st3), tf[1], tf[2],
                      dense(rrm, LOOM_FLOAT32, 1, s1), dense(rrv, LOOM_FLOAT32, 1, s1),
                      tensor(ref, LOOM_FLOAT32, 3, s3, st3), dense(rsm, LOOM_FLOAT32, 1, s1),
                      dense(rsinv, LOOM_FLOAT32, 1, s1)};
  loom_scalar ls[3] = {si(training), sf(0.1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_forward, l, 8, ls, 3, C, 4) == LOOM_OK);
  CHECK(close_to(y, ref, T, 1e-5));
  CHECK(close_to(rm, rrm, C, 1e-6) && close_to(rv, rrv, C, 1e-6));
  if (training) CHECK(close_to(sm, rsm, C, 1e-6) && close_to(sinv, rsinv, C, 1e-6));
  /* backward */
  const float *mean = training ? sm : rm;
  loom_tensor tg[6] = {dense(g, LOOM_FLOAT32, 2, s2), x2, dense((void *)mean, LOOM_FLOAT32, 1, s1),
                       p, none(), none()};
  CHECK(run_chunks(loom_bnh_grad_sums, tg, 6, NULL, 0, K, 1) == LOOM_OK);
  loom_tensor tgf[9] = {p, tf[1], tf[3], tf[4], tf[5], tf[6], dense(dw, LOOM_FLOAT32, 1, s1),
                        dense(db, LOOM_FLOAT32, 1, s1), dense(coef, LOOM_FLOAT32, 2, scd)};
  loom_scalar sg4[4] = {si(training), sf(1e-5), si(R), si(C)};
  CHECK(run_chunks(loom_bnh_grad_finish, tgf, 9, sg4, 4, C, C) == LOOM_OK);
  loom_tensor td[4] = {tg[0], x2, tgf[8], dense(dx, LOOM_FLOAT32, 2, s2)};
  CHECK(run_chunks(loom_bnh_dx, td, 4, NULL, 0, R, 10) == LOOM_OK);
  loom_tensor lb[10] = {tensor(g, LOOM_FLOAT32, 3, s3, st3), l[0], tf[1], tf[3], tf[4],
                        tf[5], tf[6], tensor(rdx, LOOM_FLOAT32, 3, s3, st3),
                        dense(rdw, LOOM_FLOAT32, 1, s1), dense(rdb, LOOM_FLOAT32, 1, s1)};
  loom_scalar bs[2] = {si(training), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_backward, lb, 10, bs, 2, C, 2) == LOOM_OK);
  CHECK(close_to(dx, rdx, T, 1e-4) && close_to(dw, rdw, C, 1e-4) && close_to(db, rdb, C, 1e-4));
  /* bad operands are refused, not read */
  const int64_t bad_sp[3] = {K, 2, C - 1};
  ts[1] = dense(part, LOOM_FLOAT64, 3, bad_sp);
  CHECK(run_chunks(loom_bnh_stats, ts, 2, NULL, 0, K, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(run_chunks(loom_bnh_apply, ta, 3, relu0, 1, R, R) == LOOM_ERROR_INVALID_ARGUMENT);
  td[2] = tf[7];  /* [3, C] coefficients where [4, C] are needed */
  CHECK(run_chunks(loom_bnh_dx, td, 4, NULL, 0, R, R) == LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_bfloat16(void) {
  static uint16_t x[T], y[T], ref[T];
  static float w[C], b[C], rm[C], rv[C], rrm[C], rrv[C];
  static uint16_t sm[C], sinv[C], rsm[C], rsinv[C];
  static double part[K * 2 * C];
  static float yf[T], reff[T];
  for (int i = 0; i < T; ++i) x[i] = loom_f32_to_bf16(frandf());
  for (int c = 0; c < C; ++c)
    w[c] = frandf(), b[c] = frandf(), rm[c] = rrm[c] = frandf(), rv[c] = rrv[c] = fabsf(frandf()) + 0.5f;
  loom_tensor x2 = dense(x, LOOM_BFLOAT16, 2, s2), p = dense(part, LOOM_FLOAT64, 3, sp);
  loom_tensor ts[2] = {x2, p};
  CHECK(run_chunks(loom_bnh_stats, ts, 2, NULL, 0, K, 1) == LOOM_OK);
  static double coefd[3 * C];
  loom_tensor tf[8] = {p, dense(w, LOOM_FLOAT32, 1, s1), dense(b, LOOM_FLOAT32, 1, s1),
                       dense(rm, LOOM_FLOAT32, 1, s1), dense(rv, LOOM_FLOAT32, 1, s1),
                       dense(sm, LOOM_BFLOAT16, 1, s1), dense(sinv, LOOM_BFLOAT16, 1, s1),
                       dense(coefd, LOOM_FLOAT64, 2, sca)};
  loom_scalar sf4[4] = {si(1), sf(0.1), sf(1e-5), si(R)};
  CHECK(run_chunks(loom_bnh_finish, tf, 8, sf4, 4, C, C) == LOOM_OK);
  loom_tensor ta[4] = {x2, tf[7], none(), dense(y, LOOM_BFLOAT16, 2, s2)};
  loom_scalar relu0[1] = {si(0)};
  CHECK(run_chunks(loom_bnh_apply, ta, 4, relu0, 1, R, 9) == LOOM_OK);
  loom_tensor l[8] = {tensor(x, LOOM_BFLOAT16, 3, s3, st3), tf[1], tf[2],
                      dense(rrm, LOOM_FLOAT32, 1, s1), dense(rrv, LOOM_FLOAT32, 1, s1),
                      tensor(ref, LOOM_BFLOAT16, 3, s3, st3), dense(rsm, LOOM_BFLOAT16, 1, s1),
                      dense(rsinv, LOOM_BFLOAT16, 1, s1)};
  loom_scalar ls[3] = {si(1), sf(0.1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_forward, l, 8, ls, 3, C, 1) == LOOM_OK);
  for (int i = 0; i < T; ++i) yf[i] = loom_bf16_to_f32(y[i]), reff[i] = loom_bf16_to_f32(ref[i]);
  CHECK(close_to(yf, reff, T, 2e-2));
  CHECK(close_to(rm, rrm, C, 1e-2) && close_to(rv, rrv, C, 1e-2));
}

static void test_fused_steps(void) {
  static float x[T], r[T], g[T], y[T], ref[T], gm[T], rgm[T], dx[T], rdx[T];
  static float w[C], b[C], sm[C], sinv[C], coef[3 * C], k[4 * C], rk[4 * C];
  static double part[K * 2 * C], rpart[K * 2 * C];
  for (int i = 0; i < T; ++i) x[i] = frandf(), r[i] = frandf() - 1.5f, g[i] = frandf();
  for (int c = 0; c < C; ++c) w[c] = frandf(), b[c] = frandf() - 2.0f;
  loom_tensor x2 = dense(x, LOOM_FLOAT32, 2, s2), p = dense(part, LOOM_FLOAT64, 3, sp);
  loom_tensor ts[2] = {x2, p};
  CHECK(run_chunks(loom_bnh_stats, ts, 2, NULL, 0, K, 2) == LOOM_OK);
  loom_tensor tf[8] = {p, dense(w, LOOM_FLOAT32, 1, s1), dense(b, LOOM_FLOAT32, 1, s1), none(),
                       none(), dense(sm, LOOM_FLOAT32, 1, s1), dense(sinv, LOOM_FLOAT32, 1, s1),
                       dense(coef, LOOM_FLOAT32, 2, sca)};
  loom_scalar sf4[4] = {si(1), sf(0.1), sf(1e-5), si(R)};
  CHECK(run_chunks(loom_bnh_finish, tf, 8, sf4, 4, C, C) == LOOM_OK);
  loom_tensor ta[4] = {x2, tf[7], dense(r, LOOM_FLOAT32, 2, s2), dense(y, LOOM_FLOAT32, 2, s2)};
  loom_scalar relu1[1] = {si(1)}, relu0[1] = {si(0)};
  CHECK(run_chunks(loom_bnh_apply, ta, 4, relu1, 1, R, 11) == LOOM_OK);
  ta[2] = none(), ta[3] = dense(ref, LOOM_FLOAT32, 2, s2);
  CHECK(run_chunks(loom_bnh_apply, ta, 4, relu0, 1, R, R) == LOOM_OK);
  for (int i = 0; i < T; ++i) {
    const float v = ref[i] + r[i];
    ref[i] = v <= 0.0f ? 0.0f : v;
  }
  CHECK(same(y, ref, T));
  /* backward: masked while summed, then dx in place over the masked gradient */
  loom_tensor tg[6] = {dense(g, LOOM_FLOAT32, 2, s2), x2, tf[5], p, dense(y, LOOM_FLOAT32, 2, s2),
                       dense(gm, LOOM_FLOAT32, 2, s2)};
  CHECK(run_chunks(loom_bnh_grad_sums, tg, 6, NULL, 0, K, 3) == LOOM_OK);
  for (int i = 0; i < T; ++i) rgm[i] = y[i] <= 0.0f ? 0.0f : g[i];
  CHECK(same(gm, rgm, T));
  loom_tensor rg[6] = {dense(rgm, LOOM_FLOAT32, 2, s2), x2, tf[5],
                       dense(rpart, LOOM_FLOAT64, 3, sp), none(), none()};
  CHECK(run_chunks(loom_bnh_grad_sums, rg, 6, NULL, 0, K, 1) == LOOM_OK);
  CHECK(memcmp(part, rpart, sizeof part) == 0);
  loom_tensor tgf[9] = {p, tf[1], none(), none(), tf[5], tf[6], none(), none(),
                        dense(k, LOOM_FLOAT32, 2, scd)};
  loom_scalar sg4[4] = {si(1), sf(1e-5), si(R), si(C)};
  CHECK(run_chunks(loom_bnh_grad_finish, tgf, 9, sg4, 4, C, 7) == LOOM_OK);
  tgf[8] = dense(rk, LOOM_FLOAT32, 2, scd);
  CHECK(run_chunks(loom_bnh_grad_finish, tgf, 9, sg4, 4, C, C) == LOOM_OK);
  CHECK(same(k, rk, 4 * C));
  memcpy(dx, gm, sizeof dx);
  loom_tensor td[4] = {dense(dx, LOOM_FLOAT32, 2, s2), x2, tgf[8], dense(dx, LOOM_FLOAT32, 2, s2)};
  CHECK(run_chunks(loom_bnh_dx, td, 4, NULL, 0, R, 13) == LOOM_OK);
  td[0] = rg[0], td[3] = dense(rdx, LOOM_FLOAT32, 2, s2);
  CHECK(run_chunks(loom_bnh_dx, td, 4, NULL, 0, R, R) == LOOM_OK);
  CHECK(same(dx, rdx, T));
}

static void test_loops_agree(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  static float x[T], g[T], y[T], m[C], a[C], b[C], o1[T], o2[T], m1[T], m2[T];
  static double s1a[C], s2a[C], s1b[C], s2b[C], mu[C];
  for (int i = 0; i < T; ++i) x[i] = frandf(), g[i] = frandf(), y[i] = (float)frand();
  for (int c = 0; c < C; ++c) m[c] = frandf(), a[c] = frandf(), b[c] = frandf(), mu[c] = frand();
  y[C + 3] = 0.0f, y[C + 4] = -0.0f, y[C + 5] = NAN, g[C + 6] = NAN, g[C + 7] = -INFINITY;
  y[C + 7] = -1.0f;
  /* block widths: odd ones, and multiples of 8 (the AVX-512 register sums) */
  const int64_t widths[] = {1, 8, 22, 40, 43, LOOM_BNH_BLOCK};
  for (size_t i = 0; i < sizeof widths / sizeof widths[0]; ++i) {
    const int64_t nb = widths[i];
    loom_bnh_stats_f32(x, C, 3, R - 2, nb, s1a, s2a);
    loom_bnh_stats_f32_avx512(x, C, 3, R - 2, nb, s1b, s2b);
    CHECK(memcmp(s1a, s1b, (size_t)nb * 8) == 0 && memcmp(s2a, s2b, (size_t)nb * 8) == 0);
    for (int mode = 0; mode < 3; ++mode) { /* plain, behind a ReLU, and the mask written */
      const float *yy = mode ? y : NULL;
      memset(m1, 0, sizeof m1), memset(m2, 0, sizeof m2);
      loom_bnh_grad_sums_f32(g, C, x, C, yy, C, mode == 2 ? m1 : NULL, C, 1, R, nb, mu, s1a, s2a);
      loom_bnh_grad_sums_f32_avx512(g, C, x, C, yy, C, mode == 2 ? m2 : NULL, C, 1, R, nb, mu,
                                    s1b, s2b);
      CHECK_MSG(memcmp(s1a, s1b, (size_t)nb * 8) == 0 && memcmp(s2a, s2b, (size_t)nb * 8) == 0,
                "gradient sums differ between builds: width %ld, mode %d\n", (long)nb, mode);
      CHECK(same(m1, m2, T));
    }
  }
  loom_bnh_apply_f32(o1, C, x, C, g, C, 0, R, C, m, a, b, 1);
  loom_bnh_apply_f32_avx512(o2, C, x, C, g, C, 0, R, C, m, a, b, 1);
  CHECK(same(o1, o2, T));
  loom_bnh_dx_f32(o1, C, g, C, x, C, 0, R, C, m, a, b, a);
  loom_bnh_dx_f32_avx512(o2, C, g, C, x, C, 0, R, C, m, a, b, a);
  CHECK(same(o1, o2, T));
}

int main(void) {
  srand(11);
  test_against_the_general_kernels(1);
  test_against_the_general_kernels(0);
  test_bfloat16();
  test_fused_steps();
  test_loops_agree();
  TEST_MAIN_END();
}
