/* kernels/conv/conv_winograd_rows_avx512.h — Winograd's 4x4 patches (and
 * the weight gradient's 2x2 dy tiles) of 16 grid tiles at once, read in
 * place from an image whose columns are adjacent (NCHW: unit column
 * stride), where conv.pad's phase planes held them as runs of tiles.
 *
 * The 16 lanes are grid positions q0 .. q0 + 15 (a wg_grid: rows wq tiles
 * wide, images one after another). The ones in one tile row of one image
 * that the output keeps form a run: lanes [j, j + n) are tiles (ty, tx)
 * .. (ty, tx + n - 1), whose patch columns s are image columns
 * 2 (tx + i) + s - left. Two loads of 16 columns from x0 = 2 tx -
 * left, and two from x0 + 2, hold every column a run reads in a row; one
 * permute of each pair picks its even or odd columns (s = 0, 1; from
 * x0 + 2: s = 2, 3) into the run's lanes. Columns outside the image, rows
 * outside it and the lanes of tiles the output drops are zero: the values
 * the planes hold there (zeros; a dropped tile's, whatever they hold, are
 * never stored by a forward, and meet dy's zeros in a weight gradient). */
#ifndef LOOM_KERNELS_CONV_WINOGRAD_ROWS_AVX512_H
#define LOOM_KERNELS_CONV_WINOGRAD_ROWS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/conv/conv_winograd_internal.h"

typedef struct wg_lane_run {
  int64_t base;     /* the run's image: its offset in the tensor */
  int64_t y0, x0;   /* the first tile's patch: top row, left column */
  __m512i even, odd; /* lane j + i takes element 2 i (2 i + 1) of a load pair */
  __mmask16 lanes;  /* [j, j + n) */
  __mmask16 m[4];   /* loads from x0, x0 + 16, x0 + 2, x0 + 18: the image's columns */
} wg_lane_run;

typedef struct wg_lanes {
  int nruns;
  wg_lane_run run[16];
} wg_lanes;

/* Bits [lo, hi) of a 16-lane mask (empty where hi <= lo). */
static inline __mmask16 wg_bits(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << (hi - lo)) - 1u) << lo);
}

/* The runs of the 16 grid positions from q0 of grid g for patches
 * `patch` (4 or 2) wide, padded by top and left, over images `w` columns
 * wide, s0 apart. */
static inline void wg_lanes_of(wg_lanes *l, const wg_grid *g, int64_t q0, int64_t top,
                               int64_t left, int64_t w, int patch, int64_t s0) {
  l->nruns = 0;
  for (int64_t j = 0; j < 16;) {
    int64_t img, ty, tx;
    if (!wg_tile(g, q0 + j, &img, &ty, &tx)) {
      ++j;
      continue;
    }
    const int64_t n = g->two - tx < 16 - j ? g->two - tx : 16 - j;
    wg_lane_run *r = &l->run[l->nruns++];
    r->base = img * s0;
    r->y0 = 2 * ty - top;
    r->x0 = 2 * tx - left;
    /* the columns the run reads: [x0, x0 + 2 (n - 1) + patch) within the image */
    const int64_t lo = r->x0 < 0 ? 0 : r->x0;
    const int64_t end = r->x0 + 2 * (n - 1) + patch, hi = end < w ? end : w;
    static const int64_t at[4] = {0, 16, 2, 18};
    for (int k = 0; k < 4; ++k) r->m[k] = wg_bits(lo - r->x0 - at[k], hi - r->x0 - at[k]);
    int32_t e[16];
    for (int64_t i = 0; i < 16; ++i) e[i] = i >= j && i < j + n ? (int32_t)(2 * (i - j)) : 0;
    r->even = _mm512_loadu_si512(e);
    r->odd = _mm512_add_epi32(r->even, _mm512_set1_epi32(1));
    r->lanes = wg_bits(j, j + n);
    j += n;
  }
}

/* d[r][s] (r, s < patch) of the lanes' tiles from one channel's plane of
 * the first image (each run's at its base past it; rows rs apart, h of
 * them, columns adjacent). */
static inline void wg_rows_patch(__m512 d[4][4], const wg_lanes *l, const float *plane,
                                 int64_t rs, int64_t h, int patch) {
  for (int r = 0; r < patch; ++r)
    for (int s = 0; s < patch; ++s) d[r][s] = _mm512_setzero_ps();
  for (int k = 0; k < l->nruns; ++k) {
    const wg_lane_run *u = &l->run[k];
    for (int r = 0; r < patch; ++r) {
      const int64_t yy = u->y0 + r;
      if (yy < 0 || yy >= h) continue;
      const float *p = plane + u->base + yy * rs + u->x0;
      const __m512 a0 = _mm512_maskz_loadu_ps(u->m[0], p), a1 = _mm512_maskz_loadu_ps(u->m[1], p + 16);
      d[r][0] = _mm512_mask_mov_ps(d[r][0], u->lanes, _mm512_permutex2var_ps(a0, u->even, a1));
      d[r][1] = _mm512_mask_mov_ps(d[r][1], u->lanes, _mm512_permutex2var_ps(a0, u->odd, a1));
      if (patch == 4) {
        const __m512 b0 = _mm512_maskz_loadu_ps(u->m[2], p + 2);
        const __m512 b1 = _mm512_maskz_loadu_ps(u->m[3], p + 18);
        d[r][2] = _mm512_mask_mov_ps(d[r][2], u->lanes, _mm512_permutex2var_ps(b0, u->even, b1));
        d[r][3] = _mm512_mask_mov_ps(d[r][3], u->lanes, _mm512_permutex2var_ps(b0, u->odd, b1));
      }
    }
  }
}

#endif /* LOOM_KERNELS_CONV_WINOGRAD_ROWS_AVX512_H */
