/* kernels/gemm/gemm_generic.c — the portable micro-kernel: plain C that any
 * compiler vectorises for the baseline ISA. The reference for the others. */
#include "kernels/gemm/gemm_internal.h"

enum { MR = LOOM_GEMM_GENERIC_MR, NR = LOOM_GEMM_GENERIC_NR };

void loom_gemm_ukr_generic_f32(int64_t kc, const void *ap, const void *bp,
                               float *t, int64_t ldt, float alpha, int mr,
                               int nr, int accumulate) {
  const float *a = (const float *)ap, *b = (const float *)bp;
  float acc[MR][NR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; ++k) {
    const float *ak = a + k * MR, *bk = b + k * NR;
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += ak[i] * bk[j];
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j)
      t[i * ldt + j] = (accumulate ? t[i * ldt + j] : 0.0f) + alpha * acc[i][j];
}
