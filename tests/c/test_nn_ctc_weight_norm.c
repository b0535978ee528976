/* Weight normalization and the CTC loss kernels against independent
 * references: weight norm against its formula in fp64 and its gradient
 * against central differences; the CTC loss against the sum over every
 * alignment, enumerated, and its gradient against central differences
 * through a log-softmax. Chunking must never change a bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/ctc_loss.h"
#include "kernels/base/dtype.h"
#include "kernels/nn/weight_norm.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* ---- weight norm ---------------------------------------------------------------- */

/* w = v * g / ||v|| with one norm per row (rows) or per column, in fp64,
 * over v [M, N]. */
static void wn_reference(const double *v, const double *g, int64_t m, int64_t n, int rows,
                         double *w, double *norm) {
  const int64_t k = rows ? m : n;
  for (int64_t a = 0; a < k; ++a) {
    double s = 0;
    for (int64_t b = 0; b < (rows ? n : m); ++b) {
      const double x = rows ? v[a * n + b] : v[b * n + a];
      s += x * x;
    }
    norm[a] = sqrt(s);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      w[i * n + j] = v[i * n + j] * g[rows ? i : j] / norm[rows ? i : j];
}

/* Forward (and, with gw, backward) in fp64 through the kernels, in chunks of
 * `grain`: rows in one launch, columns in three with `rows_per_block`. */
static int wn_run(const double *v, const double *g, int64_t m, int64_t n, int rows,
                  int64_t grain, int64_t rows_per_block, double *w, double *norm,
                  const double *gw, double *gv, double *gg) {
  const int64_t svn[2] = {m, n}, sk[1] = {rows ? m : n};
  loom_tensor tv = dense((void *)v, LOOM_FLOAT64, 2, svn), tg = dense((void *)g, LOOM_FLOAT64, 1, sk);
  loom_tensor tw = dense(w, LOOM_FLOAT64, 2, svn), tn = dense(norm, LOOM_FLOAT64, 1, sk);
  loom_scalar sn[1] = {si(n)};
  int rc;
  if (rows) {
    loom_tensor f[4] = {tv, tg, tw, tn};
    if ((rc = run_chunks(loom_weight_norm_rows_forward, f, 4, sn, 1, m, grain))) return rc;
    if (!gw) return 0;
    loom_tensor b[6] = {dense((void *)gw, LOOM_FLOAT64, 2, svn), tv, tg, tn,
                        dense(gv, LOOM_FLOAT64, 2, svn), dense(gg, LOOM_FLOAT64, 1, sk)};
    return run_chunks(loom_weight_norm_rows_backward, b, 6, sn, 1, m, grain);
  }
  const int64_t blocks = (m + rows_per_block - 1) / rows_per_block;
  double *part = malloc((size_t)(blocks * n) * sizeof(double));
  double *coef = malloc((size_t)(2 * n) * sizeof(double));
  const int64_t sp[2] = {blocks, n}, sc1[2] = {1, n}, sc2[2] = {2, n};
  loom_tensor tp = dense(part, LOOM_FLOAT64, 2, sp);
  loom_scalar ps[3] = {si(m), si(n), si(rows_per_block)};
  loom_tensor p[3] = {tv, tv, tp};
  loom_tensor f[4] = {tp, tg, tn, dense(coef, LOOM_FLOAT64, 2, sc1)};
  loom_tensor a[4] = {tv, none(), f[3], tw};
  rc = run_chunks(loom_weight_norm_cols_partials, p, 3, ps, 3, blocks, grain);
  if (!rc) rc = run_chunks(loom_weight_norm_cols_forward, f, 4, NULL, 0, n, grain);
  if (!rc) rc = run_chunks(loom_weight_norm_cols_apply, a, 4, sn, 1, m, grain);
  if (!rc && gw) {
    loom_tensor tgw = dense((void *)gw, LOOM_FLOAT64, 2, svn);
    loom_tensor pb[3] = {tgw, tv, tp};
    loom_tensor fb[5] = {tp, tg, tn, dense(gg, LOOM_FLOAT64, 1, sk),
                         dense(coef, LOOM_FLOAT64, 2, sc2)};
    loom_tensor ab[4] = {tgw, tv, fb[4], dense(gv, LOOM_FLOAT64, 2, svn)};
    rc = run_chunks(loom_weight_norm_cols_partials, pb, 3, ps, 3, blocks, grain);
    if (!rc) rc = run_chunks(loom_weight_norm_cols_backward, fb, 5, NULL, 0, n, grain);
    if (!rc) rc = run_chunks(loom_weight_norm_cols_apply, ab, 4, sn, 1, m, grain);
  }
  free(part);
  free(coef);
  return rc;
}

static void test_weight_norm_fp64(void) {
  enum { M = 13, N = 300 }; /* rows longer than one staged piece */
  static double v[M * N], g[N], gw[M * N], w[M * N], wr[M * N], norm[N], nr[N],
      gv[M * N], gg[N];
  fill(v, M * N);
  fill(g, N);
  fill(gw, M * N);
  for (int rows = 0; rows <= 1; ++rows) {
    const int64_t k = rows ? M : N;
    CHECK(wn_run(v, g, M, N, rows, 3, 4, w, norm, gw, gv, gg) == 0);
    wn_reference(v, g, M, N, rows, wr, nr);
    CHECK(test_max_rel(w, wr, M * N) < 1e-12);
    CHECK(test_max_rel(norm, nr, k) < 1e-12);
    /* gradients of sum(w * gw) against central differences */
    const double h = 1e-6;
    int bad = 0;
    for (int i = 0; i < M * N + k && !bad; i += 37) {
      double *x = i < M * N ? &v[i] : &g[i - M * N];
      const double keep = *x, got = i < M * N ? gv[i] : gg[i - M * N];
      double fp = 0, fm = 0;
      *x = keep + h;
      wn_reference(v, g, M, N, rows, wr, nr);
      for (int j = 0; j < M * N; ++j) fp += wr[j] * gw[j];
      *x = keep - h;
      wn_reference(v, g, M, N, rows, wr, nr);
      for (int j = 0; j < M * N; ++j) fm += wr[j] * gw[j];
      *x = keep;
      const double num = (fp - fm) / (2 * h);
      if (fabs(num - got) > 1e-6 + 1e-5 * fabs(num)) {
        fprintf(stderr, "weight norm rows=%d grad %d: %g vs %g\n", rows, i, got, num);
        bad = 1;
      }
    }
    CHECK(!bad);
  }
}

/* Chunk sizes never change a bit; the row blocks of the column sums are a
 * fixed function of the call, so one block size gives one result. */
static void test_weight_norm_chunking(void) {
  enum { M = 97, N = 40 }; /* M > N: g and the norms have M entries for rows */
  static double v[M * N], g[M], gw[M * N], w1[M * N], w2[M * N], n1[M], n2[M],
      gv1[M * N], gv2[M * N], gg1[M], gg2[M];
  fill(v, M * N);
  fill(g, M);
  fill(gw, M * N);
  for (int rows = 0; rows <= 1; ++rows) {
    CHECK(wn_run(v, g, M, N, rows, 1, 10, w1, n1, gw, gv1, gg1) == 0);
    CHECK(wn_run(v, g, M, N, rows, 1000, 10, w2, n2, gw, gv2, gg2) == 0);
    CHECK(memcmp(w1, w2, sizeof w1) == 0 && memcmp(gv1, gv2, sizeof gv1) == 0);
    CHECK(memcmp(n1, n2, (rows ? M : N) * sizeof(double)) == 0);
    CHECK(memcmp(gg1, gg2, (rows ? M : N) * sizeof(double)) == 0);
  }
}

/* bf16 v and g, float norms: the 16-bit dtypes keep their norms in float. */
static void test_weight_norm_bf16(void) {
  enum { M = 5, N = 33 };
  uint16_t v[M * N], g[M], w[M * N];
  float norm[M];
  double vd[M * N], gd[M], wr[M * N], nr[M];
  for (int i = 0; i < M * N; ++i) {
    v[i] = loom_f32_to_bf16((float)frand());
    vd[i] = loom_bf16_to_f32(v[i]);
  }
  for (int i = 0; i < M; ++i) {
    g[i] = loom_f32_to_bf16((float)frand());
    gd[i] = loom_bf16_to_f32(g[i]);
  }
  const int64_t s2[2] = {M, N}, s1[1] = {M};
  loom_tensor t[4] = {dense(v, LOOM_BFLOAT16, 2, s2), dense(g, LOOM_BFLOAT16, 1, s1),
                      dense(w, LOOM_BFLOAT16, 2, s2), dense(norm, LOOM_FLOAT32, 1, s1)};
  loom_scalar s[1] = {si(N)};
  CHECK(run_chunks(loom_weight_norm_rows_forward, t, 4, s, 1, M, 2) == 0);
  wn_reference(vd, gd, M, N, 1, wr, nr);
  int ok = 1;
  for (int i = 0; i < M; ++i) ok &= fabs(norm[i] - nr[i]) <= 1e-6 * nr[i];
  for (int i = 0; i < M * N; ++i) ok &= loom_f32_to_bf16((float)wr[i]) == w[i];
  CHECK(ok);
  /* a v that is not dense is refused, not misread */
  t[0].strides[0] = 2 * N;
  CHECK(run_chunks(loom_weight_norm_rows_forward, t, 4, s, 1, M, 2) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- CTC loss ------------------------------------------------------------------- */

enum { CT = 6, CN = 4, CC = 3, CS = 3, CW = 2 * CS + 1 };

/* -log of the total probability of the alignments of length t_len that
 * collapse to the target (merge repeats, drop blanks), enumerated. */
static double ctc_brute_nll(const double *lp, int64_t b, int64_t t_len, const int64_t *tgt,
                            int64_t l_len, int64_t blank) {
  int64_t path[CT];
  double total = 0;
  int64_t count = 1;
  for (int64_t t = 0; t < t_len; ++t) count *= CC;
  for (int64_t code = 0; code < count; ++code) {
    int64_t x = code, out[CT], n_out = 0, prev = -1;
    double logp = 0;
    for (int64_t t = 0; t < t_len; ++t, x /= CC) {
      path[t] = x % CC;
      logp += lp[(t * CN + b) * CC + path[t]];
      if (path[t] != blank && path[t] != prev) out[n_out++] = path[t];
      prev = path[t];
    }
    int match = n_out == l_len;
    for (int64_t i = 0; match && i < l_len; ++i) match = out[i] == tgt[i];
    if (match) total += exp(logp);
  }
  return -log(total);
}

typedef struct ctc_case {
  double lp[CT * CN * CC];
  int64_t targets[CN * CS];
  int64_t in_len[CN], tgt_len[CN];
  int64_t blank;
} ctc_case;

static void ctc_scalars(const ctc_case *c, int zero_infinity, loom_scalar *s) {
  s[0] = si(c->blank);
  s[1] = si(zero_infinity);
  for (int b = 0; b < CN; ++b) {
    s[2 + b] = si(c->in_len[b]);
    s[2 + CN + b] = si(c->tgt_len[b]);
  }
}

static int ctc_forward(ctc_case *c, double *nll, double *alpha, int64_t grain) {
  const int64_t slp[3] = {CT, CN, CC}, stg[2] = {CN, CS}, sn[1] = {CN}, sa[3] = {CN, CT, CW};
  loom_tensor t[4] = {dense(c->lp, LOOM_FLOAT64, 3, slp), dense(c->targets, LOOM_INT64, 2, stg),
                      dense(nll, LOOM_FLOAT64, 1, sn), dense(alpha, LOOM_FLOAT64, 3, sa)};
  loom_scalar s[2 + 2 * CN];
  ctc_scalars(c, 0, s);
  return run_chunks(loom_ctc_loss_forward, t, 4, s, 2 + 2 * CN, CN, grain);
}

static int ctc_backward(ctc_case *c, const double *go, double *nll, double *alpha, double *grad,
                        int zero_infinity, int64_t grain) {
  static double scratch[CN * (2 * CW + CC)];
  const int64_t slp[3] = {CT, CN, CC}, stg[2] = {CN, CS}, sn[1] = {CN}, sa[3] = {CN, CT, CW},
                ss[2] = {CN, 2 * CW + CC};
  loom_tensor t[7] = {dense((void *)go, LOOM_FLOAT64, 1, sn), dense(c->lp, LOOM_FLOAT64, 3, slp),
                      dense(c->targets, LOOM_INT64, 2, stg), dense(nll, LOOM_FLOAT64, 1, sn),
                      dense(alpha, LOOM_FLOAT64, 3, sa), dense(grad, LOOM_FLOAT64, 3, slp),
                      dense(scratch, LOOM_FLOAT64, 2, ss)};
  loom_scalar s[2 + 2 * CN];
  ctc_scalars(c, zero_infinity, s);
  return run_chunks(loom_ctc_loss_backward, t, 7, s, 2 + 2 * CN, CN, grain);
}

/* log_probs = log_softmax(z) over the classes */
static void log_softmax_rows(const double *z, double *lp) {
  for (int r = 0; r < CT * CN; ++r) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < CC; ++c) m = fmax(m, z[r * CC + c]);
    for (int c = 0; c < CC; ++c) s += exp(z[r * CC + c] - m);
    for (int c = 0; c < CC; ++c) lp[r * CC + c] = z[r * CC + c] - m - log(s);
  }
}

/* Samples: a full one, one with a repeated label, an empty target, and an
 * input too short for its target (three frames for 1 1 2: inf). */
static void ctc_setup(ctc_case *c, double *z) {
  static const int64_t tg[CN * CS] = {1, 2, 1, 2, 2, 0, 1, 1, 1, 1, 1, 2};
  static const int64_t il[CN] = {6, 5, 4, 3}, tl[CN] = {3, 2, 0, 3};
  fill(z, CT * CN * CC);
  log_softmax_rows(z, c->lp);
  memcpy(c->targets, tg, sizeof tg);
  memcpy(c->in_len, il, sizeof il);
  memcpy(c->tgt_len, tl, sizeof tl);
  c->blank = 0;
}

static void test_ctc_forward_enumerated(void) {
  static ctc_case c;
  static double z[CT * CN * CC], nll[CN], alpha[CN * CT * CW], nll2[CN], alpha2[CN * CT * CW];
  ctc_setup(&c, z);
  CHECK(ctc_forward(&c, nll, alpha, 1) == 0);
  for (int b = 0; b < CN; ++b) {
    const double ref = ctc_brute_nll(c.lp, b, c.in_len[b], &c.targets[b * CS], c.tgt_len[b], 0);
    if (isinf(ref)) CHECK(isinf(nll[b]) && nll[b] > 0);
    else CHECK(fabs(nll[b] - ref) < 1e-12 * fabs(ref));
  }
  /* beyond each sample's input length and label sequence: -inf */
  int ok = 1;
  for (int b = 0; b < CN; ++b)
    for (int t = 0; t < CT; ++t)
      for (int s = 0; s < CW; ++s)
        if (t >= c.in_len[b] || s > 2 * c.tgt_len[b])
          ok &= alpha[(b * CT + t) * CW + s] == -INFINITY;
  CHECK(ok);
  CHECK(ctc_forward(&c, nll2, alpha2, CN) == 0);
  CHECK(memcmp(nll, nll2, sizeof nll) == 0 && memcmp(alpha, alpha2, sizeof alpha) == 0);
  /* an input of length 0: loss 0 for an empty target, inf otherwise */
  c.in_len[2] = 0;
  c.in_len[3] = 0;
  CHECK(ctc_forward(&c, nll, alpha, 2) == 0);
  CHECK(nll[2] == 0.0 && isinf(nll[3]));
}

static void test_ctc_gradient(void) {
  static ctc_case c;
  static double z[CT * CN * CC], nll[CN], alpha[CN * CT * CW], grad[CT * CN * CC],
      grad2[CT * CN * CC];
  const double go[CN] = {0.7, -1.3, 0.4, 2.0};
  ctc_setup(&c, z);
  c.in_len[3] = 5; /* every sample finite here */
  CHECK(ctc_forward(&c, nll, alpha, 1) == 0);
  CHECK(ctc_backward(&c, go, nll, alpha, grad, 0, 1) == 0);
  CHECK(ctc_backward(&c, go, nll, alpha, grad2, 0, 3) == 0);
  CHECK(memcmp(grad, grad2, sizeof grad) == 0);
  /* the kernel's gradient is that of sum(go * nll) with respect to the
   * logits z under log_softmax, as the CPU's is */
  const double h = 1e-6;
  int bad = 0;
  for (int i = 0; i < CT * CN * CC && !bad; ++i) {
    const double keep = z[i];
    double f[2];
    for (int side = 0; side < 2; ++side) {
      z[i] = keep + (side ? -h : h);
      log_softmax_rows(z, c.lp);
      ctc_forward(&c, nll, alpha, CN);
      f[side] = 0;
      for (int b = 0; b < CN; ++b) f[side] += go[b] * nll[b];
    }
    z[i] = keep;
    const double num = (f[0] - f[1]) / (2 * h);
    if (fabs(num - grad[i]) > 1e-6 + 1e-5 * fabs(num)) {
      fprintf(stderr, "ctc grad %d: %g vs %g\n", i, grad[i], num);
      bad = 1;
    }
  }
  CHECK(!bad);
  log_softmax_rows(z, c.lp);
  /* rows past a sample's input length are zero */
  const int b = 2, t = 5;
  CHECK(c.in_len[b] <= t && grad[(t * CN + b) * CC] == 0.0 && grad[(t * CN + b) * CC + 2] == 0.0);
}

static void test_ctc_infinite_and_bad_targets(void) {
  static ctc_case c;
  static double z[CT * CN * CC], nll[CN], alpha[CN * CT * CW], grad[CT * CN * CC];
  const double go[CN] = {1, 1, 1, 1};
  ctc_setup(&c, z);
  CHECK(ctc_forward(&c, nll, alpha, 2) == 0);
  CHECK(isinf(nll[3]));
  /* without zero_infinity the impossible sample's gradient is not finite;
   * with it, zero */
  CHECK(ctc_backward(&c, go, nll, alpha, grad, 0, 1) == 0);
  CHECK(!isfinite(grad[3 * CC + 0]) || !isfinite(grad[3 * CC + 1]));
  CHECK(ctc_backward(&c, go, nll, alpha, grad, 1, 1) == 0);
  int zero = 1;
  for (int t = 0; t < CT; ++t)
    for (int k = 0; k < CC; ++k) zero &= grad[(t * CN + 3) * CC + k] == 0.0;
  CHECK(zero && isfinite(grad[0]));
  /* a label outside [0, C) inside a target length is an index error;
   * beyond it, padding nobody reads */
  c.targets[1 * CS + 2] = 7;
  CHECK(ctc_forward(&c, nll, alpha, 1) == 0);
  c.targets[1 * CS + 1] = -2;
  CHECK(ctc_forward(&c, nll, alpha, 1) == LOOM_ERROR_INDEX_OUT_OF_RANGE);
  CHECK(strstr(loom_last_error(), "target -2 at position 1 of sample 1") != NULL);
  CHECK(ctc_backward(&c, go, nll, alpha, grad, 0, 4) == LOOM_ERROR_INDEX_OUT_OF_RANGE);
  c.targets[1 * CS + 1] = 2;
  /* a length beyond log_alpha's width is refused */
  c.tgt_len[0] = CS + 1;
  CHECK(ctc_forward(&c, nll, alpha, 1) == LOOM_ERROR_INVALID_ARGUMENT);
}

/* Concatenated 1-d targets (int32, strided) give what padded ones give. */
static void test_ctc_concatenated_targets(void) {
  static ctc_case c;
  static double z[CT * CN * CC], nll[CN], alpha[CN * CT * CW], nll2[CN], alpha2[CN * CT * CW];
  ctc_setup(&c, z);
  CHECK(ctc_forward(&c, nll, alpha, 1) == 0);
  int32_t flat[2 * CN * CS];
  int64_t n = 0;
  for (int b = 0; b < CN; ++b)
    for (int i = 0; i < c.tgt_len[b]; ++i, ++n) {
      flat[2 * n] = (int32_t)c.targets[b * CS + i];
      flat[2 * n + 1] = 99; /* skipped by the stride */
    }
  const int64_t slp[3] = {CT, CN, CC}, sf[1] = {n}, st[1] = {2}, sn[1] = {CN},
                sa[3] = {CN, CT, CW};
  loom_tensor t[4] = {dense(c.lp, LOOM_FLOAT64, 3, slp), tensor(flat, LOOM_INT32, 1, sf, st),
                      dense(nll2, LOOM_FLOAT64, 1, sn), dense(alpha2, LOOM_FLOAT64, 3, sa)};
  loom_scalar s[2 + 2 * CN];
  ctc_scalars(&c, 0, s);
  CHECK(run_chunks(loom_ctc_loss_forward, t, 4, s, 2 + 2 * CN, CN, 3) == 0);
  CHECK(memcmp(nll, nll2, sizeof nll) == 0 && memcmp(alpha, alpha2, sizeof alpha) == 0);
}

int main(void) {
  srand(11);
  test_weight_norm_fp64();
  test_weight_norm_chunking();
  test_weight_norm_bf16();
  test_ctc_forward_enumerated();
  test_ctc_gradient();
  test_ctc_infinite_and_bad_targets();
  test_ctc_concatenated_targets();
  TEST_MAIN_END();
}
