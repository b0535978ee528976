/* kernels/gemm/gemm_internal.h — what the GEMM driver shares with its
 * per-ISA micro-kernels. Not part of any public contract. */
#ifndef LOOM_KERNELS_GEMM_INTERNAL_H
#define LOOM_KERNELS_GEMM_INTERNAL_H

#include <stdint.h>
#include <string.h>

/* T[0:mr, 0:nr] += alpha * Ap @ Bp, where T is fp32 with row stride ldt and
 * unit column stride. Ap is one packed A panel (kc steps of MR values, or of
 * MR bf16 pairs), Bp one packed B panel (kc steps of NR values or pairs).
 * Rows >= mr and columns >= nr of the tile are computed but not stored. */
typedef void (*loom_gemm_ukr_fn)(int64_t kc, const void *ap, const void *bp,
                                 float *t, int64_t ldt, float alpha, int mr,
                                 int nr);

/* Register tiles of each variant. */
enum {
  LOOM_GEMM_GENERIC_MR = 4,
  LOOM_GEMM_GENERIC_NR = 16,
  LOOM_GEMM_AVX512_MR = 12,
  LOOM_GEMM_AVX512_NR = 32,
  LOOM_GEMM_BF16_MR = 12,
  LOOM_GEMM_BF16_NR = 32,
};

void loom_gemm_ukr_generic_f32(int64_t kc, const void *ap, const void *bp,
                               float *t, int64_t ldt, float alpha, int mr,
                               int nr);
void loom_gemm_ukr_avx512_f32(int64_t kc, const void *ap, const void *bp,
                              float *t, int64_t ldt, float alpha, int mr,
                              int nr);
void loom_gemm_ukr_avx512bf16_bf16(int64_t kc, const void *ap, const void *bp,
                                   float *t, int64_t ldt, float alpha, int mr,
                                   int nr);

/* fp32 <-> bf16 / fp16 conversions, round to nearest even, NaN kept NaN. */
static inline float loom_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t loom_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float loom_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else { /* subnormal: normalise */
    int shift = 0;
    while (!(man & 0x400u)) { man <<= 1; ++shift; }
    man &= 0x3ffu;
    u = sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t loom_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* overflow, inf */
  if (a < 0x38800000u) { /* subnormal or zero in fp16 */
    if (a < 0x33000000u) return (uint16_t)sign; /* below half the smallest */
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23); /* 14..24 */
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
  }
  a += 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return (uint16_t)(sign | (a >> 13));
}

#endif /* LOOM_KERNELS_GEMM_INTERNAL_H */
