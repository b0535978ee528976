/* tests/c/test_conv.c — im2col against the definition, col2im against a
 * naive scatter-add, and a grouped, strided, dilated, padded convolution
 * (im2col + GEMM, and the implicit GEMM) against a direct loop. Kernels
 * are called directly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/conv/conv.h"
#include "kernels/gemm/gemm.h"
#include "kernels/conv/im2col_internal.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "tests/c/conv_util.h"

static int a_in_place_cases = 0; /* geometries whose weight was read in place */
static int padded_in_place_cases = 0; /* padded weight gradients reading dy in place */

/* The input index read by output o through tap t along one axis, or -1. */
static int64_t src_index(const geom *g, int axis, int64_t o, int64_t t) {
  int64_t i = o * g->s[axis] - g->p[axis] + t * g->d[axis];
  return (i >= 0 && i < g->in[axis]) ? i : -1;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* x (N, C, 1, H, W); y the reference forward (N, O, L) with bias; dy
 * (O, N, L) and gw1 the reference weight gradient for it. */
static void check_padded(const geom *g, float *x, float *w, float *bias, const float *y,
                         const float *dy, const float *gw1, int isa) {
  const int64_t kk = g->k[1] * g->k[2], cg = g->c / g->groups, og = g->o / g->groups;
  const int64_t ck = cg * kk, ho = g->out[1], wo = g->out[2], len = ho * wo;
  const int64_t sh = g->s[1], sw = g->s[2], phases = sh * sw;
  const int64_t hp = g->in[1] + 2 * g->p[1], wp = g->in[2] + 2 * g->p[2];
  const int64_t wq = (wp + sw - 1) / sw, pos = ho * wq;
  const int64_t gpad = round_up(pos, 32), cols = g->n * gpad;
  const int64_t halo = g->d[1] * (g->k[1] - 1) / sh * wq + g->d[2] * (g->k[2] - 1) / sw;
  int64_t plane = gpad + halo;
  if (plane < (hp + sh - 1) / sh * wq) plane = (hp + sh - 1) / sh * wq;
  plane = round_up(plane, 16);
  float *xp = malloc(sizeof(float) * g->n * g->c * phases * plane);
  loom_tensor txp = {.data = xp, .dtype = LOOM_FLOAT32, .rank = 3,
                     .sizes = {g->n, g->c * phases, plane},
                     .strides = {g->c * phases * plane, plane, 1}};
  loom_tensor pts[2] = {txp, image(x, g->n, g->c, g->in)};
  loom_scalar psc[5] = {{.i = g->p[1]}, {.i = g->p[2]}, {.i = wq}, {.i = sh}, {.i = sw}};
  run(loom_conv_pad_kernel, pts, 2, psc, 5, g->n * g->c * phases);
  /* phase (a, b) of channel nc holds padded rows a, a + sh, ... and columns
   * b, b + sw, ... */
  int bad = 0;
  for (int64_t nc = 0; nc < g->n * g->c; ++nc)
    for (int64_t ph = 0; ph < phases; ++ph)
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t h = i / wq * sh + ph / sw - g->p[1], ww = i % wq * sw + ph % sw - g->p[2];
        const float want = h >= 0 && h < g->in[1] && ww >= 0 && ww < g->in[2]
                               ? x[(nc * g->in[1] + h) * g->in[2] + ww]
                               : 0.0f;
        bad += xp[(nc * phases + ph) * plane + i] != want;
      }
  CHECK_MSG(bad == 0, "pad: %d wrong entries", bad);

  loom_scalar sc[2 + LOOM_CONV_NUM_SCALARS + 4] = {{.i = isa}};
  scalars(g, sc + 2);
  sc[17].i = wq, sc[18].i = gpad;
  /* forward, with bias */
  float *y2 = malloc(sizeof(float) * g->n * g->o * len);
  loom_tensor tc = {.data = y2, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, og, cols}, .strides = {0, 0, cols, 1}};
  loom_tensor ta = {.data = w, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, og, ck}, .strides = {0, og * ck, ck, 1}};
  loom_tensor tb = {.data = xp, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, ck, cols}, .strides = {0, 0, cols, 1}};
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&tc, &ta, &tb, isa, &p) == 0, "padded plan");
  void *ws = malloc((size_t)p.workspace_bytes + 1);
  loom_tensor tw = {.data = ws, .dtype = LOOM_UINT8, .rank = 1,
                    .sizes = {p.workspace_bytes}, .strides = {1}};
  loom_tensor tout = {.data = y2, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {g->n, g->o, ho, wo}, .strides = {g->o * len, len, wo, 1}};
  loom_tensor tbias = {.data = bias, .dtype = LOOM_FLOAT32, .rank = 1,
                       .sizes = {g->o}, .strides = {1}};
  loom_tensor fts[7] = {tc, ta, tb, tw, txp, tout, tbias};
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, fts, 4, gsc, 3, p.pack_units_a);
  /* every tile width gives the same bits */
  for (int64_t tp = 32; tp <= LOOM_CONV_GEMM_POSITIONS; tp *= 2) {
    memset(y2, 0xff, sizeof(float) * g->n * g->o * len);
    sc[1].i = tp;
    run(loom_conv_padded_gemm_kernel, fts, 7, sc, 19, g->groups * ((cols + tp - 1) / tp));
    CHECK_MSG(memcmp(y, y2, sizeof(float) * g->n * g->o * len) == 0,
          "padded conv n=%ld c=%ld o=%ld g=%ld tile %ld differs from im2col + GEMM", (long)g->n,
          (long)g->c, (long)g->o, (long)g->groups, (long)tp);
  }
  /* written channels last: the same bits where they lie */
  float *y3 = malloc(sizeof(float) * g->n * g->o * len);
  fts[5].strides[0] = g->o * len, fts[5].strides[1] = 1;
  fts[5].strides[2] = wo * g->o, fts[5].strides[3] = g->o, fts[5].data = y3;
  for (int64_t tp = 32; tp <= LOOM_CONV_GEMM_POSITIONS; tp *= 4) {
    memset(y3, 0xff, sizeof(float) * g->n * g->o * len);
    sc[1].i = tp;
    run(loom_conv_padded_gemm_kernel, fts, 7, sc, 19, g->groups * ((cols + tp - 1) / tp));
    int diff = 0;
    for (int64_t b = 0; b < g->n; ++b)
      for (int64_t o = 0; o < g->o; ++o)
        for (int64_t q = 0; q < len; ++q)
          diff += memcmp(&y3[(b * len + q) * g->o + o], &y[(b * g->o + o) * len + q], 4) != 0;
    CHECK_MSG(diff == 0, "padded conv n=%ld c=%ld o=%ld channels last, tile %ld: %d differ",
              (long)g->n, (long)g->c, (long)g->o, (long)tp, diff);
  }
  fts[5] = tout;
  free(y3);
  free(ws);

  /* weight gradient over dy padded to the same grid, (O, N, gpad) */
  float *dyp = malloc(sizeof(float) * g->o * g->n * gpad), *gw2 = malloc(sizeof(float) * g->o * ck);
  loom_tensor tdyp = {.data = dyp, .dtype = LOOM_FLOAT32, .rank = 3,
                      .sizes = {g->n, g->o, gpad}, .strides = {gpad, g->n * gpad, 1}};
  loom_tensor tdy = {.data = (void *)dy, .dtype = LOOM_FLOAT32, .rank = 5,
                     .sizes = {g->n, g->o, 1, ho, wo}, .strides = {len, g->n * len, len, wo, 1}};
  loom_tensor dts[2] = {tdyp, tdy};
  loom_scalar dsc[3] = {{.i = 0}, {.i = 0}, {.i = wq}};
  run(loom_conv_pad_kernel, dts, 2, dsc, 3, g->n * g->o);
  const int64_t nk = g->n * gpad;
  loom_tensor wc = {.data = gw2, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, og, ck}, .strides = {0, og * ck, ck, 1}};
  loom_tensor wa = {.data = dyp, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, og, nk}, .strides = {0, og * nk, nk, 1}};
  loom_tensor wb = {.data = xp, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {1, g->groups, nk, ck}, .strides = {0, 0, ck, 1}};
  CHECK_MSG(loom_gemm_plan_init(&wc, &wa, &wb, isa, &p) == 0, "padded wgrad plan");
  ws = malloc((size_t)p.workspace_bytes + 1);
  tw.data = ws, tw.sizes[0] = p.workspace_bytes;
  /* k in chunks of one k block, the partial sums added in order */
  sc[19].i = p.kc;
  const int64_t chunks = (p.kp + p.kc - 1) / p.kc;
  float *part = malloc(sizeof(float) * chunks * g->o * ck);
  loom_tensor tpart = {.data = part, .dtype = LOOM_FLOAT32, .rank = 4,
                       .sizes = {chunks, g->groups, og, ck},
                       .strides = {g->o * ck, og * ck, ck, 1}};
  loom_tensor wts[6] = {wc, wa, wb, tw, txp, tpart};
  run(loom_gemm_pack_kernel, wts, 4, gsc, 3, p.pack_units_a);
  /* one panel per item, two, and all of them: the same bits */
  float *first = malloc(sizeof(float) * g->o * ck);
  const int64_t widths[3] = {1, 2, LOOM_CONV_WGRAD_MAX_PANELS};
  for (int w = 0; w < 3; ++w) {
    const int64_t qn = widths[w];
    sc[20].i = qn;
    memset(part, 0xff, sizeof(float) * chunks * g->o * ck);
    run(loom_conv_padded_wgrad_kernel, wts, 6, sc, 21,
        chunks * g->groups * ((p.n_panels + qn - 1) / qn));
    for (int64_t i = 0; i < g->o * ck; ++i) {
      gw2[i] = part[i];
      for (int64_t k = 1; k < chunks; ++k) gw2[i] += part[k * g->o * ck + i];
    }
    bad = 0;
    for (int64_t i = 0; i < g->o * ck; ++i)
      bad += !(fabsf(gw1[i] - gw2[i]) <= 1e-5f * (1.0f + fabsf(gw1[i])));
    CHECK_MSG(bad == 0, "padded weight grad n=%ld c=%ld o=%ld g=%ld qn=%ld: %d differ", (long)g->n,
          (long)g->c, (long)g->o, (long)g->groups, (long)qn, bad);
    if (w == 0) memcpy(first, gw2, sizeof(float) * g->o * ck);
    CHECK_MSG(memcmp(first, gw2, sizeof(float) * g->o * ck) == 0, "qn=%ld changed bits", (long)qn);
  }
  /* dy's full row panels read in place (only a partial last one packed,
   * into a workspace of NaNs otherwise): the same bits */
  loom_gemm_plan ip;
  const int ic = isa | LOOM_GEMM_IN_COMPUTE;
  CHECK_MSG(loom_gemm_plan_init(&wc, &wa, &wb, ic, &ip) == 0, "in-place wgrad plan");
  memset(ws, 0xff, (size_t)p.workspace_bytes);
  loom_scalar isc[3] = {{.i = ic}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, wts, 4, isc, 3, ip.pack_units_a);
  sc[0].i = ic, sc[20].i = 1;
  memset(part, 0xff, sizeof(float) * chunks * g->o * ck);
  run(loom_conv_padded_wgrad_kernel, wts, 6, sc, 21, chunks * g->groups * p.n_panels);
  sc[0].i = isa;
  for (int64_t i = 0; i < g->o * ck; ++i) {
    gw2[i] = part[i];
    for (int64_t k = 1; k < chunks; ++k) gw2[i] += part[k * g->o * ck + i];
  }
  CHECK_MSG(memcmp(first, gw2, sizeof(float) * g->o * ck) == 0,
        "padded weight grad with dy %s changed bits", ip.a_in_place ? "in place" : "packed");
  padded_in_place_cases += ip.a_in_place;
  free(first);
  free(xp), free(y2), free(ws), free(dyp), free(gw2), free(part);
}

/* The implicit forward (isc: its scalars, [1] set here) over tiles of 32
 * positions up to the widest, each `step` times the last, must give y's
 * bits (im2col + GEMM). */
static void check_tiles(const geom *g, loom_tensor its[6], loom_scalar *isc, int64_t len,
                        const float *y, float *y2, int64_t step, const char *what) {
  for (int64_t tp = 32; tp <= LOOM_CONV_GEMM_POSITIONS; tp *= step) {
    memset(y2, 0xff, sizeof(float) * g->n * g->o * len);
    isc[1].i = tp;
    run(loom_conv_gemm_kernel, its, 6, isc, 2 + LOOM_CONV_NUM_SCALARS,
        g->n * g->groups * ((len + tp - 1) / tp));
    CHECK_MSG(memcmp(y, y2, sizeof(float) * g->n * g->o * len) == 0,
          "implicit conv (%s) n=%ld c=%ld o=%ld g=%ld tile %ld differs from im2col + GEMM",
          what, (long)g->n, (long)g->c, (long)g->o, (long)g->groups, (long)tp);
  }
}

static void check_geom(geom g) {
  finish(&g);
  int64_t kk = g.k[0] * g.k[1] * g.k[2];
  int64_t len = g.out[0] * g.out[1] * g.out[2];
  int64_t vol = g.in[0] * g.in[1] * g.in[2];
  int64_t cg = g.c / g.groups, og = g.o / g.groups;
  float *x = malloc(sizeof(float) * g.n * g.c * vol);
  for (int64_t i = 0; i < g.n * g.c * vol; ++i) x[i] = rnd();
  float *col = malloc(sizeof(float) * g.c * kk * g.n * len);
  loom_scalar sc[LOOM_CONV_NUM_SCALARS];
  scalars(&g, sc);
  loom_tensor tcol = {.data = col, .dtype = LOOM_FLOAT32, .rank = 3,
                      .sizes = {g.c * kk, g.n, len}, .strides = {g.n * len, len, 1}};
  loom_tensor tx = image(x, g.n, g.c, g.in);
  loom_tensor ts[2] = {tcol, tx};
  run(loom_im2col_kernel, ts, 2, sc, LOOM_CONV_NUM_SCALARS, g.c * kk * g.n);

  /* im2col entries against the definition; accumulate the direct conv. */
  int bad = 0;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t t = 0; t < kk; ++t)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t l = 0; l < len; ++l) {
          int64_t od = l / (g.out[1] * g.out[2]), oh = (l / g.out[2]) % g.out[1], ow = l % g.out[2];
          int64_t kd = t / (g.k[1] * g.k[2]), kh = (t / g.k[2]) % g.k[1], kw = t % g.k[2];
          int64_t id = src_index(&g, 0, od, kd), ih = src_index(&g, 1, oh, kh),
                  iw = src_index(&g, 2, ow, kw);
          float want = (id < 0 || ih < 0 || iw < 0)
                           ? 0.0f
                           : x[((n * g.c + c) * g.in[0] + id) * g.in[1] * g.in[2] + ih * g.in[2] + iw];
          if (col[((c * kk + t) * g.n + n) * len + l] != want) ++bad;
        }
  CHECK_MSG(bad == 0, "im2col: %d wrong entries", bad);

  /* col2im against a naive scatter-add, in double, and bitwise against
   * the same adds in float, in tap order from +0 (entries include -0,
   * which a +0 start must turn into +0). */
  float *back = malloc(sizeof(float) * g.n * g.c * vol);
  double *ref = calloc((size_t)(g.n * g.c * vol), sizeof(double));
  float *ref32 = calloc((size_t)(g.n * g.c * vol), sizeof(float));
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t t = 0; t < kk; ++t)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t l = 0; l < len; ++l) {
          int64_t od = l / (g.out[1] * g.out[2]), oh = (l / g.out[2]) % g.out[1], ow = l % g.out[2];
          int64_t kd = t / (g.k[1] * g.k[2]), kh = (t / g.k[2]) % g.k[1], kw = t % g.k[2];
          int64_t id = src_index(&g, 0, od, kd), ih = src_index(&g, 1, oh, kh),
                  iw = src_index(&g, 2, ow, kw);
          float v = col[((c * kk + t) * g.n + n) * len + l] = l % 5 == 3 ? -0.0f : rnd();
          if (id >= 0 && ih >= 0 && iw >= 0) {
            int64_t at = ((n * g.c + c) * g.in[0] + id) * g.in[1] * g.in[2] + ih * g.in[2] + iw;
            ref[at] += v;
            ref32[at] += v;
          }
        }
  loom_tensor tb = image(back, g.n, g.c, g.in);
  loom_tensor ts2[2] = {tb, tcol};
  run(loom_col2im_kernel, ts2, 2, sc, LOOM_CONV_NUM_SCALARS, g.n * g.c);
  bad = 0;
  for (int64_t i = 0; i < g.n * g.c * vol; ++i)
    if (!(fabs(back[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])))) ++bad;
  CHECK_MSG(bad == 0, "col2im: %d wrong entries", bad);
  CHECK_MSG(memcmp(back, ref32, sizeof(float) * g.n * g.c * vol) == 0,
        "col2im: not the bits of the tap-ordered sum (in %ldx%ldx%ld, k %ldx%ldx%ld, s %ld,%ld,%ld)",
        (long)g.in[0], (long)g.in[1], (long)g.in[2], (long)g.k[0], (long)g.k[1], (long)g.k[2],
        (long)g.s[0], (long)g.s[1], (long)g.s[2]);
  free(ref32);

  /* Forward convolution: im2col + grouped, batched GEMM (+ bias). */
  run(loom_im2col_kernel, ts, 2, sc, LOOM_CONV_NUM_SCALARS, g.c * kk * g.n);
  float *w = malloc(sizeof(float) * g.o * cg * kk), *bias = malloc(sizeof(float) * g.o);
  for (int64_t i = 0; i < g.o * cg * kk; ++i) w[i] = rnd();
  for (int64_t i = 0; i < g.o; ++i) bias[i] = rnd();
  float *y = malloc(sizeof(float) * g.n * g.o * len);
  loom_tensor ta = {.data = w, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {g.n, g.groups, og, cg * kk}, .strides = {0, og * cg * kk, cg * kk, 1}};
  loom_tensor tbm = {.data = col, .dtype = LOOM_FLOAT32, .rank = 4,
                     .sizes = {g.n, g.groups, cg * kk, len},
                     .strides = {len, cg * kk * g.n * len, g.n * len, 1}};
  loom_tensor tc = {.data = y, .dtype = LOOM_FLOAT32, .rank = 4,
                    .sizes = {g.n, g.groups, og, len}, .strides = {g.o * len, og * len, len, 1}};
  loom_tensor tcin = {.data = bias, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {g.n, g.groups, og, len}, .strides = {0, og, 1, 0}};
  loom_gemm_plan plan;
  int isa = loom_gemm_isa_selected();
  CHECK_MSG(loom_gemm_plan_init(&tc, &ta, &tbm, isa, &plan) == 0, "plan");
  void *ws = malloc((size_t)plan.workspace_bytes + 1);
  loom_tensor tw = {.data = ws, .dtype = LOOM_UINT8, .rank = 1,
                    .sizes = {plan.workspace_bytes}, .strides = {1}};
  loom_tensor gts[5] = {tc, ta, tbm, tw, tcin};
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 1.0}};
  run(loom_gemm_pack_kernel, gts, 5, gsc, 3, plan.pack_range);
  run(loom_gemm_compute_kernel, gts, 5, gsc, 3, plan.compute_range);
  bad = 0;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t l = 0; l < len; ++l) {
        int64_t grp = o / og;
        int64_t od = l / (g.out[1] * g.out[2]), oh = (l / g.out[2]) % g.out[1], ow = l % g.out[2];
        double acc = bias[o];
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t t = 0; t < kk; ++t) {
            int64_t kd = t / (g.k[1] * g.k[2]), kh = (t / g.k[2]) % g.k[1], kw = t % g.k[2];
            int64_t id = src_index(&g, 0, od, kd), ih = src_index(&g, 1, oh, kh),
                    iw = src_index(&g, 2, ow, kw);
            if (id < 0 || ih < 0 || iw < 0) continue;
            int64_t c = grp * cg + ci;
            acc += (double)w[(o * cg + ci) * kk + t] *
                   x[((n * g.c + c) * g.in[0] + id) * g.in[1] * g.in[2] + ih * g.in[2] + iw];
          }
        if (!(fabs(y[(n * g.o + o) * len + l] - acc) <= 1e-4 * (1 + fabs(acc)))) ++bad;
      }
  CHECK_MSG(bad == 0, "conv n=%ld c=%ld o=%ld g=%ld: %d wrong outputs", (long)g.n,
        (long)g.c, (long)g.o, (long)g.groups, bad);

  /* The implicit GEMM gives bitwise the same output: same packed weight,
   * same col values, same k order. */
  if (isa != LOOM_GEMM_GENERIC) {
    float *y2 = malloc(sizeof(float) * g.n * g.o * len);
    memset(ws, 0, (size_t)plan.workspace_bytes);
    tc.data = y2;
    loom_tensor tb1 = {.data = bias, .dtype = LOOM_FLOAT32, .rank = 1,
                       .sizes = {g.o}, .strides = {1}};
    loom_tensor its[6] = {tc, ta, tbm, tw, image(x, g.n, g.c, g.in), tb1};
    run(loom_gemm_pack_kernel, its, 4, gsc, 3, plan.pack_units_a);
    loom_scalar isc[3 + LOOM_CONV_NUM_SCALARS] = {{.i = isa}};
    scalars(&g, isc + 2);
    check_tiles(&g, its, isc, len, y, y2, 2, "packed weight");
    /* Every image's positions as one row of columns: C is (O, N * L). */
    loom_tensor tcf = {.data = y2, .dtype = LOOM_FLOAT32, .rank = 4,
                       .sizes = {1, g.groups, og, g.n * len},
                       .strides = {0, og * g.n * len, g.n * len, 1}};
    loom_tensor tbf = tbm;
    tbf.sizes[0] = 1, tbf.sizes[3] = g.n * len;
    loom_tensor taf = ta;
    taf.sizes[0] = 1;
    loom_tensor fts[6] = {tcf, taf, tbf, tw, image(x, g.n, g.c, g.in), tb1};
    loom_gemm_plan fp;
    CHECK_MSG(loom_gemm_plan_init(&tcf, &taf, &tbf, isa, &fp) == 0, "flat plan");
    run(loom_gemm_pack_kernel, fts, 4, gsc, 3, fp.pack_units_a);
    /* The narrowest tiles here (the widest above), the last one whole and
     * cut into 2 and 3 pieces of output channels. */
    isc[1].i = 32;
    for (int64_t pieces = 1; pieces <= 3; ++pieces) {
      memset(y2, 0xff, sizeof(float) * g.n * g.o * len);
      isc[2 + LOOM_CONV_NUM_SCALARS].i = pieces;
      run(loom_conv_gemm_kernel, fts, 6, isc, 3 + LOOM_CONV_NUM_SCALARS,
          g.groups * ((g.n * len + 31) / 32 - 1 + pieces));
      int fbad = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t l = 0; l < len; ++l)
            if (memcmp(&y[(n * g.o + o) * len + l], &y2[(o * g.n + n) * len + l], sizeof(float)))
              ++fbad;
      CHECK_MSG(fbad == 0, "flat implicit conv n=%ld c=%ld o=%ld g=%ld, last tile in %ld: %d outputs differ",
            (long)g.n, (long)g.c, (long)g.o, (long)g.groups, (long)pieces, fbad);
    }
    /* With LOOM_GEMM_IN_COMPUTE the plan may read the weight's full panels
     * in place; only a partial last panel is packed. A workspace of NaNs
     * catches a panel read from where nothing was packed. */
    loom_gemm_plan ipl;
    const int ic = isa | LOOM_GEMM_IN_COMPUTE;
    CHECK_MSG(loom_gemm_plan_init(&tc, &ta, &tbm, ic, &ipl) == 0, "in-place plan");
    a_in_place_cases += ipl.a_in_place;
    memset(ws, 0xff, (size_t)plan.workspace_bytes);
    loom_scalar ipsc[3] = {{.i = ic}, {.f = 1.0}, {.f = 1.0}};
    run(loom_gemm_pack_kernel, its, 4, ipsc, 3, ipl.pack_units_a);
    isc[0].i = ic;
    check_tiles(&g, its, isc, len, y, y2, 4, ipl.a_in_place ? "weight in place" : "in compute");
    isc[0].i = isa;
    free(y2);

    /* Weight gradient dW[g] = dy[g] @ col[g]^T: the implicit kernel against
     * the GEMM over the materialised col, bitwise. dy is (O, N, L). */
    int64_t nl = g.n * len, ck = cg * kk;
    float *dy = malloc(sizeof(float) * g.o * nl), *gw1 = malloc(sizeof(float) * g.o * ck),
          *gw2 = malloc(sizeof(float) * g.o * ck);
    for (int64_t i = 0; i < g.o * nl; ++i) dy[i] = rnd();
    loom_tensor wa = {.data = dy, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {1, g.groups, og, nl}, .strides = {0, og * nl, nl, 1}};
    loom_tensor wb = {.data = col, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {1, g.groups, nl, ck}, .strides = {0, ck * nl, 1, nl}};
    loom_tensor wc = {.data = gw1, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {1, g.groups, og, ck}, .strides = {0, og * ck, ck, 1}};
    loom_gemm_plan wp;
    CHECK_MSG(loom_gemm_plan_init(&wc, &wa, &wb, isa, &wp) == 0, "wgrad plan");
    void *wws = malloc((size_t)wp.workspace_bytes + 1);
    loom_tensor wt = {.data = wws, .dtype = LOOM_UINT8, .rank = 1,
                      .sizes = {wp.workspace_bytes}, .strides = {1}};
    loom_tensor wts[5] = {wc, wa, wb, wt, image(x, g.n, g.c, g.in)};
    loom_scalar wsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
    run(loom_gemm_pack_kernel, wts, 4, wsc, 3, wp.pack_range);
    run(loom_gemm_compute_kernel, wts, 4, wsc, 3, wp.compute_range);
    wts[0].data = gw2;
    run(loom_gemm_pack_kernel, wts, 4, wsc, 3, wp.pack_units_a);
    run(loom_conv_wgrad_kernel, wts, 5, isc, 2 + LOOM_CONV_NUM_SCALARS,
        g.groups * wp.n_panels);
    CHECK_MSG(memcmp(gw1, gw2, sizeof(float) * g.o * ck) == 0,
          "implicit weight grad n=%ld c=%ld o=%ld g=%ld differs from im2col + GEMM",
          (long)g.n, (long)g.c, (long)g.o, (long)g.groups);
    /* dy as it lies, (N, O, L): one packed matrix per image, summed into
     * dW image by image (k blocks within each image's L), C's batch stride
     * 0. Within the products' roundings of the GEMM's dW; its bits where
     * each image's positions fill whole k blocks of the flat form's. */
    float *dyn = malloc(sizeof(float) * g.o * nl), *gw3 = malloc(sizeof(float) * g.o * ck);
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t n = 0; n < g.n; ++n)
        memcpy(&dyn[(n * g.o + o) * len], &dy[(o * g.n + n) * len], sizeof(float) * len);
    loom_tensor na = {.data = dyn, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {g.n, g.groups, og, len}, .strides = {g.o * len, og * len, len, 1}};
    loom_tensor nb = {.data = col, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {g.n, g.groups, len, ck}, .strides = {0, ck * len, 1, len}};
    loom_tensor nc = {.data = gw3, .dtype = LOOM_FLOAT32, .rank = 4,
                      .sizes = {g.n, g.groups, og, ck}, .strides = {0, og * ck, ck, 1}};
    loom_gemm_plan np;
    CHECK_MSG(loom_gemm_plan_init(&nc, &na, &nb, isa, &np) == 0, "per-image wgrad plan");
    void *nws = malloc((size_t)np.b_offset + 1);
    loom_tensor nt = {.data = nws, .dtype = LOOM_UINT8, .rank = 1, .sizes = {np.b_offset},
                      .strides = {1}};
    loom_tensor nts[5] = {nc, na, nb, nt, image(x, g.n, g.c, g.in)};
    run(loom_gemm_pack_kernel, nts, 4, wsc, 3, np.pack_units_a);
    run(loom_conv_wgrad_kernel, nts, 5, isc, 2 + LOOM_CONV_NUM_SCALARS, g.groups * np.n_panels);
    double worst = 0;
    for (int64_t i = 0; i < g.o * ck; ++i) {
      const double d = fabs((double)gw3[i] - gw1[i]);
      worst = d > worst ? d : worst;
    }
    CHECK_MSG(worst <= 4e-7 * nl, "per-image weight grad n=%ld c=%ld o=%ld g=%ld off by %g",
              (long)g.n, (long)g.c, (long)g.o, (long)g.groups, worst);
    if (g.n == 1 || len % np.kc == 0)
      CHECK_MSG(memcmp(gw2, gw3, sizeof(float) * g.o * ck) == 0,
                "per-image weight grad n=%ld c=%ld o=%ld g=%ld: not the flat form's bits",
                (long)g.n, (long)g.c, (long)g.o, (long)g.groups);
    /* A workspace a byte short of the packed matrices is refused. */
    nts[3].sizes[0] = np.b_offset - 1;
    CHECK_MSG(loom_conv_wgrad_kernel(&(loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION,
                                                         .tensors = nts, .num_tensors = 5,
                                                         .scalars = isc,
                                                         .num_scalars = 2 + LOOM_CONV_NUM_SCALARS},
                                     0, 1) == LOOM_ERROR_INVALID_ARGUMENT,
              "per-image weight grad: short workspace accepted");
    free(dyn), free(gw3), free(nws);
    /* 2-d: the padded kernels. The forward equals im2col + GEMM bitwise;
     * the weight gradient sums the same products plus zeros. */
    if (g.s[0] == 1 && g.k[0] == 1 && g.in[0] == 1)
      check_padded(&g, x, w, bias, y, dy, gw1, isa);
    free(dy), free(gw1), free(gw2), free(wws);
  }
  free(x), free(col), free(back), free(ref), free(w), free(bias), free(y), free(ws);
}

/* The flipped pack writes the panels loom_gemm_pack_kernel writes from
 * the flipped weight wf[g][c][o][K-1-t] = w[g * O/G + o][c][t] itself,
 * across several k blocks and with a partial last panel. */
static void check_pack_flipped(int64_t groups, int64_t o, int64_t cg, int64_t taps) {
  const int64_t og = o / groups, k = og * taps, cols = 40;
  float *w = malloc(sizeof(float) * o * cg * taps), *wf = malloc(sizeof(float) * o * cg * taps);
  for (int64_t i = 0; i < o * cg * taps; ++i) w[i] = rnd();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t oo = 0; oo < og; ++oo)
        for (int64_t t = 0; t < taps; ++t)
          wf[((g * cg + c) * og + oo) * taps + taps - 1 - t] = w[((g * og + oo) * cg + c) * taps + t];
  loom_tensor ts[5];
  memset(ts, 0, sizeof ts);
  const int64_t c_sizes[4] = {1, groups, cg, cols}, a_sizes[4] = {1, groups, cg, k},
                b_sizes[4] = {1, groups, k, cols};
  for (int i = 0; i < 4; ++i) {
    ts[0].sizes[i] = c_sizes[i], ts[1].sizes[i] = a_sizes[i], ts[2].sizes[i] = b_sizes[i];
  }
  for (int i = 0; i < 3; ++i) {
    ts[i].rank = 4, ts[i].dtype = LOOM_FLOAT32, ts[i].strides[3] = 1;
    ts[i].strides[2] = ts[i].sizes[3], ts[i].strides[1] = ts[i].sizes[2] * ts[i].sizes[3];
  }
  ts[1].data = wf;
  loom_gemm_plan plan;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], LOOM_GEMM_GENERIC, &plan) == 0, "plan");
  CHECK_MSG(plan.kp > plan.kc, "want several k blocks");
  float *ref = calloc((size_t)plan.b_offset, 1), *got = calloc((size_t)plan.b_offset, 1);
  ts[3] = (loom_tensor){.data = ref, .dtype = LOOM_UINT8, .rank = 1, .sizes = {plan.b_offset}};
  loom_scalar sc[3] = {{.i = LOOM_GEMM_GENERIC}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, ts, 4, sc, 3, plan.pack_units_a);
  ts[3].data = got;
  ts[4] = (loom_tensor){.data = w, .dtype = LOOM_FLOAT32, .rank = 3, .sizes = {o, cg, taps},
                        .strides = {cg * taps, taps, 1}};
  const int64_t units = (plan.m_panels + LOOM_CONV_FLIP_PANELS - 1) / LOOM_CONV_FLIP_PANELS;
  run(loom_conv_pack_flipped_kernel, ts, 5, sc, 1, groups * units);
  CHECK_MSG(memcmp(ref, got, (size_t)plan.b_offset) == 0, "flipped pack differs (G %lld, O %lld)",
        (long long)groups, (long long)o);
  /* a weight whose shape does not give A's */
  ts[4].sizes[1] = cg + 1;
  loom_kernel_args bad = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 5,
                          .tensors = ts, .num_scalars = 1, .scalars = sc, .range = 1, .grain = 1};
  CHECK_MSG(loom_conv_pack_flipped_kernel(&bad, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "bad shape");
  free(w), free(wf), free(ref), free(got);
}

/* Tile widths: the widest that keeps the workers about as busy as any. */
/* The vector stride-2 add of col2im touches only its destinations: the
 * last one is placed just before an inaccessible page, so reaching one
 * float further faults. */
static void check_col2im_stride2_edge(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  const long page = sysconf(_SC_PAGESIZE);
  char *mem = mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  CHECK_MSG(mem != MAP_FAILED && mprotect(mem + page, (size_t)page, PROT_NONE) == 0, "guard page");
  const int64_t counts[] = {1, 5, 16, 17, 24, 25, 31, 32, 45};
  float s[45];
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
    const int64_t n = counts[c];
    float *d = (float *)(mem + page) - (2 * n - 1);
    for (int64_t j = 0; j < 2 * n - 1; ++j) d[j] = 0.5f * (float)j;
    for (int64_t i = 0; i < n; ++i) s[i] = (float)(i + 1);
    loom_col2im_add_stride2_avx512(d, 0, s, 0, 1, n);
    int bad = 0;
    for (int64_t j = 0; j < 2 * n - 1; ++j)
      bad += d[j] != 0.5f * (float)j + (j % 2 ? 0.0f : s[j / 2]);
    CHECK_MSG(bad == 0, "col2im stride-2 add, n=%ld: %d wrong", (long)n, bad);
  }
  /* rows apart: each row's destinations alone, none between the rows */
  float rows_d[3 * 40], rows_s[3 * 16];
  for (int64_t j = 0; j < 3 * 40; ++j) rows_d[j] = (float)j;
  for (int64_t i = 0; i < 3 * 16; ++i) rows_s[i] = 1000.0f * (float)(i + 1);
  loom_col2im_add_stride2_avx512(rows_d + 1, 40, rows_s, 16, 3, 13);
  int bad = 0;
  for (int64_t j = 0; j < 3 * 40; ++j) {
    const int64_t r = j / 40, off = j % 40 - 1;
    const int hit = off >= 0 && off % 2 == 0 && off / 2 < 13;
    bad += rows_d[j] != (float)j + (hit ? rows_s[r * 16 + off / 2] : 0.0f);
  }
  CHECK_MSG(bad == 0, "col2im stride-2 add over 3 rows: %d wrong", bad);
  munmap(mem, (size_t)(2 * page));
}

static void check_tail_split(void) {
  CHECK_MSG(loom_conv_tail_split(1, 392, 64, 2) == 2, "13 panels over 2 workers: the last tile cut");
  CHECK_MSG(loom_conv_tail_split(1, 392, 64, 1) == 1, "one worker: nothing to even out");
  CHECK_MSG(loom_conv_tail_split(1, 512, 128, 2) == 1, "four even tiles stay whole");
  CHECK_MSG(loom_conv_tail_split(8, 3264, 128, 2) == 1, "many tiles stay whole");
}

static void check_tile_positions(void) {
  CHECK_MSG(loom_conv_tile_positions(8, 3264, 2) == 128, "many tiles stay wide");
  CHECK_MSG(loom_conv_tile_positions(1, 512, 2) == 128, "four even tiles over two workers");
  CHECK_MSG(loom_conv_tile_positions(1, 392, 2) == 64, "3 + 1/16 wide tiles leave a worker idle");
  CHECK_MSG(loom_conv_tile_positions(1, 392, 1) == 128, "one worker: the short tile costs nothing");
  CHECK_MSG(loom_conv_tile_positions(1, 1568, 2) == 128, "12 tiles and a short one: even");
  CHECK_MSG(loom_conv_tile_positions(2, 392, 2) == 128, "two batches of 4 tiles: even");
  CHECK_MSG(loom_conv_tile_positions(1, 200, 4) == 64, "four tiles for four workers");
  CHECK_MSG(loom_conv_tile_positions(1, 96, 3) == 32, "three narrow tiles for three workers");
}

int main(void) {
  check_col2im_stride2_edge();
  check_tile_positions();
  check_tail_split();
  check_pack_flipped(1, 70, 61, 9);
  check_pack_flipped(2, 128, 30, 5);
  /* 2-d, 3x3, pad 1 */
  check_geom((geom){.n = 2, .c = 3, .o = 5, .groups = 1, .in = {1, 7, 9},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* stride 2, dilation 2, groups 2, asymmetric kernel */
  check_geom((geom){.n = 3, .c = 4, .o = 6, .groups = 2, .in = {1, 13, 8},
                    .k = {1, 3, 2}, .s = {1, 2, 3}, .p = {0, 2, 1}, .d = {1, 2, 2}});
  /* depthwise */
  check_geom((geom){.n = 1, .c = 6, .o = 6, .groups = 6, .in = {1, 10, 10},
                    .k = {1, 5, 5}, .s = {1, 1, 1}, .p = {0, 2, 2}, .d = {1, 1, 1}});
  /* 1-d and 3-d */
  check_geom((geom){.n = 2, .c = 2, .o = 3, .groups = 1, .in = {1, 1, 63},
                    .k = {1, 1, 7}, .s = {1, 1, 2}, .p = {0, 0, 3}, .d = {1, 1, 1}});
  check_geom((geom){.n = 2, .c = 3, .o = 4, .groups = 1, .in = {5, 6, 7},
                    .k = {3, 2, 3}, .s = {2, 1, 2}, .p = {1, 0, 1}, .d = {1, 2, 1}});
  /* 1x1 with stride and no padding; kernel larger than the padded input edge */
  check_geom((geom){.n = 2, .c = 8, .o = 4, .groups = 1, .in = {1, 9, 9},
                    .k = {1, 1, 1}, .s = {1, 2, 2}, .p = {0, 0, 0}, .d = {1, 1, 1}});
  check_geom((geom){.n = 1, .c = 1, .o = 1, .groups = 1, .in = {1, 1, 1},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* stride 2 along rows (the vector gather's even-lane path), padded edges */
  check_geom((geom){.n = 2, .c = 3, .o = 9, .groups = 1, .in = {1, 11, 37},
                    .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  check_geom((geom){.n = 1, .c = 3, .o = 8, .groups = 1, .in = {1, 20, 41},
                    .k = {1, 7, 7}, .s = {1, 2, 2}, .p = {0, 3, 3}, .d = {1, 1, 1}});
  /* stride 2 over more channels than one k block holds: a row's three
   * column taps split between blocks */
  check_geom((geom){.n = 2, .c = 32, .o = 20, .groups = 1, .in = {1, 13, 15},
                    .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* col2im's vector stride-2 add: rows of 16 outputs whose last vector
   * window ends one column past the image */
  check_geom((geom){.n = 1, .c = 2, .o = 3, .groups = 1, .in = {1, 4, 32},
                    .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* col2im with a window stepping 2 columns (the vector stride-2 add):
   * widths that end on either parity and span several vectors, padding
   * past the window, dilated columns, row strides that leave rows
   * without taps */
  for (int64_t w = 1; w <= 70; w += 23)
    for (int64_t kw = 1; kw <= 5; kw += 2)
      check_geom((geom){.n = 2, .c = 2, .o = 2, .groups = 1, .in = {1, 7, w},
                        .k = {1, 2, kw}, .s = {1, 3, 2}, .p = {0, kw % 3, kw / 2 + 1},
                        .d = {1, 2, kw == 3 ? 2 : 1}});
  check_geom((geom){.n = 2, .c = 3, .o = 2, .groups = 1, .in = {1, 6, 34},
                    .k = {1, 3, 4}, .s = {1, 2, 2}, .p = {0, 1, 3}, .d = {1, 1, 1}});
  /* the padded kernels: many position tiles, two row passes (og > 192),
   * dilation, an asymmetric kernel and padding */
  check_geom((geom){.n = 2, .c = 6, .o = 400, .groups = 2, .in = {1, 17, 21},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  check_geom((geom){.n = 3, .c = 4, .o = 13, .groups = 1, .in = {1, 12, 19},
                    .k = {1, 3, 5}, .s = {1, 1, 1}, .p = {0, 2, 1}, .d = {1, 2, 1}});
  /* outputs as wide as the image (the gather's flat runs over whole
   * images): dilated, and with rows that lose their edges */
  check_geom((geom){.n = 3, .c = 5, .o = 7, .groups = 1, .in = {1, 7, 7},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 2, 2}, .d = {1, 2, 2}});
  check_geom((geom){.n = 4, .c = 3, .o = 5, .groups = 1, .in = {1, 9, 5},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 0, 1}, .d = {1, 1, 1}});
  /* several position tiles, a partial last panel */
  check_geom((geom){.n = 2, .c = 5, .o = 14, .groups = 1, .in = {1, 20, 30},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* weights read in place: two groups of 24 rows (two whole panels each),
   * k past one block; and 12 rows exactly, nothing left to pack */
  check_geom((geom){.n = 2, .c = 64, .o = 48, .groups = 2, .in = {1, 9, 11},
                    .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  check_geom((geom){.n = 3, .c = 7, .o = 12, .groups = 1, .in = {1, 7, 7},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  if (loom_gemm_isa_selected() != LOOM_GEMM_GENERIC)
    CHECK_MSG(a_in_place_cases >= 4, "only %d geometries read the weight in place", a_in_place_cases);
  if (loom_gemm_isa_selected() != LOOM_GEMM_GENERIC)
    CHECK_MSG(padded_in_place_cases >= 2, "only %d padded weight gradients read dy in place",
          padded_in_place_cases);
  TEST_MAIN_END();
}
