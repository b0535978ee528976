/* kernels/conv/conv_nhwc_internal.h — what the channels-last bf16
 * convolutions (kernels/conv/conv_nhwc.h) share between their AMX variant
 * (conv_nhwc_amx.c) and their AVX512-BF16 one (conv_nhwc_avx512bf16.c):
 * the layouts they check, the operands of a forward launch and of a weight
 * gradient launch, and the store of a block of sums to the output. Include
 * only from files built with AVX512-BF16 flags. Not part of any contract. */
#ifndef LOOM_KERNELS_CONV_NHWC_INTERNAL_H
#define LOOM_KERNELS_CONV_NHWC_INTERNAL_H

#include <immintrin.h>
#include <string.h>

#include "kernels/base/dtype.h"
#include "kernels/conv/conv_gemm_internal.h"
#include "kernels/conv/conv_nhwc.h"
#include "kernels/gemm/transpose_avx512.h"
#include "loom/status.h"

enum {
  CB = LOOM_CONV_NHWC_CB,
  OB = LOOM_CONV_NHWC_OB,
  BTILE = 16 * 32, /* a B tile: 16 channel pairs of 16 out-channels, bf16 */
  MAX_TAPS = 64,
  EMIT_TAPS = 16, /* windows of up to this many taps round dw's sums by vectors */
};

static inline int nhwc_contiguous(const loom_tensor *t) {
  int64_t step = 1;
  for (int i = t->rank - 1; i >= 0; --i) {
    if (t->sizes[i] != 1 && t->strides[i] != step) return 0;
    step *= t->sizes[i];
  }
  return 1;
}

/* The copy's layout (kernels/conv/conv_nhwc.h): channels unit-stride, then
 * positions ps >= cp apart, planes and images in turn, bf16. */
static inline int nhwc_copy_layout(const loom_tensor *t) {
  const int64_t *st = t->strides, *sz = t->sizes;
  return t->rank == 4 && t->dtype == LOOM_BFLOAT16 && st[3] == 1 && sz[3] % CB == 0 &&
         st[2] >= sz[3] && st[1] == sz[2] * st[2] && st[0] == sz[1] * st[1];
}

/* The weight gradient's copy: the same positions in interleaved pairs,
 * position q's channel c at (q / 2) * ps + 2 c + q % 2 (ps >= 2 cp). */
static inline int nhwc_pair_layout(const loom_tensor *t) {
  const int64_t *st = t->strides, *sz = t->sizes;
  return t->rank == 5 && t->dtype == LOOM_BFLOAT16 && sz[4] == 2 && st[4] == 1 && st[3] == 2 &&
         sz[3] % CB == 0 && st[2] >= 2 * sz[3] && st[1] == sz[2] * st[2] &&
         st[0] == sz[1] * st[1];
}

/* The 32 x 32 sums buf[position][out-channel] to the output: transposed,
 * rounded, positions [0, qn) of the grid from q0 on, out channels from o0
 * on. */
static inline void nhwc_emit(const float *buf, const loom_tensor *out, int64_t n, int64_t o0,
                      int64_t q0, int64_t qn, int64_t wq) {
  const int64_t *st = out->strides, o_n = out->sizes[1], ho = out->sizes[2], wo = out->sizes[3];
  /* the positions' runs inside output rows: where each starts in the
   * plane and among the 32 lanes, and its lanes */
  int64_t at[32];
  __mmask32 lanes[32];
  int runs = 0;
  for (int64_t l = 0; l < qn;) {
    const int64_t q = q0 + l, y = q / wq, x = q % wq;
    const int64_t run = wq - x < qn - l ? wq - x : qn - l;
    if (y < ho && x < wo) {
      at[runs] = y * st[2] + (x - l) * st[3];
      lanes[runs++] = cg_range_mask32(l, l + (wo - x < run ? wo - x : run));
    }
    l += run;
  }
  const uintptr_t base = (uintptr_t)((uint16_t *)out->data + n * st[0] + o0 * st[1]);
  for (int ch = 0; ch < 32 && o0 + ch < o_n; ch += 16) {
    /* out-channels ch..ch+15 at positions 0-15 (lo) and 16-31 (hi) */
    __m512i lo[16], hi[16];
    for (int i = 0; i < 16; ++i) {
      lo[i] = _mm512_load_si512(buf + i * 32 + ch);
      hi[i] = _mm512_load_si512(buf + (16 + i) * 32 + ch);
    }
    loom_gemm_transpose16(lo);
    loom_gemm_transpose16(hi);
    for (int i = 0; i < 16 && o0 + ch + i < o_n; ++i) {
      /* tdpbf16ps flushes subnormal sums to 0, so vcvtne2ps2bf16, which
       * would take them for 0, rounds these as loom_f32_to_bf16 does */
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi[i]),
                                                     _mm512_castsi512_ps(lo[i]));
      const uintptr_t row = base + (uintptr_t)((ch + i) * st[1]) * sizeof(uint16_t);
      for (int r = 0; r < runs && st[3] == 1; ++r)
        _mm512_mask_storeu_epi16((void *)(row + (uintptr_t)at[r] * sizeof(uint16_t)), lanes[r], v);
      /* every other element: each half of the lanes spread to the even
       * lanes of a vector */
      for (int r = 0; r < runs && st[3] == 2; ++r)
        for (int h = 0; h < 2; ++h) {
          uint32_t m = lanes[r] >> (16 * h) & 0xffffu; /* lane k to bit 2k */
          m = (m | m << 8) & 0x00ff00ffu, m = (m | m << 4) & 0x0f0f0f0fu;
          m = (m | m << 2) & 0x33333333u, m = (m | m << 1) & 0x55555555u;
          if (m == 0) continue;
          const __m512i spread = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10,
                                                  9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2,
                                                  2, 1, 1, 0, 0);
          _mm512_mask_storeu_epi16(
              (void *)(row + (uintptr_t)(at[r] + 32 * h) * sizeof(uint16_t)), (__mmask32)m,
              _mm512_permutexvar_epi16(
                  _mm512_add_epi16(spread, _mm512_set1_epi16((short)(16 * h))), v));
        }
    }
  }
}

/* One convolution of a launch: its output, packed weight, window, and
 * each tap's phase plane and offset in the copy. */
typedef struct nhwc_conv {
  const loom_tensor *out, *wp;
  int64_t taps, grid, tap_off[MAX_TAPS];
} nhwc_conv;

/* Checks a convolution's operands against the copy's and fills *cv. */
static inline int nhwc_conv_init(nhwc_conv *cv, const loom_tensor *out, const loom_tensor *xp,
                          const loom_tensor *wp, const int64_t *win, int64_t wq,
                          int64_t origin) {
  const int64_t kh = win[0], kw = win[1], sh = win[2], sw = win[3], dh = win[4], dw = win[5];
  const int64_t taps = kh * kw;
  if (out->rank != 4 || wp->rank != 5 || out->dtype != LOOM_BFLOAT16 ||
      wp->dtype != LOOM_BFLOAT16 || (out->strides[3] != 1 && out->strides[3] != 2) ||
      !nhwc_contiguous(wp) || kh < 1 || kw < 1 || taps > MAX_TAPS || sh < 1 || sw < 1 ||
      dh < 1 || dw < 1 || wq < out->sizes[3] || xp->sizes[0] != out->sizes[0] ||
      xp->sizes[1] != sh * sw || wp->sizes[2] != taps || wp->sizes[3] != 2 * OB ||
      wp->sizes[4] != CB || xp->sizes[3] != wp->sizes[1] * CB ||
      wp->sizes[0] * 2 * OB < out->sizes[1] || origin < 0)
    return LOOM_ERROR_INVALID_ARGUMENT;
  cv->out = out, cv->wp = wp, cv->taps = taps, cv->grid = out->sizes[2] * wq;
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t y = t / kw * dh, x = t % kw * dw;
    const int64_t at = origin + y / sh * wq + x / sw;
    cv->tap_off[t] = (y % sh * sw + x % sw) * xp->sizes[2] + at;
    if (at + (cv->grid + 31) / 32 * 32 > xp->sizes[2]) return LOOM_ERROR_INVALID_ARGUMENT;
  }
  return 0;
}

/* A forward launch's operands ("conv_nhwc.forward"): its convolutions
 * (*count of them), the bias (NULL: none), the copy, wq, the positions per
 * item and the items per image. Returns 0 or a loom_status. */
static inline int nhwc_forward_of(const loom_kernel_args *args, nhwc_conv *cv, int64_t *count,
                                  const loom_tensor **bias, int64_t *wq, int64_t *ppi,
                                  int64_t *per) {
  if (args->num_tensors < 3 || args->num_scalars < 8) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *xp = &args->tensors[1];
  *bias = args->num_tensors > 3 && args->tensors[3].data ? &args->tensors[3] : NULL;
  const loom_scalar *s = args->scalars;
  *wq = s[6].i, *ppi = s[7].i;
  const int64_t more = args->num_scalars > 9 ? s[9].i : 0;
  if (!nhwc_copy_layout(xp) || (*bias && (*bias)->dtype != LOOM_BFLOAT16) || *ppi < 32 ||
      *ppi > LOOM_CONV_NHWC_POSITIONS || *ppi % 32 != 0 || more < 0 ||
      more >= LOOM_CONV_NHWC_CONVS ||
      (more > 0 && (args->num_tensors < 4 + 2 * more || args->num_scalars < 10 + 3 * more)))
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t win[6] = {s[0].i, s[1].i, s[2].i, s[3].i, s[4].i, s[5].i};
  *per = 0;
  for (int64_t i = 0; i <= more; ++i) {
    const int64_t origin = i == 0 ? (args->num_scalars > 8 ? s[8].i : 0) : s[12 + 3 * (i - 1)].i;
    if (i > 0) win[0] = s[10 + 3 * (i - 1)].i, win[1] = s[11 + 3 * (i - 1)].i;
    const loom_tensor *out = &args->tensors[i == 0 ? 0 : 4 + 2 * (i - 1)];
    const loom_tensor *wp = &args->tensors[i == 0 ? 2 : 5 + 2 * (i - 1)];
    const int rc = nhwc_conv_init(&cv[i], out, xp, wp, win, *wq, origin);
    if (rc) return rc;
    if ((cv[i].grid + *ppi - 1) / *ppi > *per) *per = (cv[i].grid + *ppi - 1) / *ppi;
  }
  *count = more + 1;
  return 0;
}

/* A weight gradient launch's operands ("conv_nhwc.weight_grad"). */
typedef struct nhwc_wgrad {
  const loom_tensor *dw, *xq, *dy;
  int64_t taps, wq, lead, group;
  int64_t o_n, c_n, cbs, obs, images, phases, plane, span, ps;
  int64_t tap_ph[MAX_TAPS], tap_off[MAX_TAPS]; /* each tap's phase plane and offset */
  /* With at most EMIT_TAPS taps, an out-channel's C x T run of dw, 32 in-channels
   * at a time, is T vectors of 32: lane l of vector v is element e = 32 v + l,
   * in-channel e / T of tap e % T. emit_at[v][l]: the lane of tap pair (2 k,
   * 2 k + 1) that holds it (in-channel, plus 32 for the odd tap); emit_pair[v][k]:
   * the lanes of vector v that pair k holds. */
  _Alignas(64) uint16_t emit_at[EMIT_TAPS][32];
  __mmask32 emit_pair[EMIT_TAPS][EMIT_TAPS / 2];
} nhwc_wgrad;

static inline int nhwc_wgrad_of(const loom_kernel_args *args, nhwc_wgrad *g) {
  if (args->num_tensors < 3 || args->num_scalars < 8) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dw = &args->tensors[0], *xq = &args->tensors[1], *dy = &args->tensors[2];
  const loom_scalar *s = args->scalars;
  const int64_t kh = s[0].i, kw = s[1].i, sh = s[2].i, sw = s[3].i, dh = s[4].i, dwl = s[5].i;
  const int64_t wq = s[6].i, lead = s[7].i, taps = kh * kw;
  const int64_t group = args->num_scalars > 8 ? s[8].i : 1;
  if (dw->rank != 3 || dw->dtype != LOOM_BFLOAT16 || !nhwc_contiguous(dw) ||
      !nhwc_pair_layout(xq) || dy->rank != 3 || dy->dtype != LOOM_BFLOAT16 ||
      !nhwc_contiguous(dy) || kh < 1 || kw < 1 || taps > MAX_TAPS || dw->sizes[2] != taps ||
      sh < 1 || sw < 1 || dh < 1 || dwl < 1 || wq < 1 || xq->sizes[1] != sh * sw ||
      dy->sizes[0] != xq->sizes[0] || dy->sizes[1] % 32 != 0 || dy->sizes[1] < dw->sizes[0] ||
      xq->sizes[3] < dw->sizes[1] || xq->sizes[2] % 16 != 0 || lead < 0 || group < 1 ||
      group * taps > LOOM_CONV_NHWC_WG_BLOCKS)
    return LOOM_ERROR_INVALID_ARGUMENT;
  g->dw = dw, g->xq = xq, g->dy = dy;
  g->taps = taps, g->wq = wq, g->lead = lead, g->group = group;
  g->o_n = dw->sizes[0], g->c_n = dw->sizes[1], g->cbs = xq->sizes[3] / CB;
  g->obs = dy->sizes[1] / 32;
  g->images = xq->sizes[0], g->phases = xq->sizes[1], g->plane = xq->sizes[2] * 2;
  g->span = dy->sizes[2], g->ps = xq->strides[2];
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t y = t / kw * dh, x = t % kw * dwl;
    g->tap_ph[t] = y % sh * sw + x % sw;
    g->tap_off[t] = y / sh * wq + x / sw;
    if (g->tap_off[t] > lead || g->span < lead - g->tap_off[t] + g->plane)
      return LOOM_ERROR_INVALID_ARGUMENT;
  }
  if (taps <= EMIT_TAPS) {
    memset(g->emit_pair, 0, sizeof g->emit_pair);
    for (int64_t e = 0, j = 0, t = 0; e < 32 * taps; ++e) {
      g->emit_at[e / 32][e % 32] = (uint16_t)(j | (t & 1) << 5);
      g->emit_pair[e / 32][t / 2] |= (__mmask32)1 << (e % 32);
      if (++t == taps) t = 0, ++j;
    }
  }
  return 0;
}

/* 16 fp32 sums rounded to bf16 as loom_f32_to_bf16 rounds each (nearest
 * even; NaN quieted), bit for bit. */
static inline __m256i nhwc_round16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)),
                       _mm512_and_si512(_mm512_srli_epi32(bits, 16), one)),
      16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

/* The sums sums[t][i * 32 + j] of out-channel ob * 32 + i, in-channel
 * cb * 32 + j and tap t, rounded to bf16 into dw (O, C, T): each
 * out-channel's 32 x T run rounded a tap at a time, then written in dw's
 * order; with at most EMIT_TAPS taps as whole vectors, each a blend of
 * the taps' permuted pairs (a scalar scatter of the elements stalled on
 * reading back what the rounding had just stored: a third of the weight
 * gradient of 512 channels at 7 x 7). */
static inline void nhwc_wgrad_emit(const nhwc_wgrad *g, const float (*sums)[32 * 32], int64_t ob,
                                   int64_t cb) {
  uint16_t *out = (uint16_t *)g->dw->data;
  const int64_t taps = g->taps, nj = g->c_n - cb * CB < 32 ? g->c_n - cb * CB : 32;
  if (taps <= EMIT_TAPS) {
    const int64_t len = nj * taps; /* the run's elements */
    for (int64_t i = 0; i < 32 && ob * 32 + i < g->o_n; ++i) {
      __m512i r[EMIT_TAPS];
      for (int64_t t = 0; t < taps; ++t)
        r[t] = _mm512_inserti64x4(
            _mm512_castsi256_si512(nhwc_round16(_mm512_load_ps(sums[t] + i * 32))),
            nhwc_round16(_mm512_load_ps(sums[t] + i * 32 + 16)), 1);
      if (taps % 2) r[taps] = _mm512_setzero_si512();
      uint16_t *d = out + ((ob * 32 + i) * g->c_n + cb * CB) * taps;
      for (int64_t v = 0; v * 32 < len; ++v) {
        const __m512i at = _mm512_load_si512(g->emit_at[v]);
        __m512i e = _mm512_setzero_si512();
        for (int64_t k = 0; 2 * k < taps; ++k)
          e = _mm512_mask_mov_epi16(e, g->emit_pair[v][k],
                                    _mm512_permutex2var_epi16(r[2 * k], at, r[2 * k + 1]));
        _mm512_mask_storeu_epi16(d + 32 * v, cg_range_mask32(0, len - 32 * v), e);
      }
    }
    return;
  }
  _Alignas(64) uint16_t r[MAX_TAPS][32];
  for (int64_t i = 0; i < 32 && ob * 32 + i < g->o_n; ++i) {
    for (int64_t t = 0; t < taps; ++t) {
      _mm256_store_si256((__m256i *)r[t], nhwc_round16(_mm512_load_ps(sums[t] + i * 32)));
      _mm256_store_si256((__m256i *)(r[t] + 16),
                         nhwc_round16(_mm512_load_ps(sums[t] + i * 32 + 16)));
    }
    uint16_t *d = out + ((ob * 32 + i) * g->c_n + cb * CB) * taps;
    for (int64_t j = 0; j < nj; ++j)
      for (int64_t t = 0; t < taps; ++t) d[j * taps + t] = r[t][j];
  }
}

#endif /* LOOM_KERNELS_CONV_NHWC_INTERNAL_H */
