/* tests/c/test_kernels_random.c — the Philox generator against the
 * Random123 known-answer vectors, and the random kernels: values depend only
 * on (seed, offset, element index), whatever the chunking; ranges and
 * strided outputs. Kernels are called directly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/random/random.h"
#include "loom/status.h"
#include "test_util.h"

static void test_philox_known_answers(void) {
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t k = 0; k < sizeof kat / sizeof kat[0]; ++k) {
    uint64_t c0 = ((uint64_t)kat[k].ctr[1] << 32) | kat[k].ctr[0];
    uint64_t c1 = ((uint64_t)kat[k].ctr[3] << 32) | kat[k].ctr[2];
    uint64_t seed = ((uint64_t)kat[k].key[1] << 32) | kat[k].key[0];
    uint32_t out[4];
    loom_philox4x32(seed, c0, c1, out);
    for (int i = 0; i < 4; ++i)
      CHECK_MSG(out[i] == kat[k].out[i], "vector %zu word %d: %08x != %08x", k, i,
            out[i], kat[k].out[i]);
  }
}

static loom_tensor vec(void *data, int32_t dtype, int64_t n, int64_t stride) {
  loom_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.rank = 1;
  t.sizes[0] = n;
  t.strides[0] = stride;
  return t;
}

/* Runs fn over [0, n) in chunks of `grain`. */
static int run_chunks(loom_kernel_fn fn, const loom_tensor *t, int nt,
                      const loom_scalar *s, int ns, int64_t n, int64_t grain) {
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                        .num_tensors = (uint32_t)nt, .tensors = t,
                        .num_scalars = (uint32_t)ns, .scalars = s,
                        .range = n, .grain = grain};
  for (int64_t b = 0; b < n; b += grain) {
    int st = fn(&a, b, b + grain < n ? b + grain : n);
    if (st) return st;
  }
  return 0;
}

static void test_chunking_independence(void) {
  enum { N = 10007 };
  static float a[N], b[N];
  loom_scalar s[4] = {{.u = 77}, {.u = 1000}, {.f = -2.0}, {.f = 3.0}};
  loom_tensor ta = vec(a, LOOM_FLOAT32, N, 1), tb = vec(b, LOOM_FLOAT32, N, 1);
  CHECK_MSG(run_chunks(loom_kernel_uniform, &ta, 1, s, 4, N, N) == 0, "uniform");
  CHECK_MSG(run_chunks(loom_kernel_uniform, &tb, 1, s, 4, N, 333) == 0, "uniform");
  CHECK_MSG(memcmp(a, b, sizeof a) == 0, "uniform depends on the chunking");
  for (int i = 0; i < N; ++i) CHECK_MSG(a[i] >= -2.0f && a[i] < 3.0f, "uniform out of range: %g", a[i]);
  /* The offset counts Philox blocks; a float32 element uses one word, so
   * element i at offset o+1 is element i+4 at offset o. */
  s[1].u = 1001;
  CHECK_MSG(run_chunks(loom_kernel_uniform, &tb, 1, s, 4, N, 1000) == 0, "uniform");
  CHECK_MSG(memcmp(a + 4, b, sizeof(float) * (N - 4)) == 0, "offset does not shift the stream");
}

static void test_kernels_and_strides(void) {
  enum { N = 4096 };
  static double d[2 * N];
  static int64_t iv[N];
  static uint8_t flags[N];
  loom_scalar s[4] = {{.u = 5}, {.u = 0}, {.f = 1.0}, {.f = 2.0}};
  /* normal into every other element; the gaps stay untouched */
  for (int i = 0; i < 2 * N; ++i) d[i] = -123.0;
  loom_tensor t = vec(d, LOOM_FLOAT64, N, 2);
  CHECK_MSG(run_chunks(loom_kernel_normal, &t, 1, s, 4, N, 500) == 0, "normal");
  double mean = 0, var = 0;
  for (int i = 0; i < N; ++i) mean += d[2 * i];
  mean /= N;
  for (int i = 0; i < N; ++i) var += (d[2 * i] - mean) * (d[2 * i] - mean);
  var /= N;
  CHECK_MSG(fabs(mean - 1.0) < 0.15 && fabs(sqrt(var) - 2.0) < 0.15, "normal moments %g %g", mean, var);
  for (int i = 0; i < N; ++i) CHECK_MSG(d[2 * i + 1] == -123.0, "stride gap written");

  loom_scalar r[4] = {{.u = 9}, {.u = 0}, {.i = -3}, {.u = 7}};
  loom_tensor ti = vec(iv, LOOM_INT64, N, 1);
  CHECK_MSG(run_chunks(loom_kernel_random, &ti, 1, r, 4, N, 1024) == 0, "random");
  int seen[7] = {0};
  for (int i = 0; i < N; ++i) {
    CHECK_MSG(iv[i] >= -3 && iv[i] < 4, "random out of range: %lld", (long long)iv[i]);
    if (iv[i] >= -3 && iv[i] < 4) seen[iv[i] + 3] = 1;
  }
  for (int k = 0; k < 7; ++k) CHECK_MSG(seen[k], "random never drew %d", k - 3);

  loom_scalar p[3] = {{.u = 11}, {.u = 0}, {.f = 0.25}};
  loom_tensor tf = vec(flags, LOOM_BOOL, N, 1);
  CHECK_MSG(run_chunks(loom_kernel_bernoulli, &tf, 1, p, 3, N, 100) == 0, "bernoulli");
  int ones = 0;
  for (int i = 0; i < N; ++i) ones += flags[i];
  CHECK_MSG(fabs(ones / (double)N - 0.25) < 0.03, "bernoulli rate %g", ones / (double)N);

  loom_scalar e[3] = {{.u = 13}, {.u = 0}, {.f = 4.0}};
  t = vec(d, LOOM_FLOAT64, N, 1);
  CHECK_MSG(run_chunks(loom_kernel_exponential, &t, 1, e, 3, N, 4096) == 0, "exponential");
  mean = 0;
  for (int i = 0; i < N; ++i) {
    CHECK_MSG(d[i] >= 0, "exponential negative");
    mean += d[i];
  }
  CHECK_MSG(fabs(mean / N - 0.25) < 0.03, "exponential mean %g", mean / N);

  /* integer outputs are refused by the floating-only kernels */
  CHECK_MSG(run_chunks(loom_kernel_uniform, &ti, 1, s, 4, N, N) == LOOM_ERROR_INVALID_ARGUMENT,
        "uniform accepted an int64 output");
}

/* The Box-Muller transform: both builds give the same bits, within 1e-11
 * of the C library's radius, sine and cosine; every quadrant. */
/* A launch given one tensor more than its kernel lists reads the seed and
 * base offset from that state cell at run time (graph replays):
 * seed = cell[0], offset = cell[1] + scalars[1]; scalars[0] is ignored. */
static void test_state_cell(void) {
  enum { N = 777 };
  static float want[N], got[N];
  static double dwant[N], dgot[N];
  static uint8_t mwant[N], mgot[N];
  static float p[N];
  for (int i = 0; i < N; ++i) p[i] = (float)i / N;
  const loom_tensor tw = vec(want, LOOM_FLOAT32, N, 1), tg = vec(got, LOOM_FLOAT32, N, 1);
  /* Eager: seed 12345, offset 40 + 9. */
  loom_scalar s[4] = {{.u = 12345}, {.u = 49}, {.f = 0.0}, {.f = 1.0}};
  CHECK_OK(run_chunks(loom_kernel_uniform, &tw, 1, s, 4, N, N));
  /* The cell, strided (every other int64): [12345, 40]; the intra offset 9. */
  int64_t cell[4] = {12345, -1, 40, -1};
  loom_tensor t2[2] = {tg, vec(cell, LOOM_INT64, 2, 2)};
  s[0].u = 999; /* ignored */
  s[1].u = 9;
  CHECK_OK(run_chunks(loom_kernel_uniform, t2, 2, s, 4, N, 100));
  CHECK_MSG(memcmp(want, got, sizeof want) == 0, "uniform from the state cell");
  /* A new cell content changes the draw: the value is read when it runs. */
  cell[2] = 41;
  CHECK_OK(run_chunks(loom_kernel_uniform, t2, 2, s, 4, N, N));
  CHECK_MSG(memcmp(want + 4, got, sizeof(float) * (N - 4)) == 0, "cell offset not read at run time");
  /* float64 normals and a tensor-p Bernoulli, each against its eager launch. */
  const loom_scalar se[4] = {{.u = 12345}, {.u = 50}, {.f = 1.0}, {.f = 2.0}};
  CHECK_OK(run_chunks(loom_kernel_normal, (loom_tensor[]){vec(dwant, LOOM_FLOAT64, N, 1)}, 1,
                      se, 4, N, N));
  CHECK_OK(run_chunks(loom_kernel_normal,
                      (loom_tensor[]){vec(dgot, LOOM_FLOAT64, N, 1), vec(cell, LOOM_INT64, 2, 2)},
                      2, (loom_scalar[]){{.u = 0}, {.u = 9}, {.f = 1.0}, {.f = 2.0}}, 4, N, 64));
  CHECK_MSG(memcmp(dwant, dgot, sizeof dwant) == 0, "normal from the state cell");
  const loom_tensor tp = vec(p, LOOM_FLOAT32, N, 1);
  CHECK_OK(run_chunks(loom_kernel_bernoulli_tensor,
                      (loom_tensor[]){vec(mwant, LOOM_BOOL, N, 1), tp}, 2, se, 2, N, N));
  CHECK_OK(run_chunks(loom_kernel_bernoulli_tensor,
                      (loom_tensor[]){vec(mgot, LOOM_BOOL, N, 1), tp, vec(cell, LOOM_INT64, 2, 2)},
                      3, (loom_scalar[]){{.u = 0}, {.u = 9}}, 2, N, 50));
  CHECK_MSG(memcmp(mwant, mgot, sizeof mwant) == 0, "bernoulli_tensor from the state cell");
  /* A cell that is not two int64s, or a tensor too many: refused. */
  loom_tensor bad[2] = {tg, vec(cell, LOOM_INT32, 2, 1)};
  CHECK(run_chunks(loom_kernel_uniform, bad, 2, s, 4, N, N) == LOOM_ERROR_INVALID_ARGUMENT);
  bad[1] = vec(cell, LOOM_INT64, 1, 1);
  CHECK(run_chunks(loom_kernel_uniform, bad, 2, s, 4, N, N) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_tensor three[3] = {tg, vec(cell, LOOM_INT64, 2, 2), vec(cell, LOOM_INT64, 2, 2)};
  CHECK(run_chunks(loom_kernel_uniform, three, 3, s, 4, N, N) == LOOM_ERROR_INVALID_ARGUMENT);
}

static void test_box_muller(void) {
  enum { N = 1001 };
  static double u[N], a[N], r[2][N], s[2][N], c[2][N];
  for (int i = 0; i < N; ++i) {
    u[i] = i == 0 ? 0x1p-53 : (double)i / N;
    a[i] = 6.283185307179586 * (double)((i * 37) % N) / N;
  }
  loom_box_muller(u, a, N, r[0], s[0], c[0]);
  loom_box_muller_avx512(u, a, N, r[1], s[1], c[1]);
  CHECK_MSG(memcmp(r[0], r[1], sizeof r[0]) == 0 && memcmp(s[0], s[1], sizeof s[0]) == 0 &&
            memcmp(c[0], c[1], sizeof c[0]) == 0,
        "box-muller builds differ");
  double worst = 0.0;
  for (int i = 0; i < N; ++i) {
    const double rr = sqrt(-2.0 * log(u[i]));
    worst = fmax(worst, rr > 0 ? fabs(r[0][i] - rr) / rr : fabs(r[0][i]));
    worst = fmax(worst, fabs(s[0][i] - sin(a[i])));
    worst = fmax(worst, fabs(c[0][i] - cos(a[i])));
  }
  CHECK_MSG(worst < 1e-11, "box-muller error %g", worst);
}

int main(void) {
  RUN_TEST(test_philox_known_answers);
  RUN_TEST(test_chunking_independence);
  RUN_TEST(test_kernels_and_strides);
  RUN_TEST(test_box_muller);
  RUN_TEST(test_state_cell);
  TEST_MAIN_END();
}
