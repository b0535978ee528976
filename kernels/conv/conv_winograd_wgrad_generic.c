/* kernels/conv/conv_winograd_wgrad_generic.c — the Winograd weight gradient of
 * conv_winograd_avx512.c in plain C: per element e, dU[e] sums (A dY
 * A^T)[e] (B^T d B)[e] over the tiles, a block of 32 at a time, as GEMMs
 * whose k runs over tiles. The transforms are written straight into the
 * micro-kernel's panels (dy's as A, [tile][12 output channels], x's as B,
 * [tile][32 input channels]); the AVX-512 variant gets the same panels
 * through in-register transposes. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/conv/conv_winograd_internal.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* B^T d B of one channel's 32 tiles (d[r][s] at src + off[r][s] + j for
 * tile j) into lane `lane` of panels [tile][32]: panel e at bp[e]. */
static void wg_input_lane(float *const bp[WG_E], int lane, const float *src,
                          const int64_t off[4][4]) {
  for (int j = 0; j < WG_T; ++j) {
    float d[4][4], t[4][4];
    for (int r = 0; r < 4; ++r)
      for (int s = 0; s < 4; ++s) d[r][s] = src[off[r][s] + j];
    for (int s = 0; s < 4; ++s) {
      t[0][s] = d[0][s] - d[2][s];
      t[1][s] = d[1][s] + d[2][s];
      t[2][s] = d[2][s] - d[1][s];
      t[3][s] = d[1][s] - d[3][s];
    }
    for (int r = 0; r < 4; ++r) {
      bp[4 * r][j * 32 + lane] = t[r][0] - t[r][2];
      bp[4 * r + 1][j * 32 + lane] = t[r][1] + t[r][2];
      bp[4 * r + 2][j * 32 + lane] = t[r][2] - t[r][1];
      bp[4 * r + 3][j * 32 + lane] = t[r][1] - t[r][3];
    }
  }
}

/* A dY A^T of one output channel's 32 tiles (dY[i][j] at src + off[i][j]
 * + tile) into lane `lane` of panels [tile][12]: panel e at ap[e]. A's
 * rows take dY[0], dY[0] + dY[1], dY[0] - dY[1] and -dY[1], the last as
 * 0 - dY[1], whose zeros are +0 as the vector code's are. */
static void wg_grad_lane(float *const ap[WG_E], int lane, const float *src,
                         const int64_t off[2][2]) {
  for (int j = 0; j < WG_T; ++j) {
    float y[2][2], r[4][2];
    for (int i = 0; i < 2; ++i)
      for (int c = 0; c < 2; ++c) y[i][c] = src[off[i][c] + j];
    for (int c = 0; c < 2; ++c) {
      r[0][c] = y[0][c];
      r[1][c] = y[0][c] + y[1][c];
      r[2][c] = y[0][c] - y[1][c];
      r[3][c] = 0.0f - y[1][c];
    }
    for (int i = 0; i < 4; ++i) {
      ap[4 * i][j * WG_MR + lane] = r[i][0];
      ap[4 * i + 1][j * WG_MR + lane] = r[i][0] + r[i][1];
      ap[4 * i + 2][j * WG_MR + lane] = r[i][0] - r[i][1];
      ap[4 * i + 3][j * WG_MR + lane] = 0.0f - r[i][1];
    }
  }
}

int loom_conv_winograd_wgrad_with(const loom_kernel_args *args, int64_t begin, int64_t end,
                                  loom_gemm_ukr_fn ukr) {
  if (!wg_wgrad_fits(args)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *part = &args->tensors[0], *xp = &args->tensors[1], *dyp = &args->tensors[2];
  const int64_t wq = args->scalars[0].i, gpos = args->scalars[1].i, tchunk = args->scalars[2].i;
  const int64_t m_n = part->sizes[2], k_n = part->sizes[3], n_img = xp->sizes[0];
  const int64_t ogs = (m_n + WG_OG - 1) / WG_OG, cgs = (k_n + WG_CG - 1) / WG_CG;
  if (begin < 0 || end > part->sizes[0] * ogs * cgs) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t xs = xp->strides[1], ds = dyp->strides[1];
  int64_t xoff[4][4], doff[2][2];
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 4; ++s) xoff[r][s] = ((r & 1) * 2 + (s & 1)) * xs + (r >> 1) * wq + (s >> 1);
  wg_dy_offsets(args, ds, doff);
  /* x and dy read in place: each channel's tiles gathered as the planes
   * would hold them, then the same transforms */
  const int images = wg_wgrad_images(args);
  const int64_t top = images ? args->scalars[4].i : 0, left = images ? args->scalars[5].i : 0;
  const wg_grid grid = {wq, gpos, n_img, (dyp->sizes[2] + 1) / 2, (dyp->sizes[3] + 1) / 2};
  int64_t goff[4][4], gdoff[2][2];
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 4; ++s) goff[r][s] = (4 * r + s) * WG_T;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) gdoff[i][j] = (2 * i + j) * WG_T;
  float patch[WG_E * WG_T];
  /* per element: dy's as A panels [8][32 tiles][12], x's as B panels
   * [2][32 tiles][32] */
  float abuf[WG_E][WG_OG * WG_T], bbuf[WG_E][WG_CG * WG_T];
  /* Lanes past the last channel are computed by the micro-kernel and
   * stored nowhere; zeros keep them finite. */
  memset(abuf, 0, sizeof abuf);
  memset(bbuf, 0, sizeof bbuf);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t cgi = item % cgs, ogi = item / cgs % ogs, chunk = item / cgs / ogs;
    const int64_t o_lo = ogi * WG_OG, o_n = m_n - o_lo < WG_OG ? m_n - o_lo : WG_OG;
    const int64_t c_lo = cgi * WG_CG, c_n = k_n - c_lo < WG_CG ? k_n - c_lo : WG_CG;
    const int64_t t_lo = chunk * tchunk;
    const int64_t t_hi = n_img * gpos < t_lo + tchunk ? n_img * gpos : t_lo + tchunk;
    for (int64_t t0 = t_lo; t0 < t_hi; t0 += WG_T) {
      /* planes: the block lies in one image's; images: the grid's tiles
       * from t0, each in its image */
      const int64_t n = t0 / gpos, q = t0 % gpos;
      const float *xsrc = (const float *)xp->data + n * xp->strides[0] + q;
      const float *dsrc = (const float *)dyp->data + n * dyp->strides[0] + q;
      for (int64_t c = 0; c < c_n; ++c) {
        float *bp[WG_E];
        for (int e = 0; e < WG_E; ++e) bp[e] = bbuf[e] + c / 32 * WG_T * 32;
        if (images) {
          wg_gather32(patch, xp, &grid, c_lo + c, t0, top, left);
          wg_input_lane(bp, (int)(c % 32), patch, goff);
        } else {
          wg_input_lane(bp, (int)(c % 32), xsrc + (c_lo + c) * 4 * xs, xoff);
        }
      }
      for (int64_t o = 0; o < o_n; ++o) {
        float *ap[WG_E];
        for (int e = 0; e < WG_E; ++e) ap[e] = abuf[e] + o / WG_MR * WG_T * WG_MR;
        if (images) {
          wg_gather_dy32(patch, dyp, &grid, o_lo + o, t0);
          wg_grad_lane(ap, (int)(o % WG_MR), patch, gdoff);
        } else {
          wg_grad_lane(ap, (int)(o % WG_MR), dsrc + (o_lo + o) * 4 * ds, doff);
        }
      }
      /* this block's 32 tiles added to the chunk's sums */
      for (int e = 0; e < WG_E; ++e) {
        float *pe = (float *)part->data + (chunk * WG_E + e) * m_n * k_n;
        for (int64_t cp = 0; cp * 32 < c_n; ++cp)
          for (int64_t op = 0; op * WG_MR < o_n; ++op) {
            const int64_t rows = o_n - op * WG_MR, cols = c_n - cp * 32;
            ukr(WG_T, abuf[e] + op * WG_T * WG_MR, bbuf[e] + cp * WG_T * 32,
                pe + (o_lo + op * WG_MR) * k_n + c_lo + cp * 32, k_n, 1.0f,
                (int)(rows < WG_MR ? rows : WG_MR), (int)(cols < 32 ? cols : 32), t0 > t_lo);
          }
      }
    }
  }
  return 0;
}

int loom_conv_winograd_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return loom_conv_winograd_wgrad_with(args, begin, end, loom_conv_ukr12x32_generic);
}
