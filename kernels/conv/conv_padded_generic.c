/* kernels/conv/conv_padded_generic.c — the padded-row implicit GEMMs of
 * conv_padded_avx512.c in plain C: the same grid over the phase planes,
 * tiles, k blocks and partial sums, around the plan's micro-kernel. Every
 * col row is a run of a plane there too, so a panel's gather is copies. */
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_padded_internal.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* The plans these twins take: fp32 panels no wider than the buffers. */
static int cp_plan_fits(const loom_gemm_plan *pl) {
  return !pl->packed_bf16 && pl->kc <= CP_KC && pl->kc % CP_NR_MAX == 0 && pl->nr >= 16 &&
         pl->nr <= CP_NR_MAX && CP_NR_MAX % pl->nr == 0 && pl->mr <= CP_NR_MAX &&
         CP_MROWS % pl->mr == 0;
}

/* A panel of A over k block [pc, pc + kc): where the pack launch put it,
 * or, for a full panel the plan reads in place, packed here into `own`. */
static const float *cp_a_panel(const loom_gemm_plan *pl, const loom_tensor *a, const char *ap,
                               int64_t mat, int64_t panel, int64_t pc, int mr, float *own) {
  if (pl->a_in_place && mr == pl->mr) {
    loom_gemm_pack_block(pl, a, 1, mat, panel, pc, (char *)own);
    return own;
  }
  return (const float *)(ap + loom_gemm_panel_offset(pl, pl->m_panels, pl->mr, pc, panel) * 4);
}

int loom_conv_padded_gemm_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
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
  const int64_t halo = cp_halo(&g), phases = g.sh * g.sw, nr = pl.nr;
  if (!cp_plan_fits(&pl) || xp->rank != 3 || out->rank != 4 || xp->dtype != LOOM_FLOAT32 ||
      out->dtype != LOOM_FLOAT32 || xp->strides[2] != 1 ||
      (bias && bias->dtype != LOOM_FLOAT32) || pl.batch1 != 1 || gpos % CP_NR_MAX != 0 ||
      gpos < g.ho * g.wq || pl.n != xp->sizes[0] * gpos || pl.k % taps != 0 ||
      out->sizes[0] != xp->sizes[0] || out->sizes[1] != pl.batch2 * pl.m ||
      out->sizes[2] != g.ho || out->sizes[3] != g.wo ||
      xp->sizes[1] != pl.batch2 * (pl.k / taps) * phases || plane < gpos + halo)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const float *xd = (const float *)xp->data;
  float *od = (float *)out->data;
  const int64_t tpos = args->scalars[1].i;
  if (tpos < 32 || tpos > CP_POS || tpos % 32 != 0) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t cg = pl.k / taps, tiles_n = (pl.n + tpos - 1) / tpos;
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  enum { PANELS = CP_POS / 16 }; /* of the narrowest register tile */
  float buf[CP_POS * CP_KC], tile[CP_MROWS * CP_POS], own[CP_KC * CP_NR_MAX];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t tn = item % tiles_n, grp = item / tiles_n;
    const int64_t p0 = tn * tpos, np = pl.n - p0 < tpos ? pl.n - p0 : tpos;
    const int64_t npan = (np + nr - 1) / nr;
    /* Each panel lies in one image: gpos is a multiple of 32. */
    int64_t pn[PANELS], pq[PANELS];
    const float *img[PANELS];
    for (int64_t p = 0; p < npan; ++p) {
      pn[p] = (p0 + p * nr) / gpos, pq[p] = (p0 + p * nr) % gpos;
      img[p] = xd + pn[p] * xp->strides[0] + grp * cg * phases * xp->strides[1] + pq[p];
    }
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    for (int64_t m0 = 0; m0 < pl.m; m0 += CP_MROWS) {
      const int64_t mrows = pl.m - m0 < CP_MROWS ? pl.m - m0 : CP_MROWS;
      /* The bias starts the sums; without one the first k block
       * overwrites the tile. */
      for (int64_t i = 0; i < mrows && (bias || pl.kp == 0); ++i) {
        const int64_t o = grp * pl.m + m0 + i;
        const float bv = bias ? ((const float *)bias->data)[o * bias->strides[0]] : 0.0f;
        for (int64_t j = 0; j < npan * nr; ++j) tile[i * CP_POS + j] = bv;
      }
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        cp_rows r = cp_rows_at(&g, pc);
        for (int64_t kk = 0; kk < kc; ++kk, cp_next(&g, &r)) {
          const int64_t off = cp_offset(&g, &r, xp->strides[1]);
          for (int64_t p = 0; p < npan; ++p)
            memcpy(buf + (p * kc + kk) * nr, img[p] + off, (size_t)nr * sizeof(float));
        }
        for (int64_t jp = 0; jp < npan; ++jp)
          for (int64_t i = 0; i < mrows; i += pl.mr) {
            const int mr = (int)(mrows - i < pl.mr ? mrows - i : pl.mr);
            const float *apanel = cp_a_panel(&pl, a, ap, pl.a_count2 > 1 ? grp : 0,
                                             (m0 + i) / pl.mr, pc, mr, own);
            ukr(kc, apanel, buf + jp * kc * nr, tile + i * CP_POS + jp * nr, CP_POS, 1.0f, mr,
                (int)nr, bias != NULL || pc > 0);
          }
      }
      /* The grid's columns x < wo of rows y < ho are the output's. */
      for (int64_t p = 0; p < npan; ++p) {
        const int64_t q0 = pq[p], q1 = q0 + nr < g.ho * g.wq ? q0 + nr : g.ho * g.wq;
        for (int64_t i = 0; i < mrows; ++i) {
          const int64_t o = grp * pl.m + m0 + i;
          const float *t = tile + i * CP_POS + p * nr;
          float *oimg = od + pn[p] * out->strides[0] + o * out->strides[1];
          for (int64_t y = q0 / g.wq; y * g.wq < q1; ++y) {
            const int64_t x0 = q0 > y * g.wq ? q0 - y * g.wq : 0;
            const int64_t x1 = q1 - y * g.wq < g.wo ? q1 - y * g.wq : g.wo;
            float *orow = oimg + y * out->strides[2];
            for (int64_t x = x0; x < x1; ++x) orow[x * out->strides[3]] = t[y * g.wq + x - q0];
          }
        }
      }
    }
  }
  return 0;
}

int loom_conv_padded_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS + 4)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2],
                    *xp = &args->tensors[4], *part = &args->tensors[5];
  cp_geom g;
  loom_gemm_plan pl;
  int rc = cp_geometry(args, &g);
  if (rc || (rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl))) return rc;
  const int64_t gpad = args->scalars[18].i, kchunk = args->scalars[19].i;
  const int64_t qn = args->scalars[20].i, nr = pl.nr;
  const int64_t taps = g.kh * g.kw;
  if (!cp_plan_fits(&pl) || pl.use_acc || !cp_wgrad_fits(&pl, &g, xp, part, gpad, kchunk, qn))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const float *xd = (const float *)xp->data;
  const int64_t cg = pl.n / taps, ldt = part->strides[2], phases = g.sh * g.sw;
  const int64_t qgroups = (pl.n_panels + qn - 1) / qn, s0 = xp->strides[0];
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  float bt[CP_KC * CP_NR_MAX], own[CP_KC * CP_NR_MAX];
  int64_t roff[LOOM_CONV_WGRAD_MAX_PANELS][CP_NR_MAX], rows[LOOM_CONV_WGRAD_MAX_PANELS];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t qg = item % qgroups, rest = item / qgroups;
    const int64_t grp = rest % pl.batch2, kci = rest / pl.batch2;
    const int64_t q0 = qg * qn, nq = pl.n_panels - q0 < qn ? pl.n_panels - q0 : qn;
    const int64_t k0 = kci * kchunk, k1 = pl.kp < k0 + kchunk ? pl.kp : k0 + kchunk;
    float *pbase = (float *)part->data + kci * part->strides[0] + grp * part->strides[1];
    const char *ap = ws + pl.a_offset + (pl.a_count2 > 1 ? grp : 0) * pl.a_bytes;
    const float *xg = xd + grp * cg * phases * xp->strides[1];
    for (int64_t j = 0; j < nq; ++j)
      rows[j] = cp_panel_rows(&g, q0 + j, nr, pl.n, xp->strides[1], roff[j]);
    /* Every panel of the group over one k block, then the next block. */
    for (int64_t pc = k0; pc < k1; pc += pl.kc) {
      const int64_t kc = k1 - pc < pl.kc ? k1 - pc : pl.kc;
      for (int64_t j = 0; j < nq; ++j) {
        /* B's panel [kc][nr]: k runs of 32 never straddle images (gpad is
         * a multiple of 32); lanes past the weight's end are 0. */
        if (rows[j] < nr) memset(bt, 0, (size_t)(kc * nr) * sizeof(float));
        for (int64_t p = 0; p < kc; p += 32) {
          const float *img = xg + (pc + p) / gpad * s0 + (pc + p) % gpad;
          for (int64_t rr = 0; rr < rows[j]; ++rr) {
            const float *src = img + roff[j][rr];
            for (int64_t t = 0; t < 32; ++t) bt[(p + t) * nr + rr] = src[t];
          }
        }
        for (int64_t ip = 0; ip < pl.m_panels; ++ip) {
          const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          const float *apanel = cp_a_panel(&pl, a, ap, pl.a_count2 > 1 ? grp : 0, ip, pc, mr, own);
          ukr(kc, apanel, bt, pbase + ip * pl.mr * ldt + (q0 + j) * nr, ldt, 1.0f, mr,
              (int)rows[j], pc > k0);
        }
      }
    }
  }
  return 0;
}
