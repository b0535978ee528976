/* kernels/im2col_internal.h — what im2col.c shares with its AVX-512 part. */
#ifndef LOOM_KERNELS_IM2COL_INTERNAL_H
#define LOOM_KERNELS_IM2COL_INTERNAL_H

#include <stdint.h>

/* d[2i] += s[i] for i < n; touches no other element (AVX-512 CPUs only). */
void loom_col2im_add_stride2_avx512(float *d, const float *s, int64_t n);

#endif /* LOOM_KERNELS_IM2COL_INTERNAL_H */
