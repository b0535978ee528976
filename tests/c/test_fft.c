/* The FFT kernels against a naive DFT (long double), for lengths with every
 * kind of factor and for Bluestein's primes, c2c both ways, r2c and c2r,
 * float and double, batched and strided rows; the baseline build of the
 * row transforms against the AVX-512 one; blocks of a vector's rows; the
 * four-step decomposition with its twiddles; and results bitwise equal
 * under any chunking. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/fft/fft.h"
#include "kernel_test_util.h"
#include "loom/status.h"
#include "test_util.h"

static const int64_t kLengths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 16, 17, 25, 30, 31,
                                   32, 37, 49, 64, 97, 128, 360, 1000, 1009, 2018, 4096};

/* A table for (n, sign, dtype), 64-byte aligned, or NULL. */
static void *make_table_for(int64_t n, int sign, int32_t dtype, int real, loom_fft_plan *p) {
  loom_scalar s[4] = {si(n), si(sign), si(dtype), si(real)};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_scalars = 4, .scalars = s,
                        .range = 1, .grain = 1};
  if (loom_kernel_fft_plan(&a, p, sizeof *p)) return NULL;
  void *table = aligned_alloc(64, (size_t)((p->table_bytes + 63) / 64 * 64));
  int64_t size = p->table_bytes;
  loom_tensor t = dense(table, LOOM_UINT8, 1, &size);
  a.num_tensors = 1;
  a.tensors = &t;
  if (loom_kernel_fft_init(&a, 0, 1)) {
    free(table);
    return NULL;
  }
  return table;
}

static void *make_table(int64_t n, int sign, int32_t dtype, loom_fft_plan *p) {
  return make_table_for(n, sign, dtype, 0, p);
}

/* Runs `kind` ("fft.c2c" 0, r2c 1, c2r 2) on rows of `out` / `in` with
 * the kernel, in chunks of `grain` rows, with the four-step twiddles `tw`
 * (NULL: none). */
static int run_fft_tw(int kind, int64_t n, int sign, int32_t real, loom_tensor *out,
                      loom_tensor *in, double scale, int64_t grain, int64_t block,
                      const loom_tensor *tw) {
  loom_fft_plan p;
  /* r2c and c2r with the tables of real signals (even lengths as half
   * length complex transforms) */
  void *table = make_table_for(n, sign, real, kind != 0, &p);
  if (!table) return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t rows = 1;
  for (int d = 0; d < out->rank - 1; ++d) rows *= out->sizes[d];
  const int64_t chunks = (rows + grain - 1) / grain, words = chunks * p.work * block;
  void *ws = malloc((size_t)words * (real == LOOM_FLOAT32 ? 8 : 16));
  int64_t tsize = p.table_bytes;
  loom_tensor t[5] = {*out, *in, dense(table, LOOM_UINT8, 1, &tsize),
                      dense(ws, real == LOOM_FLOAT32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128, 1, &words),
                      tw ? *tw : none()};
  loom_scalar s[4] = {si(n), si(sign), sf(scale), si(block)};
  loom_kernel_fn fn = kind == 0 ? loom_kernel_fft_c2c : kind == 1 ? loom_kernel_fft_r2c
                                                                  : loom_kernel_fft_c2r;
  const int rc = run_chunks(fn, t, tw ? 5 : 4, s, 4, rows, grain);
  free(ws);
  free(table);
  return rc;
}

static int run_fft(int kind, int64_t n, int sign, int32_t real, loom_tensor *out,
                   loom_tensor *in, double scale, int64_t grain, int64_t block) {
  return run_fft_tw(kind, n, sign, real, out, in, scale, grain, block, NULL);
}

/* As run_fft for an in-place forward c2c of float rows (scale 0.5), the
 * chunks taken last to first. */
static int run_fft_reversed(int64_t n, loom_tensor *t, int64_t grain, int64_t block) {
  loom_fft_plan p;
  void *table = make_table(n, -1, LOOM_FLOAT32, &p);
  if (!table) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t rows = t->sizes[0], chunks = (rows + grain - 1) / grain;
  int64_t words = chunks * p.work * block, tsize = p.table_bytes;
  void *ws = malloc((size_t)words * 8);
  loom_tensor ts[4] = {*t, *t, dense(table, LOOM_UINT8, 1, &tsize),
                       dense(ws, LOOM_COMPLEX64, 1, &words)};
  loom_scalar s[4] = {si(n), si(-1), sf(0.5), si(block)};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4, .tensors = ts,
                        .num_scalars = 4, .scalars = s, .range = rows, .grain = grain};
  int rc = 0;
  for (int64_t k = chunks - 1; k >= 0 && !rc; --k)
    rc = loom_kernel_fft_c2c(&a, k * grain, (k + 1) * grain < rows ? (k + 1) * grain : rows);
  free(ws);
  free(table);
  return rc;
}

/* X[k] = sum_j x[j] exp(sign 2 pi i j k / n), x complex (re, im pairs),
 * from a table of the n roots in long double. */
static void naive_dft(const double *x, double *y, int64_t n, int sign) {
  long double *c = malloc(sizeof(long double) * 2 * n);
  for (int64_t m = 0; m < n; ++m) {
    const long double a = 2.0L * 3.14159265358979323846264338327950288L * (long double)m /
                          (long double)n;
    c[2 * m] = cosl(a);
    c[2 * m + 1] = sign * sinl(a);
  }
  for (int64_t k = 0; k < n; ++k) {
    long double sr = 0, si_ = 0;
    for (int64_t j = 0, e = 0; j < n; ++j, e = (e + k) % n) {
      sr += x[2 * j] * c[2 * e] - x[2 * j + 1] * c[2 * e + 1];
      si_ += x[2 * j] * c[2 * e + 1] + x[2 * j + 1] * c[2 * e];
    }
    y[2 * k] = (double)sr;
    y[2 * k + 1] = (double)si_;
  }
  free(c);
}

/* max |a - b| / max |b| over `count` doubles. */
static double rel_err(const double *a, const double *b, int64_t count) {
  double d = 0, m = 1e-300;
  for (int64_t i = 0; i < count; ++i) {
    d = fmax(d, fabs(a[i] - b[i]));
    m = fmax(m, fabs(b[i]));
  }
  return d / m;
}

/* c2c of `batch` rows of length n, the rows strided (every other complex)
 * in a [batch, 2n] buffer, in float or double, against the naive DFT. */
static void check_c2c(int64_t n, int sign, int32_t real, int64_t batch) {
  const int f32 = real == LOOM_FLOAT32;
  double *x = malloc(sizeof(double) * 4 * n * batch), *ref = malloc(sizeof(double) * 2 * n);
  double *got = malloc(sizeof(double) * 2 * n * batch);
  fill(x, 4 * n * batch);
  void *in = malloc((size_t)(4 * n * batch) * (f32 ? 4 : 8));
  void *out = malloc((size_t)(2 * n * batch) * (f32 ? 4 : 8));
  for (int64_t i = 0; i < 4 * n * batch; ++i) {
    if (f32) ((float *)in)[i] = (float)x[i];
    else ((double *)in)[i] = x[i];
    if (f32) x[i] = ((float *)in)[i];
  }
  const int32_t cd = f32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128;
  int64_t sz[2] = {batch, n}, ist[2] = {2 * n, 2};
  loom_tensor ti = tensor(in, cd, 2, sz, ist), to = dense(out, cd, 2, sz);
  CHECK_OK(run_fft(0, n, sign, real, &to, &ti, 1.0, 3, 2));
  double worst = 0;
  for (int64_t b = 0; b < batch; ++b) {
    double *row = malloc(sizeof(double) * 2 * n);
    for (int64_t j = 0; j < n; ++j) {
      row[2 * j] = x[b * 4 * n + 4 * j];
      row[2 * j + 1] = x[b * 4 * n + 4 * j + 1];
    }
    naive_dft(row, ref, n, sign);
    for (int64_t j = 0; j < 2 * n; ++j)
      got[j] = f32 ? ((float *)out)[b * 2 * n + j] : ((double *)out)[b * 2 * n + j];
    worst = fmax(worst, rel_err(got, ref, 2 * n));
    free(row);
  }
  CHECK_MSG(worst < (f32 ? 2e-6 * (4 + log2((double)n)) : 1e-14 * (4 + log2((double)n))),
            "c2c n=%lld sign=%d %s: relative error %g", (long long)n, sign, f32 ? "f32" : "f64",
            worst);
  free(x);
  free(ref);
  free(got);
  free(in);
  free(out);
}

static void test_c2c(void) {
  for (size_t i = 0; i < sizeof kLengths / sizeof *kLengths; ++i)
    for (int sign = -1; sign <= 1; sign += 2) {
      check_c2c(kLengths[i], sign, LOOM_FLOAT32, 2);
      check_c2c(kLengths[i], sign, LOOM_FLOAT64, 2);
    }
}

/* r2c then c2r (scale 1/n) of real rows gives the rows back, and r2c's
 * half spectrum is the DFT's. */
static void test_r2c_c2r(void) {
  for (size_t i = 0; i < sizeof kLengths / sizeof *kLengths; ++i) {
    const int64_t n = kLengths[i], h = n / 2 + 1, batch = 3;
    double *x = malloc(sizeof(double) * n * batch), *spec = malloc(sizeof(double) * 2 * h * batch);
    double *back = malloc(sizeof(double) * n * batch);
    double *cx = malloc(sizeof(double) * 2 * n), *ref = malloc(sizeof(double) * 2 * n);
    fill(x, n * batch);
    int64_t rs[2] = {batch, n}, cs[2] = {batch, h};
    loom_tensor tx = dense(x, LOOM_FLOAT64, 2, rs), ts = dense(spec, LOOM_COMPLEX128, 2, cs);
    loom_tensor tb = dense(back, LOOM_FLOAT64, 2, rs);
    CHECK_OK(run_fft(1, n, -1, LOOM_FLOAT64, &ts, &tx, 1.0, 2, 2));
    double worst = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < n; ++j) {
        cx[2 * j] = x[b * n + j];
        cx[2 * j + 1] = 0;
      }
      naive_dft(cx, ref, n, -1);
      worst = fmax(worst, rel_err(spec + 2 * h * b, ref, 2 * h));
    }
    CHECK_MSG(worst < 1e-13, "r2c n=%lld: %g", (long long)n, worst);
    CHECK_OK(run_fft(2, n, 1, LOOM_FLOAT64, &tb, &ts, 1.0 / (double)n, 3, 3));
    CHECK_MSG(rel_err(back, x, n * batch) < 1e-13, "c2r(r2c) n=%lld: %g", (long long)n,
              rel_err(back, x, n * batch));
    free(x);
    free(spec);
    free(back);
    free(cx);
    free(ref);
  }
}

/* The chunks of one launch give the same bits in any order (as the
 * threads take them), in place (out = in) too; another chunking or
 * blocking stays as accurate. */
static void test_chunking(void) {
  const int64_t n = 360, batch = 7, words = 2 * n * batch;
  float *x = malloc(sizeof(float) * words), *a = malloc(sizeof(float) * words);
  float *b = malloc(sizeof(float) * words), *c = malloc(sizeof(float) * words);
  for (int64_t i = 0; i < words; ++i) x[i] = (float)frand();
  int64_t sz[2] = {batch, n};
  loom_tensor tx = dense(x, LOOM_COMPLEX64, 2, sz), ta = dense(a, LOOM_COMPLEX64, 2, sz);
  loom_tensor tb = dense(b, LOOM_COMPLEX64, 2, sz), tc = dense(c, LOOM_COMPLEX64, 2, sz);
  CHECK_OK(run_fft(0, n, -1, LOOM_FLOAT32, &ta, &tx, 0.5, 4, 4));
  memcpy(b, x, sizeof(float) * words);
  CHECK_OK(run_fft_reversed(n, &tb, 4, 4));
  CHECK(test_same_bits(a, b, sizeof(float) * words));
  CHECK_OK(run_fft(0, n, -1, LOOM_FLOAT32, &tc, &tx, 0.5, 1, 1));
  double worst = 0, big = 0;
  for (int64_t i = 0; i < words; ++i) {
    worst = fmax(worst, fabs((double)a[i] - (double)c[i]));
    big = fmax(big, fabs((double)c[i]));
  }
  CHECK_MSG(worst <= 1e-6 * big, "blocked against single rows: %g of %g", worst, big);
  free(x);
  free(a);
  free(b);
  free(c);
}

/* The baseline build of the rows against the AVX-512 one, both against
 * the naive DFT (they may differ in contraction, not in accuracy). */
static void test_generic_rows(void) {
  TEST_SKIP_IF(!(loom_cpu_features() & LOOM_FEATURE_AVX512F), "no AVX-512 here");
  const int64_t lengths[] = {64, 360, 1009};
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = lengths[i];
    loom_fft_plan p;
    void *table = make_table(n, -1, LOOM_FLOAT64, &p);
    CHECK(table != NULL);
    if (!table) return;
    double *x = malloc(sizeof(double) * 2 * n), *ref = malloc(sizeof(double) * 2 * n);
    double *g = malloc(sizeof(double) * 2 * n), *v = malloc(sizeof(double) * 2 * n);
    double *work = malloc(sizeof(double) * 2 * p.work);
    fill(x, 2 * n);
    naive_dft(x, ref, n, -1);
    int64_t sz[1] = {n};
    loom_tensor tx = dense(x, LOOM_COMPLEX128, 1, sz), tg = dense(g, LOOM_COMPLEX128, 1, sz);
    loom_tensor tv = dense(v, LOOM_COMPLEX128, 1, sz);
    loom_fft_rows r = {.kind = 0, .t = table, .out = &tg, .in = &tx, .scale = 1.0, .work = work,
                       .block = 1};
    CHECK_OK(loom_fft_rows_f64(&r, 0, 1));
    r.out = &tv;
    CHECK_OK(loom_fft_rows_f64_avx512(&r, 0, 1));
    CHECK_MSG(rel_err(g, ref, 2 * n) < 1e-13, "generic n=%lld", (long long)n);
    CHECK_MSG(rel_err(v, ref, 2 * n) < 1e-13, "avx512 n=%lld", (long long)n);
    free(x);
    free(ref);
    free(g);
    free(v);
    free(work);
    free(table);
  }
}

/* The four-step twiddles of (n1, n2) from "fft.twiddles", or NULL; *t
 * describes them. */
static void *make_twiddles(int64_t n1, int64_t n2, int sign, int32_t real, loom_tensor *t,
                           int64_t *numel) {
  *numel = loom_fft_twiddles_numel(n1, n2);
  void *tw = malloc((size_t)*numel * (real == LOOM_FLOAT32 ? 4 : 8));
  *t = dense(tw, real, 1, numel);
  loom_scalar s[3] = {si(n1), si(n2), si(sign)};
  if (run_chunks(loom_kernel_fft_twiddles, t, 1, s, 3, n1, 5)) {
    free(tw);
    return NULL;
  }
  return tw;
}

/* The four-step decomposition of loom/kernels/fft.h (n = n1 n2, `batch`
 * rows): the columns with the twiddles into t[k1][j2], then the rows of t
 * into X[k1 + n1 k2], against the naive DFT; the chunks (one block each,
 * or all rows at once) give the same bits. */
static void check_four_step(int64_t n1, int64_t n2, int sign, int32_t real, int64_t block) {
  const int f32 = real == LOOM_FLOAT32, batch = 2;
  const int64_t n = n1 * n2, es = f32 ? 4 : 8;
  const int32_t cd = f32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128;
  double *x = malloc(sizeof(double) * 2 * n * batch), *ref = malloc(sizeof(double) * 2 * n);
  double *got = malloc(sizeof(double) * 2 * n);
  fill(x, 2 * n * batch);
  void *in = malloc((size_t)(2 * n * batch * es)), *t = malloc((size_t)(2 * n * batch * es));
  void *out[2] = {malloc((size_t)(2 * n * batch * es)), malloc((size_t)(2 * n * batch * es))};
  for (int64_t i = 0; i < 2 * n * batch; ++i) {
    if (f32) ((float *)in)[i] = (float)x[i], x[i] = ((float *)in)[i];
    else ((double *)in)[i] = x[i];
  }
  loom_tensor tw;
  int64_t twn;
  void *twd = make_twiddles(n1, n2, sign, real, &tw, &twn);
  CHECK(twd != NULL);
  for (int g = 0; g < 2; ++g) {
    int64_t csz[3] = {batch, n2, n1}, cst[3] = {n, 1, n2};
    loom_tensor cin = tensor(in, cd, 3, csz, cst), cout = tensor(t, cd, 3, csz, cst);
    CHECK_OK(run_fft_tw(0, n1, sign, real, &cout, &cin, 1.0, g ? batch * n2 : block, block, &tw));
    int64_t rsz[3] = {batch, n1, n2}, rin[3] = {n, n2, 1}, rout[3] = {n, 1, n1};
    loom_tensor tin = tensor(t, cd, 3, rsz, rin), tout = tensor(out[g], cd, 3, rsz, rout);
    CHECK_OK(run_fft(0, n2, sign, real, &tout, &tin, 1.0, g ? batch * n1 : block, block));
  }
  CHECK(test_same_bits(out[0], out[1], (size_t)(2 * n * batch * es)));
  double worst = 0;
  for (int64_t b = 0; b < batch; ++b) {
    naive_dft(x + 2 * n * b, ref, n, sign);
    for (int64_t j = 0; j < 2 * n; ++j)
      got[j] = f32 ? ((float *)out[0])[2 * n * b + j] : ((double *)out[0])[2 * n * b + j];
    worst = fmax(worst, rel_err(got, ref, 2 * n));
  }
  CHECK_MSG(worst < (f32 ? 2e-6 : 1e-14) * (4 + log2((double)n)),
            "four-step %lld x %lld sign=%d %s block %lld: %g", (long long)n1, (long long)n2,
            sign, f32 ? "f32" : "f64", (long long)block, worst);
  free(x);
  free(ref);
  free(got);
  free(in);
  free(t);
  free(out[0]);
  free(out[1]);
  free(twd);
}

static void test_four_step(void) {
  for (int sign = -1; sign <= 1; sign += 2) {
    check_four_step(48, 64, sign, LOOM_FLOAT32, 16);
    check_four_step(48, 64, sign, LOOM_FLOAT64, 8);
    check_four_step(25, 37, sign, LOOM_FLOAT32, 16); /* Bluestein rows, odd blocks */
    check_four_step(16, 24, sign, LOOM_FLOAT64, 3);
  }
}

/* Blocks of one vector's rows (16 floats, 8 doubles; the AVX-512 build
 * transposes them in registers) against the naive DFT, c2c, r2c and c2r of
 * even and odd lengths. */
static void check_vector_blocks(int32_t real, int64_t block) {
  const int f32 = real == LOOM_FLOAT32;
  const int64_t rows = 2 * block + 3, es = f32 ? 4 : 8;
  const int64_t lengths[] = {96, 95, 40};
  for (size_t li = 0; li < 3; ++li) {
    const int64_t n = lengths[li], h = n / 2 + 1;
    double *x = malloc(sizeof(double) * 2 * n * rows), *ref = malloc(sizeof(double) * 2 * n);
    double *cx = malloc(sizeof(double) * 2 * n), *got = malloc(sizeof(double) * 2 * n);
    fill(x, 2 * n * rows);
    void *in = malloc((size_t)(2 * n * rows * es)), *out = malloc((size_t)(2 * n * rows * es));
    void *back = malloc((size_t)(n * rows * es));
    for (int64_t i = 0; i < 2 * n * rows; ++i) {
      if (f32) ((float *)in)[i] = (float)x[i], x[i] = ((float *)in)[i];
      else ((double *)in)[i] = x[i];
    }
    const int32_t cd = f32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128;
    {
      /* c2c of complex rows */
      int64_t sz[2] = {rows, n};
      loom_tensor ti = dense(in, cd, 2, sz), to = dense(out, cd, 2, sz);
      CHECK_OK(run_fft(0, n, -1, real, &to, &ti, 1.0, 2 * block, block));
      double worst = 0;
      for (int64_t b = 0; b < rows; ++b) {
        naive_dft(x + 2 * n * b, ref, n, -1);
        for (int64_t j = 0; j < 2 * n; ++j)
          got[j] = f32 ? ((float *)out)[2 * n * b + j] : ((double *)out)[2 * n * b + j];
        worst = fmax(worst, rel_err(got, ref, 2 * n));
      }
      CHECK_MSG(worst < (f32 ? 2e-6 : 1e-14) * (4 + log2((double)n)),
                "c2c blocks n=%lld: %g", (long long)n, worst);
      /* r2c of the first n reals of each row (rows of 2n reals), then c2r */
      int64_t rsz[2] = {rows, n}, rst[2] = {2 * n, 1}, hsz[2] = {rows, h};
      loom_tensor tr = tensor(in, real, 2, rsz, rst), th = dense(out, cd, 2, hsz);
      CHECK_OK(run_fft(1, n, -1, real, &th, &tr, 1.0, 2 * block, block));
      worst = 0;
      for (int64_t b = 0; b < rows; ++b) {
        for (int64_t j = 0; j < n; ++j) cx[2 * j] = x[2 * n * b + j], cx[2 * j + 1] = 0;
        naive_dft(cx, ref, n, -1);
        for (int64_t j = 0; j < 2 * h; ++j)
          got[j] = f32 ? ((float *)out)[2 * h * b + j] : ((double *)out)[2 * h * b + j];
        worst = fmax(worst, rel_err(got, ref, 2 * h));
      }
      CHECK_MSG(worst < (f32 ? 2e-6 : 1e-14) * (4 + log2((double)n)),
                "r2c blocks n=%lld: %g", (long long)n, worst);
      loom_tensor tb = dense(back, real, 2, rsz);
      CHECK_OK(run_fft(2, n, 1, real, &tb, &th, 1.0 / (double)n, 2 * block, block));
      worst = 0;
      double big = 0;
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t j = 0; j < n; ++j) {
          const double v = f32 ? ((float *)back)[n * b + j] : ((double *)back)[n * b + j];
          worst = fmax(worst, fabs(v - x[2 * n * b + j]));
          big = fmax(big, fabs(x[2 * n * b + j]));
        }
      CHECK_MSG(worst < (f32 ? 2e-6 : 1e-14) * (4 + log2((double)n)) * big,
                "c2r blocks n=%lld: %g", (long long)n, worst);
    }
    free(x);
    free(ref);
    free(cx);
    free(got);
    free(in);
    free(out);
    free(back);
  }
}

static void test_vector_blocks(void) {
  check_vector_blocks(LOOM_FLOAT32, 16);
  check_vector_blocks(LOOM_FLOAT64, 8);
}

/* The baseline build against the AVX-512 one on a block of 16 float rows
 * (the register transposes' path): the same DFT to rounding. */
static void test_generic_block(void) {
  TEST_SKIP_IF(!(loom_cpu_features() & LOOM_FEATURE_AVX512F), "no AVX-512 here");
  const int64_t n = 64, rows = 16;
  loom_fft_plan p;
  void *table = make_table(n, 1, LOOM_FLOAT32, &p);
  CHECK(table != NULL);
  if (!table) return;
  float *x = malloc(sizeof(float) * 2 * n * rows), *g = malloc(sizeof(float) * 2 * n * rows);
  float *v = malloc(sizeof(float) * 2 * n * rows);
  float *work = malloc(sizeof(float) * 2 * p.work * rows);
  for (int64_t i = 0; i < 2 * n * rows; ++i) x[i] = (float)frand();
  int64_t sz[2] = {rows, n};
  loom_tensor tx = dense(x, LOOM_COMPLEX64, 2, sz), tg = dense(g, LOOM_COMPLEX64, 2, sz);
  loom_tensor tv = dense(v, LOOM_COMPLEX64, 2, sz);
  loom_fft_rows r = {.kind = 0, .t = table, .out = &tg, .in = &tx, .scale = 0.25, .work = work,
                     .block = rows};
  CHECK_OK(loom_fft_rows_f32(&r, 0, rows));
  r.out = &tv;
  CHECK_OK(loom_fft_rows_f32_avx512(&r, 0, rows));
  double worst = 0, big = 0;
  for (int64_t i = 0; i < 2 * n * rows; ++i) {
    worst = fmax(worst, fabs((double)g[i] - (double)v[i]));
    big = fmax(big, fabs((double)g[i]));
  }
  CHECK_MSG(worst <= 1e-6 * big, "generic against AVX-512 blocks: %g of %g", worst, big);
  free(x);
  free(g);
  free(v);
  free(work);
  free(table);
}

/* The 2-d r2c of `signals` signals of n2 x n reals through the panels
 * ("fft.r2c_panels" rows in chunks of `rgrain`, "fft.c2c_panels" columns in
 * chunks of `pgrain` panels, last to first when `reversed`) into out
 * (signals x n2 x h complex); the row transforms in blocks of `block`. */
static void panels_2d(int32_t real, const void *x, void *out, int64_t signals, int64_t n2,
                      int64_t n, int64_t P, int64_t block, int64_t rgrain, int64_t pgrain,
                      int reversed) {
  const int f32 = real == LOOM_FLOAT32;
  const int32_t ctype = f32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128;
  const int64_t h = n / 2 + 1, nb = (h + P - 1) / P, panels = signals * nb, csize = f32 ? 8 : 16;
  loom_fft_plan rp, cp;
  void *rt = make_table_for(n, -1, real, 1, &rp), *ct = make_table(n2, -1, real, &cp);
  const int64_t cap = cp.m + 1, pnum = panels * P * cap, rows = signals * n2;
  int64_t rwords = (rows + rgrain - 1) / rgrain * block * rp.work;
  int64_t cwords = (panels + pgrain - 1) / pgrain * P * cap, rb = rp.table_bytes, cb = cp.table_bytes;
  void *pan = malloc((size_t)(pnum * csize)), *rw = malloc((size_t)(rwords * csize));
  void *cw = malloc((size_t)(cwords * csize));
  int64_t isz[3] = {signals, n2, n}, csz[3] = {signals, h, n2}, cst[3] = {n2 * h, 1, h};
  loom_tensor tr[4] = {dense(pan, ctype, 1, &pnum), dense((void *)x, real, 3, isz),
                       dense(rt, LOOM_UINT8, 1, &rb), dense(rw, ctype, 1, &rwords)};
  loom_scalar sr[7] = {si(n), si(-1), sf(1.0), si(block), si(h), si(P), si(cap)};
  CHECK_OK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, rows, rgrain));
  loom_tensor tc[4] = {tensor(out, ctype, 3, csz, cst), dense(pan, ctype, 1, &pnum),
                       dense(ct, LOOM_UINT8, 1, &cb), dense(cw, ctype, 1, &cwords)};
  loom_scalar sc[5] = {si(n2), si(-1), sf(0.5), si(P), si(cap)};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4,
                        .tensors = tc, .num_scalars = 5, .scalars = sc, .range = panels,
                        .grain = pgrain};
  const int64_t chunks = (panels + pgrain - 1) / pgrain;
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t b = (reversed ? chunks - 1 - k : k) * pgrain;
    CHECK_OK(loom_kernel_fft_c2c_panels(&a, b, b + pgrain < panels ? b + pgrain : panels));
  }
  free(pan);
  free(rw);
  free(cw);
  free(rt);
  free(ct);
}

/* The 2-d r2c through panels against the 2-d DFT (naive, by rows then
 * columns, in long double), for float and double, full and partial panels,
 * odd lengths, Bluestein columns (37, 97) and several signals; any chunking
 * of the panels, in any order, gives the same bits; for one signal with
 * panels of a block's width, the bits of the row pass into the result
 * followed by the column pass in place ("fft.r2c", then "fft.c2c" over the
 * columns). */
static void test_panels_2d(void) {
  const int64_t shapes[][3] = {{1, 48, 64}, {2, 37, 33}, {3, 20, 40}, {1, 97, 30}, {1, 16, 2}};
  for (int f = 0; f < 2; ++f)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; ++i) {
      const int32_t real = f ? LOOM_FLOAT64 : LOOM_FLOAT32;
      const int64_t S = shapes[i][0], n2 = shapes[i][1], n = shapes[i][2], h = n / 2 + 1;
      const int64_t P = f ? 8 : 16, es = f ? 8 : 4;
      double *xd = malloc(sizeof(double) * S * n2 * n);
      fill(xd, S * n2 * n);
      void *x = malloc((size_t)(es * S * n2 * n));
      for (int64_t j = 0; j < S * n2 * n; ++j)
        if (f) ((double *)x)[j] = xd[j];
        else ((float *)x)[j] = (float)xd[j], xd[j] = ((float *)x)[j];
      const size_t ob = (size_t)(2 * es * S * n2 * h);
      void *o1 = malloc(ob), *o2 = malloc(ob), *o3 = malloc(ob);
      panels_2d(real, x, o1, S, n2, n, P, P, 2 * P, 1, 0);
      panels_2d(real, x, o2, S, n2, n, P, P, 2 * P, 3, 1);
      CHECK_MSG(test_same_bits(o1, o2, ob), "panels chunking %lld x %lld", (long long)n2,
                (long long)n);
      /* the reference: rows, then columns, times the columns' scale 0.5 */
      double *rowsp = malloc(sizeof(double) * 2 * n2 * n), *col = malloc(sizeof(double) * 4 * n2);
      double *cx = malloc(sizeof(double) * 2 * n), *worst = calloc(2, sizeof(double));
      for (int64_t u = 0; u < S; ++u) {
        for (int64_t j = 0; j < n2; ++j) {
          for (int64_t k = 0; k < n; ++k) cx[2 * k] = xd[(u * n2 + j) * n + k], cx[2 * k + 1] = 0;
          naive_dft(cx, rowsp + 2 * n * j, n, -1);
        }
        for (int64_t k = 0; k < h; ++k) {
          for (int64_t j = 0; j < n2; ++j) {
            col[2 * j] = rowsp[2 * (n * j + k)];
            col[2 * j + 1] = rowsp[2 * (n * j + k) + 1];
          }
          naive_dft(col, col + 2 * n2, n2, -1);
          for (int64_t j = 0; j < 2 * n2; ++j) {
            const int64_t at = 2 * ((u * n2 + j / 2) * h + k) + j % 2;
            const double got = f ? ((double *)o1)[at] : ((float *)o1)[at];
            worst[0] = fmax(worst[0], fabs(got - 0.5 * col[2 * n2 + j]));
            worst[1] = fmax(worst[1], fabs(0.5 * col[2 * n2 + j]));
          }
        }
      }
      CHECK_MSG(worst[0] <= (f ? 1e-13 : 2e-6) * worst[1], "panels %lld x %lld x %lld: %g of %g",
                (long long)S, (long long)n2, (long long)n, worst[0], worst[1]);
      if (S == 1) {
        /* rows into the result, then its columns in place, blocks of P */
        int64_t osz[2] = {n2, h}, csz[2] = {h, n2}, cst[2] = {1, h}, isz[2] = {n2, n};
        loom_tensor to = dense(o3, f ? LOOM_COMPLEX128 : LOOM_COMPLEX64, 2, osz);
        loom_tensor tx = dense(x, real, 2, isz);
        loom_tensor tcol = tensor(o3, f ? LOOM_COMPLEX128 : LOOM_COMPLEX64, 2, csz, cst);
        CHECK_OK(run_fft(1, n, -1, real, &to, &tx, 1.0, 2 * P, P));
        CHECK_OK(run_fft(0, n2, -1, real, &tcol, &tcol, 0.5, P, P));
        CHECK_MSG(test_same_bits(o1, o3, ob), "panels against two passes %lld x %lld",
                  (long long)n2, (long long)n);
      }
      free(xd);
      free(x);
      free(o1);
      free(o2);
      free(o3);
      free(rowsp);
      free(col);
      free(cx);
      free(worst);
    }
}

/* The baseline build of the panels' store against the AVX-512 one (the
 * register transposes of full panels): the same transforms to rounding. */
static void test_generic_panels(void) {
  TEST_SKIP_IF(!(loom_cpu_features() & LOOM_FEATURE_AVX512F), "no AVX-512 here");
  const int64_t n2 = 32, n = 64, h = n / 2 + 1, P = 16, nb = (h + P - 1) / P, cap = n2 + 1;
  loom_fft_plan p;
  void *table = make_table_for(n, -1, LOOM_FLOAT32, 1, &p);
  CHECK(table != NULL);
  if (!table) return;
  float *x = malloc(sizeof(float) * n2 * n), *work = malloc(sizeof(float) * 2 * p.work * P);
  float *g = calloc((size_t)(2 * nb * P * cap), sizeof(float));
  float *v = calloc((size_t)(2 * nb * P * cap), sizeof(float));
  for (int64_t i = 0; i < n2 * n; ++i) x[i] = (float)frand();
  int64_t sz[2] = {n2, n};
  loom_tensor tx = dense(x, LOOM_FLOAT32, 2, sz);
  loom_fft_rows r = {.kind = 1, .t = table, .out = &tx, .in = &tx, .scale = 0.25, .work = work,
                     .block = P, .panels = g, .pw = P, .cap = cap, .h = h};
  CHECK_OK(loom_fft_rows_f32(&r, 0, n2));
  r.panels = v;
  CHECK_OK(loom_fft_rows_f32_avx512(&r, 0, n2));
  double worst = 0, big = 0;
  for (int64_t i = 0; i < 2 * nb * P * cap; ++i) {
    worst = fmax(worst, fabs((double)g[i] - (double)v[i]));
    big = fmax(big, fabs((double)g[i]));
  }
  CHECK_MSG(big > 0 && worst <= 1e-6 * big, "generic against AVX-512 panels: %g of %g", worst,
            big);
  free(x);
  free(work);
  free(g);
  free(v);
  free(table);
}

/* Panels' arguments out of their contract are refused. */
static void test_bad_panels(void) {
  const int64_t n2 = 8, n = 16, h = 9, P = 16, cap = n2 + 1, pnum = P * cap;
  loom_fft_plan rp, cp;
  void *rt = make_table_for(n, -1, LOOM_FLOAT32, 1, &rp), *ct = make_table(n2, -1, LOOM_FLOAT32, &cp);
  float *x = calloc((size_t)(n2 * n), sizeof(float)), *o = calloc((size_t)(2 * n2 * h), sizeof(float));
  float *pan = calloc((size_t)(2 * pnum), sizeof(float)), *w = calloc((size_t)(2 * P * rp.work), sizeof(float));
  int64_t isz[2] = {n2, n}, rb = rp.table_bytes, cb = cp.table_bytes, ww = P * rp.work;
  int64_t short_pnum = pnum - 1, csz[2] = {h, n2}, cst[2] = {1, h};
  loom_tensor tr[4] = {dense(pan, LOOM_COMPLEX64, 1, &pnum), dense(x, LOOM_FLOAT32, 2, isz),
                       dense(rt, LOOM_UINT8, 1, &rb), dense(w, LOOM_COMPLEX64, 1, &ww)};
  loom_scalar sr[7] = {si(n), si(-1), sf(1.0), si(P), si(h), si(P), si(cap)};
  CHECK_OK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, n2, n2));
  sr[6] = si(n2 - 1); /* cap below the columns' length */
  CHECK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, n2, n2) == LOOM_ERROR_INVALID_ARGUMENT);
  sr[6] = si(cap);
  sr[5] = si(LOOM_FFT_MAX_BLOCK + 1);
  CHECK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, n2, n2) == LOOM_ERROR_INVALID_ARGUMENT);
  sr[5] = si(P);
  sr[4] = si(h + 1); /* more outputs than the half spectrum */
  CHECK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, n2, n2) == LOOM_ERROR_INVALID_ARGUMENT);
  sr[4] = si(h);
  tr[0] = dense(pan, LOOM_COMPLEX64, 1, &short_pnum);
  CHECK(run_chunks(loom_kernel_fft_r2c_panels, tr, 4, sr, 7, n2, n2) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor tc[4] = {tensor(o, LOOM_COMPLEX64, 2, csz, cst), dense(pan, LOOM_COMPLEX64, 1, &pnum),
                       dense(ct, LOOM_UINT8, 1, &cb), dense(w, LOOM_COMPLEX64, 1, &ww)};
  loom_scalar sc[5] = {si(n2), si(-1), sf(1.0), si(P), si(cap)};
  CHECK_OK(run_chunks(loom_kernel_fft_c2c_panels, tc, 4, sc, 5, 1, 1));
  CHECK(run_chunks(loom_kernel_fft_c2c_panels, tc, 4, sc, 5, 2, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  tc[2] = dense(rt, LOOM_UINT8, 1, &rb); /* a table of real signals */
  CHECK(run_chunks(loom_kernel_fft_c2c_panels, tc, 4, sc, 5, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  tc[2] = dense(ct, LOOM_UINT8, 1, &cb);
  sc[4] = si(n2 - 1);
  CHECK(run_chunks(loom_kernel_fft_c2c_panels, tc, 4, sc, 5, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  free(rt);
  free(ct);
  free(x);
  free(o);
  free(pan);
  free(w);
}

/* Bad arguments are refused with a status, never a crash. */
static void test_bad_arguments(void) {
  loom_fft_plan p;
  CHECK(make_table(0, -1, LOOM_FLOAT32, &p) == NULL);
  CHECK(make_table(8, 0, LOOM_FLOAT32, &p) == NULL);
  CHECK(make_table(8, -1, LOOM_INT32, &p) == NULL);
  double x[16] = {0}, y[16];
  int64_t sz[1] = {8}, bad[1] = {4};
  loom_tensor tx = dense(x, LOOM_COMPLEX128, 1, sz), ty = dense(y, LOOM_COMPLEX128, 1, bad);
  CHECK(run_fft(0, 8, -1, LOOM_FLOAT64, &ty, &tx, 1.0, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor tf = dense(y, LOOM_COMPLEX64, 1, sz);
  {
    /* a c2c launch with a table of real signals is refused */
    loom_fft_plan p;
    void *table = make_table_for(8, -1, LOOM_FLOAT64, 1, &p);
    int64_t tsize = p.table_bytes, words = p.work;
    double ws[64];
    loom_tensor t[4] = {ty, tx, dense(table, LOOM_UINT8, 1, &tsize),
                        dense(ws, LOOM_COMPLEX128, 1, &words)};
    t[0] = dense(y, LOOM_COMPLEX128, 1, sz);
    loom_scalar s[3] = {si(8), si(-1), sf(1.0)};
    CHECK(run_chunks(loom_kernel_fft_c2c, t, 4, s, 3, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
    free(table);
  }
  CHECK(run_fft(0, 8, -1, LOOM_FLOAT64, &tf, &tx, 1.0, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  {
    /* twiddles: too short a table, or with r2c, are refused */
    int64_t n1 = 8, n2 = 4, numel;
    loom_tensor tw;
    void *twd = make_twiddles(n1, n2, -1, LOOM_FLOAT64, &tw, &numel);
    CHECK(twd != NULL);
    double a[64] = {0}, b[64];
    int64_t csz[2] = {n2, n1}, cst[2] = {1, n2};
    loom_tensor ca = tensor(a, LOOM_COMPLEX128, 2, csz, cst), cb = tensor(b, LOOM_COMPLEX128, 2, csz, cst);
    CHECK_OK(run_fft_tw(0, n1, -1, LOOM_FLOAT64, &cb, &ca, 1.0, 4, 4, &tw));
    loom_tensor shorter = tw;
    shorter.sizes[0] = numel - 1;
    CHECK(run_fft_tw(0, n1, -1, LOOM_FLOAT64, &cb, &ca, 1.0, 4, 4, &shorter) ==
          LOOM_ERROR_INVALID_ARGUMENT);
    int64_t rsz[2] = {n2, n1}, hsz[2] = {n2, n1 / 2 + 1};
    loom_tensor ra = dense(a, LOOM_FLOAT64, 2, rsz), hb = dense(b, LOOM_COMPLEX128, 2, hsz);
    CHECK(run_fft_tw(1, n1, -1, LOOM_FLOAT64, &hb, &ra, 1.0, 4, 4, &tw) ==
          LOOM_ERROR_INVALID_ARGUMENT);
    loom_scalar s[3] = {si(n1), si(n2), si(-1)};
    CHECK(run_chunks(loom_kernel_fft_twiddles, &shorter, 1, s, 3, n1, 1) ==
          LOOM_ERROR_INVALID_ARGUMENT);
    free(twd);
  }
  CHECK(run_fft(0, 8, -1, LOOM_FLOAT64, &tx, &tx, 1.0, 1, LOOM_FFT_MAX_BLOCK + 1) ==
        LOOM_ERROR_INVALID_ARGUMENT);
}

int main(void) {
  srand(7);
  RUN_TEST(test_c2c);
  RUN_TEST(test_r2c_c2r);
  RUN_TEST(test_chunking);
  RUN_TEST(test_generic_rows);
  RUN_TEST(test_four_step);
  RUN_TEST(test_vector_blocks);
  RUN_TEST(test_generic_block);
  RUN_TEST(test_panels_2d);
  RUN_TEST(test_generic_panels);
  RUN_TEST(test_bad_panels);
  RUN_TEST(test_bad_arguments);
  TEST_MAIN_END();
}
