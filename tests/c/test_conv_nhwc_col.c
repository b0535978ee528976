/* tests/c/test_conv_nhwc_col.c — the channels-last im2col and col2im
 * ("im2col.nhwc_to_col", "im2col.nhwc_to_image", kernels/conv/im2col_nhwc.c)
 * against direct loops over the geometry: exact copies (zeros outside the
 * image) and, for col2im, sums in the fixed tap order, so bit equality;
 * channels-last and NCHW images, strides, padding, dilation, 2-d and 3-d;
 * any chunking gives the same bits; bad arguments give a status. And "conv.pad"
 * from a channels-last image gives the planes it gives from an NCHW one. */
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernel_test_util.h"
#include "loom/status.h"

typedef struct geo {
  int64_t n, c, d, h, w; /* image */
  int64_t k[3], s[3], p[3], dl[3];
} geo;

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

static void scalars(const geo *g, const int64_t *o, loom_scalar *sc) {
  for (int i = 0; i < 3; ++i) {
    sc[i] = si(g->k[i]), sc[3 + i] = si(g->s[i]), sc[6 + i] = si(g->p[i]);
    sc[9 + i] = si(g->dl[i]), sc[12 + i] = si(o[i]);
  }
}

/* The image's strides: channels last (cl) or NCHW. */
static void image_strides(const geo *g, int cl, int64_t *st) {
  if (cl) {
    st[1] = 1, st[4] = g->c, st[3] = g->w * g->c, st[2] = g->h * g->w * g->c;
  } else {
    st[4] = 1, st[3] = g->w, st[2] = g->h * g->w, st[1] = g->d * g->h * g->w;
  }
  st[0] = g->c * g->d * g->h * g->w;
}

static void check_case(geo g, int cl) {
  int64_t o[3] = {out_size(g.d, g.k[0], g.s[0], g.p[0], g.dl[0]),
                  out_size(g.h, g.k[1], g.s[1], g.p[1], g.dl[1]),
                  out_size(g.w, g.k[2], g.s[2], g.p[2], g.dl[2])};
  const int64_t len = o[0] * o[1] * o[2], taps = g.k[0] * g.k[1] * g.k[2];
  const int64_t rows = g.n * len, kc = taps * g.c, numel = g.n * g.c * g.d * g.h * g.w;
  int64_t st[5], sz[5] = {g.n, g.c, g.d, g.h, g.w};
  image_strides(&g, cl, st);
  float *img = malloc(sizeof(float) * numel), *back = malloc(sizeof(float) * numel);
  float *ref_img = calloc((size_t)numel, sizeof(float));
  float *col = malloc(sizeof(float) * rows * kc), *ref = calloc((size_t)(rows * kc), sizeof(float));
  for (int64_t i = 0; i < numel; ++i) img[i] = (float)frand();
  /* the direct loops: col[r][t*C + c] = img at the tap's position (or 0),
   * and the image's sums in (row, tap) order, which is the tap order per
   * element since an element meets each tap at most once */
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t q = 0; q < len; ++q)
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t od = q / (o[1] * o[2]), oh = q / o[2] % o[1], ow = q % o[2];
        const int64_t kd = t / (g.k[1] * g.k[2]), kh = t / g.k[2] % g.k[1], kw = t % g.k[2];
        const int64_t id = od * g.s[0] - g.p[0] + kd * g.dl[0];
        const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.dl[1];
        const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.dl[2];
        if (id < 0 || id >= g.d || ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
        for (int64_t c = 0; c < g.c; ++c)
          ref[(n * len + q) * kc + t * g.c + c] =
              img[n * st[0] + c * st[1] + id * st[2] + ih * st[3] + iw * st[4]];
      }
  for (int64_t i = 0; i < rows * kc; ++i) col[i] = -7.0f; /* every entry is written */
  int64_t csz[2] = {rows, kc};
  loom_tensor ts[2] = {dense(col, LOOM_FLOAT32, 2, csz), tensor(img, LOOM_FLOAT32, 5, sz, st)};
  loom_scalar sc[LOOM_CONV_NUM_SCALARS];
  scalars(&g, o, sc);
  CHECK(run_chunks(loom_im2col_nhwc_kernel, ts, 2, sc, LOOM_CONV_NUM_SCALARS, rows, 3) == 0);
  CHECK_MSG(memcmp(col, ref, sizeof(float) * rows * kc) == 0,
            "nhwc_to_col (c %ld, cl %d) differs from the direct copy", (long)g.c, cl);

  /* col2im of the col: each element sums its entries in tap order */
  for (int64_t i = 0; i < rows * kc; ++i) col[i] = (float)frand();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t id = 0; id < g.d; ++id)
        for (int64_t ih = 0; ih < g.h; ++ih)
          for (int64_t iw = 0; iw < g.w; ++iw) {
            float acc = 0.0f;
            for (int64_t t = 0; t < taps; ++t) {
              const int64_t kd = t / (g.k[1] * g.k[2]), kh = t / g.k[2] % g.k[1], kw = t % g.k[2];
              const int64_t vd = id + g.p[0] - kd * g.dl[0], vh = ih + g.p[1] - kh * g.dl[1],
                            vw = iw + g.p[2] - kw * g.dl[2];
              if (vd < 0 || vh < 0 || vw < 0 || vd % g.s[0] || vh % g.s[1] || vw % g.s[2]) continue;
              const int64_t od = vd / g.s[0], oh = vh / g.s[1], ow = vw / g.s[2];
              if (od >= o[0] || oh >= o[1] || ow >= o[2]) continue;
              acc += col[(n * len + (od * o[1] + oh) * o[2] + ow) * kc + t * g.c + c];
            }
            ref_img[n * st[0] + c * st[1] + id * st[2] + ih * st[3] + iw * st[4]] = acc;
          }
  const int64_t items = g.n * g.d * g.h * g.w;
  for (int64_t grain = 1; grain <= 7; grain += 6) {
    for (int64_t i = 0; i < numel; ++i) back[i] = 99.0f; /* overwritten */
    loom_tensor bt[2] = {tensor(back, LOOM_FLOAT32, 5, sz, st), dense(col, LOOM_FLOAT32, 2, csz)};
    CHECK(run_chunks(loom_col2im_nhwc_kernel, bt, 2, sc, LOOM_CONV_NUM_SCALARS, items, grain) == 0);
    CHECK_MSG(memcmp(back, ref_img, sizeof(float) * numel) == 0,
              "nhwc_to_image (c %ld, cl %d, grain %ld) differs from the sums in tap order",
              (long)g.c, cl, (long)grain);
  }
  free(img), free(back), free(ref_img), free(col), free(ref);
}

/* Bad arguments: a status, never a write past the tensors. */
static void check_errors(void) {
  float img[2 * 3 * 4 * 4], col[2 * 16 * 27];
  int64_t sz[5] = {2, 3, 1, 4, 4}, st[5] = {48, 1, 48, 12, 3}, csz[2] = {32, 27};
  geo g = {2, 3, 1, 4, 4, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}};
  int64_t o[3] = {1, 4, 4};
  loom_scalar sc[LOOM_CONV_NUM_SCALARS];
  scalars(&g, o, sc);
  loom_tensor ts[2] = {dense(col, LOOM_FLOAT32, 2, csz), tensor(img, LOOM_FLOAT32, 5, sz, st)};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 2, .tensors = ts,
                        .num_scalars = LOOM_CONV_NUM_SCALARS, .scalars = sc, .range = 32,
                        .grain = 32};
  CHECK(loom_im2col_nhwc_kernel(&a, 0, 32) == 0);
  CHECK(loom_im2col_nhwc_kernel(&a, 0, 33) == LOOM_ERROR_INVALID_ARGUMENT); /* past the rows */
  ts[0].sizes[1] = 26; /* not K*C columns */
  CHECK(loom_im2col_nhwc_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  ts[0].sizes[1] = 27, ts[0].dtype = LOOM_BFLOAT16;
  CHECK(loom_im2col_nhwc_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  ts[0].dtype = LOOM_FLOAT32, sc[3] = si(0); /* stride 0 */
  CHECK(loom_im2col_nhwc_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
  sc[3] = si(1);
  loom_tensor bt[2] = {ts[1], ts[0]};
  a.tensors = bt;
  CHECK(loom_col2im_nhwc_kernel(&a, 0, 32) == 0);
  CHECK(loom_col2im_nhwc_kernel(&a, 0, 33) == LOOM_ERROR_INVALID_ARGUMENT);
  a.num_scalars = 3;
  CHECK(loom_col2im_nhwc_kernel(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* "conv.pad" reads a channels-last image (one block of channels at a time)
 * into the planes it makes of the same image laid out NCHW, for any
 * chunking of its items. */
static void check_pad(int64_t c, int64_t sh, int64_t sw, int64_t w) {
  const int64_t n = 2, h = 9, top = 1, left = 2, wq = (w + left + 1 + sw - 1) / sw;
  const int64_t phases = sh * sw, plane = ((h + top + 1 + sh - 1) / sh) * wq + 5;
  const int64_t numel = n * c * h * w, items = n * c * phases;
  float *nchw = malloc(sizeof(float) * numel), *nhwc = malloc(sizeof(float) * numel);
  float *p0 = malloc(sizeof(float) * items * plane), *p1 = malloc(sizeof(float) * items * plane);
  for (int64_t i = 0; i < numel; ++i) nchw[i] = (float)frand();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < h * w; ++i)
        nhwc[(b * h * w + i) * c + ch] = nchw[(b * c + ch) * h * w + i];
  int64_t sz[5] = {n, c, 1, h, w}, s0[5] = {c * h * w, h * w, h * w, w, 1};
  int64_t s1[5] = {c * h * w, 1, h * w * c, w * c, c}, psz[3] = {n, c * phases, plane};
  loom_scalar sc[5] = {si(top), si(left), si(wq), si(sh), si(sw)};
  loom_tensor t0[2] = {dense(p0, LOOM_FLOAT32, 3, psz), tensor(nchw, LOOM_FLOAT32, 5, sz, s0)};
  CHECK(run_chunks(loom_conv_pad_kernel, t0, 2, sc, 5, items, items) == 0);
  for (int64_t grain = 1; grain <= 5; grain += 2) {
    for (int64_t i = 0; i < items * plane; ++i) p1[i] = 55.0f;
    loom_tensor t1[2] = {dense(p1, LOOM_FLOAT32, 3, psz), tensor(nhwc, LOOM_FLOAT32, 5, sz, s1)};
    CHECK(run_chunks(loom_conv_pad_kernel, t1, 2, sc, 5, items, grain) == 0);
    CHECK_MSG(memcmp(p0, p1, sizeof(float) * items * plane) == 0,
              "conv.pad from channels last (c %ld, stride %ldx%ld, w %ld, grain %ld) differs",
              (long)c, (long)sh, (long)sw, (long)w, (long)grain);
  }
  free(nchw), free(nhwc), free(p0), free(p1);
}

int main(void) {
  srand(7);
  const geo cases[] = {
      {2, 5, 1, 7, 8, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}},  /* 3x3 / 2 */
      {2, 8, 1, 6, 6, {1, 1, 1}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}},  /* 1x1 / 2 */
      {1, 3, 1, 9, 7, {1, 3, 2}, {1, 1, 3}, {0, 2, 1}, {1, 2, 1}},  /* dilated, uneven */
      {2, 4, 5, 6, 5, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 1, 2}},  /* 3-d */
      {1, 17, 1, 5, 5, {1, 5, 5}, {1, 3, 3}, {0, 2, 2}, {1, 1, 1}}, /* window past the image */
      {2, 3, 1, 4, 21, {1, 2, 17}, {1, 1, 2}, {0, 1, 3}, {1, 1, 1}}, /* more than 16 taps a row */
      /* rows too long for col2im's table of the columns' taps */
      {1, 2, 1, 3, 700, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int cl = 0; cl < 2; ++cl) check_case(cases[i], cl);
  check_errors();
  check_pad(5, 1, 1, 10);
  check_pad(40, 2, 2, 10);
  check_pad(33, 1, 2, 10);
  /* rows of 16 positions and more (whole and partial blocks of the
   * transposes), a stride of 3 */
  check_pad(19, 1, 1, 37);
  check_pad(48, 2, 2, 45);
  check_pad(17, 3, 3, 50);
  /* narrow images (positions at most 4 floats apart: permutes, not
   * transposes), whole and partial blocks of 16 positions, channels split
   * between chunks */
  check_pad(3, 1, 1, 37);
  check_pad(3, 1, 1, 10);
  check_pad(2, 1, 2, 37);
  check_pad(4, 1, 1, 21);
  check_pad(2, 2, 1, 16);
  TEST_MAIN_END();
}
