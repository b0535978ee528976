/* kernels/conv/conv_padded_internal.h — what the padded-row convolutions
 * (conv_padded_avx512.c and its generic twin, conv_padded_generic.c)
 * share: their geometry, and the walk over col rows as offsets into the
 * phase planes. */
#ifndef LOOM_KERNELS_CONV_PADDED_INTERNAL_H
#define LOOM_KERNELS_CONV_PADDED_INTERNAL_H

#include <stdint.h>

#include "kernels/conv/conv.h"
#include "loom/kernels/gemm.h"
#include "loom/status.h"

enum {
  CP_POS = LOOM_CONV_GEMM_POSITIONS,
  CP_KC = 256,    /* the fp32 plans' k block; the stack buffers are sized for it */
  CP_MROWS = 192, /* output channels per pass over a tile: 16 AVX-512 register tiles */
  CP_NR_MAX = 32, /* the widest register tile's columns */
};

typedef struct cp_geom {
  int64_t kh, kw, sh, sw, dh, dw, ho, wo, wq;
} cp_geom;

/* The geometry scalars of kernels/conv/conv.h, then [17] wq; 2-d. */
static inline int cp_geometry(const loom_kernel_args *args, cp_geom *g) {
  if (args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS + 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_scalar *s = args->scalars + 2;
  *g = (cp_geom){.kh = s[1].i, .kw = s[2].i, .sh = s[4].i, .sw = s[5].i, .dh = s[10].i,
                 .dw = s[11].i, .ho = s[13].i, .wo = s[14].i, .wq = args->scalars[17].i};
  if (s[0].i != 1 || s[3].i != 1 || s[12].i != 1 || g->kh < 1 || g->kw < 1 || g->sh < 1 ||
      g->sw < 1 || g->dh < 1 || g->dw < 1 || g->wq < g->wo + g->dw * (g->kw - 1) / g->sw)
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

/* How far past a grid position the window's last tap reads. */
static inline int64_t cp_halo(const cp_geom *g) {
  return g->dh * (g->kh - 1) / g->sh * g->wq + g->dw * (g->kw - 1) / g->sw;
}

/* Whether a weight-gradient launch's operands match its plan, whatever the
 * variant: the padded phases xp [C, images * cg * phases, plane] with k
 * runs of 32 (gpad) that never straddle images, `kchunk` k per item, at
 * most LOOM_CONV_WGRAD_MAX_PANELS panels (qn) per item, and the partial
 * sums part [k chunks, groups, m, n]. */
static inline int cp_wgrad_fits(const loom_gemm_plan *pl, const cp_geom *g, const loom_tensor *xp,
                                const loom_tensor *part, int64_t gpad, int64_t kchunk,
                                int64_t qn) {
  const int64_t taps = g->kh * g->kw;
  return pl->batch1 == 1 && xp->rank == 3 && xp->dtype == LOOM_FLOAT32 &&
         xp->strides[2] == 1 && gpad > 0 && gpad % 32 == 0 && pl->k == xp->sizes[0] * gpad &&
         pl->n % taps == 0 && xp->sizes[1] == pl->batch2 * (pl->n / taps) * g->sh * g->sw &&
         kchunk > 0 && kchunk % pl->kc == 0 && qn >= 1 && qn <= LOOM_CONV_WGRAD_MAX_PANELS &&
         part->rank == 4 && part->dtype == LOOM_FLOAT32 &&
         part->sizes[0] == (pl->kp + kchunk - 1) / kchunk && part->sizes[1] == pl->batch2 &&
         part->sizes[2] == pl->m && part->sizes[3] == pl->n && part->strides[3] == 1 &&
         xp->sizes[2] >= gpad + cp_halo(g);
}

/* Walks col rows (c, kh, kw) in order: the current row's plane offset. */
typedef struct cp_rows {
  int64_t c, th, tw;
} cp_rows;

static inline cp_rows cp_rows_at(const cp_geom *g, int64_t k) {
  const int64_t taps = g->kh * g->kw, t = k % taps;
  return (cp_rows){.c = k / taps, .th = t / g->kw, .tw = t % g->kw};
}

/* The row's offset from its group's first phase plane; planes `plane`
 * apart, sh * sw phases per channel. */
static inline int64_t cp_offset(const cp_geom *g, const cp_rows *r, int64_t plane) {
  const int64_t h = r->th * g->dh, w = r->tw * g->dw;
  return ((r->c * g->sh + h % g->sh) * g->sw + w % g->sw) * plane + h / g->sh * g->wq +
         w / g->sw;
}

static inline void cp_next(const cp_geom *g, cp_rows *r) {
  if (++r->tw == g->kw) {
    r->tw = 0;
    if (++r->th == g->kh) r->th = 0, ++r->c;
  }
}

/* The col rows of panel q (nr rows, those below n live) as plane
 * offsets; returns how many are live. */
static inline int64_t cp_panel_rows(const cp_geom *g, int64_t q, int64_t nr, int64_t n,
                                    int64_t plane, int64_t *roff) {
  const int64_t r0 = q * nr, rows = n - r0 < nr ? n - r0 : nr;
  cp_rows r = cp_rows_at(g, r0);
  for (int64_t rr = 0; rr < rows; ++rr, cp_next(g, &r)) roff[rr] = cp_offset(g, &r, plane);
  return rows;
}

#endif /* LOOM_KERNELS_CONV_PADDED_INTERNAL_H */
