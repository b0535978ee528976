/* kernels/conv/conv_padded_avx512.c — 2-d convolutions as implicit GEMMs over
 * a zero-padded image split into stride phases (loom_conv_pad_kernel).
 *
 * With stride 1 and the image's rows padded to width wq, window position
 * (y, x) and tap (kh, kw) read plane element q + kh*dh*wq + kw*dw, where
 * q = y*wq + x. With stride (sh, sw) the same holds inside phase plane
 * (kh*dh % sh, kw*dw % sw), at offset (kh*dh / sh)*wq + kw*dw / sw. So over
 * the grid of q in [0, ho*wq) (columns x >= wo are computed and thrown
 * away) every col row is one contiguous run of a plane: gathering a panel
 * is plain vector copies, with no row boundaries, masks or bounds checks.
 * The forward sums the unpadded kernel's products in its k order, so its
 * results are that kernel's bits. The weight gradient's k runs over the
 * padded grid, where the gradient is zero-filled: the same products plus
 * zeros, in k blocks that fall elsewhere. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_padded_internal.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"
#include "loom/status.h"

enum {
  CP_NR = LOOM_GEMM_AVX512_NR,
  CP_PANELS = CP_POS / CP_NR,
};

/* 32 floats of a col row into a panel row. */
static inline void cp_copy32(float *dst, const float *src) {
  _mm512_storeu_ps(dst, _mm512_loadu_ps(src));
  _mm512_storeu_ps(dst + 16, _mm512_loadu_ps(src + 16));
}

/* Channels are planes apart, which no hardware prefetcher follows: on a
 * channel's first tap, fetch `lines` lines of the channel two on. */
static void cp_prefetch(const cp_rows *r, const float *src, int64_t channel, int64_t lines) {
  if (r->th != 0 || r->tw != 0) return;
  for (int64_t l = 0; l < lines; ++l)
    _mm_prefetch((const char *)(src + 2 * channel + 16 * l), _MM_HINT_T0);
}

/* A panel's 32 grid positions from q0 (of `grid`, rows wq wide; columns
 * x < wo kept) of `rows` output channels from o0 in image n, channel i's at
 * t + i * CP_POS, into a channels-last out: 16 channels at a time, turned
 * by 16 x 16 transposes into runs of channels at each position, where a
 * channel at a time wrote one float per position. */
static void cp_store_channels_last(const loom_tensor *out, int64_t n, int64_t o0, int64_t rows,
                                   const float *t, int64_t q0, int64_t grid, int64_t wq,
                                   int64_t wo) {
  const int64_t q1 = q0 + CP_NR < grid ? q0 + CP_NR : grid;
  float *img = (float *)out->data + n * out->strides[0] + o0;
  for (int64_t y = q0 / wq; y * wq < q1; ++y) {
    const int64_t x0 = q0 > y * wq ? q0 - y * wq : 0;
    const int64_t x1 = q1 - y * wq < wo ? q1 - y * wq : wo;
    float *row = img + y * out->strides[2];
    for (int64_t c0 = 0; c0 < rows; c0 += 16) {
      const int64_t lanes = rows - c0 < 16 ? rows - c0 : 16;
      const __mmask16 cm = (__mmask16)((1u << lanes) - 1u);
      for (int64_t xb = x0; xb < x1; xb += 16) {
        const int64_t live = x1 - xb < 16 ? x1 - xb : 16;
        const __mmask16 pm = (__mmask16)((1u << live) - 1u);
        const float *src = t + c0 * CP_POS + y * wq + xb - q0;
        __m512i v[16];
        for (int64_t k = 0; k < 16; ++k)
          v[k] = k < lanes ? _mm512_castps_si512(_mm512_maskz_loadu_ps(pm, src + k * CP_POS))
                           : _mm512_setzero_si512();
        loom_gemm_transpose16(v);
        for (int64_t q = 0; q < live; ++q)
          _mm512_mask_storeu_ps(row + c0 + (xb + q) * out->strides[3], cm,
                                _mm512_castsi512_ps(v[q]));
      }
    }
  }
}

int loom_conv_padded_gemm_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS + 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2],
                    *xp = &args->tensors[4], *out = &args->tensors[5];
  const loom_tensor *bias = args->num_tensors > 6 ? &args->tensors[6] : NULL;
  cp_geom g;
  loom_gemm_plan pl;
  int rc = cp_geometry(args, &g);
  if (rc || (rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl))) return rc;
  const int64_t gpos = args->scalars[18].i, plane = xp->sizes[2], taps = g.kh * g.kw;
  const int64_t halo = cp_halo(&g), phases = g.sh * g.sw;
  if (pl.packed_bf16 || pl.kc > CP_KC || pl.nr != CP_NR || xp->rank != 3 || out->rank != 4 ||
      xp->dtype != LOOM_FLOAT32 || out->dtype != LOOM_FLOAT32 || xp->strides[2] != 1 ||
      (bias && bias->dtype != LOOM_FLOAT32) || pl.batch1 != 1 || gpos % CP_NR != 0 ||
      gpos < g.ho * g.wq || pl.n != xp->sizes[0] * gpos || pl.k % taps != 0 ||
      out->sizes[0] != xp->sizes[0] || out->sizes[1] != pl.batch2 * pl.m ||
      out->sizes[2] != g.ho || out->sizes[3] != g.wo ||
      xp->sizes[1] != pl.batch2 * (pl.k / taps) * phases || plane < gpos + halo)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const float *xd = (const float *)xp->data;
  float *od = (float *)out->data;
  const int64_t tpos = args->scalars[1].i;
  if (tpos < 32 || tpos > CP_POS || tpos % CP_NR != 0) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t cg = pl.k / taps, tiles_n = (pl.n + tpos - 1) / tpos;
  const int64_t lines = (CP_NR + halo + 15) / 16;
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  float buf[CP_PANELS * CP_KC * CP_NR], tile[CP_MROWS * CP_POS];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t tn = item % tiles_n, grp = item / tiles_n;
    const int64_t p0 = tn * tpos, np = pl.n - p0 < tpos ? pl.n - p0 : tpos;
    const int64_t npan = (np + CP_NR - 1) / CP_NR;
    /* Each 32-position panel lies in one image: gpos is a multiple of 32. */
    int64_t pn[CP_PANELS], pq[CP_PANELS];
    const float *img[CP_PANELS];
    for (int64_t p = 0; p < npan; ++p) {
      pn[p] = (p0 + p * CP_NR) / gpos, pq[p] = (p0 + p * CP_NR) % gpos;
      img[p] = xd + pn[p] * xp->strides[0] + grp * cg * phases * xp->strides[1] + pq[p];
    }
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    for (int64_t m0 = 0; m0 < pl.m; m0 += CP_MROWS) {
      const int64_t mrows = pl.m - m0 < CP_MROWS ? pl.m - m0 : CP_MROWS;
      /* The bias starts the sums, as on the other paths; without one the
       * first k block overwrites the tile. */
      for (int64_t i = 0; i < mrows && (bias || pl.kp == 0); ++i) {
        const int64_t o = grp * pl.m + m0 + i;
        const float bv = bias ? ((const float *)bias->data)[o * bias->strides[0]] : 0.0f;
        for (int64_t j = 0; j < npan * CP_NR; ++j) tile[i * CP_POS + j] = bv;
      }
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        cp_rows r = cp_rows_at(&g, pc);
        for (int64_t kk = 0; kk < kc; ++kk, cp_next(&g, &r)) {
          const int64_t off = cp_offset(&g, &r, xp->strides[1]);
          for (int64_t p = 0; p < npan; ++p) {
            const float *src = img[p] + off;
            cp_prefetch(&r, src, phases * xp->strides[1], lines);
            cp_copy32(buf + (p * kc + kk) * CP_NR, src);
          }
        }
        for (int64_t jp = 0; jp < npan; ++jp)
          for (int64_t i = 0; i < mrows; i += pl.mr) {
            const char *apanel =
                ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, (m0 + i) / pl.mr) * 4;
            const int mr = (int)(mrows - i < pl.mr ? mrows - i : pl.mr);
            ukr(kc, apanel, buf + jp * kc * CP_NR, tile + i * CP_POS + jp * CP_NR, CP_POS, 1.0f,
                mr, CP_NR, bias != NULL || pc > 0);
          }
      }
      /* The grid's columns x < wo of rows y < ho are the output's. */
      if (out->strides[1] == 1 && out->strides[3] != 1) {
        for (int64_t p = 0; p < npan; ++p)
          cp_store_channels_last(out, pn[p], grp * pl.m + m0, mrows, tile + p * CP_NR, pq[p],
                                 g.ho * g.wq, g.wq, g.wo);
        continue;
      }
      for (int64_t p = 0; p < npan; ++p) {
        const int64_t q0 = pq[p], q1 = q0 + CP_NR < g.ho * g.wq ? q0 + CP_NR : g.ho * g.wq;
        for (int64_t i = 0; i < mrows; ++i) {
          const int64_t o = grp * pl.m + m0 + i;
          const float *t = tile + i * CP_POS + p * CP_NR;
          float *oimg = od + pn[p] * out->strides[0] + o * out->strides[1];
          for (int64_t y = q0 / g.wq; y * g.wq < q1; ++y) {
            const int64_t x0 = q0 > y * g.wq ? q0 - y * g.wq : 0;
            const int64_t x1 = q1 - y * g.wq < g.wo ? q1 - y * g.wq : g.wo;
            float *orow = oimg + y * out->strides[2];
            if (out->strides[3] == 1 && x1 > x0)
              memcpy(orow + x0, t + y * g.wq + x0 - q0, (size_t)(x1 - x0) * sizeof(float));
            else
              for (int64_t x = x0; x < x1; ++x) orow[x * out->strides[3]] = t[y * g.wq + x - q0];
          }
        }
      }
    }
  }
  return 0;
}

int loom_conv_padded_wgrad_avx512(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS + 4)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2],
                    *xp = &args->tensors[4], *part = &args->tensors[5];
  cp_geom g;
  loom_gemm_plan pl;
  int rc = cp_geometry(args, &g);
  if (rc || (rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl))) return rc;
  const int64_t gpad = args->scalars[18].i, kchunk = args->scalars[19].i;
  const int64_t qn = args->scalars[20].i;
  const int64_t taps = g.kh * g.kw;
  if (pl.packed_bf16 || pl.use_acc || pl.kc > CP_KC || pl.kc % CP_NR != 0 || pl.nr != CP_NR ||
      !cp_wgrad_fits(&pl, &g, xp, part, gpad, kchunk, qn))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const float *xd = (const float *)xp->data;
  const int64_t cg = pl.n / taps, ldt = part->strides[2], phases = g.sh * g.sw;
  const int64_t qgroups = (pl.n_panels + qn - 1) / qn, s0 = xp->strides[0];
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  float buf[CP_KC * CP_NR], bt[CP_KC * CP_NR];
  int64_t roff[LOOM_CONV_WGRAD_MAX_PANELS][CP_NR], rows[LOOM_CONV_WGRAD_MAX_PANELS];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t qg = item % qgroups, rest = item / qgroups;
    const int64_t grp = rest % pl.batch2, kci = rest / pl.batch2;
    const int64_t q0 = qg * qn, nq = pl.n_panels - q0 < qn ? pl.n_panels - q0 : qn;
    const int64_t k0 = kci * kchunk, k1 = pl.kp < k0 + kchunk ? pl.kp : k0 + kchunk;
    float *pbase = (float *)part->data + kci * part->strides[0] + grp * part->strides[1];
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    const float *xg = xd + grp * cg * phases * xp->strides[1];
    for (int64_t j = 0; j < nq; ++j)
      rows[j] = cp_panel_rows(&g, q0 + j, CP_NR, pl.n, xp->strides[1], roff[j]);
    /* Every panel of the group over one k block, then the next block: the
     * block's dy panels stay in cache across the group. */
    for (int64_t pc = k0; pc < k1; pc += pl.kc) {
      const int64_t kc = k1 - pc < pl.kc ? k1 - pc : pl.kc;
      for (int64_t j = 0; j < nq; ++j) {
        if (rows[j] < CP_NR) memset(buf, 0, sizeof buf); /* rows past the weight's end */
        /* k runs of 32 never straddle images: gpad is a multiple of 32 */
        for (int64_t p = 0; p < kc; p += CP_NR) {
          const float *img = xg + (pc + p) / gpad * s0 + (pc + p) % gpad;
          for (int64_t rr = 0; rr < rows[j]; ++rr)
            cp_copy32(buf + p * CP_NR + rr * CP_NR, img + roff[j][rr]);
        }
        loom_gemm_transpose_panels32(bt, buf, kc);
        /* The next gather (the next panel, or the first over the next
         * block) reads runs planes apart, beyond any hardware prefetcher:
         * fetch them a share per micro-kernel call. */
        const int last = j + 1 == nq;
        const int64_t npc = last ? pc + pl.kc : pc, nj = last ? 0 : j + 1;
        const int64_t nkc = npc < k1 ? (k1 - npc < pl.kc ? k1 - npc : pl.kc) : 0;
        const int64_t share = ((nkc + CP_NR - 1) / CP_NR * rows[nj] + pl.m_panels - 1) / pl.m_panels;
        int64_t fp = 0, frr = 0; /* the next run and row to fetch */
        const float *fimg = xg + npc / gpad * s0 + npc % gpad;
        for (int64_t ip = 0; ip < pl.m_panels; ++ip) {
          for (int64_t f = 0; f < share && fp < nkc; ++f) {
            const float *src = fimg + roff[nj][frr];
            _mm_prefetch((const char *)src, _MM_HINT_T0);
            _mm_prefetch((const char *)(src + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(src + 31), _MM_HINT_T0);
            if (++frr == rows[nj]) {
              frr = 0, fp += CP_NR;
              fimg = xg + (npc + fp) / gpad * s0 + (npc + fp) % gpad;
            }
          }
          const char *apanel = ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) * 4;
          const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          float *ct = pbase + ip * pl.mr * ldt + (q0 + j) * CP_NR;
          if (pl.a_in_place && mr == pl.mr) /* dy's rows where they lie */
            loom_gemm_ukr_avx512_f32_rows(kc, loom_gemm_elem(a, 0, grp, ip * pl.mr, pc),
                                          a->strides[2], bt, ct, ldt, 1.0f, (int)rows[j], pc > k0);
          else
            ukr(kc, apanel, bt, ct, ldt, 1.0f, mr, (int)rows[j], pc > k0);
        }
      }
    }
  }
  return 0;
}
