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
