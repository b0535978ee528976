/* Normalisation kernels (layer and RMS norm, batch norm, group norm)
 * against fp64 references and central differences; their AVX-512 and
 * baseline builds give the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/nn/nn_rows.h"
#include "kernels/nn/norm.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* ---- layer norm / rms norm ------------------------------------------------ */

static void test_layer_norm(void) {
  enum { M = 6, N = 13 };
  static double x[M * N], w[N], b[N], y[M * N], mean[M], rstd[M], dy[M * N];
  static double dx[M * N], dw[N], db[N], num[M * N], numw[N];
  fill(x, M * N); fill(w, N); fill(b, N); fill(dy, M * N);
  const int64_t s2[2] = {M, N}, s1[1] = {N}, sm[1] = {M};
  for (int rms = 0; rms <= 1; ++rms) {
    loom_tensor f[6] = {dense(x, LOOM_FLOAT64, 2, s2), dense(w, LOOM_FLOAT64, 1, s1),
                        rms ? none() : dense(b, LOOM_FLOAT64, 1, s1),
                        dense(y, LOOM_FLOAT64, 2, s2),
                        rms ? none() : dense(mean, LOOM_FLOAT64, 1, sm),
                        dense(rstd, LOOM_FLOAT64, 1, sm)};
    loom_scalar fs[3] = {si(N), sf(1e-5), si(rms)};
    CHECK(run_chunks(loom_layer_norm_forward, f, 6, fs, 3, M, 4) == 0);
    /* reference for row 2 */
    double mu = 0, var = 0;
    for (int j = 0; j < N; ++j) mu += x[2 * N + j];
    mu = rms ? 0 : mu / N;
    for (int j = 0; j < N; ++j) var += (x[2 * N + j] - mu) * (x[2 * N + j] - mu);
    var /= N;
    double ref = (x[2 * N + 5] - mu) / sqrt(var + 1e-5) * w[5] + (rms ? 0 : b[5]);
    CHECK(fabs(y[2 * N + 5] - ref) < 1e-12);

    loom_tensor bi[6] = {dense(dy, LOOM_FLOAT64, 2, s2), f[0], f[4], f[5], f[1],
                         dense(dx, LOOM_FLOAT64, 2, s2)};
    loom_scalar bs[2] = {si(N), si(rms)};
    CHECK(run_chunks(loom_layer_norm_backward_input, bi, 6, bs, 2, M, 5) == 0);
    /* the rows in chunks of 4 (dx again, and each chunk's sums), then the
     * chunks combined */
    enum { ROWS = 4, K = (M + ROWS - 1) / ROWS };
    static double dx2[M * N], part[K * 2 * N];
    const int64_t sp[3] = {K, 2, N};
    loom_tensor br[7] = {bi[0], f[0], f[4], f[5], f[1], dense(dx2, LOOM_FLOAT64, 2, s2),
                         dense(part, LOOM_FLOAT64, 3, sp)};
    loom_scalar rs[4] = {si(M), si(N), si(rms), si(ROWS)};
    CHECK(run_chunks(loom_layer_norm_backward_rows, br, 7, rs, 4, K, 1) == 0);
    CHECK(memcmp(dx, dx2, sizeof dx) == 0);
    loom_tensor bp[3] = {br[6], dense(dw, LOOM_FLOAT64, 1, s1),
                         rms ? none() : dense(db, LOOM_FLOAT64, 1, s1)};
    loom_scalar ps[2] = {si(K), si(N)};
    CHECK(run_chunks(loom_layer_norm_backward_combine, bp, 3, ps, 2, N, 3) == 0);
    const double h = 1e-6;
    for (int i = 0; i < M * N + N; ++i) {
      double *p = i < M * N ? &x[i] : &w[i - M * N];
      double keep = *p, fp = 0, fm = 0;
      *p = keep + h;
      run_chunks(loom_layer_norm_forward, f, 6, fs, 3, M, M);
      for (int j = 0; j < M * N; ++j) fp += y[j] * dy[j];
      *p = keep - h;
      run_chunks(loom_layer_norm_forward, f, 6, fs, 3, M, M);
      for (int j = 0; j < M * N; ++j) fm += y[j] * dy[j];
      *p = keep;
      *(i < M * N ? &num[i] : &numw[i - M * N]) = (fp - fm) / (2 * h);
    }
    CHECK(test_max_rel(dx, num, M * N) < 1e-6);
    CHECK(test_max_rel(dw, numw, N) < 1e-6);
    if (!rms) {
      double s = 0;
      for (int r = 0; r < M; ++r) s += dy[r * N + 4];
      CHECK(fabs(db[4] - s) < 1e-12);
    }
  }
}

/* The one-pass backward on float32 and bf16 rows with float32 chunk sums:
 * its dx is the row kernel's, bit for bit, with or without the sums; the
 * sums, without dx too, are the same bits; the combined gradients match
 * double sums over the rows. */
static void test_layer_norm_rows_f32(void) {
  enum { M = 37, N = 45, ROWS = 8, K = (M + ROWS - 1) / ROWS };
  static float x[M * N], dy[M * N], w[N], b[N], y[M * N], mean[M], rstd[M];
  static float dx[M * N], dx2[M * N], part[K * 2 * N], part2[K * 2 * N], dw[N], db[N];
  static uint16_t xb[M * N], dyb[M * N], yb[M * N], dxb[M * N], dxb2[M * N];
  for (int i = 0; i < M * N; ++i) {
    x[i] = (float)(frand() * 3 + 0.5);
    dy[i] = (float)frand();
    xb[i] = loom_f32_to_bf16(x[i]);
    dyb[i] = loom_f32_to_bf16(dy[i]);
  }
  for (int j = 0; j < N; ++j) w[j] = (float)frand(), b[j] = (float)frand();
  const int64_t s2[2] = {M, N}, s1[1] = {N}, sm[1] = {M}, sp[3] = {K, 2, N};
  for (int bf = 0; bf <= 1; ++bf) {
    const int32_t dt = bf ? LOOM_BFLOAT16 : LOOM_FLOAT32;
    void *xs = bf ? (void *)xb : (void *)x, *dys = bf ? (void *)dyb : (void *)dy;
    void *ys = bf ? (void *)yb : (void *)y, *dxs = bf ? (void *)dxb : (void *)dx;
    void *dxs2 = bf ? (void *)dxb2 : (void *)dx2;
    const size_t dx_bytes = bf ? sizeof dxb : sizeof dx;
    loom_tensor f[6] = {dense(xs, dt, 2, s2), dense(w, LOOM_FLOAT32, 1, s1),
                        dense(b, LOOM_FLOAT32, 1, s1), dense(ys, dt, 2, s2),
                        dense(mean, LOOM_FLOAT32, 1, sm), dense(rstd, LOOM_FLOAT32, 1, sm)};
    loom_scalar fs[3] = {si(N), sf(1e-5), si(0)};
    CHECK(run_chunks(loom_layer_norm_forward, f, 6, fs, 3, M, 5) == 0);
    loom_tensor bi[6] = {dense(dys, dt, 2, s2), f[0], f[4], f[5], f[1], dense(dxs, dt, 2, s2)};
    loom_scalar bs[2] = {si(N), si(0)};
    CHECK(run_chunks(loom_layer_norm_backward_input, bi, 6, bs, 2, M, 7) == 0);
    loom_tensor br[7] = {bi[0], f[0], f[4], f[5], f[1], dense(dxs2, dt, 2, s2),
                         dense(part, LOOM_FLOAT32, 3, sp)};
    loom_scalar rs[4] = {si(M), si(N), si(0), si(ROWS)};
    CHECK(run_chunks(loom_layer_norm_backward_rows, br, 7, rs, 4, K, 2) == 0);
    CHECK(memcmp(dxs, dxs2, dx_bytes) == 0);
    br[5] = none();
    br[6] = dense(part2, LOOM_FLOAT32, 3, sp);
    CHECK(run_chunks(loom_layer_norm_backward_rows, br, 7, rs, 4, K, 3) == 0);
    CHECK(memcmp(part, part2, sizeof part) == 0);
    loom_tensor bc[3] = {br[6], dense(dw, LOOM_FLOAT32, 1, s1), dense(db, LOOM_FLOAT32, 1, s1)};
    loom_scalar cs[2] = {si(K), si(N)};
    CHECK(run_chunks(loom_layer_norm_backward_combine, bc, 3, cs, 2, N, 16) == 0);
    double err = 0;
    for (int j = 0; j < N; ++j) {
      double sw = 0, sb = 0;
      for (int r = 0; r < M; ++r) {
        const double d = bf ? loom_bf16_to_f32(dyb[r * N + j]) : dy[r * N + j];
        const double xv = bf ? loom_bf16_to_f32(xb[r * N + j]) : x[r * N + j];
        sb += d;
        sw += d * (xv - mean[r]) * rstd[r];
      }
      err = fmax(err, fmax(fabs(dw[j] - sw), fabs(db[j] - sb)));
    }
    CHECK(err < 2e-5);
  }
}

/* ---- batch norm ------------------------------------------------------------ */

static void test_batch_norm(void) {
  enum { NB = 3, C = 4, S = 5, T = NB * C * S };
  static double x[T], w[C], b[C], rm[C], rv[C], y[T], sm[C], sinv[C], dy[T];
  static double dx[T], dw[C], db[C], num[T];
  fill(x, T); fill(w, C); fill(b, C); fill(dy, T);
  for (int c = 0; c < C; ++c) { rm[c] = 0.5; rv[c] = 2.0; }
  const int64_t s3[3] = {NB, C, S}, s1[1] = {C};
  loom_tensor f[8] = {dense(x, LOOM_FLOAT64, 3, s3), dense(w, LOOM_FLOAT64, 1, s1),
                      dense(b, LOOM_FLOAT64, 1, s1), dense(rm, LOOM_FLOAT64, 1, s1),
                      dense(rv, LOOM_FLOAT64, 1, s1), dense(y, LOOM_FLOAT64, 3, s3),
                      dense(sm, LOOM_FLOAT64, 1, s1), dense(sinv, LOOM_FLOAT64, 1, s1)};
  loom_scalar fs[3] = {si(1), sf(0.1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_forward, f, 8, fs, 3, C, 3) == 0);
  double mu = 0, var = 0;
  for (int n = 0; n < NB; ++n)
    for (int s = 0; s < S; ++s) mu += x[(n * C + 2) * S + s];
  mu /= NB * S;
  for (int n = 0; n < NB; ++n)
    for (int s = 0; s < S; ++s) var += pow(x[(n * C + 2) * S + s] - mu, 2);
  CHECK(fabs(sm[2] - mu) < 1e-12);
  CHECK(fabs(sinv[2] - 1 / sqrt(var / (NB * S) + 1e-5)) < 1e-9);
  CHECK(fabs(rm[2] - (0.9 * 0.5 + 0.1 * mu)) < 1e-12);
  CHECK(fabs(rv[2] - (0.9 * 2.0 + 0.1 * var / (NB * S - 1))) < 1e-12);

  loom_tensor bt[10] = {dense(dy, LOOM_FLOAT64, 3, s3), f[0], f[1], f[3], f[4], f[6], f[7],
                        dense(dx, LOOM_FLOAT64, 3, s3), dense(dw, LOOM_FLOAT64, 1, s1),
                        dense(db, LOOM_FLOAT64, 1, s1)};
  loom_scalar bs[2] = {si(1), sf(1e-5)};
  CHECK(run_chunks(loom_batch_norm_backward, bt, 10, bs, 2, C, 1) == 0);
  /* numeric gradient in training mode, without running stats */
  loom_tensor g[8] = {f[0], f[1], f[2], none(), none(), f[5], none(), none()};
  const double h = 1e-6;
  for (int i = 0; i < T; ++i) {
    double keep = x[i], fp = 0, fm = 0;
    x[i] = keep + h;
    run_chunks(loom_batch_norm_forward, g, 8, fs, 3, C, C);
    for (int j = 0; j < T; ++j) fp += y[j] * dy[j];
    x[i] = keep - h;
    run_chunks(loom_batch_norm_forward, g, 8, fs, 3, C, C);
    for (int j = 0; j < T; ++j) fm += y[j] * dy[j];
    x[i] = keep;
    num[i] = (fp - fm) / (2 * h);
  }
  CHECK(test_max_rel(dx, num, T) < 1e-6);

  /* eval mode: y = (x - rm) / sqrt(rv + eps) * w + b */
  loom_scalar es[3] = {si(0), sf(0.1), sf(1e-5)};
  loom_tensor e[8] = {f[0], f[1], f[2], f[3], f[4], f[5], none(), none()};
  CHECK(run_chunks(loom_batch_norm_forward, e, 8, es, 3, C, 2) == 0);
  int i = (1 * C + 3) * S + 2;
  CHECK(fabs(y[i] - ((x[i] - rm[3]) / sqrt(rv[3] + 1e-5) * w[3] + b[3])) < 1e-12);
}

/* ---- group norm ------------------------------------------------------------ */

static void test_group_norm(void) {
  enum { NB = 2, C = 6, HW = 5, G = 3, T = NB * C * HW };
  static double x[T], w[C], b[C], y[T], mean[NB * G], rstd[NB * G], dy[T];
  static double dx[T], dw[C], db[C], num[T + C], sums[2][NB * C], sums_only[2][NB * C];
  fill(x, T); fill(w, C); fill(b, C); fill(dy, T);
  const int64_t s3[3] = {NB, C, HW}, s1[1] = {C}, sg[2] = {NB, G}, sc[2] = {NB, C};
  loom_tensor f[6] = {dense(x, LOOM_FLOAT64, 3, s3), dense(w, LOOM_FLOAT64, 1, s1),
                      dense(b, LOOM_FLOAT64, 1, s1), dense(y, LOOM_FLOAT64, 3, s3),
                      dense(mean, LOOM_FLOAT64, 2, sg), dense(rstd, LOOM_FLOAT64, 2, sg)};
  loom_scalar fs[5] = {si(NB), si(C), si(HW), si(G), sf(1e-5)};
  CHECK(run_chunks(loom_group_norm_forward, f, 6, fs, 5, NB * G, 4) == 0);
  loom_tensor bi[8] = {dense(dy, LOOM_FLOAT64, 3, s3), f[0], f[4], f[5], f[1],
                       dense(dx, LOOM_FLOAT64, 3, s3), dense(sums[0], LOOM_FLOAT64, 2, sc),
                       dense(sums[1], LOOM_FLOAT64, 2, sc)};
  CHECK(run_chunks(loom_group_norm_backward_input, bi, 8, fs, 4, NB * G, 5) == 0);
  /* without dx, the same sums */
  loom_tensor bs[8] = {bi[0], bi[1], bi[2], bi[3], bi[4], none(),
                       dense(sums_only[0], LOOM_FLOAT64, 2, sc),
                       dense(sums_only[1], LOOM_FLOAT64, 2, sc)};
  CHECK(run_chunks(loom_group_norm_backward_input, bs, 8, fs, 4, NB * G, 2) == 0);
  CHECK(memcmp(sums, sums_only, sizeof sums) == 0);
  loom_tensor bp[4] = {bi[6], bi[7], dense(dw, LOOM_FLOAT64, 1, s1), dense(db, LOOM_FLOAT64, 1, s1)};
  loom_scalar ps[2] = {si(NB), si(C)};
  CHECK(run_chunks(loom_group_norm_backward_params, bp, 4, ps, 2, C, 4) == 0);
  for (int c = 0; c < C; ++c) { /* db: dy summed over samples and positions */
    double want = 0.0;
    for (int n = 0; n < NB; ++n)
      for (int i = 0; i < HW; ++i) want += dy[(n * C + c) * HW + i];
    CHECK(fabs(db[c] - want) <= 1e-12 * NB * HW);
  }
  const double h = 1e-6;
  for (int i = 0; i < T + C; ++i) {
    double *p = i < T ? &x[i] : &w[i - T];
    double keep = *p, fp = 0, fm = 0;
    *p = keep + h;
    run_chunks(loom_group_norm_forward, f, 6, fs, 5, NB * G, 64);
    for (int j = 0; j < T; ++j) fp += y[j] * dy[j];
    *p = keep - h;
    run_chunks(loom_group_norm_forward, f, 6, fs, 5, NB * G, 64);
    for (int j = 0; j < T; ++j) fm += y[j] * dy[j];
    *p = keep;
    num[i] = (fp - fm) / (2 * h);
  }
  CHECK(test_max_rel(dx, num, T) < 1e-6);
  CHECK(test_max_rel(dw, num + T, C) < 1e-6);
}

/* The float32 group norm in both builds: the same bits forward and
 * backward (sums in lanes past a vector, a tail), and near the double
 * reference kernel's values. */
int loom_group_norm_forward_impl(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_forward_impl_avx512(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_backward_input_impl(const loom_kernel_args *, int64_t, int64_t);
int loom_group_norm_backward_input_impl_avx512(const loom_kernel_args *, int64_t, int64_t);

static void test_group_norm_isas_agree(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  enum { NB = 2, C = 6, HW = 37, G = 3, T = NB * C * HW };
  static float x[T], w[C], b[C], dy[T], y[2][T], mean[2][NB * G], rstd[2][NB * G];
  static float dx[2][T], dw[2][C], db[2][C];
  static double sums[2][2][NB * C];
  for (int i = 0; i < T; ++i) x[i] = (float)(frand() * 3.0 + 0.5), dy[i] = (float)frand();
  for (int i = 0; i < C; ++i) w[i] = (float)frand(), b[i] = (float)frand();
  const int64_t s3[3] = {NB, C, HW}, s1[1] = {C}, sg[2] = {NB, G}, sc[2] = {NB, C};
  loom_scalar fs[5] = {si(NB), si(C), si(HW), si(G), sf(1e-5)}, ps[2] = {si(NB), si(C)};
  loom_kernel_fn fwd[2] = {loom_group_norm_forward_impl, loom_group_norm_forward_impl_avx512};
  loom_kernel_fn bin[2] = {loom_group_norm_backward_input_impl,
                           loom_group_norm_backward_input_impl_avx512};
  for (int k = 0; k < 2; ++k) {
    loom_tensor f[6] = {dense(x, LOOM_FLOAT32, 3, s3), dense(w, LOOM_FLOAT32, 1, s1),
                        dense(b, LOOM_FLOAT32, 1, s1), dense(y[k], LOOM_FLOAT32, 3, s3),
                        dense(mean[k], LOOM_FLOAT32, 2, sg), dense(rstd[k], LOOM_FLOAT32, 2, sg)};
    CHECK(run_chunks(fwd[k], f, 6, fs, 5, NB * G, 2) == 0);
    loom_tensor bi[8] = {dense(dy, LOOM_FLOAT32, 3, s3), f[0], f[4], f[5], f[1],
                         dense(dx[k], LOOM_FLOAT32, 3, s3), dense(sums[k][0], LOOM_FLOAT64, 2, sc),
                         dense(sums[k][1], LOOM_FLOAT64, 2, sc)};
    CHECK(run_chunks(bin[k], bi, 8, fs, 4, NB * G, 3) == 0);
    loom_tensor bp[4] = {bi[6], bi[7], dense(dw[k], LOOM_FLOAT32, 1, s1),
                         dense(db[k], LOOM_FLOAT32, 1, s1)};
    CHECK(run_chunks(loom_group_norm_backward_params, bp, 4, ps, 2, C, 4) == 0);
  }
  CHECK(memcmp(sums[0], sums[1], sizeof sums[0]) == 0);
  CHECK(memcmp(y[0], y[1], sizeof y[0]) == 0 && memcmp(rstd[0], rstd[1], sizeof rstd[0]) == 0);
  CHECK(memcmp(dx[0], dx[1], sizeof dx[0]) == 0);
  CHECK(memcmp(dw[0], dw[1], sizeof dw[0]) == 0 && memcmp(db[0], db[1], sizeof db[0]) == 0);
  /* the statistics against a plain double computation */
  for (int r = 0; r < NB * G; ++r) {
    double m = 0.0, v = 0.0;
    const int len = C / G * HW;
    for (int i = 0; i < len; ++i) m += x[r * len + i];
    m /= len;
    for (int i = 0; i < len; ++i) v += (x[r * len + i] - m) * (x[r * len + i] - m);
    v /= len;
    CHECK(fabs(mean[0][r] - m) <= 1e-6 * fabs(m) + 1e-7);
    CHECK(fabs(rstd[0][r] - 1.0 / sqrt(v + 1e-5)) <= 1e-6 / sqrt(v + 1e-5));
  }
}

int main(void) {
  srand(7);
  test_layer_norm();
  test_layer_norm_rows_f32();
  test_batch_norm();
  test_group_norm();
  test_group_norm_isas_agree();
  TEST_MAIN_END();
}
