/* kernels/nn/norm_batch_rows.h — batch norm's fp32 loops over a channel's
 * plane and rows (norm_batch_rows.inc, built generic and for AVX-512), used
 * by norm_batch.c and the fused norm_batch_act.c, and the float
 * coefficients the row loops apply, formed here for both so that the two
 * give the same bits. The row loops work about m, the mean rounded to float:
 * x - m is exact for x near the mean, where x * a + c would cancel away the
 * digits that x's offset from zero takes. */
#ifndef LOOM_KERNELS_NN_NORM_BATCH_ROWS_H
#define LOOM_KERNELS_NN_NORM_BATCH_ROWS_H

#include <math.h>
#include <stdint.h>

#define LOOM_BN_LOOPS(sfx)                                                                      \
  void loom_bn_plane_stats##sfx(const float *x, int64_t ld, int64_t nb, int64_t ns,            \
                                double *mean, double *m2);                                      \
  void loom_bn_plane_grad_sums##sfx(const float *g, int64_t ldg, const float *x, int64_t ldx,  \
                                    const float *y, int64_t ldy, float *gm, int64_t ldm,       \
                                    int64_t nb, int64_t ns, double mu, double *sum_g,          \
                                    double *sum_gx);                                           \
  void loom_bn_row_affine##sfx(float *y, const float *x, int64_t n, float m, float a, float b); \
  void loom_bn_row_dx##sfx(float *dx, const float *g, const float *x, int64_t n, float m,      \
                           float k1, float k2, float k3);
LOOM_BN_LOOPS()
LOOM_BN_LOOPS(_avx512)
#undef LOOM_BN_LOOPS

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
