/* kernels/conv/im2col_avx512.c — the AVX-512 loops of im2col.c: col2im's
 * accumulation into every other column (stride-2 convolutions), where each
 * destination element takes the one addition the scalar loop gives it, so
 * the bits are the same; the strided lanes of the flipped weight's pack;
 * the rows of a zero-padded copy, from NCHW or, by 16 x 16 transposes (or
 * permutes, for a narrow image), from a channels-last image; and im2col's
 * every other 16-bit value. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/im2col_internal.h"
#include "kernels/gemm/transpose_avx512.h"

void loom_col2im_add_stride2_avx512(float *d, int64_t d_row, const float *s, int64_t s_row,
                                    int64_t rows, int64_t n) {
  /* Source i goes to lane 2i of a 32-wide destination window: two
   * destination vectors per 16 sources, only their even lanes loaded,
   * added and stored, so a short run (a row of a small grid) takes masks
   * rather than a scalar loop. */
  const __m512i lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i hi = _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
  for (int64_t r = 0; r < rows; ++r, d += d_row, s += s_row)
    for (int64_t i = 0; i < n; i += 16) {
      const unsigned live = n - i < 16 ? (unsigned)(n - i) : 16u;
      const unsigned first = live < 8 ? live : 8u, second = live - first;
      const __mmask16 ms = (__mmask16)((1u << live) - 1u);
      const __mmask16 m0 = (__mmask16)(0x5555u & ((1u << 2 * first) - 1u));
      const __mmask16 m1 = (__mmask16)(0x5555u & ((1u << 2 * second) - 1u));
      const __m512 v = _mm512_maskz_loadu_ps(ms, s + i);
      float *w = d + 2 * i;
      const __m512 d0 = _mm512_maskz_loadu_ps(m0, w);
      const __m512 d1 = _mm512_maskz_loadu_ps(m1, w + 16);
      _mm512_mask_storeu_ps(w, m0, _mm512_add_ps(d0, _mm512_permutexvar_ps(lo, v)));
      _mm512_mask_storeu_ps(w + 16, m1, _mm512_add_ps(d1, _mm512_permutexvar_ps(hi, v)));
    }
}

void loom_conv_flip_lanes_avx512(float *d, int64_t dstep, const float *s, int64_t step,
                                 int64_t lanes, int64_t width) {
  const __m512i idx = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32((int)step));
  const __mmask16 all = (__mmask16)((1u << width) - 1u);
  for (int64_t l0 = 0; l0 < lanes; l0 += width, d += dstep) {
    const int64_t live = lanes - l0 < width ? lanes - l0 : width;
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)((1u << live) - 1u),
                                              idx, s + l0 * step, 4);
    _mm512_mask_storeu_ps(d, all, v);
  }
}

/* A mask of lanes [0, n), n clipped to [0, 16]. */
static inline __mmask16 pad_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* n zeros at d: a memset when long, else masked stores. */
static inline void pad_zeros(float *d, int64_t n) {
  if (n > 64) {
    memset(d, 0, (size_t)n * sizeof(float));
    return;
  }
  for (; n > 0; n -= 16, d += 16) _mm512_mask_storeu_ps(d, pad_mask(n), _mm512_setzero_ps());
}

int64_t loom_conv_pad_rows_avx512(float *d, int64_t wq, int64_t i0, int64_t i1, int64_t j0,
                                  int64_t j1, const float *s, int64_t s_row, int64_t sw) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const int64_t n = j1 - j0;
  int64_t from = 0;
  for (int64_t i = i0; i < i1; ++i, s += s_row) {
    float *row = d + i * wq;
    pad_zeros(d + from, row + j0 - (d + from));
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = pad_mask(n - j);
      __m512 v;
      if (sw == 1) {
        v = _mm512_maskz_loadu_ps(m, s + j);
      } else { /* the even lanes of the 2 * (n - j) - 1 values from s + 2j */
        const int64_t span = 2 * (n - j) - 1;
        v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(pad_mask(span), s + 2 * j), even,
                                   _mm512_maskz_loadu_ps(pad_mask(span - 16), s + 2 * j + 16));
      }
      _mm512_mask_storeu_ps(row + j0 + j, m, v);
    }
    from = i * wq + j1;
  }
  return from;
}

void loom_conv_pad_cl_planes_avx512(float *const *d, int64_t cnt, int64_t plane, int64_t wq,
                                    int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                    const float *s, int64_t s_row, int64_t step) {
  const int64_t n = j1 - j0;
  int64_t from = 0;
  for (int64_t i = i0; i < i1; ++i, s += s_row) {
    for (int64_t c0 = 0; c0 < cnt; c0 += 16) {
      const __mmask16 cm = pad_mask(cnt - c0);
      const int64_t lanes = cnt - c0 < 16 ? cnt - c0 : 16;
      for (int64_t k = 0; k < lanes; ++k) pad_zeros(d[c0 + k] + from, i * wq + j0 - from);
      for (int64_t j = 0; j < n; j += 16) {
        /* 16 positions' runs of 16 channels -> 16 channels' runs of positions */
        const int64_t live = n - j < 16 ? n - j : 16;
        __m512i r[16];
        for (int64_t q = 0; q < 16; ++q)
          r[q] = q < live ? _mm512_castps_si512(_mm512_maskz_loadu_ps(cm, s + (j + q) * step + c0))
                          : _mm512_setzero_si512();
        loom_gemm_transpose16(r);
        if (live == 16)
          for (int64_t k = 0; k < lanes; ++k)
            _mm512_storeu_ps(d[c0 + k] + i * wq + j0 + j, _mm512_castsi512_ps(r[k]));
        else
          for (int64_t k = 0; k < lanes; ++k)
            _mm512_mask_storeu_ps(d[c0 + k] + i * wq + j0 + j, pad_mask(live),
                                  _mm512_castsi512_ps(r[k]));
      }
    }
    from = i * wq + j1;
  }
  for (int64_t k = 0; k < cnt; ++k) pad_zeros(d[k] + from, plane - from);
}

void loom_conv_pad_cl_narrow_avx512(float *const *d, int64_t cnt, int64_t plane, int64_t wq,
                                    int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                    const float *s, int64_t s_row, int64_t step) {
  /* plane k's lane q is the run's value q * step + k: from the first two
   * vectors where it is below 32, else from the last two */
  __m512i idx[4];
  __mmask16 upper[4];
  for (int64_t k = 0; k < cnt; ++k) {
    int32_t lanes[16];
    unsigned m = 0;
    for (int q = 0; q < 16; ++q) {
      const int64_t e = q * step + k;
      lanes[q] = (int32_t)(e & 31);
      if (e >= 32) m |= 1u << q;
    }
    idx[k] = _mm512_loadu_si512(lanes);
    upper[k] = (__mmask16)m;
  }
  const int64_t n = j1 - j0;
  int64_t from = 0;
  for (int64_t i = i0; i < i1; ++i, s += s_row) {
    for (int64_t k = 0; k < cnt; ++k) pad_zeros(d[k] + from, i * wq + j0 - from);
    for (int64_t j = 0; j < n; j += 16) {
      /* 16 positions' channels, the floats up to the last live one's */
      const int64_t live = n - j < 16 ? n - j : 16, span = (live - 1) * step + cnt;
      const float *r = s + j * step;
      const __m512 v0 = _mm512_maskz_loadu_ps(pad_mask(span), r);
      const __m512 v1 = span > 16 ? _mm512_maskz_loadu_ps(pad_mask(span - 16), r + 16)
                                  : _mm512_setzero_ps();
      const __m512 v2 = span > 32 ? _mm512_maskz_loadu_ps(pad_mask(span - 32), r + 32)
                                  : _mm512_setzero_ps();
      const __m512 v3 = span > 48 ? _mm512_maskz_loadu_ps(pad_mask(span - 48), r + 48)
                                  : _mm512_setzero_ps();
      const __mmask16 pm = pad_mask(live);
      for (int64_t k = 0; k < cnt; ++k) {
        const __m512 lo = _mm512_permutex2var_ps(v0, idx[k], v1);
        const __m512 hi = _mm512_permutex2var_ps(v2, idx[k], v3);
        _mm512_mask_storeu_ps(d[k] + i * wq + j0 + j, pm, _mm512_mask_blend_ps(upper[k], lo, hi));
      }
    }
    from = i * wq + j1;
  }
  for (int64_t k = 0; k < cnt; ++k) pad_zeros(d[k] + from, plane - from);
}

void loom_im2col_stride2_u16_avx512(uint16_t *d, const uint16_t *s, int64_t n) {
  const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34,
                                        32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                        2, 0);
  for (int64_t j = 0; j < n; j += 32) {
    /* the even lanes of the 2 * (n - j) - 1 values from s + 2j */
    const int64_t live = n - j < 32 ? n - j : 32, span = 2 * live - 1;
    const __mmask32 m0 = span >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << span) - 1u);
    const __mmask32 m1 = span <= 32 ? (__mmask32)0 : (__mmask32)((1u << (span - 32)) - 1u);
    const __m512i v = _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi16(m0, s + 2 * j), even,
                                                _mm512_maskz_loadu_epi16(m1, s + 2 * j + 32));
    const __mmask32 m = live == 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << live) - 1u);
    _mm512_mask_storeu_epi16(d + j, m, v);
  }
}
