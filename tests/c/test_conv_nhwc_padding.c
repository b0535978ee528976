/* tests/c/test_conv_nhwc_padding.c — the bf16 channels-last convolutions
 * (kernels/conv/conv_nhwc.h) told where their copy holds the image
 * ("conv_nhwc.forward"'s scalars [10 + 3E]..[13 + 3E], "conv_nhwc.weight_grad"'s
 * [10]..[12]): leaving out the padding's products changes no bit (the
 * data are finite, so those products are zeros), at any item width, with
 * windows whose edge taps read padding on one side, both sides, only
 * (corners of a wide padding), with strides, dilation and two
 * convolutions of one launch at different origins; the forward also
 * against float64 sums; and bad extents refused.
 * Skipped without AVX512-BF16 (or where LOOM_CPU_FEATURES caps it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/conv/conv_nhwc.h"
#include "kernels/gemm/gemm.h"
#include "loom/status.h"
#include "tests/c/conv_util.h"

typedef struct case_ {
  int64_t n, c, o, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
} case_;

static uint16_t *bf16_rand(int64_t n) {
  uint16_t *v = malloc(sizeof(uint16_t) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) v[i] = loom_f32_to_bf16(rnd());
  return v;
}

/* A case's copy and packed weight, as the planners lay them out for
 * AVX512-BF16 (rows wq wide, positions an odd number of lines apart). */
typedef struct setup_ {
  int64_t ho, wo, wq, plane, cp, op, ps, taps;
  uint16_t *xp, *wpk;
  loom_tensor cpy, packed;
} setup_;

static void set_up(const case_ *k, const uint16_t *x, const uint16_t *w, int64_t wq_cut,
                   setup_ *s) {
  s->taps = k->kh * k->kw;
  s->ho = (k->h + 2 * k->ph - k->dh * (k->kh - 1) - 1) / k->sh + 1;
  s->wo = (k->w + 2 * k->pw - k->dw * (k->kw - 1) - 1) / k->sw + 1;
  s->cp = (k->c + 31) / 32 * 32, s->op = (k->o + 31) / 32 * 32;
  const int64_t wp = (s->wo - 1) * k->sw + k->dw * (k->kw - 1) + 1;
  s->wq = (wp + k->sw - 1) / k->sw - wq_cut;
  const int64_t halo = k->dh * (k->kh - 1) / k->sh * s->wq + k->dw * (k->kw - 1) / k->sw;
  const int64_t phases = k->sh * k->sw;
  s->plane = (s->ho * s->wq + 31) / 32 * 32 + halo;
  s->ps = s->cp / 32 % 2 == 0 ? s->cp + 32 : s->cp;
  s->xp = malloc(sizeof(uint16_t) * (size_t)(k->n * phases * s->plane * s->ps));
  s->wpk = malloc(sizeof(uint16_t) * (size_t)(s->taps * s->cp * s->op));
  loom_tensor img = {.data = (void *)x, .dtype = LOOM_BFLOAT16, .rank = 5,
                     .sizes = {k->n, k->c, 1, k->h, k->w},
                     .strides = {k->c * k->h * k->w, k->h * k->w, k->h * k->w, k->w, 1}};
  s->cpy = (loom_tensor){.data = s->xp, .dtype = LOOM_BFLOAT16, .rank = 4,
                         .sizes = {k->n, phases, s->plane, s->cp},
                         .strides = {phases * s->plane * s->ps, s->plane * s->ps, s->ps, 1}};
  loom_tensor pts[2] = {s->cpy, img};
  loom_scalar psc[5] = {{.i = k->ph}, {.i = k->pw}, {.i = s->wq}, {.i = k->sh}, {.i = k->sw}};
  run(loom_conv_nhwc_pad_kernel, pts, 2, psc, 5, k->n * phases * ((s->plane + s->wq - 1) / s->wq));
  loom_tensor wt = {.data = (void *)w, .dtype = LOOM_BFLOAT16, .rank = 3,
                    .sizes = {k->o, k->c, s->taps}, .strides = {k->c * s->taps, s->taps, 1}};
  s->packed = (loom_tensor){.data = s->wpk, .dtype = LOOM_BFLOAT16, .rank = 5,
                            .sizes = {s->op / 32, s->cp / 32, s->taps, 32, 32},
                            .strides = {s->cp * s->taps * 32, s->taps * 1024, 1024, 32, 1}};
  loom_tensor wts[2] = {s->packed, wt};
  loom_scalar wsc[1] = {{.i = 0}};
  run(loom_conv_nhwc_weight_kernel, wts, 2, wsc, 1, s->cp / 32 * s->op / 16);
}

/* The forward into y (N, O, ho, wo) in items of ppi positions; with
 * `told`, the image's extent in scalars [10]..[13]. */
static int forward(const case_ *k, const setup_ *s, uint16_t *y, int64_t ppi, int told,
                   int64_t top) {
  loom_tensor ts[4] = {{.data = y, .dtype = LOOM_BFLOAT16, .rank = 4,
                        .sizes = {k->n, k->o, s->ho, s->wo},
                        .strides = {k->o * s->ho * s->wo, s->ho * s->wo, s->wo, 1}},
                       s->cpy, s->packed, {0}};
  loom_scalar sc[14] = {{.i = k->kh}, {.i = k->kw}, {.i = k->sh}, {.i = k->sw}, {.i = k->dh},
                        {.i = k->dw}, {.i = s->wq}, {.i = ppi},   {.i = 0},     {.i = 0},
                        {.i = top},   {.i = k->h},  {.i = k->pw}, {.i = k->w}};
  const int64_t items = k->n * ((s->ho * s->wq + ppi - 1) / ppi);
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4, .tensors = ts,
                        .num_scalars = told ? 14 : 10, .scalars = sc, .range = items};
  int rc = 0;
  for (int64_t i = 0; i < items && rc == 0; i += 2)
    rc = loom_conv_nhwc_kernel(&a, i, i + 2 < items ? i + 2 : items);
  return rc;
}

static void check_forward(case_ k, int64_t wq_cut) {
  uint16_t *x = bf16_rand(k.n * k.c * k.h * k.w), *w = bf16_rand(k.o * k.c * k.kh * k.kw);
  setup_ s;
  set_up(&k, x, w, wq_cut, &s);
  const size_t ny = (size_t)(k.n * k.o * s.ho * s.wo);
  uint16_t *all = malloc(sizeof(uint16_t) * ny), *y = malloc(sizeof(uint16_t) * ny);
  CHECK_MSG(forward(&k, &s, all, 128, 0, k.ph) == 0, "rc");
  int bad = 0;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t i = 0; i < s.ho; ++i)
        for (int64_t j = 0; j < s.wo; ++j) {
          double ref = 0.0, mag = 0.0;
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t t = 0; t < s.taps; ++t) {
              const int64_t yy = i * k.sh - k.ph + t / k.kw * k.dh;
              const int64_t xx = j * k.sw - k.pw + t % k.kw * k.dw;
              if (yy < 0 || yy >= k.h || xx < 0 || xx >= k.w) continue;
              const double p = (double)loom_bf16_to_f32(w[(o * k.c + c) * s.taps + t]) *
                               loom_bf16_to_f32(x[((n * k.c + c) * k.h + yy) * k.w + xx]);
              ref += p, mag += fabs(p);
            }
          const double got = loom_bf16_to_f32(all[((n * k.o + o) * s.ho + i) * s.wo + j]);
          if (fabs(got - ref) > fabs(ref) / 128.0 + mag * 1e-6) ++bad;
        }
  CHECK_MSG(bad == 0, "%d of %zu outputs off (%lldx%lld, %lldx%lld pad %lld,%lld)", bad, ny,
            (long long)k.h, (long long)k.w, (long long)k.kh, (long long)k.kw, (long long)k.ph,
            (long long)k.pw);
  /* told the image's extent, at every item width: the same bits */
  for (int64_t ppi = 32; ppi <= 128; ppi *= 2) {
    memset(y, 0xff, sizeof(uint16_t) * ny);
    CHECK_MSG(forward(&k, &s, y, ppi, 1, k.ph) == 0, "rc");
    CHECK_MSG(memcmp(y, all, sizeof(uint16_t) * ny) == 0,
              "leaving out the padding changed bits (%lldx%lld, %lld positions per item)",
              (long long)k.h, (long long)k.w, (long long)ppi);
  }
  /* a top one row off leaves out products of the image: some bits change
   * (what the test above would miss if the extent were not read) */
  if (k.ph > 0) {
    CHECK_MSG(forward(&k, &s, y, 64, 1, k.ph + 1) == 0, "rc");
    CHECK_MSG(memcmp(y, all, sizeof(uint16_t) * ny) != 0, "the extent is not read");
  }
  CHECK_MSG(forward(&k, &s, y, 64, 1, -1) == LOOM_ERROR_INVALID_ARGUMENT, "negative top");
  free(x), free(w), free(all), free(y), free(s.xp), free(s.wpk);
}

/* The weight gradient with and without [10]..[12]: the same bits, any
 * grouping of out-channel blocks. */
static int wgrad(const case_ *k, uint16_t *dw, const uint16_t *x, const uint16_t *gy, int told,
                 int64_t group, int64_t wo_told) {
  const int64_t taps = k->kh * k->kw, cp = (k->c + 31) / 32 * 32, op = (k->o + 31) / 32 * 32;
  const int64_t ho = (k->h + 2 * k->ph - k->dh * (k->kh - 1) - 1) / k->sh + 1;
  const int64_t wo = (k->w + 2 * k->pw - k->dw * (k->kw - 1) - 1) / k->sw + 1;
  const int64_t wp = (wo - 1) * k->sw + k->dw * (k->kw - 1) + 1;
  const int64_t wq = ((wp + k->sw - 1) / k->sw + 1) / 2 * 2, grid = ho * wq;
  const int64_t halo = k->dh * (k->kh - 1) / k->sh * wq + k->dw * (k->kw - 1) / k->sw;
  const int64_t plane = ((grid + 31) / 32 * 32 + halo + 31) / 32 * 32, phases = k->sh * k->sw;
  const int64_t ps = 2 * cp + 32, span = halo + plane;
  uint16_t *xq = malloc(sizeof(uint16_t) * (size_t)(k->n * phases * plane / 2 * ps));
  uint16_t *dyp = calloc((size_t)(k->n * op * span), sizeof(uint16_t));
  for (int64_t n = 0; n < k->n; ++n)
    for (int64_t o = 0; o < k->o; ++o)
      for (int64_t i = 0; i < ho; ++i)
        memcpy(dyp + (n * op + o) * span + halo + i * wq, gy + ((n * k->o + o) * ho + i) * wo,
               sizeof(uint16_t) * (size_t)wo);
  loom_tensor pts[2] = {
      {.data = xq, .dtype = LOOM_BFLOAT16, .rank = 5, .sizes = {k->n, phases, plane / 2, cp, 2},
       .strides = {phases * plane / 2 * ps, plane / 2 * ps, ps, 2, 1}},
      {.data = (void *)x, .dtype = LOOM_BFLOAT16, .rank = 5, .sizes = {k->n, k->c, 1, k->h, k->w},
       .strides = {k->c * k->h * k->w, k->h * k->w, k->h * k->w, k->w, 1}}};
  loom_scalar psc[5] = {{.i = k->ph}, {.i = k->pw}, {.i = wq}, {.i = k->sh}, {.i = k->sw}};
  run(loom_conv_nhwc_pad_kernel, pts, 2, psc, 5, k->n * phases * ((plane + wq - 1) / wq));
  loom_tensor ts[3] = {{.data = dw, .dtype = LOOM_BFLOAT16, .rank = 3,
                        .sizes = {k->o, k->c, taps}, .strides = {k->c * taps, taps, 1}},
                       pts[0],
                       {.data = dyp, .dtype = LOOM_BFLOAT16, .rank = 3,
                        .sizes = {k->n, op, span}, .strides = {op * span, span, 1}}};
  loom_scalar sc[13] = {{.i = k->kh}, {.i = k->kw}, {.i = k->sh},  {.i = k->sw}, {.i = k->dh},
                        {.i = k->dw}, {.i = wq},    {.i = halo},   {.i = group}, {.i = grid},
                        {.i = k->ph}, {.i = k->h},  {.i = wo_told ? wo_told : wo}};
  const int64_t range = (op / 32 + group - 1) / group * (cp / 32);
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = ts,
                        .num_scalars = told ? 13 : 10, .scalars = sc, .range = range};
  int rc = 0;
  for (int64_t i = 0; i < range && rc == 0; ++i) rc = loom_conv_nhwc_wgrad_kernel(&a, i, i + 1);
  free(xq), free(dyp);
  return rc;
}

static void check_wgrad(case_ k) {
  const int64_t taps = k.kh * k.kw;
  const int64_t ho = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t wo = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  uint16_t *x = bf16_rand(k.n * k.c * k.h * k.w), *gy = bf16_rand(k.n * k.o * ho * wo);
  const size_t nw = (size_t)(k.o * k.c * taps);
  uint16_t *all = malloc(sizeof(uint16_t) * nw), *dw = malloc(sizeof(uint16_t) * nw);
  CHECK_MSG(wgrad(&k, all, x, gy, 0, 1, 0) == 0, "rc");
  for (int64_t group = 1; group <= 2; ++group) {
    memset(dw, 0xff, sizeof(uint16_t) * nw);
    CHECK_MSG(wgrad(&k, dw, x, gy, 1, group, 0) == 0, "rc");
    CHECK_MSG(memcmp(dw, all, sizeof(uint16_t) * nw) == 0,
              "weight gradient leaving out the padding changed bits (%lldx%lld, group %lld)",
              (long long)k.h, (long long)k.w, (long long)group);
  }
  /* told a narrower grid, it leaves out dy's last column: bits change */
  CHECK_MSG(wgrad(&k, dw, x, gy, 1, 1, wo - 1) == 0, "rc");
  CHECK_MSG(memcmp(dw, all, sizeof(uint16_t) * nw) != 0, "wo is not read");
  CHECK_MSG(wgrad(&k, dw, x, gy, 1, 1, 1000) == LOOM_ERROR_INVALID_ARGUMENT, "wo past wq");
  free(x), free(gy), free(all), free(dw);
}

int main(void) {
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  if (isa != LOOM_GEMM_AMX && isa != LOOM_GEMM_AVX512BF16) {
    test_skip("the GEMM variant is neither AMX nor AVX512-BF16 (the CPU, LOOM_CPU_FEATURES or LOOM_GEMM)");
    TEST_MAIN_END();
  }
  /* 7x7 padded by 1: every edge tap reads padding on one side */
  check_forward((case_){2, 64, 64, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1}, 0);
  /* the same in rows of 8: each row's right padding the next row's left */
  check_forward((case_){2, 64, 64, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1}, 1);
  /* padding 2 around 5x9 by 3x3: corners reading one pixel, rows of 13 */
  check_forward((case_){1, 32, 48, 5, 9, 3, 3, 1, 1, 2, 2, 1, 1}, 0);
  /* stride 2: four phase planes */
  check_forward((case_){2, 32, 32, 14, 13, 3, 3, 2, 2, 1, 1, 1, 1}, 0);
  /* dilation 2, a 5x3 window, padding on the sides only */
  check_forward((case_){1, 32, 32, 9, 11, 5, 3, 1, 1, 0, 2, 2, 1}, 0);
  check_wgrad((case_){2, 64, 64, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1});
  check_wgrad((case_){1, 64, 32, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1});
  check_wgrad((case_){2, 32, 64, 15, 17, 3, 3, 2, 2, 1, 1, 1, 1});
  check_wgrad((case_){1, 32, 32, 13, 11, 5, 5, 1, 1, 2, 4, 2, 1});
  TEST_MAIN_END();
}
