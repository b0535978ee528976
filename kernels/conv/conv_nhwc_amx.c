/* kernels/conv/conv_nhwc_amx.c — bf16 2-d convolutions on AMX tiles over a
 * channels-last padded copy of the image (kernels/conv/conv_nhwc.h): output
 * positions are the tiles' rows, so every A tile is 16 positions of 32
 * channels read straight from the copy, and the weight is the B tiles.
 * Nothing is gathered per tile: the copy's one pass replaces the implicit
 * GEMM's col gather (kernels/conv/conv_gemm_amx.c), which cost about as much as
 * the products. The copy and the weight's packing use AVX-512 only, and
 * serve the AVX512-BF16 variant (conv_nhwc_avx512bf16.c) as well. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv_nhwc_internal.h"
#include "kernels/gemm/gemm_internal.h"

/* Channel c's row at the 32 columns ix0 + l * sw (l < 32) as the lanes of
 * a vector, 0 outside [0, w): `m` (and `m2` for stride 2) are the valid
 * lanes of the one or two loads of unit-stride rows. */
static inline __m512i pad_load(const uint16_t *row, int64_t ix0, int64_t w, int64_t sw,
                               int64_t step, __mmask32 m, __mmask32 m2) {
  if (step == 1 && sw == 1) return _mm512_maskz_loadu_epi16(m, row + ix0);
  if (step == 1 && sw == 2) {
    const __m512i even = cg_even_lanes16();
    return _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi16(m, row + ix0), even,
                                     _mm512_maskz_loadu_epi16(m2, row + ix0 + 32));
  }
  _Alignas(64) uint16_t v[32];
  for (int64_t l = 0; l < 32; ++l) {
    const int64_t ix = ix0 + l * sw;
    v[l] = ix >= 0 && ix < w ? row[ix * step] : 0;
  }
  return _mm512_load_si512(v);
}

/* Positions j0.. j0 + count - 1 of a row, v[p] holding position j0 + p's
 * 32 channels from c0 on, into the copy: one position per row of it, or
 * with `pairs` two positions interleaved (j0 and count even). */
static inline void pad_store(uint16_t *drow, int64_t j0, int64_t count, int64_t c0, int64_t ps,
                             int pairs, const __m512i v[16]) {
  if (!pairs) {
    for (int64_t p = 0; p < count; ++p) _mm512_storeu_si512(drow + (j0 + p) * ps + c0, v[p]);
    return;
  }
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  for (int64_t p = 0; p < count; p += 2) {
    uint16_t *d = drow + (j0 + p) / 2 * ps + 2 * c0;
    _mm512_storeu_si512(d, _mm512_permutex2var_epi16(v[p], lo, v[p + 1]));
    _mm512_storeu_si512(d + 32, _mm512_permutex2var_epi16(v[p], hi, v[p + 1]));
  }
}

int loom_conv_nhwc_pad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 5) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dst = &args->tensors[0], *src = &args->tensors[1];
  const int64_t top = args->scalars[0].i, left = args->scalars[1].i, wq = args->scalars[2].i,
                sh = args->scalars[3].i, sw = args->scalars[4].i;
  const int pairs = dst->rank == 5;
  if (!(pairs ? nhwc_pair_layout(dst) : nhwc_copy_layout(dst)) || src->rank != 5 ||
      src->dtype != LOOM_BFLOAT16 || src->sizes[2] != 1 || dst->sizes[0] != src->sizes[0] ||
      src->sizes[1] > dst->sizes[3] || wq < 1 || sh < 1 || sw < 1 || top < 0 || left < 0 ||
      dst->sizes[1] != sh * sw || (pairs && wq % 2 != 0))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t phases = dst->sizes[1], plane = dst->sizes[2] << pairs, cp = dst->sizes[3];
  const int64_t ps = dst->strides[2]; /* per position, or per pair */
  const int64_t rows = (plane + wq - 1) / wq, c_in = src->sizes[1];
  const int64_t *st = src->strides, h = src->sizes[3], w = src->sizes[4];
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / (phases * rows), ph = item / rows % phases, i = item % rows;
    const int64_t iy = i * sh + ph / sw - top, q0 = i * wq;
    const int64_t count = plane - q0 < wq ? plane - q0 : wq;
    /* position j of the row; with pairs, j even: its pair */
    uint16_t *drow = (uint16_t *)dst->data + (n * phases + ph) * dst->strides[1] +
                     (pairs ? q0 / 2 : q0) * ps;
    if (iy < 0 || iy >= h) {
      for (int64_t j = 0; j < count; j += 1 + pairs)
        memset(drow + (j >> pairs) * ps, 0, (size_t)(cp << pairs) * sizeof(uint16_t));
      continue;
    }
    const uint16_t *srow = (const uint16_t *)src->data + n * st[0] + iy * st[3];
    /* the next item's image row (its plane's next row), channel by
     * channel: the loads of every channel's row at once, each of them a
     * stream of its own, wait on the cache's misses otherwise */
    if (iy + sh < h && i + 1 < rows && w >= 16 && (st[4] == 1 || w * st[4] <= 64))
      for (int64_t c = 0; c < c_in; ++c) {
        const char *next = (const char *)(srow + c * st[1] + sh * st[3]);
        _mm_prefetch(next, _MM_HINT_T0);
        _mm_prefetch(next + (w * st[4] - 1) * (int64_t)sizeof(uint16_t), _MM_HINT_T0);
      }
    for (int64_t j0 = 0; j0 < count; j0 += 32) {
      const int64_t jn = count - j0 < 32 ? count - j0 : 32;
      const int64_t ix0 = j0 * sw + ph % sw - left; /* lane 0's column */
      const __mmask32 m = cg_range_mask32(-ix0, w - ix0);
      const __mmask32 m2 = cg_range_mask32(-ix0 - 32, w - ix0 - 32);
      for (int64_t c0 = 0; c0 < cp; c0 += CB) {
        /* 16 channel pairs at 32 positions, as 32-bit pairs: lo holds
         * positions 0-15, hi 16-31; transposed, each is a position's 32
         * channels */
        __m512i r_lo[16], r_hi[16];
        for (int q = 0; q < 16; ++q) {
          const int64_t c = c0 + 2 * q;
          const __m512i v0 = c < c_in ? pad_load(srow + c * st[1], ix0, w, sw, st[4], m, m2)
                                      : _mm512_setzero_si512();
          const __m512i v1 = c + 1 < c_in
                                 ? pad_load(srow + (c + 1) * st[1], ix0, w, sw, st[4], m, m2)
                                 : _mm512_setzero_si512();
          r_lo[q] = _mm512_permutex2var_epi16(v0, lo, v1);
          r_hi[q] = _mm512_permutex2var_epi16(v0, hi, v1);
        }
        loom_gemm_transpose16(r_lo);
        pad_store(drow, j0, jn < 16 ? jn : 16, c0, ps, pairs, r_lo);
        if (jn <= 16) continue;
        loom_gemm_transpose16(r_hi);
        pad_store(drow, j0 + 16, jn - 16, c0, ps, pairs, r_hi);
      }
    }
  }
  return 0;
}

/* The 32 in-channels' runs of `taps` (<= 16) taps from `run` on, back to
 * back (channel c's tap t at c * taps + t), as blkt[t][o][c]: the run's
 * `taps` vectors, and for each tap each pair of them permuted into the
 * lanes whose element it holds. */
static void pack_taps(const uint16_t *run, int64_t taps, uint16_t (*blkt)[OB][CB], int64_t o) {
  __m512i v[16];
  for (int64_t k = 0; k < taps; ++k) v[k] = _mm512_loadu_si512(run + 32 * k);
  for (int64_t k = taps; k < 16; ++k) v[k] = _mm512_setzero_si512();
  const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                                        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                        1, 0);
  const __m512i base = _mm512_mullo_epi16(lane, _mm512_set1_epi16((short)taps));
  for (int64_t t = 0; t < taps; ++t) {
    const __m512i at = _mm512_add_epi16(base, _mm512_set1_epi16((short)t)); /* element c*taps+t */
    const __m512i pair = _mm512_srli_epi16(at, 6);
    __m512i r = _mm512_setzero_si512();
    for (int64_t p = 0; 2 * p < taps; ++p) {
      const __mmask32 m = _mm512_cmpeq_epi16_mask(pair, _mm512_set1_epi16((short)p));
      r = _mm512_mask_mov_epi16(r, m, _mm512_permutex2var_epi16(v[2 * p], at, v[2 * p + 1]));
    }
    _mm512_store_si512(blkt[t][o], r);
  }
}

/* The flipped weight's tiles, tap t's (w's tap taps - 1 - t; taps <= 16)
 * at d + t * 2 * BTILE: row k, out-channel o's lanes 2 o and 2 o + 1, holds
 * in-channels 2 k and 2 k + 1, whose 16 out-channels' runs of taps lie
 * back to back from blk + c * c_step on: per tap, each pair of vectors of
 * the two runs permuted into the lanes whose element it holds. */
static void pack_flipped(const uint16_t *blk, int64_t c_step, int64_t taps, uint16_t *d) {
  const int64_t len = OB * taps, nv = (len + 31) / 32; /* a run's elements, vectors */
  const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                                        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                        1, 0);
  const __m512i first =
      _mm512_mullo_epi16(_mm512_srli_epi16(lane, 1), _mm512_set1_epi16((short)taps));
  const __mmask32 odd = 0xaaaaaaaau;
  for (int64_t k = 0; k < CB / 2; ++k) {
    __m512i v[2][8]; /* the two runs, up to 16 x 16 taps each */
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < 8; ++i)
        v[j][i] = i < nv ? _mm512_maskz_loadu_epi16(cg_range_mask32(0, len - 32 * i),
                                                     blk + (2 * k + j) * c_step + 32 * i)
                         : _mm512_setzero_si512();
    for (int64_t t = 0; t < taps; ++t) {
      /* lane 2 o + j: element o * taps + taps - 1 - t of run j */
      const __m512i at = _mm512_add_epi16(first, _mm512_set1_epi16((short)(taps - 1 - t)));
      const __m512i pair = _mm512_srli_epi16(at, 6);
      __m512i r = _mm512_setzero_si512();
      for (int64_t p = 0; 2 * p < nv; ++p) {
        const __mmask32 m = _mm512_cmpeq_epi16_mask(pair, _mm512_set1_epi16((short)p));
        r = _mm512_mask_mov_epi16(r, m & ~odd,
                                  _mm512_permutex2var_epi16(v[0][2 * p], at, v[0][2 * p + 1]));
        r = _mm512_mask_mov_epi16(r, m & odd,
                                  _mm512_permutex2var_epi16(v[1][2 * p], at, v[1][2 * p + 1]));
      }
      _mm512_storeu_si512(d + t * 2 * BTILE + k * 32, r);
    }
  }
}

int loom_conv_nhwc_weight_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 1) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dst = &args->tensors[0], *w = &args->tensors[1];
  const int flipped = args->scalars[0].i != 0;
  /* the convolution's in- and out-channels */
  const int64_t c_in = flipped ? w->sizes[0] : w->sizes[1];
  const int64_t o_out = flipped ? w->sizes[1] : w->sizes[0], taps = w->sizes[2];
  if (dst->rank != 5 || w->rank != 3 || dst->dtype != LOOM_BFLOAT16 ||
      w->dtype != LOOM_BFLOAT16 || !nhwc_contiguous(dst) || !nhwc_contiguous(w) ||
      dst->sizes[2] != taps || dst->sizes[3] != 2 * OB || dst->sizes[4] != CB ||
      c_in > dst->sizes[1] * CB || o_out > dst->sizes[0] * 2 * OB)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t cbs = dst->sizes[1], obs = dst->sizes[0] * 2, cw = w->sizes[1];
  const uint16_t *src = (const uint16_t *)w->data;
  /* where in w channel pair (c, o) has its row of taps */
  const int64_t c_step = flipped ? cw * taps : taps, o_step = flipped ? taps : cw * taps;
  for (int64_t item = begin; item < end; ++item) {
    /* 32 in-channels by 16 out-channels, every tap; written in order */
    const int64_t cb = item / obs, ob = item % obs;
    const int64_t nc = c_in - cb * CB < CB ? c_in - cb * CB : CB;
    const int64_t no = o_out - ob * OB < OB ? o_out - ob * OB : OB;
    const uint16_t *blk = src + cb * CB * c_step + ob * OB * o_step;
    /* Taps in groups: each out-channel's in-channels as one row of the
     * group's block, read in w's order (each channel pair's run of taps
     * contiguous), then per tap the 16 rows transposed as 32-bit pairs into
     * the tile's 16 rows. */
    enum { GROUP = 16 };
    if (flipped && nc == CB && no == OB && taps <= GROUP) {
      pack_flipped(blk, c_step, taps,
                   (uint16_t *)dst->data + ((ob / 2 * cbs + cb) * taps * 2 + ob % 2) * BTILE);
      continue;
    }
    _Alignas(64) uint16_t blkt[GROUP][OB][CB];
    for (int64_t t0 = 0; t0 < taps; t0 += GROUP) {
      const int64_t tn = taps - t0 < GROUP ? taps - t0 : GROUP;
      if (nc < CB || no < OB) memset(blkt, 0, sizeof blkt);
      if (!flipped && nc == CB && tn == taps) /* w[o][c][t], all in one group */
        for (int64_t o = 0; o < no; ++o) pack_taps(blk + o * o_step, taps, blkt, o);
      else if (!flipped) /* w[o][c][t]: c inner */
        for (int64_t o = 0; o < no; ++o)
          for (int64_t c = 0; c < nc; ++c) {
            const uint16_t *from = blk + c * c_step + o * o_step + t0;
            for (int64_t t = 0; t < tn; ++t) blkt[t][o][c] = from[t];
          }
      else /* w[c][o][t]: o inner; tap t is w's tap taps - 1 - t */
        for (int64_t c = 0; c < nc; ++c)
          for (int64_t o = 0; o < no; ++o) {
            const uint16_t *from = blk + c * c_step + o * o_step + taps - 1 - t0;
            for (int64_t t = 0; t < tn; ++t) blkt[t][o][c] = from[-t];
          }
      for (int64_t t = 0; t < tn; ++t) {
        uint16_t *d = (uint16_t *)dst->data +
                      (((ob / 2 * cbs + cb) * taps + t0 + t) * 2 + ob % 2) * BTILE;
        __m512i r[16];
        for (int o = 0; o < 16; ++o) r[o] = _mm512_load_si512(blkt[t][o]);
        loom_gemm_transpose16(r); /* r[k]: pair k of every out-channel */
        for (int k = 0; k < 16; ++k) _mm512_storeu_si512(d + k * 32, r[k]);
      }
    }
  }
  return 0;
}

/* One step of 32 k over the 2 x 2 C tiles 0-3: A tiles of rows 0-15 at a0
 * and 16-31 at a1, `as` bytes apart, B tiles at b0 and b1, `bs` apart. */
static inline void tiles_step(const void *a0, const void *a1, int64_t as, const void *b0,
                              const void *b1, int64_t bs) {
  _tile_loadd(4, a0, as);
  _tile_loadd(5, a1, as);
  _tile_loadd(6, b0, bs);
  _tile_loadd(7, b1, bs);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

/* C tiles 0-3 to a 32 x 32 block of fp32, rows 32 apart. */
static inline void tiles_store(float *c) {
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 16 * 32, 128);
  _tile_stored(3, c + 16 * 32 + 16, 128);
}


/* Positions [q0, q0 + qn) of image n's grid of one convolution, every
 * out-channel panel, from the bias (NULL: zero). Kept out of the launch's
 * loop: inlined there, the forward of 64->128 3x3/2 at 56 ran 5-8% slower. */
__attribute__((noinline)) static void nhwc_conv_block(const nhwc_conv *cv,
                                                      const loom_tensor *xp,
                                                      const loom_tensor *bias, int64_t n,
                                                      int64_t q0, int64_t qn, int64_t wq) {
  _Alignas(64) float buf[32 * 32];
  _Alignas(64) float bias_row[32];
  const int64_t ps = xp->strides[2], cbs = cv->wp->sizes[1], obs = cv->wp->sizes[0] * 2;
  const int64_t taps = cv->taps;
  const uint16_t *x = (const uint16_t *)xp->data + n * xp->strides[0];
  /* in locals, which the tile stores cannot be taken to change */
  int64_t tap_off[MAX_TAPS];
  memcpy(tap_off, cv->tap_off, (size_t)taps * sizeof tap_off[0]);
  for (int64_t ob = 0; ob < obs; ob += 2) {
    for (int64_t j = 0; j < 32 && bias; ++j)
      bias_row[j] = ob * OB + j < cv->out->sizes[1]
                        ? loom_bf16_to_f32(((const uint16_t *)bias->data)
                                               [(ob * OB + j) * bias->strides[0]])
                        : 0.0f;
    /* this panel's B tiles, in the order the k loop takes them */
    const uint16_t *panel = (const uint16_t *)cv->wp->data + ob * taps * cbs * BTILE;
    for (int64_t q = q0; q < q0 + qn; q += 32) {
      if (bias) { /* every row of a C tile starts as the bias */
        _tile_loadd(0, bias_row, 0);
        _tile_loadd(1, bias_row + 16, 0);
        _tile_loadd(2, bias_row, 0);
        _tile_loadd(3, bias_row + 16, 0);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const uint16_t *b = panel;
      for (int64_t cb = 0; cb < cbs; ++cb)
        for (int64_t t = 0; t < taps; ++t, b += 2 * BTILE) {
          const uint16_t *a = x + (tap_off[t] + q) * ps + cb * CB;
          tiles_step(a, a + 16 * ps, ps * 2, b, b + BTILE, 64);
        }
      tiles_store(buf);
      nhwc_emit(buf, cv->out, n, ob * OB, q, q0 + qn - q < 32 ? q0 + qn - q : 32, wq);
    }
  }
}

int loom_conv_nhwc_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  nhwc_conv cv[LOOM_CONV_NHWC_CONVS];
  const loom_tensor *bias;
  int64_t count, wq, ppi, per;
  const int rc = nhwc_forward_of(args, cv, &count, &bias, &wq, &ppi, &per);
  if (rc) return rc;
  const loom_tensor *xp = &args->tensors[1];
  loom_gemm_amx_begin();
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / per, q0 = item % per * ppi;
    /* the convolutions in turn over the same positions: phases of one
     * output write its lines while they are in this core's cache */
    for (int64_t i = 0; i < count; ++i)
      if (q0 < cv[i].grid)
        nhwc_conv_block(&cv[i], xp, i == 0 ? bias : NULL, n, q0,
                        cv[i].grid - q0 < ppi ? cv[i].grid - q0 : ppi, wq);
  }
  loom_gemm_amx_end();
  return 0;
}

/* The weight gradient's sums, a 32 x 32 block per out-channel block and
 * tap, in fp32. */
static _Thread_local _Alignas(64) float wg_sums[LOOM_CONV_NHWC_WG_BLOCKS][32 * 32];

int loom_conv_nhwc_wgrad_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  nhwc_wgrad g;
  const int rc = nhwc_wgrad_of(args, &g);
  if (rc) return rc;
  const loom_tensor *xq = g.xq, *dy = g.dy;
  const int64_t taps = g.taps, lead = g.lead, group = g.group, cbs = g.cbs, obs = g.obs;
  const int64_t images = g.images, phases = g.phases, plane = g.plane, span = g.span, ps = g.ps;
  const int64_t *tap_ph = g.tap_ph, *tap_off = g.tap_off;
  enum { CHUNK = 256 }; /* positions summed per tile load of the sums */
  loom_gemm_amx_begin();
  for (int64_t item = begin; item < end; ++item) {
    /* out-channel blocks [ob0, ob1) by in-channel block cb: each chunk of
     * the copy serves every one of them from this core's cache */
    const int64_t ob0 = item / cbs * group, cb = item % cbs;
    const int64_t ob1 = ob0 + group < obs ? ob0 + group : obs;
    if (ob0 >= obs) continue;
    memset(wg_sums, 0, (size_t)((ob1 - ob0) * taps) * sizeof wg_sums[0]);
    for (int64_t n = 0; n < images; ++n)
      for (int64_t ph = 0; ph < phases; ++ph) {
        const uint16_t *x = (const uint16_t *)xq->data + n * xq->strides[0] +
                            ph * xq->strides[1] + cb * CB * 2;
        for (int64_t p0 = 0; p0 < plane; p0 += CHUNK) {
          const int64_t p1 = p0 + CHUNK < plane ? p0 + CHUNK : plane;
          for (int64_t ob = ob0; ob < ob1; ++ob) {
            const uint16_t *gy =
                (const uint16_t *)dy->data + (n * dy->sizes[1] + ob * 32) * span + lead;
            for (int64_t t = 0; t < taps; ++t) {
              if (tap_ph[t] != ph) continue;
              float *c = wg_sums[(ob - ob0) * taps + t];
              _tile_loadd(0, c, 128);
              _tile_loadd(1, c + 16, 128);
              _tile_loadd(2, c + 16 * 32, 128);
              _tile_loadd(3, c + 16 * 32 + 16, 128);
              for (int64_t p = p0; p < p1; p += 32) {
                /* dy of out-channels 0-15 and 16-31 at 32 positions, and
                 * those positions' in-channels 0-15 and 16-31 in pairs */
                const uint16_t *a = gy + p - tap_off[t], *b = x + p / 2 * ps;
                tiles_step(a, a + 16 * span, span * 2, b, b + 32, ps * 2);
              }
              tiles_store(c);
            }
          }
        }
      }
    for (int64_t ob = ob0; ob < ob1; ++ob)
      nhwc_wgrad_emit(&g, (const float (*)[32 * 32])wg_sums[(ob - ob0) * taps], ob, cb);
  }
  loom_gemm_amx_end();
  return 0;
}
