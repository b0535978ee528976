/* The margin losses (multi_margin_loss, multilabel_margin_loss), the
 * pairwise distances (cdist's direct form, pdist), embedding's row renorm
 * and logcumsumexp's scan, forward and backward, against straightforward
 * fp64 references written from the ops' definitions; a float32 run is held
 * to the reference of its rounded inputs. Running a launch one item at a
 * time, in odd chunks or whole must never change a bit (the runtime's
 * thread count only changes the chunking). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/index/embedding.h"
#include "kernels/nn/distance.h"
#include "kernels/nn/loss_margin.h"
#include "kernels/reduce/scan.h"
#include "loom/kernels/distance.h"
#include "loom/kernels/loss.h"
#include "loom/kernels/scan.h"
#include "loom/status.h"
#include "kernel_test_util.h"
#include "test_util.h"

/* A buffer of n elements of dtype dt (float32 or float64) holding src. */
static void *typed(const double *src, int64_t n, int32_t dt) {
  void *p = malloc((size_t)(n > 0 ? n : 1) * (dt == LOOM_FLOAT32 ? 4 : 8));
  for (int64_t i = 0; i < n; ++i) {
    if (dt == LOOM_FLOAT32) ((float *)p)[i] = (float)src[i];
    else ((double *)p)[i] = src[i];
  }
  return p;
}

static double at(const void *p, int32_t dt, int64_t i) {
  return dt == LOOM_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* src rounded to dt, back in double (the values a float32 kernel sees). */
static void round_to(double *v, int64_t n, int32_t dt) {
  if (dt == LOOM_FLOAT32)
    for (int64_t i = 0; i < n; ++i) v[i] = (double)(float)v[i];
}

/* Relative closeness of a kernel's output to the reference, scaled by the
 * largest reference magnitude (`floor` at least). */
static int close_all(const void *got, int32_t dt, const double *want, int64_t n, double rtol,
                     double floor) {
  double scale = floor;
  for (int64_t i = 0; i < n; ++i) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; ++i) {
    const double g = at(got, dt, i);
    if (isnan(want[i]) ? !isnan(g) : !(fabs(g - want[i]) <= rtol * scale)) {
      fprintf(stderr, "  element %lld: got %.17g, want %.17g\n", (long long)i, g, want[i]);
      return 0;
    }
  }
  return 1;
}

static double rtol_for(int32_t dt) { return dt == LOOM_FLOAT32 ? 2e-6 : 1e-13; }
static size_t esize(int32_t dt) { return dt == LOOM_FLOAT32 ? 4 : 8; }

/* Runs `fn` whole, one item at a time and in chunks of 3: every run must
 * succeed and write the same bytes into out (n_out bytes); the last run's
 * result stays in out. */
static void run_every_chunking(loom_kernel_fn fn, loom_tensor *t, int nt, loom_scalar *s, int ns,
                               int64_t range, void *out, size_t n_out, const char *what) {
  unsigned char *first = malloc(n_out ? n_out : 1);
  const int64_t grains[3] = {range > 0 ? range : 1, 1, 3};
  for (int g = 0; g < 3; ++g) {
    memset(out, 0x5a, n_out);
    CHECK_EQ_INT(run_chunks(fn, t, nt, s, ns, range, grains[g]), LOOM_OK);
    if (g == 0) memcpy(first, out, n_out);
    else CHECK_MSG(memcmp(first, out, n_out) == 0, "%s: grain %lld changed bits", what,
                   (long long)grains[g]);
  }
  free(first);
}

/* ---- multi_margin_loss ------------------------------------------------------------ */

enum { MM_N = 13, MM_C = 7 };

static void mm_reference(const double *x, const int64_t *tg, const double *w, int p, double margin,
                         const double *go, int per_row, double g, double *loss, double *grad) {
  for (int64_t n = 0; n < MM_N; ++n) {
    const double *in = x + n * MM_C;
    const int64_t t = tg[n];
    const double wt = w ? w[t] : 1.0;
    double sum = 0;
    double *gr = grad + n * MM_C;
    gr[t] = 0;
    for (int64_t d = 0; d < MM_C; ++d) {
      if (d == t) continue;
      const double z = margin - in[t] + in[d];
      gr[d] = 0;
      if (z > 0) {
        sum += (p == 1 ? z : z * z) * wt;
        gr[d] = (p == 1 ? 1.0 : 2.0 * z) * wt * g;
        gr[t] -= gr[d];
      }
    }
    loss[n] = sum / MM_C;
    const double scale = go[per_row ? n : 0];
    for (int64_t d = 0; d < MM_C; ++d) gr[d] *= scale;
  }
}

static void mm_case(int32_t dt, int p, int weighted, int per_row) {
  double x[MM_N * MM_C], w[MM_C], go[MM_N], loss[MM_N], grad[MM_N * MM_C];
  int64_t tg[MM_N];
  fill(x, MM_N * MM_C);
  for (int i = 0; i < MM_C; ++i) w[i] = 0.5 + (frand() + 1) / 2;
  for (int i = 0; i < MM_N; ++i) {
    tg[i] = rand() % MM_C;
    go[i] = frand();
  }
  round_to(x, MM_N * MM_C, dt);
  round_to(w, MM_C, dt);
  round_to(go, MM_N, dt);
  const double margin = 0.75; /* exact in float32 */
  /* the CPU's factor for sum (1/C) and mean (1/(N*C)), rounded to dt */
  double g = per_row ? 1.0 / MM_C : 1.0 / (MM_N * MM_C);
  round_to(&g, 1, dt);
  mm_reference(x, tg, weighted ? w : NULL, p, margin, go, per_row, g, loss, grad);

  void *tx = typed(x, MM_N * MM_C, dt), *tw = typed(w, MM_C, dt), *tgo = typed(go, MM_N, dt);
  void *out = typed(loss, MM_N, dt), *gi = typed(grad, MM_N * MM_C, dt);
  const int64_t sx[2] = {MM_N, MM_C}, sn[1] = {MM_N}, sc[1] = {MM_C}, s1[1] = {1};
  loom_tensor f[4] = {dense(tx, dt, 2, sx), dense(tg, LOOM_INT64, 1, sn),
                      weighted ? dense(tw, dt, 1, sc) : none(), dense(out, dt, 1, sn)};
  loom_scalar fs[2] = {si(p), sf(margin)};
  run_every_chunking(loom_multi_margin_loss_forward, f, 4, fs, 2, MM_N, out, MM_N * esize(dt),
                     "multi_margin_loss.forward");
  CHECK_MSG(close_all(out, dt, loss, MM_N, rtol_for(dt), 1e-3), "multi_margin forward p=%d", p);

  loom_tensor b[5] = {dense(tgo, dt, 1, per_row ? sn : s1), f[0], f[1], f[2],
                      dense(gi, dt, 2, sx)};
  loom_scalar bs[4] = {si(p), sf(margin), sf(g), si(per_row)};
  run_every_chunking(loom_multi_margin_loss_backward, b, 5, bs, 4, MM_N, gi,
                     MM_N * MM_C * esize(dt), "multi_margin_loss.backward");
  CHECK_MSG(close_all(gi, dt, grad, MM_N * MM_C, rtol_for(dt), 1e-3),
            "multi_margin backward p=%d weighted=%d per_row=%d", p, weighted, per_row);
  free(tx);
  free(tw);
  free(tgo);
  free(out);
  free(gi);
}

static void test_multi_margin_loss(void) {
  for (int d = 0; d < 2; ++d) {
    const int32_t dt = d ? LOOM_FLOAT64 : LOOM_FLOAT32;
    mm_case(dt, 1, 0, 1);
    mm_case(dt, 2, 1, 1);
    mm_case(dt, 1, 1, 0);
    mm_case(dt, 2, 0, 0);
  }
}

static void test_multi_margin_bad_target(void) {
  float x[6] = {0}, out[2];
  int64_t tg[2] = {0, 3};
  const int64_t sx[2] = {2, 3}, sn[1] = {2};
  loom_tensor f[4] = {dense(x, LOOM_FLOAT32, 2, sx), dense(tg, LOOM_INT64, 1, sn), none(),
                      dense(out, LOOM_FLOAT32, 1, sn)};
  loom_scalar fs[2] = {si(1), sf(1.0)};
  CHECK_EQ_INT(run_chunks(loom_multi_margin_loss_forward, f, 4, fs, 2, 2, 2),
               LOOM_ERROR_INDEX_OUT_OF_RANGE);
  tg[1] = -1;
  CHECK_EQ_INT(run_chunks(loom_multi_margin_loss_forward, f, 4, fs, 2, 2, 2),
               LOOM_ERROR_INDEX_OUT_OF_RANGE);
  f[0].dtype = LOOM_INT64;
  CHECK(run_chunks(loom_multi_margin_loss_forward, f, 4, fs, 2, 2, 2) != LOOM_OK);
}

/* ---- multilabel_margin_loss ------------------------------------------------------- */

enum { ML_N = 9, ML_C = 6 };

/* A row's targets are its leading entries >= 0. */
static void ml_reference(const double *x, const int64_t *tg, const double *go, int per_row,
                         double g, double *loss, double *is_target, double *grad) {
  for (int64_t n = 0; n < ML_N; ++n) {
    const double *in = x + n * ML_C;
    const int64_t *t = tg + n * ML_C;
    double *it = is_target + n * ML_C, *gr = grad + n * ML_C;
    for (int64_t d = 0; d < ML_C; ++d) it[d] = gr[d] = 0;
    for (int64_t k = 0; k < ML_C && t[k] >= 0; ++k) it[t[k]] = 1;
    double sum = 0;
    for (int64_t k = 0; k < ML_C && t[k] >= 0; ++k)
      for (int64_t d = 0; d < ML_C; ++d) {
        if (it[d]) continue;
        const double z = 1 - in[t[k]] + in[d];
        if (z > 0) {
          sum += z;
          gr[t[k]] -= g;
          gr[d] += g;
        }
      }
    loss[n] = sum / ML_C;
    for (int64_t d = 0; d < ML_C; ++d) gr[d] *= go[per_row ? n : 0];
  }
}

static void ml_case(int32_t dt, int reduction) {
  const int per_row = reduction == LOOM_REDUCTION_NONE;
  double x[ML_N * ML_C], go[ML_N], loss[ML_N], ist[ML_N * ML_C], grad[ML_N * ML_C];
  int64_t tg[ML_N * ML_C];
  fill(x, ML_N * ML_C);
  fill(go, ML_N);
  round_to(x, ML_N * ML_C, dt);
  round_to(go, ML_N, dt);
  for (int n = 0; n < ML_N; ++n)
    for (int d = 0; d < ML_C; ++d)
      tg[n * ML_C + d] = rand() % 3 == 0 ? -1 : rand() % ML_C;
  for (int d = 0; d < ML_C; ++d) {
    tg[d] = -1;            /* a row without targets */
    tg[ML_C + d] = d;      /* a row where every class is a target */
    tg[2 * ML_C + d] = 2;  /* one target repeated */
  }
  double g = per_row || reduction == LOOM_REDUCTION_SUM ? 1.0 / ML_C : 1.0 / (ML_N * ML_C);
  round_to(&g, 1, dt);
  ml_reference(x, tg, go, per_row, g, loss, ist, grad);
  double want_total = 0;
  for (int n = 0; n < ML_N; ++n) want_total += loss[n];
  if (reduction == LOOM_REDUCTION_MEAN) want_total /= ML_N;

  void *tx = typed(x, ML_N * ML_C, dt), *tgo = typed(go, ML_N, dt);
  void *tist = typed(ist, ML_N * ML_C, dt), *out = typed(loss, ML_N, dt);
  void *gi = typed(grad, ML_N * ML_C, dt);
  const int64_t sx[2] = {ML_N, ML_C}, sn[1] = {ML_N}, s1[1] = {1};
  loom_tensor f[4] = {dense(tx, dt, 2, sx), dense(tg, LOOM_INT64, 2, sx), dense(tist, dt, 2, sx),
                      dense(out, dt, 1, per_row ? sn : s1)};
  loom_scalar fs[2] = {si(per_row), si(reduction)};
  memset(tist, 0x7f, ML_N * ML_C * esize(dt));
  run_every_chunking(loom_multilabel_margin_loss_forward, f, 4, fs, 2, per_row ? ML_N : 1, out,
                     (per_row ? ML_N : 1) * esize(dt), "multilabel_margin_loss.forward");
  if (per_row)
    CHECK_MSG(close_all(out, dt, loss, ML_N, rtol_for(dt), 1e-3), "multilabel forward none");
  else
    CHECK_MSG(close_all(out, dt, &want_total, 1, rtol_for(dt), 1e-3), "multilabel forward %d",
              reduction);
  CHECK_MSG(close_all(tist, dt, ist, ML_N * ML_C, 0, 1), "multilabel is_target");

  loom_tensor b[5] = {dense(tgo, dt, 1, per_row ? sn : s1), f[0], f[1], f[2],
                      dense(gi, dt, 2, sx)};
  loom_scalar bs[2] = {sf(g), si(per_row)};
  run_every_chunking(loom_multilabel_margin_loss_backward, b, 5, bs, 2, ML_N, gi,
                     ML_N * ML_C * esize(dt), "multilabel_margin_loss.backward");
  CHECK_MSG(close_all(gi, dt, grad, ML_N * ML_C, rtol_for(dt), 1e-3),
            "multilabel backward reduction=%d", reduction);
  free(tx);
  free(tgo);
  free(tist);
  free(out);
  free(gi);
}

static void test_multilabel_margin_loss(void) {
  for (int d = 0; d < 2; ++d)
    for (int r = 0; r < 3; ++r) ml_case(d ? LOOM_FLOAT64 : LOOM_FLOAT32, r);
}

static void test_multilabel_bad_target(void) {
  double x[3] = {0}, ist[3], out[1];
  int64_t tg[3] = {0, 5, -1};
  const int64_t sx[2] = {1, 3}, s1[1] = {1};
  loom_tensor f[4] = {dense(x, LOOM_FLOAT64, 2, sx), dense(tg, LOOM_INT64, 2, sx),
                      dense(ist, LOOM_FLOAT64, 2, sx), dense(out, LOOM_FLOAT64, 1, s1)};
  loom_scalar fs[2] = {si(1), si(LOOM_REDUCTION_NONE)};
  CHECK_EQ_INT(run_chunks(loom_multilabel_margin_loss_forward, f, 4, fs, 2, 1, 1),
               LOOM_ERROR_INDEX_OUT_OF_RANGE);
}

/* ---- pairwise distances ----------------------------------------------------------- */

static double ref_dist(const double *a, const double *b, int64_t m, double p) {
  double agg = 0;
  for (int64_t c = 0; c < m; ++c) {
    const double d = fabs(a[c] - b[c]);
    if (p == 0) agg += d != 0;
    else if (isinf(p)) agg = fmax(agg, d);
    else agg += pow(d, p);
  }
  return p == 0 || isinf(p) ? agg : pow(agg, 1.0 / p);
}

/* d dist(a, b) / d a[c], from the definition (0 where it is undefined:
 * zero distance, or a zero difference under p < 1). */
static double ref_ddist(double diff, double dist, double p) {
  const double sg = (diff > 0) - (diff < 0);
  if (p == 0 || dist == 0) return 0;
  if (isinf(p)) return fabs(diff) == dist ? sg : 0;
  if (diff == 0) return 0;
  return sg * pow(fabs(diff) / dist, p - 1);
}

enum { CD_B = 2, CD_R1 = 5, CD_R2 = 4, CD_M = 6, PD_N = 7, PD_M = 3 };

static void cdist_case(int32_t dt, double p) {
  double x1[CD_B * CD_R1 * CD_M], x2[CD_B * CD_R2 * CD_M];
  double dist[CD_B * CD_R1 * CD_R2], gd[CD_B * CD_R1 * CD_R2], g1[CD_B * CD_R1 * CD_M];
  fill(x1, CD_B * CD_R1 * CD_M);
  fill(x2, CD_B * CD_R2 * CD_M);
  fill(gd, CD_B * CD_R1 * CD_R2);
  /* a zero distance and a zero difference in one column */
  memcpy(x2 + CD_M, x1 + 2 * CD_M, CD_M * sizeof(double));
  x2[CD_R2 * CD_M + 2] = x1[CD_R1 * CD_M + 3 * CD_M + 2];
  round_to(x1, CD_B * CD_R1 * CD_M, dt);
  round_to(x2, CD_B * CD_R2 * CD_M, dt);
  round_to(gd, CD_B * CD_R1 * CD_R2, dt);
  for (int64_t b = 0; b < CD_B; ++b)
    for (int64_t i = 0; i < CD_R1; ++i) {
      const double *a = x1 + (b * CD_R1 + i) * CD_M;
      for (int64_t j = 0; j < CD_R2; ++j)
        dist[(b * CD_R1 + i) * CD_R2 + j] = ref_dist(a, x2 + (b * CD_R2 + j) * CD_M, CD_M, p);
      for (int64_t c = 0; c < CD_M; ++c) {
        double s = 0;
        for (int64_t j = 0; j < CD_R2; ++j) {
          const int64_t k = (b * CD_R1 + i) * CD_R2 + j;
          s += gd[k] * ref_ddist(a[c] - x2[(b * CD_R2 + j) * CD_M + c], dist[k], p);
        }
        g1[(b * CD_R1 + i) * CD_M + c] = s;
      }
    }
  void *t1 = typed(x1, CD_B * CD_R1 * CD_M, dt), *t2 = typed(x2, CD_B * CD_R2 * CD_M, dt);
  void *out = typed(dist, CD_B * CD_R1 * CD_R2, dt), *tg = typed(gd, CD_B * CD_R1 * CD_R2, dt);
  void *res = typed(g1, CD_B * CD_R1 * CD_M, dt);
  const int64_t s1[3] = {CD_B, CD_R1, CD_M}, s2[3] = {CD_B, CD_R2, CD_M};
  const int64_t so[3] = {CD_B, CD_R1, CD_R2};
  loom_tensor f[3] = {dense(out, dt, 3, so), dense(t1, dt, 3, s1), dense(t2, dt, 3, s2)};
  loom_scalar fs[2] = {si(LOOM_DIST_CDIST), sf(p)};
  run_every_chunking(loom_distance_pairs, f, 3, fs, 2, CD_B * CD_R1, out,
                     CD_B * CD_R1 * CD_R2 * esize(dt), "distance.pairs cdist");
  CHECK_MSG(close_all(out, dt, dist, CD_B * CD_R1 * CD_R2, 4 * rtol_for(dt), 1e-3),
            "cdist p=%g", p);
  /* the backward takes the kernel's own distances, as the glue passes them */
  loom_tensor b[5] = {dense(res, dt, 3, s1), dense(tg, dt, 3, so), f[1], f[2], f[0]};
  run_every_chunking(loom_distance_backward, b, 5, fs, 2, CD_B * CD_R1, res,
                     CD_B * CD_R1 * CD_M * esize(dt), "distance.backward cdist");
  CHECK_MSG(close_all(res, dt, g1, CD_B * CD_R1 * CD_M, dt == LOOM_FLOAT32 ? 1e-5 : 1e-12, 1e-3),
            "cdist backward p=%g", p);
  free(t1);
  free(t2);
  free(out);
  free(tg);
  free(res);
}

static void pdist_case(int32_t dt, double p) {
  enum { PAIRS = PD_N * (PD_N - 1) / 2 };
  double x[PD_N * PD_M], dist[PAIRS], gd[PAIRS], gx[PD_N * PD_M];
  fill(x, PD_N * PD_M);
  fill(gd, PAIRS);
  memcpy(x + 4 * PD_M, x + PD_M, PD_M * sizeof(double)); /* rows 1 and 4 coincide */
  x[5 * PD_M] = x[6 * PD_M];                             /* a zero difference */
  round_to(x, PD_N * PD_M, dt);
  round_to(gd, PAIRS, dt);
  for (int64_t i = 0; i < PD_N * PD_M; ++i) gx[i] = 0;
  int64_t k = 0;
  for (int64_t i = 0; i < PD_N; ++i)
    for (int64_t j = i + 1; j < PD_N; ++j, ++k) {
      dist[k] = ref_dist(x + i * PD_M, x + j * PD_M, PD_M, p);
      for (int64_t c = 0; c < PD_M; ++c) {
        const double d = gd[k] * ref_ddist(x[i * PD_M + c] - x[j * PD_M + c], dist[k], p);
        gx[i * PD_M + c] += d;
        gx[j * PD_M + c] -= d;
      }
    }
  void *tx = typed(x, PD_N * PD_M, dt), *out = typed(dist, PAIRS, dt), *tg = typed(gd, PAIRS, dt);
  void *res = typed(gx, PD_N * PD_M, dt);
  const int64_t sx[2] = {PD_N, PD_M}, sp[1] = {PAIRS};
  loom_tensor f[2] = {dense(out, dt, 1, sp), dense(tx, dt, 2, sx)};
  loom_scalar fs[2] = {si(LOOM_DIST_PDIST), sf(p)};
  run_every_chunking(loom_distance_pairs, f, 2, fs, 2, PD_N, out, PAIRS * esize(dt),
                     "distance.pairs pdist");
  CHECK_MSG(close_all(out, dt, dist, PAIRS, 4 * rtol_for(dt), 1e-3), "pdist p=%g", p);
  loom_tensor b[4] = {dense(res, dt, 2, sx), dense(tg, dt, 1, sp), f[1], f[0]};
  run_every_chunking(loom_distance_backward, b, 4, fs, 2, PD_M, res, PD_N * PD_M * esize(dt),
                     "distance.backward pdist");
  CHECK_MSG(close_all(res, dt, gx, PD_N * PD_M, dt == LOOM_FLOAT32 ? 1e-5 : 1e-12, 1e-3),
            "pdist backward p=%g", p);
  free(tx);
  free(out);
  free(tg);
  free(res);
}

static void test_distances(void) {
  const double ps[7] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INFINITY};
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < 7; ++i) {
      cdist_case(d ? LOOM_FLOAT64 : LOOM_FLOAT32, ps[i]);
      pdist_case(d ? LOOM_FLOAT64 : LOOM_FLOAT32, ps[i]);
    }
}

/* The gradient of the p = 3 distance against central differences of the
 * reference distance (fp64). */
static void test_distance_gradient_numeric(void) {
  double x[PD_N * PD_M], dist[21], gd[21], gx[PD_N * PD_M];
  fill(x, PD_N * PD_M);
  for (int k = 0; k < 21; ++k) gd[k] = 1.0;
  const int64_t sx[2] = {PD_N, PD_M}, sp[1] = {21};
  loom_tensor f[2] = {dense(dist, LOOM_FLOAT64, 1, sp), dense(x, LOOM_FLOAT64, 2, sx)};
  loom_scalar fs[2] = {si(LOOM_DIST_PDIST), sf(3.0)};
  CHECK_OK(run_chunks(loom_distance_pairs, f, 2, fs, 2, PD_N, PD_N));
  loom_tensor b[4] = {dense(gx, LOOM_FLOAT64, 2, sx), dense(gd, LOOM_FLOAT64, 1, sp), f[1], f[0]};
  CHECK_OK(run_chunks(loom_distance_backward, b, 4, fs, 2, PD_M, 1));
  const double h = 1e-6;
  for (int64_t e = 0; e < PD_N * PD_M; ++e) {
    double tot[2];
    const double keep = x[e];
    for (int s = 0; s < 2; ++s) {
      x[e] = keep + (s ? -h : h);
      tot[s] = 0;
      for (int64_t i = 0; i < PD_N; ++i)
        for (int64_t j = i + 1; j < PD_N; ++j) tot[s] += ref_dist(x + i * PD_M, x + j * PD_M, PD_M, 3.0);
    }
    x[e] = keep;
    CHECK_NEAR(gx[e], (tot[0] - tot[1]) / (2 * h), 1e-6);
  }
}

static void test_distance_bad_arguments(void) {
  double x[6] = {0}, out[3];
  const int64_t sx[2] = {3, 2}, sp[1] = {3};
  loom_tensor f[2] = {dense(out, LOOM_FLOAT64, 1, sp), dense(x, LOOM_FLOAT64, 2, sx)};
  loom_scalar fs[2] = {si(LOOM_DIST_PDIST), sf(-1.0)};
  CHECK_EQ_INT(run_chunks(loom_distance_pairs, f, 2, fs, 2, 3, 3), LOOM_ERROR_INVALID_ARGUMENT);
  fs[1] = sf(2.0);
  f[0].dtype = LOOM_FLOAT32;
  CHECK_EQ_INT(run_chunks(loom_distance_pairs, f, 2, fs, 2, 3, 3), LOOM_ERROR_INVALID_ARGUMENT);
}

/* ---- embedding's row renorm ------------------------------------------------------- */

enum { RN_W = 10, RN_D = 7 };

static void renorm_case(int32_t dt, double p) {
  /* the weight is a column slice (every other column) of a wider buffer */
  double w[RN_W * 2 * RN_D], want[RN_W * 2 * RN_D];
  fill(w, RN_W * 2 * RN_D);
  for (int i = 0; i < RN_W * 2 * RN_D; ++i) w[i] *= 3;
  for (int j = 0; j < RN_D; ++j) w[4 * 2 * RN_D + 2 * j] = 0.01; /* a named row within max_norm */
  w[9 * 2 * RN_D + 2] = 0;                                       /* a zero for p = 0 */
  round_to(w, RN_W * 2 * RN_D, dt);
  const int64_t idx[6] = {1, 4, 1, 9, 0, 1};
  const double max_norm = 1.5;
  memcpy(want, w, sizeof w);
  int named[RN_W] = {0};
  for (int i = 0; i < 6; ++i) named[idx[i]] = 1;
  for (int r = 0; r < RN_W; ++r) {
    if (!named[r]) continue;
    double acc = 0;
    for (int j = 0; j < RN_D; ++j) {
      const double a = fabs(w[r * 2 * RN_D + 2 * j]);
      acc = isinf(p) ? fmax(acc, a) : p == 0 ? acc + (a != 0) : acc + pow(a, p);
    }
    const double norm = isinf(p) || p == 0 ? acc : pow(acc, 1.0 / p);
    if (norm > max_norm)
      for (int j = 0; j < RN_D; ++j) want[r * 2 * RN_D + 2 * j] *= max_norm / (norm + 1e-7);
  }
  int64_t offsets[RN_W + 1], order[6];
  const int64_t si6[1] = {6}, so[1] = {RN_W + 1};
  loom_tensor bk[3] = {dense((void *)idx, LOOM_INT64, 1, si6), dense(offsets, LOOM_INT64, 1, so),
                       dense(order, LOOM_INT64, 1, si6)};
  loom_scalar bs[1] = {si(RN_W)};
  CHECK_OK(run_chunks(loom_embedding_backward_bucket, bk, 3, bs, 1, 1, 1));
  void *tw = typed(w, RN_W * 2 * RN_D, dt);
  void *first = typed(w, RN_W * 2 * RN_D, dt);
  const size_t bytes = RN_W * 2 * RN_D * esize(dt);
  const int64_t sw[2] = {RN_W, RN_D}, stw[2] = {2 * RN_D, 2};
  const int64_t grains[3] = {RN_W, 1, 3};
  for (int g = 0; g < 3; ++g) {
    void *run = typed(w, RN_W * 2 * RN_D, dt);
    loom_tensor t[2] = {bk[1], tensor(run, dt, 2, sw, stw)};
    loom_scalar s[2] = {sf(max_norm), sf(p)};
    CHECK_OK(run_chunks(loom_embedding_renorm_rows, t, 2, s, 2, RN_W, grains[g]));
    if (g == 0) memcpy(first, run, bytes);
    else CHECK_MSG(memcmp(first, run, bytes) == 0, "renorm p=%g: grain changed bits", p);
    free(run);
  }
  CHECK_MSG(close_all(first, dt, want, RN_W * 2 * RN_D, dt == LOOM_FLOAT32 ? 2e-6 : 1e-14, 1e-3),
            "renorm p=%g", p);
  /* rows no index names and the columns between the slice's stay as they were */
  for (int i = 0; i < RN_W * 2 * RN_D; ++i)
    if (!named[i / (2 * RN_D)] || i % 2) CHECK(at(first, dt, i) == at(tw, dt, i));
  free(tw);
  free(first);
}

static void test_embedding_renorm_rows(void) {
  const double ps[5] = {2.0, 1.0, 3.5, INFINITY, 0.0};
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < 5; ++i) renorm_case(d ? LOOM_FLOAT64 : LOOM_FLOAT32, ps[i]);
}

/* ---- logcumsumexp ----------------------------------------------------------------- */

enum { LS_A = 5, LS_K = 33, LS_B = 4 };

/* log(sum_{k' <= k} exp(x[k'])) over each row of dim 1 of [A, K, B], with the
 * running maximum taken out; -inf while every element so far is -inf, NaN
 * from a NaN on, +inf from a +inf on. */
static void lcse_reference(const double *x, double *y) {
  for (int64_t a = 0; a < LS_A; ++a)
    for (int64_t b = 0; b < LS_B; ++b)
      for (int64_t k = 0; k < LS_K; ++k) {
        double m = -INFINITY;
        int nan = 0;
        for (int64_t j = 0; j <= k; ++j) {
          const double v = x[(a * LS_K + j) * LS_B + b];
          nan |= isnan(v);
          m = fmax(m, v);
        }
        double r;
        if (nan) r = NAN;
        else if (isinf(m)) r = m;
        else {
          double s = 0;
          for (int64_t j = 0; j <= k; ++j) s += exp(x[(a * LS_K + j) * LS_B + b] - m);
          r = m + log(s);
        }
        y[(a * LS_K + k) * LS_B + b] = r;
      }
}

static void lcse_case(int32_t dt) {
  enum { N = LS_A * LS_K * LS_B };
  double x[N], y[N];
  fill(x, N);
  for (int i = 0; i < N; ++i) x[i] *= 20;
  /* edge rows: leading -inf, an +inf, a NaN, huge magnitudes */
  const double e0[6] = {-INFINITY, -INFINITY, 0.0, 1.0, INFINITY, 2.0};
  const double e1[6] = {1e30, -1e30, 3.0, NAN, 2.0, -INFINITY};
  for (int k = 0; k < 6; ++k) {
    x[(0 * LS_K + k) * LS_B + 0] = e0[k];
    x[(1 * LS_K + k) * LS_B + 3] = e1[k];
  }
  round_to(x, N, dt);
  lcse_reference(x, y);
  void *tx = typed(x, N, dt), *out = typed(y, N, dt);
  const int64_t s[3] = {LS_A, LS_K, LS_B};
  loom_tensor t[3] = {dense(out, dt, 3, s), dense(tx, dt, 3, s), none()};
  loom_scalar sc[2] = {si(LOOM_SCAN_LOGCUMSUMEXP), si(1)};
  run_every_chunking(loom_kernel_scan, t, 3, sc, 2, LS_A * LS_B, out, N * esize(dt),
                     "scan.rows logcumsumexp");
  /* relative per element: the results span many magnitudes */
  int ok = 1;
  for (int64_t i = 0; i < N && ok; ++i) {
    const double g = at(out, dt, i);
    if (isnan(y[i]) || isinf(y[i])) ok = isnan(y[i]) ? isnan(g) : g == y[i];
    else ok = fabs(g - y[i]) <= (dt == LOOM_FLOAT32 ? 2e-7 : 1e-14) * fmax(1.0, fabs(y[i]));
    if (!ok) fprintf(stderr, "  element %lld: got %.17g, want %.17g\n", (long long)i, g, y[i]);
  }
  CHECK_MSG(ok, "logcumsumexp dtype %d", dt);
  /* an integral input is refused */
  int64_t ix[3] = {1, 2, 3}, iy[3];
  const int64_t s3[1] = {3};
  loom_tensor ti[3] = {dense(iy, LOOM_INT64, 1, s3), dense(ix, LOOM_INT64, 1, s3), none()};
  loom_scalar si0[2] = {si(LOOM_SCAN_LOGCUMSUMEXP), si(0)};
  CHECK_EQ_INT(run_chunks(loom_kernel_scan, ti, 3, si0, 2, 1, 1), LOOM_ERROR_INVALID_ARGUMENT);
  free(tx);
  free(out);
}

static void test_logcumsumexp(void) {
  lcse_case(LOOM_FLOAT32);
  lcse_case(LOOM_FLOAT64);
}

int main(void) {
  srand(36);
  RUN_TEST(test_multi_margin_loss);
  RUN_TEST(test_multi_margin_bad_target);
  RUN_TEST(test_multilabel_margin_loss);
  RUN_TEST(test_multilabel_bad_target);
  RUN_TEST(test_distances);
  RUN_TEST(test_distance_gradient_numeric);
  RUN_TEST(test_distance_bad_arguments);
  RUN_TEST(test_embedding_renorm_rows);
  RUN_TEST(test_logcumsumexp);
  TEST_MAIN_END();
}
