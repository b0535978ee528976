/* The FFT's row transforms built with AVX-512 flags: the same source as the
 * baseline build (fft_body.inc), vectorized by the compiler over the
 * Stockham stages' contiguous runs, with the transposes between rows and
 * the workspace done in registers (data movement only: the
 * arithmetic is the baseline's). */
#include <immintrin.h>

#include "kernels/fft/fft.h"

/* Transposes the 16 x 16 floats in r (r[i] is row i). */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0x88);
      t[8 * h + i + 4] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

/* Transposes the 8 x 8 doubles in r. */
static inline __attribute__((always_inline)) void transpose8(__m512d r[8]) {
  __m512d t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i) {
      r[4 * h + i] = _mm512_shuffle_f64x2(t[4 * h + i], t[4 * h + i + 2], 0x88);
      r[4 * h + i + 2] = _mm512_shuffle_f64x2(t[4 * h + i], t[4 * h + i + 2], 0xdd);
    }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f64x2(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f64x2(r[i], r[i + 4], 0xdd);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

/* Rows of 16 floats (8 doubles) side by side in the workspace: B
 * equal to the vector's lanes, rows with unit element stride (complex
 * (es 2, im 1) or real (es 1, im < 0)). Each tile of lanes rows by one
 * vector of elements is transposed in registers. Returns the elements done
 * (the rest go element by element). */
static int64_t tile_gather_f32_avx512(const float *x, int64_t es, int64_t bs, int64_t im,
                                      int64_t count, int64_t B, float *a) {
  if (B != 16 || !((es == 2 && im == 1) || (es == 1 && im < 0))) return 0;
  const int64_t per = 16 / es; /* elements per vector */
  int64_t j = 0;
  for (; j + per <= count; j += per) {
    __m512 r[16];
    for (int q = 0; q < 16; ++q) r[q] = _mm512_loadu_ps(x + q * bs + j * es);
    transpose16(r);
    if (es == 2) {
      for (int c = 0; c < 8; ++c) {
        _mm512_storeu_ps(a + 32 * (j + c), r[2 * c]);
        _mm512_storeu_ps(a + 32 * (j + c) + 16, r[2 * c + 1]);
      }
    } else {
      for (int c = 0; c < 16; ++c) {
        _mm512_storeu_ps(a + 32 * (j + c), r[c]);
        _mm512_storeu_ps(a + 32 * (j + c) + 16, _mm512_setzero_ps());
      }
    }
  }
  return j;
}

static int64_t tile_scatter_f32_avx512(float *y, int64_t es, int64_t bs, int64_t im,
                                       int64_t count, int64_t B, const float *r0,
                                       float scale) {
  if (B != 16 || !((es == 2 && im == 1) || (es == 1 && im < 0))) return 0;
  const int64_t per = 16 / es;
  const __m512 s = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + per <= count; j += per) {
    __m512 r[16];
    if (es == 2) {
      for (int c = 0; c < 8; ++c) {
        r[2 * c] = _mm512_mul_ps(_mm512_loadu_ps(r0 + 32 * (j + c)), s);
        r[2 * c + 1] = _mm512_mul_ps(_mm512_loadu_ps(r0 + 32 * (j + c) + 16), s);
      }
    } else {
      for (int c = 0; c < 16; ++c) r[c] = _mm512_mul_ps(_mm512_loadu_ps(r0 + 32 * (j + c)), s);
    }
    transpose16(r);
    for (int q = 0; q < 16; ++q) _mm512_storeu_ps(y + q * bs + j * es, r[q]);
  }
  return j;
}

static int64_t tile_gather_f64_avx512(const double *x, int64_t es, int64_t bs, int64_t im,
                                      int64_t count, int64_t B, double *a) {
  if (B != 8 || !((es == 2 && im == 1) || (es == 1 && im < 0))) return 0;
  const int64_t per = 8 / es;
  int64_t j = 0;
  for (; j + per <= count; j += per) {
    __m512d r[8];
    for (int q = 0; q < 8; ++q) r[q] = _mm512_loadu_pd(x + q * bs + j * es);
    transpose8(r);
    if (es == 2) {
      for (int c = 0; c < 4; ++c) {
        _mm512_storeu_pd(a + 16 * (j + c), r[2 * c]);
        _mm512_storeu_pd(a + 16 * (j + c) + 8, r[2 * c + 1]);
      }
    } else {
      for (int c = 0; c < 8; ++c) {
        _mm512_storeu_pd(a + 16 * (j + c), r[c]);
        _mm512_storeu_pd(a + 16 * (j + c) + 8, _mm512_setzero_pd());
      }
    }
  }
  return j;
}

static int64_t tile_scatter_f64_avx512(double *y, int64_t es, int64_t bs, int64_t im,
                                       int64_t count, int64_t B, const double *r0,
                                       double scale) {
  if (B != 8 || !((es == 2 && im == 1) || (es == 1 && im < 0))) return 0;
  const int64_t per = 8 / es;
  const __m512d s = _mm512_set1_pd(scale);
  int64_t j = 0;
  for (; j + per <= count; j += per) {
    __m512d r[8];
    if (es == 2) {
      for (int c = 0; c < 4; ++c) {
        r[2 * c] = _mm512_mul_pd(_mm512_loadu_pd(r0 + 16 * (j + c)), s);
        r[2 * c + 1] = _mm512_mul_pd(_mm512_loadu_pd(r0 + 16 * (j + c) + 8), s);
      }
    } else {
      for (int c = 0; c < 8; ++c) r[c] = _mm512_mul_pd(_mm512_loadu_pd(r0 + 16 * (j + c)), s);
    }
    transpose8(r);
    for (int q = 0; q < 8; ++q) _mm512_storeu_pd(y + q * bs + j * es, r[q]);
  }
  return j;
}

/* A vector's rows by a vector's outputs from the workspace (output l of
 * row q at src[2 VL l + q], its imaginary part VL on) into a panel of that
 * width (row q's outputs from dst + 2 VL q on, the imaginary parts VL on),
 * times scale: one transpose of the real parts, one of the imaginary. */
static inline __attribute__((always_inline)) void tile_panel_f32_avx512(const float *src,
                                                                        float *dst,
                                                                        float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int part = 0; part < 32; part += 16) {
    __m512 r[16];
    for (int l = 0; l < 16; ++l) r[l] = _mm512_mul_ps(_mm512_loadu_ps(src + 32 * l + part), s);
    transpose16(r);
    for (int q = 0; q < 16; ++q) _mm512_storeu_ps(dst + 32 * q + part, r[q]);
  }
}

static inline __attribute__((always_inline)) void tile_panel_f64_avx512(const double *src,
                                                                        double *dst,
                                                                        double scale) {
  const __m512d s = _mm512_set1_pd(scale);
  for (int part = 0; part < 16; part += 8) {
    __m512d r[8];
    for (int l = 0; l < 8; ++l) r[l] = _mm512_mul_pd(_mm512_loadu_pd(src + 16 * l + part), s);
    transpose8(r);
    for (int q = 0; q < 8; ++q) _mm512_storeu_pd(dst + 16 * q + part, r[q]);
  }
}

#define FFT_TILES 1
#define T float
#define SFX _f32_avx512
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX
#define T double
#define SFX _f64_avx512
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX
