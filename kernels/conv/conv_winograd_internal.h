/* kernels/conv/conv_winograd_internal.h — what the Winograd F(2x2, 3x3)
 * convolutions (conv_winograd_avx512.c and their generic twins,
 * conv_winograd_generic.c and conv_winograd_wgrad_generic.c) share: how
 * they split the work and lay out their buffers. */
#ifndef LOOM_KERNELS_CONV_WINOGRAD_INTERNAL_H
#define LOOM_KERNELS_CONV_WINOGRAD_INTERNAL_H

#include <stdint.h>

#include "kernels/conv/conv.h"

enum {
  WG_T = LOOM_CONV_WINOGRAD_TILES, /* tiles per block */
  WG_MR = LOOM_CONV_WINOGRAD_MR,
  WG_KC = 128,    /* input channels per transform pass */
  WG_PANELS = LOOM_CONV_WINOGRAD_PANELS, /* 12-row panels of output channels per item */
  WG_E = 16,      /* elements of a transformed tile */
  /* The 16 elements' buffers are a line more than a multiple of 4 KB apart:
   * at multiples, a tile's 16 loads or stores would all fall in one set
   * of the L1 cache, which holds fewer ways. */
  WG_VS = WG_KC * WG_T + 16,
  WG_MS = WG_PANELS * WG_MR * WG_T + 16,
  WG_OG = LOOM_CONV_WINOGRAD_WG_M, /* output channels per weight-gradient item: 8 panels of 12 */
  WG_CG = LOOM_CONV_WINOGRAD_WG_K, /* input channels per item: 2 panels of 32 */
};

/* Whether a rank-4 tensor is contiguous. */
static inline int wg_dense(const loom_tensor *t) {
  int64_t step = 1;
  for (int i = 3; i >= 0; --i) {
    if (t->sizes[i] != 1 && t->strides[i] != step) return 0;
    step *= t->sizes[i];
  }
  return 1;
}

/* Whether a rank-4 tensor's strides are all >= 0 (dense, channels last or
 * any other layout a weight's elements are read or written through). */
static inline int wg_strided(const loom_tensor *t) {
  for (int i = 0; i < 4; ++i)
    if (t->strides[i] < 0) return 0;
  return 1;
}

/* A weight gradient's scalar [3]: 1 where dy's planes are padded by one
 * row and column, 0 where not (or absent), -1 for anything else. */
static inline int64_t wg_dy_shift(const loom_kernel_args *args) {
  if (args->num_scalars < 4) return 0;
  const int64_t v = args->scalars[3].i;
  return v == 0 || v == 1 ? v : -1;
}

/* Whether a weight-gradient launch's operands fit its contract, for either
 * variant: partial sums part [chunks, 16, M, K] (dense) over chunks of
 * `tchunk` tile positions, the phases of x [N, 4K, plane] and of dy
 * [N, 4M, plane'] (padded by one or not) in rows `wq` wide holding `gpos` tile positions; float32. */
static inline int wg_wgrad_fits(const loom_kernel_args *args) {
  if (args->num_tensors < 3 || args->num_scalars < 3) return 0;
  const loom_tensor *part = &args->tensors[0], *xp = &args->tensors[1], *dyp = &args->tensors[2];
  const int64_t wq = args->scalars[0].i, gpos = args->scalars[1].i, tchunk = args->scalars[2].i;
  if (part->rank != 4 || xp->rank != 3 || dyp->rank != 3 || part->dtype != LOOM_FLOAT32 ||
      xp->dtype != LOOM_FLOAT32 || dyp->dtype != LOOM_FLOAT32 || !wg_dense(part) ||
      xp->strides[2] != 1 || dyp->strides[2] != 1 || part->sizes[1] != WG_E || wq < 2 ||
      gpos <= 0 || gpos % WG_T != 0 || tchunk <= 0 || tchunk % WG_T != 0)
    return 0;
  const int64_t n_img = xp->sizes[0], shift = wg_dy_shift(args);
  if (shift < 0) return 0;
  return xp->sizes[1] == 4 * part->sizes[3] && dyp->sizes[0] == n_img &&
         dyp->sizes[1] == 4 * part->sizes[2] && xp->sizes[2] >= gpos + wq + 1 &&
         dyp->sizes[2] >= gpos + shift * (wq + 1) &&
         part->sizes[0] == (n_img * gpos + tchunk - 1) / tchunk;
}

/* Where a weight gradient reads element (i, j) of a tile's dY from dy's
 * planes, phases ds apart: phase (i, j) at the tile, or, padded by one,
 * phase (1 - i, 1 - j) at i wq + j past it. */
static inline void wg_dy_offsets(const loom_kernel_args *args, int64_t ds, int64_t off[2][2]) {
  const int64_t wq = args->scalars[0].i, shift = wg_dy_shift(args);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      off[i][j] = shift ? ((1 - i) * 2 + (1 - j)) * ds + i * wq + j : (i * 2 + j) * ds;
}

/* Whether a forward launch's operands fit its contract, for either
 * variant: out [N, M, ho, wo], the transformed weight u [16, panels, K, MR]
 * (dense), the stride-2 phases xp [N, 4K, plane] of rows `wq` wide holding
 * `gpos` tile positions, an optional bias [M]; all float32. */
static inline int wg_forward_fits(const loom_kernel_args *args) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return 0;
  const loom_tensor *out = &args->tensors[0], *u = &args->tensors[1], *xp = &args->tensors[2];
  const loom_tensor *bias = args->num_tensors > 3 ? &args->tensors[3] : NULL;
  const int64_t wq = args->scalars[0].i, gpos = args->scalars[1].i;
  if (out->rank != 4 || u->rank != 4 || xp->rank != 3 || out->dtype != LOOM_FLOAT32 ||
      u->dtype != LOOM_FLOAT32 || xp->dtype != LOOM_FLOAT32 || !wg_dense(u) ||
      xp->strides[2] != 1 || u->sizes[0] != WG_E || u->sizes[3] != WG_MR ||
      (bias && (bias->dtype != LOOM_FLOAT32 || bias->rank != 1 || bias->sizes[0] != out->sizes[1])))
    return 0;
  const int64_t tho = (out->sizes[2] + 1) / 2, two = (out->sizes[3] + 1) / 2;
  return u->sizes[1] == (out->sizes[1] + WG_MR - 1) / WG_MR && xp->sizes[0] == out->sizes[0] &&
         xp->sizes[1] == 4 * u->sizes[2] && wq >= two + 1 && gpos % WG_T == 0 &&
         gpos >= tho * wq && xp->sizes[2] >= gpos + wq + 1;
}

/* A run of a block's tiles that lie in one tile row: lanes [j, j + n) are
 * tiles (ty, tx) ... (ty, tx + n - 1). */
typedef struct wg_run {
  int64_t j, n, ty, tx;
} wg_run;

/* The runs of the block of tiles from grid position q0 that the output
 * keeps (tho x two tiles of rows wq wide); returns how many. */
static inline int64_t wg_runs(int64_t q0, int64_t wq, int64_t tho, int64_t two,
                              wg_run runs[WG_T]) {
  int64_t nruns = 0;
  for (int64_t j = 0; j < WG_T;) {
    const int64_t q = q0 + j, ty = q / wq, tx = q % wq;
    const int64_t n_run = wq - tx < WG_T - j ? wq - tx : WG_T - j;
    if (ty < tho && tx < two)
      runs[nruns++] = (wg_run){j, two - tx < n_run ? two - tx : n_run, ty, tx};
    j += n_run;
  }
  return nruns;
}

#endif /* LOOM_KERNELS_CONV_WINOGRAD_INTERNAL_H */
