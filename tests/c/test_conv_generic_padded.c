/* tests/c/test_conv_generic_padded.c — the generic twins of the AVX-512
 * padded-row convolutions (kernels/conv/conv_variants.h), called directly:
 * - with an AVX-512 plan (dy packed, or read in place) a twin gives its
 *   AVX-512 variant's bits;
 * - with the generic plan the forward gives the bits of im2col + the
 *   generic GEMM (the unpadded kernel's products in its k order); the
 *   weight gradient, whose k blocks run over the padded grid, lies within
 *   1e-5 of the sum of the products' magnitudes of a double reference, as
 *   does the AVX-512 variant;
 * - tile widths and panels per item never change a twin's bits;
 * - the public kernels run the AVX-512 variants for AVX-512 plans, the
 *   twins for others. */
#include "tests/c/conv_twin_util.h"

static int hw_avx512; /* the AVX-512 variants may run here */

/* The padded grid of a 2-d case: rows wq wide, gpad positions per image. */
typedef struct padded {
  int64_t wq, gpad, plane, phases;
  float *xp; /* (N, C * phases, plane) */
} padded;

static padded make_padded(const conv_case *k) {
  const geom *g = &k->g;
  const int64_t sh = g->s[1], sw = g->s[2], hp = g->in[1] + 2 * g->p[1];
  padded pd = {.wq = (g->in[2] + 2 * g->p[2] + sw - 1) / sw, .phases = sh * sw};
  pd.gpad = (g->out[1] * pd.wq + 31) / 32 * 32;
  const int64_t halo = g->d[1] * (g->k[1] - 1) / sh * pd.wq + g->d[2] * (g->k[2] - 1) / sw;
  pd.plane = pd.gpad + halo > (hp + sh - 1) / sh * pd.wq ? pd.gpad + halo : (hp + sh - 1) / sh * pd.wq;
  pd.plane = (pd.plane + 15) / 16 * 16;
  pd.xp = malloc(sizeof(float) * (size_t)(g->n * g->c * pd.phases * pd.plane));
  loom_tensor ts[2] = {{.data = pd.xp, .dtype = LOOM_FLOAT32, .rank = 3,
                        .sizes = {g->n, g->c * pd.phases, pd.plane},
                        .strides = {g->c * pd.phases * pd.plane, pd.plane, 1}},
                       image(k->x, g->n, g->c, g->in)};
  loom_scalar sc[5] = {{.i = g->p[1]}, {.i = g->p[2]}, {.i = pd.wq}, {.i = sh}, {.i = sw}};
  run(loom_conv_pad_kernel, ts, 2, sc, 5, g->n * g->c * pd.phases);
  return pd;
}

static loom_tensor planes(const conv_case *k, const padded *pd) {
  const geom *g = &k->g;
  return (loom_tensor){.data = pd->xp, .dtype = LOOM_FLOAT32, .rank = 3,
                       .sizes = {g->n, g->c * pd->phases, pd->plane},
                       .strides = {g->c * pd->phases * pd->plane, pd->plane, 1}};
}

/* The padded forward `fn` under `isa` into y (N, O, ho, wo), with bias. */
static void forward(const conv_case *k, const padded *pd, int isa, loom_kernel_fn fn,
                    int64_t tpos, float *y) {
  const geom *g = &k->g;
  const int64_t cols = g->n * pd->gpad, len = k->len;
  loom_tensor ts[7] = {
      t4(NULL, 1, g->groups, k->og, cols, 0, 0, 0, 1),
      t4(k->w, 1, g->groups, k->og, k->ck, 0, k->og * k->ck, k->ck, 1),
      t4(NULL, 1, g->groups, k->ck, cols, 0, 0, 0, 1), {0}, planes(k, pd),
      t4(y, g->n, g->o, g->out[1], g->out[2], g->o * len, len, g->out[2], 1),
      {.data = k->bias, .dtype = LOOM_FLOAT32, .rank = 1, .sizes = {g->o}, .strides = {1}}};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], isa, &p) == 0, "padded plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  ts[3] = bytes(ws, p.workspace_bytes);
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, ts, 4, gsc, 3, p.pack_units_a);
  loom_scalar sc[2 + LOOM_CONV_NUM_SCALARS + 2] = {{.i = isa}, {.i = tpos}};
  scalars(g, sc + 2);
  sc[17].i = pd->wq, sc[18].i = pd->gpad;
  memset(y, 0xff, sizeof(float) * (size_t)(g->n * g->o * len));
  run(fn, ts, 7, sc, 19, g->groups * ((cols + tpos - 1) / tpos));
  free(ws);
}

/* The padded weight gradient `fn` under `isa` (flags included), partial
 * sums over k chunks of one k block (or all of k) added in order, qn
 * panels per item, into gw (O, C/G * K). */
static void weight_grad(const conv_case *k, const padded *pd, int isa, loom_kernel_fn fn,
                        int64_t qn, int one_chunk, float *gw) {
  const geom *g = &k->g;
  const int64_t nk = g->n * pd->gpad, len = k->len, nw = g->o * k->ck;
  float *dyp = malloc(sizeof(float) * (size_t)(g->o * nk));
  loom_tensor dts[2] = {{.data = dyp, .dtype = LOOM_FLOAT32, .rank = 3,
                         .sizes = {g->n, g->o, pd->gpad}, .strides = {pd->gpad, nk, 1}},
                        {.data = k->dy, .dtype = LOOM_FLOAT32, .rank = 5,
                         .sizes = {g->n, g->o, 1, g->out[1], g->out[2]},
                         .strides = {len, g->n * len, len, g->out[2], 1}}};
  loom_scalar dsc[3] = {{.i = 0}, {.i = 0}, {.i = pd->wq}};
  run(loom_conv_pad_kernel, dts, 2, dsc, 3, g->n * g->o);
  loom_tensor ts[6] = {t4(gw, 1, g->groups, k->og, k->ck, 0, k->og * k->ck, k->ck, 1),
                       t4(dyp, 1, g->groups, k->og, nk, 0, k->og * nk, nk, 1),
                       t4(NULL, 1, g->groups, nk, k->ck, 0, 0, k->ck, 1), {0}, planes(k, pd),
                       {0}};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], isa, &p) == 0, "padded wgrad plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  memset(ws, 0xff, (size_t)p.workspace_bytes + 1); /* NaNs where nothing was packed */
  ts[3] = bytes(ws, p.workspace_bytes);
  const int64_t kchunk = one_chunk ? (p.kp + p.kc - 1) / p.kc * p.kc : p.kc;
  const int64_t chunks = (p.kp + kchunk - 1) / kchunk;
  float *part = malloc(sizeof(float) * (size_t)(chunks * nw));
  ts[5] = t4(part, chunks, g->groups, k->og, k->ck, nw, k->og * k->ck, k->ck, 1);
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, ts, 4, gsc, 3, p.pack_units_a);
  loom_scalar sc[2 + LOOM_CONV_NUM_SCALARS + 4] = {{.i = isa}};
  scalars(g, sc + 2);
  sc[17].i = pd->wq, sc[18].i = pd->gpad, sc[19].i = kchunk, sc[20].i = qn;
  memset(part, 0xff, sizeof(float) * (size_t)(chunks * nw));
  run(fn, ts, 6, sc, 21, chunks * g->groups * ((p.n_panels + qn - 1) / qn));
  for (int64_t i = 0; i < nw; ++i) {
    gw[i] = part[i];
    for (int64_t c = 1; c < chunks; ++c) gw[i] += part[c * nw + i];
  }
  free(dyp), free(ws), free(part);
}

static void check_padded(geom g0) {
  conv_case k = make_case(g0);
  padded pd = make_padded(&k);
  const geom *g = &k.g;
  const int64_t ny = g->n * g->o * k.len, nw = g->o * k.ck;
  float *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
  float *y2 = malloc(sizeof(float) * ny);
  float *w1 = malloc(sizeof(float) * nw), *w2 = malloc(sizeof(float) * nw);
  gemm_forward(&k, LOOM_GEMM_GENERIC, y0);
  forward(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_gemm_generic, 128, y1);
  CHECK_MSG(same(y0, y1, ny), "generic padded forward (c %ld o %ld) is not im2col + GEMM's bits",
        (long)g->c, (long)g->o);
  CHECK_MSG(misses(y1, k.y, k.ymag, ny) == 0, "generic padded forward misses the reference");
  for (int64_t tpos = 32; tpos <= 64; tpos *= 2) {
    forward(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_gemm_generic, tpos, y2);
    CHECK_MSG(same(y1, y2, ny), "tile %ld changed bits", (long)tpos);
  }
  forward(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_gemm_kernel, 64, y2);
  CHECK_MSG(same(y1, y2, ny), "the selector did not run the twin for a generic plan");
  for (int one = 0; one < 2; ++one) {
    weight_grad(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_wgrad_generic, 1, one, w1);
    CHECK_MSG(misses(w1, k.gw, k.gwmag, nw) == 0, "generic padded weight grad misses the reference");
    for (int64_t qn = 2; qn <= LOOM_CONV_WGRAD_MAX_PANELS; qn *= 32) {
      weight_grad(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_wgrad_generic, qn, one, w2);
      CHECK_MSG(same(w1, w2, nw), "%ld panels per item changed bits", (long)qn);
    }
    weight_grad(&k, &pd, LOOM_GEMM_GENERIC, loom_conv_padded_wgrad_kernel, 2, one, w2);
    CHECK_MSG(same(w1, w2, nw), "the selector did not run the twin for a generic plan");
  }
  if (hw_avx512) {
    const int avx = LOOM_GEMM_AVX512;
    forward(&k, &pd, avx, loom_conv_padded_gemm_avx512, 64, y1);
    forward(&k, &pd, avx, loom_conv_padded_gemm_generic, 64, y2);
    CHECK_MSG(same(y1, y2, ny), "twin with an AVX-512 plan differs from the AVX-512 forward");
    CHECK_MSG(misses(y1, k.y, k.ymag, ny) == 0, "AVX-512 padded forward misses the reference");
    forward(&k, &pd, avx, loom_conv_padded_gemm_kernel, 64, y2);
    CHECK_MSG(same(y1, y2, ny), "the selector did not run AVX-512 for an AVX-512 plan");
    const int isas[2] = {avx, avx | LOOM_GEMM_IN_COMPUTE}; /* dy packed, or in place */
    for (int i = 0; i < 2; ++i) {
      weight_grad(&k, &pd, isas[i], loom_conv_padded_wgrad_avx512, 2, 0, w1);
      weight_grad(&k, &pd, isas[i], loom_conv_padded_wgrad_generic, 2, 0, w2);
      CHECK_MSG(same(w1, w2, nw), "twin with an AVX-512 plan (%d) differs from the AVX-512 weight grad",
            isas[i]);
      CHECK_MSG(misses(w1, k.gw, k.gwmag, nw) == 0, "AVX-512 padded weight grad misses the reference");
      weight_grad(&k, &pd, isas[i], loom_conv_padded_wgrad_kernel, 2, 0, w2);
      CHECK_MSG(same(w1, w2, nw), "the selector did not run AVX-512 for an AVX-512 plan");
    }
  }
  free(y0), free(y1), free(y2), free(w1), free(w2), free(pd.xp);
  free_case(&k);
}

int main(void) {
  hw_avx512 = loom_gemm_isa_supported(LOOM_GEMM_AVX512);
  /* many position tiles and two row passes (og > 192); an asymmetric,
   * dilated window; a strided 7x7 window (phase planes); k past one block */
  check_padded((geom){.n = 2, .c = 6, .o = 400, .groups = 2, .in = {1, 17, 21},
                      .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  check_padded((geom){.n = 3, .c = 4, .o = 13, .groups = 1, .in = {1, 12, 19},
                      .k = {1, 3, 5}, .s = {1, 1, 1}, .p = {0, 2, 1}, .d = {1, 2, 1}});
  check_padded((geom){.n = 1, .c = 3, .o = 8, .groups = 1, .in = {1, 20, 41},
                      .k = {1, 7, 7}, .s = {1, 2, 2}, .p = {0, 3, 3}, .d = {1, 1, 1}});
  check_padded((geom){.n = 2, .c = 40, .o = 24, .groups = 1, .in = {1, 10, 9},
                      .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  TEST_MAIN_END();
}
