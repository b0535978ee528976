/* tests/c/test_conv_nhwc.c — the bf16 channels-last convolutions
 * (kernels/conv/conv_nhwc.h: on AMX tiles, or with vdpbf16ps on
 * AVX512-BF16 CPUs without AMX, as the process's GEMM variant selects)
 * against a float64 loop over the same
 * bf16 values: strides, dilation, channel counts that leave blocks part
 * empty, a bias, the flipped weight of an input gradient, item widths and
 * chunkings (the same bits for each), output rows of stride 2, two
 * convolutions sharing a launch and its copy, the weight
 * gradient over the copy in pairs of positions, and the arguments they
 * refuse.
 * Skipped without AVX512-BF16 (or where LOOM_CPU_FEATURES caps it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv_nhwc.h"
#include "kernels/base/dtype.h"
#include "kernels/gemm/gemm.h"
#include "loom/status.h"
#include "tests/c/conv_util.h"

typedef struct case_ {
  int64_t n, c, o, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  int bias, flipped;
} case_;

static uint16_t *bf16_rand(int64_t n) {
  uint16_t *v = malloc(sizeof(uint16_t) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) v[i] = loom_f32_to_bf16(rnd());
  return v;
}

/* Runs the three kernels over x (N, C, H, W) and w (the forward's weight:
 * O, C, taps, or C, O, taps when flipped) into out (N, O, ho, wo; elements
 * `xs` apart along rows), items of `ppi` positions in chunks of `grain`;
 * returns the compute kernel's status. */
typedef struct second_ {
  const uint16_t *w; /* O, C: a 1x1 window */
  uint16_t *out;     /* N, O, rows, wo */
  int64_t rows, origin;
} second_;

static int conv2(const case_ *k, const uint16_t *x, const uint16_t *w, const uint16_t *bias,
                 uint16_t *out, int64_t ho, int64_t wo, int64_t ppi, int64_t grain,
                 int64_t plane_cut, int64_t xs, const second_ *sec);

static int conv(const case_ *k, const uint16_t *x, const uint16_t *w, const uint16_t *bias,
                uint16_t *out, int64_t ho, int64_t wo, int64_t ppi, int64_t grain,
                int64_t plane_cut, int64_t xs) {
  return conv2(k, x, w, bias, out, ho, wo, ppi, grain, plane_cut, xs, NULL);
}

/* As conv, with `sec` (if not NULL) a second convolution of the same
 * launch over the same copy. */
static int conv2(const case_ *k, const uint16_t *x, const uint16_t *w, const uint16_t *bias,
                 uint16_t *out, int64_t ho, int64_t wo, int64_t ppi, int64_t grain,
                 int64_t plane_cut, int64_t xs, const second_ *sec) {
  const int64_t taps = k->kh * k->kw, cp = (k->c + 31) / 32 * 32, op = (k->o + 31) / 32 * 32;
  const int64_t wp = (wo - 1) * k->sw + k->dw * (k->kw - 1) + 1, wq = (wp + k->sw - 1) / k->sw;
  const int64_t halo = k->dh * (k->kh - 1) / k->sh * wq + k->dw * (k->kw - 1) / k->sw;
  const int64_t plane = (ho * wq + 31) / 32 * 32 + halo - plane_cut, phases = k->sh * k->sw;
  const int64_t ps = cp + 32; /* the adapter's odd-line stride, whatever cp */
  uint16_t *xp = malloc(sizeof(uint16_t) * (size_t)(k->n * phases * plane * ps));
  uint16_t *wpk = malloc(sizeof(uint16_t) * (size_t)(taps * cp * op));
  loom_tensor img = {.data = (void *)x, .dtype = LOOM_BFLOAT16, .rank = 5,
                     .sizes = {k->n, k->c, 1, k->h, k->w},
                     .strides = {k->c * k->h * k->w, k->h * k->w, k->h * k->w, k->w, 1}};
  loom_tensor cpy = {.data = xp, .dtype = LOOM_BFLOAT16, .rank = 4,
                     .sizes = {k->n, phases, plane, cp},
                     .strides = {phases * plane * ps, plane * ps, ps, 1}};
  loom_tensor pts[2] = {cpy, img};
  loom_scalar psc[5] = {{.i = k->ph}, {.i = k->pw}, {.i = wq}, {.i = k->sh}, {.i = k->sw}};
  run(loom_conv_nhwc_pad_kernel, pts, 2, psc, 5, k->n * phases * ((plane + wq - 1) / wq));
  const int64_t w0 = k->flipped ? k->c : k->o, w1 = k->flipped ? k->o : k->c;
  loom_tensor wt = {.data = (void *)w, .dtype = LOOM_BFLOAT16, .rank = 3,
                    .sizes = {w0, w1, taps}, .strides = {w1 * taps, taps, 1}};
  loom_tensor packed = {.data = wpk, .dtype = LOOM_BFLOAT16, .rank = 5,
                        .sizes = {op / 32, cp / 32, taps, 32, 32},
                        .strides = {cp * taps * 32, taps * 1024, 1024, 32, 1}};
  loom_tensor wts[2] = {packed, wt};
  loom_scalar wsc[1] = {{.i = k->flipped}};
  run(loom_conv_nhwc_weight_kernel, wts, 2, wsc, 1, cp / 32 * op / 16);
  loom_tensor ts[4] = {{.data = out, .dtype = LOOM_BFLOAT16, .rank = 4,
                        .sizes = {k->n, k->o, ho, wo},
                        .strides = {k->o * ho * wo * xs, ho * wo * xs, wo * xs, xs}},
                       cpy, packed,
                       {.data = (void *)bias, .dtype = LOOM_BFLOAT16, .rank = 1,
                        .sizes = {k->o}, .strides = {1}}};
  loom_scalar sc[13] = {{.i = k->kh}, {.i = k->kw}, {.i = k->sh}, {.i = k->sw},
                        {.i = k->dh}, {.i = k->dw}, {.i = wq},     {.i = ppi},
                        {.i = 0},     {.i = 1},     {.i = 1},      {.i = 1}};
  const int64_t items = k->n * ((ho * wq + ppi - 1) / ppi);
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = bias ? 4 : 3,
                        .tensors = ts, .num_scalars = 8, .scalars = sc, .range = items,
                        .grain = grain};
  uint16_t *wpk1 = NULL;
  loom_tensor all[6];
  if (sec) {
    wpk1 = malloc(sizeof(uint16_t) * (size_t)(cp * op));
    loom_tensor wt1 = {.data = (void *)sec->w, .dtype = LOOM_BFLOAT16, .rank = 3,
                       .sizes = {k->o, k->c, 1}, .strides = {k->c, 1, 1}};
    loom_tensor packed1 = {.data = wpk1, .dtype = LOOM_BFLOAT16, .rank = 5,
                           .sizes = {op / 32, cp / 32, 1, 32, 32},
                           .strides = {cp * 32, 1024, 1024, 32, 1}};
    loom_tensor wts1[2] = {packed1, wt1};
    loom_scalar wsc1[1] = {{.i = 0}};
    run(loom_conv_nhwc_weight_kernel, wts1, 2, wsc1, 1, cp / 32 * op / 16);
    memcpy(all, ts, sizeof ts);
    if (!bias) all[3] = (loom_tensor){0};
    all[4] = (loom_tensor){.data = sec->out, .dtype = LOOM_BFLOAT16, .rank = 4,
                           .sizes = {k->n, k->o, sec->rows, wo},
                           .strides = {k->o * sec->rows * wo, sec->rows * wo, wo, 1}};
    all[5] = packed1;
    sc[12].i = sec->origin;
    a.tensors = all, a.num_tensors = 6, a.num_scalars = 13;
  }
  int rc = 0;
  for (int64_t s = 0; s < items && rc == 0; s += grain)
    rc = loom_conv_nhwc_kernel(&a, s, s + grain < items ? s + grain : items);
  free(xp), free(wpk), free(wpk1);
  return rc;
}

static void check(case_ k) {
  const int64_t taps = k.kh * k.kw;
  const int64_t ho = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t wo = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  uint16_t *x = bf16_rand(k.n * k.c * k.h * k.w), *w = bf16_rand(k.o * k.c * taps);
  uint16_t *bias = k.bias ? bf16_rand(k.o) : NULL;
  const size_t ny = (size_t)(k.n * k.o * ho * wo);
  uint16_t *y = malloc(sizeof(uint16_t) * ny), *y2 = malloc(sizeof(uint16_t) * ny);
  CHECK_MSG(conv(&k, x, w, bias, y, ho, wo, 128, 3, 0, 1) == 0, "rc");
  int bad = 0;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double ref = bias ? loom_bf16_to_f32(bias[o]) : 0.0, mag = fabs(ref);
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t t = 0; t < taps; ++t) {
              const int64_t yy = i * k.sh - k.ph + t / k.kw * k.dh;
              const int64_t xx = j * k.sw - k.pw + t % k.kw * k.dw;
              if (yy < 0 || yy >= k.h || xx < 0 || xx >= k.w) continue;
              /* flipped: the weight is w[c][o][taps - 1 - t] */
              const uint16_t wv = k.flipped ? w[(c * k.o + o) * taps + taps - 1 - t]
                                            : w[(o * k.c + c) * taps + t];
              const double p = (double)loom_bf16_to_f32(wv) *
                               loom_bf16_to_f32(x[((n * k.c + c) * k.h + yy) * k.w + xx]);
              ref += p, mag += fabs(p);
            }
          const double got = loom_bf16_to_f32(y[((n * k.o + o) * ho + i) * wo + j]);
          /* one bf16 rounding of the sum, and fp32's on the way */
          if (fabs(got - ref) > fabs(ref) / 128.0 + mag * 1e-6) ++bad;
        }
  CHECK_MSG(bad == 0, "%d of %zu outputs off (c %lld o %lld k %lldx%lld s %lld)", bad, ny,
        (long long)k.c, (long long)k.o, (long long)k.kh, (long long)k.kw, (long long)k.sh);
  /* narrower items and other chunkings: the same bits */
  for (int64_t ppi = 32; ppi <= 64; ppi *= 2) {
    memset(y2, 0xff, sizeof(uint16_t) * ny);
    CHECK_MSG(conv(&k, x, w, bias, y2, ho, wo, ppi, 1 + ppi / 32, 0, 1) == 0, "rc");
    CHECK_MSG(memcmp(y, y2, sizeof(uint16_t) * ny) == 0, "items of %lld positions differ",
          (long long)ppi);
  }
  /* into every other element of the output's rows: the same bits there,
   * the others untouched */
  uint16_t *y3 = malloc(2 * sizeof(uint16_t) * ny);
  memset(y3, 0xff, 2 * sizeof(uint16_t) * ny);
  CHECK_MSG(conv(&k, x, w, bias, y3, ho, wo, 64, 2, 0, 2) == 0, "rc");
  int off = 0;
  for (size_t i = 0; i < ny; ++i) off += y3[2 * i] != y[i] || y3[2 * i + 1] != 0xffff;
  CHECK_MSG(off == 0, "%d outputs off with every other element", off);
  free(x), free(w), free(bias), free(y), free(y2), free(y3);
}

/* The weight gradient of case k (not flipped) against float64 sums. */
static void check_wgrad(case_ k) {
  const int64_t taps = k.kh * k.kw, cp = (k.c + 31) / 32 * 32, op = (k.o + 31) / 32 * 32;
  const int64_t ho = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t wo = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  const int64_t wp = (wo - 1) * k.sw + k.dw * (k.kw - 1) + 1;
  const int64_t wq = ((wp + k.sw - 1) / k.sw + 1) / 2 * 2, grid = ho * wq;
  const int64_t halo = k.dh * (k.kh - 1) / k.sh * wq + k.dw * (k.kw - 1) / k.sw;
  const int64_t plane = ((grid + 31) / 32 * 32 + halo + 31) / 32 * 32, phases = k.sh * k.sw;
  const int64_t ps = 2 * cp + 32, span = halo + plane;
  uint16_t *x = bf16_rand(k.n * k.c * k.h * k.w), *gy = bf16_rand(k.n * k.o * ho * wo);
  uint16_t *xq = malloc(sizeof(uint16_t) * (size_t)(k.n * phases * plane / 2 * ps));
  uint16_t *dyp = calloc((size_t)(k.n * op * span), sizeof(uint16_t));
  uint16_t *dw = malloc(sizeof(uint16_t) * (size_t)(k.o * k.c * taps));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t i = 0; i < ho; ++i)
        memcpy(dyp + (n * op + o) * span + halo + i * wq, gy + ((n * k.o + o) * ho + i) * wo,
               sizeof(uint16_t) * (size_t)wo);
  loom_tensor pts[2] = {
      {.data = xq, .dtype = LOOM_BFLOAT16, .rank = 5, .sizes = {k.n, phases, plane / 2, cp, 2},
       .strides = {phases * plane / 2 * ps, plane / 2 * ps, ps, 2, 1}},
      {.data = x, .dtype = LOOM_BFLOAT16, .rank = 5, .sizes = {k.n, k.c, 1, k.h, k.w},
       .strides = {k.c * k.h * k.w, k.h * k.w, k.h * k.w, k.w, 1}}};
  loom_scalar psc[5] = {{.i = k.ph}, {.i = k.pw}, {.i = wq}, {.i = k.sh}, {.i = k.sw}};
  run(loom_conv_nhwc_pad_kernel, pts, 2, psc, 5, k.n * phases * ((plane + wq - 1) / wq));
  loom_tensor ts[3] = {{.data = dw, .dtype = LOOM_BFLOAT16, .rank = 3, .sizes = {k.o, k.c, taps},
                        .strides = {k.c * taps, taps, 1}},
                       pts[0],
                       {.data = dyp, .dtype = LOOM_BFLOAT16, .rank = 3, .sizes = {k.n, op, span},
                        .strides = {op * span, span, 1}}};
  loom_scalar sc[8] = {{.i = k.kh}, {.i = k.kw}, {.i = k.sh}, {.i = k.sw},
                       {.i = k.dh}, {.i = k.dw}, {.i = wq}, {.i = halo}};
  run(loom_conv_nhwc_wgrad_kernel, ts, 3, sc, 8, op / 32 * cp / 32);
  int bad = 0;
  for (int64_t o = 0; o < k.o; ++o)
    for (int64_t c = 0; c < k.c; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        double ref = 0.0, mag = 0.0;
        for (int64_t n = 0; n < k.n; ++n)
          for (int64_t i = 0; i < ho; ++i)
            for (int64_t j = 0; j < wo; ++j) {
              const int64_t yy = i * k.sh - k.ph + t / k.kw * k.dh;
              const int64_t xx = j * k.sw - k.pw + t % k.kw * k.dw;
              if (yy < 0 || yy >= k.h || xx < 0 || xx >= k.w) continue;
              const double p = (double)loom_bf16_to_f32(gy[((n * k.o + o) * ho + i) * wo + j]) *
                               loom_bf16_to_f32(x[((n * k.c + c) * k.h + yy) * k.w + xx]);
              ref += p, mag += fabs(p);
            }
        const double got = loom_bf16_to_f32(dw[(o * k.c + c) * taps + t]);
        if (fabs(got - ref) > fabs(ref) / 128.0 + mag * 0x1p-14) ++bad;
      }
  CHECK_MSG(bad == 0, "weight gradient: %d of %lld off (c %lld o %lld s %lld)", bad,
        (long long)(k.o * k.c * taps), (long long)k.c, (long long)k.o, (long long)k.sh);
  /* items of several out-channel blocks (the last group short): the same bits */
  uint16_t *dw1 = malloc(sizeof(uint16_t) * (size_t)(k.o * k.c * taps));
  memcpy(dw1, dw, sizeof(uint16_t) * (size_t)(k.o * k.c * taps));
  loom_scalar sc9[9];
  memcpy(sc9, sc, sizeof sc);
  for (int64_t group = 2; group <= 3 && group * taps <= LOOM_CONV_NHWC_WG_BLOCKS; ++group) {
    memset(dw, 0xff, sizeof(uint16_t) * (size_t)(k.o * k.c * taps));
    sc9[8].i = group;
    run(loom_conv_nhwc_wgrad_kernel, ts, 3, sc9, 9, (op / 32 + group - 1) / group * cp / 32);
    CHECK_MSG(memcmp(dw, dw1, sizeof(uint16_t) * (size_t)(k.o * k.c * taps)) == 0,
          "weight gradient in groups of %lld blocks differs", (long long)group);
  }
  /* told the grid's extent (dy 0 past it), the same bits */
  loom_scalar sc10[10];
  memcpy(sc10, sc, sizeof sc);
  sc10[8].i = 1, sc10[9].i = grid;
  memset(dw, 0xff, sizeof(uint16_t) * (size_t)(k.o * k.c * taps));
  run(loom_conv_nhwc_wgrad_kernel, ts, 3, sc10, 10, op / 32 * cp / 32);
  CHECK_MSG(memcmp(dw, dw1, sizeof(uint16_t) * (size_t)(k.o * k.c * taps)) == 0,
            "weight gradient told the grid differs");
  free(dw1);
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = ts,
                        .num_scalars = 8, .scalars = sc};
  sc9[8].i = LOOM_CONV_NHWC_WG_BLOCKS / taps + 1; /* more sums than the buffer holds */
  a.scalars = sc9, a.num_scalars = 9;
  CHECK_MSG(loom_conv_nhwc_wgrad_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "group too big");
  a.scalars = sc, a.num_scalars = 8;
  sc[7].i = halo - 1; /* dy's lead too short for the farthest tap */
  CHECK_MSG(taps == 1 || loom_conv_nhwc_wgrad_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT,
        "short lead");
  free(x), free(gy), free(xq), free(dyp), free(dw);
}

/* Two convolutions in one launch over one copy: the first's bits are its
 * own launch's; the second, a 1x1 window over fewer rows reading from its
 * own origin (the 3x3 window's centre), is the sum over channels there. */
static void check_shared(void) {
  case_ k = {.n = 2, .c = 64, .o = 40, .h = 9, .w = 37, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
             .ph = 1, .pw = 1, .dh = 1, .dw = 1, .bias = 1};
  const int64_t ho = 9, wo = 37, rows = 6, wq = 39, ny = k.n * k.o * ho * wo;
  uint16_t *x = bf16_rand(k.n * k.c * ho * wo), *w = bf16_rand(k.o * k.c * 9);
  uint16_t *w1 = bf16_rand(k.o * k.c), *bias = bf16_rand(k.o);
  uint16_t *y = malloc(sizeof(uint16_t) * (size_t)ny), *y2 = malloc(sizeof(uint16_t) * (size_t)ny);
  uint16_t *z = malloc(sizeof(uint16_t) * (size_t)(k.n * k.o * rows * wo));
  CHECK_MSG(conv(&k, x, w, bias, y, ho, wo, 64, 1, 0, 1) == 0, "rc");
  const second_ sec = {.w = w1, .out = z, .rows = rows, .origin = wq + 1};
  CHECK_MSG(conv2(&k, x, w, bias, y2, ho, wo, 64, 3, 0, 1, &sec) == 0, "rc shared");
  CHECK_MSG(memcmp(y, y2, sizeof(uint16_t) * (size_t)ny) == 0, "the first convolution's bits");
  int bad = 0;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double ref = 0.0, mag = 0.0;
          for (int64_t c = 0; c < k.c; ++c) {
            const double p = (double)loom_bf16_to_f32(w1[o * k.c + c]) *
                             loom_bf16_to_f32(x[((n * k.c + c) * ho + i) * wo + j]);
            ref += p, mag += fabs(p);
          }
          const double got = loom_bf16_to_f32(z[((n * k.o + o) * rows + i) * wo + j]);
          if (fabs(got - ref) > fabs(ref) / 128.0 + mag * 1e-6) ++bad;
        }
  CHECK_MSG(bad == 0, "%d outputs of the second convolution off", bad);
  free(x), free(w), free(w1), free(bias), free(y), free(y2), free(z);
}

/* What the compute kernel refuses: a plane too short for the last tap's
 * reads, items not whole panels, a weight of other channels. */
static void check_refused(void) {
  case_ k = {.n = 1, .c = 32, .o = 32, .h = 6, .w = 7, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
             .ph = 1, .pw = 1, .dh = 1, .dw = 1};
  uint16_t *x = bf16_rand(32 * 6 * 7), *w = bf16_rand(32 * 32 * 9), *y = malloc(2 * 32 * 42);
  CHECK_MSG(conv(&k, x, w, NULL, y, 6, 7, 64, 1, 1, 1) == LOOM_ERROR_INVALID_ARGUMENT, "short plane");
  CHECK_MSG(conv(&k, x, w, NULL, y, 6, 7, 48, 1, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "items");
  CHECK_MSG(conv(&k, x, w, NULL, y, 6, 7, 256, 1, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "items");
  loom_tensor none[3] = {{0}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                        .tensors = none, .num_scalars = 8, .scalars = (loom_scalar[8]){{0}}};
  CHECK_MSG(loom_conv_nhwc_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "empty");
  CHECK_MSG(loom_conv_nhwc_pad_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "empty pad");
  a.num_scalars = 1;
  CHECK_MSG(loom_conv_nhwc_weight_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "empty weight");
  free(x), free(w), free(y);
}

int main(void) {
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  if (isa != LOOM_GEMM_AMX && isa != LOOM_GEMM_AVX512BF16) {
    test_skip("the GEMM variant is neither AMX nor AVX512-BF16 (the CPU, LOOM_CPU_FEATURES or LOOM_GEMM)");
    TEST_MAIN_END();
  }
  /* "same" 3x3, rows wider than a tile's 32 positions, a bias */
  check((case_){.n = 2, .c = 64, .o = 64, .h = 9, .w = 37, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                .ph = 1, .pw = 1, .dh = 1, .dw = 1, .bias = 1});
  /* channels that leave part of a block (40 in, 48 out), 5x5 dilated */
  check((case_){.n = 1, .c = 40, .o = 48, .h = 13, .w = 11, .kh = 5, .kw = 5, .sh = 1,
                .sw = 1, .ph = 2, .pw = 4, .dh = 2, .dw = 1});
  /* stride 2 over odd sizes: four phase planes; 96 out-channels */
  check((case_){.n = 2, .c = 32, .o = 96, .h = 15, .w = 17, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
                .ph = 1, .pw = 1, .dh = 1, .dw = 1, .bias = 1});
  /* the input gradient's flipped weight; stride 2 down, 1 across */
  check((case_){.n = 1, .c = 64, .o = 40, .h = 12, .w = 10, .kh = 3, .kw = 2, .sh = 2,
                .sw = 1, .ph = 2, .pw = 1, .dh = 1, .dw = 1, .flipped = 1});
  /* the weight gradient: whole blocks; part-empty ones; stride 2; dilated 5x5 */
  check_wgrad((case_){.n = 2, .c = 64, .o = 64, .h = 9, .w = 37, .kh = 3, .kw = 3, .sh = 1,
                      .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1});
  check_wgrad((case_){.n = 1, .c = 72, .o = 40, .h = 11, .w = 10, .kh = 3, .kw = 3, .sh = 1,
                      .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1});
  check_wgrad((case_){.n = 2, .c = 32, .o = 64, .h = 15, .w = 17, .kh = 3, .kw = 3, .sh = 2,
                      .sw = 2, .ph = 1, .pw = 1, .dh = 1, .dw = 1});
  check_wgrad((case_){.n = 1, .c = 32, .o = 32, .h = 13, .w = 11, .kh = 5, .kw = 5, .sh = 1,
                      .sw = 1, .ph = 2, .pw = 4, .dh = 2, .dw = 1});
  /* 16 taps (the most rounded by vectors) and 2, with in- and out-channel tails */
  check_wgrad((case_){.n = 2, .c = 40, .o = 72, .h = 9, .w = 10, .kh = 4, .kw = 4, .sh = 1,
                      .sw = 1, .ph = 2, .pw = 1, .dh = 1, .dw = 1});
  check_wgrad((case_){.n = 1, .c = 72, .o = 40, .h = 7, .w = 12, .kh = 1, .kw = 2, .sh = 1,
                      .sw = 1, .ph = 0, .pw = 1, .dh = 1, .dw = 1});
  check_shared();
  check_refused();
  TEST_MAIN_END();
}
