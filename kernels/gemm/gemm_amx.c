/* kernels/gemm/gemm_amx.c — bf16 micro-kernel on AMX tiles: a 32x32 fp32
 * result in four 16x16 tiles, fed per 32 k by two A tiles (16 rows of 32
 * bf16 each) and two B tiles (16 k-pairs of 16 columns each). One
 * tdpbf16ps does 16 x 16 x 32 multiply-adds.
 *
 * A panels are [k/32][32 rows][32 k] (kernels/gemm/gemm_pack.c), B panels
 * the k-pairs [k/2][32][2] of the AVX512-BF16 kernel, whose 16-column
 * halves are the B tiles (rows 128 bytes apart).
 *
 * Arithmetic, the same for every tile of a plan whatever its edges: with
 * alpha == 1 the tiles start from T (0 when not accumulating) and add the
 * products in tdpbf16ps's order; otherwise they start from 0 and T (+)=
 * alpha * tile. Edge tiles go through a buffer of the full tile. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/ukr_avx512.h"

enum { MR = LOOM_GEMM_AMX_MR, NR = LOOM_GEMM_AMX_NR, KB = LOOM_GEMM_AMX_KB };

/* Palette 1: eight tiles of 16 rows of 64 bytes. */
typedef struct amx_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;

void loom_gemm_amx_begin(void) {
  _Alignas(64) amx_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  /* the compiler does not see ldtilecfg read the bytes: keep the stores */
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

void loom_gemm_amx_end(void) { _tile_release(); }

/* The 32x32 tile over `chunks` chunks of 32 k: A's rows `a_row` bytes
 * apart, the next chunk `a_step` bytes on. */
static void amx_tile(int64_t chunks, const char *a, int64_t a_row, int64_t a_step,
                     const char *b, float *t, int64_t ldt, float alpha, int mr, int nr,
                     int accumulate) {
  _Alignas(64) float buf[MR * NR];
  const int from_t = alpha == 1.0f && accumulate;
  const int direct = mr == MR && nr == NR;
  float *c = direct ? t : buf;
  const int64_t cs = direct ? ldt * (int64_t)sizeof(float) : NR * (int64_t)sizeof(float);
  const int64_t ldc = direct ? ldt : NR;
  __mmask16 m0, m1;
  loom_ukr_masks(nr, &m0, &m1);
  if (from_t) {
    if (!direct)
      for (int i = 0; i < MR; ++i) {
        _mm512_store_ps(buf + i * NR, _mm512_maskz_loadu_ps(i < mr ? m0 : 0, t + i * ldt));
        _mm512_store_ps(buf + i * NR + 16,
                        _mm512_maskz_loadu_ps(i < mr ? m1 : 0, t + i * ldt + 16));
      }
    _tile_loadd(0, c, cs);
    _tile_loadd(1, c + 16, cs);
    _tile_loadd(2, c + 16 * ldc, cs);
    _tile_loadd(3, c + 16 * ldc + 16, cs);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t q = 0; q < chunks; ++q) {
    _tile_loadd(4, a, a_row);
    _tile_loadd(5, a + 16 * a_row, a_row);
    _tile_loadd(6, b, 2 * NR * 2);
    _tile_loadd(7, b + 64, 2 * NR * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    a += a_step;
    b += KB * NR * 2;
  }
  if (direct && alpha == 1.0f) {
    _tile_stored(0, t, cs);
    _tile_stored(1, t + 16, cs);
    _tile_stored(2, t + 16 * ldt, cs);
    _tile_stored(3, t + 16 * ldt + 16, cs);
    return;
  }
  _tile_stored(0, buf, NR * 4);
  _tile_stored(1, buf + 16, NR * 4);
  _tile_stored(2, buf + 16 * NR, NR * 4);
  _tile_stored(3, buf + 16 * NR + 16, NR * 4);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int i = 0; i < mr; ++i) {
    float *r = t + i * ldt;
    __m512 v0 = _mm512_load_ps(buf + i * NR), v1 = _mm512_load_ps(buf + i * NR + 16);
    if (alpha != 1.0f) { /* T (+)= alpha * tile */
      v0 = _mm512_fmadd_ps(va, v0, _mm512_maskz_loadu_ps(accumulate ? m0 : 0, r));
      v1 = _mm512_fmadd_ps(va, v1, _mm512_maskz_loadu_ps(accumulate ? m1 : 0, r + 16));
    }
    _mm512_mask_storeu_ps(r, m0, v0);
    _mm512_mask_storeu_ps(r + 16, m1, v1);
  }
}

void loom_gemm_ukr_amx_bf16(int64_t kc, const void *ap, const void *bp, float *t, int64_t ldt,
                            float alpha, int mr, int nr, int accumulate) {
  /* kc counts k-pairs: a whole number of 32-k chunks */
  amx_tile(kc / (KB / 2), (const char *)ap, KB * 2, MR * KB * 2, (const char *)bp, t, ldt, alpha,
           mr, nr, accumulate);
}

void loom_gemm_ukr_amx_bf16_rows(int64_t kc, const void *ap, int64_t lda, const void *bp,
                                 float *t, int64_t ldt, float alpha, int nr, int accumulate) {
  amx_tile(kc / (KB / 2), (const char *)ap, lda * 2, KB * 2, (const char *)bp, t, ldt, alpha, MR,
           nr, accumulate);
}
