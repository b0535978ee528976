/* kernels/conv/conv_gemm_amx.c — bf16 convolutions as implicit GEMMs on AMX
 * tiles (kernels/conv/conv.h). The forward, out[n, g] = W[g] @ col[n, g],
 * gathers its col panels from the image per tile, one k block at a time,
 * straight into the tiles' k-pair layout; with a flipped weight, packed
 * here, it is also the stride-1 input gradient. The weight gradient,
 * dW[g] = dy[g] @ col[g]^T, gathers col rows and pairs them. The sums run
 * in fp32 in a per-thread buffer and reach the bf16 result with one
 * rounding, as the GEMM's do. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_gemm_internal.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"
#include "kernels/conv/im2col_internal.h"
#include "loom/status.h"

enum {
  CA_PANELS = LOOM_CONV_GEMM_POSITIONS / CG_NR,
  CA_KC = 512,   /* the AMX plan's largest k block */
  CA_ROWS = 512, /* output channels summed per pass over the k blocks */
  CA_SEGS = 2 * CA_PANELS + LOOM_CONV_GEMM_POSITIONS,
};

/* col panels [CA_PANELS][kc / 2][32][2] and the sums [CA_ROWS][positions] */
static _Thread_local _Alignas(64) uint16_t ca_cols[CA_PANELS * CA_KC * CG_NR];
static _Thread_local _Alignas(64) float ca_sums[CA_ROWS * LOOM_CONV_GEMM_POSITIONS];

/* How a col row is read at a segment's positions:
 * - CA_RUN: unit stride along the row, one load of the run;
 * - CA_RUN2: stride 2, two loads whose even lanes are kept;
 * - CA_FLAT: a segment of cg_segments' CG_FLAT mode, one load across rows;
 * - CA_LANES: anything else, lane by lane.
 * The first three mask the lanes outside the image per segment and tap,
 * worked out once per tile (up to CA_MASKS masks per segment). */
enum { CA_LANES, CA_RUN, CA_RUN2, CA_FLAT };
enum { CA_MASKS = 25 };

/* What a segment's reads owe to the segment alone. */
typedef struct ca_seg {
  int64_t off;           /* its image and window corner, in elements */
  int64_t id0, ih0, iw0; /* the window corner, which may lie outside */
  int64_t j0;            /* its first position in the tile */
  __mmask16 lo, hi;      /* the pairs it writes, lanes 0-15 and 16-31 */
  const __mmask32 *live; /* its lane masks: by column tap (CA_RUN), two by
                            column tap (CA_RUN2) or by tap (CA_FLAT) */
} ca_seg;

/* A col row: tap t = (kd, kh, kw) of a channel, read from src (NULL: a row
 * past k, all 0). */
typedef struct ca_tap {
  const uint16_t *src; /* the channel's plane, moved by the tap's offsets */
  int64_t td, th, tw;  /* those offsets */
  int kw, t;
} ca_tap;

/* CA_RUN2: the 64 columns from a segment's first, whose even lanes are
 * its positions' values, in two vectors (0 outside the image and past the
 * segment, and where the row has none). */
static inline void ca_load_run2(const ca_tap *tp, const ca_seg *sg, const loom_tensor *img,
                                __m512i *lo, __m512i *hi) {
  *lo = *hi = _mm512_setzero_si512();
  if (tp->src == NULL) return;
  const int64_t id = sg->id0 + tp->td, ih = sg->ih0 + tp->th;
  if ((uint64_t)id >= (uint64_t)img->sizes[2] || (uint64_t)ih >= (uint64_t)img->sizes[3]) return;
  const uint16_t *r = tp->src + sg->off;
  *lo = _mm512_maskz_loadu_epi16(sg->live[2 * tp->kw], r);
  *hi = _mm512_maskz_loadu_epi16(sg->live[2 * tp->kw + 1], r + 32);
}

/* A col row's values at a segment's positions, as the lanes of a vector
 * (lanes past the segment 0). */
static inline __m512i ca_load(const ca_tap *tp, const ca_seg *sg, int64_t cnt, int mode,
                              const loom_tensor *img, const int64_t *s) {
  if (mode == CA_RUN2) {
    __m512i lo, hi;
    ca_load_run2(tp, sg, img, &lo, &hi);
    return _mm512_permutex2var_epi16(lo, cg_even_lanes16(), hi);
  }
  if (tp->src == NULL) return _mm512_setzero_si512();
  const uint16_t *r = tp->src + sg->off;
  if (mode == CA_FLAT) return _mm512_maskz_loadu_epi16(sg->live[tp->t], r);
  const int64_t id = sg->id0 + tp->td, ih = sg->ih0 + tp->th;
  if ((uint64_t)id >= (uint64_t)img->sizes[2] || (uint64_t)ih >= (uint64_t)img->sizes[3])
    return _mm512_setzero_si512();
  if (mode == CA_RUN) return _mm512_maskz_loadu_epi16(sg->live[tp->kw], r);
  /* r is the row at column c0, which may lie outside it */
  _Alignas(64) uint16_t v[32] = {0};
  const int64_t c0 = sg->iw0 + tp->tw, w = img->sizes[4], step = s[2] * img->strides[4];
  for (int64_t q = 0; q < cnt; ++q)
    if (c0 + q * s[2] >= 0 && c0 + q * s[2] < w) v[q] = r[q * step];
  return _mm512_load_si512(v);
}

/* The read mode for a tile's segments, cut by cg_segments in CG_FLAT mode
 * when this returns CA_FLAT, else in CG_ROWS. */
static int ca_mode(const loom_tensor *img, const int64_t *k, const int64_t *s,
                   const int64_t *o) {
  if (cg_mode(img, s, o) == CG_FLAT && k[0] * k[1] * k[2] <= CA_MASKS) return CA_FLAT;
  if (img->strides[4] != 1) return CA_LANES;
  if (s[2] == 1 && k[2] <= CA_MASKS) return CA_RUN;
  return s[2] == 2 && 2 * k[2] <= CA_MASKS ? CA_RUN2 : CA_LANES;
}

/* Col rows in order from `row`: tap t = (kd, kh, kw) of channel c. */
typedef struct ca_walk {
  int64_t c, t, kd, kh, kw;
} ca_walk;

static inline ca_walk ca_walk_from(int64_t row, const int64_t *k) {
  const int64_t taps = k[0] * k[1] * k[2], t = row % taps;
  return (ca_walk){.c = row / taps, .t = t, .kw = t % k[2], .kh = t / k[2] % k[1],
                   .kd = t / (k[2] * k[1])};
}

/* The walk's row read from the image's channels from c0 on (src NULL when
 * `past`: a row past k), then the walk moves to the next row. */
static inline ca_tap ca_walk_tap(ca_walk *w, const loom_tensor *img, int64_t c0,
                                 const int64_t *k, const int64_t *d, int past) {
  const int64_t *st = img->strides;
  ca_tap tap = {.td = w->kd * d[0], .th = w->kh * d[1], .tw = w->kw * d[2], .kw = (int)w->kw,
                .t = (int)w->t};
  tap.src = past ? NULL
                 : (const uint16_t *)img->data + (c0 + w->c) * st[1] + tap.td * st[2] +
                       tap.th * st[3] + tap.tw * st[4];
  ++w->t;
  if (++w->kw == k[2]) {
    w->kw = 0;
    if (++w->kh == k[1]) {
      w->kh = 0;
      if (++w->kd == k[0]) w->kd = 0, w->t = 0, ++w->c;
    }
  }
  return tap;
}

/* The segments' reads, worked out once per tile into sg (lane masks into
 * live). */
static void ca_segs_init(ca_seg *sg, __mmask32 (*live)[CA_MASKS], const cg_seg *seg, int nseg,
                         int mode, const loom_tensor *img, const int64_t *k, const int64_t *s,
                         const int64_t *p, const int64_t *d, const int64_t *o) {
  const int64_t taps = k[0] * k[1] * k[2], *st = img->strides, *sz = img->sizes;
  for (int i = 0; i < nseg; ++i) {
    const int64_t cnt = seg[i].cnt;
    sg[i].id0 = seg[i].od * s[0] - p[0];
    sg[i].ih0 = seg[i].oh * s[1] - p[1];
    sg[i].iw0 = seg[i].ow0 * s[2] - p[2];
    sg[i].off = seg[i].n * st[0] + sg[i].id0 * st[2] + sg[i].ih0 * st[3] + sg[i].iw0 * st[4];
    sg[i].j0 = seg[i].j0;
    sg[i].lo = (__mmask16)cg_range_mask32(0, cnt);
    sg[i].hi = (__mmask16)cg_range_mask32(0, cnt - 16);
    sg[i].live = live[i];
    if (mode == CA_FLAT) {
      /* lane q is output position oh * W + ow0 + q of the image: its
       * window corner, row by row */
      _Alignas(64) int32_t row[32], col[32];
      for (int64_t q = 0, r = sg[i].ih0, c = sg[i].iw0; q < 32; ++q) {
        row[q] = (int32_t)r, col[q] = (int32_t)c;
        if (++c == o[2] - p[2]) c = -p[2], ++r;
      }
      /* the lanes whose row, and whose column, a tap keeps in the image */
      __mmask32 in_row[CA_MASKS], in_col[CA_MASKS];
      for (int64_t j = 0; j < k[1] || j < k[2]; ++j) {
        __mmask32 m[2] = {0, 0};
        for (int h = 0; h < 2; ++h) {
          const int32_t *v = h ? col : row;
          const int64_t off = j * d[1 + h], lim = sz[3 + h];
          if (j >= k[1 + h]) continue;
          for (int half = 0; half < 2; ++half) {
            const __m512i at = _mm512_add_epi32(_mm512_load_si512(v + 16 * half),
                                                _mm512_set1_epi32((int32_t)off));
            m[h] |= (__mmask32)_mm512_cmplt_epu32_mask(at, _mm512_set1_epi32((int32_t)lim))
                    << (16 * half);
          }
        }
        if (j < k[1]) in_row[j] = m[0];
        if (j < k[2]) in_col[j] = m[1];
      }
      for (int64_t t = 0; t < taps; ++t)
        live[i][t] = in_row[t / k[2]] & in_col[t % k[2]] & cg_range_mask32(0, cnt);
    }
    for (int64_t w = 0; w < k[2] && (mode == CA_RUN || mode == CA_RUN2); ++w) {
      const int64_t c0w = sg[i].iw0 + w * d[2]; /* the column of lane 0 */
      if (mode == CA_RUN) {
        live[i][w] = cg_range_mask32(-c0w, sz[4] - c0w) & cg_range_mask32(0, cnt);
      } else {
        const int64_t end = sz[4] - c0w < 2 * cnt - 1 ? sz[4] - c0w : 2 * cnt - 1;
        live[i][2 * w] = cg_range_mask32(-c0w, end);
        live[i][2 * w + 1] = cg_range_mask32(-c0w - 32, end - 32);
      }
    }
  }
}

/* Gathers col rows [k0, k0 + kc) of channels from c0 on (rows past `krows`
 * are 0) at the segments' positions into k-pair panels
 * cols[panel][kc / 2][32][2]; lanes no segment covers are left as they
 * are. Kept apart from its caller: given the per-thread buffer's address
 * as a constant, the compiler looked it up again for every store. */
__attribute__((noipa)) static void ca_gather(uint16_t *cols, int64_t kc, int64_t k0,
                                             int64_t krows, const ca_seg *sg, const cg_seg *seg,
                                             int nseg, int mode, const loom_tensor *img,
                                             int64_t c0, const int64_t *k, const int64_t *s,
                                             const int64_t *d) {
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  ca_walk walk = ca_walk_from(k0, k);
  ca_tap tap[2];
  for (int64_t kk = 0; kk < kc; kk += 2) {
    for (int h = 0; h < 2; ++h) tap[h] = ca_walk_tap(&walk, img, c0, k, d, k0 + kk + h >= krows);
    const int64_t pair_row = kk * CG_NR / 2; /* in 32-bit words */
    for (int i = 0; i < nseg; ++i) {
      /* the pairs of positions 0-15 and 16-31 */
      __m512i p0, p1;
      if (mode == CA_RUN2) {
        /* Position j's values are the low halves of 32-bit word j (of the
         * first or second vector): the second row's, moved to the high
         * halves, complete the pairs without a word permute. */
        __m512i a0, a1, b0, b1;
        ca_load_run2(&tap[0], &sg[i], img, &a0, &a1);
        ca_load_run2(&tap[1], &sg[i], img, &b0, &b1);
        p0 = _mm512_mask_blend_epi16(0xaaaaaaaau, a0, _mm512_slli_epi32(b0, 16));
        p1 = _mm512_mask_blend_epi16(0xaaaaaaaau, a1, _mm512_slli_epi32(b1, 16));
      } else {
        const __m512i v0 = ca_load(&tap[0], &sg[i], seg[i].cnt, mode, img, s);
        const __m512i v1 = ca_load(&tap[1], &sg[i], seg[i].cnt, mode, img, s);
        p0 = _mm512_permutex2var_epi16(v0, lo, v1);
        p1 = sg[i].hi ? _mm512_permutex2var_epi16(v0, hi, v1) : p0;
      }
      /* Position j's pair is the 32-bit word j of its panel's pair row. */
      uint32_t *dst =
          (uint32_t *)(cols + sg[i].j0 / CG_NR * kc * CG_NR) + sg[i].j0 % CG_NR + pair_row;
      if (sg[i].hi == 0xffff) { /* a whole panel */
        _mm512_storeu_si512(dst, p0);
        _mm512_storeu_si512(dst + 16, p1);
        continue;
      }
      _mm512_mask_storeu_epi32(dst, sg[i].lo, p0);
      if (sg[i].hi) _mm512_mask_storeu_epi32(dst + 16, sg[i].hi, p1);
    }
  }
}

int loom_conv_gemm_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  cg_forward f;
  int rc = cg_forward_of(args, &f);
  if (rc) return rc;
  const loom_tensor *c = f.c, *a = f.a, *img = f.img, *bias = f.bias;
  const loom_gemm_plan pl = f.pl;
  const cg_tiling tl = f.tl;
  const int64_t *k = f.k, *s = f.s, *p = f.p, *d = f.d, *o = f.o;
  if (pl.isa != LOOM_GEMM_AMX || !pl.packed_bf16 || pl.kc > CA_KC || pl.nr != CG_NR ||
      c->dtype != LOOM_BFLOAT16 || c->strides[3] != 1 || img->dtype != LOOM_BFLOAT16 ||
      (bias && bias->dtype != LOOM_BFLOAT16))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t cg = pl.k / (k[0] * k[1] * k[2]); /* channels per group */
  const char *ws = (const char *)args->tensors[3].data;
  const int64_t ldt = LOOM_CONV_GEMM_POSITIONS; /* the sums' row stride */
  const int mode = ca_mode(img, k, s, o);
  cg_seg seg[CA_SEGS];
  ca_seg sg[CA_SEGS];
  __mmask32 live[CA_SEGS][CA_MASKS];

  loom_gemm_amx_begin();
  for (int64_t tile = begin; tile < end; ++tile) {
    const cg_tile t = cg_tile_at(&tl, &pl, tile);
    const int64_t n = t.n, grp = t.grp, l0 = t.l0, nl = t.nl, ip0 = t.ip0, ip1 = t.ip1;
    const int64_t npan = (nl + CG_NR - 1) / CG_NR;
    const int nseg =
        cg_segments(n * tl.len + l0, nl, o, mode == CA_FLAT ? CG_FLAT : CG_ROWS, seg);
    ca_segs_init(sg, live, seg, nseg, mode, img, k, s, p, d, o);
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    uint16_t *out = (uint16_t *)c->data + n * c->strides[0] + grp * c->strides[1] + l0;
    /* Rows in passes of CA_ROWS; each pass gathers the col panels anew. */
    for (int64_t q0 = ip0; q0 < ip1; q0 += CA_ROWS / LOOM_GEMM_AMX_MR) {
      const int64_t q1 = q0 + CA_ROWS / LOOM_GEMM_AMX_MR < ip1 ? q0 + CA_ROWS / LOOM_GEMM_AMX_MR
                                                              : ip1;
      const int64_t r0 = q0 * LOOM_GEMM_AMX_MR;
      const int64_t r1 = q1 * LOOM_GEMM_AMX_MR < pl.m ? q1 * LOOM_GEMM_AMX_MR : pl.m;
      /* The bias, or 0 when no k block overwrites the sums. */
      for (int64_t i = r0; i < r1 && (bias || pl.kp == 0); ++i) {
        const float v = bias ? loom_bf16_to_f32(((const uint16_t *)bias->data)
                                                    [(grp * pl.m + i) * bias->strides[0]])
                             : 0.0f;
        for (int64_t j = 0; j < nl; ++j) ca_sums[(i - r0) * ldt + j] = v;
      }
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        /* positions past the tile's are 0 in its last panel */
        if (nl < npan * CG_NR)
          memset(ca_cols + (npan - 1) * kc * CG_NR, 0, (size_t)(kc * CG_NR) * sizeof(uint16_t));
        ca_gather(ca_cols, kc, pc, pl.k, sg, seg, nseg, mode, img, grp * cg, k, s, d);
        for (int64_t jp = 0; jp < npan; ++jp) {
          const int nr = (int)(nl - jp * CG_NR < CG_NR ? nl - jp * CG_NR : CG_NR);
          const uint16_t *bpanel = ca_cols + jp * kc * CG_NR;
          for (int64_t ip = q0; ip < q1; ++ip) {
            const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
            float *ct = ca_sums + (ip * pl.mr - r0) * ldt + jp * CG_NR;
            const int acc = bias != NULL || pc > 0;
            if (pl.a_in_place && mr == pl.mr)
              loom_gemm_ukr_amx_bf16_rows(kc / 2, loom_gemm_elem(a, 0, grp, ip * pl.mr, pc),
                                          a->strides[2], bpanel, ct, ldt, 1.0f, nr, acc);
            else
              loom_gemm_ukr_amx_bf16(
                  kc / 2, ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) * 2,
                  bpanel, ct, ldt, 1.0f, mr, nr, acc);
          }
        }
      }
      for (int64_t i = r0; i < r1; ++i)
        loom_gemm_store_row16_avx512(out + i * c->strides[2], ca_sums + (i - r0) * ldt, nl, 1);
    }
  }
  loom_gemm_amx_end();
  return 0;
}

/* Gathers col rows [r0, r0 + rows) of channels from c0 on at the
 * segments' positions, each into its own row of buf (`ld` apart), the
 * segments' positions from buf's column `col` on. */
__attribute__((noipa)) static void ca_gather_rows(uint16_t *buf, int64_t ld, int64_t col,
                                                  int64_t r0, int64_t rows, const ca_seg *sg,
                                                  const cg_seg *seg, int nseg, int mode,
                                                  const loom_tensor *img, int64_t c0,
                                                  const int64_t *k, const int64_t *s,
                                                  const int64_t *d) {
  ca_walk walk = ca_walk_from(r0, k);
  for (int64_t r = 0; r < rows; ++r) {
    const ca_tap tap = ca_walk_tap(&walk, img, c0, k, d, 0);
    uint16_t *row = buf + r * ld + col;
    for (int i = 0; i < nseg; ++i)
      _mm512_mask_storeu_epi16(row + sg[i].j0, cg_range_mask32(0, seg[i].cnt),
                               ca_load(&tap, &sg[i], seg[i].cnt, mode, img, s));
  }
}

/* k-pairs of one col^T panel, [kc / 2][32][2] */
static _Thread_local _Alignas(64) uint16_t ca_pairs[CA_KC * CG_NR];

int loom_conv_wgrad_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1],
                    *b = &args->tensors[2], *img = &args->tensors[4];
  loom_gemm_plan pl;
  int rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl);
  if (rc) return rc;
  const int64_t qn = args->scalars[1].i; /* dW panels per item */
  if (pl.isa != LOOM_GEMM_AMX || !pl.packed_bf16 || pl.a_in_place || pl.kc > CA_KC ||
      pl.nr != CG_NR || pl.batch1 != 1 || c->dtype != LOOM_BFLOAT16 || c->strides[3] != 1 ||
      img->dtype != LOOM_BFLOAT16 || img->rank != 5 || qn < 1 || qn > CA_PANELS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  (void)a;
  int64_t k[3], s[3], p[3], d[3], o[3];
  cg_geometry(args->scalars + 2, k, s, p, d, o);
  if (o[0] * o[1] * o[2] * img->sizes[0] != pl.k) return LOOM_ERROR_INVALID_ARGUMENT;
  const int mode = ca_mode(img, k, s, o);
  const int64_t cg = pl.n / (k[0] * k[1] * k[2]); /* channels per group */
  const int64_t units = (pl.n_panels + qn - 1) / qn;
  const char *ws = (const char *)args->tensors[3].data;
  const int64_t ldt = LOOM_CONV_GEMM_POSITIONS; /* the sums' row stride */
  cg_seg seg[CA_SEGS];
  ca_seg sg[CA_SEGS];
  __mmask32 live[CA_SEGS][CA_MASKS];

  loom_gemm_amx_begin();
  for (int64_t item = begin; item < end; ++item) {
    const int64_t grp = item / units, q = item % units * qn;
    const int64_t col0 = q * CG_NR;
    const int64_t ncol = pl.n - col0 < qn * CG_NR ? pl.n - col0 : qn * CG_NR;
    const int64_t npan = (ncol + CG_NR - 1) / CG_NR;
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    uint16_t *out = (uint16_t *)c->data + grp * c->strides[1] + col0;
    for (int64_t q0 = 0; q0 < pl.m_panels; q0 += CA_ROWS / LOOM_GEMM_AMX_MR) {
      const int64_t q1 = q0 + CA_ROWS / LOOM_GEMM_AMX_MR < pl.m_panels
                             ? q0 + CA_ROWS / LOOM_GEMM_AMX_MR
                             : pl.m_panels;
      const int64_t r0 = q0 * LOOM_GEMM_AMX_MR;
      const int64_t r1 = q1 * LOOM_GEMM_AMX_MR < pl.m ? q1 * LOOM_GEMM_AMX_MR : pl.m;
      for (int64_t i = r0; i < r1 && pl.kp == 0; ++i) /* else the first k block overwrites */
        memset(ca_sums + (i - r0) * ldt, 0, (size_t)ncol * sizeof(float));
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        const int64_t kreal = pl.k - pc < kc ? pl.k - pc : kc;
        /* col rows [col0, col0 + ncol) over positions [pc, pc + kc), one
         * row of ca_cols each; positions past k are 0 */
        if (kreal < kc) memset(ca_cols, 0, (size_t)(npan * CG_NR * kc) * sizeof(uint16_t));
        for (int64_t j = 0; j < kreal; j += LOOM_CONV_GEMM_POSITIONS) {
          const int64_t nj = kreal - j < LOOM_CONV_GEMM_POSITIONS ? kreal - j
                                                                 : LOOM_CONV_GEMM_POSITIONS;
          const int nseg = cg_segments(pc + j, nj, o, mode == CA_FLAT ? CG_FLAT : CG_ROWS, seg);
          ca_segs_init(sg, live, seg, nseg, mode, img, k, s, p, d, o);
          ca_gather_rows(ca_cols, kc, j, col0, ncol, sg, seg, nseg, mode, img, grp * cg, k, s,
                         d);
        }
        for (int64_t jp = 0; jp < npan; ++jp) {
          const int nr = (int)(ncol - jp * CG_NR < CG_NR ? ncol - jp * CG_NR : CG_NR);
          /* a row's positions 2i, 2i + 1 are its 32-bit word i */
          loom_gemm_pack_t32_avx512((uint32_t *)ca_pairs, ca_cols + jp * CG_NR * kc, kc * 2, nr,
                                    CG_NR, kc / 2);
          for (int64_t ip = q0; ip < q1; ++ip) {
            const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
            loom_gemm_ukr_amx_bf16(
                kc / 2, ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) * 2,
                ca_pairs, ca_sums + (ip * pl.mr - r0) * ldt + jp * CG_NR, ldt, 1.0f, mr, nr,
                pc > 0);
          }
        }
      }
      for (int64_t i = r0; i < r1; ++i)
        loom_gemm_store_row16_avx512(out + i * c->strides[2], ca_sums + (i - r0) * ldt, ncol, 1);
    }
  }
  loom_gemm_amx_end();
  return 0;
}

int loom_conv_pack_flipped_amx_kernel(const loom_kernel_args *args, int64_t begin,
                                      int64_t end) {
  enum { KB = LOOM_GEMM_AMX_KB };
  loom_gemm_plan p;
  if (loom_conv_flip_plan(args, &p) || args->tensors[4].dtype != LOOM_BFLOAT16 ||
      p.isa != LOOM_GEMM_AMX || !p.packed_bf16 || args->tensors[4].sizes[2] > 32)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *w = &args->tensors[4];
  const int64_t groups = args->tensors[1].sizes[1], cg = p.m;
  const int64_t taps = w->sizes[2], og = w->sizes[0] / groups;
  const int64_t units = (p.m_panels + LOOM_CONV_FLIP_PANELS - 1) / LOOM_CONV_FLIP_PANELS;
  const uint16_t *src = (const uint16_t *)w->data;
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                                        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                        1, 0);
  const __mmask32 row = cg_range_mask32(0, taps);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t g = u / units, p0 = u % units * LOOM_CONV_FLIP_PANELS;
    const int64_t p1 = p0 + LOOM_CONV_FLIP_PANELS < p.m_panels ? p0 + LOOM_CONV_FLIP_PANELS
                                                               : p.m_panels;
    uint16_t *base = (uint16_t *)((char *)args->tensors[3].data + p.a_offset + g * p.a_bytes);
    for (int64_t panel = p0; panel < p1; ++panel) {
      const int64_t c0 = panel * KB, lanes = cg - c0 < KB ? cg - c0 : KB;
      /* rows past the channels and k past K stay 0 */
      for (int64_t pc = 0; pc < p.kp && (lanes < KB || p.k < p.kp); pc += p.kc) {
        const int64_t kcur = p.kp - pc < p.kc ? p.kp - pc : p.kc;
        memset(base + loom_gemm_panel_offset(&p, p.m_panels, KB, pc, panel), 0,
               (size_t)(kcur * KB) * sizeof(uint16_t));
      }
      /* k = o * taps + j holds w[o][c][taps - 1 - j] for row c: each
       * output's row of taps, reversed, lands in one or two 32-k steps */
      for (int64_t o = 0; o < og; ++o) {
        const int64_t k0 = o * taps, pc = k0 / p.kc * p.kc, kk = k0 - pc;
        const int64_t n1 = KB - kk % KB < taps ? KB - kk % KB : taps;
        const int64_t k1 = k0 + n1, pc1 = k1 / p.kc * p.kc, kk1 = k1 - pc1;
        uint16_t *d0 = base + loom_gemm_panel_offset(&p, p.m_panels, KB, pc, panel) +
                       kk / KB * KB * KB + kk % KB;
        uint16_t *d1 = base + loom_gemm_panel_offset(&p, p.m_panels, KB, pc1, panel) +
                       kk1 / KB * KB * KB;
        const __m512i first = _mm512_sub_epi16(_mm512_set1_epi16((short)(taps - 1)), iota);
        const __m512i rest = _mm512_sub_epi16(_mm512_set1_epi16((short)(taps - 1 - n1)), iota);
        const uint16_t *s = src + ((g * og + o) * cg + c0) * taps;
        for (int64_t i = 0; i < lanes; ++i, s += taps) {
          const __m512i v = _mm512_maskz_loadu_epi16(row, s);
          _mm512_mask_storeu_epi16(d0 + i * KB, cg_range_mask32(0, n1),
                                   _mm512_permutexvar_epi16(first, v));
          if (n1 < taps)
            _mm512_mask_storeu_epi16(d1 + i * KB, cg_range_mask32(0, taps - n1),
                                     _mm512_permutexvar_epi16(rest, v));
        }
      }
    }
  }
  return 0;
}
