/* tests/c/test_conv_amx.c — the bf16 convolutions on AMX tiles
 * (kernels/conv/conv_gemm_amx.c) against im2col + the AMX GEMM, bitwise: the
 * implicit forward (every tile width, the last tile in pieces, the weight
 * packed or read in place), the implicit weight gradient (1 to 4 panels
 * per item) and the flipped weight pack. Both sides sum the same products
 * in the same order in fp32 and round once. Skipped without AMX. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/base/dtype.h"
#include "kernels/gemm/gemm.h"
#include "loom/status.h"
#include "tests/c/conv_util.h"

static uint16_t *bf16_rand(int64_t n) {
  uint16_t *v = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; ++i) v[i] = loom_f32_to_bf16(rnd());
  return v;
}

static loom_tensor view4(void *data, const int64_t sizes[4], const int64_t strides[4]) {
  loom_tensor t = {.data = data, .dtype = LOOM_BFLOAT16, .rank = 4};
  for (int i = 0; i < 4; ++i) t.sizes[i] = sizes[i], t.strides[i] = strides[i];
  return t;
}

static loom_tensor bytes(void *data, int64_t n) {
  return (loom_tensor){.data = data, .dtype = LOOM_UINT8, .rank = 1, .sizes = {n}, .strides = {1}};
}

static void check_geom(geom g) {
  finish(&g);
  const int64_t kk = g.k[0] * g.k[1] * g.k[2], len = g.out[0] * g.out[1] * g.out[2];
  const int64_t vol = g.in[0] * g.in[1] * g.in[2], cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t ck = cg * kk, nl = g.n * len, isa = LOOM_GEMM_AMX;
  uint16_t *x = bf16_rand(g.n * g.c * vol), *w = bf16_rand(g.o * ck), *bias = bf16_rand(g.o);
  uint16_t *dy = bf16_rand(g.o * nl);
  uint16_t *col = malloc(sizeof(uint16_t) * (size_t)(ck * g.groups * nl));
  loom_tensor img = image(NULL, g.n, g.c, g.in);
  img.data = x, img.dtype = LOOM_BFLOAT16;
  loom_scalar sc[3 + LOOM_CONV_NUM_SCALARS];
  memset(sc, 0, sizeof sc);
  scalars(&g, sc + 2);
  loom_tensor cts[2] = {{.data = col, .dtype = LOOM_BFLOAT16, .rank = 3,
                         .sizes = {g.c * kk, g.n, len}, .strides = {nl, len, 1}},
                        img};
  run(loom_im2col_kernel, cts, 2, sc + 2, LOOM_CONV_NUM_SCALARS, g.c * kk * g.n);

  /* Forward, all images' positions as one row of columns: (G, og, N L). */
  const int64_t c_sz[4] = {1, g.groups, og, nl}, c_st[4] = {0, og * nl, nl, 1};
  const int64_t a_sz[4] = {1, g.groups, og, ck}, a_st[4] = {0, og * ck, ck, 1};
  const int64_t b_sz[4] = {1, g.groups, ck, nl}, b_st[4] = {0, ck * nl, nl, 1};
  const int64_t bias_st[4] = {0, og, 1, 0};
  uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(g.o * nl));
  uint16_t *y2 = malloc(sizeof(uint16_t) * (size_t)(g.o * nl));
  loom_tensor tc = view4(y, c_sz, c_st), ta = view4(w, a_sz, a_st), tb = view4(col, b_sz, b_st);
  loom_gemm_plan plan;
  CHECK_MSG(loom_gemm_plan_init(&tc, &ta, &tb, (int32_t)isa, &plan) == 0, "plan");
  void *ws = malloc((size_t)plan.workspace_bytes + 64);
  loom_tensor gts[5] = {tc, ta, tb, bytes(ws, plan.workspace_bytes), view4(bias, c_sz, bias_st)};
  loom_scalar gsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 1.0}};
  run(loom_gemm_pack_kernel, gts, 5, gsc, 3, plan.pack_range);
  run(loom_gemm_compute_kernel, gts, 5, gsc, 3, plan.compute_range);
  loom_tensor tbias = {.data = bias, .dtype = LOOM_BFLOAT16, .rank = 1, .sizes = {g.o},
                       .strides = {1}};
  for (int in_place = 0; in_place < 2; ++in_place) {
    sc[0].i = isa | (in_place ? LOOM_GEMM_IN_COMPUTE : 0);
    loom_gemm_plan ip;
    CHECK_MSG(loom_gemm_plan_init(&tc, &ta, &tb, (int32_t)sc[0].i, &ip) == 0, "implicit plan");
    memset(ws, 0xff, (size_t)plan.workspace_bytes); /* NaNs where nothing was packed */
    loom_tensor its[6] = {tc, ta, tb, bytes(ws, plan.workspace_bytes), img, tbias};
    its[0].data = y2;
    loom_scalar psc[3] = {sc[0], {.f = 1.0}, {.f = 0.0}};
    run(loom_gemm_pack_kernel, its, 4, psc, 3, ip.pack_units_a);
    for (int64_t tpos = 32; tpos <= LOOM_CONV_GEMM_POSITIONS; tpos *= 2)
      for (int64_t pieces = 1; pieces <= 3; ++pieces) {
        memset(y2, 0xff, sizeof(uint16_t) * (size_t)(g.o * nl));
        sc[1].i = tpos, sc[2 + LOOM_CONV_NUM_SCALARS].i = pieces;
        run(loom_conv_gemm_amx_kernel, its, 6, sc, 3 + LOOM_CONV_NUM_SCALARS,
            g.groups * ((nl + tpos - 1) / tpos - 1 + pieces));
        CHECK_MSG(memcmp(y, y2, sizeof(uint16_t) * (size_t)(g.o * nl)) == 0,
              "forward c=%ld o=%ld g=%ld, %ld positions, %ld pieces, weight %s: differs",
              (long)g.c, (long)g.o, (long)g.groups, (long)tpos, (long)pieces,
              ip.a_in_place ? "in place" : "packed");
      }
  }

  /* Weight gradient dW[g] = dy[g] (og, N L) @ col[g]^T. */
  const int64_t wc_sz[4] = {1, g.groups, og, ck}, wa_st[4] = {0, og * nl, nl, 1};
  const int64_t wb_sz[4] = {1, g.groups, nl, ck}, wb_st[4] = {0, ck * nl, 1, nl};
  uint16_t *gw = malloc(sizeof(uint16_t) * (size_t)(g.o * ck));
  uint16_t *gw2 = malloc(sizeof(uint16_t) * (size_t)(g.o * ck));
  loom_tensor wc = view4(gw, wc_sz, a_st), wa = view4(dy, c_sz, wa_st);
  loom_tensor wb = view4(col, wb_sz, wb_st);
  loom_gemm_plan wp;
  CHECK_MSG(loom_gemm_plan_init(&wc, &wa, &wb, (int32_t)isa, &wp) == 0, "wgrad plan");
  void *wws = malloc((size_t)wp.workspace_bytes + 64);
  loom_tensor wts[5] = {wc, wa, wb, bytes(wws, wp.workspace_bytes), img};
  loom_scalar wsc[3] = {{.i = isa}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, wts, 4, wsc, 3, wp.pack_range);
  run(loom_gemm_compute_kernel, wts, 4, wsc, 3, wp.compute_range);
  wts[0].data = gw2;
  run(loom_gemm_pack_kernel, wts, 4, wsc, 3, wp.pack_units_a);
  sc[0].i = isa;
  for (int64_t qn = 1; qn <= 4; ++qn) {
    memset(gw2, 0xff, sizeof(uint16_t) * (size_t)(g.o * ck));
    sc[1].i = qn;
    run(loom_conv_wgrad_amx_kernel, wts, 5, sc, 2 + LOOM_CONV_NUM_SCALARS,
        g.groups * ((wp.n_panels + qn - 1) / qn));
    CHECK_MSG(memcmp(gw, gw2, sizeof(uint16_t) * (size_t)(g.o * ck)) == 0,
          "weight gradient c=%ld o=%ld g=%ld, %ld panels per item: differs", (long)g.c,
          (long)g.o, (long)g.groups, (long)qn);
  }
  free(x), free(w), free(bias), free(dy), free(col), free(y), free(y2), free(ws);
  free(gw), free(gw2), free(wws);
}

/* The flipped pack writes the panels loom_gemm_pack_kernel writes from the
 * flipped weight wf[g][c][o][K-1-t] = w[g * O/G + o][c][t] itself. */
static void check_pack_flipped(int64_t groups, int64_t o, int64_t cg, int64_t taps) {
  const int64_t og = o / groups, k = og * taps, cols = 40;
  uint16_t *w = bf16_rand(o * cg * taps), *wf = malloc(sizeof(uint16_t) * (size_t)(o * cg * taps));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t oo = 0; oo < og; ++oo)
        for (int64_t t = 0; t < taps; ++t)
          wf[((g * cg + c) * og + oo) * taps + taps - 1 - t] =
              w[((g * og + oo) * cg + c) * taps + t];
  const int64_t c_sz[4] = {1, groups, cg, cols}, c_st[4] = {0, cg * cols, cols, 1};
  const int64_t a_sz[4] = {1, groups, cg, k}, a_st[4] = {0, cg * k, k, 1};
  const int64_t b_sz[4] = {1, groups, k, cols}, b_st[4] = {0, k * cols, cols, 1};
  loom_tensor ts[5] = {view4(NULL, c_sz, c_st), view4(wf, a_sz, a_st), view4(NULL, b_sz, b_st)};
  loom_gemm_plan plan;
  CHECK_MSG(loom_gemm_plan_init(&ts[0], &ts[1], &ts[2], LOOM_GEMM_AMX, &plan) == 0, "plan");
  char *ref = malloc((size_t)plan.b_offset), *got = malloc((size_t)plan.b_offset);
  memset(got, 0x7f, (size_t)plan.b_offset); /* every byte must be written */
  ts[3] = bytes(ref, plan.b_offset);
  loom_scalar sc[3] = {{.i = LOOM_GEMM_AMX}, {.f = 1.0}, {.f = 0.0}};
  run(loom_gemm_pack_kernel, ts, 4, sc, 3, plan.pack_units_a);
  ts[3].data = got;
  ts[4] = (loom_tensor){.data = w, .dtype = LOOM_BFLOAT16, .rank = 3, .sizes = {o, cg, taps},
                        .strides = {cg * taps, taps, 1}};
  const int64_t units = (plan.m_panels + LOOM_CONV_FLIP_PANELS - 1) / LOOM_CONV_FLIP_PANELS;
  run(loom_conv_pack_flipped_amx_kernel, ts, 5, sc, 1, groups * units);
  CHECK_MSG(memcmp(ref, got, (size_t)plan.b_offset) == 0,
        "flipped pack differs (G %ld, O %ld, C/G %ld, taps %ld)", (long)groups, (long)o,
        (long)cg, (long)taps);
  ts[4].sizes[2] = 33; /* more taps than one 32-k step */
  loom_kernel_args bad = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 5,
                          .tensors = ts, .num_scalars = 1, .scalars = sc, .range = 1, .grain = 1};
  CHECK_MSG(loom_conv_pack_flipped_amx_kernel(&bad, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT, "bad taps");
  free(w), free(wf), free(ref), free(got);
}

int main(void) {
  if (!loom_gemm_isa_supported(LOOM_GEMM_AMX)) {
    test_skip("this CPU has no AMX (or LOOM_CPU_FEATURES caps it)");
    TEST_MAIN_END();
  }
  check_pack_flipped(1, 70, 61, 9);     /* taps across 32-k steps, k in blocks, a partial panel */
  check_pack_flipped(2, 128, 64, 25);
  check_pack_flipped(1, 40, 32, 1);
  /* runs across rows ("same" windows), k in several blocks, weight in place */
  check_geom((geom){.n = 2, .c = 64, .o = 40, .groups = 1, .in = {1, 9, 11},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* runs along rows, a packed weight, a partial row panel, dilation */
  check_geom((geom){.n = 3, .c = 10, .o = 37, .groups = 1, .in = {1, 8, 13},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 0, 2}, .d = {1, 1, 2}});
  /* stride 2 over rows wider than a vector; groups */
  check_geom((geom){.n = 2, .c = 8, .o = 24, .groups = 2, .in = {1, 5, 75},
                    .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  /* stride 3 (lane by lane), the 7x7 stem's window */
  check_geom((geom){.n = 1, .c = 3, .o = 16, .groups = 1, .in = {1, 20, 23},
                    .k = {1, 7, 7}, .s = {1, 3, 3}, .p = {0, 3, 3}, .d = {1, 1, 1}});
  /* 3-d and 1-d */
  check_geom((geom){.n = 2, .c = 4, .o = 12, .groups = 1, .in = {4, 5, 6},
                    .k = {3, 3, 2}, .s = {1, 1, 2}, .p = {1, 1, 0}, .d = {1, 1, 1}});
  check_geom((geom){.n = 2, .c = 16, .o = 20, .groups = 1, .in = {1, 1, 45},
                    .k = {1, 1, 5}, .s = {1, 1, 1}, .p = {0, 0, 2}, .d = {1, 1, 1}});
  /* 544 output channels: two passes of rows */
  check_geom((geom){.n = 1, .c = 8, .o = 544, .groups = 1, .in = {1, 12, 12},
                    .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  TEST_MAIN_END();
}
