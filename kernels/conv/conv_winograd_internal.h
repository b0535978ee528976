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

/* Whether a weight-gradient launch reads x and dy in place: (N, K, H, W)
 * and (N, M, ho, wo), both channels last (channel stride 1) or both by
 * rows (column stride 1), strides >= 0; x padded by scalars [4] top and [5] left (0 to 2). Each
 * tile then reads x's patch as the forward does (wg_forward_image) and
 * dY[i][j] = dy[2 ty + i][2 tx + j], zero outside dy: what the planes
 * would hold. Tiles the output drops (past ceil(wo / 2) columns or
 * ceil(ho / 2) rows) read zeros from both. */
static inline int wg_wgrad_images(const loom_kernel_args *args) {
  return args->num_tensors >= 3 && args->tensors[1].rank == 4 && args->tensors[2].rank == 4;
}

/* An image operand's checks: fp32, strides >= 0, and channel stride 1
 * (channels last) or column stride 1 (rows: NCHW). */
static inline int wg_image_ok(const loom_tensor *t) {
  return t->rank == 4 && t->dtype == LOOM_FLOAT32 && (t->strides[1] == 1 || t->strides[3] == 1) &&
         wg_strided(t);
}

/* Whether an image read in place is read by rows (column stride 1) rather
 * than by runs of channels (channel stride 1, which wins where both are). */
static inline int wg_image_rows(const loom_tensor *t) { return t->strides[1] != 1; }

/* Whether a weight gradient's images are read by rows: unless both have
 * channel stride 1 (then both need column stride 1). */
static inline int wg_images_rows(const loom_tensor *x, const loom_tensor *dy) {
  return x->strides[1] != 1 || dy->strides[1] != 1;
}

/* Whether a weight-gradient launch's operands fit its contract, for either
 * variant: partial sums part [chunks, 16, M, K] (dense) over chunks of
 * `tchunk` tile positions, the phases of x [N, 4K, plane] and of dy
 * [N, 4M, plane'] (padded by one or not) in rows `wq` wide holding `gpos` tile
 * positions, or both images (wg_wgrad_images: any grid of rows wq >=
 * ceil(wo / 2) wide, gpos >= ceil(ho / 2) wq positions per image); float32. */
static inline int wg_wgrad_fits(const loom_kernel_args *args) {
  if (args->num_tensors < 3 || args->num_scalars < 3) return 0;
  const loom_tensor *part = &args->tensors[0], *xp = &args->tensors[1], *dyp = &args->tensors[2];
  const int64_t wq = args->scalars[0].i, gpos = args->scalars[1].i, tchunk = args->scalars[2].i;
  if (part->rank != 4 || part->dtype != LOOM_FLOAT32 || !wg_dense(part) ||
      part->sizes[1] != WG_E || wq < 1 || gpos <= 0 || tchunk <= 0 || tchunk % WG_T != 0)
    return 0;
  const int64_t n_img = xp->sizes[0];
  if (part->sizes[0] != (n_img * gpos + tchunk - 1) / tchunk || dyp->sizes[0] != n_img) return 0;
  if (wg_wgrad_images(args)) {
    if (args->num_scalars < 6 || args->scalars[3].i != 0 || args->scalars[4].i < 0 ||
        args->scalars[4].i > 2 || args->scalars[5].i < 0 || args->scalars[5].i > 2 ||
        !wg_image_ok(xp) || !wg_image_ok(dyp) ||
        (wg_images_rows(xp, dyp) && (xp->strides[3] != 1 || dyp->strides[3] != 1)))
      return 0;
    const int64_t tho = (dyp->sizes[2] + 1) / 2, two = (dyp->sizes[3] + 1) / 2;
    return xp->sizes[1] == part->sizes[3] && dyp->sizes[1] == part->sizes[2] && wq >= two &&
           gpos >= tho * wq;
  }
  if (xp->rank != 3 || dyp->rank != 3 || xp->dtype != LOOM_FLOAT32 ||
      dyp->dtype != LOOM_FLOAT32 || xp->strides[2] != 1 || dyp->strides[2] != 1 || wq < 2 ||
      gpos % WG_T != 0)
    return 0;
  const int64_t shift = wg_dy_shift(args);
  if (shift < 0) return 0;
  return xp->sizes[1] == 4 * part->sizes[3] && dyp->sizes[1] == 4 * part->sizes[2] &&
         xp->sizes[2] >= gpos + wq + 1 && dyp->sizes[2] >= gpos + shift * (wq + 1);
}

/* A grid of tiles over a batch: image n's gpos positions follow image
 * n - 1's, in rows wq wide; the output keeps tho x two of each image's
 * (tile rows ty < tho, columns tx < two) and none past the n_img images.
 * Read from phase planes, each image's positions are a multiple of the
 * blocks (rows wq > two: the planes' columns); read in place, the grid may
 * be dense (wq = two, gpos = tho two), its blocks of WG_T spanning
 * images. */
typedef struct wg_grid {
  int64_t wq, gpos, n_img, tho, two;
} wg_grid;

/* Grid position q: its image, tile row and column; whether the output
 * keeps it. */
static inline int wg_tile(const wg_grid *g, int64_t q, int64_t *n, int64_t *ty, int64_t *tx) {
  const int64_t r = q % g->gpos;
  *n = q / g->gpos, *ty = r / g->wq, *tx = r % g->wq;
  return *n < g->n_img && *ty < g->tho && *tx < g->two;
}

/* The blocks of WG_T positions the grid's n_img images fill (the last
 * one's positions past the grid drop out). */
static inline int64_t wg_blocks(const wg_grid *g) {
  return (g->n_img * g->gpos + WG_T - 1) / WG_T;
}

/* Channel c of the tiles [q0, q0 + WG_T) of grid g over a channels-last
 * or NCHW x, as phase planes would hold them: patch element (r, s) of tile
 * j at d[(4 r + s) WG_T + j] = x[n][c][2 ty + r - top][2 tx + s - left],
 * zero outside the image and for tiles the output drops. */
static inline void wg_gather32(float *d, const loom_tensor *x, const wg_grid *g, int64_t c,
                               int64_t q0, int64_t top, int64_t left) {
  const int64_t h = x->sizes[2], w = x->sizes[3];
  for (int64_t j = 0; j < WG_T; ++j) {
    int64_t n, ty, tx;
    const int keep = wg_tile(g, q0 + j, &n, &ty, &tx);
    const float *img = (const float *)x->data + (keep ? n * x->strides[0] + c * x->strides[1] : 0);
    for (int r = 0; r < 4; ++r)
      for (int s = 0; s < 4; ++s) {
        const int64_t yy = 2 * ty + r - top, xx = 2 * tx + s - left;
        d[(4 * r + s) * WG_T + j] = keep && yy >= 0 && yy < h && xx >= 0 && xx < w
                                        ? img[yy * x->strides[2] + xx * x->strides[3]]
                                        : 0.0f;
      }
  }
}

/* Output channel o of the tiles [q0, q0 + WG_T) of grid g over dy (N, M,
 * ho, wo): dY[i][j] of tile t at d[(2 i + j) WG_T + t], zero outside dy
 * and for tiles the output drops. */
static inline void wg_gather_dy32(float *d, const loom_tensor *dy, const wg_grid *g, int64_t o,
                                  int64_t q0) {
  const int64_t ho = dy->sizes[2], wo = dy->sizes[3];
  for (int64_t t = 0; t < WG_T; ++t) {
    int64_t n, ty, tx;
    const int keep = wg_tile(g, q0 + t, &n, &ty, &tx);
    const float *img = (const float *)dy->data + (keep ? n * dy->strides[0] + o * dy->strides[1] : 0);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        const int64_t yy = 2 * ty + i, xx = 2 * tx + j;
        d[(2 * i + j) * WG_T + t] =
            keep && yy < ho && xx < wo ? img[yy * dy->strides[2] + xx * dy->strides[3]] : 0.0f;
      }
  }
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

/* A forward's image read in place: (N, K, H, W), channel stride 1
 * (channels last) or column stride 1 (rows), strides >= 0, padded by scalars [2] top and [3] left
 * (0 to 2). Where the launch gives it, every tile reads its 4x4 patch
 * x[2 ty + r - top][2 tx + s - left] (zero outside the image), the values
 * conv.pad's planes would hold there. */
static inline int wg_forward_image(const loom_kernel_args *args) {
  return args->num_tensors >= 3 && args->tensors[2].rank == 4;
}

/* Whether a forward launch's operands fit its contract, for either
 * variant: out [N, M, ho, wo], the transformed weight u [16, panels, K, MR]
 * (dense), the stride-2 phases xp [N, 4K, plane] of rows `wq` wide holding
 * `gpos` tile positions (or the image itself, wg_forward_image: any grid
 * of rows wq >= ceil(wo / 2) wide, gpos >= ceil(ho / 2) wq), an optional
 * bias [M]; all float32. */
static inline int wg_forward_fits(const loom_kernel_args *args) {
  if (args->num_tensors < 3 || args->num_scalars < 2) return 0;
  const loom_tensor *out = &args->tensors[0], *u = &args->tensors[1], *xp = &args->tensors[2];
  const loom_tensor *bias = args->num_tensors > 3 ? &args->tensors[3] : NULL;
  const int64_t wq = args->scalars[0].i, gpos = args->scalars[1].i;
  const int image = wg_forward_image(args);
  if (out->rank != 4 || u->rank != 4 || (xp->rank != 3 && !image) ||
      out->dtype != LOOM_FLOAT32 || u->dtype != LOOM_FLOAT32 || xp->dtype != LOOM_FLOAT32 ||
      !wg_dense(u) || u->sizes[0] != WG_E || u->sizes[3] != WG_MR ||
      (bias && (bias->dtype != LOOM_FLOAT32 || bias->rank != 1 || bias->sizes[0] != out->sizes[1])))
    return 0;
  const int64_t tho = (out->sizes[2] + 1) / 2, two = (out->sizes[3] + 1) / 2;
  if (image) {
    if (args->num_scalars < 4 || !wg_image_ok(xp) ||
        args->scalars[2].i < 0 || args->scalars[2].i > 2 || args->scalars[3].i < 0 ||
        args->scalars[3].i > 2 || wq < two || wq < 1)
      return 0;
  } else if (xp->strides[2] != 1 || wq < two + 1 || gpos % WG_T != 0 ||
             xp->sizes[2] < gpos + wq + 1 || xp->sizes[1] != 4 * u->sizes[2]) {
    return 0;
  }
  const int64_t k_n = image ? xp->sizes[1] : xp->sizes[1] / 4;
  return u->sizes[1] == (out->sizes[1] + WG_MR - 1) / WG_MR && xp->sizes[0] == out->sizes[0] &&
         k_n == u->sizes[2] && gpos > 0 && gpos >= tho * wq;
}

/* A forward's grid (wg_grid) from its launch. */
static inline wg_grid wg_forward_grid(const loom_kernel_args *args) {
  const loom_tensor *out = &args->tensors[0];
  return (wg_grid){args->scalars[0].i, args->scalars[1].i, out->sizes[0], (out->sizes[2] + 1) / 2,
                   (out->sizes[3] + 1) / 2};
}

/* A run of a block's tiles that lie in one tile row of image `img`: lanes
 * [j, j + n) are tiles (ty, tx) ... (ty, tx + n - 1). */
typedef struct wg_run {
  int64_t j, n, ty, tx, img;
} wg_run;

/* The runs of the block of tiles from grid position q0 that the output
 * keeps; returns how many. */
static inline int64_t wg_runs(const wg_grid *g, int64_t q0, wg_run runs[WG_T]) {
  int64_t nruns = 0;
  for (int64_t j = 0; j < WG_T;) {
    int64_t n, ty, tx;
    const int keep = wg_tile(g, q0 + j, &n, &ty, &tx);
    const int64_t n_run = g->wq - tx < WG_T - j ? g->wq - tx : WG_T - j;
    if (keep) runs[nruns++] = (wg_run){j, g->two - tx < n_run ? g->two - tx : n_run, ty, tx, n};
    j += n_run;
  }
  return nruns;
}

#endif /* LOOM_KERNELS_CONV_WINOGRAD_INTERNAL_H */
