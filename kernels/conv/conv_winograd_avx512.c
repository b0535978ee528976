/* kernels/conv/conv_winograd_avx512.c — 3x3 stride-1 convolutions by Winograd's
 * F(2x2, 3x3): each 2x2 block of output (a tile) comes from the 4x4 patch
 * of input under it through 16 products per channel pair instead of 36.
 *
 * With V = B^T d B (the patch transformed), U = G g G^T (the weight) and
 * Y = A^T M A, where M[e] = sum over input channels of U[e] * V[e] for each
 * of the 16 elements e, the convolution is 16 GEMMs over channels, one per
 * element, each run by the fp32 micro-kernel of kernels/gemm.
 *
 * The image comes as the four stride-2 phase planes of its zero-padded
 * copy (loom_conv_pad_kernel), rows wq wide: tile (ty, tx) reads patch
 * element (r, s) in phase (r & 1, s & 1) at q + (r >> 1) * wq + (s >> 1),
 * where q = ty * wq + tx. So a block of 32 consecutive grid tiles reads each
 * patch element as one run of 32 floats: the transforms are plain vector
 * arithmetic over 32 tiles at once, and tiles with tx >= the tile columns
 * are computed and dropped. Or the image is read in place: channels last
 * (a tile's patch as runs of channels, transposed into runs of tiles), or
 * NCHW by rows (conv_winograd_rows_avx512.h), with the planes' values;
 * then the grid may be dense (wg_grid): each image's tiles right after the
 * last one's, rows as wide as the output's, so a block of small images'
 * tiles spans images and drops none.
 *
 * The weight gradient runs the same GEMMs with the tiles as k: dU[e] sums
 * (A dY A^T)[e] (B^T d B)[e] over the tiles, and dW = G^T dU G. Its
 * transforms are vectors over tiles: x's are transposed in registers into
 * the micro-kernel's B panels, whose vectors run over channels; dy's are
 * the rows of A, which the micro-kernel reads in place (channels last,
 * where both run over channels, they land in packed panels). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/conv/conv_winograd_internal.h"
#include "kernels/conv/conv_winograd_rows_avx512.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"
#include "kernels/gemm/ukr_avx512.h"
#include "loom/status.h"

/* The split kernels/conv/conv.h publishes is the fp32 micro-kernel's tile. */
_Static_assert((int)LOOM_CONV_WINOGRAD_MR == (int)LOOM_GEMM_AVX512_MR, "panels are micro-kernel rows");
_Static_assert((int)LOOM_CONV_WINOGRAD_TILES == (int)LOOM_GEMM_AVX512_NR, "blocks are micro-kernel columns");

int loom_conv_winograd_weight_avx512(const loom_kernel_args *args, int64_t begin,
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
  /* A panel's 12 rows are vector lanes: row i's 3x3 taps are gathered
   * rows_apart floats apart (the weight's strides: dense or channels last). */
  const int64_t m_step = flipped ? w->strides[1] : w->strides[0];
  const int64_t k_step = flipped ? w->strides[0] : w->strides[1];
  const int64_t rows_apart = m_step;
  if (rows_apart * WG_MR > INT32_MAX) return LOOM_ERROR_INVALID_ARGUMENT;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lanes = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int32_t)rows_apart));
  const __m512 half = _mm512_set1_ps(0.5f);
  enum { CHUNK = 16 };
  float loc[WG_E][CHUNK * WG_MR + 4];
  for (int64_t p = begin; p < end; ++p) {
    const int64_t live = m_n - p * WG_MR < WG_MR ? m_n - p * WG_MR : WG_MR;
    const __mmask16 rows = (__mmask16)((1u << live) - 1u);
    for (int64_t k0 = 0; k0 < k_n; k0 += CHUNK) {
      const int64_t kn = k_n - k0 < CHUNK ? k_n - k0 : CHUNK;
      for (int64_t kk = 0; kk < kn; ++kk) {
        const int64_t k = k0 + kk;
        /* tap (r, s) of row i: w[m][k][r][s], or w[k][m][2 - r][2 - s] */
        const float *base = wd + k * k_step + p * WG_MR * m_step;
        __m512 g[3][3], t[4][3];
        for (int r = 0; r < 3; ++r)
          for (int s = 0; s < 3; ++s) {
            const int64_t tr = flipped ? 2 - r : r, ts = flipped ? 2 - s : s;
            g[r][s] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rows, lanes,
                                               base + tr * w->strides[2] + ts * w->strides[3], 4);
          }
        for (int s = 0; s < 3; ++s) { /* G g */
          t[0][s] = g[0][s];
          t[1][s] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(g[0][s], g[1][s]), g[2][s]));
          t[2][s] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(g[0][s], g[1][s]), g[2][s]));
          t[3][s] = g[2][s];
        }
        for (int r = 0; r < 4; ++r) { /* (G g) G^T */
          const __m512 v1 = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(t[r][0], t[r][1]), t[r][2]));
          const __m512 v2 = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(t[r][0], t[r][1]), t[r][2]));
          _mm512_storeu_ps(&loc[4 * r][kk * WG_MR], t[r][0]);
          _mm512_storeu_ps(&loc[4 * r + 1][kk * WG_MR], v1);
          _mm512_storeu_ps(&loc[4 * r + 2][kk * WG_MR], v2);
          _mm512_storeu_ps(&loc[4 * r + 3][kk * WG_MR], t[r][2]);
        }
      }
      /* one contiguous run per element */
      for (int e = 0; e < WG_E; ++e)
        memcpy(ud + ((e * panels + p) * k_n + k0) * WG_MR, loc[e],
               (size_t)(kn * WG_MR) * sizeof(float));
    }
  }
  return 0;
}

/* B^T d B of 16 tiles: d[r][s] at src + off[r][s]; into v[e] (16 floats
 * each, `stride` apart). */
static inline void wg_input_regs(float *v, int64_t stride, __m512 d[4][4]) {
  __m512 t[4][4];
  for (int s = 0; s < 4; ++s) {
    t[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
    t[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
    t[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
    t[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
  }
  for (int r = 0; r < 4; ++r) {
    float *row = v + 4 * r * stride;
    _mm512_storeu_ps(row, _mm512_sub_ps(t[r][0], t[r][2]));
    _mm512_storeu_ps(row + stride, _mm512_add_ps(t[r][1], t[r][2]));
    _mm512_storeu_ps(row + 2 * stride, _mm512_sub_ps(t[r][2], t[r][1]));
    _mm512_storeu_ps(row + 3 * stride, _mm512_sub_ps(t[r][1], t[r][3]));
  }
}

static inline void wg_input16(float *v, int64_t stride, const float *src, const int64_t off[4][4]) {
  __m512 d[4][4];
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 4; ++s) d[r][s] = _mm512_loadu_ps(src + off[r][s]);
  wg_input_regs(v, stride, d);
}

enum {
  WG_STAGE = 16 * 16, /* one element's 16 channels over 16 tiles */
};

/* The 4x4 patch from row y0, column x0 of a channels-last image x (at
 * img: its image and first channel), the channels cm: zeros outside x, or
 * everywhere unless `keep`. */
static inline void wg_load_patch(__m512 d[4][4], const loom_tensor *x, const float *img,
                                 int64_t y0, int64_t x0, int keep, __mmask16 cm) {
  const int64_t h = x->sizes[2], w = x->sizes[3], sh = x->strides[2], sw = x->strides[3];
  for (int r = 0; r < 4; ++r) {
    const int64_t yy = y0 + r;
    const int row_in = keep && yy >= 0 && yy < h;
    for (int s = 0; s < 4; ++s) {
      const int64_t xx = x0 + s;
      d[r][s] = row_in && xx >= 0 && xx < w ? _mm512_maskz_loadu_ps(cm, img + yy * sh + xx * sw)
                                            : _mm512_setzero_ps();
    }
  }
}

/* B^T d B of the block of tiles from grid position q0 of grid g for
 * channels [k0, k0 + kc) of a channels-last x (wg_forward_image), into v
 * as the phase planes' transform lays it out (channel c's 32 tiles at
 * v + c WG_T, elements WG_VS apart): each tile's transform runs over 16
 * channels at a time, and 16 x 16 transposes turn 16 tiles' vectors into
 * runs of tiles. The same adds on the same values, so the same bits as
 * from conv.pad's planes; tiles the output drops transform zeros. */
static void wg_input_image(float *v, const loom_tensor *x, const wg_grid *g, int64_t q0,
                           int64_t top, int64_t left, int64_t k0, int64_t kc) {
  _Alignas(64) float stage[WG_E * WG_STAGE];
  for (int64_t t0 = 0; t0 < WG_T; t0 += 16)
    for (int64_t c0 = 0; c0 < kc; c0 += 16) {
      const int64_t live = kc - c0 < 16 ? kc - c0 : 16;
      const __mmask16 cm = (__mmask16)((1u << live) - 1u);
      for (int64_t t = 0; t < 16; ++t) {
        int64_t n, ty, tx;
        const int keep = wg_tile(g, q0 + t0 + t, &n, &ty, &tx);
        const float *img = (const float *)x->data + (keep ? n * x->strides[0] : 0) + k0;
        __m512 d[4][4];
        wg_load_patch(d, x, img + c0, 2 * ty - top, 2 * tx - left, keep, cm);
        wg_input_regs(stage + t * 16, WG_STAGE, d);
      }
      for (int e = 0; e < WG_E; ++e) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(stage + e * WG_STAGE + i * 16);
        loom_gemm_transpose16(r);
        float *dst = v + e * WG_VS + c0 * WG_T + t0;
        for (int64_t j = 0; j < live; ++j) _mm512_storeu_si512(dst + j * WG_T, r[j]);
      }
    }
}

/* A^T m A (+ bias) of 16 tiles, m[e] 16 floats each `stride` apart: the
 * tiles' rows 0 and 1, their columns interleaved, into y0 and y1 (32 each). */
static inline void wg_output16(const float *m, int64_t stride, float bias, float *y0,
                               float *y1) {
  __m512 e[4][4], t[2][4];
  for (int i = 0; i < WG_E; ++i) e[i / 4][i % 4] = _mm512_loadu_ps(m + i * stride);
  for (int s = 0; s < 4; ++s) {
    t[0][s] = _mm512_add_ps(_mm512_add_ps(e[0][s], e[1][s]), e[2][s]);
    t[1][s] = _mm512_sub_ps(_mm512_sub_ps(e[1][s], e[2][s]), e[3][s]);
  }
  const __m512 b = _mm512_set1_ps(bias);
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int r = 0; r < 2; ++r) {
    __m512 c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(t[r][0], t[r][1]), t[r][2]), b);
    __m512 c1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(t[r][1], t[r][2]), t[r][3]), b);
    float *y = r ? y1 : y0;
    _mm512_storeu_ps(y, _mm512_permutex2var_ps(c0, lo, c1));
    _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(c0, hi, c1));
  }
}

/* Output row y's columns [x, x + n) from row[0, n), unit stride. */
static inline void wg_put(float *dst, const float *row, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, row + i));
  }
}

/* The output tiles of a block, channels [o_lo, o_lo + o_n), each run in
 * its image (m: their products, channel l's at m + l * WG_T, elements WG_MS apart),
 * into a channels-last out: 16 channels' rows at a time, turned by 16 x 16
 * transposes into runs of channels at each position, where a channel at a
 * time wrote one float per position. */
static void wg_store_channels_last(const loom_tensor *out, int64_t o_lo, int64_t o_n,
                                   const float *m, const loom_tensor *bias, const wg_run *runs,
                                   int64_t nruns, int64_t ho, int64_t wo) {
  enum { ROW = 2 * WG_T + 16 }; /* a row of tiles' columns, and room for a last load past it */
  _Alignas(64) float y[16][2][ROW];
  float *chans = (float *)out->data + o_lo;
  const int64_t s2 = out->strides[2], s3 = out->strides[3];
  for (int64_t l0 = 0; l0 < o_n; l0 += 16) {
    const int64_t lanes = o_n - l0 < 16 ? o_n - l0 : 16;
    const __mmask16 cm = (__mmask16)((1u << lanes) - 1u);
    for (int64_t k = 0; k < lanes; ++k) {
      const int64_t o = o_lo + l0 + k;
      const float bv = bias ? ((const float *)bias->data)[o * bias->strides[0]] : 0.0f;
      for (int h = 0; h < 2; ++h)
        wg_output16(m + (l0 + k) * WG_T + 16 * h, WG_MS, bv, y[k][0] + 32 * h, y[k][1] + 32 * h);
    }
    for (int64_t r = 0; r < nruns; ++r)
      for (int64_t dy = 0; dy < 2 && 2 * runs[r].ty + dy < ho; ++dy) {
        const int64_t x0 = 2 * runs[r].tx;
        const int64_t x1 = x0 + 2 * runs[r].n < wo ? x0 + 2 * runs[r].n : wo;
        float *row = chans + runs[r].img * out->strides[0] + (2 * runs[r].ty + dy) * s2 + l0;
        for (int64_t xb = x0; xb < x1; xb += 16) {
          const int64_t live = x1 - xb < 16 ? x1 - xb : 16;
          const float *src = &y[0][dy][2 * runs[r].j + xb - x0];
          __m512i v[16];
          for (int64_t k = 0; k < 16; ++k)
            v[k] = k < lanes ? _mm512_loadu_si512(src + k * 2 * ROW) : _mm512_setzero_si512();
          loom_gemm_transpose16(v);
          for (int64_t q = 0; q < live; ++q)
            _mm512_mask_storeu_ps(row + (xb + q) * s3, cm, _mm512_castsi512_ps(v[q]));
        }
      }
  }
}

int loom_conv_winograd_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
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
  const int rows = image && wg_image_rows(xp);
  const int64_t top = image ? args->scalars[2].i : 0, left = image ? args->scalars[3].i : 0;
  int64_t off[4][4];
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 4; ++s)
      off[r][s] = ((r & 1) * 2 + (s & 1)) * s1 + (r >> 1) * wq + (s >> 1);
  _Alignas(64) float v[WG_E * WG_VS], mt[WG_E * WG_MS];
  float y[2][2 * WG_T];
  wg_lanes lanes[2];

  for (int64_t item = begin; item < end; ++item) {
    /* blocks of WG_T grid positions: within one image's planes, or
     * anywhere in the batch's grid where the image is read in place */
    const int64_t og = item % groups, q0 = item / groups * WG_T;
    const int64_t p0 = og * WG_PANELS, np = panels - p0 < WG_PANELS ? panels - p0 : WG_PANELS;
    const float *img = (const float *)xp->data + (image ? 0 : q0 / gpos * xp->strides[0] + q0 % gpos);
    if (rows)
      for (int hf = 0; hf < 2; ++hf)
        wg_lanes_of(&lanes[hf], &grid, q0 + 16 * hf, top, left, xp->sizes[3], 4, xp->strides[0]);
    for (int64_t k0 = 0; k0 < k_n; k0 += WG_KC) {
      const int64_t kc = k_n - k0 < WG_KC ? k_n - k0 : WG_KC;
      if (rows)
        for (int64_t c = 0; c < kc; ++c)
          for (int hf = 0; hf < 2; ++hf) {
            __m512 d[4][4];
            wg_rows_patch(d, &lanes[hf], img + (k0 + c) * s1, xp->strides[2], xp->sizes[2], 4);
            wg_input_regs(v + c * WG_T + 16 * hf, WG_VS, d);
          }
      else if (image)
        wg_input_image(v, xp, &grid, q0, top, left, k0, kc);
      for (int64_t c = 0; c < kc && !image; ++c) {
        const float *src = img + (k0 + c) * 4 * s1;
        /* the channel two on is planes away, beyond the hardware prefetchers:
         * its runs, two rows of each phase */
        if (k0 + c + 2 < k_n)
          for (int ph = 0; ph < 4; ++ph)
            for (int64_t row = 0; row < 2; ++row)
              for (int h = 0; h < 3; ++h)
                _mm_prefetch((const char *)(src + (8 + ph) * s1 + row * wq + 16 * h), _MM_HINT_T0);
        wg_input16(v + c * WG_T, WG_VS, src, off);
        wg_input16(v + c * WG_T + 16, WG_VS, src + 16, off);
      }
      for (int64_t e = 0; e < WG_E; ++e)
        for (int64_t p = 0; p < np; ++p) {
          const float *a = (const float *)u->data + ((e * panels + p0 + p) * k_n + k0) * WG_MR;
          const int64_t rows = m_n - (p0 + p) * WG_MR;
          loom_gemm_ukr_avx512_f32(kc, a, v + e * WG_VS, mt + e * WG_MS + p * WG_MR * WG_T, WG_T, 1.0f,
                                   (int)(rows < WG_MR ? rows : WG_MR), WG_T, k0 > 0);
        }
    }
    /* the block's runs of tiles inside the output's tile rows */
    wg_run runs[WG_T];
    const int64_t nruns = wg_runs(&grid, q0, runs);
    if (out->strides[1] == 1 && out->strides[3] != 1) {
      const int64_t o_lo = p0 * WG_MR, o_n = m_n - o_lo < np * WG_MR ? m_n - o_lo : np * WG_MR;
      wg_store_channels_last(out, o_lo, o_n, mt, bias, runs, nruns, ho, wo);
      continue;
    }
    for (int64_t p = 0; p < np; ++p)
      for (int64_t i = 0; i < WG_MR && (p0 + p) * WG_MR + i < m_n; ++i) {
        const int64_t o = (p0 + p) * WG_MR + i;
        const float bv = bias ? ((const float *)bias->data)[o * bias->strides[0]] : 0.0f;
        const float *m = mt + (p * WG_MR + i) * WG_T;
        float *ochan = (float *)out->data + o * out->strides[1];
        /* The output's lines are written in pieces, each a miss: ask for
         * the ones two channels on now, to be written to. */
        if (out->strides[3] == 1 && i + 2 < WG_MR && o + 2 < m_n)
          for (int64_t r = 0; r < nruns; ++r)
            for (int64_t dy = 0; dy < 2 && 2 * runs[r].ty + dy < ho; ++dy) {
              const float *ahead = ochan + runs[r].img * out->strides[0] + 2 * out->strides[1] +
                                   (2 * runs[r].ty + dy) * out->strides[2] + 2 * runs[r].tx;
              for (int64_t l = 0; l < 2 * runs[r].n; l += 16) __builtin_prefetch(ahead + l, 1, 3);
            }
        for (int h = 0; h < 2; ++h)
          wg_output16(m + 16 * h, WG_MS, bv, y[0] + 32 * h, y[1] + 32 * h);
        for (int64_t r = 0; r < nruns; ++r)
          for (int64_t dy = 0; dy < 2 && 2 * runs[r].ty + dy < ho; ++dy) {
            const int64_t x0 = 2 * runs[r].tx;
            const int64_t x1 = x0 + 2 * runs[r].n < wo ? x0 + 2 * runs[r].n : wo;
            const float *src = y[dy] + 2 * runs[r].j;
            float *row = ochan + runs[r].img * out->strides[0] + (2 * runs[r].ty + dy) * out->strides[2];
            if (out->strides[3] == 1)
              wg_put(row + x0, src, x1 - x0);
            else
              for (int64_t x = x0; x < x1; ++x) row[x * out->strides[3]] = src[x - x0];
          }
      }
  }
  return 0;
}

/* A dY A^T of 16 tiles, dY[i][j] at src + off[i][j] (the 2x2 output tile's
 * gradient): into m[e] (16 floats each, `stride` apart). A's rows take
 * dY[0], dY[0] + dY[1], dY[0] - dY[1] and -dY[1]. */
static inline void wg_grad_regs(__m512 g[WG_E], __m512 y[2][2]) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 r[4][2];
  for (int j = 0; j < 2; ++j) {
    r[0][j] = y[0][j];
    r[1][j] = _mm512_add_ps(y[0][j], y[1][j]);
    r[2][j] = _mm512_sub_ps(y[0][j], y[1][j]);
    r[3][j] = _mm512_sub_ps(zero, y[1][j]);
  }
  for (int i = 0; i < 4; ++i) {
    g[4 * i] = r[i][0];
    g[4 * i + 1] = _mm512_add_ps(r[i][0], r[i][1]);
    g[4 * i + 2] = _mm512_sub_ps(r[i][0], r[i][1]);
    g[4 * i + 3] = _mm512_sub_ps(zero, r[i][1]);
  }
}

static inline void wg_grad16(float *m, int64_t stride, const float *src, const int64_t off[2][2]) {
  __m512 y[2][2], g[WG_E];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) y[i][j] = _mm512_loadu_ps(src + off[i][j]);
  wg_grad_regs(g, y);
  for (int e = 0; e < WG_E; ++e) _mm512_storeu_ps(m + e * stride, g[e]);
}

/* The panels of a block's 16 tiles from h, read in place from
 * channels-last x and dy (wg_wgrad_images): each tile's transforms run
 * over 16 channels at a time and land as the panels' rows, [tile][32
 * input channels] in bbuf and [tile][12 output channels] in abuf, where
 * the planes' transforms, vectors over tiles, are transposed into them:
 * the same values, so the same bits. */
static void wg_wgrad_panels_image(float (*abuf)[WG_OG * WG_T], float (*bbuf)[WG_CG * WG_T],
                                  const loom_tensor *x, const loom_tensor *dy, const wg_grid *g,
                                  int64_t q, int64_t h, int64_t top, int64_t left,
                                  int64_t c_lo, int64_t c_n, int64_t o_lo, int64_t o_n) {
  const int64_t ho = dy->sizes[2], wo = dy->sizes[3], dsh = dy->strides[2], dsw = dy->strides[3];
  for (int64_t j = 0; j < 16; ++j) {
    int64_t n, ty, tx;
    const int keep = wg_tile(g, q + h + j, &n, &ty, &tx);
    const float *ximg = (const float *)x->data + (keep ? n * x->strides[0] : 0) + c_lo;
    const float *dimg = (const float *)dy->data + (keep ? n * dy->strides[0] : 0) + o_lo;
    for (int64_t c0 = 0; c0 < c_n; c0 += 16) {
      const int64_t live = c_n - c0 < 16 ? c_n - c0 : 16;
      __m512 d[4][4];
      wg_load_patch(d, x, ximg + c0, 2 * ty - top, 2 * tx - left, keep,
                    (__mmask16)((1u << live) - 1u));
      wg_input_regs(&bbuf[0][(c0 / 32 * WG_T + h + j) * 32 + c0 % 32], WG_CG * WG_T, d);
    }
    for (int64_t o0 = 0; o0 < o_n; o0 += 16) {
      const int64_t live = o_n - o0 < 16 ? o_n - o0 : 16;
      const __mmask16 om = (__mmask16)((1u << live) - 1u);
      __m512 y[2][2], g[WG_E];
      for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 2; ++k) {
          const int64_t yy = 2 * ty + i, xx = 2 * tx + k;
          y[i][k] = keep && yy < ho && xx < wo
                        ? _mm512_maskz_loadu_ps(om, dimg + yy * dsh + xx * dsw + o0)
                                       : _mm512_setzero_ps();
        }
      wg_grad_regs(g, y);
      /* lanes o0 + l fall in panels (o0 + l) / 12: at most two */
      const int64_t p0 = o0 / WG_MR, split = (p0 + 1) * WG_MR - o0;
      const __mmask16 lo = (__mmask16)((1u << (split < live ? split : live)) - 1u);
      const __mmask16 hi = (__mmask16)(om & ~(unsigned)lo);
      for (int e = 0; e < WG_E; ++e) {
        float *row = abuf[e] + (p0 * WG_T + h + j) * WG_MR;
        _mm512_mask_storeu_ps(row + (o0 - p0 * WG_MR), lo, g[e]);
        if (hi) _mm512_mask_storeu_ps(row + WG_T * WG_MR - split, hi, g[e]);
      }
    }
  }
}

/* Staged channel i past the last one: zero in every element. */
static inline void wg_stage_zero(float *stage, int64_t i) {
  for (int e = 0; e < WG_E; ++e) memset(stage + e * WG_STAGE + i * 16, 0, 16 * sizeof(float));
}

/* One element's 16 channel vectors (lanes: 16 tiles) from the staging
 * buffer, transposed: vector j holds tile j's 16 channels. */
static inline void wg_stage_transposed(__m512i r[16], const float *stage) {
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(stage + i * 16);
  loom_gemm_transpose16(r);
}

/* The micro-kernel's tile of rows R (4, 8 or 12: the one it runs for mr
 * live rows) over WG_T steps of k, A's row i read in place at a + i WG_T:
 * each element's FMAs in its order and its store, so its bits. */
static inline __attribute__((always_inline)) void wg_ukr_rows_tile(
    const int R, const float *a, const float *b, float *t, int64_t ldt, int mr, int nr,
    int accumulate) {
  __m512 c[WG_MR][2];
  for (int i = 0; i < R; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < WG_T; ++k, b += 32)
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * WG_T + k]);
      c[i][0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b), c[i][0]);
      c[i][1] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + 16), c[i][1]);
    }
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  loom_ukr_store(c, R, t, ldt, 1.0f, mr, m0, m1, accumulate);
}

/* A last panel's mr < WG_MR live rows (the tile's rows past them are read
 * from A's buffer and multiplied, not stored). */
static __attribute__((noinline)) void wg_ukr_rows_part(const float *a, const float *b, float *t,
                                                       int64_t ldt, int mr, int nr,
                                                       int accumulate) {
  if (mr <= 4)
    wg_ukr_rows_tile(4, a, b, t, ldt, mr, nr, accumulate);
  else if (mr <= 8)
    wg_ukr_rows_tile(8, a, b, t, ldt, mr, nr, accumulate);
  else
    wg_ukr_rows_tile(WG_MR, a, b, t, ldt, mr, nr, accumulate);
}

int loom_conv_winograd_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
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
  const int images = wg_wgrad_images(args), rows = images && wg_images_rows(xp, dyp);
  const int64_t top = images ? args->scalars[4].i : 0, left = images ? args->scalars[5].i : 0;
  const wg_grid grid = {wq, gpos, n_img, (dyp->sizes[2] + 1) / 2, (dyp->sizes[3] + 1) / 2};
  wg_lanes xl[2], dl[2];
  /* per element: dy's as A [96 output channels][32 tiles] (channels last:
   * panels [8][32 tiles][12]), x's as B panels [2][32 tiles][32]; staging
   * for 16 channels' transposes */
  _Alignas(64) float abuf[WG_E][WG_OG * WG_T], bbuf[WG_E][WG_CG * WG_T], stage[WG_E * WG_STAGE];

  /* Rows and columns of the panels past the last channel hold zeros or an
   * earlier item's values: the micro-kernel computes them and stores none. */
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
      const float *xsrc = (const float *)xp->data + (images ? 0 : n * xp->strides[0] + q);
      const float *dsrc = (const float *)dyp->data + (images ? 0 : n * dyp->strides[0] + q);
      if (rows)
        for (int hf = 0; hf < 2; ++hf) {
          wg_lanes_of(&xl[hf], &grid, t0 + 16 * hf, top, left, xp->sizes[3], 4, xp->strides[0]);
          wg_lanes_of(&dl[hf], &grid, t0 + 16 * hf, 0, 0, dyp->sizes[3], 2, dyp->strides[0]);
        }
      for (int64_t h = 0; h < WG_T; h += 16) {
        if (images && !rows) {
          wg_wgrad_panels_image(abuf, bbuf, xp, dyp, &grid, t0, h, top, left, c_lo, c_n, o_lo, o_n);
          continue;
        }
        for (int64_t c0 = 0; c0 < c_n; c0 += 16) {
          for (int64_t i = 0; i < 16; ++i) {
            if (c0 + i < c_n && rows) {
              __m512 d[4][4];
              wg_rows_patch(d, &xl[h / 16], xsrc + (c_lo + c0 + i) * xs, xp->strides[2],
                            xp->sizes[2], 4);
              wg_input_regs(stage + i * 16, WG_STAGE, d);
            } else if (c0 + i < c_n)
              wg_input16(stage + i * 16, WG_STAGE, xsrc + (c_lo + c0 + i) * 4 * xs + h, xoff);
            else
              wg_stage_zero(stage, i);
          }
          for (int e = 0; e < WG_E; ++e) {
            __m512i r[16];
            wg_stage_transposed(r, stage + e * WG_STAGE);
            float *dst = bbuf[e] + (c0 / 32 * WG_T + h) * 32 + c0 % 32;
            for (int j = 0; j < 16; ++j) _mm512_storeu_si512(dst + j * 32, r[j]);
          }
        }
        /* dy's transforms, vectors over the tiles, are A's rows as they are */
        for (int64_t o = 0; o < o_n; ++o) {
          if (rows) {
            __m512 d[4][4], g[WG_E];
            wg_rows_patch(d, &dl[h / 16], dsrc + (o_lo + o) * ds, dyp->strides[2], dyp->sizes[2], 2);
            __m512 yv[2][2] = {{d[0][0], d[0][1]}, {d[1][0], d[1][1]}};
            wg_grad_regs(g, yv);
            for (int e = 0; e < WG_E; ++e) _mm512_storeu_ps(abuf[e] + o * WG_T + h, g[e]);
          } else {
            wg_grad16(abuf[0] + o * WG_T + h, WG_OG * WG_T, dsrc + (o_lo + o) * 4 * ds + h, doff);
          }
        }
      }
      /* this block's 32 tiles added to the chunk's sums */
      for (int e = 0; e < WG_E; ++e) {
        float *pe = (float *)part->data + (chunk * WG_E + e) * m_n * k_n;
        for (int64_t cp = 0; cp * 32 < c_n; ++cp)
          for (int64_t op = 0; op * WG_MR < o_n; ++op) {
            const int64_t live = o_n - op * WG_MR, cols = c_n - cp * 32;
            const int mr = (int)(live < WG_MR ? live : WG_MR), nr = (int)(cols < 32 ? cols : 32);
            const float *b = bbuf[e] + cp * WG_T * 32;
            float *t = pe + (o_lo + op * WG_MR) * k_n + c_lo + cp * 32;
            if (images && !rows)
              loom_gemm_ukr_avx512_f32(WG_T, abuf[e] + op * WG_T * WG_MR, b, t, k_n, 1.0f, mr, nr,
                                       t0 > t_lo);
            else if (mr == WG_MR)
              loom_gemm_ukr_avx512_f32_rows(WG_T, abuf[e] + op * WG_MR * WG_T, WG_T, b, t, k_n,
                                            1.0f, nr, t0 > t_lo);
            else
              wg_ukr_rows_part(abuf[e] + op * WG_MR * WG_T, b, t, k_n, mr, nr, t0 > t_lo);
          }
      }
    }
  }
  return 0;
}
