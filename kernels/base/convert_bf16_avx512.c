/* bfloat16 <-> float32 runs for AVX-512 CPUs (the file name selects the
 * flags): the bits of loom_bf16_to_f32 / loom_f32_to_bf16 (kernels/base/dtype.h),
 * 16 elements at a time. Chosen by the elementwise engine's staging. */
#include <immintrin.h>

#include "kernels/base/convert.h"
#include "kernels/base/dtype.h"

void loom_bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = loom_bf16_to_f32(src[i]);
}

void loom_f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n) {
  const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i b = _mm512_loadu_si512(src + i);
    const __m512i hi = _mm512_srli_epi32(b, 16);
    /* (bits + 0x7fff + ((bits >> 16) & 1)) >> 16, or the quieted NaN */
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, abs_mask), inf);
    const __m512i r = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) dst[i] = loom_f32_to_bf16(src[i]);
}
