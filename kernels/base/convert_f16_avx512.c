/* float16 <-> float32 runs for AVX-512 CPUs (the file name selects the
 * flags), with the bits of loom_f16_to_f32 / loom_f32_to_f16
 * (kernels/base/dtype.h), 16 elements at a time: the hardware conversions round
 * to nearest even and keep subnormals as those do; a float16 NaN widens
 * with its payload as it is (the hardware would quiet a signaling one).
 * Chosen by the elementwise engine's staging and by casts. */
#include <immintrin.h>

#include "kernels/base/convert.h"
#include "kernels/base/dtype.h"

void loom_f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7c00), man_mask = _mm512_set1_epi32(0x3ff);
  const __m512i sign_mask = _mm512_set1_epi32(0x8000), inf = _mm512_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h16 = _mm256_loadu_si256((const __m256i *)(src + i));
    const __m512i h = _mm512_cvtepu16_epi32(h16);
    const __m512 f = _mm512_cvtph_ps(h16);
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, exp_mask), exp_mask) &
                          _mm512_test_epi32_mask(h, man_mask);
    const __m512i nan_bits = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(h, sign_mask), 16), inf),
        _mm512_slli_epi32(_mm512_and_si512(h, man_mask), 13));
    _mm512_storeu_si512(dst + i, _mm512_mask_mov_epi32(_mm512_castps_si512(f), nan, nan_bits));
  }
  for (; i < n; ++i) dst[i] = loom_f16_to_f32(src[i]);
}

void loom_f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = loom_f32_to_f16(src[i]);
}
