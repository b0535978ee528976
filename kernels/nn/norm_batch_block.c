/* Batch norm's backward over a block of channels of [N, C, S] float32 rows
 * (norm_batch_rows.h): the gradient sums and the input gradient, walked
 * sample by sample across the block's channels. A channel's plane is N rows
 * one channel stride apart; walking it alone reads short runs far apart
 * (a 32x32 plane of 32 channels: 4 KiB rows 128 KiB apart, all on the same
 * cache sets), while the block reads its rows of a sample as one run. Each
 * channel's 32 lanes still take its rows in row order, so its sums are the
 * plane loop's bits. The sums are the backward's first read of g, y and x
 * (and first write of the masked gradient): where they come from memory the
 * sums run at the memory's speed, the same as a bare read of those rows, and
 * the input gradient then reads what they left in cache; a block of fewer
 * channels (a smaller cache footprint between the two) was slower. */
#include <string.h>

#include "base/cpu.h"
#include "kernels/nn/norm_batch_rows.h"

/* Rows up to this long take the statistics' plane loop. */
#define LOOM_BN_SHORT_ROW 64

/* Row (n, c) of t; NULL where t is absent. */
static inline float *bnb_row(const loom_tensor *t, int64_t n, int64_t c) {
  return t && t->data ? (float *)t->data + n * t->strides[0] + c * t->strides[1] : NULL;
}

void loom_bn_block_grad_sums(const loom_tensor *g, const loom_tensor *x, const loom_tensor *y,
                             const loom_tensor *gm, int64_t c0, int64_t c1, const double *mu,
                             double *sum_g, double *sum_gx) {
  const int vec = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const int64_t nb = x->sizes[0], ns = x->sizes[2];
  double acc[LOOM_BN_CBLOCK][32];
  memset(acc, 0, sizeof acc);
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const float *gr = bnb_row(g, n, c), *xr = bnb_row(x, n, c), *yr = bnb_row(y, n, c);
      float *mr = yr ? bnb_row(gm, n, c) : NULL;
      if (vec) loom_bn_row_grad_sums_avx512(gr, xr, yr, mr, ns, mu[c - c0], acc[c - c0]);
      else loom_bn_row_grad_sums(gr, xr, yr, mr, ns, mu[c - c0], acc[c - c0]);
    }
  for (int64_t c = c0; c < c1; ++c)
    loom_bn_grad_fold(acc[c - c0], &sum_g[c - c0], &sum_gx[c - c0]);
}

void loom_bn_block_dx(const loom_tensor *dx, const loom_tensor *g, const loom_tensor *x,
                      int64_t c0, int64_t c1, const float *m, const float *k1, const float *k2,
                      const float *k3) {
  const int vec = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const int64_t nb = x->sizes[0], ns = x->sizes[2];
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      float *dr = bnb_row(dx, n, c);
      const float *gr = bnb_row(g, n, c), *xr = bnb_row(x, n, c);
      if (gr == dr) {
        if (vec) loom_bn_row_dx_inplace_avx512(dr, xr, ns, m[j], k1[j], k2[j], k3[j]);
        else loom_bn_row_dx_inplace(dr, xr, ns, m[j], k1[j], k2[j], k3[j]);
      } else if (vec) {
        loom_bn_row_dx_avx512(dr, gr, xr, ns, m[j], k1[j], k2[j], k3[j]);
      } else {
        loom_bn_row_dx(dr, gr, xr, ns, m[j], k1[j], k2[j], k3[j]);
      }
    }
}

void loom_bn_block_stats(const loom_tensor *x, int64_t c0, int64_t c1, double *mean,
                         double *m2) {
  const int vec = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const int64_t nb = x->sizes[0], ns = x->sizes[2];
  if (nb == 0 || ns == 0) {
    for (int64_t c = c0; c < c1; ++c) mean[c - c0] = 0.0, m2[c - c0] = 0.0;
    return;
  }
  /* short rows (the plane loop keeps its sums in registers across them, where a
   * walk across channels reloads them every row) and blocks that are pieces
   * of a row: the plane loop */
  if (ns <= LOOM_BN_SHORT_ROW || ns >= LOOM_BN_STATS_BLOCK) {
    for (int64_t c = c0; c < c1; ++c) {
      const float *xc = bnb_row(x, 0, c);
      if (vec) loom_bn_plane_stats_avx512(xc, x->strides[0], nb, ns, &mean[c - c0], &m2[c - c0]);
      else loom_bn_plane_stats(xc, x->strides[0], nb, ns, &mean[c - c0], &m2[c - c0]);
    }
    return;
  }
  loom_bn_merge st[LOOM_BN_CBLOCK];
  double acc[LOOM_BN_CBLOCK][32], k[LOOM_BN_CBLOCK];
  const int64_t rows = loom_bn_stats_rows(ns);
  for (int64_t c = c0; c < c1; ++c) st[c - c0] = (loom_bn_merge){0.0, 0.0, 0};
  for (int64_t r0 = 0; r0 < nb; r0 += rows) {
    const int64_t r1 = nb - r0 < rows ? nb : r0 + rows;
    for (int64_t c = c0; c < c1; ++c) k[c - c0] = loom_bn_block_shift(&st[c - c0], *bnb_row(x, r0, c));
    memset(acc, 0, sizeof acc);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        if (vec) loom_bn_row_shift_sums_avx512(bnb_row(x, r, c), ns, k[c - c0], acc[c - c0]);
        else loom_bn_row_shift_sums(bnb_row(x, r, c), ns, k[c - c0], acc[c - c0]);
      }
    for (int64_t c = c0; c < c1; ++c)
      loom_bn_merge_block(&st[c - c0], k[c - c0], acc[c - c0], (r1 - r0) * ns);
  }
  for (int64_t c = c0; c < c1; ++c) loom_bn_merge_result(&st[c - c0], &mean[c - c0], &m2[c - c0]);
}
