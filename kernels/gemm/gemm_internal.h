/* kernels/gemm/gemm_internal.h — what the GEMM driver shares with its
 * per-ISA micro-kernels. Not part of any public contract. */
#ifndef LOOM_KERNELS_GEMM_INTERNAL_H
#define LOOM_KERNELS_GEMM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "kernels/dtype.h"

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

#endif /* LOOM_KERNELS_GEMM_INTERNAL_H */
