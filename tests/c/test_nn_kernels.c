/* Neural-network kernels (softmax, losses, embedding backward,
 * resampling, padding, grid sampling, the row primitives; the norms are in
 * test_nn_norms.c)
 * against scalar references; gradients against central differences in
 * fp64; chunking must never change a result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/index/embedding.h"
#include "kernels/nn/grid_sample.h"
#include "kernels/nn/loss.h"
#include "kernels/nn/nn_rows.h"
#include "kernels/nn/norm.h"
#include "kernels/nn/padding.h"
#include "kernels/nn/softmax.h"
#include "kernels/nn/upsample.h"
#include "loom/status.h"
#include "base/cpu.h"
#include "kernel_test_util.h"
#include "test_util.h"


/* ---- softmax --------------------------------------------------------------- */

/* x is [4, 7, 5] stored transposed as [5, 7, 4] memory (non-contiguous);
 * softmax along dim 1. */
static void test_softmax(void) {
  enum { A = 4, B = 7, C = 5, N = A * B * C };
  static double x[N], y[N], yref[N], g[N], gi[N], gnum[N];
  fill(x, N);
  fill(g, N);
  const int64_t sizes[3] = {A, B, C}, xstr[3] = {1, A, A * B};
  for (int take_log = 0; take_log <= 1; ++take_log) {
    loom_tensor t[3] = {tensor(x, LOOM_FLOAT64, 3, sizes, xstr),
                        dense(y, LOOM_FLOAT64, 3, sizes)};
    loom_scalar s[2] = {si(1), si(take_log)};
    CHECK(run_chunks(loom_softmax_forward, t, 2, s, 2, A * C, 3) == 0);
    for (int a = 0; a < A; ++a)
      for (int c = 0; c < C; ++c) {
        double m = -INFINITY, sum = 0;
        for (int b = 0; b < B; ++b) m = fmax(m, x[a + b * A + c * A * B]);
        for (int b = 0; b < B; ++b) sum += exp(x[a + b * A + c * A * B] - m);
        for (int b = 0; b < B; ++b) {
          double v = x[a + b * A + c * A * B] - m;
          yref[(a * B + b) * C + c] = take_log ? v - log(sum) : exp(v) / sum;
        }
      }
    CHECK(test_max_rel(y, yref, N) < 1e-12);
    /* gradient of sum(y * g) against central differences */
    loom_tensor tb[3] = {dense(g, LOOM_FLOAT64, 3, sizes),
                         dense(y, LOOM_FLOAT64, 3, sizes),
                         tensor(gi, LOOM_FLOAT64, 3, sizes, xstr)};
    CHECK(run_chunks(loom_softmax_backward, tb, 3, s, 2, A * C, 2) == 0);
    const double h = 1e-6;
    for (int i = 0; i < N; ++i) {
      double keep = x[i], fp = 0, fm = 0;
      x[i] = keep + h;
      run_chunks(loom_softmax_forward, t, 2, s, 2, A * C, 64);
      for (int j = 0; j < N; ++j) fp += y[j] * g[j];
      x[i] = keep - h;
      run_chunks(loom_softmax_forward, t, 2, s, 2, A * C, 64);
      for (int j = 0; j < N; ++j) fm += y[j] * g[j];
      x[i] = keep;
      gnum[i] = (fp - fm) / (2 * h);
    }
    CHECK(test_max_rel(gi, gnum, N) < 1e-6);
  }
}

/* bf16 in, fp32 out; chunking must not change a bit. */
static void test_softmax_mixed_and_chunking(void) {
  enum { R = 9, L = 33 };
  static uint16_t xb[R * L];
  static float y1[R * L], y2[R * L];
  for (int i = 0; i < R * L; ++i) xb[i] = loom_f32_to_bf16((float)(frand() * 8));
  const int64_t sizes[2] = {R, L};
  loom_tensor t1[2] = {dense(xb, LOOM_BFLOAT16, 2, sizes), dense(y1, LOOM_FLOAT32, 2, sizes)};
  loom_tensor t2[2] = {dense(xb, LOOM_BFLOAT16, 2, sizes), dense(y2, LOOM_FLOAT32, 2, sizes)};
  loom_scalar s[2] = {si(1), si(0)};
  CHECK(run_chunks(loom_softmax_forward, t1, 2, s, 2, R, 1) == 0);
  CHECK(run_chunks(loom_softmax_forward, t2, 2, s, 2, R, R) == 0);
  CHECK(memcmp(y1, y2, sizeof y1) == 0);
  double rowsum = 0;
  for (int j = 0; j < L; ++j) rowsum += y1[j];
  CHECK(fabs(rowsum - 1.0) < 1e-6);
  loom_scalar bad[2] = {si(2), si(0)};
  CHECK(run_chunks(loom_softmax_forward, t1, 2, bad, 2, R, 1) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- losses ----------------------------------------------------------------- */

static void test_nll_loss(void) {
  enum { N = 5, C = 4 };
  static double x[N * C], w[C], out[N], gi[N * C];
  int64_t tgt[N] = {0, 3, -100, 2, 3};
  double outs, tw, go = 1.5;
  fill(x, N * C);
  for (int c = 0; c < C; ++c) w[c] = 0.5 + c;
  const int64_t s3[3] = {N, C, 1}, st[2] = {N, 1}, s1[1] = {C}, sn[1] = {N};
  loom_tensor t[5] = {dense(x, LOOM_FLOAT64, 3, s3), dense(tgt, LOOM_INT64, 2, st),
                      dense(w, LOOM_FLOAT64, 1, s1), dense(&outs, LOOM_FLOAT64, 0, NULL),
                      dense(&tw, LOOM_FLOAT64, 0, NULL)};
  loom_scalar s[2] = {si(LOOM_REDUCTION_MEAN), si(-100)};
  CHECK(run_chunks(loom_nll_loss_forward, t, 5, s, 2, 1, 1) == 0);
  double ref = 0, wref = 0;
  for (int n = 0; n < N; ++n)
    if (tgt[n] != -100) { ref -= w[tgt[n]] * x[n * C + tgt[n]]; wref += w[tgt[n]]; }
  CHECK(fabs(tw - wref) < 1e-12);
  CHECK(fabs(outs - ref / wref) < 1e-12);
  loom_tensor b[5] = {dense(&go, LOOM_FLOAT64, 0, NULL), t[1], t[2], t[4],
                      dense(gi, LOOM_FLOAT64, 3, s3)};
  CHECK(run_chunks(loom_nll_loss_backward, b, 5, s, 2, N, 2) == 0);
  CHECK(fabs(gi[1 * C + 3] + go * w[3] / wref) < 1e-12);
  CHECK(gi[1 * C + 2] == 0.0 && gi[2 * C + 0] == 0.0);
  /* reduction none */
  t[3] = dense(out, LOOM_FLOAT64, 1, sn);
  loom_scalar sn0[2] = {si(LOOM_REDUCTION_NONE), si(-100)};
  CHECK(run_chunks(loom_nll_loss_forward, t, 5, sn0, 2, N, 2) == 0);
  CHECK(fabs(out[3] + w[2] * x[3 * C + 2]) < 1e-12 && out[2] == 0.0);
  /* out-of-range target */
  tgt[0] = C;
  CHECK(run_chunks(loom_nll_loss_forward, t, 5, s, 2, 1, 1) == LOOM_ERROR_INDEX_OUT_OF_RANGE);
  CHECK(strstr(loom_last_error(), "Target 4 is out of bounds") != NULL);
}

static void test_pointwise_losses(void) {
  enum { R = 70, K = 90, T = R * K };
  static double x[T], y[T], gi[T], num[T], part[(T + LOOM_LOSS_BLOCK - 1) / LOOM_LOSS_BLOCK];
  for (int i = 0; i < T; ++i) {
    x[i] = 0.05 + 0.9 * (frand() * 0.5 + 0.5);
    y[i] = frand() * 0.5 + 0.5;
  }
  const int64_t sz[2] = {R, K}, tr[2] = {1, R}, sp[1] = {(T + LOOM_LOSS_BLOCK - 1) / LOOM_LOSS_BLOCK};
  for (int kind = 0; kind <= LOOM_LOSS_BCE; ++kind) {
    double out, go = 0.75;
    loom_tensor f[4] = {tensor(x, LOOM_FLOAT64, 2, sz, tr), dense(y, LOOM_FLOAT64, 2, sz),
                        none(), dense(part, LOOM_FLOAT64, 1, sp)};
    loom_scalar s[3] = {si(kind), si(LOOM_REDUCTION_MEAN), sf(0.3)};
    CHECK(run_chunks(loom_pointwise_loss_forward, f, 4, s, 3, sp[0], 1) == 0);
    loom_tensor p[2] = {f[3], dense(&out, LOOM_FLOAT64, 0, NULL)};
    loom_scalar ps[1] = {sf(T)};
    CHECK(run_chunks(loom_loss_sum_partials, p, 2, ps, 1, 1, 1) == 0);
    loom_tensor b[5] = {dense(&go, LOOM_FLOAT64, 0, NULL), f[0], f[1], none(),
                        tensor(gi, LOOM_FLOAT64, 2, sz, tr)};
    CHECK(run_chunks(loom_pointwise_loss_backward, b, 5, s, 3, T, 1000) == 0);
    const double h = 1e-6;
    for (int i = 0; i < T; i += 97) {
      double keep = x[i], fp, fm;
      x[i] = keep + h;
      run_chunks(loom_pointwise_loss_forward, f, 4, s, 3, sp[0], 1);
      run_chunks(loom_loss_sum_partials, p, 2, ps, 1, 1, 1);
      fp = out;
      x[i] = keep - h;
      run_chunks(loom_pointwise_loss_forward, f, 4, s, 3, sp[0], 1);
      run_chunks(loom_loss_sum_partials, p, 2, ps, 1, 1, 1);
      fm = out;
      x[i] = keep;
      num[i] = go * (fp - fm) / (2 * h);
      if (fabs(num[i] - gi[i]) > 1e-7 + 1e-5 * fabs(gi[i])) {
        ++test_failed;
        fprintf(stderr, "loss kind %d grad %d: %g vs %g\n", kind, i, gi[i], num[i]);
        break;
      }
    }
  }
  /* bce rejects inputs outside [0, 1] */
  x[17] = 1.5;
  double o[T];
  loom_tensor f[4] = {dense(x, LOOM_FLOAT64, 2, sz), dense(y, LOOM_FLOAT64, 2, sz), none(),
                      dense(o, LOOM_FLOAT64, 2, sz)};
  loom_scalar s[3] = {si(LOOM_LOSS_BCE), si(LOOM_REDUCTION_NONE), sf(0)};
  CHECK(run_chunks(loom_pointwise_loss_forward, f, 4, s, 3, T, 64) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- embedding backward ------------------------------------------------------- */

static void test_embedding_backward(void) {
  enum { NW = 7, D = 300, N = 23 };
  static int64_t idx[N], offsets[NW + 1], order[N];
  static float go[N * D], gw[NW * D];
  static double ref[NW * D];
  for (int i = 0; i < N; ++i) idx[i] = rand() % NW;
  idx[3] = 2; idx[9] = 2;
  for (int i = 0; i < N * D; ++i) go[i] = (float)frand();
  for (int pass = 0; pass < 2; ++pass) {
    const int padding = pass ? 2 : -1, freq = pass;
    memset(ref, 0, sizeof ref);
    int cnt[NW] = {0};
    for (int i = 0; i < N; ++i) cnt[idx[i]]++;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < D; ++j)
        if (idx[i] != padding) ref[idx[i] * D + j] += go[i * D + j] / (freq ? cnt[idx[i]] : 1);
    const int64_t sn[1] = {N}, so[1] = {NW + 1}, sg[2] = {N, D}, sw[2] = {NW, D};
    loom_tensor b[3] = {dense(idx, LOOM_INT64, 1, sn), dense(offsets, LOOM_INT64, 1, so),
                        dense(order, LOOM_INT64, 1, sn)};
    loom_scalar bs[1] = {si(NW)};
    CHECK(run_chunks(loom_embedding_backward_bucket, b, 3, bs, 1, 1, 1) == 0);
    loom_tensor r[4] = {dense(go, LOOM_FLOAT32, 2, sg), b[1], b[2], dense(gw, LOOM_FLOAT32, 2, sw)};
    loom_scalar rs[2] = {si(padding), si(freq)};
    CHECK(run_chunks(loom_embedding_backward_rows, r, 4, rs, 2, NW, 2) == 0);
    double m = 0;
    for (int i = 0; i < NW * D; ++i) m = fmax(m, fabs(gw[i] - ref[i]));
    CHECK(m < 1e-5);
    if (pass) CHECK(gw[2 * D + 7] == 0.0f);
  }
  idx[5] = NW;
  const int64_t sn[1] = {N}, so[1] = {NW + 1};
  loom_tensor b[3] = {dense(idx, LOOM_INT64, 1, sn), dense(offsets, LOOM_INT64, 1, so),
                      dense(order, LOOM_INT64, 1, sn)};
  loom_scalar bs[1] = {si(NW)};
  CHECK(run_chunks(loom_embedding_backward_bucket, b, 3, bs, 1, 1, 1) == LOOM_ERROR_INDEX_OUT_OF_RANGE);
  /* a row pass queued behind the failed bucket pass reads nothing */
  for (int i = 0; i < N; ++i) order[i] = 1 << 30;
  const int64_t sg[2] = {N, D}, sw[2] = {NW, D};
  loom_tensor r[4] = {dense(go, LOOM_FLOAT32, 2, sg), b[1], b[2], dense(gw, LOOM_FLOAT32, 2, sw)};
  loom_scalar rs[2] = {si(-1), si(0)};
  CHECK(run_chunks(loom_embedding_backward_rows, r, 4, rs, 2, NW, 2) == 0);
  CHECK(gw[3 * D + 1] == 0.0f);
}

/* ---- fp32 fast paths against the fp64 path ----------------------------------- */

static double max_abs_f32(const float *a, const double *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = fabs((double)a[i] - b[i]);
    if (d > m || d != d) m = d != d ? INFINITY : d;
  }
  return m;
}

static void test_fast_paths(void) {
  enum { R = 5, MAXN = 70 };
  static float xf[R * MAXN], yf[R * MAXN], gf[R * MAXN], gif[R * MAXN];
  static double xd[R * MAXN], yd[R * MAXN], gd[R * MAXN], gid[R * MAXN];
  static float wf[MAXN], bf[MAXN], meanf[R], rstdf[R];
  static double wd[MAXN], bd[MAXN], meand[R], rstdd[R];
  for (int n = 1; n <= MAXN; n += 3) {
    for (int i = 0; i < R * n; ++i) {
      xf[i] = (float)(frand() * 6);
      xd[i] = xf[i];
      gf[i] = (float)frand();
      gd[i] = gf[i];
    }
    xf[n / 2] = -INFINITY; /* a masked entry in row 0 */
    xd[n / 2] = -INFINITY;
    for (int j = 0; j < n; ++j) {
      wf[j] = (float)frand(); wd[j] = wf[j];
      bf[j] = (float)frand(); bd[j] = bf[j];
    }
    const int64_t sz[2] = {R, n}, sm[1] = {R}, sw[1] = {n};
    for (int take_log = 0; take_log <= 1; ++take_log) {
      loom_tensor tf[2] = {dense(xf, LOOM_FLOAT32, 2, sz), dense(yf, LOOM_FLOAT32, 2, sz)};
      loom_tensor td[2] = {dense(xd, LOOM_FLOAT64, 2, sz), dense(yd, LOOM_FLOAT64, 2, sz)};
      loom_scalar s[2] = {si(1), si(take_log)};
      CHECK(run_chunks(loom_softmax_forward, tf, 2, s, 2, R, 2) == 0);
      CHECK(run_chunks(loom_softmax_forward, td, 2, s, 2, R, 2) == 0);
      if (n > 1) CHECK(take_log ? yf[n / 2] == -INFINITY : yf[n / 2] == 0.0f);
      /* compare away from the masked entry */
      double err = 0;
      for (int i = 0; i < R * n; ++i)
        if (i != n / 2 || n == 1) err = fmax(err, fabs(yf[i] - yd[i]) / (1 + fabs(yd[i])));
      CHECK(err < 2e-6);
      if (n == 1) continue; /* row 0 holds only -inf: no gradient to compare */
      loom_tensor bf_[3] = {dense(gf, LOOM_FLOAT32, 2, sz), dense(yf, LOOM_FLOAT32, 2, sz),
                            dense(gif, LOOM_FLOAT32, 2, sz)};
      loom_tensor bd_[3] = {dense(gd, LOOM_FLOAT64, 2, sz), dense(yd, LOOM_FLOAT64, 2, sz),
                            dense(gid, LOOM_FLOAT64, 2, sz)};
      CHECK(run_chunks(loom_softmax_backward, bf_, 3, s, 2, R, 3) == 0);
      CHECK(run_chunks(loom_softmax_backward, bd_, 3, s, 2, R, 3) == 0);
      CHECK(max_abs_f32(gif, gid, R * n) < 1e-5 * n);
    }
    /* layer norm, affine, fp32 against fp64 */
    xf[n / 2] = 0.25f;
    xd[n / 2] = 0.25;
    loom_tensor lf[6] = {dense(xf, LOOM_FLOAT32, 2, sz), dense(wf, LOOM_FLOAT32, 1, sw),
                         dense(bf, LOOM_FLOAT32, 1, sw), dense(yf, LOOM_FLOAT32, 2, sz),
                         dense(meanf, LOOM_FLOAT32, 1, sm), dense(rstdf, LOOM_FLOAT32, 1, sm)};
    loom_tensor ld[6] = {dense(xd, LOOM_FLOAT64, 2, sz), dense(wd, LOOM_FLOAT64, 1, sw),
                         dense(bd, LOOM_FLOAT64, 1, sw), dense(yd, LOOM_FLOAT64, 2, sz),
                         dense(meand, LOOM_FLOAT64, 1, sm), dense(rstdd, LOOM_FLOAT64, 1, sm)};
    loom_scalar ls[3] = {si(n), sf(1e-5), si(0)};
    CHECK(run_chunks(loom_layer_norm_forward, lf, 6, ls, 3, R, 2) == 0);
    CHECK(run_chunks(loom_layer_norm_forward, ld, 6, ls, 3, R, 2) == 0);
    CHECK(max_abs_f32(yf, yd, R * n) < 1e-4);
    loom_tensor bif[6] = {dense(gf, LOOM_FLOAT32, 2, sz), lf[0], lf[4], lf[5], lf[1],
                          dense(gif, LOOM_FLOAT32, 2, sz)};
    loom_tensor bid[6] = {dense(gd, LOOM_FLOAT64, 2, sz), ld[0], ld[4], ld[5], ld[1],
                          dense(gid, LOOM_FLOAT64, 2, sz)};
    loom_scalar bs[2] = {si(n), si(0)};
    CHECK(run_chunks(loom_layer_norm_backward_input, bif, 6, bs, 2, R, 2) == 0);
    CHECK(run_chunks(loom_layer_norm_backward_input, bid, 6, bs, 2, R, 2) == 0);
    CHECK(max_abs_f32(gif, gid, R * n) < 1e-3);
  }
}

/* bf16 rows staged through float buffers, against fp64 on the same
 * (rounded) inputs. */
static void test_staged_bf16(void) {
  enum { R = 4, N = 333 };
  static uint16_t xb[R * N], yb[R * N], gb[R * N], gib[R * N], wb[N];
  static double xd[R * N], yd[R * N], gd[R * N], gid[R * N], wd[N], md[R], rd[R];
  static float mf[R], rf[R];
  for (int i = 0; i < R * N; ++i) {
    xb[i] = loom_f32_to_bf16((float)(frand() * 4));
    xd[i] = loom_bf16_to_f32(xb[i]);
    gb[i] = loom_f32_to_bf16((float)frand());
    gd[i] = loom_bf16_to_f32(gb[i]);
  }
  for (int j = 0; j < N; ++j) {
    wb[j] = loom_f32_to_bf16((float)frand());
    wd[j] = loom_bf16_to_f32(wb[j]);
  }
  const int64_t sz[2] = {R, N}, sw[1] = {N}, sm[1] = {R};
  for (int take_log = 0; take_log <= 1; ++take_log) {
    loom_scalar s[2] = {si(1), si(take_log)};
    loom_tensor tb[2] = {dense(xb, LOOM_BFLOAT16, 2, sz), dense(yb, LOOM_BFLOAT16, 2, sz)};
    loom_tensor td[2] = {dense(xd, LOOM_FLOAT64, 2, sz), dense(yd, LOOM_FLOAT64, 2, sz)};
    CHECK(run_chunks(loom_softmax_forward, tb, 2, s, 2, R, 1) == 0);
    CHECK(run_chunks(loom_softmax_forward, td, 2, s, 2, R, 1) == 0);
    double w = 0;
    for (int i = 0; i < R * N; ++i) w = fmax(w, fabs(loom_bf16_to_f32(yb[i]) - yd[i]) / (1e-3 + fabs(yd[i])));
    CHECK(w < 1e-2);
    loom_tensor bb[3] = {dense(gb, LOOM_BFLOAT16, 2, sz), dense(yb, LOOM_BFLOAT16, 2, sz),
                         dense(gib, LOOM_BFLOAT16, 2, sz)};
    loom_tensor bd[3] = {dense(gd, LOOM_FLOAT64, 2, sz), dense(yd, LOOM_FLOAT64, 2, sz),
                         dense(gid, LOOM_FLOAT64, 2, sz)};
    CHECK(run_chunks(loom_softmax_backward, bb, 3, s, 2, R, 1) == 0);
    CHECK(run_chunks(loom_softmax_backward, bd, 3, s, 2, R, 1) == 0);
    w = 0;
    for (int i = 0; i < R * N; ++i) w = fmax(w, fabs(loom_bf16_to_f32(gib[i]) - gid[i]));
    CHECK(w < 3e-2);
  }
  /* layer norm: bf16 input and weight, fp32 statistics (mixed precision) */
  loom_tensor lb[6] = {dense(xb, LOOM_BFLOAT16, 2, sz), dense(wb, LOOM_BFLOAT16, 1, sw), {.data = NULL},
                       dense(yb, LOOM_BFLOAT16, 2, sz), dense(mf, LOOM_FLOAT32, 1, sm),
                       dense(rf, LOOM_FLOAT32, 1, sm)};
  loom_tensor ld[6] = {dense(xd, LOOM_FLOAT64, 2, sz), dense(wd, LOOM_FLOAT64, 1, sw), {.data = NULL},
                       dense(yd, LOOM_FLOAT64, 2, sz), dense(md, LOOM_FLOAT64, 1, sm),
                       dense(rd, LOOM_FLOAT64, 1, sm)};
  loom_scalar ls[3] = {si(N), sf(1e-5), si(0)};
  CHECK(run_chunks(loom_layer_norm_forward, lb, 6, ls, 3, R, 3) == 0);
  CHECK(run_chunks(loom_layer_norm_forward, ld, 6, ls, 3, R, 3) == 0);
  double w = 0;
  for (int i = 0; i < R * N; ++i) w = fmax(w, fabs(loom_bf16_to_f32(yb[i]) - yd[i]) / (1e-2 + fabs(yd[i])));
  CHECK(w < 1e-2);
  CHECK(fabs(mf[2] - md[2]) < 1e-5 && fabs(rf[2] - rd[2]) < 1e-4 * rd[2]);
  loom_tensor bib[6] = {dense(gb, LOOM_BFLOAT16, 2, sz), lb[0], lb[4], lb[5], lb[1],
                        dense(gib, LOOM_BFLOAT16, 2, sz)};
  loom_tensor bid[6] = {dense(gd, LOOM_FLOAT64, 2, sz), ld[0], ld[4], ld[5], ld[1],
                        dense(gid, LOOM_FLOAT64, 2, sz)};
  loom_scalar bs[2] = {si(N), si(0)};
  CHECK(run_chunks(loom_layer_norm_backward_input, bib, 6, bs, 2, R, 2) == 0);
  CHECK(run_chunks(loom_layer_norm_backward_input, bid, 6, bs, 2, R, 2) == 0);
  w = 0;
  for (int i = 0; i < R * N; ++i) w = fmax(w, fabs(loom_bf16_to_f32(gib[i]) - gid[i]) / (0.1 + fabs(gid[i])));
  CHECK(w < 2e-2);
}

/* Resampling: nearest 2x is a replication whose gradient sums 2x2
 * blocks; align_corners linear reproduces the corners and midpoints. */
static void test_upsample(void) {
  float in[6] = {1, 2, 3, 4, 5, 6}, out[24], grad[6];
  const int64_t is[4] = {1, 1, 2, 3}, os[4] = {1, 1, 4, 6};
  loom_tensor t[2] = {dense(out, LOOM_FLOAT32, 4, os), dense(in, LOOM_FLOAT32, 4, is)};
  loom_scalar s[LOOM_UPSAMPLE_NUM_SCALARS] = {
      {.i = LOOM_UPSAMPLE_NEAREST}, {.i = 2}, {.i = 0}, {.f = 0}, {.f = 0}, {.i = 1}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 2, .tensors = t,
                        .num_scalars = LOOM_UPSAMPLE_NUM_SCALARS, .scalars = s, .range = 1,
                        .grain = 1};
  CHECK(loom_kernel_upsample(&a, 0, 1) == 0);
  CHECK(out[0] == 1 && out[1] == 1 && out[7] == 1 && out[23] == 6 && out[14] == 5);
  for (int i = 0; i < 24; ++i) out[i] = 1;
  t[0] = dense(grad, LOOM_FLOAT32, 4, is);
  t[1] = dense(out, LOOM_FLOAT32, 4, os);
  CHECK(loom_kernel_upsample_backward(&a, 0, 1) == 0);
  CHECK(grad[0] == 4 && grad[5] == 4);
  /* align_corners linear 1-d: 3 -> 5 points */
  float row[3] = {0, 2, 10}, lin[5];
  const int64_t rs[4] = {1, 1, 1, 3}, ls[4] = {1, 1, 1, 5};
  t[0] = dense(lin, LOOM_FLOAT32, 4, ls);
  t[1] = dense(row, LOOM_FLOAT32, 4, rs);
  s[0].i = LOOM_UPSAMPLE_LINEAR;
  s[1].i = 1;
  s[2].i = 1;
  CHECK(loom_kernel_upsample(&a, 0, 1) == 0);
  CHECK(lin[0] == 0 && lin[1] == 1 && lin[2] == 2 && lin[3] == 6 && lin[4] == 10);
  s[1].i = 2; /* images are rank 4 */
  t[1].rank = 3;
  CHECK(loom_kernel_upsample(&a, 0, 1) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* Reflection and replication of one 4-element row padded by (3, 2); the
 * gradient adds every output into its source. */
static void test_padding(void) {
  float in[4] = {0, 1, 2, 3}, out[9], grad[4], ones[9];
  const int64_t is[5] = {1, 1, 1, 1, 4}, os[5] = {1, 1, 1, 1, 9};
  loom_tensor t[2] = {dense(out, LOOM_FLOAT32, 5, os), dense(in, LOOM_FLOAT32, 5, is)};
  loom_scalar s[4] = {{.i = LOOM_PAD_REFLECT}, {.i = 0}, {.i = 0}, {.i = 3}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 2, .tensors = t,
                        .num_scalars = 4, .scalars = s, .range = 1, .grain = 1};
  const float reflect[9] = {3, 2, 1, 0, 1, 2, 3, 2, 1}, replicate[9] = {0, 0, 0, 0, 1, 2, 3, 3, 3};
  CHECK(loom_kernel_padding(&a, 0, 1) == 0);
  CHECK(memcmp(out, reflect, sizeof out) == 0);
  s[0].i = LOOM_PAD_REPLICATE;
  CHECK(loom_kernel_padding(&a, 0, 1) == 0);
  CHECK(memcmp(out, replicate, sizeof out) == 0);
  for (int i = 0; i < 9; ++i) ones[i] = 1;
  t[0] = dense(grad, LOOM_FLOAT32, 5, is);
  t[1] = dense(ones, LOOM_FLOAT32, 5, os);
  CHECK(loom_kernel_padding_backward(&a, 0, 1) == 0);
  CHECK(grad[0] == 4 && grad[1] == 1 && grad[2] == 1 && grad[3] == 3);
}

/* Grid sampling a 2x2 image: the corners with align_corners, the centre
 * as the mean, a point outside as 0 (zeros) or the edge (border); the
 * backward spreads a gradient of 1 over the four pixels. */
static void test_grid_sample(void) {
  float img[4] = {1, 2, 3, 4}, grid[4][2] = {{-1, -1}, {1, 1}, {0, 0}, {3, 0}}, out[4];
  const int64_t is[4] = {1, 1, 2, 2}, gs[4] = {1, 1, 4, 2}, os[4] = {1, 1, 1, 4};
  loom_tensor t[3] = {dense(out, LOOM_FLOAT32, 4, os), dense(img, LOOM_FLOAT32, 4, is),
                      dense(grid, LOOM_FLOAT32, 4, gs)};
  loom_scalar s[3] = {{.i = 0}, {.i = 0}, {.i = 1}};
  loom_kernel_args a = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3, .tensors = t,
                        .num_scalars = 3, .scalars = s, .range = 1, .grain = 1};
  CHECK(loom_kernel_grid_sample(&a, 0, 1) == 0);
  CHECK(out[0] == 1 && out[1] == 4 && out[2] == 2.5f && out[3] == 0);
  s[1].i = 1; /* border */
  CHECK(loom_kernel_grid_sample(&a, 0, 1) == 0);
  CHECK(out[3] == 3.0f); /* x clipped to 1, y = 0.5: (2 + 4) / 2 */
  float go[4] = {0, 0, 1, 0}, gi[4], gg[4][2];
  loom_tensor b[5] = {dense(gi, LOOM_FLOAT32, 4, is), dense(gg, LOOM_FLOAT32, 4, gs),
                      dense(go, LOOM_FLOAT32, 4, os), t[1], t[2]};
  a.tensors = b;
  a.num_tensors = 5;
  CHECK(loom_kernel_grid_sample_backward(&a, 0, 1) == 0);
  CHECK(gi[0] == 0.25f && gi[3] == 0.25f && gg[3][0] == 0 && gg[3][1] == 0);
  /* (size - 1) / 2 times the image slope: 1 across, 2 down */
  CHECK(gg[2][0] == 0.5f && gg[2][1] == 1.0f);
}

/* The row primitives' two builds agree bit for bit: lengths with and
 * without a tail, and rows holding NaN, infinities and zeros of both signs
 * (the maximum's choice between -0 and +0 follows the order of the lanes). */
extern const loom_nn_rows_ops loom_nn_rows_table, loom_nn_rows_table_avx512;


static void test_rows_isas_agree(void) {
  if (!(loom_cpu_features() & LOOM_FEATURE_AVX512F)) return;
  const loom_nn_rows_ops *g = &loom_nn_rows_table, *v = &loom_nn_rows_table_avx512;
  static float x[1030], yg[1030], yv[1030];
  const int64_t lengths[] = {0, 1, 15, 16, 17, 64, 100, 1030};
  for (int kind = 0; kind < 4; ++kind)
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; ++li) {
      const int64_t n = lengths[li];
      for (int64_t i = 0; i < n; ++i) {
        x[i] = (float)(frand() * 8.0 - 4.0);
        if (kind == 1) x[i] = (i % 3) ? -0.0f : 0.0f;
        if (kind == 2 && i % 7 == 3) x[i] = -INFINITY;
      }
      if (kind == 3 && n > 0) x[n / 2] = NAN;
      CHECK(test_same_f32(g->max(x, n), v->max(x, n)));
      if (kind == 3) continue;
      const float m = g->max(x, n) == -INFINITY ? 0.0f : g->max(x, n);
      CHECK(test_same_f32(g->exp_sum(x, n, m, yg), v->exp_sum(x, n, m, yv)));
      CHECK(memcmp(yg, yv, (size_t)n * sizeof(float)) == 0);
      CHECK(test_same_f32(g->sum(x, n), v->sum(x, n)));
    }
  /* layer norm's parameter sums of one row, added to what the
   * accumulators hold */
  static float dy[1030], xs[1030], acc[2][2][1030];
  /* statistics whose products round (short ones would be exact) */
  const float mean = 0.1f, rstd = 0.7310585786300049f;
  for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; ++li) {
    const int64_t n = lengths[li];
    for (int64_t i = 0; i < n; ++i) xs[i] = (float)frand(), dy[i] = (float)frand();
    for (int with_b = 0; with_b <= 1; ++with_b) {
      for (int k = 0; k < 2; ++k) {
        for (int64_t i = 0; i < n; ++i) acc[k][0][i] = acc[k][1][i] = 0.5f;
        (k ? v : g)->norm_param_acc(dy, xs, n, mean, rstd, with_b ? acc[k][0] : NULL, acc[k][1]);
      }
      CHECK(memcmp(acc[0], acc[1], sizeof acc[0]) == 0);
      for (int64_t i = 0; i < n; ++i) {
        const float b = 0.5f + dy[i], w = 0.5f + dy[i] * ((xs[i] - mean) * rstd);
        CHECK(acc[1][0][i] == (with_b ? b : 0.5f) && acc[1][1][i] == w);
      }
      /* the one-pass form gives norm_grad_sums' sums and these sums, with
       * and without a weight */
      static float wt[1030], sums_acc[2][2][1030];
      for (int64_t i = 0; i < n; ++i) wt[i] = (float)frand();
      for (int with_w = 0; with_w <= 1; ++with_w)
        for (int k = 0; k < 2; ++k) {
          const loom_nn_rows_ops *o = k ? v : g;
          float s1[2], s2[2];
          for (int64_t i = 0; i < n; ++i) sums_acc[k][0][i] = sums_acc[k][1][i] = 0.5f;
          o->norm_grad_sums(dy, xs, with_w ? wt : NULL, n, mean, rstd, s1);
          o->norm_grad_sums_acc(dy, xs, with_w ? wt : NULL, n, mean, rstd, s2,
                                with_b ? sums_acc[k][0] : NULL, sums_acc[k][1]);
          CHECK(test_same_f32(s1[0], s2[0]) && test_same_f32(s1[1], s2[1]));
          CHECK(memcmp(sums_acc[k], acc[k], sizeof acc[k]) == 0);
        }
    }
  }
}

int main(void) {
  srand(7);
  test_rows_isas_agree();
  test_upsample();
  test_grid_sample();
  test_padding();
  test_softmax();
  test_softmax_mixed_and_chunking();
  test_nll_loss();
  test_pointwise_losses();
  test_embedding_backward();
  test_fast_paths();
  test_staged_bf16();
  TEST_MAIN_END();
}
