/* kernels/conv/conv_gemm_internal.h — how the implicit-GEMM convolutions
 * (conv_gemm_avx512.c, conv_gemm_amx.c and their generic twin,
 * conv_gemm_generic.c) cut a tile's positions into runs that one strided
 * read gathers. The lane masks are for files built with AVX-512 flags. */
#ifndef LOOM_KERNELS_CONV_GEMM_INTERNAL_H
#define LOOM_KERNELS_CONV_GEMM_INTERNAL_H

#include <stdint.h>

#include "kernels/conv/conv.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* Positions per col panel: the register tiles' width, fp32 and AMX alike. */
enum { CG_NR = LOOM_GEMM_AVX512_NR };
_Static_assert((int)LOOM_GEMM_AMX_NR == (int)CG_NR, "AMX and fp32 col panels share their width");

/* A run of positions [j0, j0 + cnt) of a tile inside one output row
 * (image n, od, oh) and one panel, starting at column ow0. */
typedef struct cg_seg {
  int64_t n, od, oh, ow0, j0, cnt;
} cg_seg;

#ifdef __AVX512F__
#include <immintrin.h>

/* Lanes [lo, hi) of 16, clipped. */
static inline __mmask16 cg_range_mask(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  return hi > lo ? (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u)) : 0;
}

/* The permutex2var_epi16 indices of the even lanes of two vectors of 32
 * 16-bit values: a stride-2 row's every other element. */
static inline __m512i cg_even_lanes16(void) {
  return _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30,
                          28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
}

/* Lanes [lo, hi) of 32, clipped. */
static inline __mmask32 cg_range_mask32(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 32) hi = 32;
  if (hi <= lo) return 0;
  const __mmask32 upto = hi == 32 ? ~(__mmask32)0 : (((__mmask32)1 << hi) - 1u);
  return upto & ~(((__mmask32)1 << lo) - 1u);
}

#endif /* __AVX512F__ */

/* The geometry scalars (kernels/conv/conv.h) into kernel, stride, padding,
 * dilation and grid. */
static inline void cg_geometry(const loom_scalar *g, int64_t *k, int64_t *s, int64_t *p,
                               int64_t *d, int64_t *o) {
  for (int i = 0; i < 3; ++i)
    k[i] = g[i].i, s[i] = g[3 + i].i, p[i] = g[6 + i].i, d[i] = g[9 + i].i, o[i] = g[12 + i].i;
}

/* How the gather walks a tile's positions:
 * - CG_ROWS: a run of positions per output row, read as one strided row;
 * - CG_FLAT: a 2-d window of stride 1 whose output is as wide as the image
 *   (a "same" padding), over rows stored back to back. Tap (kh, kw) reads
 *   output position q = oh * W + ow at input q + (kh*dh - ph) * W +
 *   (kw*dw - pw), so a run of positions need not stop at a row's end:
 *   lanes whose row or column falls outside the image are masked instead.
 *   Short rows (deep layers) fill whole vectors that way. */
enum { CG_ROWS, CG_FLAT };

static inline int cg_mode(const loom_tensor *img, const int64_t *s, const int64_t *o) {
  const int64_t *sz = img->sizes, *st = img->strides;
  return sz[2] == 1 && o[0] == 1 && s[1] == 1 && s[2] == 1 && o[2] == sz[4] && st[4] == 1 &&
                 st[3] == sz[4]
             ? CG_FLAT
             : CG_ROWS;
}

/* Splits positions [l0, l0 + nl) of the flattened (image, od, oh, ow) grid
 * into segments, which end at a panel's end and at an output row's end (an
 * image's in CG_FLAT); returns how many. */
static inline int cg_segments(int64_t l0, int64_t nl, const int64_t *o, int mode, cg_seg *seg) {
  int n = 0;
  int64_t l = l0, j = 0;
  while (j < nl) {
    int64_t ow = l % o[2], oh = (l / o[2]) % o[1], od = (l / (o[2] * o[1])) % o[0];
    int64_t img = l / (o[2] * o[1] * o[0]);
    int64_t cnt = mode == CG_FLAT ? o[1] * o[2] - (oh * o[2] + ow) : o[2] - ow;
    if (cnt > nl - j) cnt = nl - j;
    int64_t to_panel = CG_NR - j % CG_NR;
    if (cnt > to_panel) cnt = to_panel;
    seg[n++] = (cg_seg){.n = img, .od = od, .oh = oh, .ow0 = ow, .j0 = j, .cnt = cnt};
    j += cnt;
    l += cnt;
  }
  return n;
}

/* The weight gradient's two forms of dy (A, og x k per group): one matrix
 * over every image's positions (batch 1, k = N L: dy laid out (O, N, L)),
 * or one per image summed into the same C (batch N, k = L, C's batch
 * stride 0: dy as it lies, (N, O, L)); and a workspace that holds the
 * packed A of either. */
static inline int cg_wgrad_batch_fits(const loom_gemm_plan *pl, const loom_tensor *c,
                                      const loom_tensor *ws, int64_t images, int64_t positions) {
  const int one = pl->batch1 == 1 && pl->k == images * positions;
  const int each = pl->batch1 == images && images > 1 && pl->k == positions && c->rank == 4 &&
                   c->strides[0] == 0;
  return (one || each) && ws->dtype == LOOM_UINT8 && ws->rank == 1 &&
         ws->sizes[0] >= pl->b_offset;
}

/* The packed A of image `im` (0 for the single matrix) and group `grp`. */
static inline int64_t cg_wgrad_a_mat(const loom_gemm_plan *pl, int64_t im, int64_t grp) {
  return (pl->a_count1 > 1 ? im : 0) * pl->a_count2 + (pl->a_count2 > 1 ? grp : 0);
}

/* How a forward kernel's range cuts C (kernels/conv/conv.h): tiles of tpos
 * positions per batch and group, the last one in `pieces` pieces of C's
 * row panels. */
typedef struct cg_tiling {
  int64_t len, tpos, tiles_n, pieces, units;
} cg_tiling;

/* A forward kernel's arguments (kernels/conv/conv.h): C, A, the image and the
 * optional bias, the plan, the geometry and the tiling. */
typedef struct cg_forward {
  const loom_tensor *c, *a, *img, *bias;
  loom_gemm_plan pl;
  int64_t k[3], s[3], p[3], d[3], o[3];
  cg_tiling tl;
} cg_forward;

/* Reads and checks what the forward kernels share (C's columns one
 * image's positions, or every image's in turn; small images waste less
 * of the last panel that way); returns 0 or a loom_status. Each kernel
 * checks its dtypes and plan variant itself. */
static inline int cg_forward_of(const loom_kernel_args *args, cg_forward *f) {
  if (args->num_tensors < 5 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  f->c = &args->tensors[0], f->a = &args->tensors[1], f->img = &args->tensors[4];
  f->bias = args->num_tensors > 5 ? &args->tensors[5] : NULL;
  const loom_gemm_plan *pl = &f->pl;
  int rc = loom_gemm_plan_init(f->c, f->a, &args->tensors[2], (int32_t)args->scalars[0].i, &f->pl);
  if (rc) return rc;
  cg_geometry(args->scalars + 2, f->k, f->s, f->p, f->d, f->o);
  cg_tiling *t = &f->tl;
  t->len = f->o[0] * f->o[1] * f->o[2];
  t->tpos = args->scalars[1].i;
  t->pieces = args->num_scalars > 2 + LOOM_CONV_NUM_SCALARS
                  ? args->scalars[2 + LOOM_CONV_NUM_SCALARS].i
                  : 1;
  if (f->img->rank != 5 ||
      (!(pl->batch1 == f->img->sizes[0] && pl->n == t->len) &&
       !(pl->batch1 == 1 && pl->n == t->len * f->img->sizes[0])) ||
      t->tpos < 32 || t->tpos > LOOM_CONV_GEMM_POSITIONS || t->tpos % 32 != 0 || t->pieces < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  t->tiles_n = (pl->n + t->tpos - 1) / t->tpos;
  t->units = t->tiles_n - 1 + t->pieces; /* per batch and group */
  return 0;
}

/* Tile `tile` of the range: batch n, group grp, positions [l0, l0 + nl),
 * C's row panels [ip0, ip1). */
typedef struct cg_tile {
  int64_t n, grp, l0, nl, ip0, ip1;
} cg_tile;

static inline cg_tile cg_tile_at(const cg_tiling *t, const loom_gemm_plan *pl, int64_t tile) {
  const int64_t u = tile % t->units, rest = tile / t->units;
  const int64_t tn = u < t->tiles_n - 1 ? u : t->tiles_n - 1, piece = u - tn;
  cg_tile r = {.n = rest / pl->batch2, .grp = rest % pl->batch2, .l0 = tn * t->tpos,
               .ip0 = 0, .ip1 = pl->m_panels};
  r.nl = pl->n - r.l0 < t->tpos ? pl->n - r.l0 : t->tpos;
  if (u >= t->tiles_n - 1) /* the last tile comes in pieces of row panels */
    r.ip0 = pl->m_panels * piece / t->pieces, r.ip1 = pl->m_panels * (piece + 1) / t->pieces;
  return r;
}

#endif /* LOOM_KERNELS_CONV_GEMM_INTERNAL_H */
