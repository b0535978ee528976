/* kernels/gemm/transpose_avx512.h — in-register transpose for the AVX-512
 * packs; include only from files built with AVX-512 flags. */
#ifndef LOOM_KERNELS_GEMM_TRANSPOSE_AVX512_H
#define LOOM_KERNELS_GEMM_TRANSPOSE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* r[i] = row i of a 16 x 16 block of 32-bit words -> r[j] = column j. */
static inline void loom_gemm_transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  /* Each 128-bit lane j of r[4q + c] now holds column 4j + c of rows
   * 4q..4q+3; gather the four row quarters of every column. */
  for (int q = 0; q < 16; q += 8)
    for (int c = 0; c < 4; ++c) {
      t[q + c] = _mm512_shuffle_i32x4(r[q + c], r[q + 4 + c], 0x88);
      t[q + 4 + c] = _mm512_shuffle_i32x4(r[q + c], r[q + 4 + c], 0xdd);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

/* The permutex2var_epi16 indices that interleave lanes [16 half, 16 half
 * + 16) of two rows of 32 16-bit values into k-pairs: (a0, b0, a1, b1, ...). */
static inline __m512i loom_gemm_pair_index(int half) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                      8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  return half ? _mm512_add_epi16(lo, _mm512_set1_epi16(16)) : lo;
}

/* buf[panel][32 rows][32 positions] -> out[position][32 rows], positions
 * [0, kn) (a multiple of 32 or the last, zero-padded panel). */
static inline void loom_gemm_transpose_panels32(float *out, const float *buf, int64_t kn) {
  for (int64_t q = 0; q < kn; q += 32) {
    const float *blk = buf + q * 32;
    for (int rh = 0; rh < 32; rh += 16)
      for (int ph = 0; ph < 32; ph += 16) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = _mm512_loadu_si512(blk + (rh + i) * 32 + ph);
        loom_gemm_transpose16(r);
        for (int i = 0; i < 16 && q + ph + i < kn; ++i)
          _mm512_storeu_si512(out + (q + ph + i) * 32 + rh, r[i]);
      }
  }
}

#endif /* LOOM_KERNELS_GEMM_TRANSPOSE_AVX512_H */
