/* kernels/gemm/gemm_pack_avx512.c — the packs that reorder data, with
 * AVX-512: transposing k-contiguous lanes into k-major panels (16 x 16
 * in-register transposes) and interleaving bf16 rows into k-pairs. Pure
 * data movement: the packed panels are bitwise those of the scalar packs. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"

void loom_gemm_pack_t32_avx512(uint32_t *dst, const void *src,
                               int64_t lane_bytes, int64_t lanes, int64_t width,
                               int64_t k) {
  const char *base = (const char *)src;
  for (int64_t g = 0; g < width; g += 16) {
    int64_t gl = lanes - g < 16 ? (lanes - g > 0 ? lanes - g : 0) : 16;
    int64_t gw = width - g < 16 ? width - g : 16;
    __mmask16 store = (__mmask16)((1u << gw) - 1u);
    for (int64_t k0 = 0; k0 < k; k0 += 16) {
      int64_t kn = k - k0 < 16 ? k - k0 : 16;
      __mmask16 load = (__mmask16)((1u << kn) - 1u);
      __m512i r[16];
      for (int64_t l = 0; l < 16; ++l) {
        const char *row = base + (g + l) * lane_bytes + k0 * 4;
        r[l] = l < gl ? _mm512_maskz_loadu_epi32(load, row) : _mm512_setzero_si512();
        /* Strided rows defeat the hardware prefetcher. */
        if (l < gl) _mm_prefetch(row + 256, _MM_HINT_T0);
      }
      loom_gemm_transpose16(r);
      /* Narrow panels (width < 16): rows are adjacent, so a full store
       * whose spill is overwritten by the next row's beats a masked one. */
      int64_t full = width == gw ? kn - 1 : (gw == 16 ? kn : 0);
      for (int64_t kk = 0; kk < full; ++kk)
        _mm512_storeu_si512(dst + (k0 + kk) * width + g, r[kk]);
      for (int64_t kk = full; kk < kn; ++kk)
        _mm512_mask_storeu_epi32(dst + (k0 + kk) * width + g, store, r[kk]);
    }
  }
}

void loom_gemm_pack_pairs16_avx512(uint16_t *dst, const uint16_t *src,
                                   int64_t s_k, int64_t lanes, int64_t width,
                                   int64_t k) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
                                      41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3,
                                      34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int64_t g = 0; g < width; g += 32) {
    int64_t gl = lanes - g < 32 ? (lanes - g > 0 ? lanes - g : 0) : 32;
    __mmask32 load = gl >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << gl) - 1u);
    for (int64_t kk = 0; kk < k; kk += 2) {
      __m512i r0 = _mm512_maskz_loadu_epi16(load, src + kk * s_k + g);
      __m512i r1 = kk + 1 < k ? _mm512_maskz_loadu_epi16(load, src + (kk + 1) * s_k + g)
                              : _mm512_setzero_si512();
      uint16_t *d = dst + kk * width + 2 * g;
      _mm512_storeu_si512(d, _mm512_permutex2var_epi16(r0, lo, r1));
      _mm512_storeu_si512(d + 32, _mm512_permutex2var_epi16(r0, hi, r1));
    }
  }
}
