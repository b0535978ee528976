/* kernels/conv/im2col.c — im2col and col2im (see loom/kernels/im2col.h). */
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/conv/im2col_internal.h"
#include "kernels/registry.h"
#include "loom/status.h"
#include "base/cpu.h"

typedef struct loom_conv_geom {
  int64_t k[3], s[3], p[3], d[3], o[3];
} loom_conv_geom;

static int loom_conv_geom_read(const loom_kernel_args *args,
                               loom_conv_geom *g) {
  if (args->num_scalars < LOOM_CONV_NUM_SCALARS || args->num_tensors < 2)
    return LOOM_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < 3; ++i) {
    g->k[i] = args->scalars[i].i;
    g->s[i] = args->scalars[3 + i].i;
    g->p[i] = args->scalars[6 + i].i;
    g->d[i] = args->scalars[9 + i].i;
    g->o[i] = args->scalars[12 + i].i;
    if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1 || g->p[i] < 0 || g->o[i] < 0)
      return LOOM_ERROR_INVALID_ARGUMENT;
  }
  return 0;
}

/* First and one-past-last output index o in [0, n_out) whose input index
 * o*s - p + off lies in [0, n_in). */
static void loom_conv_valid(int64_t n_out, int64_t n_in, int64_t s, int64_t p,
                            int64_t off, int64_t *lo, int64_t *hi) {
  int64_t base = off - p; /* input index at o = 0 */
  int64_t a = base >= 0 ? 0 : (-base + s - 1) / s;
  int64_t b = n_in - base <= 0 ? 0 : (n_in - base + s - 1) / s;
  if (a > n_out) a = n_out;
  if (b > n_out) b = n_out;
  if (b < a) b = a;
  *lo = a, *hi = b;
}

int loom_im2col_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end) {
  loom_conv_geom g;
  int rc = loom_conv_geom_read(args, &g);
  if (rc) return rc;
  const loom_tensor *col = &args->tensors[0], *in = &args->tensors[1];
  if (col->rank != 3 || in->rank != 5 || col->dtype != in->dtype)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t es = loom_dtype_size(in->dtype);
  int64_t n_img = in->sizes[0], kk = g.k[0] * g.k[1] * g.k[2];
  int64_t len = g.o[0] * g.o[1] * g.o[2];
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  for (int64_t r = begin; r < end; ++r) {
    int64_t ck = r / n_img, n = r % n_img;
    int64_t c = ck / kk, kidx = ck % kk;
    int64_t kw = kidx % g.k[2], kh = (kidx / g.k[2]) % g.k[1], kd = kidx / (g.k[2] * g.k[1]);
    char *dst = (char *)col->data + (ck * n_img + n) * len * es;
    const char *src = (const char *)in->data +
                      (n * in->strides[0] + c * in->strides[1]) * es;
    int64_t wlo, whi;
    loom_conv_valid(g.o[2], in->sizes[4], g.s[2], g.p[2], kw * g.d[2], &wlo, &whi);
    int64_t sw = in->strides[4];
    for (int64_t od = 0; od < g.o[0]; ++od) {
      int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
      for (int64_t oh = 0; oh < g.o[1]; ++oh) {
        char *row = dst + (od * g.o[1] + oh) * g.o[2] * es;
        int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
        if (id < 0 || id >= in->sizes[2] || ih < 0 || ih >= in->sizes[3]) {
          memset(row, 0, (size_t)(g.o[2] * es));
          continue;
        }
        const char *irow = src + (id * in->strides[2] + ih * in->strides[3]) * es;
        if (wlo > 0) memset(row, 0, (size_t)(wlo * es));
        if (whi < g.o[2]) memset(row + whi * es, 0, (size_t)((g.o[2] - whi) * es));
        int64_t iw0 = wlo * g.s[2] - g.p[2] + kw * g.d[2];
        int64_t step = g.s[2] * sw;
        if (step == 1) {
          memcpy(row + wlo * es, irow + iw0 * es, (size_t)((whi - wlo) * es));
        } else if (es == 4) {
          const uint32_t *s = (const uint32_t *)irow + iw0 * sw;
          uint32_t *d = (uint32_t *)row;
          for (int64_t ow = wlo; ow < whi; ++ow) d[ow] = s[(ow - wlo) * step];
        } else if (es == 2 && step == 2 && avx512) {
          loom_im2col_stride2_u16_avx512((uint16_t *)row + wlo, (const uint16_t *)irow + iw0 * sw,
                                         whi - wlo);
        } else if (es == 2) {
          const uint16_t *s = (const uint16_t *)irow + iw0 * sw;
          uint16_t *d = (uint16_t *)row;
          for (int64_t ow = wlo; ow < whi; ++ow) d[ow] = s[(ow - wlo) * step];
        } else {
          for (int64_t ow = wlo; ow < whi; ++ow)
            memcpy(row + ow * es, irow + (iw0 + (ow - wlo) * g.s[2]) * sw * es, (size_t)es);
        }
      }
    }
  }
  return 0;
}

/* Adds one col row (the positions of tap (kd, kh, kw) for one image) into
 * an fp32 image plane: the adjoint of im2col's copy. Each image element
 * takes at most one addition per tap. The grid rows whose image row lies
 * inside go to the loops together (one call per tap for a 2-d grid, rather
 * than one per row: a 14 x 14 grid's rows are too short to pay for it). */
static void loom_col2im_tap(float *plane, const int64_t *pstride,
                            const int64_t *psize, const float *src,
                            const loom_conv_geom *g, int64_t kd, int64_t kh,
                            int64_t kw, int avx512) {
  int64_t wlo, whi, hlo, hhi;
  loom_conv_valid(g->o[2], psize[2], g->s[2], g->p[2], kw * g->d[2], &wlo, &whi);
  loom_conv_valid(g->o[1], psize[1], g->s[1], g->p[1], kh * g->d[1], &hlo, &hhi);
  if (whi <= wlo || hhi <= hlo) return;
  const int64_t iw0 = wlo * g->s[2] - g->p[2] + kw * g->d[2];
  const int64_t ih0 = hlo * g->s[1] - g->p[1] + kh * g->d[1];
  const int64_t step = g->s[2] * pstride[2], d_row = g->s[1] * pstride[1];
  const int64_t rows = hhi - hlo, n = whi - wlo;
  for (int64_t od = 0; od < g->o[0]; ++od) {
    int64_t id = od * g->s[0] - g->p[0] + kd * g->d[0];
    if (id < 0 || id >= psize[0]) continue;
    const float *s = src + (od * g->o[1] + hlo) * g->o[2] + wlo;
    float *d = plane + id * pstride[0] + ih0 * pstride[1] + iw0 * pstride[2];
    if (step == 2 && avx512) {
      loom_col2im_add_stride2_avx512(d, d_row, s, g->o[2], rows, n);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r, d += d_row, s += g->o[2]) {
      float *restrict dr = d;
      const float *restrict sr = s;
      if (step == 1) {
        for (int64_t i = 0; i < n; ++i) dr[i] += sr[i];
      } else {
        for (int64_t i = 0; i < n; ++i) dr[i * step] += sr[i];
      }
    }
  }
}

int loom_col2im_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end) {
  loom_conv_geom g;
  int rc = loom_conv_geom_read(args, &g);
  if (rc) return rc;
  const loom_tensor *img = &args->tensors[0], *col = &args->tensors[1];
  if (col->rank != 3 || img->rank != 5 || img->dtype != LOOM_FLOAT32 ||
      col->dtype != LOOM_FLOAT32)
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t n_img = img->sizes[0];
  int64_t kk = g.k[0] * g.k[1] * g.k[2];
  int64_t len = g.o[0] * g.o[1] * g.o[2];
  const int64_t *psize = img->sizes + 2, *pstride = img->strides + 2;
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  const int64_t total = n_img * col->sizes[0] / kk; /* planes */
  int64_t plane_len = 1;
  for (int i = 0; i < 3; ++i) plane_len *= psize[i];
  /* Planes go in blocks of neighbouring images of one channel, up to 16 KB
   * of them (in the core's L1), taps outer: each tap's col rows of the
   * block are adjacent, so every tap reads one run of block * L instead of
   * the block's rows a channel's K*N rows apart (3x3/2 at 16 x 16, 64
   * channels, 32 images: rows of 256 bytes). Each element still sums its
   * entries in (kd, kh, kw) order from 0, whatever the blocks. */
  int64_t most = plane_len > 0 ? 16384 / (plane_len * (int64_t)sizeof(float)) : 16;
  if (most > 16) most = 16;
  if (most < 1) most = 1;
  for (int64_t pl = begin; pl < end;) {
    const int64_t c = pl / n_img, n0 = pl % n_img;
    int64_t nb = n_img - n0;
    if (nb > end - pl) nb = end - pl;
    if (nb > most) nb = most;
    for (int64_t n = n0; n < n0 + nb; ++n) {
      float *plane = (float *)img->data + n * img->strides[0] + c * img->strides[1];
      for (int64_t d = 0; d < psize[0]; ++d)
        for (int64_t h = 0; h < psize[1]; ++h) {
          float *row = plane + d * pstride[0] + h * pstride[1];
          if (pstride[2] == 1) {
            memset(row, 0, (size_t)psize[2] * sizeof(float));
          } else {
            for (int64_t w = 0; w < psize[2]; ++w) row[w * pstride[2]] = 0.0f;
          }
        }
    }
    const int64_t fetch = nb * len < 2048 ? nb * len * (int64_t)sizeof(float) : 8192;
    for (int64_t t = 0; t < kk; ++t) {
      int64_t kw = t % g.k[2], kh = (t / g.k[2]) % g.k[1], kd = t / (g.k[2] * g.k[1]);
      const float *src = (const float *)col->data + ((c * kk + t) * n_img + n0) * len;
      /* The next run (the next tap's, or the next block's first) starts a
       * stride away: fetch its start (all of a short run, which the
       * hardware would not stream in time) while this one is added. */
      const int64_t next = t + 1 < kk              ? (c * kk + t + 1) * n_img + n0
                           : pl + nb < total ? ((pl + nb) / n_img * kk) * n_img + (pl + nb) % n_img
                                                   : -1;
      if (next >= 0) {
        const char *nx = (const char *)((const float *)col->data + next * len);
        for (int64_t b = 0; b < fetch; b += 64) __builtin_prefetch(nx + b);
      }
      for (int64_t n = n0; n < n0 + nb; ++n) {
        float *plane = (float *)img->data + n * img->strides[0] + c * img->strides[1];
        loom_col2im_tap(plane, pstride, psize, src + (n - n0) * len, &g, kd, kh, kw, avx512);
      }
    }
    pl += nb;
  }
  return 0;
}

int loom_conv_flip_plan(const loom_kernel_args *args, loom_gemm_plan *p) {
  if (args->num_tensors < 5 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *w = &args->tensors[4];
  int rc = loom_gemm_plan_init(&args->tensors[0], &args->tensors[1], &args->tensors[2],
                               (int32_t)args->scalars[0].i, p);
  if (rc) return rc;
  const int64_t groups = args->tensors[1].sizes[1], cg = p->m;
  /* a size-1 tap dim may have any stride */
  if (w->rank != 3 || groups < 1 || p->batch1 * p->batch2 == 0 || w->sizes[0] % groups != 0 ||
      w->sizes[1] != cg || w->sizes[0] / groups * w->sizes[2] != p->k || p->a_count1 != 1 ||
      p->a_count2 != groups || (w->strides[2] != 1 && w->sizes[2] != 1) ||
      w->strides[1] != w->sizes[2] || w->strides[0] != cg * w->sizes[2])
    return LOOM_ERROR_INVALID_ARGUMENT;
  return 0;
}

int loom_conv_pack_flipped_kernel(const loom_kernel_args *args, int64_t begin,
                                  int64_t end) {
  loom_gemm_plan p;
  if (loom_conv_flip_plan(args, &p) || args->tensors[4].dtype != LOOM_FLOAT32 || p.packed_bf16)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *w = &args->tensors[4];
  const int64_t groups = args->tensors[1].sizes[1], cg = p.m;
  const int64_t taps = w->sizes[2], og = w->sizes[0] / groups, mr = p.mr;
  const int64_t units = (p.m_panels + LOOM_CONV_FLIP_PANELS - 1) / LOOM_CONV_FLIP_PANELS;
  const float *src = (const float *)w->data;
  /* A gather's lane indices (lane * taps) stay within int32. */
  const int vec = (loom_cpu_features() & LOOM_FEATURE_AVX512F) && mr <= 16 &&
                  taps < ((int64_t)1 << 27);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t g = u / units, p0 = u % units * LOOM_CONV_FLIP_PANELS;
    const int64_t p1 = p0 + LOOM_CONV_FLIP_PANELS < p.m_panels ? p0 + LOOM_CONV_FLIP_PANELS
                                                               : p.m_panels;
    float *base = (float *)((char *)args->tensors[3].data + p.a_offset + g * p.a_bytes);
    /* k = o * taps + j runs over (o, reversed tap j), in k blocks of kc;
     * each output's row of w is read once, for all the unit's panels. */
    int64_t pc = 0, kcur = p.kp < p.kc ? p.kp : p.kc, kk = 0;
    const int64_t c_end = p1 * mr < cg ? p1 * mr : cg;
    for (int64_t o = 0; o < og; ++o) {
      const float *row = src + (g * og + o) * cg * taps;
      /* rows are far apart, too short for the hardware to stream */
      if (o + 2 < og) {
        const char *next = (const char *)(row + 2 * cg * taps + p0 * mr * taps);
        for (int64_t b = 0; b < (c_end - p0 * mr) * taps * (int64_t)sizeof(float); b += 64)
          __builtin_prefetch(next + b);
      }
      for (int64_t j = 0; j < taps; ++j, ++kk) {
        if (kk == kcur) {
          pc += p.kc, kk = 0;
          kcur = p.kp - pc < p.kc ? p.kp - pc : p.kc;
        }
        if (vec) {
          loom_conv_flip_lanes_avx512(
              base + loom_gemm_panel_offset(&p, p.m_panels, mr, pc, p0) + kk * mr, kcur * mr,
              row + p0 * mr * taps + taps - 1 - j, taps, c_end - p0 * mr, mr);
          continue;
        }
        for (int64_t panel = p0; panel < p1; ++panel) {
          float *d = base + loom_gemm_panel_offset(&p, p.m_panels, mr, pc, panel) + kk * mr;
          const int64_t c0 = panel * mr, lanes = cg - c0 < mr ? cg - c0 : mr;
          const float *s = row + c0 * taps + taps - 1 - j;
          int64_t l = 0;
          for (; l < lanes; ++l) d[l] = s[l * taps];
          for (; l < mr; ++l) d[l] = 0.0f;
        }
      }
    }
  }
  return 0;
}

/* First index i >= 0 with i * s >= x (x may be negative). */
static int64_t loom_conv_first_at(int64_t x, int64_t s) { return x <= 0 ? 0 : (x + s - 1) / s; }

/* Phase (a, b) of a stride (sh, sw) copy: its rows i and columns j read
 * image row i*sh + a - top and column j*sw + b - left; those inside the
 * image, [i0, i1) x [j0, j1), are its data. */
typedef struct pad_phase {
  int64_t a, b, i0, i1, j0, j1;
} pad_phase;

static pad_phase pad_phase_of(int64_t ph, int64_t top, int64_t left, int64_t sh, int64_t sw,
                              int64_t h_n, int64_t w_n) {
  const int64_t a = ph / sw, b = ph % sw;
  return (pad_phase){.a = a, .b = b,
                     .i0 = loom_conv_first_at(top - a, sh),
                     .i1 = loom_conv_first_at(h_n + top - a, sh),
                     .j0 = loom_conv_first_at(left - b, sw),
                     .j1 = loom_conv_first_at(w_n + left - b, sw)};
}

/* The zeros of one plane around its data rows [i0, i1) x [j0, j1). */
static void pad_zero_around(float *d, int64_t plane, int64_t wq, const pad_phase *e) {
  if (e->i1 <= e->i0 || e->j1 <= e->j0) {
    memset(d, 0, (size_t)plane * sizeof(float));
    return;
  }
  int64_t from = 0;
  for (int64_t i = e->i0; i < e->i1; ++i) {
    memset(d + from, 0, (size_t)(i * wq + e->j0 - from) * sizeof(float));
    from = i * wq + e->j1;
  }
  memset(d + from, 0, (size_t)(plane - from) * sizeof(float));
}

/* Asks for the lines of [p, p + bytes) (for writing with `write`), if
 * they fit the L2 of the CPUs the kernels run on (1 MB and more) with room
 * to spare; a hint, which changes no value. */
static void prefetch_run(const char *p, int64_t bytes, int write) {
  if (bytes > (int64_t)(384 << 10)) return;
  for (int64_t o = 0; o < bytes; o += 64) {
    if (write)
      __builtin_prefetch(p + o, 1, 2);
    else
      __builtin_prefetch(p + o, 0, 2);
  }
}

/* Items [begin, end) of "conv.pad" from a channels-last image (channels
 * contiguous): blocks of up to 32 channels of one image and phase at once,
 * each image position's channels read as one run and spread over their
 * planes, where a plane at a time read one element per cache line; with
 * AVX-512, by 16 x 16 transposes (loom_conv_pad_cl_planes_avx512), or by
 * permutes where positions are at most 4 floats apart (a narrow image:
 * loom_conv_pad_cl_narrow_avx512). */
static int pad_channels_last(const loom_tensor *dst, const loom_tensor *src, int64_t begin,
                             int64_t end, int64_t top, int64_t left, int64_t wq, int64_t sh,
                             int64_t sw) {
  enum { CB = 32 };
  const int64_t phases = sh * sw, c_n = src->sizes[1], h_n = src->sizes[3], w_n = src->sizes[4];
  const int64_t plane = dst->sizes[2], ssh = src->strides[3], ssw = src->strides[4];
  const int64_t per_image = c_n * phases;
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  for (int64_t n = begin / per_image; n * per_image < end; ++n) {
    /* The phases read every sh-th row and sw-th position and write 32
     * planes at once: patterns the hardware prefetchers follow badly from
     * memory (CL at batch 32 of 32x32x32, the caches flushed: 2.9x NCHW's
     * time). The image and its planes, when they fit the L2, are asked
     * for up front as two sequential streams. */
    prefetch_run((const char *)src->data + n * src->strides[0] * 4, h_n * ssh * 4, 0);
    prefetch_run((const char *)dst->data + n * dst->strides[0] * 4, dst->strides[0] * 4, 1);
    for (int64_t ph = 0; ph < phases; ++ph) {
      const pad_phase e = pad_phase_of(ph, top, left, sh, sw, h_n, w_n);
      if (e.j1 > wq || (e.i1 > e.i0 && e.j1 > e.j0 && (e.i1 - 1) * wq + e.j1 > plane))
        return LOOM_ERROR_INVALID_ARGUMENT;
      /* the channels c whose item (n * c_n + c) * phases + ph is in range */
      const int64_t base = n * per_image + ph;
      const int64_t clo = begin > base ? (begin - base + phases - 1) / phases : 0;
      int64_t chi = end > base ? (end - base + phases - 1) / phases : 0;
      if (chi > c_n) chi = c_n;
      for (int64_t c0 = clo; c0 < chi; c0 += CB) {
        const int64_t cnt = chi - c0 < CB ? chi - c0 : CB;
        float *d[CB];
        const float *s = (const float *)src->data + n * src->strides[0] + c0;
        const int64_t step = sw * ssw, w = e.j1 - e.j0;
        for (int64_t k = 0; k < cnt; ++k)
          d[k] = (float *)dst->data + n * dst->strides[0] +
                 ((c0 + k) * phases + ph) * dst->strides[1];
        if (avx512 && w > 0 && e.i1 > e.i0) {
          const float *s0 = s + (e.i0 * sh + e.a - top) * ssh + (e.j0 * sw + e.b - left) * ssw;
          if (step <= 4 && cnt <= step) /* a narrow image: the stem's 3 channels */
            loom_conv_pad_cl_narrow_avx512(d, cnt, plane, wq, e.i0, e.i1, e.j0, e.j1, s0,
                                           sh * ssh, step);
          else
            loom_conv_pad_cl_planes_avx512(d, cnt, plane, wq, e.i0, e.i1, e.j0, e.j1, s0,
                                           sh * ssh, step);
          continue;
        }
        for (int64_t k = 0; k < cnt; ++k) pad_zero_around(d[k], plane, wq, &e);
        /* a row's block of channels stays in L1 while each plane's row
         * is written in turn */
        for (int64_t i = e.i0; i < e.i1 && w > 0; ++i) {
          const float *sr = s + (i * sh + e.a - top) * ssh + (e.j0 * sw + e.b - left) * ssw;
          for (int64_t k = 0; k < cnt; ++k) {
            float *restrict row = d[k] + i * wq + e.j0;
            const float *restrict sk = sr + k;
            for (int64_t j = 0; j < w; ++j) row[j] = sk[j * step];
          }
        }
      }
    }
  }
  return 0;
}

int loom_conv_pad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dst = &args->tensors[0], *src = &args->tensors[1];
  const int64_t top = args->scalars[0].i, left = args->scalars[1].i, wq = args->scalars[2].i;
  const int64_t sh = args->num_scalars > 4 ? args->scalars[3].i : 1;
  const int64_t sw = args->num_scalars > 4 ? args->scalars[4].i : 1;
  if (dst->rank != 3 || src->rank != 5 || dst->dtype != LOOM_FLOAT32 ||
      src->dtype != LOOM_FLOAT32 || dst->strides[2] != 1 || src->sizes[2] != 1 || sh < 1 ||
      sw < 1 || dst->sizes[0] != src->sizes[0] || dst->sizes[1] != src->sizes[1] * sh * sw ||
      top < 0 || left < 0 || wq < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t phases = sh * sw, c_n = src->sizes[1], h_n = src->sizes[3], w_n = src->sizes[4];
  const int64_t plane = dst->sizes[2], ssh = src->strides[3], ssw = src->strides[4];
  if (src->strides[1] == 1 && ssw != 1 && c_n > 1)
    return pad_channels_last(dst, src, begin, end, top, left, wq, sh, sw);
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  /* Worked out once per phase: small planes spent more time in these
   * divisions than in the copy. */
  enum { PHASES = 16 };
  pad_phase table[PHASES];
  for (int64_t ph = 0; ph < phases && ph < PHASES; ++ph)
    table[ph] = pad_phase_of(ph, top, left, sh, sw, h_n, w_n);
  int64_t n = begin / (c_n * phases), c = begin % (c_n * phases) / phases, ph = begin % phases;
  for (int64_t item = begin; item < end; ++item) {
    const pad_phase e = ph < PHASES ? table[ph] : pad_phase_of(ph, top, left, sh, sw, h_n, w_n);
    const int64_t a = e.a, b = e.b, i0 = e.i0, i1 = e.i1, j0 = e.j0, j1 = e.j1;
    float *d = (float *)dst->data + n * dst->strides[0] + (c * phases + ph) * dst->strides[1];
    const float *s = (const float *)src->data + n * src->strides[0] + c * src->strides[1];
    if (++ph == phases) ph = 0, c = c + 1 == c_n ? (++n, 0) : c + 1;
    if (j1 > wq || (i1 > i0 && j1 > j0 && (i1 - 1) * wq + j1 > plane))
      return LOOM_ERROR_INVALID_ARGUMENT;
    /* every element written once: data runs, and the zeros between them */
    int64_t zero_from = 0;
    if (avx512 && sw <= 2 && ssw == 1 && j1 > j0 && i1 > i0)
      zero_from = loom_conv_pad_rows_avx512(d, wq, i0, i1, j0, j1,
                                            s + (i0 * sh + a - top) * ssh + (j0 * sw + b - left),
                                            sh * ssh, sw);
    else
      for (int64_t i = i0; i < i1 && j1 > j0; ++i) {
        float *row = d + i * wq;
        memset(d + zero_from, 0, (size_t)(row + j0 - (d + zero_from)) * sizeof(float));
        const float *sr = s + (i * sh + a - top) * ssh + (j0 * sw + b - left) * ssw;
        if (sw == 1 && ssw == 1) {
          memcpy(row + j0, sr, (size_t)(j1 - j0) * sizeof(float));
        } else if (sw == 2 && ssw == 1) {
          /* a constant stride, which the compiler vectorizes */
          for (int64_t j = 0; j < j1 - j0; ++j) row[j0 + j] = sr[2 * j];
        } else {
          for (int64_t j = j0; j < j1; ++j) row[j] = sr[(j - j0) * sw * ssw];
        }
        zero_from = i * wq + j1;
      }
    memset(d + zero_from, 0, (size_t)(plane - zero_from) * sizeof(float));
  }
  return 0;
}

const loom_kernel_entry loom_im2col_kernels[] = {
    {"im2col.to_col", loom_im2col_kernel, NULL},
    {"im2col.to_image", loom_col2im_kernel, NULL},
    {"im2col.nhwc_to_col", loom_im2col_nhwc_kernel, NULL},
    {"im2col.nhwc_to_image", loom_col2im_nhwc_kernel, NULL},
    {NULL, NULL, NULL},
};
