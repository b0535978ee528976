/* Copy, cast and fill kernels against scalar references. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/base/copy.h"
#include "kernels/base/dtype.h"
#include "kernels/base/fill.h"
#include "kernel_test_util.h"
#include "test_util.h"


static loom_tensor tensor2d(void *data, int32_t dtype, int64_t r, int64_t c,
                            int64_t sr, int64_t sc) {
  loom_tensor t = {.data = data, .dtype = dtype, .rank = 2};
  t.sizes[0] = r; t.sizes[1] = c; t.strides[0] = sr; t.strides[1] = sc;
  return t;
}

static void test_half_conversions(void) {
  int bad16 = 0, badbf = 0;
  for (uint32_t h = 0; h < 65536; ++h) { /* every half survives a round trip */
    float f = loom_f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    if (loom_f32_to_f16(f) != h) ++bad16;
  }
  CHECK(bad16 == 0);
  /* float -> half rounding agrees with the compiler's _Float16. */
  srand(1);
  int badround = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
    float f;
    memcpy(&f, &bits, 4);
    if (isnan(f)) continue;
    _Float16 ref = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &ref, 2);
    if (loom_f32_to_f16(f) != rb) ++badround;
  }
  CHECK(badround == 0);
  /* bf16: ties round to even, NaN stays NaN. */
  CHECK(loom_f32_to_bf16(1.0f) == 0x3f80);
  float tie;
  uint32_t tb = 0x3f808000u; /* exactly halfway between 0x3f80 and 0x3f81 */
  memcpy(&tie, &tb, 4);
  CHECK(loom_f32_to_bf16(tie) == 0x3f80);
  tb = 0x3f818000u;
  memcpy(&tie, &tb, 4);
  CHECK(loom_f32_to_bf16(tie) == 0x3f82);
  CHECK(isnan(loom_bf16_to_f32(loom_f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = loom_bf16_to_f32((uint16_t)h);
    if (!isnan(f) && loom_f32_to_bf16(f) != h) ++badbf;
  }
  CHECK(badbf == 0);
}

static void test_transpose_copy(void) {
  enum { R = 37, C = 53 };
  float src[R * C], dst[C * R];
  for (int i = 0; i < R * C; ++i) src[i] = (float)i;
  /* dst (C x R, contiguous) = src^T: src viewed with swapped strides. */
  loom_tensor t[2] = {tensor2d(dst, LOOM_FLOAT32, C, R, R, 1),
                      tensor2d(src, LOOM_FLOAT32, C, R, 1, C)};
  CHECK(run_chunks(loom_kernel_copy, t, 2, NULL, 0, C * R, 100) == 0);
  int bad = 0;
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < R; ++j) bad += dst[i * R + j] != src[j * C + i];
  CHECK(bad == 0);
}

static void test_broadcast_cast(void) {
  enum { R = 5, C = 300 };
  int64_t row[C];
  for (int j = 0; j < C; ++j) row[j] = j - 150;
  uint16_t out[R * C];
  double back[R * C];
  loom_tensor t[2] = {tensor2d(out, LOOM_BFLOAT16, R, C, C, 1),
                      tensor2d(row, LOOM_INT64, R, C, 0, 1)};
  CHECK(run_chunks(loom_kernel_copy, t, 2, NULL, 0, R * C, 7) == 0);
  loom_tensor u[2] = {tensor2d(back, LOOM_FLOAT64, R, C, C, 1),
                      tensor2d(out, LOOM_BFLOAT16, R, C, C, 1)};
  CHECK(run_chunks(loom_kernel_copy, u, 2, NULL, 0, R * C, 64) == 0);
  int bad = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) bad += back[i * C + j] != (double)(j - 150);
  CHECK(bad == 0);
  /* float -> uint8 goes through int64 (negative values wrap, not UB). */
  float f[3] = {-1.0f, 255.9f, 3.5f};
  uint8_t b[3];
  loom_tensor v[2] = {tensor2d(b, LOOM_UINT8, 1, 3, 3, 1),
                      tensor2d(f, LOOM_FLOAT32, 1, 3, 3, 1)};
  CHECK(run_chunks(loom_kernel_copy, v, 2, NULL, 0, 3, 3) == 0);
  CHECK(b[0] == 255 && b[1] == 255 && b[2] == 3);
  /* anything -> bool is "nonzero". */
  double d[3] = {0.0, -0.5, 2.0};
  uint8_t bo[3];
  loom_tensor w[2] = {tensor2d(bo, LOOM_BOOL, 1, 3, 3, 1),
                      tensor2d(d, LOOM_FLOAT64, 1, 3, 3, 1)};
  CHECK(run_chunks(loom_kernel_copy, w, 2, NULL, 0, 3, 3) == 0);
  CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1);
}

static void test_fill(void) {
  enum { R = 9, C = 11 };
  int32_t buf[R * C];
  memset(buf, 0, sizeof buf);
  /* every other column */
  loom_tensor t = tensor2d(buf, LOOM_INT32, R, (C + 1) / 2, C, 2);
  loom_scalar s = {.i = -7};
  CHECK(run_chunks(loom_kernel_fill, &t, 1, &s, 1, R * ((C + 1) / 2), 4) == 0);
  int bad = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) bad += buf[i * C + j] != (j % 2 == 0 ? -7 : 0);
  CHECK(bad == 0);
  uint16_t h[4];
  loom_tensor th = tensor2d(h, LOOM_FLOAT16, 2, 2, 2, 1);
  loom_scalar sf = {.f = 0.1};
  CHECK(run_chunks(loom_kernel_fill, &th, 1, &sf, 1, 4, 4) == 0);
  _Float16 ref = (_Float16)(float)0.1;
  uint16_t rb;
  memcpy(&rb, &ref, 2);
  CHECK(h[0] == rb && h[3] == rb);
  /* contiguous runs of one repeated byte (0, -1) take memset, others
   * (-0.0) the typed loop; neighbours stay untouched */
  enum { N = 1000 };
  static float fb[N + 2];
  const double values[3] = {0.0, -0.0, 2.5};
  for (int v = 0; v < 3; ++v) {
    for (int i = 0; i < N + 2; ++i) fb[i] = 7.0f;
    loom_tensor tf = tensor2d(fb + 1, LOOM_FLOAT32, 1, N, N, 1);
    loom_scalar sv = {.f = values[v]};
    CHECK(run_chunks(loom_kernel_fill, &tf, 1, &sv, 1, N, 300) == 0);
    const float want = (float)values[v];
    int wrong = fb[0] != 7.0f || fb[N + 1] != 7.0f;
    for (int i = 1; i <= N; ++i) wrong += memcmp(&fb[i], &want, sizeof want) != 0;
    CHECK(wrong == 0);
  }
  int64_t ib[N];
  loom_tensor ti = tensor2d(ib, LOOM_INT64, 1, N, N, 1);
  loom_scalar si = {.i = -1};
  CHECK(run_chunks(loom_kernel_fill, &ti, 1, &si, 1, N, 300) == 0);
  int wrong_i = 0;
  for (int i = 0; i < N; ++i) wrong_i += ib[i] != -1;
  CHECK(wrong_i == 0);
}

/* The AVX-512 float16 runs give the scalar conversions' bits, NaN payloads
 * included: every float16, and floats around each rounding case. */
static void test_f16_runs_match_scalar(void) {
  enum { H = 65536, F = 1 << 20 };
  static uint16_t h[H], back[F];
  static float f[H], g[F];
  for (int i = 0; i < H; ++i) h[i] = (uint16_t)i;
  loom_f16_to_f32_avx512(f, h, H);
  int bad = 0;
  for (int i = 0; i < H; ++i) {
    const float want = loom_f16_to_f32(h[i]);
    bad += memcmp(&f[i], &want, sizeof want) != 0;
  }
  CHECK(bad == 0);
  uint32_t seed = 99;
  for (int i = 0; i < F; ++i) {
    seed = seed * 1664525u + 1013904223u;
    uint32_t bits = i < H ? ((uint32_t)h[i] << 13) + (seed % 3 == 0 ? 0x1000u : seed % 0x2001u) +
                                ((uint32_t)(h[i] & 0x8000u) << 16)
                          : seed;
    memcpy(&g[i], &bits, sizeof bits);
  }
  loom_f32_to_f16_avx512(back, g, F - 3); /* a scalar tail too */
  for (int i = 0; i < F - 3; ++i) bad += back[i] != loom_f32_to_f16(g[i]);
  CHECK(bad == 0);
}

/* Short rows of a 3-d strided source (a pad's interior) into a strided
 * destination, the launch cut into chunks that end inside rows and inside
 * planes: every element lands once, nothing outside is touched. */
static void test_short_rows(void) {
  enum { P = 3, R = 5, C = 7, SR = 9, SP = 9 * 6 };
  static float src[P * SP], dst[P * SP];
  for (int i = 0; i < P * SP; ++i) src[i] = (float)i, dst[i] = -1.0f;
  loom_tensor t[2];
  for (int k = 0; k < 2; ++k) {
    t[k] = (loom_tensor){.data = k ? (void *)src : (void *)dst, .dtype = LOOM_FLOAT32, .rank = 3};
    t[k].sizes[0] = P, t[k].sizes[1] = R, t[k].sizes[2] = C;
    t[k].strides[0] = SP, t[k].strides[1] = SR, t[k].strides[2] = 1;
  }
  t[0].data = dst + SR + 1; /* the interior, one row and column in */
  const int64_t grains[] = {1, 6, 7, 13, 35, 200};
  for (size_t gi = 0; gi < sizeof grains / sizeof grains[0]; ++gi) {
    for (int i = 0; i < P * SP; ++i) dst[i] = -1.0f;
    CHECK(run_chunks(loom_kernel_copy, t, 2, NULL, 0, P * R * C, grains[gi]) == 0);
    int bad = 0;
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < SP / SR; ++r)
        for (int c = 0; c < SR; ++c) {
          const int inside = r >= 1 && r <= R && c >= 1 && c <= C;
          const float want = inside ? src[p * SP + (r - 1) * SR + (c - 1)] : -1.0f;
          bad += dst[p * SP + r * SR + c] != want;
        }
    CHECK(bad == 0);
  }
}

int main(void) {
  test_half_conversions();
  test_transpose_copy();
  test_broadcast_cast();
  test_fill();
  test_f16_runs_match_scalar();
  test_short_rows();
  TEST_MAIN_END();
}
