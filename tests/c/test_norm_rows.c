/* The layer-norm forward over blocks of rows: each row's mean, rstd and
 * output are the bits the per-row primitives give it (sum, sq_dev,
 * norm_apply), whatever the rows beside it, in both builds of the row
 * primitives; and the kernel's results for float32 and bfloat16 rows do not
 * depend on how its range is split into chunks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/base/dtype.h"
#include "kernels/nn/nn_rows.h"
#include "kernels/nn/norm.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

extern const loom_nn_rows_ops loom_nn_rows_table, loom_nn_rows_table_avx512;

enum { MAXR = LOOM_NN_NORM_ROWS, MAXN = 600 };

/* row r of the reference: the per-row primitives of the baseline build */
static void reference(const float *x, int64_t n, int rms, float eps, const float *w,
                      const float *b, float *y, float *mean, float *rstd) {
  const loom_nn_rows_ops *g = &loom_nn_rows_table;
  *mean = rms ? 0.0f : g->sum(x, n) / (float)n;
  *rstd = 1.0f / sqrtf(g->sq_dev(x, n, *mean) / (float)n + eps);
  g->norm_apply(x, n, *mean, *rstd, w, b, y);
}

/* kind 0: values around an offset (sums that round); 1: a row of equal
 * values (variance 0); 2: a NaN in one row; 3: an infinity in one row */
static void fill_rows(float *x, int64_t rows, int64_t n, int kind) {
  for (int64_t i = 0; i < rows * n; ++i) x[i] = (float)(3.0 + 2.0 * frand());
  if (kind == 1)
    for (int64_t i = 0; i < n; ++i) x[(rows / 2) * n + i] = 0.75f;
  if (kind == 2) x[(rows - 1) * n + n / 2] = NAN;
  if (kind == 3) x[n - 1] = -INFINITY;
}

static int same_rows(const float *a, const float *b, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!test_same_f32(a[i], b[i])) return 0;
  return 1;
}

static void test_blocks_match_rows(void) {
  static float x[MAXR * MAXN], y[MAXR * MAXN], yr[MAXR * MAXN], w[MAXN], b[MAXN];
  float mean[MAXR], rstd[MAXR], mr[MAXR], rr[MAXR];
  const int64_t lengths[] = {1, 15, 16, 17, 45, 64, 256, 300};
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const loom_nn_rows_ops *builds[2] = {&loom_nn_rows_table, &loom_nn_rows_table_avx512};
  for (int64_t j = 0; j < MAXN; ++j) w[j] = (float)(1.0 + 0.5 * frand()), b[j] = (float)frand();
  for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; ++li)
    for (int64_t rows = 1; rows <= MAXR; ++rows)
      for (int kind = 0; kind < 4; ++kind)
        for (int rms = 0; rms <= 1; ++rms)
          for (int params = 0; params < 3; ++params) {
            const int64_t n = lengths[li];
            const float *wp = params > 0 ? w : NULL, *bp = params > 1 ? b : NULL;
            fill_rows(x, rows, n, kind);
            for (int64_t r = 0; r < rows; ++r)
              reference(x + r * n, n, rms, 1e-5f, wp, bp, yr + r * n, &mr[r], &rr[r]);
            for (int k = 0; k <= avx512; ++k) {
              memset(y, 0, sizeof y);
              builds[k]->norm_forward(x, rows, n, rms, 1e-5f, wp, bp, y, mean, rstd);
              const int ok = same_rows(y, yr, rows * n) && same_rows(mean, mr, rows) &&
                             same_rows(rstd, rr, rows);
              if (!ok)
                fprintf(stderr, "build %d n %lld rows %lld kind %d rms %d params %d differs\n", k,
                        (long long)n, (long long)rows, kind, rms, params);
              CHECK(ok);
            }
          }
}

/* The kernel over M rows in chunks of 1, 7 and all: the same bits, and
 * those of the reference (bf16 rows: the reference on the widened rows,
 * rounded once). Widths below and above the widest blocked one. */
static void test_kernel_chunks(void) {
  enum { M = 37 };
  static float x[M * MAXN], xw[M * MAXN], w[MAXN], b[MAXN], y[3][M * MAXN], yr[M * MAXN];
  static uint16_t xb[M * MAXN], yb[3][M * MAXN];
  static float mean[3][M], rstd[3][M], mr[M], rr[M];
  const int64_t widths[] = {45, 256, 512, 600};
  const int64_t grains[3] = {1, 7, M};
  for (int64_t j = 0; j < MAXN; ++j) w[j] = (float)(1.0 + 0.5 * frand()), b[j] = (float)frand();
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; ++wi)
    for (int bf = 0; bf <= 1; ++bf)
      for (int rms = 0; rms <= 1; ++rms) {
        const int64_t n = widths[wi];
        fill_rows(x, M, n, 0);
        for (int64_t i = 0; i < M * n; ++i) {
          xb[i] = loom_f32_to_bf16(x[i]);
          xw[i] = bf ? loom_bf16_to_f32(xb[i]) : x[i];
        }
        for (int64_t r = 0; r < M; ++r)
          reference(xw + r * n, n, rms, 1e-5f, w, rms ? NULL : b, yr + r * n, &mr[r], &rr[r]);
        const int32_t dt = bf ? LOOM_BFLOAT16 : LOOM_FLOAT32;
        const int64_t s2[2] = {M, n}, s1[1] = {n}, sm[1] = {M};
        int ok = 1;
        for (int g = 0; g < 3; ++g) {
          loom_tensor t[6] = {dense(bf ? (void *)xb : (void *)x, dt, 2, s2),
                              dense(w, LOOM_FLOAT32, 1, s1),
                              rms ? none() : dense(b, LOOM_FLOAT32, 1, s1),
                              dense(bf ? (void *)yb[g] : (void *)y[g], dt, 2, s2),
                              rms ? none() : dense(mean[g], LOOM_FLOAT32, 1, sm),
                              dense(rstd[g], LOOM_FLOAT32, 1, sm)};
          loom_scalar s[3] = {si(n), sf(1e-5), si(rms)};
          CHECK(run_chunks(loom_layer_norm_forward, t, 6, s, 3, M, grains[g]) == 0);
          ok &= same_rows(rstd[g], rr, M) && (rms || same_rows(mean[g], mr, M));
          for (int64_t i = 0; i < M * n; ++i)
            ok &= bf ? yb[g][i] == loom_f32_to_bf16(yr[i]) : test_same_f32(y[g][i], yr[i]);
        }
        if (!ok)
          fprintf(stderr, "kernel n %lld bf16 %d rms %d differs\n", (long long)n, bf, rms);
        CHECK(ok);
      }
}

int main(void) {
  srand(5);
  test_blocks_match_rows();
  test_kernel_chunks();
  TEST_MAIN_END();
}
