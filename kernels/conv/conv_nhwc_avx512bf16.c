/* kernels/conv/conv_nhwc_avx512bf16.c — the channels-last bf16 convolutions
 * (kernels/conv/conv_nhwc.h) on CPUs with AVX512-BF16 and no AMX: the same
 * copy, packed weight and contracts as the AMX variant (conv_nhwc_amx.c),
 * with vdpbf16ps on zmm registers in place of the tiles.
 *
 * Forward: a register block is R output positions (rows of the copy, R <= 12)
 * by 32 out-channels (two B tiles' rows, one vector each), summed over a
 * few in-channel blocks and taps (every channel pair) in the registers,
 * every block of an item's positions in turn before the next steps:
 * each position's channel pair is one broadcast word of the copy, each B row
 * one load. Weight gradient: R out-channels (rows of dy) by 32 in-channels,
 * summed over the positions of the copy in pairs, each pair of positions of
 * dy one broadcast word and each pair row of the copy two loads.
 *
 * Every output sums in the order the contract gives, each vdpbf16ps adding
 * its pair's two products to the fp32 sum in turn, whatever the items; the
 * sum is rounded to bf16 once. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv_nhwc_internal.h"

/* The 32-bit word at p (2-byte aligned) in every lane. */
static inline __m512bh pair_at(const uint16_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return (__m512bh)_mm512_set1_epi32(v);
}

/* acc += the pairs at p (one 32-bit word, in every lane) by w: vdpbf16ps
 * with p's word as an embedded broadcast, which takes no shuffle of its
 * own (the intrinsics' separate broadcast ran 6% slower). */
static inline __m512 dp_word(__m512 acc, __m512bh w, const uint16_t *p) {
  __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
  return acc;
}

/* Forward: positions x, x + ps, ... (R of them) by the 32 out-channels of
 * `panel` (the packed weight's run for them: steps k = cb * taps + t of
 * [2][16 pairs][16][2]), steps [k0, k1), from sums[R][32] (rows 32 apart),
 * or from `init` (32 sums: the bias or 0) when `first`, back into sums. */
#define NHWC_FWD_ROWS(R)                                                                          \
  static void fwd_rows_##R(const uint16_t *x, int64_t ps, const int64_t *tap_off,                 \
                           int64_t taps, int64_t k0, int64_t k1, const uint16_t *panel,           \
                           int first, const float *init, float *sums) {                           \
    __m512 acc[R][2];                                                                             \
    _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                        \
      acc[i][0] = _mm512_load_ps(first ? init : sums + i * 32);                                   \
      acc[i][1] = _mm512_load_ps(first ? init + 16 : sums + i * 32 + 16);                         \
    }                                                                                             \
    const uint16_t *b = panel + k0 * 2 * BTILE;                                                   \
    for (int64_t k = k0, cb = k0 / taps, t = k0 % taps; k < k1; ++k, b += 2 * BTILE) {            \
      const uint16_t *a = x + tap_off[t] * ps + cb * CB;                                          \
      if (++t == taps) t = 0, ++cb;                                                               \
      for (int r = 0; r < 16; ++r) {                                                              \
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b + r * 32);                             \
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b + BTILE + r * 32);                     \
        /* the next step's rows (from L2 the first time a block is read) */                       \
        _mm_prefetch((const char *)(b + 2 * BTILE + r * 32), _MM_HINT_T0);                        \
        _mm_prefetch((const char *)(b + 3 * BTILE + r * 32), _MM_HINT_T0);                        \
        _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                    \
          acc[i][0] = dp_word(acc[i][0], w0, a + i * ps + 2 * r);                                 \
          acc[i][1] = dp_word(acc[i][1], w1, a + i * ps + 2 * r);                                 \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
    _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                        \
      _mm512_store_ps(sums + i * 32, acc[i][0]);                                                  \
      _mm512_store_ps(sums + i * 32 + 16, acc[i][1]);                                             \
    }                                                                                             \
  }

NHWC_FWD_ROWS(12)
NHWC_FWD_ROWS(8)

/* Steps of the weight per pass over an item's positions: 8 KB of it, read
 * from L1 by every block of rows (a panel of 256 or 512 channels, 9 taps,
 * would stream 144 or 288 KB from L2 per 12 positions). */
enum { FWD_STEPS = 4 };

/* Positions [q0, q0 + qn) of image n's grid of one convolution, every
 * out-channel panel, from the bias (NULL: zero): the item's positions in
 * blocks of 32 (12 + 12 + 8 rows; the copy holds every row of the last
 * block), FWD_STEPS steps of the weight at a time. */
static void nhwc_conv_block(const nhwc_conv *cv, const loom_tensor *xp, const loom_tensor *bias,
                            int64_t n, int64_t q0, int64_t qn, int64_t wq) {
  _Alignas(64) float sums[LOOM_CONV_NHWC_POSITIONS * 32];
  _Alignas(64) float init[32];
  const int64_t ps = xp->strides[2], cbs = cv->wp->sizes[1], obs = cv->wp->sizes[0] * 2;
  const int64_t taps = cv->taps, steps = cbs * taps;
  const uint16_t *x = (const uint16_t *)xp->data + n * xp->strides[0] + q0 * ps;
  for (int64_t ob = 0; ob < obs; ob += 2) {
    for (int64_t j = 0; j < 32; ++j)
      init[j] = bias && ob * OB + j < cv->out->sizes[1]
                    ? loom_bf16_to_f32(
                          ((const uint16_t *)bias->data)[(ob * OB + j) * bias->strides[0]])
                    : 0.0f;
    const uint16_t *panel = (const uint16_t *)cv->wp->data + ob * taps * cbs * BTILE;
    for (int64_t k0 = 0; k0 < steps; k0 += FWD_STEPS) {
      const int64_t k1 = k0 + FWD_STEPS < steps ? k0 + FWD_STEPS : steps;
      for (int64_t q = 0; q < qn; q += 32) {
        const int64_t rows = qn - q < 32 ? qn - q : 32;
        fwd_rows_12(x + q * ps, ps, cv->tap_off, taps, k0, k1, panel, k0 == 0, init,
                    sums + q * 32);
        if (rows > 12)
          fwd_rows_12(x + (q + 12) * ps, ps, cv->tap_off, taps, k0, k1, panel, k0 == 0, init,
                      sums + (q + 12) * 32);
        if (rows > 24)
          fwd_rows_8(x + (q + 24) * ps, ps, cv->tap_off, taps, k0, k1, panel, k0 == 0, init,
                     sums + (q + 24) * 32);
      }
    }
    for (int64_t q = 0; q < qn; q += 32)
      nhwc_emit(sums + q * 32, cv->out, n, ob * OB, q0 + q, qn - q < 32 ? qn - q : 32, wq);
  }
}

int loom_conv_nhwc_avx512bf16_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  nhwc_conv cv[LOOM_CONV_NHWC_CONVS];
  const loom_tensor *bias;
  int64_t count, wq, ppi, per;
  const int rc = nhwc_forward_of(args, cv, &count, &bias, &wq, &ppi, &per);
  if (rc) return rc;
  const loom_tensor *xp = &args->tensors[1];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / per, q0 = item % per * ppi;
    for (int64_t i = 0; i < count; ++i)
      if (q0 < cv[i].grid)
        nhwc_conv_block(&cv[i], xp, i == 0 ? bias : NULL, n, q0,
                        cv[i].grid - q0 < ppi ? cv[i].grid - q0 : ppi, wq);
  }
  return 0;
}

/* Weight gradient: out-channel rows g, g + span, ... (R of them, dy at
 * the chunk's positions less the tap's offset) by 32 in-channels of the
 * copy in pairs x (a pair row every ps), positions [0, np) in pairs, added
 * to sums[R][32]. */
#define NHWC_WG_ROWS(R)                                                                           \
  static void wg_rows_##R(const uint16_t *g, int64_t span, const uint16_t *x, int64_t ps,         \
                          int64_t np, float *sums) {                                              \
    __m512 acc[R][2];                                                                             \
    _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i)                                          \
      acc[i][0] = _mm512_load_ps(sums + i * 32), acc[i][1] = _mm512_load_ps(sums + i * 32 + 16);  \
    for (int64_t p = 0; p < np; p += 2) {                                                         \
      const __m512bh c0 = (__m512bh)_mm512_loadu_si512(x + p / 2 * ps);                           \
      const __m512bh c1 = (__m512bh)_mm512_loadu_si512(x + p / 2 * ps + 32);                      \
      _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                      \
        const __m512bh v = pair_at(g + i * span + p);                                             \
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], v, c0);                                           \
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], v, c1);                                           \
      }                                                                                           \
    }                                                                                             \
    _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                        \
      _mm512_store_ps(sums + i * 32, acc[i][0]);                                                  \
      _mm512_store_ps(sums + i * 32 + 16, acc[i][1]);                                             \
    }                                                                                             \
  }

NHWC_WG_ROWS(12)
NHWC_WG_ROWS(8)

/* The sums, a 32 x 32 block per out-channel block and tap, in fp32. */
static _Thread_local _Alignas(64) float wg_sums[LOOM_CONV_NHWC_WG_BLOCKS][32 * 32];

int loom_conv_nhwc_wgrad_avx512bf16_kernel(const loom_kernel_args *args, int64_t begin,
                                           int64_t end) {
  nhwc_wgrad g;
  const int rc = nhwc_wgrad_of(args, &g);
  if (rc) return rc;
  const int64_t taps = g.taps, cbs = g.cbs, obs = g.obs, span = g.span, ps = g.ps;
  /* dy is 0 past the grid's positions (scalar [9], else the plane's) */
  const int64_t grid = args->num_scalars > 9 && args->scalars[9].i > 0 &&
                               args->scalars[9].i < g.plane
                           ? args->scalars[9].i
                           : g.plane;
  enum { CHUNK = 256 }; /* positions summed per load of the sums */
  for (int64_t item = begin; item < end; ++item) {
    /* out-channel blocks [ob0, ob1) by in-channel block cb: each chunk of
     * the copy serves every one of them from this core's cache */
    const int64_t ob0 = item / cbs * g.group, cb = item % cbs;
    const int64_t ob1 = ob0 + g.group < obs ? ob0 + g.group : obs;
    if (ob0 >= obs) continue;
    memset(wg_sums, 0, (size_t)((ob1 - ob0) * taps) * sizeof wg_sums[0]);
    for (int64_t n = 0; n < g.images; ++n)
      for (int64_t ph = 0; ph < g.phases; ++ph) {
        const uint16_t *x = (const uint16_t *)g.xq->data + n * g.xq->strides[0] +
                            ph * g.xq->strides[1] + cb * CB * 2;
        for (int64_t p0 = 0; p0 < g.plane; p0 += CHUNK) {
          const int64_t np = g.plane - p0 < CHUNK ? g.plane - p0 : CHUNK;
          for (int64_t ob = ob0; ob < ob1; ++ob) {
            const uint16_t *gy = (const uint16_t *)g.dy->data +
                                 (n * g.dy->sizes[1] + ob * 32) * span + g.lead + p0;
            for (int64_t t = 0; t < taps; ++t) {
              if (g.tap_ph[t] != ph) continue;
              /* dy is 0 outside the grid: only the pairs of positions
               * [off, off + grid) add to the sums */
              const int64_t lo = (g.tap_off[t] > p0 ? g.tap_off[t] : p0) & ~(int64_t)1;
              const int64_t end = (g.tap_off[t] + grid + 1) & ~(int64_t)1;
              const int64_t hi = end < p0 + np ? end : p0 + np;
              if (hi <= lo) continue;
              float *c = wg_sums[(ob - ob0) * taps + t];
              const uint16_t *a = gy + (lo - p0) - g.tap_off[t], *b = x + lo / 2 * ps;
              wg_rows_12(a, span, b, ps, hi - lo, c);
              wg_rows_12(a + 12 * span, span, b, ps, hi - lo, c + 12 * 32);
              wg_rows_8(a + 24 * span, span, b, ps, hi - lo, c + 24 * 32);
            }
          }
        }
      }
    for (int64_t ob = ob0; ob < ob1; ++ob)
      nhwc_wgrad_emit(&g, (const float (*)[32 * 32])wg_sums[(ob - ob0) * taps], ob, cb);
  }
  return 0;
}
