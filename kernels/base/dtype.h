/* kernels/base/dtype.h — scalar conversions for the 16-bit float formats, with
 * the rounding PyTorch uses (round to nearest even, NaN kept quiet). */
#ifndef LOOM_KERNELS_DTYPE_H
#define LOOM_KERNELS_DTYPE_H

#include <stdint.h>
#include <string.h>

static inline float loom_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Round to nearest even; NaN stays NaN (quiet). A choice of values, not a
 * branch, so that loops over it vectorize. */
static inline uint16_t loom_f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet = (bits >> 16) | 0x40u;
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline float loom_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: normalise */
    int shift = 0;
    while (!(man & 0x400u)) { man <<= 1; ++shift; }
    man &= 0x3ffu;
    bits = sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t loom_f32_to_f16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (abs < 0x38800000u) { /* result is subnormal or zero */
    if (abs < 0x33000000u) return sign; /* below half the smallest subnormal */
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(abs >> 23); /* 14..24 */
    uint32_t rounded = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (rounded & 1u))) ++rounded;
    return (uint16_t)(sign | rounded);
  }
  uint32_t r = abs - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

#endif /* LOOM_KERNELS_DTYPE_H */
