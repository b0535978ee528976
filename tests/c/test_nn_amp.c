/* Gradient scaling's kernels: the unscale with its inf/NaN check (every
 * float dtype, dense and strided, chunked) and the scale update. */
#include <math.h>
#include <stdint.h>

#include "kernel_test_util.h"
#include "kernels/base/dtype.h"
#include "kernels/nn/amp_scale.h"

enum { N = 53 };

static int unscale(loom_tensor g, float *found, float inv, int64_t grain) {
  int64_t one = 1, unit = 1;
  loom_tensor t[3] = {g, tensor(found, LOOM_FLOAT32, 1, &one, &unit),
                      tensor(&inv, LOOM_FLOAT32, 1, &one, &unit)};
  return run_chunks(loom_amp_check_and_unscale, t, 3, NULL, 0, loom_tensor_numel(&g), grain);
}

static void test_f32(void) {
  float x[N], ref[N];
  const float inv = 1.0f / 3072.0f;
  for (int i = 0; i < N; ++i) x[i] = (float)(frand() * 1e4);
  for (int i = 0; i < N; ++i) ref[i] = x[i] * inv;
  int64_t n = N;
  float found = 0.0f;
  CHECK(unscale(dense(x, LOOM_FLOAT32, 1, &n), &found, inv, 8) == 0);
  CHECK(found == 0.0f);
  int same = 1;
  for (int i = 0; i < N; ++i) same &= x[i] == ref[i];
  CHECK(same);
  /* one inf in the last chunk: found, and every finite element still scaled */
  x[N - 1] = INFINITY;
  CHECK(unscale(dense(x, LOOM_FLOAT32, 1, &n), &found, 2.0f, 8) == 0);
  CHECK(found == 1.0f);
  CHECK(x[0] == ref[0] * 2.0f && isinf(x[N - 1]));
  /* found_inf is never cleared by the kernel */
  x[N - 1] = 1.0f;
  CHECK(unscale(dense(x, LOOM_FLOAT32, 1, &n), &found, 1.0f, 8) == 0);
  CHECK(found == 1.0f);
}

static void test_f32_strided(void) {
  /* a 4x5 view with row stride 13 and column stride 2 of a larger buffer:
   * only its elements change */
  float buf[64], orig[64];
  for (int i = 0; i < 64; ++i) buf[i] = orig[i] = (float)(i + 1);
  int64_t sizes[2] = {4, 5}, strides[2] = {13, 2};
  float found = 0.0f;
  buf[13 * 3 + 2 * 4] = NAN;
  CHECK(unscale(tensor(buf, LOOM_FLOAT32, 2, sizes, strides), &found, 0.5f, 3) == 0);
  CHECK(found == 1.0f);
  int ok = 1;
  for (int i = 0; i < 64; ++i) {
    const int r = i / 13, c = i % 13;
    const int inside = r < 4 && c % 2 == 0 && c / 2 < 5;
    if (i == 13 * 3 + 2 * 4) ok &= isnan(buf[i]);
    else ok &= buf[i] == (inside ? orig[i] * 0.5f : orig[i]);
  }
  CHECK(ok);
}

static void test_f64(void) {
  double x[N];
  const float inv = 1.0f / 1000.0f; /* not exact: the double product uses the float value */
  for (int i = 0; i < N; ++i) x[i] = frand();
  double ref[N];
  for (int i = 0; i < N; ++i) ref[i] = x[i] * (double)inv;
  int64_t n = N;
  float found = 0.0f;
  CHECK(unscale(dense(x, LOOM_FLOAT64, 1, &n), &found, inv, 7) == 0);
  int same = 1;
  for (int i = 0; i < N; ++i) same &= x[i] == ref[i];
  CHECK(same && found == 0.0f);
  x[3] = -INFINITY;
  CHECK(unscale(dense(x, LOOM_FLOAT64, 1, &n), &found, inv, 7) == 0);
  CHECK(found == 1.0f);
}

static void test_half(int32_t dtype) {
  uint16_t x[N], ref[N];
  const float inv = 1.0f / 65536.0f;
  for (int i = 0; i < N; ++i) {
    const float v = (float)(frand() * 60000.0);
    x[i] = dtype == LOOM_BFLOAT16 ? loom_f32_to_bf16(v) : loom_f32_to_f16(v);
    const float w = dtype == LOOM_BFLOAT16 ? loom_bf16_to_f32(x[i]) : loom_f16_to_f32(x[i]);
    ref[i] = dtype == LOOM_BFLOAT16 ? loom_f32_to_bf16(w * inv) : loom_f32_to_f16(w * inv);
  }
  int64_t n = N;
  float found = 0.0f;
  CHECK(unscale(dense(x, dtype, 1, &n), &found, inv, 16) == 0);
  int same = 1;
  for (int i = 0; i < N; ++i) same &= x[i] == ref[i];
  CHECK(same && found == 0.0f);
  /* fp16 overflow from a scaled loss is the usual case: the inf bit pattern */
  x[20] = dtype == LOOM_BFLOAT16 ? 0x7f80 : 0x7c00;
  CHECK(unscale(dense(x, dtype, 1, &n), &found, 1.0f, 16) == 0);
  CHECK(found == 1.0f && x[0] == ref[0]);
}

static void test_f16(void) { test_half(LOOM_FLOAT16); }
static void test_bf16(void) { test_half(LOOM_BFLOAT16); }

static void test_bad_dtype(void) {
  int32_t x[4] = {0};
  int64_t n = 4;
  float found = 0.0f;
  CHECK(unscale(dense(x, LOOM_INT32, 1, &n), &found, 1.0f, 4) == LOOM_ERROR_INVALID_ARGUMENT);
}

static int update(float *scale, int32_t *tracker, float found, double growth, double backoff,
                  int64_t interval) {
  int64_t one = 1, unit = 1;
  loom_tensor t[3] = {tensor(scale, LOOM_FLOAT32, 1, &one, &unit),
                      tensor(tracker, LOOM_INT32, 1, &one, &unit),
                      tensor(&found, LOOM_FLOAT32, 1, &one, &unit)};
  loom_scalar s[3] = {sf(growth), sf(backoff), si(interval)};
  return run_chunks(loom_amp_update_scale, t, 3, s, 3, 1, 1);
}

static void test_update_scale(void) {
  float scale = 65536.0f;
  int32_t tracker = 0;
  /* backoff; NaN in found_inf counts as found */
  CHECK(update(&scale, &tracker, 1.0f, 2.0, 0.5, 3) == 0);
  CHECK(scale == 32768.0f && tracker == 0);
  CHECK(update(&scale, &tracker, NAN, 2.0, 0.5, 3) == 0);
  CHECK(scale == 16384.0f && tracker == 0);
  /* growth after three clean steps, then the tracker starts over */
  for (int i = 1; i <= 2; ++i) {
    CHECK(update(&scale, &tracker, 0.0f, 2.0, 0.5, 3) == 0);
    CHECK(scale == 16384.0f && tracker == i);
  }
  CHECK(update(&scale, &tracker, 0.0f, 2.0, 0.5, 3) == 0);
  CHECK(scale == 32768.0f && tracker == 0);
  /* the products are taken in double, then rounded to float */
  scale = 3.0f;
  CHECK(update(&scale, &tracker, 1.0f, 2.0, 0.1, 3) == 0);
  CHECK(scale == (float)(3.0 * 0.1));
  tracker = 0;
  CHECK(update(&scale, &tracker, 0.0f, 1.1, 0.5, 1) == 0);
  CHECK(scale == (float)((double)(float)(3.0 * 0.1) * 1.1) && tracker == 0);
  /* growth that would overflow fp32 keeps the scale, and resets the tracker */
  scale = 3e38f;
  tracker = 0;
  CHECK(update(&scale, &tracker, 0.0f, 2.0, 0.5, 1) == 0);
  CHECK(scale == 3e38f && tracker == 0);
  /* the tracker at INT32_MAX wraps instead of overflowing */
  tracker = INT32_MAX;
  CHECK(update(&scale, &tracker, 0.0f, 2.0, 0.5, 2000) == 0);
  CHECK(tracker == INT32_MIN && scale == 3e38f);
}

int main(void) {
  srand(7);
  RUN_TEST(test_f32);
  RUN_TEST(test_f32_strided);
  RUN_TEST(test_f64);
  RUN_TEST(test_f16);
  RUN_TEST(test_bf16);
  RUN_TEST(test_bad_dtype);
  RUN_TEST(test_update_scale);
  TEST_MAIN_END();
}
