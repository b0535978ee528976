/* kernels/conv/conv_nhwc_avx512bf16.c — the channels-last bf16 convolutions
 * (kernels/conv/conv_nhwc.h) on CPUs with AVX512-BF16 and no AMX: the same
 * copy, packed weight and contracts as the AMX variant (conv_nhwc_amx.c),
 * with vdpbf16ps on zmm registers in place of the tiles.
 *
 * Forward: a register block is R output positions of one output row (R <=
 * 14; the grid's columns past wo are left out, and a row's run of an item
 * is cut into blocks of even sizes) by 32 out-channels (two B tiles' rows,
 * one vector each), summed over a few in-channel blocks and taps (every
 * channel pair) in the registers, every block of an item's positions in
 * turn before the next steps: each position's channel pair is one
 * broadcast word of the copy, each B row one load. Where the launch says
 * where the copy holds the image, each tap adds the products of the
 * positions that read it only: the padding's (zeros) are left out, every
 * one of them whatever the blocks (a 7x7 image padded by one reads padding
 * in 18% of its products). Weight gradient: R out-channels (rows of dy) by
 * 32 in-channels, summed over the positions of the copy in pairs, each
 * pair of positions of dy an embedded broadcast and each pair row of the
 * copy two loads; where the launch says where the image and the grid's
 * columns are, each tap sums the grid rows that read image rows, and,
 * where every image's copy stays in L2 (small images), of them the pairs
 * up to wo.
 *
 * Every output sums in the order the contract gives, each vdpbf16ps adding
 * its pair's two products to the fp32 sum in turn, whatever the items; the
 * sum is rounded to bf16 once. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/conv_nhwc_internal.h"

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
 * or from `init` (32 sums: the bias or 0) when `first`, back into sums.
 * Tap t adds the products of positions [span[t][0], span[t][1]) only (the
 * others read padding). */
#define NHWC_FWD_STEP(R, LO, HI)                                                                  \
  for (int r = 0; r < 16; ++r) {                                                                  \
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b + r * 32);                                 \
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b + BTILE + r * 32);                         \
    /* the next step's rows (from L2 the first time a block is read) */                           \
    _mm_prefetch((const char *)(b + 2 * BTILE + r * 32), _MM_HINT_T0);                            \
    _mm_prefetch((const char *)(b + 3 * BTILE + r * 32), _MM_HINT_T0);                            \
    _Pragma("GCC unroll 14") for (int i = 0; i < R; ++i) {                                        \
      if (i < (LO) || i >= (HI)) continue;                                                        \
      acc[i][0] = dp_word(acc[i][0], w0, a + i * ps + 2 * r);                                     \
      acc[i][1] = dp_word(acc[i][1], w1, a + i * ps + 2 * r);                                     \
    }                                                                                             \
  }

#define NHWC_FWD_ROWS(R)                                                                          \
  static void fwd_rows_##R(const uint16_t *x, int64_t ps, const int64_t *tap_off,                 \
                           int64_t taps, int64_t k0, int64_t k1, const uint16_t *panel,           \
                           int first, const float *init, float *sums,                             \
                           const uint8_t (*span)[2]) {                                            \
    __m512 acc[R][2];                                                                             \
    _Pragma("GCC unroll 14") for (int i = 0; i < R; ++i) {                                        \
      acc[i][0] = _mm512_load_ps(first ? init : sums + i * 32);                                   \
      acc[i][1] = _mm512_load_ps(first ? init + 16 : sums + i * 32 + 16);                         \
    }                                                                                             \
    const uint16_t *b = panel + k0 * 2 * BTILE;                                                   \
    for (int64_t k = k0, cb = k0 / taps, t = k0 % taps; k < k1; ++k, b += 2 * BTILE) {            \
      const uint16_t *a = x + tap_off[t] * ps + cb * CB;                                          \
      const int lo = span[t][0], hi = span[t][1];                                                 \
      if (++t == taps) t = 0, ++cb;                                                               \
      /* the spans of interior and edge blocks as constants, which unroll \
       * without a test per position */                                                         \
      if (lo == 0 && hi == R) {                                                                   \
        NHWC_FWD_STEP(R, 0, R)                                                                    \
      } else if (lo == 1 && hi == R) {                                                            \
        NHWC_FWD_STEP(R, 1, R)                                                                    \
      } else if (lo == 0 && hi == R - 1) {                                                        \
        NHWC_FWD_STEP(R, 0, R - 1)                                                                \
      } else if (lo < hi) {                                                                       \
        NHWC_FWD_STEP(R, lo, hi)                                                                  \
      }                                                                                           \
    }                                                                                             \
    _Pragma("GCC unroll 14") for (int i = 0; i < R; ++i) {                                        \
      _mm512_store_ps(sums + i * 32, acc[i][0]);                                                  \
      _mm512_store_ps(sums + i * 32 + 16, acc[i][1]);                                             \
    }                                                                                             \
  }

NHWC_FWD_ROWS(1)
NHWC_FWD_ROWS(2)
NHWC_FWD_ROWS(3)
NHWC_FWD_ROWS(4)
NHWC_FWD_ROWS(5)
NHWC_FWD_ROWS(6)
NHWC_FWD_ROWS(7)
NHWC_FWD_ROWS(8)
NHWC_FWD_ROWS(9)
NHWC_FWD_ROWS(10)
NHWC_FWD_ROWS(11)
NHWC_FWD_ROWS(12)
NHWC_FWD_ROWS(13)
NHWC_FWD_ROWS(14)

typedef void (*fwd_rows_fn)(const uint16_t *, int64_t, const int64_t *, int64_t, int64_t,
                            int64_t, const uint16_t *, int, const float *, float *,
                            const uint8_t (*)[2]);
static const fwd_rows_fn fwd_rows[15] = {
    NULL,        fwd_rows_1,  fwd_rows_2,  fwd_rows_3,  fwd_rows_4,
    fwd_rows_5,  fwd_rows_6,  fwd_rows_7,  fwd_rows_8,  fwd_rows_9,
    fwd_rows_10, fwd_rows_11, fwd_rows_12, fwd_rows_13, fwd_rows_14};

/* Steps of the weight per pass over an item's positions: 36 KB of it (two
 * blocks of 32 channels of a 3x3 window), read from L1 and L2 by every
 * block of rows, the next step's prefetched. Passes of 4 steps (8 KB, all
 * in L1) stored and reloaded every position's sums four times as often:
 * 2-4% slower on ResNet-18's 3x3 layers; a whole panel of 256 or 512
 * channels per pass (144 or 288 KB) no faster than 18 steps. */
enum { FWD_STEPS = 18, FWD_ROWS = 14 };

/* The register blocks of positions [q0, q0 + qn) of a grid of rows wq
 * wide: the output positions only (x < wo), each row's run of them cut
 * into as few blocks of up to FWD_ROWS as it takes, of sizes that differ
 * by one at most. at[b]: the block's first position less q0; rows[b]: its
 * size. Returns the count. */
static int64_t fwd_blocks(int64_t q0, int64_t qn, int64_t wq, int64_t wo, int64_t *at,
                          int *rows) {
  int64_t count = 0;
  for (int64_t y = q0 / wq; y * wq < q0 + qn; ++y) {
    const int64_t xs = q0 > y * wq ? q0 - y * wq : 0;
    const int64_t xe = q0 + qn - y * wq < wo ? q0 + qn - y * wq : wo;
    if (xe <= xs) continue;
    const int64_t len = xe - xs, nb = (len + FWD_ROWS - 1) / FWD_ROWS;
    for (int64_t b = 0, x = xs; b < nb; ++b) {
      const int64_t r = len / nb + (b < len % nb);
      at[count] = y * wq + x - q0, rows[count++] = (int)r;
      x += r;
    }
  }
  return count;
}

/* Where the copy holds the image ("conv_nhwc.forward"'s optional scalars):
 * rows [top, top + rows) and columns [left, left + cols) of the padded
 * image; `on` 0 where the launch does not say (every product is added). */
typedef struct nhwc_bounds {
  int64_t top, rows, left, cols;
  int on;
} nhwc_bounds;

/* a / b rounded up, for b > 0 and a of either sign */
static inline int64_t ceil_div(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

/* Of the n positions from column col of plane row `row` (tap column
 * offset's remainder xm), those whose reads map into the image: [*lo, *hi)
 * (empty: *lo >= *hi). Along a plane row they are one run. */
static inline void fwd_run(const nhwc_bounds *bd, int64_t row, int64_t col, int64_t n,
                           int64_t sh, int64_t ym, int64_t sw, int64_t xm, int64_t *lo,
                           int64_t *hi) {
  const int64_t pr = row * sh + ym;
  *lo = 0, *hi = 0;
  if (pr < bd->top || pr >= bd->top + bd->rows) return;
  *lo = ceil_div(bd->left - xm, sw) - col, *hi = ceil_div(bd->left + bd->cols - xm, sw) - col;
  *lo = *lo < 0 ? 0 : *lo, *hi = *hi > n ? n : *hi;
}

/* For each tap of convolution cv (window win, `origin`), the positions of
 * the block of `r` at grid position q that read the image, [lo, hi):
 * the others read the copy's padding, whose products add zeros. A read of
 * the image is one whose phase-plane row and column map into it. A block's
 * reads lie in one plane row or run on into the next (whose first columns
 * are padding): where they are two runs apart, every product is added. */
static void fwd_spans(const nhwc_bounds *bd, const int64_t *win, int64_t origin, int64_t taps,
                      int64_t wq, int64_t q, int r, uint8_t (*span)[2]) {
  const int64_t kw = win[1], sh = win[2], sw = win[3], dh = win[4], dw = win[5];
  /* the block's first position's row and column in the phase planes */
  const int64_t q_row = (origin + q) / wq, q_col = (origin + q) % wq;
  for (int64_t t = 0; t < taps; ++t) {
    span[t][0] = 0, span[t][1] = (uint8_t)r;
    if (!bd->on) continue;
    const int64_t y = t / kw * dh, x = t % kw * dw;
    int64_t row = q_row + y / sh, col = q_col + x / sw;
    row += col / wq, col %= wq;
    const int64_t n1 = wq - col < r ? wq - col : r; /* the positions in this row */
    int64_t lo, hi, lo2 = 0, hi2 = 0;
    if (r - n1 > wq) { /* rows narrower than the block: position by position */
      int holes = 0;
      lo = r, hi = 0;
      for (int64_t i = 0; i < r; ++i, ++col) {
        if (col == wq) col = 0, ++row;
        int64_t a, b;
        fwd_run(bd, row, col, 1, sh, y % sh, sw, x % sw, &a, &b);
        if (a >= b) continue;
        holes += lo < r && hi < i; /* a gap before this one */
        if (lo == r) lo = i;
        hi = i + 1;
      }
      if (!holes)
        span[t][0] = (uint8_t)(lo < hi ? lo : 0), span[t][1] = (uint8_t)(lo < hi ? hi : 0);
      continue;
    }
    fwd_run(bd, row, col, n1, sh, y % sh, sw, x % sw, &lo, &hi);
    if (n1 < r) fwd_run(bd, row + 1, 0, r - n1, sh, y % sh, sw, x % sw, &lo2, &hi2);
    lo2 += n1, hi2 += n1;
    if (lo2 < hi2) {
      if (lo >= hi)
        lo = lo2, hi = hi2;
      else if (hi == lo2)
        hi = hi2;
      else
        continue; /* two runs: every product */
    }
    span[t][0] = (uint8_t)(lo < hi ? lo : 0), span[t][1] = (uint8_t)(lo < hi ? hi : 0);
  }
}

/* The output's lines that out-channels [o0, o0 + 32) of grid positions
 * [q0, q0 + qn) of image n will be stored to, fetched into L2 while the
 * panel's products run: the stores of the rounded sums otherwise wait on
 * each line's fetch from memory. */
static void fwd_prefetch_out(const loom_tensor *out, int64_t n, int64_t o0, int64_t q0,
                             int64_t qn, int64_t wq) {
  const int64_t *st = out->strides, o_n = out->sizes[1], ho = out->sizes[2], wo = out->sizes[3];
  const uint16_t *base = (const uint16_t *)out->data + n * st[0];
  for (int64_t y = q0 / wq; y * wq < q0 + qn && y < ho; ++y) {
    const int64_t x0 = q0 > y * wq ? q0 - y * wq : 0;
    const int64_t x1 = q0 + qn - y * wq < wo ? q0 + qn - y * wq : wo;
    for (int64_t o = o0; o < o0 + 32 && o < o_n && x0 < x1; ++o) {
      const uintptr_t first = (uintptr_t)(base + o * st[1] + y * st[2] + x0 * st[3]);
      const uintptr_t last = (uintptr_t)(base + o * st[1] + y * st[2] + (x1 - 1) * st[3]);
      for (uintptr_t a = first & ~(uintptr_t)63; a <= last; a += 64)
        _mm_prefetch((const char *)a, _MM_HINT_T1);
    }
  }
}

/* Positions [q0, q0 + qn) of image n's grid of one convolution, every
 * out-channel panel, from the bias (NULL: zero): the output positions of
 * the item in register blocks (fwd_blocks; the columns past wo are left
 * out), FWD_STEPS steps of the weight at a time, each tap's products of
 * the image only. */
static void nhwc_conv_block(const nhwc_conv *cv, const loom_tensor *xp, const loom_tensor *bias,
                            const nhwc_bounds *bd, const int64_t *win, int64_t origin, int64_t n,
                            int64_t q0, int64_t qn, int64_t wq) {
  _Alignas(64) float sums[LOOM_CONV_NHWC_POSITIONS * 32];
  _Alignas(64) float init[32];
  int64_t at[LOOM_CONV_NHWC_POSITIONS];
  int rows[LOOM_CONV_NHWC_POSITIONS];
  uint8_t spans[LOOM_CONV_NHWC_POSITIONS][MAX_TAPS][2];
  const int64_t ps = xp->strides[2], cbs = cv->wp->sizes[1], obs = cv->wp->sizes[0] * 2;
  const int64_t taps = cv->taps, steps = cbs * taps;
  const int64_t blocks = fwd_blocks(q0, qn, wq, cv->out->sizes[3], at, rows);
  for (int64_t b = 0; b < blocks; ++b)
    fwd_spans(bd, win, origin, taps, wq, q0 + at[b], rows[b], spans[b]);
  const uint16_t *x = (const uint16_t *)xp->data + n * xp->strides[0] + q0 * ps;
  /* the columns past wo are never summed: zeros for the store to pass over */
  memset(sums, 0, sizeof(float) * 32 * (size_t)qn);
  for (int64_t ob = 0; ob < obs; ob += 2) {
    for (int64_t j = 0; j < 32; ++j)
      init[j] = bias && ob * OB + j < cv->out->sizes[1]
                    ? loom_bf16_to_f32(
                          ((const uint16_t *)bias->data)[(ob * OB + j) * bias->strides[0]])
                    : 0.0f;
    const uint16_t *panel = (const uint16_t *)cv->wp->data + ob * taps * cbs * BTILE;
    fwd_prefetch_out(cv->out, n, ob * OB, q0, qn, wq);
    for (int64_t k0 = 0; k0 < steps; k0 += FWD_STEPS) {
      const int64_t k1 = k0 + FWD_STEPS < steps ? k0 + FWD_STEPS : steps;
      for (int64_t b = 0; b < blocks; ++b)
        fwd_rows[rows[b]](x + at[b] * ps, ps, cv->tap_off, taps, k0, k1, panel, k0 == 0, init,
                          sums + at[b] * 32, (const uint8_t (*)[2])spans[b]);
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
  const loom_scalar *s = args->scalars;
  /* the image's extent in the copy, after the convolutions' scalars */
  const uint32_t at = 10 + 3 * (uint32_t)(count - 1);
  nhwc_bounds bd = {0, 0, 0, 0, 0};
  if (args->num_scalars >= at + 4) {
    bd = (nhwc_bounds){s[at].i, s[at + 1].i, s[at + 2].i, s[at + 3].i, 1};
    if (bd.top < 0 || bd.rows < 0 || bd.left < 0 || bd.cols < 0)
      return LOOM_ERROR_INVALID_ARGUMENT;
  }
  for (int64_t item = begin; item < end; ++item) {
    const int64_t n = item / per, q0 = item % per * ppi;
    for (int64_t i = 0; i < count; ++i) {
      if (q0 >= cv[i].grid) continue;
      int64_t win[6] = {s[0].i, s[1].i, s[2].i, s[3].i, s[4].i, s[5].i};
      if (i > 0) win[0] = s[10 + 3 * (i - 1)].i, win[1] = s[11 + 3 * (i - 1)].i;
      const int64_t origin = i == 0 ? (args->num_scalars > 8 ? s[8].i : 0) : s[12 + 3 * (i - 1)].i;
      nhwc_conv_block(&cv[i], xp, i == 0 ? bias : NULL, &bd, win, origin, n, q0,
                      cv[i].grid - q0 < ppi ? cv[i].grid - q0 : ppi, wq);
    }
  }
  return 0;
}

/* Weight gradient: out-channel rows g, g + span, ... (R of them, dy at
 * the positions less the tap's offset) by 32 in-channels of the copy in
 * pairs x (a pair row every ps), `runs` runs of positions [0, np) in
 * pairs, each `step` positions after the last, of `images` images in turn
 * (dy's gstep apart, the copy's xstep), added to sums[R][32]. */
#define NHWC_WG_ROWS(R)                                                                           \
  static void wg_rows_##R(const uint16_t *g, int64_t span, int64_t gstep, const uint16_t *x,      \
                          int64_t ps, int64_t xstep, int64_t np, int64_t runs, int64_t step,      \
                          int64_t images, float *sums) {                                          \
    __m512 acc[R][2];                                                                             \
    _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i)                                          \
      acc[i][0] = _mm512_load_ps(sums + i * 32), acc[i][1] = _mm512_load_ps(sums + i * 32 + 16);  \
    for (int64_t m = 0; m < images; ++m)                                                          \
      for (int64_t u = 0; u < runs; ++u) {                                                        \
        const uint16_t *gu = g + m * gstep + u * step, *xu = x + m * xstep + u * step / 2 * ps;   \
        for (int64_t p = 0; p < np; p += 2) {                                                     \
          const __m512bh c0 = (__m512bh)_mm512_loadu_si512(xu + p / 2 * ps);                      \
          const __m512bh c1 = (__m512bh)_mm512_loadu_si512(xu + p / 2 * ps + 32);                 \
          /* dy's pair an embedded broadcast (the same products either way round) */            \
          _Pragma("GCC unroll 12") for (int i = 0; i < R; ++i) {                                  \
            acc[i][0] = dp_word(acc[i][0], c0, gu + i * span + p);                                \
            acc[i][1] = dp_word(acc[i][1], c1, gu + i * span + p);                                \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
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
  /* With the image's rows (scalars [10] top, [11] rows) and the grid's
   * columns (scalar [12] wo), each tap sums the pairs of the grid rows that
   * read image rows, up to wo in each: the others' products are zeros
   * (padding, or dy past the grid). Grid rows are whole pairs (wq even). */
  const int known = args->num_scalars > 12;
  const int64_t top = known ? args->scalars[10].i : 0, rows = known ? args->scalars[11].i : 0;
  const int64_t wo = known ? args->scalars[12].i : 0;
  if (known && (top < 0 || rows < 0 || wo < 1 || wo > g.wq || g.wq % 2 != 0 || grid % g.wq != 0))
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t y0[MAX_TAPS], y1[MAX_TAPS];
  for (int64_t t = 0; t < taps && known; ++t) {
    const int64_t sh = args->scalars[2].i, a = t / args->scalars[1].i * args->scalars[4].i % sh;
    /* plane row r is padded row r * sh + a; grid row y reads row y + off / wq */
    const int64_t r0 = top > a ? (top - a + sh - 1) / sh : 0;
    const int64_t r1 = top + rows > a ? (top + rows - a + sh - 1) / sh : 0;
    const int64_t lift = g.tap_off[t] / g.wq;
    y0[t] = r0 - lift > 0 ? r0 - lift : 0;
    y1[t] = r1 - lift < grid / g.wq ? r1 - lift : grid / g.wq;
  }
  /* Positions summed per load of the sums: a chunk of one image, each
   * serving every block and tap from this core's cache; or, where the
   * copy's 32 channels of every image stay in L2 (small images, whose
   * chunks would be short) and the rows are known, every image's rows in
   * turn. */
  enum { CHUNK = 256, SMALL = 192 << 10 };
  const int small = known && g.images * (g.plane / 2) * 128 <= SMALL;
  const int64_t xstep = g.xq->strides[0], gstep = g.dy->sizes[1] * span;
  for (int64_t item = begin; item < end; ++item) {
    /* out-channel blocks [ob0, ob1) by in-channel block cb */
    const int64_t ob0 = item / cbs * g.group, cb = item % cbs;
    const int64_t ob1 = ob0 + g.group < obs ? ob0 + g.group : obs;
    if (ob0 >= obs) continue;
    memset(wg_sums, 0, (size_t)((ob1 - ob0) * taps) * sizeof wg_sums[0]);
    for (int64_t ph = 0; ph < g.phases && small; ++ph) {
      const uint16_t *x = (const uint16_t *)g.xq->data + ph * g.xq->strides[1] + cb * CB * 2;
      for (int64_t ob = ob0; ob < ob1; ++ob)
        for (int64_t t = 0; t < taps; ++t) {
          if (g.tap_ph[t] != ph || y1[t] <= y0[t]) continue;
          /* each grid row's pairs from its first position's */
          const int64_t off = g.tap_off[t], lo = y0[t] * g.wq + (off & ~(int64_t)1);
          int64_t np = ((off + wo + 1) & ~(int64_t)1) - (off & ~(int64_t)1);
          int64_t runs = y1[t] - y0[t];
          if (np >= g.wq) /* no pair to leave out: the rows as one run */
            np = (((y1[t] - 1) * g.wq + off + wo + 1) & ~(int64_t)1) - lo, runs = 1;
          float *c = wg_sums[(ob - ob0) * taps + t];
          const uint16_t *a = (const uint16_t *)g.dy->data + ob * 32 * span + g.lead + lo - off;
          const uint16_t *b = x + lo / 2 * ps;
          wg_rows_12(a, span, gstep, b, ps, xstep, np, runs, g.wq, g.images, c);
          wg_rows_12(a + 12 * span, span, gstep, b, ps, xstep, np, runs, g.wq, g.images,
                     c + 12 * 32);
          wg_rows_8(a + 24 * span, span, gstep, b, ps, xstep, np, runs, g.wq, g.images,
                    c + 24 * 32);
        }
    }
    for (int64_t n = 0; n < g.images && !small; ++n)
      for (int64_t ph = 0; ph < g.phases; ++ph) {
        const uint16_t *x = (const uint16_t *)g.xq->data + n * xstep +
                            ph * g.xq->strides[1] + cb * CB * 2;
        for (int64_t p0 = 0; p0 < g.plane; p0 += CHUNK) {
          const int64_t np = g.plane - p0 < CHUNK ? g.plane - p0 : CHUNK;
          for (int64_t ob = ob0; ob < ob1; ++ob) {
            const uint16_t *gy = (const uint16_t *)g.dy->data + n * gstep + ob * 32 * span +
                                 g.lead + p0;
            for (int64_t t = 0; t < taps; ++t) {
              if (g.tap_ph[t] != ph) continue;
              /* dy is 0 outside the grid: only the pairs of positions
               * [off, off + grid) add to the sums, and of those the rows
               * that read the image's */
              const int64_t first = known ? (y0[t] * g.wq + g.tap_off[t]) & ~(int64_t)1 : 0;
              const int64_t last = known ? y1[t] * g.wq + g.tap_off[t] : g.plane;
              int64_t lo = g.tap_off[t] > p0 ? g.tap_off[t] : p0;
              lo = (lo > first ? lo : first) & ~(int64_t)1;
              int64_t end = (g.tap_off[t] + grid + 1) & ~(int64_t)1;
              end = end < ((last + 1) & ~(int64_t)1) ? end : ((last + 1) & ~(int64_t)1);
              const int64_t hi = end < p0 + np ? end : p0 + np;
              if (hi <= lo) continue;
              float *c = wg_sums[(ob - ob0) * taps + t];
              const uint16_t *a = gy + (lo - p0) - g.tap_off[t], *b = x + lo / 2 * ps;
              wg_rows_12(a, span, gstep, b, ps, xstep, hi - lo, 1, 0, 1, c);
              wg_rows_12(a + 12 * span, span, gstep, b, ps, xstep, hi - lo, 1, 0, 1,
                         c + 12 * 32);
              wg_rows_8(a + 24 * span, span, gstep, b, ps, xstep, hi - lo, 1, 0, 1, c + 24 * 32);
            }
          }
        }
      }
    for (int64_t ob = ob0; ob < ob1; ++ob)
      nhwc_wgrad_emit(&g, (const float (*)[32 * 32])wg_sums[(ob - ob0) * taps], ob, cb);
  }
  return 0;
}
