/* kernels/conv/im2col_internal.h — what im2col.c shares with its AVX-512 part. */
#ifndef LOOM_KERNELS_IM2COL_INTERNAL_H
#define LOOM_KERNELS_IM2COL_INTERNAL_H

#include <stdint.h>

#include "loom/kernel_abi.h"

/* d[r * d_row + 2i] += s[r * s_row + i] for r < rows, i < n; touches no
 * other element (AVX-512 CPUs only). */
void loom_col2im_add_stride2_avx512(float *d, int64_t d_row, const float *s, int64_t s_row,
                                    int64_t rows, int64_t n);

/* Lanes of `lanes` live lanes, in panels of width (<= 16) lanes: panel i
 * gets d[i * dstep + l] = s[(i * width + l) * step] for its live lanes
 * and 0 for the rest of its width. 16 * step < 2^31 (AVX-512 CPUs
 * only). */
void loom_conv_flip_lanes_avx512(float *d, int64_t dstep, const float *s, int64_t step,
                                 int64_t lanes, int64_t width);

/* Rows [i0, i1) of a zero-padded plane d, wq wide: row i's columns
 * [j0, j1) from s + (i - i0) * s_row, every sw-th value (sw 1 or 2), and
 * the zeros before each from d[0] on; returns the end of the last row's
 * data, where the zeros after it start. Short runs take masked stores
 * rather than a memset and a copy each (AVX-512 CPUs only). */
int64_t loom_conv_pad_rows_avx512(float *d, int64_t wq, int64_t i0, int64_t i1, int64_t j0,
                                  int64_t j1, const float *s, int64_t s_row, int64_t sw);

/* The planes d[0 .. cnt) of a zero-padded copy (plane floats each, rows
 * wq wide) from a channels-last image: plane k's rows [i0, i1), columns
 * [j0, j1) (both non-empty), get s[(i - i0) * s_row + (j - j0) * step + k]
 * (channels contiguous, positions `step` apart), by 16 x 16 transposes;
 * every other element is zero (AVX-512 CPUs only). */
void loom_conv_pad_cl_planes_avx512(float *const *d, int64_t cnt, int64_t plane, int64_t wq,
                                    int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                    const float *s, int64_t s_row, int64_t step);

/* loom_conv_pad_cl_planes_avx512 for a narrow image (the few channels of a
 * network's input): cnt <= step <= 4, where 16 positions' channels are at
 * most four vectors, spread over the planes by permutes instead of
 * transposes that move 16 lanes for each live one (AVX-512 CPUs only). */
void loom_conv_pad_cl_narrow_avx512(float *const *d, int64_t cnt, int64_t plane, int64_t wq,
                                    int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                    const float *s, int64_t s_row, int64_t step);

/* d[i] = s[2i] for i < n, 16-bit values; reads s[0 .. 2n - 2] only
 * (AVX-512 CPUs only). */
void loom_im2col_stride2_u16_avx512(uint16_t *d, const uint16_t *s, int64_t n);

/* The plan of a flipped pack's arguments (kernels/conv/conv.h) into *p, and
 * whether its weight w (tensor [4]) fits it: 0, or a loom_status. The
 * caller checks the dtypes and the plan's variant. */
struct loom_gemm_plan;
int loom_conv_flip_plan(const loom_kernel_args *args, struct loom_gemm_plan *p);

#endif /* LOOM_KERNELS_IM2COL_INTERNAL_H */
