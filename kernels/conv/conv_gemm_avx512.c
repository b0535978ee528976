/* kernels/conv/conv_gemm_avx512.c — convolution as implicit GEMMs:
 *   forward:         out[n, g] (og x L) = W[g] (og x C/G*K) @ col[n, g]
 *   weight gradient: dW[g] (og x C/G*K) = dy[g] (og x N*L) @ col[g]^T
 * where the col panels are gathered from the image straight into a stack
 * buffer, one k block at a time, and consumed while they are still in
 * cache. Nothing of the (K times larger) col matrix is written to memory. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_gemm_internal.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"
#include "loom/status.h"

enum {
  CG_PANELS = LOOM_CONV_GEMM_POSITIONS / LOOM_GEMM_AVX512_NR,
  CG_KC = 256, /* the fp32 plan's k block; the stack buffer is sized for it */
};

/* The first w (<= 16) lanes of v to dst: a whole-vector store when it can
 * be, since masked stores are slower on some cores. */
static inline void cg_store(float *dst, int64_t w, __m512 v) {
  if (w == 16) _mm512_storeu_ps(dst, v);
  else _mm512_mask_storeu_ps(dst, (__mmask16)((1u << w) - 1u), v);
}

/* Gathers col rows [k0, k0 + kn) (rows are (c - c0, kd, kh, kw)) at the
 * segments' positions into panels buf[panel][kk][32], panels `ld` rows
 * apart; lanes no segment covers are left as they are. */
static void cg_gather(float *buf, int64_t ld, int64_t kn, int64_t k0, const cg_seg *seg,
                      int nseg, const loom_tensor *img, int64_t c0,
                      const int64_t *k, const int64_t *s, const int64_t *p,
                      const int64_t *d, const int64_t *o) {
  const int64_t taps = k[0] * k[1] * k[2];
  const float *x = (const float *)img->data;
  const int64_t *st = img->strides, *sz = img->sizes;
  /* What each segment's addresses do not owe to the row: its image, its
   * window origin and its place in the panels. */
  int64_t img_off[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC];
  int64_t od0[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC];
  int64_t oh0[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC];
  int64_t ow0[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC];
  int64_t dst0[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC];
  for (int i = 0; i < nseg; ++i) {
    img_off[i] = seg[i].n * st[0];
    od0[i] = seg[i].od * s[0] - p[0];
    oh0[i] = seg[i].oh * s[1] - p[1];
    ow0[i] = seg[i].ow0 * s[2] - p[2];
    dst0[i] = (seg[i].j0 / LOOM_GEMM_AVX512_NR) * ld * LOOM_GEMM_AVX512_NR +
              seg[i].j0 % LOOM_GEMM_AVX512_NR;
  }
  const int unit = s[2] == 1 && st[4] == 1, mode = cg_mode(img, s, o);
  /* Flat runs: each lane's window corner (row, column), by place in the
   * panels. */
  int32_t prow[CG_KC], pcol[CG_KC];
  for (int i = 0; i < nseg && mode == CG_FLAT; ++i)
    for (int64_t q = 0; q < seg[i].cnt; ++q) {
      const int64_t pos = seg[i].oh * o[2] + seg[i].ow0 + q;
      prow[seg[i].j0 + q] = (int32_t)(pos / o[2] - p[1]);
      pcol[seg[i].j0 + q] = (int32_t)(pos % o[2] - p[2]);
    }
  /* Stride 2 along rows: which lanes of a segment's two 16-column loads
   * lie inside the row depends on the segment, the column tap and the
   * 16-position chunk only: worked out once for all rows and channels. */
  enum { S2_TAPS = 4 };
  const int s2 = mode == CG_ROWS && s[2] == 2 && st[4] == 1 && k[2] <= S2_TAPS;
  __mmask16 s2m[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC][S2_TAPS][2][2];
  for (int i = 0; i < nseg && s2; ++i)
    for (int64_t w = 0; w < k[2]; ++w)
      for (int64_t q = 0; q < seg[i].cnt; q += 16) {
        const int64_t i0 = ow0[i] + w * d[2] + 2 * q; /* input column of lane 0 */
        const int64_t lo = i0 < 0 ? -i0 : 0, hi = sz[4] - i0; /* valid [lo, hi) */
        s2m[i][w][q / 16][0] = cg_range_mask(lo, hi);
        s2m[i][w][q / 16][1] = cg_range_mask(lo - 16, hi - 16);
      }
  /* Three column taps of stride 2 and dilation 1 (3x3 windows) read one
   * run of the row, 2 * 16 + 1 columns per 16 positions: loaded once, with
   * the columns outside the row zeroed, for all three. */
  const int trio = s2 && k[2] == 3 && d[2] == 1;
  __mmask16 t3m[2 * CG_KC / LOOM_GEMM_AVX512_NR + CG_KC][2][3];
  for (int i = 0; i < nseg && trio; ++i)
    for (int64_t q = 0; q < seg[i].cnt; q += 16) {
      const int64_t i0 = ow0[i] + 2 * q; /* the first tap's column of lane 0 */
      const int64_t lo = i0 < 0 ? -i0 : 0, hi = sz[4] - i0;
      for (int v = 0; v < 3; ++v) t3m[i][q / 16][v] = cg_range_mask(lo - 16 * v, hi - 16 * v);
    }
  int64_t c = c0 + k0 / taps, t = k0 % taps;
  int64_t kw = t % k[2], kh = (t / k[2]) % k[1], kd = t / (k[2] * k[1]);
  for (int64_t kk = 0; kk < kn; ++kk) {
    const float *plane = x + c * st[1];
    const int64_t td = kd * d[0], th = kh * d[1], tw = kw * d[2];
    float *drow = buf + kk * LOOM_GEMM_AVX512_NR;
    if (trio && kw == 0 && kk + 2 < kn) {
      const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                            6, 4, 2, 0);
      const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
      for (int i = 0; i < nseg; ++i) {
        const int64_t cnt = seg[i].cnt;
        float *dst = drow + dst0[i];
        const int64_t id = od0[i] + td, ih = oh0[i] + th;
        if (id < 0 || id >= sz[2] || ih < 0 || ih >= sz[3]) {
          for (int r = 0; r < 3; ++r)
            for (int64_t q = 0; q < cnt; ++q) dst[r * LOOM_GEMM_AVX512_NR + q] = 0.0f;
          continue;
        }
        const float *row = plane + img_off[i] + id * st[2] + ih * st[3];
        for (int64_t q = 0; q < cnt; q += 16) {
          const int64_t i0 = ow0[i] + 2 * q, w = cnt - q < 16 ? cnt - q : 16;
          const __mmask16 *m = t3m[i][q / 16];
          const __m512 v0 = _mm512_maskz_loadu_ps(m[0], row + i0);
          const __m512 v1 = _mm512_maskz_loadu_ps(m[1], row + i0 + 16);
          const __m512 v2 = _mm512_maskz_loadu_ps(m[2], row + i0 + 32);
          _mm_prefetch((const char *)(row + i0 + 2 * st[1]), _MM_HINT_T0);
          _mm_prefetch((const char *)(row + i0 + 16 + 2 * st[1]), _MM_HINT_T0);
          /* columns i0 + 2l, i0 + 1 + 2l and i0 + 2 + 2l */
          const __m512 a0 = _mm512_castsi512_ps(
              _mm512_alignr_epi32(_mm512_castps_si512(v1), _mm512_castps_si512(v0), 2));
          const __m512 a1 = _mm512_castsi512_ps(
              _mm512_alignr_epi32(_mm512_castps_si512(v2), _mm512_castps_si512(v1), 2));
          cg_store(dst + q, w, _mm512_permutex2var_ps(v0, even, v1));
          cg_store(dst + LOOM_GEMM_AVX512_NR + q, w, _mm512_permutex2var_ps(v0, odd, v1));
          cg_store(dst + 2 * LOOM_GEMM_AVX512_NR + q, w, _mm512_permutex2var_ps(a0, even, a1));
        }
      }
      kk += 2, kw = 2; /* the next row's taps follow */
    } else {
      for (int i = 0; i < nseg; ++i) {
        const int64_t cnt = seg[i].cnt;
        float *dst = drow + dst0[i];
        const int64_t id = od0[i] + td, ih = oh0[i] + th, iw0 = ow0[i] + tw;
        if (id < 0 || id >= sz[2]) {
          for (int64_t q = 0; q < cnt; ++q) dst[q] = 0.0f;
          continue;
        }
        if (mode == CG_FLAT) {
          /* The run's first position reads src; the others follow it. */
          const float *src = plane + img_off[i] + id * st[2] + ih * st[3] + iw0;
          const int32_t *r = prow + seg[i].j0, *cl = pcol + seg[i].j0;
          const __m512i dh = _mm512_set1_epi32((int)th), hh = _mm512_set1_epi32((int)sz[3]);
          const __m512i dw = _mm512_set1_epi32((int)tw), ww = _mm512_set1_epi32((int)sz[4]);
          for (int64_t q = 0; q < cnt; q += 16) {
            const int64_t w = cnt - q < 16 ? cnt - q : 16;
            const __mmask16 live = cg_range_mask(0, w);
            __mmask16 m = _mm512_mask_cmplt_epu32_mask(
                live, _mm512_add_epi32(_mm512_maskz_loadu_epi32(live, r + q), dh), hh);
            m = _mm512_mask_cmplt_epu32_mask(
                m, _mm512_add_epi32(_mm512_maskz_loadu_epi32(live, cl + q), dw), ww);
            _mm_prefetch((const char *)(src + q + 2 * st[1]), _MM_HINT_T0);
            cg_store(dst + q, w, _mm512_maskz_loadu_ps(m, src + q));
          }
          continue;
        }
        if (ih < 0 || ih >= sz[3]) {
          for (int64_t q = 0; q < cnt; ++q) dst[q] = 0.0f;
          continue;
        }
        const float *row = plane + img_off[i] + id * st[2] + ih * st[3];
        if (unit) {
          /* Lanes whose column falls outside the row load as zero. */
          const int64_t lo = iw0 < 0 ? -iw0 : 0;
          const int64_t hi = sz[4] - iw0 < cnt ? sz[4] - iw0 : cnt;
          for (int64_t q = 0; q < cnt; q += 16) {
            int64_t w = cnt - q < 16 ? cnt - q : 16;
            __m512 v = _mm512_maskz_loadu_ps(cg_range_mask(lo - q, hi - q), row + (iw0 + q));
            /* Channels are a plane apart, which no hardware prefetcher
             * follows: fetch the same place two channels on. */
            _mm_prefetch((const char *)(row + (iw0 + q) + 2 * st[1]), _MM_HINT_T0);
            cg_store(dst + q, w, v);
          }
        } else if (s[2] == 2 && st[4] == 1) {
          /* Stride 2: two loads of 16 neighbours, the even lanes kept. */
          const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                                6, 4, 2, 0);
          for (int64_t q = 0; q < cnt; q += 16) {
            const int64_t i0 = iw0 + 2 * q; /* input column of lane 0 */
            __mmask16 m0, m1;
            if (s2) {
              m0 = s2m[i][kw][q / 16][0], m1 = s2m[i][kw][q / 16][1];
            } else {
              const int64_t lo = i0 < 0 ? -i0 : 0, hi = sz[4] - i0; /* valid [lo, hi) */
              m0 = cg_range_mask(lo, hi), m1 = cg_range_mask(lo - 16, hi - 16);
            }
            __m512 v0 = _mm512_maskz_loadu_ps(m0, row + i0);
            __m512 v1 = _mm512_maskz_loadu_ps(m1, row + i0 + 16);
            if (kw == 0) { /* the row's other taps read the same lines */
              _mm_prefetch((const char *)(row + i0 + 2 * st[1]), _MM_HINT_T0);
              _mm_prefetch((const char *)(row + i0 + 16 + 2 * st[1]), _MM_HINT_T0);
            }
            int64_t w = cnt - q < 16 ? cnt - q : 16;
            cg_store(dst + q, w, _mm512_permutex2var_ps(v0, even, v1));
          }
        } else {
          for (int64_t q = 0; q < cnt; ++q) {
            int64_t iw = iw0 + q * s[2];
            dst[q] = iw >= 0 && iw < sz[4] ? row[iw * st[4]] : 0.0f;
          }
        }
      }
    }
    /* Next row: taps (kd, kh, kw) in order, then the next channel. */
    if (++kw == k[2]) {
      kw = 0;
      if (++kh == k[1]) {
        kh = 0;
        if (++kd == k[0]) kd = 0, ++c;
      }
    }
  }
}

int loom_conv_gemm_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
  cg_forward f;
  int rc = cg_forward_of(args, &f);
  if (rc) return rc;
  const loom_tensor *c = f.c, *a = f.a, *img = f.img, *bias = f.bias;
  const loom_gemm_plan pl = f.pl;
  const cg_tiling tl = f.tl;
  const int64_t *k = f.k, *s = f.s, *p = f.p, *d = f.d, *o = f.o;
  if (pl.packed_bf16 || pl.use_acc || pl.kc > CG_KC || pl.nr != LOOM_GEMM_AVX512_NR ||
      c->dtype != LOOM_FLOAT32 || img->dtype != LOOM_FLOAT32 ||
      (bias && bias->dtype != LOOM_FLOAT32))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  const int64_t cg = (pl.k) / (k[0] * k[1] * k[2]); /* channels per group */
  float buf[CG_PANELS * CG_KC * LOOM_GEMM_AVX512_NR];
  cg_seg seg[2 * CG_PANELS + LOOM_CONV_GEMM_POSITIONS];

  for (int64_t tile = begin; tile < end; ++tile) {
    const cg_tile t = cg_tile_at(&tl, &pl, tile);
    const int64_t n = t.n, grp = t.grp, l0 = t.l0, nl = t.nl, ip0 = t.ip0, ip1 = t.ip1;
    const int64_t r0 = ip0 * pl.mr, r1 = ip1 * pl.mr < pl.m ? ip1 * pl.mr : pl.m;
    int64_t npan = (nl + LOOM_GEMM_AVX512_NR - 1) / LOOM_GEMM_AVX512_NR;
    int nseg = cg_segments(n * tl.len + l0, nl, o, cg_mode(img, s, o), seg);
    float *tc = (float *)c->data + n * c->strides[0] + grp * c->strides[1] + l0;
    const int64_t ldt = c->strides[2];
    /* Without a bias the first k block overwrites the tile. */
    for (int64_t i = r0; i < r1 && (bias || pl.kp == 0); ++i) {
      float v = bias ? ((const float *)bias->data)[(grp * pl.m + i) * bias->strides[0]] : 0.0f;
      for (int64_t j = 0; j < nl; ++j) tc[i * ldt + j] = v;
    }
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
      int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
      if (nl < npan * LOOM_GEMM_AVX512_NR)
        memset(buf + (npan - 1) * kc * LOOM_GEMM_AVX512_NR, 0,
               (size_t)(kc * LOOM_GEMM_AVX512_NR) * sizeof(float));
      cg_gather(buf, kc, kc, pc, seg, nseg, img, grp * cg, k, s, p, d, o);
      for (int64_t jp = 0; jp < npan; ++jp) {
        int nr = (int)(nl - jp * LOOM_GEMM_AVX512_NR < LOOM_GEMM_AVX512_NR
                           ? nl - jp * LOOM_GEMM_AVX512_NR
                           : LOOM_GEMM_AVX512_NR);
        const float *bpanel = buf + jp * kc * LOOM_GEMM_AVX512_NR;
        for (int64_t ip = ip0; ip < ip1; ++ip) {
          const char *apanel = ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) * 4;
          int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          float *ct = tc + ip * pl.mr * ldt + jp * LOOM_GEMM_AVX512_NR;
          if (pl.a_in_place && mr == pl.mr)
            loom_gemm_ukr_avx512_f32_rows(kc, loom_gemm_elem(a, 0, grp, ip * pl.mr, pc),
                                          a->strides[2], bpanel, ct, ldt, 1.0f, nr,
                                          bias != NULL || pc > 0);
          else
            ukr(kc, apanel, bpanel, ct, ldt, 1.0f, mr, nr, bias != NULL || pc > 0);
        }
      }
    }
  }
  return 0;
}

int loom_conv_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1],
                    *b = &args->tensors[2], *img = &args->tensors[4];
  loom_gemm_plan pl;
  int rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl);
  if (rc) return rc;
  if (pl.packed_bf16 || pl.use_acc || pl.kc > CG_KC || pl.nr != LOOM_GEMM_AVX512_NR ||
      c->dtype != LOOM_FLOAT32 || img->dtype != LOOM_FLOAT32 || img->rank != 5)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t k[3], s[3], p[3], d[3], o[3];
  cg_geometry(args->scalars + 2, k, s, p, d, o);
  if (!cg_wgrad_batch_fits(&pl, c, &args->tensors[3], img->sizes[0], o[0] * o[1] * o[2]))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  const int64_t cg = pl.n / (k[0] * k[1] * k[2]); /* channels per group */
  float buf[CG_KC * LOOM_GEMM_AVX512_NR], bt[CG_KC * LOOM_GEMM_AVX512_NR];
  cg_seg seg[2 * (CG_KC / LOOM_GEMM_AVX512_NR) + CG_KC];

  for (int64_t tile = begin; tile < end; ++tile) {
    int64_t q = tile % pl.n_panels, grp = tile / pl.n_panels;
    int64_t r0 = q * LOOM_GEMM_AVX512_NR;
    int64_t rows = pl.n - r0 < LOOM_GEMM_AVX512_NR ? pl.n - r0 : LOOM_GEMM_AVX512_NR;
    float *tc = (float *)c->data + grp * c->strides[1] + r0;
    const int64_t ldt = c->strides[2];
    for (int64_t i = 0; i < pl.m && pl.kp == 0; ++i) /* else the first k block overwrites */
      for (int64_t j = 0; j < rows; ++j) tc[i * ldt + j] = 0.0f;
    for (int64_t im = 0; im < pl.batch1; ++im) { /* images one at a time, or all at once */
      const char *ap = ws + pl.a_offset + cg_wgrad_a_mat(&pl, im, grp) * pl.a_bytes;
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        int64_t panels = (kc + 31) / 32;
        /* Rows past the weight's end and positions past the block's are 0. */
        if (rows < 32 || kc < panels * 32) memset(buf, 0, sizeof buf);
        int nseg = cg_segments(im * pl.k + pc, kc, o, cg_mode(img, s, o), seg);
        cg_gather(buf, 32, rows, r0, seg, nseg, img, grp * cg, k, s, p, d, o);
        loom_gemm_transpose_panels32(bt, buf, kc);
        for (int64_t ip = 0; ip < pl.m_panels; ++ip) {
          const char *apanel = ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) * 4;
          int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          ukr(kc, apanel, bt, tc + ip * pl.mr * ldt, ldt, 1.0f, mr, (int)rows, im > 0 || pc > 0);
        }
      }
    }
  }
  return 0;
}
