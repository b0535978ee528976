/* The fused LSTM and GRU cell kernels: forward against a scalar reference,
 * backward against central differences of the forward in fp64, the 16-bit
 * types against the reference rounded once, strided operands, absent
 * optional operands, chunking that must not change a bit, and bad shapes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/nn/rnn.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

enum { B = 3, H = 5 };

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---- LSTM ---------------------------------------------------------------------- */

typedef struct lstm_data {
  double x[B * 4 * H], h[B * 4 * H], bx[4 * H], bh[4 * H], cx[B * H];
  double hy[B * H], cy[B * H], ws[B * 4 * H];
} lstm_data;

static void lstm_reference(const lstm_data *d, int bias, double *hy, double *cy,
                           double *ws) {
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      double g[4];
      for (int k = 0; k < 4; ++k) {
        const int e = b * 4 * H + k * H + j;
        const double a = d->x[e] + d->h[e] + (bias ? d->bx[k * H + j] + d->bh[k * H + j] : 0);
        g[k] = k == 2 ? tanh(a) : sigm(a);
        ws[e] = g[k];
      }
      cy[b * H + j] = g[1] * d->cx[b * H + j] + g[0] * g[2];
      hy[b * H + j] = g[3] * tanh(cy[b * H + j]);
    }
}

static int lstm_forward64(lstm_data *d, int bias, int64_t grain) {
  const int64_t sg[2] = {B, 4 * H}, sb[1] = {4 * H}, ss[2] = {B, H};
  loom_tensor t[8] = {dense(d->x, LOOM_FLOAT64, 2, sg), dense(d->h, LOOM_FLOAT64, 2, sg),
                      bias ? dense(d->bx, LOOM_FLOAT64, 1, sb) : none(),
                      bias ? dense(d->bh, LOOM_FLOAT64, 1, sb) : none(),
                      dense(d->cx, LOOM_FLOAT64, 2, ss), dense(d->hy, LOOM_FLOAT64, 2, ss),
                      dense(d->cy, LOOM_FLOAT64, 2, ss), dense(d->ws, LOOM_FLOAT64, 2, sg)};
  return run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, B * H, grain);
}

/* L = sum(ghy * hy) + sum(gcy * cy) after a forward. */
static double lstm_loss(lstm_data *d, const double *ghy, const double *gcy) {
  lstm_forward64(d, 1, 7);
  double l = 0;
  for (int i = 0; i < B * H; ++i) l += ghy[i] * d->hy[i] + gcy[i] * d->cy[i];
  return l;
}

static void test_lstm_forward(void) {
  static lstm_data d;
  fill(d.x, B * 4 * H); fill(d.h, B * 4 * H); fill(d.bx, 4 * H); fill(d.bh, 4 * H);
  fill(d.cx, B * H);
  double hy[B * H], cy[B * H], ws[B * 4 * H];
  for (int bias = 0; bias <= 1; ++bias) {
    CHECK(lstm_forward64(&d, bias, 4) == 0);
    lstm_reference(&d, bias, hy, cy, ws);
    CHECK(test_max_abs_diff(d.hy, hy, B * H) < 1e-14);
    CHECK(test_max_abs_diff(d.cy, cy, B * H) < 1e-14);
    CHECK(test_max_abs_diff(d.ws, ws, B * 4 * H) < 1e-14);
  }
}

/* grad_gates, grad_cx and grad_bias against central differences of L. */
static void test_lstm_backward(void) {
  static lstm_data d;
  fill(d.x, B * 4 * H); fill(d.h, B * 4 * H); fill(d.bx, 4 * H); fill(d.bh, 4 * H);
  fill(d.cx, B * H);
  double ghy[B * H], gcy[B * H], gg[B * 4 * H], gcx[B * H], gb[4 * H];
  fill(ghy, B * H);
  fill(gcy, B * H);
  lstm_forward64(&d, 1, 7);
  const int64_t sg[2] = {B, 4 * H}, sb[1] = {4 * H}, ss[2] = {B, H};
  loom_tensor t[8] = {dense(ghy, LOOM_FLOAT64, 2, ss), dense(gcy, LOOM_FLOAT64, 2, ss),
                      dense(d.cx, LOOM_FLOAT64, 2, ss), dense(d.cy, LOOM_FLOAT64, 2, ss),
                      dense(d.ws, LOOM_FLOAT64, 2, sg), dense(gg, LOOM_FLOAT64, 2, sg),
                      dense(gcx, LOOM_FLOAT64, 2, ss), dense(gb, LOOM_FLOAT64, 1, sb)};
  CHECK(run_chunks(loom_lstm_cell_backward, t, 8, NULL, 0, H, 2) == 0);
  const double step = 1e-6;
  double worst = 0;
  /* the gate gradient is that of the input and of the hidden gates alike */
  double *wrt[3] = {d.x, d.h, d.cx};
  const double *got[3] = {gg, gg, gcx};
  const int n[3] = {B * 4 * H, B * 4 * H, B * H};
  for (int w = 0; w < 3; ++w)
    for (int i = 0; i < n[w]; ++i) {
      const double keep = wrt[w][i];
      wrt[w][i] = keep + step;
      const double lp = lstm_loss(&d, ghy, gcy);
      wrt[w][i] = keep - step;
      const double lm = lstm_loss(&d, ghy, gcy);
      wrt[w][i] = keep;
      worst = fmax(worst, fabs((lp - lm) / (2 * step) - got[w][i]));
    }
  for (int i = 0; i < 4 * H; ++i) {
    const double keep = d.bx[i];
    d.bx[i] = keep + step;
    const double lp = lstm_loss(&d, ghy, gcy);
    d.bx[i] = keep - step;
    const double lm = lstm_loss(&d, ghy, gcy);
    d.bx[i] = keep;
    worst = fmax(worst, fabs((lp - lm) / (2 * step) - gb[i]));
  }
  CHECK(worst < 1e-8);
  if (worst >= 1e-8) fprintf(stderr, "lstm backward: worst error %g\n", worst);
}

/* An absent grad_hy or grad_cy is zero; the chunking changes no bit. */
static void test_lstm_backward_optional_and_chunking(void) {
  static lstm_data d;
  fill(d.x, B * 4 * H); fill(d.h, B * 4 * H); fill(d.cx, B * H);
  lstm_forward64(&d, 0, 7);
  double ghy[B * H], zeros[B * H] = {0};
  fill(ghy, B * H);
  double gg1[B * 4 * H], gcx1[B * H], gb1[4 * H], gg2[B * 4 * H], gcx2[B * H], gb2[4 * H];
  const int64_t sg[2] = {B, 4 * H}, sb[1] = {4 * H}, ss[2] = {B, H};
  loom_tensor t1[8] = {dense(ghy, LOOM_FLOAT64, 2, ss), none(),
                       dense(d.cx, LOOM_FLOAT64, 2, ss), dense(d.cy, LOOM_FLOAT64, 2, ss),
                       dense(d.ws, LOOM_FLOAT64, 2, sg), dense(gg1, LOOM_FLOAT64, 2, sg),
                       dense(gcx1, LOOM_FLOAT64, 2, ss), dense(gb1, LOOM_FLOAT64, 1, sb)};
  loom_tensor t2[8];
  memcpy(t2, t1, sizeof t1);
  t2[1] = dense(zeros, LOOM_FLOAT64, 2, ss);
  t2[5] = dense(gg2, LOOM_FLOAT64, 2, sg);
  t2[6] = dense(gcx2, LOOM_FLOAT64, 2, ss);
  t2[7] = dense(gb2, LOOM_FLOAT64, 1, sb);
  CHECK(run_chunks(loom_lstm_cell_backward, t1, 8, NULL, 0, H, 1) == 0);
  CHECK(run_chunks(loom_lstm_cell_backward, t2, 8, NULL, 0, H, H) == 0);
  CHECK(memcmp(gg1, gg2, sizeof gg1) == 0);
  CHECK(memcmp(gcx1, gcx2, sizeof gcx1) == 0);
  CHECK(memcmp(gb1, gb2, sizeof gb1) == 0);
  /* only grad_cy: the output gate gets no gradient */
  t1[0] = none();
  t1[1] = dense(ghy, LOOM_FLOAT64, 2, ss);
  CHECK(run_chunks(loom_lstm_cell_backward, t1, 8, NULL, 0, H, 2) == 0);
  int og_zero = 1;
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) og_zero &= gg1[b * 4 * H + 3 * H + j] == 0.0;
  CHECK(og_zero);
  CHECK(fabs(gcx1[0] - ghy[0] * d.ws[H]) < 1e-15); /* grad_cy * f */
}

/* float32 over strided (transposed) gates, bf16 and fp16: the reference
 * from the same rounded inputs, rounded once. */
static void test_lstm_reduced_types(void) {
  static lstm_data d;
  fill(d.x, B * 4 * H); fill(d.h, B * 4 * H); fill(d.bx, 4 * H); fill(d.bh, 4 * H);
  fill(d.cx, B * H);
  const int32_t types[3] = {LOOM_FLOAT32, LOOM_BFLOAT16, LOOM_FLOAT16};
  const double tol[3] = {2e-6, 8e-3, 1e-3};
  for (int ti = 0; ti < 3; ++ti) {
    const int32_t dt = types[ti];
    /* 16-bit values round-tripped so the reference sees the same inputs */
    static float xf[B * 4 * H], hf[B * 4 * H], bxf[4 * H], bhf[4 * H], cxf[B * H];
    static uint16_t x16[B * 4 * H], h16[B * 4 * H], bx16[4 * H], bh16[4 * H], cx16[B * H];
    static uint16_t hy16[B * H], cy16[B * H], ws16[B * 4 * H];
    static float hyf[B * H], cyf[B * H], wsf[B * 4 * H];
    double *src[5] = {d.x, d.h, d.bx, d.bh, d.cx};
    float *f[5] = {xf, hf, bxf, bhf, cxf};
    uint16_t *s16[5] = {x16, h16, bx16, bh16, cx16};
    const int n[5] = {B * 4 * H, B * 4 * H, 4 * H, 4 * H, B * H};
    lstm_data r = d;
    double *rd[5] = {r.x, r.h, r.bx, r.bh, r.cx};
    for (int a = 0; a < 5; ++a)
      for (int i = 0; i < n[a]; ++i) {
        /* the float32 gates are stored transposed: element (b, c) at c*B + b */
        const int at = (a < 2 && dt == LOOM_FLOAT32) ? (i % (4 * H)) * B + i / (4 * H) : i;
        if (dt == LOOM_FLOAT32) {
          f[a][at] = (float)src[a][i];
          rd[a][i] = f[a][at];
        } else if (dt == LOOM_BFLOAT16) {
          s16[a][i] = loom_f32_to_bf16((float)src[a][i]);
          rd[a][i] = loom_bf16_to_f32(s16[a][i]);
        } else {
          s16[a][i] = loom_f32_to_f16((float)src[a][i]);
          rd[a][i] = loom_f16_to_f32(s16[a][i]);
        }
      }
    double hy[B * H], cy[B * H], ws[B * 4 * H];
    lstm_reference(&r, 1, hy, cy, ws);
    const int64_t sg[2] = {B, 4 * H}, sgt[2] = {1, B}, sb[1] = {4 * H}, ss[2] = {B, H};
    const int f32 = dt == LOOM_FLOAT32;
    loom_tensor t[8] = {
        f32 ? tensor(xf, dt, 2, sg, sgt) : dense(x16, dt, 2, sg),
        f32 ? tensor(hf, dt, 2, sg, sgt) : dense(h16, dt, 2, sg),
        dense(f32 ? (void *)bxf : bx16, dt, 1, sb), dense(f32 ? (void *)bhf : bh16, dt, 1, sb),
        dense(f32 ? (void *)cxf : cx16, dt, 2, ss), dense(f32 ? (void *)hyf : hy16, dt, 2, ss),
        dense(f32 ? (void *)cyf : cy16, dt, 2, ss), dense(f32 ? (void *)wsf : ws16, dt, 2, sg)};
    CHECK(run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, B * H, 4) == 0);
    double got_hy[B * H], got_ws[B * 4 * H];
    for (int i = 0; i < B * H; ++i)
      got_hy[i] = f32 ? hyf[i] : dt == LOOM_BFLOAT16 ? loom_bf16_to_f32(hy16[i])
                                                      : loom_f16_to_f32(hy16[i]);
    for (int i = 0; i < B * 4 * H; ++i)
      got_ws[i] = f32 ? wsf[i] : dt == LOOM_BFLOAT16 ? loom_bf16_to_f32(ws16[i])
                                                      : loom_f16_to_f32(ws16[i]);
    CHECK(test_max_rel(got_hy, hy, B * H) < tol[ti]);
    CHECK(test_max_rel(got_ws, ws, B * 4 * H) < tol[ti]);
  }
}

/* ---- GRU ----------------------------------------------------------------------- */

typedef struct gru_data {
  double x[B * 3 * H], h[B * 3 * H], bx[3 * H], bh[3 * H], hx[B * H];
  double hy[B * H], ws[B * 5 * H];
} gru_data;

static void gru_reference(const gru_data *d, int bias, double *hy) {
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      double a[3], hn = 0;
      for (int k = 0; k < 3; ++k) {
        const int e = b * 3 * H + k * H + j;
        const double bx = bias ? d->bx[k * H + j] : 0, bh = bias ? d->bh[k * H + j] : 0;
        if (k < 2) {
          a[k] = d->x[e] + d->h[e] + bx + bh;
        } else {
          hn = d->h[e] + bh;
          a[k] = d->x[e] + bx;
        }
      }
      const double r = sigm(a[0]), z = sigm(a[1]), n = tanh(a[2] + r * hn);
      hy[b * H + j] = (1 - z) * n + z * d->hx[b * H + j];
    }
}

static int gru_forward64(gru_data *d, int bias, int64_t grain) {
  const int64_t sg[2] = {B, 3 * H}, sb[1] = {3 * H}, ss[2] = {B, H}, sw[2] = {B, 5 * H};
  loom_tensor t[7] = {dense(d->x, LOOM_FLOAT64, 2, sg), dense(d->h, LOOM_FLOAT64, 2, sg),
                      bias ? dense(d->bx, LOOM_FLOAT64, 1, sb) : none(),
                      bias ? dense(d->bh, LOOM_FLOAT64, 1, sb) : none(),
                      dense(d->hx, LOOM_FLOAT64, 2, ss), dense(d->hy, LOOM_FLOAT64, 2, ss),
                      dense(d->ws, LOOM_FLOAT64, 2, sw)};
  return run_chunks(loom_gru_cell_forward, t, 7, NULL, 0, B * H, grain);
}

static double gru_loss(gru_data *d, const double *ghy) {
  gru_forward64(d, 1, 7);
  double l = 0;
  for (int i = 0; i < B * H; ++i) l += ghy[i] * d->hy[i];
  return l;
}

static void test_gru_forward(void) {
  static gru_data d;
  fill(d.x, B * 3 * H); fill(d.h, B * 3 * H); fill(d.bx, 3 * H); fill(d.bh, 3 * H);
  fill(d.hx, B * H);
  double hy[B * H];
  for (int bias = 0; bias <= 1; ++bias) {
    CHECK(gru_forward64(&d, bias, 4) == 0);
    gru_reference(&d, bias, hy);
    CHECK(test_max_abs_diff(d.hy, hy, B * H) < 1e-14);
    int ws_ok = 1; /* the workspace keeps hx and hn + b_hn */
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < H; ++j) {
        ws_ok &= d.ws[b * 5 * H + 3 * H + j] == d.hx[b * H + j];
        const double hn = d.h[b * 3 * H + 2 * H + j] + (bias ? d.bh[2 * H + j] : 0);
        ws_ok &= d.ws[b * 5 * H + 4 * H + j] == hn;
      }
    CHECK(ws_ok);
  }
}

static void test_gru_backward(void) {
  static gru_data d;
  fill(d.x, B * 3 * H); fill(d.h, B * 3 * H); fill(d.bx, 3 * H); fill(d.bh, 3 * H);
  fill(d.hx, B * H);
  double ghy[B * H], gx[B * 3 * H], gh[B * 3 * H], ghx[B * H], gbx[3 * H], gbh[3 * H];
  fill(ghy, B * H);
  gru_forward64(&d, 1, 7);
  const int64_t sg[2] = {B, 3 * H}, sb[1] = {3 * H}, ss[2] = {B, H}, sw[2] = {B, 5 * H};
  loom_tensor t[7] = {dense(ghy, LOOM_FLOAT64, 2, ss), dense(d.ws, LOOM_FLOAT64, 2, sw),
                      dense(gx, LOOM_FLOAT64, 2, sg), dense(gh, LOOM_FLOAT64, 2, sg),
                      dense(ghx, LOOM_FLOAT64, 2, ss), dense(gbx, LOOM_FLOAT64, 1, sb),
                      dense(gbh, LOOM_FLOAT64, 1, sb)};
  CHECK(run_chunks(loom_gru_cell_backward, t, 7, NULL, 0, H, 3) == 0);
  double *wrt[5] = {d.x, d.h, d.hx, d.bx, d.bh};
  const double *got[5] = {gx, gh, ghx, gbx, gbh};
  const int n[5] = {B * 3 * H, B * 3 * H, B * H, 3 * H, 3 * H};
  const double step = 1e-6;
  double worst = 0;
  for (int w = 0; w < 5; ++w)
    for (int i = 0; i < n[w]; ++i) {
      const double keep = wrt[w][i];
      wrt[w][i] = keep + step;
      const double lp = gru_loss(&d, ghy);
      wrt[w][i] = keep - step;
      const double lm = gru_loss(&d, ghy);
      wrt[w][i] = keep;
      worst = fmax(worst, fabs((lp - lm) / (2 * step) - got[w][i]));
    }
  CHECK(worst < 1e-8);
  if (worst >= 1e-8) fprintf(stderr, "gru backward: worst error %g\n", worst);
  /* chunking changes no bit, bias sums included */
  double gx2[B * 3 * H], gh2[B * 3 * H], ghx2[B * H], gbx2[3 * H], gbh2[3 * H];
  loom_tensor t2[7] = {t[0], t[1], dense(gx2, LOOM_FLOAT64, 2, sg),
                       dense(gh2, LOOM_FLOAT64, 2, sg), dense(ghx2, LOOM_FLOAT64, 2, ss),
                       dense(gbx2, LOOM_FLOAT64, 1, sb), dense(gbh2, LOOM_FLOAT64, 1, sb)};
  gru_forward64(&d, 1, 7);
  CHECK(run_chunks(loom_gru_cell_backward, t, 7, NULL, 0, H, 1) == 0);
  CHECK(run_chunks(loom_gru_cell_backward, t2, 7, NULL, 0, H, H) == 0);
  CHECK(memcmp(gx, gx2, sizeof gx) == 0 && memcmp(gh, gh2, sizeof gh) == 0);
  CHECK(memcmp(gbx, gbx2, sizeof gbx) == 0 && memcmp(gbh, gbh2, sizeof gbh) == 0);
  CHECK(memcmp(ghx, ghx2, sizeof ghx) == 0);
}

/* bf16: the bias gradient sums the gate gradients as stored (rounded). */
static void test_gru_bf16_bias_sum(void) {
  enum { BB = 40 };
  static uint16_t ghy[BB * H], ws[BB * 5 * H], gx[BB * 3 * H], gh[BB * 3 * H], ghx[BB * H];
  static uint16_t gbx[3 * H], gbh[3 * H];
  for (int i = 0; i < BB * H; ++i) ghy[i] = loom_f32_to_bf16((float)frand());
  for (int b = 0; b < BB; ++b)
    for (int k = 0; k < 5; ++k)
      for (int j = 0; j < H; ++j) {
        const double v = k < 2 ? 0.5 + 0.5 * frand() : frand(); /* r, z in (0, 1) */
        ws[b * 5 * H + k * H + j] = loom_f32_to_bf16((float)v);
      }
  const int64_t sg[2] = {BB, 3 * H}, sb[1] = {3 * H}, ss[2] = {BB, H}, sw[2] = {BB, 5 * H};
  loom_tensor t[7] = {dense(ghy, LOOM_BFLOAT16, 2, ss), dense(ws, LOOM_BFLOAT16, 2, sw),
                      dense(gx, LOOM_BFLOAT16, 2, sg), dense(gh, LOOM_BFLOAT16, 2, sg),
                      dense(ghx, LOOM_BFLOAT16, 2, ss), dense(gbx, LOOM_BFLOAT16, 1, sb),
                      dense(gbh, LOOM_BFLOAT16, 1, sb)};
  CHECK(run_chunks(loom_gru_cell_backward, t, 7, NULL, 0, H, 2) == 0);
  int ok = 1;
  for (int c = 0; c < 3 * H; ++c) {
    double sx = 0, sh = 0;
    for (int b = 0; b < BB; ++b) {
      sx += loom_bf16_to_f32(gx[b * 3 * H + c]);
      sh += loom_bf16_to_f32(gh[b * 3 * H + c]);
    }
    ok &= gbx[c] == loom_f32_to_bf16((float)sx) && gbh[c] == loom_f32_to_bf16((float)sh);
  }
  CHECK(ok);
  /* z's gradient in float: go * (hx - n) * (1 - z) * z, rounded once */
  const float go = loom_bf16_to_f32(ghy[0]), z = loom_bf16_to_f32(ws[H]),
              n = loom_bf16_to_f32(ws[2 * H]), hx = loom_bf16_to_f32(ws[3 * H]);
  CHECK(gx[H] == loom_f32_to_bf16(go * (hx - n) * (1.0f - z) * z));
}

/* float32 with a hidden size over the kernels' column block: against the
 * double reference, and chunkings that split rows and blocks anywhere agree
 * bit for bit, forward and backward. */
static void test_float32_wide_rows(void) {
  enum { BW = 3, HW = 300 };
  static float x[BW * 4 * HW], h[BW * 4 * HW], bx[4 * HW], bh[4 * HW], cx[BW * HW];
  static float hy[2][BW * HW], cy[2][BW * HW], ws[2][BW * 4 * HW];
  static float ghy[BW * HW], gg[2][BW * 4 * HW], gcx[2][BW * HW], gb[2][4 * HW];
  float *in[5] = {x, h, bx, bh, cx};
  const int n[5] = {BW * 4 * HW, BW * 4 * HW, 4 * HW, 4 * HW, BW * HW};
  for (int a = 0; a < 5; ++a)
    for (int i = 0; i < n[a]; ++i) in[a][i] = (float)(2 * frand());
  for (int i = 0; i < BW * HW; ++i) ghy[i] = (float)frand();
  const int64_t sg[2] = {BW, 4 * HW}, sb[1] = {4 * HW}, ss[2] = {BW, HW};
  const int64_t grains[2][2] = {{7, 1}, {BW * HW, HW}}; /* forward, backward */
  for (int r = 0; r < 2; ++r) {
    loom_tensor t[8] = {dense(x, LOOM_FLOAT32, 2, sg), dense(h, LOOM_FLOAT32, 2, sg),
                        dense(bx, LOOM_FLOAT32, 1, sb), dense(bh, LOOM_FLOAT32, 1, sb),
                        dense(cx, LOOM_FLOAT32, 2, ss), dense(hy[r], LOOM_FLOAT32, 2, ss),
                        dense(cy[r], LOOM_FLOAT32, 2, ss), dense(ws[r], LOOM_FLOAT32, 2, sg)};
    CHECK(run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, BW * HW, grains[r][0]) == 0);
    loom_tensor u[8] = {dense(ghy, LOOM_FLOAT32, 2, ss), none(), t[4], t[6], t[7],
                        dense(gg[r], LOOM_FLOAT32, 2, sg), dense(gcx[r], LOOM_FLOAT32, 2, ss),
                        dense(gb[r], LOOM_FLOAT32, 1, sb)};
    CHECK(run_chunks(loom_lstm_cell_backward, u, 8, NULL, 0, HW, grains[r][1]) == 0);
  }
  CHECK(memcmp(hy[0], hy[1], sizeof hy[0]) == 0 && memcmp(ws[0], ws[1], sizeof ws[0]) == 0);
  CHECK(memcmp(gg[0], gg[1], sizeof gg[0]) == 0 && memcmp(gb[0], gb[1], sizeof gb[0]) == 0);
  CHECK(memcmp(gcx[0], gcx[1], sizeof gcx[0]) == 0);
  double worst = 0;
  for (int b = 0; b < BW; ++b)
    for (int j = 0; j < HW; ++j) {
      double g[4];
      for (int k = 0; k < 4; ++k) {
        const int e = b * 4 * HW + k * HW + j;
        const double a = (double)x[e] + h[e] + bx[k * HW + j] + bh[k * HW + j];
        g[k] = k == 2 ? tanh(a) : sigm(a);
      }
      const double c = g[1] * cx[b * HW + j] + g[0] * g[2];
      worst = fmax(worst, fabs(hy[0][b * HW + j] - g[3] * tanh(c)));
      worst = fmax(worst, fabs(cy[0][b * HW + j] - c));
    }
  CHECK(worst < 2e-6);
  /* the bias gradient: the stored gate gradients summed in batch order */
  int sums_ok = 1;
  for (int c = 0; c < 4 * HW; ++c) {
    double s = 0;
    for (int b = 0; b < BW; ++b) s += gg[0][b * 4 * HW + c];
    sums_ok &= gb[0][c] == (float)s;
  }
  CHECK(sums_ok);
  /* the GRU's float path over the same rows: 3 gates of the 4 */
  static float gws[BW * 5 * HW];
  const int64_t g3[2] = {BW, 3 * HW}, g3s[2] = {4 * HW, 1}, b3[1] = {3 * HW},
                w5[2] = {BW, 5 * HW};
  loom_tensor t[7] = {tensor(x, LOOM_FLOAT32, 2, g3, g3s), tensor(h, LOOM_FLOAT32, 2, g3, g3s),
                      dense(bx, LOOM_FLOAT32, 1, b3), dense(bh, LOOM_FLOAT32, 1, b3),
                      dense(cx, LOOM_FLOAT32, 2, ss), dense(hy[0], LOOM_FLOAT32, 2, ss),
                      dense(gws, LOOM_FLOAT32, 2, w5)};
  CHECK(run_chunks(loom_gru_cell_forward, t, 7, NULL, 0, BW * HW, 13) == 0);
  worst = 0;
  for (int b = 0; b < BW; ++b)
    for (int j = 0; j < HW; ++j) {
      const int e = b * 4 * HW + j;
      const double r = sigm((double)x[e] + h[e] + bx[j] + bh[j]);
      const double z = sigm((double)x[e + HW] + h[e + HW] + bx[HW + j] + bh[HW + j]);
      const double nn = tanh((double)x[e + 2 * HW] + bx[2 * HW + j] +
                             r * ((double)h[e + 2 * HW] + bh[2 * HW + j]));
      worst = fmax(worst, fabs(hy[0][b * HW + j] - ((1 - z) * nn + z * cx[b * HW + j])));
    }
  CHECK(worst < 2e-6);
}

/* ---- bad arguments ------------------------------------------------------------- */

static void test_bad_shapes(void) {
  static lstm_data d;
  const int64_t sg[2] = {B, 4 * H}, bad[2] = {B, 4 * H - 1}, sb[1] = {4 * H},
                ss[2] = {B, H};
  loom_tensor t[8] = {dense(d.x, LOOM_FLOAT64, 2, sg), dense(d.h, LOOM_FLOAT64, 2, bad),
                      dense(d.bx, LOOM_FLOAT64, 1, sb), dense(d.bh, LOOM_FLOAT64, 1, sb),
                      dense(d.cx, LOOM_FLOAT64, 2, ss), dense(d.hy, LOOM_FLOAT64, 2, ss),
                      dense(d.cy, LOOM_FLOAT64, 2, ss), dense(d.ws, LOOM_FLOAT64, 2, sg)};
  CHECK(run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, B * H, 4) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "hidden_gates must be [3, 20]") != NULL);
  t[1] = dense(d.h, LOOM_FLOAT64, 2, sg);
  t[3] = none(); /* one bias without the other */
  CHECK(run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, B * H, 4) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  t[3] = dense(d.bh, LOOM_INT64, 1, sb);
  CHECK(run_chunks(loom_lstm_cell_forward, t, 8, NULL, 0, B * H, 4) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(run_chunks(loom_lstm_cell_forward, t, 5, NULL, 0, B * H, 4) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  static gru_data g;
  const int64_t gw[2] = {B, 4 * H}, gg[2] = {B, 3 * H};
  loom_tensor u[7] = {dense(g.hy, LOOM_FLOAT64, 2, ss), dense(g.ws, LOOM_FLOAT64, 2, gw),
                      dense(g.x, LOOM_FLOAT64, 2, gg), dense(g.h, LOOM_FLOAT64, 2, gg),
                      dense(g.hx, LOOM_FLOAT64, 2, ss), none(), none()};
  CHECK(run_chunks(loom_gru_cell_backward, u, 7, NULL, 0, H, 4) ==
        LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "workspace must be [3, 25]") != NULL);
}

int main(void) {
  srand(11);
  RUN_TEST(test_lstm_forward);
  RUN_TEST(test_lstm_backward);
  RUN_TEST(test_lstm_backward_optional_and_chunking);
  RUN_TEST(test_lstm_reduced_types);
  RUN_TEST(test_gru_forward);
  RUN_TEST(test_gru_backward);
  RUN_TEST(test_gru_bf16_bias_sum);
  RUN_TEST(test_float32_wide_rows);
  RUN_TEST(test_bad_shapes);
  TEST_MAIN_END();
}
