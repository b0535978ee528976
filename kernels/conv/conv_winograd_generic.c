/* kernels/conv/conv_winograd_generic.c — Winograd's F(2x2, 3x3) forward of
 * conv_winograd_avx512.c in plain C (its algorithm is described there):
 * the same weight transform, phase-plane blocks of 32 tiles, channel
 * passes and GEMMs per element, with every transform's adds in the same
 * order, so only the micro-kernel can tell the two apart. Also the weight
 * gradient's last step, which both variants share. */
#include <stdint.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/conv/conv_winograd_internal.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

void loom_conv_ukr12x32_generic(int64_t kc, const void *ap, const void *bp, float *t,
                                int64_t ldt, float alpha, int mr, int nr, int accumulate) {
  enum { MR = WG_MR, NR = WG_T };
  const float *a = (const float *)ap, *b = (const float *)bp;
  float acc[MR][NR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[k * MR + i] * b[k * NR + j];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j)
      t[i * ldt + j] = (accumulate ? t[i * ldt + j] : 0.0f) + alpha * acc[i][j];
}

int loom_conv_winograd_weight_generic(const loom_kernel_args *args, int64_t begin,
                                      int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *u = &args->tensors[0], *w = &args->tensors[1];
  const int flipped = args->scalars[0].i != 0;
  if (u->rank != 4 || w->rank != 4 || u->dtype != LOOM_FLOAT32 || w->dtype != LOOM_FLOAT32 ||
      !wg_dense(u) || !wg_strided(w) || w->sizes[2] != 3 || w->sizes[3] != 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t m_n = flipped ? w->sizes[1] : w->sizes[0], k_n = flipped ? w->sizes[0] : w->sizes[1];
  const int64_t panels = (m_n + WG_MR - 1) / WG_MR;
  if (u->sizes[0] != WG_E || u->sizes[1] != panels || u->sizes[2] != k_n || u->sizes[3] != WG_MR)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const float *wd = (const float *)w->data;
  float *ud = (float *)u->data;
  for (int64_t p = begin; p < end; ++p)
    for (int64_t k = 0; k < k_n; ++k)
      for (int64_t i = 0; i < WG_MR; ++i) {
        const int64_t m = p * WG_MR + i;
        float g[3][3] = {{0}}, t[4][3];
        /* tap (r, s): w[m][k][r][s], or w[k][m][2 - r][2 - s]; rows past
         * the last output channel transform zeros */
        const int64_t *st = w->strides;
        for (int r = 0; r < 3 && m < m_n; ++r)
          for (int s = 0; s < 3; ++s)
            g[r][s] = flipped ? wd[k * st[0] + m * st[1] + (2 - r) * st[2] + (2 - s) * st[3]]
                              : wd[m * st[0] + k * st[1] + r * st[2] + s * st[3]];
        for (int s = 0; s < 3; ++s) { /* G g */
          t[0][s] = g[0][s];
          t[1][s] = 0.5f * ((g[0][s] + g[1][s]) + g[2][s]);
          t[2][s] = 0.5f * ((g[0][s] - g[1][s]) + g[2][s]);
          t[3][s] = g[2][s];
        }
        for (int r = 0; r < 4; ++r) { /* (G g) G^T */
          float *row = ud + ((4 * r * panels + p) * k_n + k) * WG_MR + i;
          const int64_t e1 = panels * k_n * WG_MR; /* from element e to e + 1 */
          row[0] = t[r][0];
          row[e1] = 0.5f * ((t[r][0] + t[r][1]) + t[r][2]);
          row[2 * e1] = 0.5f * ((t[r][0] - t[r][1]) + t[r][2]);
          row[3 * e1] = t[r][2];
        }
      }
  return 0;
}

/* B^T d B of the block's 32 tiles: d[r][s] at src + off[r][s] + j for tile
 * j; into v[e * stride + j]. */
static void wg_input32(float *v, int64_t stride, const float *src, const int64_t off[4][4]) {
  float t[4][4][WG_T];
  for (int s = 0; s < 4; ++s) {
    const float *d0 = src + off[0][s], *d1 = src + off[1][s], *d2 = src + off[2][s],
                *d3 = src + off[3][s];
    for (int j = 0; j < WG_T; ++j) {
      t[0][s][j] = d0[j] - d2[j];
      t[1][s][j] = d1[j] + d2[j];
      t[2][s][j] = d2[j] - d1[j];
      t[3][s][j] = d1[j] - d3[j];
    }
  }
  for (int r = 0; r < 4; ++r) {
    float *row = v + 4 * r * stride;
    for (int j = 0; j < WG_T; ++j) {
      row[j] = t[r][0][j] - t[r][2][j];
      row[stride + j] = t[r][1][j] + t[r][2][j];
      row[2 * stride + j] = t[r][2][j] - t[r][1][j];
      row[3 * stride + j] = t[r][1][j] - t[r][3][j];
    }
  }
}

/* A^T m A + bias of the block's 32 tiles, m[e] at m + e * stride: tile
 * j's rows 0 and 1 into y0[2j, 2j + 1] and y1[2j, 2j + 1]. */
static void wg_output32(const float *m, int64_t stride, float bias, float *y0, float *y1) {
  float t[2][4][WG_T];
  for (int s = 0; s < 4; ++s) {
    const float *e0 = m + s * stride, *e1 = m + (4 + s) * stride, *e2 = m + (8 + s) * stride,
                *e3 = m + (12 + s) * stride;
    for (int j = 0; j < WG_T; ++j) {
      t[0][s][j] = (e0[j] + e1[j]) + e2[j];
      t[1][s][j] = (e1[j] - e2[j]) - e3[j];
    }
  }
  for (int r = 0; r < 2; ++r) {
    float *y = r ? y1 : y0;
    for (int j = 0; j < WG_T; ++j) {
      y[2 * j] = ((t[r][0][j] + t[r][1][j]) + t[r][2][j]) + bias;
      y[2 * j + 1] = ((t[r][1][j] - t[r][2][j]) - t[r][3][j]) + bias;
    }
  }
}

int loom_conv_winograd_with(const loom_kernel_args *args, int64_t begin, int64_t end,
                            loom_gemm_ukr_fn ukr) {
  if (!wg_forward_fits(args)) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *u = &args->tensors[1], *xp = &args->tensors[2];
  const loom_tensor *bias = args->num_tensors > 3 ? &args->tensors[3] : NULL;
  const wg_grid grid = wg_forward_grid(args);
  const int64_t wq = grid.wq, gpos = grid.gpos;
  const int64_t m_n = out->sizes[1], ho = out->sizes[2], wo = out->sizes[3];
  const int64_t panels = u->sizes[1], k_n = u->sizes[2];
  const int64_t groups = (panels + WG_PANELS - 1) / WG_PANELS;
  if (begin < 0 || end > wg_blocks(&grid) * groups) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t s1 = xp->strides[1];
  const int image = wg_forward_image(args);
  const int64_t top = image ? args->scalars[2].i : 0, left = image ? args->scalars[3].i : 0;
  int64_t off[4][4], goff[4][4];
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 4; ++s) {
      off[r][s] = ((r & 1) * 2 + (s & 1)) * s1 + (r >> 1) * wq + (s >> 1);
      goff[r][s] = (4 * r + s) * WG_T;
    }
  _Alignas(64) float v[WG_E * WG_VS], mt[WG_E * WG_MS];
  float y[2][2 * WG_T], patch[WG_E * WG_T];

  for (int64_t item = begin; item < end; ++item) {
    /* blocks of WG_T grid positions: within one image's planes, or
     * anywhere in the batch's grid where the image is read in place */
    const int64_t og = item % groups, q0 = item / groups * WG_T;
    const int64_t p0 = og * WG_PANELS, np = panels - p0 < WG_PANELS ? panels - p0 : WG_PANELS;
    const float *img = (const float *)xp->data + (image ? 0 : q0 / gpos * xp->strides[0] + q0 % gpos);
    for (int64_t k0 = 0; k0 < k_n; k0 += WG_KC) {
      const int64_t kc = k_n - k0 < WG_KC ? k_n - k0 : WG_KC;
      for (int64_t c = 0; c < kc; ++c) {
        if (image) {
          wg_gather32(patch, xp, &grid, k0 + c, q0, top, left);
          wg_input32(v + c * WG_T, WG_VS, patch, goff);
        } else {
          wg_input32(v + c * WG_T, WG_VS, img + (k0 + c) * 4 * s1, off);
        }
      }
      for (int64_t e = 0; e < WG_E; ++e)
        for (int64_t p = 0; p < np; ++p) {
          const float *a = (const float *)u->data + ((e * panels + p0 + p) * k_n + k0) * WG_MR;
          const int64_t rows = m_n - (p0 + p) * WG_MR;
          ukr(kc, a, v + e * WG_VS, mt + e * WG_MS + p * WG_MR * WG_T, WG_T, 1.0f,
              (int)(rows < WG_MR ? rows : WG_MR), WG_T, k0 > 0);
        }
    }
    wg_run runs[WG_T];
    const int64_t nruns = wg_runs(&grid, q0, runs);
    for (int64_t p = 0; p < np; ++p)
      for (int64_t i = 0; i < WG_MR && (p0 + p) * WG_MR + i < m_n; ++i) {
        const int64_t o = (p0 + p) * WG_MR + i;
        const float bv = bias ? ((const float *)bias->data)[o * bias->strides[0]] : 0.0f;
        float *ochan = (float *)out->data + o * out->strides[1];
        wg_output32(mt + (p * WG_MR + i) * WG_T, WG_MS, bv, y[0], y[1]);
        for (int64_t r = 0; r < nruns; ++r)
          for (int64_t dy = 0; dy < 2 && 2 * runs[r].ty + dy < ho; ++dy) {
            const int64_t x0 = 2 * runs[r].tx;
            const int64_t x1 = x0 + 2 * runs[r].n < wo ? x0 + 2 * runs[r].n : wo;
            const float *src = y[dy] + 2 * runs[r].j;
            float *row = ochan + runs[r].img * out->strides[0] + (2 * runs[r].ty + dy) * out->strides[2];
            for (int64_t x = x0; x < x1; ++x) row[x * out->strides[3]] = src[x - x0];
          }
      }
  }
  return 0;
}

int loom_conv_winograd_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return loom_conv_winograd_with(args, begin, end, loom_conv_ukr12x32_generic);
}

/* Both variants sum into the same partial sums, which this finishes in
 * plain C. */
int loom_conv_winograd_wgrad_finish_kernel(const loom_kernel_args *args, int64_t begin,
                                           int64_t end) {
  if (args->num_tensors < 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dw = &args->tensors[0], *part = &args->tensors[1];
  if (dw->rank != 4 || part->rank != 4 || dw->dtype != LOOM_FLOAT32 ||
      part->dtype != LOOM_FLOAT32 || !wg_strided(dw) || !wg_dense(part) || part->sizes[1] != WG_E ||
      dw->sizes[0] != part->sizes[2] || dw->sizes[1] != part->sizes[3] || dw->sizes[2] != 3 ||
      dw->sizes[3] != 3 || part->sizes[3] > LOOM_CONV_WINOGRAD_MAX_K)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t chunks = part->sizes[0], m_n = part->sizes[2], k_n = part->sizes[3];
  const float *pd = (const float *)part->data;
  float *wd = (float *)dw->data;
  float acc[WG_E * LOOM_CONV_WINOGRAD_MAX_K];
  for (int64_t o = begin; o < end; ++o) {
    /* each element's sums over the chunks, in order */
    for (int64_t c = 0; c < chunks; ++c)
      for (int e = 0; e < WG_E; ++e) {
        const float *row = pd + ((c * WG_E + e) * m_n + o) * k_n;
        float *a = acc + e * k_n;
        if (c == 0)
          memcpy(a, row, sizeof(float) * (size_t)k_n);
        else
          for (int64_t k = 0; k < k_n; ++k) a[k] += row[k];
      }
    for (int64_t k = 0; k < k_n; ++k) {
      float s4[4][4], t[3][4];
      for (int e = 0; e < WG_E; ++e) s4[e / 4][e % 4] = acc[e * k_n + k];
      for (int j = 0; j < 4; ++j) { /* G^T S */
        t[0][j] = s4[0][j] + 0.5f * (s4[1][j] + s4[2][j]);
        t[1][j] = 0.5f * (s4[1][j] - s4[2][j]);
        t[2][j] = 0.5f * (s4[1][j] + s4[2][j]) + s4[3][j];
      }
      /* written through dw's strides: dense, or channels last as the
       * weight it is the gradient of */
      float *w = wd + o * dw->strides[0] + k * dw->strides[1];
      const int64_t rs = dw->strides[2], cs = dw->strides[3];
      for (int r = 0; r < 3; ++r) { /* (G^T S) G */
        w[r * rs] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
        w[r * rs + cs] = 0.5f * (t[r][1] - t[r][2]);
        w[r * rs + 2 * cs] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
      }
    }
  }
  return 0;
}
