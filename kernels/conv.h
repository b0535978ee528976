/* kernels/conv.h — the data movement of convolution: im2col and col2im.
 * The arithmetic is the GEMM's (kernels/gemm/gemm.h).
 *
 * Geometry is always 3-d (1-d and 2-d convolutions use size-1 dims). A
 * "col" matrix has rows (c, kd, kh, kw) and columns (n, od, oh, ow), stored
 * contiguously as [C*KD*KH*KW][N][OD*OH*OW]: a group's rows are one block,
 * and for a fixed row the columns of all images form one run, which is what
 * the weight gradient needs as its k dimension.
 *
 * Scalars of both kernels (all .i): [0..2] kernel (kd, kh, kw), [3..5]
 * stride, [6..8] padding, [9..11] dilation, [12..14] the col grid
 * (od, oh, ow), i.e. the positions the kernel window visits. */
#ifndef LOOM_KERNELS_CONV_H
#define LOOM_KERNELS_CONV_H

#include <stdint.h>

#include "loom/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LOOM_CONV_NUM_SCALARS = 15 };

/* tensors: [0] col (rank 3: C*K, N, L, contiguous, input's dtype),
 *          [1] input (rank 5: N, C, D, H, W, any strides).
 * range: C*K*N (one col row of one image per item). Out-of-image taps
 * give 0. */
int loom_im2col_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end);

/* tensors: [0] image (rank 5: N, C, D, H, W, any strides, float32),
 *          [1] col (rank 3: C*K, N, L, contiguous, float32).
 * range: N*C (one image plane per item). Each image element becomes the
 * sum, in fixed (kd, kh, kw) order, of the col entries that read it; the
 * plane is the accumulator, so lower-precision images go through an fp32
 * one. */
int loom_col2im_kernel(const loom_kernel_args *args, int64_t begin,
                       int64_t end);

/* Forward convolution as an implicit GEMM (fp32, AVX-512 CPUs only): the
 * col panels are gathered from the image per tile, never materialised.
 * tensors: [0] out C, [1] weight A, [2] col B, [3] workspace: the GEMM
 *          operands of kernels/gemm/gemm.h (rank 4: N, G, rows, cols; B's
 *          data is not read, only its shape), with A already packed by
 *          loom_gemm_pack_kernel over [0, plan.pack_units_a); C fp32 with
 *          unit column stride; [4] image (rank 5: N, C, D, H, W, fp32, any
 *          strides); [5] optional bias (O, fp32).
 * scalars: [0].i isa, [1] unused, [2..16] the geometry as above.
 * range: N * G * ceil(L / LOOM_CONV_GEMM_POSITIONS), grain any. Each
 * output element sums its k in the GEMM's fixed order. */
enum { LOOM_CONV_GEMM_POSITIONS = 128 };
int loom_conv_gemm_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

/* Weight gradient as an implicit GEMM (fp32, AVX-512 CPUs only):
 * dW[g] = dy[g] @ col[g]^T with k running over (image, position).
 * tensors: [0] dW C (1, G, O/G, C/G*K) fp32, unit column stride;
 *          [1] dy A (1, G, O/G, N*L), already packed by
 *          loom_gemm_pack_kernel over [0, plan.pack_units_a); [2] col^T B
 *          (1, G, N*L, C/G*K), shape only; [3] workspace; [4] image as
 *          for the forward.
 * scalars: as for loom_conv_gemm_kernel.
 * range: G * ceil((C/G*K) / 32) (one 32-column panel of dW per item). */
int loom_conv_wgrad_kernel(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_CONV_H */
