/* kernels/nn/norm_batch_rows.h — batch norm's fp32 loops over a channel's
 * plane and rows (norm_batch_rows.inc, built generic and for AVX-512), used
 * by norm_batch.c and the fused norm_batch_act.c; the backward's walk over
 * a block of channels (norm_batch_block.c); and the float coefficients the
 * row loops apply, formed here for both so that the two give the same
 * bits. The row loops work about m, the mean rounded to float:
 * x - m is exact for x near the mean, where x * a + c would cancel away the
 * digits that x's offset from zero takes. */
#ifndef LOOM_KERNELS_NN_NORM_BATCH_ROWS_H
#define LOOM_KERNELS_NN_NORM_BATCH_ROWS_H

#include <math.h>
#include <stdint.h>

#include "kernels/base/lanes.h"
#include "loom/kernel_abi.h"

#define LOOM_BN_LOOPS(sfx)                                                                      \
  void loom_bn_plane_stats##sfx(const float *x, int64_t ld, int64_t nb, int64_t ns,            \
                                double *mean, double *m2);                                      \
  void loom_bn_plane_grad_sums##sfx(const float *g, int64_t ldg, const float *x, int64_t ldx,  \
                                    const float *y, int64_t ldy, float *gm, int64_t ldm,       \
                                    int64_t nb, int64_t ns, double mu, double *sum_g,          \
                                    double *sum_gx);                                           \
  void loom_bn_row_shift_sums##sfx(const float *x, int64_t n, double k, double *acc);          \
  void loom_bn_row_grad_sums##sfx(const float *g, const float *x, const float *y, float *gm,   \
                                  int64_t ns, double mu, double *acc);                          \
  void loom_bn_row_affine##sfx(float *y, const float *x, int64_t n, float m, float a, float b); \
  void loom_bn_row_dx##sfx(float *dx, const float *g, const float *x, int64_t n, float m,      \
                           float k1, float k2, float k3);                                      \
  void loom_bn_row_dx_inplace##sfx(float *d, const float *x, int64_t n, float m, float k1,     \
                                   float k2, float k3);
LOOM_BN_LOOPS()
LOOM_BN_LOOPS(_avx512)
#undef LOOM_BN_LOOPS

/* A plane's statistics in blocks: LOOM_BN_STATS_BLOCK values, a run of
 * whole rows (loom_bn_stats_rows of them) or a piece of one long row. Each
 * block sums its values' deviations and squared deviations about a shift k:
 * the mean of the blocks before it (the first block: its first value; 0
 * where that is not finite). Its own squared deviations are then
 * sum (x - k)^2 - (sum (x - k))^2 / count, and the blocks merge in order by
 * the pairwise update (Chan et al.). The cancellation in a block costs at
 * most about its count times double's rounding of the plane's squared
 * deviations (a block's offset from the mean before it is part of the
 * merged sum; a first value's squared deviation is part of its block's), far
 * below float's rounding. The blocks follow from the shape alone. */
#define LOOM_BN_STATS_BLOCK 4096

static inline int64_t loom_bn_stats_rows(int64_t ns) {
  return ns < LOOM_BN_STATS_BLOCK ? LOOM_BN_STATS_BLOCK / ns : 1;
}

/* The blocks merged so far: the sum of their values, their squared
 * deviations about their mean, their count. */
typedef struct loom_bn_merge {
  double sum, q;
  int64_t n;
} loom_bn_merge;

/* The next block's shift, given its first value. */
static inline double loom_bn_block_shift(const loom_bn_merge *st, float first) {
  const double mean_a = st->n ? st->sum / (double)st->n : (double)first;
  return isfinite(mean_a) ? mean_a : 0.0;
}

/* Merges a block of nbk values whose 32 lanes (loom_bn_row_shift_sums about
 * k) are acc. */
static inline void loom_bn_merge_block(loom_bn_merge *st, double k, double *acc, int64_t nbk) {
  const double s = loom_lanes16_fold_f64(acc), qk = loom_lanes16_fold_f64(acc + 16);
  const double dm = s / (double)nbk; /* the block's mean less k */
  double qb = qk - s * dm;
  if (qb < 0.0) qb = 0.0; /* rounding only; NaN stays NaN */
  if (st->n) {
    const double mean_a = st->sum / (double)st->n;
    const double d = k + dm - mean_a;
    st->q += qb + d * d * ((double)st->n * (double)nbk / (double)(st->n + nbk));
  } else {
    st->q = qb;
  }
  st->sum += (double)nbk * k + s, st->n += nbk;
}

static inline void loom_bn_merge_result(const loom_bn_merge *st, double *mean, double *m2) {
  *mean = st->n ? st->sum / (double)st->n : 0.0;
  *m2 = st->q;
}

/* A plane's gradient sums from the 32 lanes its rows were summed into. */
static inline void loom_bn_grad_fold(double *acc, double *sum_g, double *sum_gx) {
  *sum_g = loom_lanes16_fold_f64(acc);
  *sum_gx = loom_lanes16_fold_f64(acc + 16);
}

/* The channels one block walk covers (norm_batch_block.c). */
#define LOOM_BN_CBLOCK 32

/* [N, C, S] float32 tensors whose rows (n, c, :) are contiguous (y and gm
 * may be NULL or hold NULL data: absent). Channels [c0, c1), c1 - c0 <= LOOM_BN_CBLOCK, walked sample by
 * sample, each sample's rows of the block in turn, so memory is read in
 * runs of (c1 - c0) rows rather than one row per channel plane stride.
 * loom_bn_block_grad_sums: per channel j, sum_g[j] and sum_gx[j] about
 * mu[j] (g masked by y, written to gm, as loom_bn_row_grad_sums does), the
 * same bits as the channel's plane loop. loom_bn_block_dx: dx = g * k1 +
 * (x - m) * k2 + k3 with channel j's coefficients (g may be dx: in place). */
void loom_bn_block_grad_sums(const loom_tensor *g, const loom_tensor *x, const loom_tensor *y,
                             const loom_tensor *gm, int64_t c0, int64_t c1, const double *mu,
                             double *sum_g, double *sum_gx);
/* The statistics of channels [c0, c1) (mean and squared deviations), the
 * same bits as each channel's loom_bn_plane_stats, walked as above. */
void loom_bn_block_stats(const loom_tensor *x, int64_t c0, int64_t c1, double *mean,
                         double *m2);
void loom_bn_block_dx(const loom_tensor *dx, const loom_tensor *g, const loom_tensor *x,
                      int64_t c0, int64_t c1, const float *m, const float *k1, const float *k2,
                      const float *k3);

/* y = (x - m) * a + b for (x - mu) * scale + shift; the part of mu that
 * rounding to m left out moves into b (none where mu is not finite). */
static inline void loom_bn_affine_coef(double mu, double scale, double shift, float *m, float *a,
                                       float *b) {
  *m = (float)mu;
  const double lo = isfinite(*m) ? mu - (double)*m : 0.0;
  *a = (float)scale;
  *b = (float)(shift - lo * scale);
}

/* dx = g * k1 + (x - m) * k2 + k3 for (g - g_mean - (x - mu) * proj) * f. */
static inline void loom_bn_dx_coef(double mu, double f, double proj, double g_mean, float *m,
                                   float *k1, float *k2, float *k3) {
  *m = (float)mu;
  const double lo = isfinite(*m) ? mu - (double)*m : 0.0;
  *k1 = (float)f;
  *k2 = (float)(-proj * f);
  *k3 = (float)((lo * proj - g_mean) * f);
}

#endif /* LOOM_KERNELS_NN_NORM_BATCH_ROWS_H */
