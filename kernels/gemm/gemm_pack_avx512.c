/* kernels/gemm/gemm_pack_avx512.c — the packs that reorder data, with
 * AVX-512: transposing k-contiguous lanes into k-major panels (16 x 16
 * in-register transposes) and interleaving bf16 rows into k-pairs. Pure
 * data movement: the packed panels are bitwise those of the scalar packs. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/transpose_avx512.h"
#include "kernels/gemm/ukr_avx512.h"

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

void loom_gemm_pack_rows32_avx512(uint32_t *dst, const uint32_t *src, int64_t s_k,
                                  int64_t lanes, int64_t width, int64_t k) {
  const __mmask16 l0 = (__mmask16)(lanes >= 16 ? 0xffff : (1u << lanes) - 1u);
  const __mmask16 l1 = (__mmask16)(lanes >= 32 ? 0xffff : lanes <= 16 ? 0 : (1u << (lanes - 16)) - 1u);
  const __mmask16 w0 = (__mmask16)(width >= 16 ? 0xffff : (1u << width) - 1u);
  const __mmask16 w1 = (__mmask16)(width >= 32 ? 0xffff : width <= 16 ? 0 : (1u << (width - 16)) - 1u);
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint32_t *s = src + kk * s_k;
    uint32_t *d = dst + kk * width;
    /* Rows a stride apart defeat the hardware prefetcher. */
    _mm_prefetch((const char *)(s + 8 * s_k), _MM_HINT_T0);
    const __m512i v0 = _mm512_maskz_loadu_epi32(l0, s);
    /* Whole-vector stores (masked ones are slow on some cores): a row's
     * spill past its width is overwritten by the next row. */
    const int spill = kk + 1 < k;
    if (width >= 16 || spill) _mm512_storeu_si512(d, v0);
    else _mm512_mask_storeu_epi32(d, w0, v0);
    if (width > 16) {
      const __m512i v1 = _mm512_maskz_loadu_epi32(l1, s + 16);
      if (width == 32 || spill) _mm512_storeu_si512(d + 16, v1);
      else _mm512_mask_storeu_epi32(d + 16, w1, v1);
    }
  }
}

void loom_gemm_pack_rows12x4_avx512(uint32_t *dst, int64_t panel_stride, const uint32_t *src,
                                    int64_t s_k, int64_t lanes, int64_t k) {
  const int64_t l0 = lanes, l1 = lanes - 16, l2 = lanes - 32;
  const __mmask16 m0 = (__mmask16)(l0 >= 16 ? 0xffff : l0 <= 0 ? 0 : (1u << l0) - 1u);
  const __mmask16 m1 = (__mmask16)(l1 >= 16 ? 0xffff : l1 <= 0 ? 0 : (1u << l1) - 1u);
  const __mmask16 m2 = (__mmask16)(l2 >= 16 ? 0xffff : l2 <= 0 ? 0 : (1u << l2) - 1u);
  const __mmask16 row = 0x0fff;
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint32_t *s = src + kk * s_k;
    uint32_t *d = dst + kk * 12;
    /* Rows a stride apart defeat the hardware prefetcher. */
    _mm_prefetch((const char *)(s + 8 * s_k), _MM_HINT_T0);
    _mm_prefetch((const char *)(s + 8 * s_k + 32), _MM_HINT_T0);
    const __m512i v0 = _mm512_maskz_loadu_epi32(m0, s);
    const __m512i v1 = _mm512_maskz_loadu_epi32(m1, s + 16);
    const __m512i v2 = _mm512_maskz_loadu_epi32(m2, s + 32);
    /* panel q takes lanes [12q, 12q + 12) of the three vectors */
    _mm512_mask_storeu_epi32(d, row, v0);
    _mm512_mask_storeu_epi32(d + panel_stride, row, _mm512_alignr_epi32(v1, v0, 12));
    _mm512_mask_storeu_epi32(d + 2 * panel_stride, row, _mm512_alignr_epi32(v2, v1, 8));
    _mm512_mask_storeu_epi32(d + 3 * panel_stride, row, _mm512_alignr_epi32(v2, v2, 4));
  }
}

void loom_gemm_pack_pairs12x4_avx512(uint32_t *dst, int64_t panel_stride, const uint16_t *src,
                                     int64_t s_k, int64_t lanes, int64_t k, int64_t pairs) {
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  const int64_t l2 = lanes - 32;
  const __mmask32 m01 = lanes >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << lanes) - 1u);
  const __mmask16 m2 = (__mmask16)(l2 >= 16 ? 0xffff : l2 <= 0 ? 0 : (1u << l2) - 1u);
  const __mmask16 row = 0x0fff;
  for (int64_t q = 0; q < pairs; ++q) {
    const int64_t kk = 2 * q;
    const uint16_t *s0 = src + kk * s_k, *s1 = s0 + s_k;
    /* Rows a stride apart defeat the hardware prefetcher. */
    if (kk + 9 < k) {
      _mm_prefetch((const char *)(s0 + 8 * s_k), _MM_HINT_T0);
      _mm_prefetch((const char *)(s0 + 8 * s_k + 32), _MM_HINT_T0);
      _mm_prefetch((const char *)(s0 + 9 * s_k), _MM_HINT_T0);
      _mm_prefetch((const char *)(s0 + 9 * s_k + 32), _MM_HINT_T0);
    }
    /* a missing row (past k) is 0 */
    const __m512i r0 = kk < k ? _mm512_maskz_loadu_epi16(m01, s0) : _mm512_setzero_si512();
    const __m512i r1 = kk + 1 < k ? _mm512_maskz_loadu_epi16(m01, s1) : _mm512_setzero_si512();
    const __m512i c0 = _mm512_zextsi256_si512(kk < k ? _mm256_maskz_loadu_epi16(m2, s0 + 32)
                                                      : _mm256_setzero_si256());
    const __m512i c1 = _mm512_zextsi256_si512(kk + 1 < k ? _mm256_maskz_loadu_epi16(m2, s1 + 32)
                                                          : _mm256_setzero_si256());
    /* the k-pairs of lanes 0-15, 16-31 and 32-47, one 32-bit word a lane */
    const __m512i v0 = _mm512_permutex2var_epi16(r0, lo, r1);
    const __m512i v1 = _mm512_permutex2var_epi16(r0, hi, r1);
    const __m512i v2 = _mm512_permutex2var_epi16(c0, lo, c1);
    uint32_t *d = dst + q * 12;
    /* panel p takes lanes [12p, 12p + 12) of the three vectors */
    _mm512_mask_storeu_epi32(d, row, v0);
    _mm512_mask_storeu_epi32(d + panel_stride, row, _mm512_alignr_epi32(v1, v0, 12));
    _mm512_mask_storeu_epi32(d + 2 * panel_stride, row, _mm512_alignr_epi32(v2, v1, 8));
    _mm512_mask_storeu_epi32(d + 3 * panel_stride, row, _mm512_alignr_epi32(v2, v2, 4));
  }
}

void loom_gemm_pack_pairs16_avx512(uint16_t *dst, const uint16_t *src,
                                   int64_t s_k, int64_t lanes, int64_t width,
                                   int64_t k) {
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  for (int64_t g = 0; g < width; g += 32) {
    int64_t gl = lanes - g < 32 ? (lanes - g > 0 ? lanes - g : 0) : 32;
    __mmask32 load = gl >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << gl) - 1u);
    for (int64_t kk = 0; kk < k; kk += 2) {
      __m512i r0 = _mm512_maskz_loadu_epi16(load, src + kk * s_k + g);
      __m512i r1 = kk + 1 < k ? _mm512_maskz_loadu_epi16(load, src + (kk + 1) * s_k + g)
                              : _mm512_setzero_si512();
      /* Rows a panel apart defeat the hardware prefetcher. */
      if (kk + 17 < k) {
        _mm_prefetch((const char *)(src + (kk + 16) * s_k + g), _MM_HINT_T0);
        _mm_prefetch((const char *)(src + (kk + 17) * s_k + g), _MM_HINT_T0);
      }
      uint16_t *d = dst + kk * width + 2 * g;
      _mm512_storeu_si512(d, _mm512_permutex2var_epi16(r0, lo, r1));
      _mm512_storeu_si512(d + 32, _mm512_permutex2var_epi16(r0, hi, r1));
    }
  }
}

void loom_gemm_pack_amx_t16_avx512(uint16_t *dst, const uint16_t *src, int64_t s_k,
                                   int64_t lanes, int64_t run) {
  /* rows 2p and 2p + 1 interleaved into k-pairs (one 32-bit word per
   * lane), lanes 0-15 and 16-31 apart; each half transposed gives a lane's
   * 16 pairs, its k run, per register */
  const __m512i lo = loom_gemm_pair_index(0), hi = loom_gemm_pair_index(1);
  const __mmask32 load = lanes >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << lanes) - 1u);
  __m512i w0[16], w1[16];
  for (int p = 0; p < 16; ++p) {
    const __m512i r0 = 2 * p < run ? _mm512_maskz_loadu_epi16(load, src + 2 * p * s_k)
                                   : _mm512_setzero_si512();
    const __m512i r1 = 2 * p + 1 < run ? _mm512_maskz_loadu_epi16(load, src + (2 * p + 1) * s_k)
                                       : _mm512_setzero_si512();
    w0[p] = _mm512_permutex2var_epi16(r0, lo, r1);
    w1[p] = _mm512_permutex2var_epi16(r0, hi, r1);
  }
  loom_gemm_transpose16(w0);
  loom_gemm_transpose16(w1);
  for (int l = 0; l < 16; ++l) {
    _mm512_storeu_si512(dst + l * 32, w0[l]);
    _mm512_storeu_si512(dst + (16 + l) * 32, w1[l]);
  }
}

/* n fp32 values into contiguous bf16 / fp16, rounded as loom_f32_to_bf16
 * and loom_f32_to_f16 round (nearest even, NaN kept quiet). */
void loom_gemm_store_row16_avx512(uint16_t *dst, const float *src, int64_t n,
                                  int bf16) {
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = n - j < 16 ? (__mmask16)((1u << (n - j)) - 1u) : (__mmask16)0xffff;
    __m512 v = _mm512_maskz_loadu_ps(m, src + j);
    __m256i h;
    if (bf16) {
      h = _mm512_cvtepi32_epi16(loom_ukr_bf16_rne(_mm512_castps_si512(v)));
    } else {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    _mm256_mask_storeu_epi16(dst + j, m, h);
  }
}

void loom_gemm_split_bf16_avx512(uint16_t *dst, const float *src, int64_t n, int low) {
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    __m512i h = loom_ukr_bf16_rne(_mm512_castps_si512(x));
    if (low) {
      /* x - hi, 0 where x is not finite */
      const __m512 rest = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
      const __mmask16 finite = _mm512_cmplt_epu32_mask(
          _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)),
          _mm512_set1_epi32(0x7f800000));
      h = _mm512_maskz_mov_epi32(finite, loom_ukr_bf16_rne(_mm512_castps_si512(rest)));
    }
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(h));
  }
}
