/* The reduction kernel against naive references, in one stage and in two
 * (partials, then an ordered combine), under several chunkings: results must
 * match the references and be bitwise equal whatever the chunking. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce/reduce.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* The reduction kernel over [0, range) in chunks of `grain`. */
static int run(loom_tensor *t, loom_scalar *s, int64_t range, int64_t grain) {
  return run_chunks(loom_kernel_reduce, t, 4, s, 5, range, grain);
}

/* Reduces x viewed as [rows, cols] over the rows (dim 0, strided), i.e. the
 * input is presented as [cols | rows] with strides [1 | cols]. */
static int reduce_cols(int op, double p, const float *x, int64_t rows,
                       int64_t cols, float *out, int64_t *idx, int two_stage,
                       int64_t grain) {
  loom_tensor t[4];
  memset(t, 0, sizeof t);
  t[0] = (loom_tensor){.data = out, .dtype = LOOM_FLOAT32, .rank = 1};
  t[0].sizes[0] = cols; t[0].strides[0] = 1;
  t[1] = (loom_tensor){.data = (void *)x, .dtype = LOOM_FLOAT32, .rank = 2};
  t[1].sizes[0] = cols; t[1].strides[0] = 1;
  t[1].sizes[1] = rows; t[1].strides[1] = cols;
  t[2] = (loom_tensor){.data = idx, .dtype = LOOM_INT64, .rank = 1};
  t[2].sizes[0] = cols; t[2].strides[0] = 1;
  const int64_t part = loom_reduce_part(rows), parts = two_stage ? (rows + part - 1) / part : 1;
  double *scratch = malloc(sizeof(double) * LOOM_REDUCE_STATE_DOUBLES * cols * parts);
  t[3] = (loom_tensor){.data = scratch, .dtype = LOOM_FLOAT64, .rank = 0};
  loom_scalar s[5] = {{.i = op}, {.i = 1}, {.f = p}, {.i = parts}, {.i = 0}};
  int rc;
  if (two_stage) {
    s[4].i = 1;
    rc = run(t, s, cols * parts, grain);
    s[4].i = 2;
    if (!rc) rc = run(t, s, cols, grain);
  } else {
    rc = run(t, s, cols, grain);
  }
  free(scratch);
  return rc;
}

static void test_ops(void) {
  enum { R = 150001, C = 3 };
  float *x = malloc(sizeof(float) * R * C);
  for (int64_t i = 0; i < (int64_t)R * C; ++i) x[i] = (float)rand() / RAND_MAX - 0.3f;
  x[(int64_t)777 * C + 1] = 5.0f; /* the max of column 1 */
  for (int stage = 0; stage < 2; ++stage) {
    float out[C], out2[C];
    int64_t idx[C];
    double ref[C] = {0}, ref2[C] = {0};
    for (int64_t r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) ref[c] += x[r * C + c];
    CHECK(reduce_cols(LOOM_REDUCE_SUM, 0, x, R, C, out, idx, stage, 1) == 0);
    for (int c = 0; c < C; ++c) CHECK(fabs(out[c] - ref[c]) <= 1e-6 * fabs(ref[c]) + 1e-3);
    /* bitwise equal whatever the chunking */
    CHECK(reduce_cols(LOOM_REDUCE_SUM, 0, x, R, C, out2, idx, stage, 2) == 0);
    CHECK(memcmp(out, out2, sizeof out) == 0);

    CHECK(reduce_cols(LOOM_REDUCE_MAX, 0, x, R, C, out, idx, stage, 1) == 0);
    CHECK(out[1] == 5.0f && idx[1] == 777);

    CHECK(reduce_cols(LOOM_REDUCE_VAR, 1, x, R, C, out, idx, stage, 1) == 0);
    for (int c = 0; c < C; ++c) {
      double mean = ref[c] / R, m2 = 0;
      for (int64_t r = 0; r < R; ++r) m2 += (x[r * C + c] - mean) * (x[r * C + c] - mean);
      ref2[c] = m2 / (R - 1);
      CHECK(fabs(out[c] - ref2[c]) <= 1e-6 * ref2[c]);
    }
    CHECK(reduce_cols(LOOM_REDUCE_NORM, 3, x, R, C, out, idx, stage, 1) == 0);
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t r = 0; r < R; ++r) acc += pow(fabs(x[r * C + c]), 3);
      CHECK(fabs(out[c] - pow(acc, 1.0 / 3)) <= 1e-5 * pow(acc, 1.0 / 3));
    }
    CHECK(reduce_cols(LOOM_REDUCE_LOGSUMEXP, 0, x, R, C, out, idx, stage, 1) == 0);
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t r = 0; r < R; ++r) acc += exp(x[r * C + c]);
      CHECK(fabs(out[c] - log(acc)) <= 1e-5 * fabs(log(acc)));
    }
  }
  x[5] = NAN; /* column 2: NaN propagates through max, index of the NaN */
  float out[C];
  int64_t idx[C];
  CHECK(reduce_cols(LOOM_REDUCE_MAX, 0, x, R, C, out, idx, 1, 1) == 0);
  CHECK(isnan(out[2]) && idx[2] == 1);
  free(x);
}

/* Parts longer than the 64K unit (a 32nd of a long reduction): every
 * element is counted once, and the max's index lands in a late part. */
static void test_long_parts(void) {
  CHECK(loom_reduce_part(1000) == LOOM_REDUCE_PART_UNIT);
  CHECK(loom_reduce_part((int64_t)16 << 20) == (int64_t)512 << 10);
  enum { R = 3 * 1048576 + 12345 };
  CHECK(loom_reduce_part(R) == 2 * LOOM_REDUCE_PART_UNIT);
  float *x = malloc(sizeof(float) * R);
  int64_t ref = 0; /* small integers: exact in any order */
  for (int64_t i = 0; i < R; ++i) {
    x[i] = (float)(1 + i % 3);
    ref += 1 + i % 3;
  }
  float out, out2;
  int64_t idx;
  CHECK(reduce_cols(LOOM_REDUCE_SUM, 0, x, R, 1, &out, &idx, 1, 1) == 0 && out == (float)ref);
  CHECK(reduce_cols(LOOM_REDUCE_SUM, 0, x, R, 1, &out2, &idx, 1, 7) == 0 &&
        memcmp(&out, &out2, sizeof out) == 0);
  x[R - 5] = 100.0f;
  CHECK(reduce_cols(LOOM_REDUCE_MAX, 0, x, R, 1, &out, &idx, 1, 1) == 0 && out == 100.0f &&
        idx == R - 5);
  free(x);
}

/* A column sum in two stages (a float32 [R, C] over dim 0, C outputs into
 * float64): each part's rows are added in order per column from 0, the
 * parts in order, the first taken as it is; the exact bits of that, for
 * every chunking of stage 1 (one item, 7, a part's C outputs), and the
 * mean is that sum over R. */
static void test_column_parts(void) {
  enum { R = 3 * 65536 + 1234, C = 19 };
  float *x = malloc(sizeof(float) * R * C);
  for (int64_t i = 0; i < (int64_t)R * C; ++i)
    x[i] = ((float)rand() / RAND_MAX - 0.45f) * (float)(1 << (i % 23));
  const int64_t part = loom_reduce_part(R), parts = (R + part - 1) / part;
  CHECK(parts == 4);
  double ref[C];
  for (int c = 0; c < C; ++c) {
    for (int64_t j = 0; j < parts; ++j) {
      double acc = 0.0;
      for (int64_t r = j * part; r < R && r < (j + 1) * part; ++r) acc += (double)x[r * C + c];
      ref[c] = j == 0 ? acc : ref[c] + acc;
    }
  }
  double *scratch = malloc(sizeof(double) * LOOM_REDUCE_STATE_DOUBLES * C * parts);
  loom_tensor t[4];
  memset(t, 0, sizeof t);
  double out[C];
  t[0] = (loom_tensor){.data = out, .dtype = LOOM_FLOAT64, .rank = 1};
  t[0].sizes[0] = C; t[0].strides[0] = 1;
  t[1] = (loom_tensor){.data = x, .dtype = LOOM_FLOAT32, .rank = 2};
  t[1].sizes[0] = C; t[1].strides[0] = 1;
  t[1].sizes[1] = R; t[1].strides[1] = C;
  t[2] = t[0];
  t[2].data = NULL;
  t[3] = (loom_tensor){.data = scratch, .dtype = LOOM_FLOAT64, .rank = 0};
  const int64_t grains[] = {1, 7, C};
  for (int op = 0; op < 2; ++op)
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; ++g) {
      loom_scalar s[5] = {{.i = op ? LOOM_REDUCE_MEAN : LOOM_REDUCE_SUM}, {.i = 1}, {.f = 0},
                          {.i = parts}, {.i = 1}};
      memset(out, 0, sizeof out);
      CHECK(run(t, s, C * parts, grains[g]) == 0);
      s[4].i = 2;
      CHECK(run(t, s, C, 1) == 0);
      for (int c = 0; c < C; ++c) {
        const double want = op ? ref[c] / R : ref[c];
        CHECK(memcmp(&out[c], &want, sizeof want) == 0);
      }
    }
  /* max and min over the parts: a tie across parts keeps the first row, a
   * NaN in a late part wins, -0.0 against 0.0 keeps the first */
  x[(part + 5) * C + 3] = 1e30f;
  x[(2 * part + 9) * C + 3] = 1e30f;
  x[(3 * part + 2) * C + 4] = NAN;
  x[(part + 1) * C + 4] = 1e30f;
  for (int64_t r = 0; r < R; ++r) x[r * C + 5] = r == 2 * part ? -0.0f : 0.0f;
  int64_t idx[C];
  t[2] = (loom_tensor){.data = idx, .dtype = LOOM_INT64, .rank = 1};
  t[2].sizes[0] = C; t[2].strides[0] = 1;
  for (int mx = 0; mx < 2; ++mx)
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; ++g) {
      loom_scalar s[5] = {{.i = mx ? LOOM_REDUCE_MAX : LOOM_REDUCE_MIN}, {.i = 1}, {.f = 0},
                          {.i = parts}, {.i = 1}};
      CHECK(run(t, s, C * parts, grains[g]) == 0);
      s[4].i = 2;
      CHECK(run(t, s, C, 1) == 0);
      for (int c = 0; c < C; ++c) { /* an in-order scan */
        float b = x[c];
        int64_t at = 0;
        for (int64_t r = 1; r < R; ++r) {
          const float v = x[r * C + c];
          if (b == b && (v != v || (mx ? v > b : v < b))) b = v, at = r;
        }
        CHECK(idx[c] == at && memcmp(&(float){(float)out[c]}, &b, sizeof b) == 0);
      }
      CHECK(idx[3] == (mx ? part + 5 : idx[3]) && idx[4] == 3 * part + 2 && idx[5] == 0);
    }
  free(scratch);
  free(x);
}

/* A contiguous full reduction of int8 into int64 and an all/any. */
static void test_integral(void) {
  enum { N = 1000 };
  int8_t x[N];
  int64_t ref = 0;
  for (int i = 0; i < N; ++i) { x[i] = (int8_t)(i % 200 - 100); ref += x[i]; }
  int64_t out = 0;
  loom_tensor t[4];
  memset(t, 0, sizeof t);
  t[0] = (loom_tensor){.data = &out, .dtype = LOOM_INT64, .rank = 0};
  t[1] = (loom_tensor){.data = x, .dtype = LOOM_INT8, .rank = 1};
  t[1].sizes[0] = N; t[1].strides[0] = 1;
  loom_scalar s[5] = {{.i = LOOM_REDUCE_SUM}, {.i = 1}, {.f = 0}, {.i = 1}, {.i = 0}};
  CHECK(run(t, s, 1, 1) == 0 && out == ref);
  uint8_t b = 7;
  t[0] = (loom_tensor){.data = &b, .dtype = LOOM_BOOL, .rank = 0};
  s[0].i = LOOM_REDUCE_ALL;
  CHECK(run(t, s, 1, 1) == 0 && b == 0); /* x contains a zero */
  s[0].i = LOOM_REDUCE_ANY;
  CHECK(run(t, s, 1, 1) == 0 && b == 1);
}

/* The contiguous sums built for AVX-512 add in the generic build's order:
 * the same bits for every length, tails included, and for sums of squares. */
static void test_sum_isa_equal(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  enum { N = 4200 }; /* four float blocks of 1024 and a tail */
  static float xf[N];
  static double xd[N];
  for (int i = 0; i < N; ++i) {
    xf[i] = ((float)rand() / RAND_MAX - 0.4f) * (float)(1 + i % 7) * 1e3f;
    xd[i] = (double)xf[i] * 1.0000001;
  }
  const int64_t lengths[] = {0, 1, 63, 64, 65, 127, 128, 200, 999, 1023, 1024, 1025, 2048 + 64, N};
  for (size_t j = 0; j < sizeof lengths / sizeof lengths[0]; ++j)
    for (int sq = 0; sq < 2; ++sq) {
      const int64_t n = lengths[j];
      double a = loom_reduce_sum_f32(xf, n, sq), b = loom_reduce_sum_f32_avx512(xf, n, sq);
      double c = loom_reduce_sum_f64(xd, n, sq), d = loom_reduce_sum_f64_avx512(xd, n, sq);
      CHECK(memcmp(&a, &b, sizeof a) == 0);
      CHECK(memcmp(&c, &d, sizeof c) == 0);
    }
  /* float32 blocks whose float partials overflow are added in double:
   * lanes of 3e38, 3e38, -3e38, -3e38 sum to exactly 0 in both builds, an
   * inf or NaN element still gives inf or NaN */
  static float big[2048];
  for (int i = 0; i < 2048; ++i) big[i] = (i / 64) % 4 < 2 ? 3e38f : -3e38f;
  for (int isa = 0; isa < 2; ++isa) {
    double (*sum)(const float *, int64_t, int) = isa ? loom_reduce_sum_f32_avx512 : loom_reduce_sum_f32;
    CHECK(sum(big, 2048, 0) == 0.0);
    big[700] = INFINITY;
    CHECK(isinf(sum(big, 2048, 0)));
    big[700] = NAN;
    CHECK(isnan(sum(big, 2048, 0)));
    big[700] = -3e38f; /* block 10 of 64: a negative one */
  }
  /* bfloat16 in float lanes, blocks of 4096: both builds the same bits,
   * lengths around the lanes and the block; small integers sum exactly */
  enum { H = 9000 };
  static uint16_t h[H];
  double exact = 0.0;
  for (int i = 0; i < H; ++i) {
    const float v = (float)(rand() % 17 - 8) * (i % 3 ? 1.0f : 0.5f);
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    h[i] = (uint16_t)(bits >> 16);
  }
  const int64_t hl[] = {0, 1, 15, 17, 63, 64, 65, 100, 4095, 4096, 4097, 8200, H};
  for (size_t j = 0; j < sizeof hl / sizeof hl[0]; ++j)
    for (int sq = 0; sq < 2; ++sq) {
      exact = 0.0;
      for (int64_t i = 0; i < hl[j]; ++i) {
        uint32_t bits = (uint32_t)h[i] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        exact += sq ? (double)v * v : v;
      }
      const double a = loom_reduce_sum_bf16(h, hl[j], sq), b = loom_reduce_sum_bf16_avx512(h, hl[j], sq);
      CHECK(memcmp(&a, &b, sizeof a) == 0);
      CHECK(a == exact);
    }
}

/* Products in 64 double lanes: both builds the same bits for every length
 * (tails too), within a few ulp of the product in order; a column product
 * row is acc[j] *= x[j] in both builds. */
static void test_prod_lanes(void) {
  enum { N = 1000 };
  float xf[N];
  double xd[N];
  for (int i = 0; i < N; ++i) {
    xf[i] = 0.9f + 0.2f * (float)rand() / RAND_MAX;
    xd[i] = (double)xf[i] * 1.0000001;
  }
  const int64_t lengths[] = {0, 1, 63, 64, 65, 127, 128, 200, 999, N};
  for (size_t j = 0; j < sizeof lengths / sizeof lengths[0]; ++j) {
    const int64_t n = lengths[j];
    double want = 1.0;
    for (int64_t i = 0; i < n; ++i) want *= xf[i];
    const double a = loom_reduce_prod_f32(xf, n);
    CHECK(fabs(a - want) <= 1e-13 * want);
    double c = loom_reduce_prod_f64(xd, n);
    if (loom_cpu_features() & LOOM_FEATURE_AVX512F) {
      const double b = loom_reduce_prod_f32_avx512(xf, n), d = loom_reduce_prod_f64_avx512(xd, n);
      CHECK(memcmp(&a, &b, sizeof a) == 0);
      CHECK(memcmp(&c, &d, sizeof c) == 0);
    }
  }
  double acc[3] = {1.0, 2.0, -1.0}, acc2[3] = {1.0, 2.0, -1.0};
  const float row[3] = {3.0f, 0.5f, 0.0f};
  loom_reduce_cols_prod_f32(acc, row, 3);
  CHECK(acc[0] == 3.0 && acc[1] == 1.0 && acc[2] == 0.0 && signbit(acc[2]));
  if (loom_cpu_features() & LOOM_FEATURE_AVX512F) {
    loom_reduce_cols_prod_f32_avx512(acc2, row, 3);
    CHECK(memcmp(acc, acc2, sizeof acc) == 0);
  }
}

/* A row step of the column max / min built for AVX-512 keeps the generic
 * build's values and indices: NaN wins and stays, ties keep the earlier
 * row; widths past a vector and a tail. */
static void test_cols_extreme_isa_equal(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  enum { W = 37, ROWS = 30 };
  for (int max = 0; max < 2; ++max) {
    float b1[W], b2[W], x[ROWS][W];
    int64_t i1[W], i2[W];
    for (int k = 0; k < ROWS; ++k)
      for (int j = 0; j < W; ++j) x[k][j] = (float)(rand() % 5) - 2.0f;
    x[3][4] = NAN;
    x[0][9] = NAN;
    x[20][33] = NAN;
    for (int j = 0; j < W; ++j) b1[j] = b2[j] = x[0][j], i1[j] = i2[j] = 0;
    for (int k = 1; k < ROWS; ++k) {
      loom_reduce_cols_extreme_f32(b1, i1, x[k], W, k, max);
      loom_reduce_cols_extreme_f32_avx512(b2, i2, x[k], W, k, max);
    }
    CHECK(memcmp(b1, b2, sizeof b1) == 0);
    CHECK(memcmp(i1, i2, sizeof i1) == 0);
    CHECK(isnan(b1[4]) && i1[4] == 3 && isnan(b1[9]) && i1[9] == 0);
  }
}

/* A block of a column sum's rows, both builds, gives the bits of adding
 * the rows one at a time (loom_reduce_cols_f32): every width up to 64 (the
 * vector tail's masks), rows a stride apart, 0 rows, magnitudes far apart
 * so that the order shows, and lanes past the width left alone. */
static void test_cols_rows(void) {
  enum { ROWS = 37, STRIDE = 70 };
  float x[ROWS * STRIDE];
  for (int i = 0; i < ROWS * STRIDE; ++i)
    x[i] = ((float)rand() / RAND_MAX - 0.5f) * (i % 5 == 0 ? 1e9f : i % 3 == 0 ? 1e-3f : 1.0f);
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  for (int64_t n = 1; n <= 64; ++n)
    for (int64_t rows = 0; rows <= ROWS; rows += rows < 3 ? 1 : 17) {
      double want[66], got[66], got512[66];
      for (int j = 0; j < 66; ++j) want[j] = got[j] = got512[j] = 0.25 * j - 3.0;
      for (int64_t k = 0; k < rows; ++k) loom_reduce_cols_f32(want, x + 3 + k * STRIDE, n);
      loom_reduce_cols_rows_f32(got, x + 3, STRIDE, rows, n);
      CHECK(memcmp(got, want, sizeof want) == 0);
      if (!avx512) continue;
      loom_reduce_cols_rows_f32_avx512(got512, x + 3, STRIDE, rows, n);
      CHECK(memcmp(got512, want, sizeof want) == 0);
    }
}

/* The max / min of a contiguous run, value and first index, against a scan
 * in order, for both builds: ties everywhere (few distinct values), -0.0
 * beside 0.0, a NaN early or late, lengths around the vector loop's. */
static void test_extreme_run(void) {
  enum { N = 1000 };
  static float x[N];
  const int64_t lengths[] = {1, 2, 31, 32, 33, 47, 100, N};
  for (int trial = 0; trial < 4; ++trial) {
    for (int i = 0; i < N; ++i) x[i] = (float)(rand() % 4) - 1.5f;
    x[17] = -0.0f;
    x[18] = 0.0f;
    if (trial == 1) x[40] = NAN;
    if (trial == 2) x[990] = NAN, x[995] = NAN;
    if (trial == 3) x[0] = NAN;
    for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; ++t)
      for (int max = 0; max < 2; ++max) {
        const int64_t n = lengths[t];
        float want = x[0];
        int64_t want_at = 0;
        for (int64_t j = 1; j < n; ++j)
          if (want == want && (x[j] != x[j] || (max ? x[j] > want : x[j] < want)))
            want = x[j], want_at = j;
        int64_t a1 = -1, a2 = -1;
        const float v1 = loom_reduce_extreme_f32(x, n, max, &a1);
        CHECK(memcmp(&v1, &want, sizeof v1) == 0 && a1 == want_at);
        if (loom_cpu_features() & LOOM_FEATURE_AVX512F) {
          const float v2 = loom_reduce_extreme_f32_avx512(x, n, max, &a2);
          CHECK(memcmp(&v2, &want, sizeof v2) == 0 && a2 == want_at);
        }
      }
  }
}

/* logsumexp's sum of e^(x - max): both builds give the same bits, within
 * 1e-15 of the C library's terms summed in the same order; terms below
 * e^-110 count as 0. */
static void test_exp_sum(void) {
  enum { N = 1000 };
  static double x[N];
  double r = -1e300;
  for (int i = 0; i < N; ++i) {
    x[i] = (double)((i * 7919) % 2000) / 17.0 - 60.0 - (i % 97 == 0 ? 200.0 : 0.0);
    if (x[i] > r) r = x[i];
  }
  const double a = loom_reduce_exp_sum_f64(x, N, r), b = loom_reduce_exp_sum_f64_avx512(x, N, r);
  double want = 0.0;
  for (int i = 0; i < N; ++i) want += x[i] - r < -110.0 ? 0.0 : exp(x[i] - r);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(fabs(a - want) <= 1e-15 * want);
  /* a column logsumexp's row: the same terms, both builds the same bits;
   * NaN and -inf count 0 */
  enum { W = 37 };
  float xr[W];
  double ref[W], acc1[W], acc2[W];
  for (int j = 0; j < W; ++j) {
    xr[j] = (float)x[j * 13];
    ref[j] = (double)xr[j] + (double)(j % 5) * 7.0;
    acc1[j] = acc2[j] = 1.0;
  }
  xr[3] = NAN;
  xr[4] = -INFINITY;
  loom_reduce_cols_exp_f32(acc1, xr, ref, W);
  if (loom_cpu_features() & LOOM_FEATURE_AVX512F) {
    loom_reduce_cols_exp_f32_avx512(acc2, xr, ref, W);
    CHECK(memcmp(acc1, acc2, sizeof acc1) == 0);
  }
  for (int j = 0; j < W; ++j) {
    const double t = (double)xr[j] - ref[j], term = j == 3 || t < -110.0 ? 0.0 : exp(t);
    CHECK(fabs(acc1[j] - (1.0 + term)) <= 1e-15 * (1.0 + term));
  }
}

/* The short-run sum gives the general sum's double bits, in both builds:
 * lengths around the 64-lane blocks up to the float blocks' 1024, values
 * over 2^-60..2^60 (sums in double that depend on their order), NaN, inf,
 * -0.0 and a run of -0.0. */
static void test_sum_short_equal(void) {
  enum { N = 1023 };
  static float x[N];
  const int64_t lengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 500, N};
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  for (int kind = 0; kind < 4; ++kind) {
    for (int i = 0; i < N; ++i)
      x[i] = ldexpf((float)rand() / RAND_MAX - 0.5f, rand() % 121 - 60);
    if (kind == 1) x[N / 3] = NAN;
    if (kind == 2) x[5] = INFINITY;
    if (kind == 3)
      for (int i = 0; i < N; i += 2) x[i] = -0.0f;
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; ++k) {
      const int64_t n = lengths[k];
      double a = loom_reduce_sum_f32(x, n, 0), b = loom_reduce_sum_short_f32(x, n);
      CHECK(memcmp(&a, &b, sizeof a) == 0);
      if (!avx512) continue;
      a = loom_reduce_sum_f32_avx512(x, n, 0), b = loom_reduce_sum_short_f32_avx512(x, n);
      CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "n %lld: %a vs %a", (long long)n, a, b);
    }
  }
  static const float zeros[3] = {-0.0f, -0.0f, -0.0f};
  const double z = loom_reduce_sum_f32(zeros, 3, 0), zs = loom_reduce_sum_short_f32(zeros, 3);
  CHECK(memcmp(&z, &zs, sizeof z) == 0);
  if (avx512) {
    const double y = loom_reduce_sum_short_f32_avx512(zeros, 3);
    CHECK(memcmp(&z, &y, sizeof z) == 0);
  }
}

int main(void) {
  srand(3);
  test_ops();
  test_long_parts();
  test_column_parts();
  test_integral();
  test_sum_isa_equal();
  test_sum_short_equal();
  test_prod_lanes();
  test_cols_extreme_isa_equal();
  test_cols_rows();
  test_extreme_run();
  test_exp_sum();
  TEST_MAIN_END();
}
