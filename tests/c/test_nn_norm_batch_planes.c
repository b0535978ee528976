/* Batch norm's plane loops (kernels/nn/norm_batch_rows.inc): a channel's
 * mean and squared deviations, and its gradient sums (the ReLU's mask
 * applied or not), against long-double references; the AVX-512 and
 * baseline builds give the same bits for every row length (whole vectors,
 * tails, tails alone), row count and row stride; the masked sums are the
 * unmasked sums of the masked gradient, bit for bit; and one pass keeps the
 * variance accurate where the mean is far from zero and the first value
 * (the pass's shift) is an outlier. Through the kernels: float32 batch norm
 * (rows of any length, one sample, padded row strides, values far from
 * zero against their spread) near the float64 kernel's values, and the same bits in chunks of any size;
 * the forward's and backward's walks over blocks of channels (more channels
 * than a block, chunks across block edges, padded rows, several statistics
 * blocks) give each channel's plane-loop bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/nn/norm.h"
#include "kernels/nn/norm_batch_rows.h"
#include "kernel_test_util.h"
#include "test_util.h"

typedef void (*stats_fn)(const float *, int64_t, int64_t, int64_t, double *, double *);
typedef void (*grad_fn)(const float *, int64_t, const float *, int64_t, const float *, int64_t,
                        float *, int64_t, int64_t, int64_t, double, double *, double *);

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The plane's exact-ish mean and squared deviations: long double, two passes. */
static void ref_stats(const float *x, int64_t ld, int64_t nb, int64_t ns, long double *mean,
                      long double *m2) {
  long double s = 0.0L, q = 0.0L;
  for (int64_t r = 0; r < nb; ++r)
    for (int64_t i = 0; i < ns; ++i) s += x[r * ld + i];
  *mean = s / (long double)(nb * ns);
  for (int64_t r = 0; r < nb; ++r)
    for (int64_t i = 0; i < ns; ++i) {
      const long double d = (long double)x[r * ld + i] - *mean;
      q += d * d;
    }
  *m2 = q;
}

enum { MAXR = 7, MAXS = 70, LD = 83, T = MAXR * LD };

static void test_builds_agree_and_match_the_reference(void) {
  static float x[T], g[T], y[T], gm[2][T], gref[T];
  for (int i = 0; i < T; ++i)
    x[i] = (float)(frand() * 3.0 + 2.0), g[i] = (float)frand(), y[i] = (float)frand();
  y[3] = 0.0f, y[4] = -0.0f, y[5] = NAN, y[LD + 17] = NAN;
  const int have512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const stats_fn stats[2] = {loom_bn_plane_stats, loom_bn_plane_stats_avx512};
  const grad_fn grad[2] = {loom_bn_plane_grad_sums, loom_bn_plane_grad_sums_avx512};
  const int64_t rows[] = {1, 2, 7}, lens[] = {1, 5, 15, 16, 17, 31, 32, 64, 70};
  for (size_t a = 0; a < sizeof rows / sizeof rows[0]; ++a)
    for (size_t b = 0; b < sizeof lens / sizeof lens[0]; ++b)
      for (int64_t ld = lens[b]; ld <= LD; ld += LD - lens[b]) {
        const int64_t nb = rows[a], ns = lens[b], n = nb * ns;
        double mean[2], m2[2], sg[2], sgx[2], mg[2], mgx[2];
        for (int k = 0; k < 1 + have512; ++k) {
          stats[k](x, ld, nb, ns, &mean[k], &m2[k]);
          grad[k](g, ld, x, ld, NULL, 0, NULL, 0, nb, ns, 0.37, &sg[k], &sgx[k]);
          memset(gm[k], 0x7f, sizeof gm[k]); /* the gaps between rows stay as they were */
          grad[k](g, ld, x, ld, y, ld, gm[k], ld, nb, ns, 0.37, &mg[k], &mgx[k]);
        }
        if (have512) {
          CHECK_MSG(same_bits(mean[0], mean[1]) && same_bits(m2[0], m2[1]),
                    "stats differ between builds at %ld x %ld\n", (long)nb, (long)ns);
          CHECK(same_bits(sg[0], sg[1]) && same_bits(sgx[0], sgx[1]));
          CHECK(same_bits(mg[0], mg[1]) && same_bits(mgx[0], mgx[1]));
          CHECK(memcmp(gm[0], gm[1], sizeof gm[0]) == 0);
        }
        long double rm, rq, rg = 0.0L, rgx = 0.0L;
        ref_stats(x, ld, nb, ns, &rm, &rq);
        CHECK_MSG(fabsl(mean[0] - rm) <= 1e-14L * fabsl(rm), "mean %.17g vs %.17Lg\n", mean[0],
                  rm);
        CHECK_MSG(fabsl(m2[0] - rq) <= 1e-12L * rq + 1e-12L, "m2 %.17g vs %.17Lg at %ld x %ld\n",
                  m2[0], rq, (long)nb, (long)ns);
        for (int64_t r = 0; r < nb; ++r)
          for (int64_t i = 0; i < ns; ++i) {
            const int64_t j = r * ld + i;
            rg += g[j], rgx += (long double)g[j] * ((long double)x[j] - 0.37L);
          }
        CHECK(fabsl(sg[0] - rg) <= 1e-12L * n && fabsl(sgx[0] - rgx) <= 1e-12L * n);
        /* masked: the written gradient, and the plain sums over it */
        for (int i = 0; i < T; ++i) gref[i] = 0.0f;
        for (int64_t r = 0; r < nb; ++r)
          for (int64_t i = 0; i < ns; ++i) {
            const int64_t j = r * ld + i;
            gref[j] = y[j] <= 0.0f ? 0.0f : g[j];
            CHECK(memcmp(&gm[0][j], &gref[j], sizeof(float)) == 0);
          }
        for (int64_t j = nb * ld; j < T; ++j) CHECK(gm[0][j] != gm[0][j] || gm[0][j] > 1e38f);
        double pg, pgx;
        loom_bn_plane_grad_sums(gref, ld, x, ld, NULL, 0, NULL, 0, nb, ns, 0.37, &pg, &pgx);
        CHECK(same_bits(pg, mg[0]) && same_bits(pgx, mgx[0]));
      }
}

/* A large plane whose mean is far from zero, with an outlier as its first
 * value: one pass about that value stays within float's rounding of the
 * two-pass long-double variance (and far inside it). */
static void test_variance_stays_accurate_far_from_zero(void) {
  enum { NB = 64, NS = 16411 };
  float *x = malloc(sizeof(float) * NB * NS);
  for (int first = 0; first < 2; ++first) {
    for (int64_t i = 0; i < NB * NS; ++i) x[i] = (float)(4096.0 + 0.01 * frand());
    if (first) x[0] = 4196.0f; /* ten thousand standard deviations out */
    long double rm, rq;
    ref_stats(x, NS, NB, NS, &rm, &rq);
    for (int k = 0; k < 2; ++k) {
      if (k && !(loom_cpu_features() & LOOM_FEATURE_AVX512F)) break;
      double mean, m2;
      (k ? loom_bn_plane_stats_avx512 : loom_bn_plane_stats)(x, NS, NB, NS, &mean, &m2);
      CHECK_MSG(fabsl(m2 - rq) <= 1e-9L * rq, "m2 %.17g vs %.17Lg (rel %Lg)\n", m2, rq,
                fabsl(m2 - rq) / rq);
      CHECK(fabsl(mean - rm) <= 1e-15L * rm);
    }
  }
  free(x);
}

/* Infinite and NaN values: the statistics a two-pass sum gives (an
 * infinite mean, a NaN variance), whatever value comes first. */
static void test_non_finite_values(void) {
  float x[40];
  for (int i = 0; i < 40; ++i) x[i] = (float)i;
  for (int k = 0; k < 2; ++k) {
    if (k && !(loom_cpu_features() & LOOM_FEATURE_AVX512F)) break;
    const stats_fn f = k ? loom_bn_plane_stats_avx512 : loom_bn_plane_stats;
    double mean, m2;
    x[0] = INFINITY;
    f(x, 20, 2, 20, &mean, &m2);
    CHECK(mean == INFINITY && isnan(m2));
    x[0] = 0.0f, x[25] = -INFINITY;
    f(x, 20, 2, 20, &mean, &m2);
    CHECK(mean == -INFINITY && isnan(m2));
    x[25] = NAN;
    f(x, 20, 2, 20, &mean, &m2);
    CHECK(isnan(mean) && isnan(m2));
    x[25] = 25.0f;
    f(x, 20, 2, 20, &mean, &m2); /* and finite again: 0..39 */
    CHECK(mean == 19.5 && fabs(m2 - 5330.0) < 1e-9);
  }
}

/* float32 "norm.batch_forward" / "norm.batch_backward" on the plane loops:
 * near the float64 kernel's results on the same values, the same bits
 * whatever the chunking, and the gaps of padded rows left alone. */
static void test_kernels_in_float32(void) {
  enum { MAXT = 3 * 5 * 40 };
  static float x[MAXT], g[MAXT], y[2][MAXT], dx[2][MAXT];
  static double xd[MAXT], gd[MAXT], yd[MAXT], dxd[MAXT];
  /* N, C, S, row stride, and an offset far from the values' spread */
  const int64_t cases[][5] = {{3, 5, 37, 37, 0}, {1, 4, 19, 19, 0}, {2, 3, 16, 40, 0},
                              {3, 2, 1, 1, 0},   {2, 5, 33, 35, 0}, {3, 5, 40, 40, 30000}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; ++t) {
    const int64_t N = cases[t][0], C = cases[t][1], S = cases[t][2], L = cases[t][3];
    const int64_t total = N * C * L;
    for (int64_t i = 0; i < total; ++i) {
      x[i] = (float)(frand() * 2.0 + 3.0 + (double)cases[t][4]), g[i] = (float)frand();
      xd[i] = x[i], gd[i] = g[i];
    }
    float w[5], b[5], rm[2][5], rv[2][5], sm[2][5], sv[2][5], dw[2][5], db[2][5];
    double wd[5], bd[5], rmd[5], rvd[5], smd[5], svd[5], dwd[5], dbd[5];
    for (int64_t c = 0; c < C; ++c) {
      w[c] = (float)frand(), b[c] = (float)frand();
      wd[c] = w[c], bd[c] = b[c], rmd[c] = 0.25, rvd[c] = 1.5;
    }
    const int64_t s3[3] = {N, C, S}, st3[3] = {C * L, L, 1}, s1[1] = {C};
    for (int k = 0; k < 2; ++k) { /* k = 0: one chunk; 1: one channel a chunk */
      for (int64_t c = 0; c < C; ++c) rm[k][c] = 0.25f, rv[k][c] = 1.5f;
      memset(y[k], 0x7f, sizeof y[k]), memset(dx[k], 0x7f, sizeof dx[k]);
      loom_tensor f[8] = {tensor(x, LOOM_FLOAT32, 3, s3, st3), dense(w, LOOM_FLOAT32, 1, s1),
                          dense(b, LOOM_FLOAT32, 1, s1), dense(rm[k], LOOM_FLOAT32, 1, s1),
                          dense(rv[k], LOOM_FLOAT32, 1, s1),
                          tensor(y[k], LOOM_FLOAT32, 3, s3, st3),
                          dense(sm[k], LOOM_FLOAT32, 1, s1), dense(sv[k], LOOM_FLOAT32, 1, s1)};
      loom_scalar fs[3] = {si(1), sf(0.1), sf(1e-5)};
      CHECK(run_chunks(loom_batch_norm_forward, f, 8, fs, 3, C, k ? 1 : C) == LOOM_OK);
      loom_tensor bt[10] = {tensor(g, LOOM_FLOAT32, 3, s3, st3), f[0], f[1], f[3], f[4], f[6],
                            f[7], tensor(dx[k], LOOM_FLOAT32, 3, s3, st3),
                            dense(dw[k], LOOM_FLOAT32, 1, s1), dense(db[k], LOOM_FLOAT32, 1, s1)};
      loom_scalar bs[2] = {si(1), sf(1e-5)};
      CHECK(run_chunks(loom_batch_norm_backward, bt, 10, bs, 2, C, k ? 1 : C) == LOOM_OK);
    }
    CHECK(memcmp(y[0], y[1], sizeof y[0]) == 0 && memcmp(dx[0], dx[1], sizeof dx[0]) == 0);
    CHECK(memcmp(sm[0], sm[1], sizeof sm[0]) == 0 && memcmp(sv[0], sv[1], sizeof sv[0]) == 0);
    CHECK(memcmp(rv[0], rv[1], sizeof rv[0]) == 0 && memcmp(dw[0], dw[1], sizeof dw[0]) == 0);
    for (int64_t i = 0; i < total; ++i) /* the gaps between rows */
      if (i % L >= S) CHECK(y[0][i] > 1e38f && dx[0][i] > 1e38f);
    /* the float64 kernel on the same values */
    loom_tensor f[8] = {tensor(xd, LOOM_FLOAT64, 3, s3, st3), dense(wd, LOOM_FLOAT64, 1, s1),
                        dense(bd, LOOM_FLOAT64, 1, s1), dense(rmd, LOOM_FLOAT64, 1, s1),
                        dense(rvd, LOOM_FLOAT64, 1, s1), tensor(yd, LOOM_FLOAT64, 3, s3, st3),
                        dense(smd, LOOM_FLOAT64, 1, s1), dense(svd, LOOM_FLOAT64, 1, s1)};
    loom_scalar fs[3] = {si(1), sf(0.1), sf(1e-5)};
    CHECK(run_chunks(loom_batch_norm_forward, f, 8, fs, 3, C, C) == LOOM_OK);
    for (int64_t c = 0; c < C; ++c) {
      CHECK_MSG(fabs(sm[0][c] - smd[c]) <= 1e-6 * fabs(smd[c]) && fabs(sv[0][c] - svd[c]) <=
                1e-6 * svd[c], "case %zu channel %ld: %g %g vs %g %g\n", t, (long)c, sm[0][c],
                sv[0][c], smd[c], svd[c]);
      if (N * S > 1) CHECK(fabs(rv[0][c] - rvd[c]) <= 1e-6 * rvd[c]);
      smd[c] = sm[0][c], svd[c] = sv[0][c]; /* the backward from the same saved statistics */
    }
    loom_tensor bt[10] = {tensor(gd, LOOM_FLOAT64, 3, s3, st3), f[0], f[1], f[3], f[4], f[6],
                          f[7], tensor(dxd, LOOM_FLOAT64, 3, s3, st3),
                          dense(dwd, LOOM_FLOAT64, 1, s1), dense(dbd, LOOM_FLOAT64, 1, s1)};
    loom_scalar bs[2] = {si(1), sf(1e-5)};
    CHECK(run_chunks(loom_batch_norm_backward, bt, 10, bs, 2, C, C) == LOOM_OK);
    for (int64_t c = 0; c < C; ++c) {
      CHECK(fabs(dw[0][c] - dwd[c]) <= 1e-5 * (1 + fabs(dwd[c])));
      CHECK(fabs(db[0][c] - dbd[c]) <= 1e-5 * (1 + fabs(dbd[c])));
    }
    for (int64_t i = 0; i < total; ++i)
      if (i % L < S) {
        CHECK_MSG(fabs(y[0][i] - yd[i]) <= 1e-5 * (1 + fabs(yd[i])), "y[%ld] %g vs %g\n",
                  (long)i, y[0][i], yd[i]);
        CHECK(fabs(dx[0][i] - dxd[i]) <= 1e-4 * (1 + fabs(dxd[i])));
      }
  }
}

/* "norm.batch_backward" over more channels than one block walk covers
 * (LOOM_BN_CBLOCK), in one chunk and in chunks that cut across blocks: dw,
 * db and dx are the bits of each channel's own plane loop and row loop. */
static void test_backward_blocks_give_the_plane_loops_bits(void) {
  enum { N = 3, C = LOOM_BN_CBLOCK + 5, S = 19, L = 21, TOT = N * C * L };
  static float x[TOT], g[TOT], dx[TOT], rdx[TOT];
  float w[C], sm[C], sv[C], dw[C], db[C];
  for (int i = 0; i < TOT; ++i) x[i] = (float)(frand() * 2.0 + 1.0), g[i] = (float)frand();
  for (int c = 0; c < C; ++c)
    w[c] = (float)frand(), sm[c] = (float)(1.0 + 0.1 * frand()), sv[c] = (float)(1.5 + frand());
  /* the reference: channel by channel, the plane loop and the row loop */
  memset(rdx, 0x7f, sizeof rdx);
  float rdw[C], rdb[C];
  for (int64_t c = 0; c < C; ++c) {
    double sg, sgx;
    loom_bn_plane_grad_sums(g + c * L, C * L, x + c * L, C * L, NULL, 0, NULL, 0, N, S, sm[c],
                            &sg, &sgx);
    rdw[c] = (float)(sgx * sv[c]), rdb[c] = (float)sg;
    float m, k1, k2, k3;
    const double inv = sv[c], proj = sgx * inv * inv / (N * S);
    loom_bn_dx_coef(sm[c], inv * w[c], proj, sg / (N * S), &m, &k1, &k2, &k3);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = n * C * L + c * L;
      loom_bn_row_dx(rdx + o, g + o, x + o, S, m, k1, k2, k3);
    }
  }
  const int64_t s3[3] = {N, C, S}, st3[3] = {C * L, L, 1}, s1[1] = {C};
  const int64_t grains[] = {C, 7, 1};
  for (size_t k = 0; k < sizeof grains / sizeof grains[0]; ++k) {
    memset(dx, 0x7f, sizeof dx);
    loom_tensor bt[10] = {tensor(g, LOOM_FLOAT32, 3, s3, st3), tensor(x, LOOM_FLOAT32, 3, s3, st3),
                          dense(w, LOOM_FLOAT32, 1, s1), none(), none(),
                          dense(sm, LOOM_FLOAT32, 1, s1), dense(sv, LOOM_FLOAT32, 1, s1),
                          tensor(dx, LOOM_FLOAT32, 3, s3, st3), dense(dw, LOOM_FLOAT32, 1, s1),
                          dense(db, LOOM_FLOAT32, 1, s1)};
    loom_scalar bs[2] = {si(1), sf(1e-5)};
    CHECK(run_chunks(loom_batch_norm_backward, bt, 10, bs, 2, C, grains[k]) == LOOM_OK);
    CHECK_MSG(memcmp(dw, rdw, sizeof dw) == 0 && memcmp(db, rdb, sizeof db) == 0,
              "dw/db differ from the plane loop's in chunks of %ld\n", (long)grains[k]);
    CHECK_MSG(memcmp(dx, rdx, sizeof dx) == 0, "dx differs from the row loop's in chunks of %ld\n",
              (long)grains[k]);
  }
}

/* "norm.batch_forward" in training over more channels than a block, rows
 * longer than the plane loop's short ones and more of them than one
 * statistics block holds (4096 values): the saved mean and invstd and the
 * output are each channel's plane-loop bits, in chunks across blocks. */
static void test_forward_blocks_give_the_plane_loops_bits(void) {
  enum { N = 50, C = LOOM_BN_CBLOCK + 5, S = 100, L = 103, TOT = N * C * L };
  static float x[TOT], y[TOT], ry[TOT];
  float w[C], b[C], sm[C], sv[C], rsm[C], rsv[C];
  for (int i = 0; i < TOT; ++i) x[i] = (float)(frand() * 2.0 + 5.0);
  for (int c = 0; c < C; ++c) w[c] = (float)frand(), b[c] = (float)frand();
  memset(ry, 0x7f, sizeof ry);
  for (int64_t c = 0; c < C; ++c) {
    double mean, m2;
    loom_bn_plane_stats(x + c * L, C * L, N, S, &mean, &m2);
    const double invstd = 1.0 / sqrt(m2 / (N * S) + 1e-5);
    rsm[c] = (float)mean, rsv[c] = (float)invstd;
    float m, a, bb;
    loom_bn_affine_coef(mean, invstd * w[c], b[c], &m, &a, &bb);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = n * C * L + c * L;
      loom_bn_row_affine(ry + o, x + o, S, m, a, bb);
    }
  }
  const int64_t s3[3] = {N, C, S}, st3[3] = {C * L, L, 1}, s1[1] = {C};
  const int64_t grains[] = {C, 7, 1};
  for (size_t k = 0; k < sizeof grains / sizeof grains[0]; ++k) {
    memset(y, 0x7f, sizeof y);
    loom_tensor f[8] = {tensor(x, LOOM_FLOAT32, 3, s3, st3), dense(w, LOOM_FLOAT32, 1, s1),
                        dense(b, LOOM_FLOAT32, 1, s1), none(), none(),
                        tensor(y, LOOM_FLOAT32, 3, s3, st3), dense(sm, LOOM_FLOAT32, 1, s1),
                        dense(sv, LOOM_FLOAT32, 1, s1)};
    loom_scalar fs[3] = {si(1), sf(0.1), sf(1e-5)};
    CHECK(run_chunks(loom_batch_norm_forward, f, 8, fs, 3, C, grains[k]) == LOOM_OK);
    CHECK_MSG(memcmp(sm, rsm, sizeof sm) == 0 && memcmp(sv, rsv, sizeof sv) == 0,
              "statistics differ from the plane loop's in chunks of %ld\n", (long)grains[k]);
    CHECK_MSG(memcmp(y, ry, sizeof y) == 0, "y differs from the row loop's in chunks of %ld\n",
              (long)grains[k]);
  }
}

/* The plain sums of both builds over g with its NaN and infinities
 * replaced by finite values. */
static void f_plain_finite(const float *g, const float *x, int64_t nb, int64_t ns, double *sg,
                           double *sgx) {
  static float gf[3 * 1031];
  for (int64_t i = 0; i < nb * ns; ++i) gf[i] = isfinite(g[i]) ? g[i] : 0.75f;
  loom_bn_plane_grad_sums(gf, ns, x, ns, NULL, 0, NULL, 0, nb, ns, -0.23, &sg[0], &sgx[0]);
  loom_bn_plane_grad_sums_avx512(gf, ns, x, ns, NULL, 0, NULL, 0, nb, ns, -0.23, &sg[1], &sgx[1]);
}

/* Long rows (the planes of 32x32, 16x16 and 8x8 images and odd lengths
 * near them, one row or several): the AVX-512 gradient sums, masked and
 * not, give the baseline build's bits and write the same masked gradient.
 * y is signed zeros, NaN and both signs; g holds NaN and infinities where
 * the mask drops them. */
static void test_long_rows_builds_agree(void) {
  enum { LS = 1031, LR = 3 };
  static float x[LR * LS], g[LR * LS], y[LR * LS], gm[2][LR * LS];
  for (int i = 0; i < LR * LS; ++i) {
    x[i] = (float)(frand() * 3.0 - 1.0), g[i] = (float)(frand() * 2.0 - 1.0);
    y[i] = (float)(frand() - 0.5);
    if (i % 37 == 0) y[i] = 0.0f;
    if (i % 41 == 0) y[i] = -0.0f;
    if (i % 43 == 0) y[i] = NAN;
    if (i % 47 == 0 && y[i] <= 0.0f) g[i] = (i & 1) ? NAN : -INFINITY;
  }
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  const int64_t lens[] = {64, 256, 1024, 63, 65, 255, 257, 1000, 1023, 1031};
  for (size_t b = 0; b < sizeof lens / sizeof lens[0]; ++b)
    for (int64_t nb = 1; nb <= LR; nb += LR - 1) {
      const int64_t ns = lens[b];
      double sg[2], sgx[2], mg[2], mgx[2];
      for (int k = 0; k < 2; ++k) {
        const grad_fn f = k ? loom_bn_plane_grad_sums_avx512 : loom_bn_plane_grad_sums;
        f(g, ns, x, ns, NULL, 0, NULL, 0, nb, ns, -0.23, &sg[k], &sgx[k]);
        memset(gm[k], 0x7f, sizeof gm[k]);
        f(g, ns, x, ns, y, ns, gm[k], ns, nb, ns, -0.23, &mg[k], &mgx[k]);
      }
      /* the plain sums take the NaN and infinities: NaN in both builds */
      CHECK(isnan(sg[0]) && isnan(sg[1]) && isnan(sgx[0]) && isnan(sgx[1]));
      f_plain_finite(g, x, nb, ns, sg, sgx);
      CHECK_MSG(same_bits(sg[0], sg[1]) && same_bits(sgx[0], sgx[1]),
                "plain sums differ between builds at %ld x %ld\n", (long)nb, (long)ns);
      CHECK_MSG(same_bits(mg[0], mg[1]) && same_bits(mgx[0], mgx[1]),
                "masked sums differ between builds at %ld x %ld\n", (long)nb, (long)ns);
      CHECK(memcmp(gm[0], gm[1], sizeof gm[0]) == 0);
      CHECK(isfinite(mg[0]) && isfinite(mgx[0]));
    }
}

int main(void) {
  srand(11);
  test_builds_agree_and_match_the_reference();
  test_long_rows_builds_agree();
  test_variance_stays_accurate_far_from_zero();
  test_non_finite_values();
  test_kernels_in_float32();
  test_backward_blocks_give_the_plane_loops_bits();
  test_forward_blocks_give_the_plane_loops_bits();
  TEST_MAIN_END();
}
