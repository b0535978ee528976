/* kernels/conv/conv_gemm_generic.c — the implicit-GEMM convolutions of
 * conv_gemm_avx512.c in plain C:
 *   forward:         out[n, g] (og x L) = W[g] (og x C/G*K) @ col[n, g]
 *   weight gradient: dW[g] (og x C/G*K) = dy[g] (og x N*L) @ col[g]^T
 * The same tiles, k blocks and panels around the plan's micro-kernel; the
 * col panels are gathered from the image a k block at a time, one output
 * row's run of positions at a time, and never written to memory whole. */
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_gemm_internal.h"
#include "kernels/conv/conv_variants.h"
#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

enum {
  CG_KC = 256,   /* the fp32 plans' k block; the stack buffers are sized for it */
  CG_NR_MAX = 32, /* the widest register tile's columns */
  /* segments of up to CG_KC positions: each ends at a row's or a panel's end */
  CG_SEGS = 2 * (CG_KC / CG_NR) + CG_KC,
};

/* The plans these twins take: fp32 panels no wider than the buffers. */
static int cg_plan_fits(const loom_gemm_plan *pl) {
  return !pl->packed_bf16 && !pl->use_acc && pl->kc <= CG_KC && pl->nr >= 16 &&
         pl->nr <= CG_NR_MAX && CG_NR % pl->nr == 0 && pl->mr <= CG_NR_MAX;
}

/* The window geometry of one launch. */
typedef struct cg_win {
  const loom_tensor *img;
  int64_t k[3], s[3], p[3], d[3], o[3];
} cg_win;

/* Positions [0, cnt) of segment `sg` through tap (kd, kh, kw) of channel c:
 * dst[q * step] for each, 0 outside the image. */
static void cg_gather_run(float *dst, int64_t step, const cg_win *w, const cg_seg *sg, int64_t c,
                          int64_t kd, int64_t kh, int64_t kw) {
  const int64_t *sz = w->img->sizes, *st = w->img->strides, cnt = sg->cnt;
  const int64_t id = sg->od * w->s[0] - w->p[0] + kd * w->d[0];
  const int64_t ih = sg->oh * w->s[1] - w->p[1] + kh * w->d[1];
  const int64_t iw0 = sg->ow0 * w->s[2] - w->p[2] + kw * w->d[2], sw = w->s[2];
  int64_t lo = 0, hi = 0; /* positions [lo, hi) read the image */
  const float *row = NULL;
  if (id >= 0 && id < sz[2] && ih >= 0 && ih < sz[3]) {
    lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
    hi = iw0 < sz[4] ? (sz[4] - 1 - iw0) / sw + 1 : 0;
    if (hi > cnt) hi = cnt;
    if (lo > hi) lo = hi;
    row = (const float *)w->img->data + sg->n * st[0] + c * st[1] + id * st[2] + ih * st[3];
  }
  for (int64_t q = 0; q < lo; ++q) dst[q * step] = 0.0f;
  for (int64_t q = lo; q < hi; ++q) dst[q * step] = row[(iw0 + q * sw) * st[4]];
  for (int64_t q = hi; q < cnt; ++q) dst[q * step] = 0.0f;
}

/* Col rows [k0, k0 + kn) (rows (c - c0, kd, kh, kw)) of the segments'
 * positions into panels buf[panel][kk][nr] of `ld` rows each. */
static void cg_gather_rows(float *buf, int64_t ld, int64_t nr, int64_t kn, int64_t k0,
                           const cg_seg *seg, int nseg, const cg_win *w, int64_t c0) {
  const int64_t *k = w->k, taps = k[0] * k[1] * k[2];
  int64_t c = c0 + k0 / taps, t = k0 % taps;
  int64_t kw = t % k[2], kh = (t / k[2]) % k[1], kd = t / (k[2] * k[1]);
  for (int64_t kk = 0; kk < kn; ++kk) {
    for (int i = 0; i < nseg; ++i) {
      /* a segment ends at a 32-position panel's end: it may cross one of
       * a narrower register tile */
      cg_seg part = seg[i];
      while (part.cnt > 0) {
        const int64_t room = nr - part.j0 % nr, cnt = part.cnt < room ? part.cnt : room;
        cg_seg head = part;
        head.cnt = cnt;
        cg_gather_run(buf + (part.j0 / nr * ld + kk) * nr + part.j0 % nr, 1, w, &head, c, kd,
                      kh, kw);
        part.j0 += cnt, part.ow0 += cnt, part.cnt -= cnt;
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

int loom_conv_gemm_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
  cg_forward f;
  int rc = cg_forward_of(args, &f);
  if (rc) return rc;
  const loom_tensor *c = f.c, *a = f.a, *img = f.img, *bias = f.bias;
  const loom_gemm_plan pl = f.pl;
  const cg_tiling tl = f.tl;
  if (!cg_plan_fits(&pl) || c->dtype != LOOM_FLOAT32 || img->dtype != LOOM_FLOAT32 ||
      (bias && bias->dtype != LOOM_FLOAT32))
    return LOOM_ERROR_INVALID_ARGUMENT;
  cg_win w = {.img = img};
  memcpy(w.k, f.k, sizeof w.k), memcpy(w.s, f.s, sizeof w.s), memcpy(w.p, f.p, sizeof w.p);
  memcpy(w.d, f.d, sizeof w.d), memcpy(w.o, f.o, sizeof w.o);
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  const int64_t nr = pl.nr, cg = pl.k / (w.k[0] * w.k[1] * w.k[2]); /* channels per group */
  const int64_t mat_of_grp = pl.a_count2 > 1;
  float buf[LOOM_CONV_GEMM_POSITIONS * CG_KC], own[CG_KC * CG_NR_MAX];
  cg_seg seg[2 * (LOOM_CONV_GEMM_POSITIONS / CG_NR) + LOOM_CONV_GEMM_POSITIONS];

  for (int64_t tile = begin; tile < end; ++tile) {
    const cg_tile t = cg_tile_at(&tl, &pl, tile);
    const int64_t r0 = t.ip0 * pl.mr, r1 = t.ip1 * pl.mr < pl.m ? t.ip1 * pl.mr : pl.m;
    const int64_t npan = (t.nl + nr - 1) / nr;
    const int nseg = cg_segments(t.n * tl.len + t.l0, t.nl, w.o, CG_ROWS, seg);
    float *tc = (float *)c->data + t.n * c->strides[0] + t.grp * c->strides[1] + t.l0;
    const int64_t ldt = c->strides[2];
    /* Without a bias the first k block overwrites the tile. */
    for (int64_t i = r0; i < r1 && (bias || pl.kp == 0); ++i) {
      float v = bias ? ((const float *)bias->data)[(t.grp * pl.m + i) * bias->strides[0]] : 0.0f;
      for (int64_t j = 0; j < t.nl; ++j) tc[i * ldt + j] = v;
    }
    const char *ap = ws + pl.a_offset + (mat_of_grp ? t.grp : 0) * pl.a_bytes;
    for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
      const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
      if (t.nl < npan * nr)
        memset(buf + (npan - 1) * kc * nr, 0, (size_t)(kc * nr) * sizeof(float));
      cg_gather_rows(buf, kc, nr, kc, pc, seg, nseg, &w, t.grp * cg);
      for (int64_t jp = 0; jp < npan; ++jp) {
        const int nrj = (int)(t.nl - jp * nr < nr ? t.nl - jp * nr : nr);
        for (int64_t ip = t.ip0; ip < t.ip1; ++ip) {
          const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          const float *apanel;
          if (pl.a_in_place && mr == pl.mr) { /* packed here, from A's rows */
            loom_gemm_pack_block(&pl, a, 1, mat_of_grp ? t.grp : 0, ip, pc, (char *)own);
            apanel = own;
          } else {
            apanel = (const float *)(ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc,
                                                                 ip) * 4);
          }
          ukr(kc, apanel, buf + jp * kc * nr, tc + ip * pl.mr * ldt + jp * nr, ldt, 1.0f, mr,
              nrj, bias != NULL || pc > 0);
        }
      }
    }
  }
  return 0;
}

int loom_conv_wgrad_generic(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 5 || args->num_scalars < 2 + LOOM_CONV_NUM_SCALARS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2];
  cg_win w = {.img = &args->tensors[4]};
  loom_gemm_plan pl;
  int rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &pl);
  if (rc) return rc;
  if (!cg_plan_fits(&pl) || c->dtype != LOOM_FLOAT32 || w.img->dtype != LOOM_FLOAT32 ||
      w.img->rank != 5)
    return LOOM_ERROR_INVALID_ARGUMENT;
  cg_geometry(args->scalars + 2, w.k, w.s, w.p, w.d, w.o);
  if (!cg_wgrad_batch_fits(&pl, c, &args->tensors[3], w.img->sizes[0], w.o[0] * w.o[1] * w.o[2]))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const char *ws = (const char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&pl);
  const int64_t nr = pl.nr, cg = pl.n / (w.k[0] * w.k[1] * w.k[2]); /* channels per group */
  float bt[CG_KC * CG_NR_MAX], own[CG_KC * CG_NR_MAX];
  cg_seg seg[CG_SEGS];

  for (int64_t tile = begin; tile < end; ++tile) {
    const int64_t q = tile % pl.n_panels, grp = tile / pl.n_panels;
    const int64_t r0 = q * nr, rows = pl.n - r0 < nr ? pl.n - r0 : nr;
    float *tc = (float *)c->data + grp * c->strides[1] + r0;
    const int64_t ldt = c->strides[2];
    for (int64_t i = 0; i < pl.m && pl.kp == 0; ++i) /* else the first k block overwrites */
      for (int64_t j = 0; j < rows; ++j) tc[i * ldt + j] = 0.0f;
    /* Lanes past the weight's end stay 0. */
    if (rows < nr) memset(bt, 0, sizeof bt);
    for (int64_t im = 0; im < pl.batch1; ++im) { /* images one at a time, or all at once */
      const char *ap = ws + pl.a_offset + cg_wgrad_a_mat(&pl, im, grp) * pl.a_bytes;
      for (int64_t pc = 0; pc < pl.kp; pc += pl.kc) {
        const int64_t kc = pl.kp - pc < pl.kc ? pl.kp - pc : pl.kc;
        const int nseg = cg_segments(im * pl.k + pc, kc, w.o, CG_ROWS, seg);
        /* B's panel [kc][nr]: col row r0 + rr is lane rr, its positions k */
        const int64_t taps = w.k[0] * w.k[1] * w.k[2];
        for (int64_t rr = 0; rr < rows; ++rr) {
          const int64_t row = r0 + rr, t = row % taps;
          const int64_t cc = grp * cg + row / taps;
          for (int i = 0; i < nseg; ++i)
            cg_gather_run(bt + seg[i].j0 * nr + rr, nr, &w, &seg[i], cc, t / (w.k[2] * w.k[1]),
                          (t / w.k[2]) % w.k[1], t % w.k[2]);
        }
        for (int64_t ip = 0; ip < pl.m_panels; ++ip) {
          const int mr = (int)(pl.m - ip * pl.mr < pl.mr ? pl.m - ip * pl.mr : pl.mr);
          const float *apanel;
          if (pl.a_in_place && mr == pl.mr) { /* packed here, from A's rows */
            loom_gemm_pack_block(&pl, a, 1, cg_wgrad_a_mat(&pl, im, grp), ip, pc, (char *)own);
            apanel = own;
          } else {
            apanel = (const float *)(ap + loom_gemm_panel_offset(&pl, pl.m_panels, pl.mr, pc, ip) *
                                              4);
          }
          ukr(kc, apanel, bt, tc + ip * pl.mr * ldt, ldt, 1.0f, mr, (int)rows, im > 0 || pc > 0);
        }
      }
    }
  }
  return 0;
}
