/* tests/c/test_conv_generic_winograd.c — the generic twins of the AVX-512
 * Winograd F(2x2, 3x3) kernels (kernels/conv/conv_variants.h), called directly:
 * - the weight transform gives the AVX-512 variant's bits (adds and
 *   halvings in the same order);
 * - the forward and the weight gradient with the AVX-512 micro-kernel
 *   give the AVX-512 variants' bits; with the generic one, like them, they
 *   lie within 1e-5 of the sum of the products' magnitudes of a direct
 *   convolution in double (the transforms' roundings included);
 * - the public kernels follow the GEMM variant: AVX-512 where it is, the
 *   twins under LOOM_CPU_FEATURES=generic (a child process), whose bits
 *   differ from the AVX-512 variants' where the CPU has them. */
#include "base/cpu.h"
#include "tests/c/conv_twin_util.h"

enum { MR = LOOM_CONV_WINOGRAD_MR, TILES = LOOM_CONV_WINOGRAD_TILES };

static int with_avx512_ukr(const loom_kernel_args *a, int64_t b, int64_t e) {
  return loom_conv_winograd_with(a, b, e, loom_gemm_ukr_avx512_f32);
}
static int wgrad_with_avx512_ukr(const loom_kernel_args *a, int64_t b, int64_t e) {
  return loom_conv_winograd_wgrad_with(a, b, e, loom_gemm_ukr_avx512_f32);
}

/* A 3x3 convolution of n images of k channels (h x w, padding p) into m:
 * its phase planes, and the grid of 2x2 tiles. */
typedef struct wino {
  conv_case cc;
  int64_t m, k, p, ho, wo, tho, two, wq, gpos, plane, panels;
  float *xp; /* (N, 4 K, plane) */
} wino;

static wino make_wino(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t p) {
  wino c = {.cc = make_case((geom){.n = n, .c = k, .o = m, .groups = 1, .in = {1, h, w},
                                   .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, p, p},
                                   .d = {1, 1, 1}}),
            .m = m, .k = k, .p = p, .ho = h + 2 * p - 2, .wo = w + 2 * p - 2};
  c.tho = (c.ho + 1) / 2, c.two = (c.wo + 1) / 2, c.wq = (w + 2 * p + 1) / 2;
  c.gpos = (c.tho * c.wq + TILES - 1) / TILES * TILES, c.panels = (m + MR - 1) / MR;
  const int64_t prow = (h + 2 * p + 1) / 2 * c.wq;
  c.plane = ((c.gpos + c.wq + 1 > prow ? c.gpos + c.wq + 1 : prow) + 15) / 16 * 16;
  c.xp = malloc(sizeof(float) * (size_t)(n * 4 * k * c.plane));
  loom_tensor ts[2] = {{.data = c.xp, .dtype = LOOM_FLOAT32, .rank = 3,
                        .sizes = {n, 4 * k, c.plane}, .strides = {4 * k * c.plane, c.plane, 1}},
                       image(c.cc.x, n, k, c.cc.g.in)};
  loom_scalar sc[5] = {{.i = p}, {.i = p}, {.i = c.wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, ts, 2, sc, 5, n * 4 * k);
  return c;
}

static void free_wino(wino *c) {
  free(c->xp);
  free_case(&c->cc);
}

static loom_tensor u_of(const wino *c, float *u) {
  return t4(u, 16, c->panels, c->k, MR, c->panels * c->k * MR, c->k * MR, MR, 1);
}

/* U by `fn`: of w, or with `flipped` of w read as (K, M, 3, 3) reversed. */
static void weight(const wino *c, loom_kernel_fn fn, int flipped, float *u) {
  loom_tensor ts[2] = {u_of(c, u), flipped ? t4(c->cc.w, c->k, c->m, 3, 3, c->m * 9, 9, 3, 1)
                                           : t4(c->cc.w, c->m, c->k, 3, 3, c->k * 9, 9, 3, 1)};
  loom_scalar sc[1] = {{.i = flipped}};
  memset(u, 0xff, sizeof(float) * (size_t)(16 * c->panels * c->k * MR));
  run(fn, ts, 2, sc, 1, c->panels);
}

/* The forward `fn` from U into y (N, M, ho, wo), with bias. */
static void forward(const wino *c, loom_kernel_fn fn, float *u, float *y) {
  const int64_t n = c->cc.g.n, len = c->ho * c->wo;
  loom_tensor ts[4] = {
      t4(y, n, c->m, c->ho, c->wo, c->m * len, len, c->wo, 1), u_of(c, u),
      {.data = c->xp, .dtype = LOOM_FLOAT32, .rank = 3, .sizes = {n, 4 * c->k, c->plane},
       .strides = {4 * c->k * c->plane, c->plane, 1}},
      {.data = c->cc.bias, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {c->m}, .strides = {1}}};
  loom_scalar sc[2] = {{.i = c->wq}, {.i = c->gpos}};
  const int64_t groups = (c->panels + LOOM_CONV_WINOGRAD_PANELS - 1) / LOOM_CONV_WINOGRAD_PANELS;
  memset(y, 0xff, sizeof(float) * (size_t)(n * c->m * len));
  run(fn, ts, 4, sc, 2, n * (c->gpos / TILES) * groups);
}

/* An image (N, C, H, W) copied from NCHW src by rows: each row `gap`
 * floats longer and each plane `gap` floats more, so the kernels read it
 * through its strides (a view of a wider image). */
static loom_tensor rows_copy(const float *src, int64_t n, int64_t ch, int64_t h, int64_t w,
                             int64_t gap, float **buf) {
  const int64_t rs = w + gap, cs = h * rs + gap;
  *buf = malloc(sizeof(float) * (size_t)(n * ch * cs));
  for (int64_t i = 0; i < n * ch * cs; ++i) (*buf)[i] = 1e30f; /* the gaps: never read */
  for (int64_t p = 0; p < n * ch; ++p)
    for (int64_t y = 0; y < h; ++y)
      memcpy(*buf + p * cs + y * rs, src + (p * h + y) * w, sizeof(float) * (size_t)w);
  return t4(*buf, n, ch, h, w, ch * cs, cs, rs, 1);
}

/* The grid of tiles the image read in place is given: the planes' (rows
 * wq wide, gpos positions per image), or with `dense` the batch's tiles
 * back to back (rows two wide, tho two per image), blocks spanning
 * images. */
static void image_grid(const wino *c, int dense, int64_t *wq, int64_t *gpos) {
  *wq = dense ? c->two : c->wq, *gpos = dense ? c->tho * c->two : c->gpos;
}

/* The forward `fn` as `forward`, from the image read in place (no
 * planes): laid out channels last, or by rows (NCHW, `rows`), over the
 * planes' grid or the dense one. */
static void forward_image(const wino *c, loom_kernel_fn fn, float *u, float *y, int rows,
                          int dense) {
  const int64_t n = c->cc.g.n, h = c->cc.g.in[1], w = c->cc.g.in[2], k = c->k;
  const int64_t len = c->ho * c->wo;
  float *xc = malloc(sizeof(float) * (size_t)(n * k * h * w)), *xr = NULL;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < k; ++ch)
      for (int64_t i = 0; i < h * w; ++i) xc[(b * h * w + i) * k + ch] = c->cc.x[(b * k + ch) * h * w + i];
  loom_tensor ts[4] = {
      t4(y, n, c->m, c->ho, c->wo, c->m * len, len, c->wo, 1), u_of(c, u),
      rows ? rows_copy(c->cc.x, n, k, h, w, 3, &xr) : t4(xc, n, k, h, w, h * w * k, 1, w * k, k),
      {.data = c->cc.bias, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {c->m}, .strides = {1}}};
  int64_t wq, gpos;
  image_grid(c, dense, &wq, &gpos);
  loom_scalar sc[4] = {{.i = wq}, {.i = gpos}, {.i = c->p}, {.i = c->p}};
  const int64_t groups = (c->panels + LOOM_CONV_WINOGRAD_PANELS - 1) / LOOM_CONV_WINOGRAD_PANELS;
  const int64_t items = (n * gpos + TILES - 1) / TILES * groups;
  memset(y, 0xff, sizeof(float) * (size_t)(n * c->m * len));
  run(fn, ts, 4, sc, 4, items);
  /* a range past the grid's blocks is refused */
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4, .tensors = ts,
                        .num_scalars = 4, .scalars = sc, .range = items + 1, .grain = 1};
  CHECK_MSG(fn(&a, items, items + 1) == LOOM_ERROR_INVALID_ARGUMENT, "a block past the grid ran");
  free(xc), free(xr);
}

/* The weight gradient `fn` over chunks of tchunk tiles, then the shared
 * finish, into gw (M, K, 3, 3); dy's planes padded by one row and column
 * (the input gradient's) where `padded`. */
static void weight_grad_from(const wino *c, loom_kernel_fn fn, int64_t tchunk, float *gw,
                             int padded) {
  const int64_t n = c->cc.g.n, len = c->ho * c->wo, m = c->m, k = c->k;
  int64_t dplane = c->gpos > c->tho * c->wq ? c->gpos : c->tho * c->wq;
  if (padded) dplane = c->gpos + c->wq + 1 > dplane + c->wq ? c->gpos + c->wq + 1 : dplane + c->wq;
  dplane = (dplane + 15) / 16 * 16;
  const int64_t chunks = (n * c->gpos + tchunk - 1) / tchunk;
  float *dyp = malloc(sizeof(float) * (size_t)(n * 4 * m * dplane));
  float *part = malloc(sizeof(float) * (size_t)(chunks * 16 * m * k));
  /* dy (O, N, L) as images (N, M, 1, ho, wo) */
  loom_tensor dts[2] = {{.data = dyp, .dtype = LOOM_FLOAT32, .rank = 3,
                         .sizes = {n, 4 * m, dplane}, .strides = {4 * m * dplane, dplane, 1}},
                        {.data = c->cc.dy, .dtype = LOOM_FLOAT32, .rank = 5,
                         .sizes = {n, m, 1, c->ho, c->wo},
                         .strides = {len, n * len, len, c->wo, 1}}};
  loom_scalar dsc[5] = {{.i = padded}, {.i = padded}, {.i = c->wq}, {.i = 2}, {.i = 2}};
  run(loom_conv_pad_kernel, dts, 2, dsc, 5, n * 4 * m);
  loom_tensor ts[3] = {t4(part, chunks, 16, m, k, 16 * m * k, m * k, k, 1),
                       {.data = c->xp, .dtype = LOOM_FLOAT32, .rank = 3,
                        .sizes = {n, 4 * k, c->plane}, .strides = {4 * k * c->plane, c->plane, 1}},
                       dts[0]};
  loom_scalar sc[4] = {{.i = c->wq}, {.i = c->gpos}, {.i = tchunk}, {.i = padded}};
  const int64_t items = chunks * ((m + LOOM_CONV_WINOGRAD_WG_M - 1) / LOOM_CONV_WINOGRAD_WG_M) *
                        ((k + LOOM_CONV_WINOGRAD_WG_K - 1) / LOOM_CONV_WINOGRAD_WG_K);
  run(fn, ts, 3, sc, padded ? 4 : 3, items);
  loom_tensor fts[2] = {t4(gw, m, k, 3, 3, k * 9, 9, 3, 1), ts[0]};
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m);
  free(dyp), free(part);
}

/* The weight gradient `fn` as weight_grad, from x and dy read in place
 * (no planes): laid out channels last, or by rows (NCHW, `rows`), over the
 * planes' grid or the dense one. */
static void weight_grad_images(const wino *c, loom_kernel_fn fn, int64_t tchunk, float *gw,
                               int rows, int dense) {
  const int64_t n = c->cc.g.n, h = c->cc.g.in[1], w = c->cc.g.in[2], m = c->m, k = c->k;
  int64_t wq, gpos;
  image_grid(c, dense, &wq, &gpos);
  const int64_t len = c->ho * c->wo, chunks = (n * gpos + tchunk - 1) / tchunk;
  float *xc = malloc(sizeof(float) * (size_t)(n * k * h * w));
  float *dyc = malloc(sizeof(float) * (size_t)(n * m * len)), *xr = NULL, *dr = NULL;
  float *dyn = malloc(sizeof(float) * (size_t)(n * m * len));
  float *part = malloc(sizeof(float) * (size_t)(chunks * 16 * m * k));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < k; ++ch)
      for (int64_t i = 0; i < h * w; ++i) xc[(b * h * w + i) * k + ch] = c->cc.x[(b * k + ch) * h * w + i];
    /* dy is (O, N, L) */
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < len; ++i) {
        dyc[(b * len + i) * m + o] = c->cc.dy[(o * n + b) * len + i];
        dyn[(b * m + o) * len + i] = c->cc.dy[(o * n + b) * len + i];
      }
  }
  loom_tensor ts[3] = {t4(part, chunks, 16, m, k, 16 * m * k, m * k, k, 1),
                       t4(xc, n, k, h, w, h * w * k, 1, w * k, k),
                       t4(dyc, n, m, c->ho, c->wo, len * m, 1, c->wo * m, m)};
  if (rows)
    ts[1] = rows_copy(c->cc.x, n, k, h, w, 3, &xr), ts[2] = rows_copy(dyn, n, m, c->ho, c->wo, 1, &dr);
  loom_scalar sc[6] = {{.i = wq}, {.i = gpos}, {.i = tchunk}, {.i = 0}, {.i = c->p}, {.i = c->p}};
  const int64_t items = chunks * ((m + LOOM_CONV_WINOGRAD_WG_M - 1) / LOOM_CONV_WINOGRAD_WG_M) *
                        ((k + LOOM_CONV_WINOGRAD_WG_K - 1) / LOOM_CONV_WINOGRAD_WG_K);
  run(fn, ts, 3, sc, 6, items);
  loom_tensor fts[2] = {t4(gw, m, k, 3, 3, k * 9, 9, 3, 1), ts[0]};
  run(loom_conv_winograd_wgrad_finish_kernel, fts, 2, sc, 0, m);
  free(xc), free(dyc), free(dyn), free(xr), free(dr), free(part);
}

static void weight_grad(const wino *c, loom_kernel_fn fn, int64_t tchunk, float *gw) {
  weight_grad_from(c, fn, tchunk, gw, 0);
}

/* The double reference of a flipped weight's convolution, with bias. */
static void flipped_reference(const wino *c, double *ref, double *mag) {
  const conv_case *cc = &c->cc;
  const int64_t h = cc->g.in[1], w = cc->g.in[2];
  for (int64_t b = 0; b < cc->g.n; ++b)
    for (int64_t o = 0; o < c->m; ++o)
      for (int64_t i = 0; i < c->ho * c->wo; ++i) {
        double r = cc->bias[o], a = fabs(r);
        for (int64_t ch = 0; ch < c->k; ++ch)
          for (int64_t t = 0; t < 9; ++t) {
            const int64_t yy = i / c->wo + t / 3 - c->p, xx = i % c->wo + t % 3 - c->p;
            if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
            /* w read as (K, M, 3, 3), taps reversed */
            const double v = (double)cc->w[(ch * c->m + o) * 9 + 8 - t] *
                             cc->x[((b * c->k + ch) * h + yy) * w + xx];
            r += v, a += fabs(v);
          }
        ref[(b * c->m + o) * c->ho * c->wo + i] = r, mag[(b * c->m + o) * c->ho * c->wo + i] = a;
      }
}

static void check_winograd(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t p,
                           int flipped, int hw_avx512) {
  wino c = make_wino(n, k, m, h, w, p);
  const int64_t ny = n * m * c.ho * c.wo, nu = 16 * c.panels * k * MR;
  float *u0 = malloc(sizeof(float) * nu), *u1 = malloc(sizeof(float) * nu);
  float *y1 = malloc(sizeof(float) * ny), *y2 = malloc(sizeof(float) * ny);
  double *ref = c.cc.y, *mag = c.cc.ymag;
  if (flipped) { /* the flipped weight is (K, M): the case's own reference is not it */
    ref = malloc(sizeof(double) * ny), mag = malloc(sizeof(double) * ny);
    flipped_reference(&c, ref, mag);
  }
  weight(&c, loom_conv_winograd_weight_generic, flipped, u1);
  { /* from the weight laid out channels last: the same transform */
    const int64_t r = flipped ? k : m, q = flipped ? m : k;
    float *wc = malloc(sizeof(float) * (size_t)(r * q * 9));
    for (int64_t a = 0; a < r; ++a)
      for (int64_t b = 0; b < q; ++b)
        for (int64_t t = 0; t < 9; ++t) wc[(a * 9 + t) * q + b] = c.cc.w[(a * q + b) * 9 + t];
    loom_tensor ts[2] = {u_of(&c, u0), t4(wc, r, q, 3, 3, 9 * q, 1, 3 * q, q)};
    loom_scalar sc[1] = {{.i = flipped}};
    run(loom_conv_winograd_weight_generic, ts, 2, sc, 1, c.panels);
    CHECK_MSG(same(u0, u1, nu), "the weight transform of a channels-last weight differs");
    free(wc);
  }
  forward(&c, loom_conv_winograd_generic, u1, y1);
  CHECK_MSG(misses(y1, ref, mag, ny) == 0, "generic Winograd forward (k %ld m %ld) misses the reference",
        (long)k, (long)m);
  /* from the image, on either grid: each tile's sums are the planes' */
  for (int dense = 0; dense < 2; ++dense) {
    forward_image(&c, loom_conv_winograd_generic, u1, y2, 0, dense);
    CHECK_MSG(same(y1, y2, ny), "generic Winograd forward from the channels-last image differs (dense %d)",
              dense);
    forward_image(&c, loom_conv_winograd_generic, u1, y2, 1, dense);
    CHECK_MSG(same(y1, y2, ny), "generic Winograd forward from the image's rows differs (dense %d)",
              dense);
  }
  if (hw_avx512) {
    weight(&c, loom_conv_winograd_weight_avx512, flipped, u0);
    CHECK_MSG(same(u0, u1, nu), "the weight transforms differ");
    forward(&c, loom_conv_winograd_avx512, u0, y1);
    forward(&c, with_avx512_ukr, u0, y2);
    CHECK_MSG(same(y1, y2, ny), "twin with the AVX-512 micro-kernel differs from the AVX-512 forward");
    CHECK_MSG(misses(y1, ref, mag, ny) == 0, "AVX-512 Winograd forward misses the reference");
    for (int rows = 0; rows < 2; ++rows)
      for (int dense = 0; dense < 2; ++dense) {
        forward_image(&c, with_avx512_ukr, u0, y2, rows, dense);
        CHECK_MSG(same(y1, y2, ny), "twin from the image (rows %d, dense %d) differs from the AVX-512 forward",
                  rows, dense);
        forward_image(&c, loom_conv_winograd_avx512, u0, y2, rows, dense);
        CHECK_MSG(same(y1, y2, ny), "AVX-512 forward from the image (rows %d, dense %d) differs", rows,
                  dense);
      }
  }
  if (flipped) free(ref), free(mag);
  free(u0), free(u1), free(y1), free(y2);
  free_wino(&c);
}

static void check_weight_grad(int64_t n, int64_t k, int64_t m, int64_t h, int64_t w, int64_t p,
                              int hw_avx512) {
  wino c = make_wino(n, k, m, h, w, p);
  const int64_t nw = m * k * 9;
  float *w1 = malloc(sizeof(float) * nw), *w2 = malloc(sizeof(float) * nw);
  weight_grad(&c, loom_conv_winograd_wgrad_generic, TILES, w1);
  CHECK_MSG(misses(w1, c.cc.gw, c.cc.gwmag, nw) == 0,
        "generic Winograd weight grad (k %ld m %ld) misses the reference", (long)k, (long)m);
  /* from dy's planes padded by one (the input gradient's): the same bits */
  weight_grad_from(&c, loom_conv_winograd_wgrad_generic, TILES, w2, 1);
  CHECK_MSG(same(w1, w2, nw), "generic weight grad from dy's padded planes differs");
  weight_grad_images(&c, loom_conv_winograd_wgrad_generic, TILES, w2, 0, 0);
  CHECK_MSG(same(w1, w2, nw), "generic weight grad from channels-last images differs");
  weight_grad_images(&c, loom_conv_winograd_wgrad_generic, TILES, w2, 1, 0);
  CHECK_MSG(same(w1, w2, nw), "generic weight grad from the images' rows differs");
  /* the dense grid sums the same tiles in other blocks: the reference's
   * values, the same bits from either layout */
  float *w3 = malloc(sizeof(float) * nw);
  weight_grad_images(&c, loom_conv_winograd_wgrad_generic, 2 * TILES, w2, 0, 1);
  CHECK_MSG(misses(w2, c.cc.gw, c.cc.gwmag, nw) == 0,
            "generic weight grad on the dense grid misses the reference");
  weight_grad_images(&c, loom_conv_winograd_wgrad_generic, 2 * TILES, w3, 1, 1);
  CHECK_MSG(same(w2, w3, nw), "generic weight grad on the dense grid differs between layouts");
  if (hw_avx512) {
    weight_grad(&c, loom_conv_winograd_wgrad_avx512, 2 * TILES, w1);
    weight_grad_from(&c, loom_conv_winograd_wgrad_avx512, 2 * TILES, w2, 1);
    CHECK_MSG(same(w1, w2, nw), "AVX-512 weight grad from dy's padded planes differs");
    /* the dense grid: the reference's values; on either grid, one set of
     * bits from both layouts and the twin with the AVX-512 micro-kernel */
    weight_grad_images(&c, loom_conv_winograd_wgrad_avx512, 2 * TILES, w3, 0, 1);
    CHECK_MSG(misses(w3, c.cc.gw, c.cc.gwmag, nw) == 0,
              "AVX-512 weight grad on the dense grid misses the reference");
    for (int dense = 0; dense < 2; ++dense)
      for (int rows = 0; rows < 2; ++rows) {
        const float *want = dense ? w3 : w1;
        weight_grad_images(&c, loom_conv_winograd_wgrad_avx512, 2 * TILES, w2, rows, dense);
        CHECK_MSG(same(want, w2, nw), "AVX-512 weight grad from the images (rows %d, dense %d) differs",
                  rows, dense);
        weight_grad_images(&c, wgrad_with_avx512_ukr, 2 * TILES, w2, rows, dense);
        CHECK_MSG(same(want, w2, nw),
                  "twin from the images (rows %d, dense %d) differs from the AVX-512 weight grad", rows,
                  dense);
      }
    weight_grad(&c, wgrad_with_avx512_ukr, 2 * TILES, w2);
    CHECK_MSG(same(w1, w2, nw), "twin with the AVX-512 micro-kernel differs from the AVX-512 weight grad");
    CHECK_MSG(misses(w1, c.cc.gw, c.cc.gwmag, nw) == 0, "AVX-512 Winograd weight grad misses the reference");
  }
  free(w1), free(w2), free(w3);
  free_wino(&c);
}

/* The public kernels give the bits of the variant the GEMM's choice calls
 * for: AVX-512 where it runs, else the twins, whose forward and weight
 * gradient round differently from the AVX-512 variants'. */
static void check_selected(int hw_avx512) {
  const int avx = loom_gemm_isa_selected() != LOOM_GEMM_GENERIC;
  wino c = make_wino(2, 20, 17, 9, 11, 1);
  const int64_t ny = 2 * 17 * c.ho * c.wo, nu = 16 * c.panels * 20 * MR, nw = 17 * 20 * 9;
  float *u = malloc(sizeof(float) * nu), *y0 = malloc(sizeof(float) * ny);
  float *y1 = malloc(sizeof(float) * ny), *w0 = malloc(sizeof(float) * nw);
  float *w1 = malloc(sizeof(float) * nw);
  weight(&c, loom_conv_winograd_weight_generic, 0, u);
  forward(&c, loom_conv_winograd_kernel, u, y0);
  forward(&c, avx ? loom_conv_winograd_avx512 : loom_conv_winograd_generic, u, y1);
  CHECK_MSG(same(y0, y1, ny), "the forward selector did not run the %s variant", avx ? "AVX-512" : "generic");
  weight_grad(&c, loom_conv_winograd_wgrad_kernel, TILES, w0);
  weight_grad(&c, avx ? loom_conv_winograd_wgrad_avx512 : loom_conv_winograd_wgrad_generic, TILES, w1);
  CHECK_MSG(same(w0, w1, nw), "the weight-grad selector did not run the %s variant",
        avx ? "AVX-512" : "generic");
  if (!avx && hw_avx512) { /* the bits tell the variants apart */
    forward(&c, loom_conv_winograd_avx512, u, y1);
    CHECK_MSG(!same(y0, y1, ny), "the generic forward gave the AVX-512 bits");
    weight_grad(&c, loom_conv_winograd_wgrad_avx512, TILES, w1);
    CHECK_MSG(!same(w0, w1, nw), "the generic weight grad gave the AVX-512 bits");
  }
  free(u), free(y0), free(y1), free(w0), free(w1);
  free_wino(&c);
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "capped") == 0) {
    CHECK_MSG(loom_gemm_isa_selected() == LOOM_GEMM_GENERIC, "GEMM not generic under the cap");
    check_selected(atoi(argv[2]));
    TEST_MAIN_END();
  }
  const int hw = loom_gemm_isa_supported(LOOM_GEMM_AVX512);
  /* one tile block, odd output sizes; several blocks, channel passes
   * (k > 128) and panel groups (m > 96); no padding; the input gradient's
   * flipped weight */
  check_winograd(1, 3, 5, 7, 9, 1, 0, hw);
  check_winograd(2, 130, 101, 12, 10, 1, 0, hw);
  check_winograd(2, 16, 24, 11, 14, 0, 0, hw);
  check_winograd(2, 20, 17, 13, 15, 1, 1, hw);
  /* rows of more than 16 tiles (runs cut at 16 lanes), padding 2 */
  check_winograd(1, 19, 14, 5, 37, 1, 0, hw);
  check_winograd(1, 8, 13, 9, 6, 2, 0, hw);
  /* small images whose dense grid's blocks span images: 7x7 (16 tiles
   * each), 5x9 (15, odd), 8x8 by rows of 4 tiles; batch 1 of 16 tiles */
  check_winograd(3, 21, 19, 7, 7, 1, 0, hw);
  check_winograd(5, 17, 26, 5, 9, 1, 1, hw);
  check_winograd(7, 24, 13, 8, 8, 1, 0, hw);
  check_winograd(1, 16, 16, 8, 8, 1, 0, hw);
  /* weight gradients: one chunk; several chunks and channel groups each
   * way (m > 96, k > 64) with partial panels */
  check_weight_grad(1, 5, 7, 7, 9, 1, hw);
  check_weight_grad(2, 70, 100, 10, 11, 1, hw);
  check_weight_grad(2, 16, 20, 13, 8, 0, hw);
  check_weight_grad(1, 9, 13, 6, 38, 1, hw);
  check_weight_grad(3, 21, 19, 7, 7, 1, hw);
  check_weight_grad(5, 17, 26, 5, 9, 1, hw);
  check_weight_grad(7, 24, 13, 8, 8, 2, hw);
  check_selected(hw);
  CHECK_MSG(rerun_capped(argv, hw), "the run under LOOM_CPU_FEATURES=generic failed");
  TEST_MAIN_END();
}
