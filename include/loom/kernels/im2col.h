/* loom/kernels/im2col.h — the data movement of convolution, im2col and
 * col2im: names and argument contracts, with the window geometry and the
 * col layout that the convolution kernels share. Every driver provides
 * these names.
 *
 * Geometry is always 3-d (1-d and 2-d convolutions use size-1 dims). A
 * "col" matrix has rows (c, kd, kh, kw) and columns (n, od, oh, ow), stored
 * contiguously as [C*KD*KH*KW][N][OD*OH*OW]: a group's rows are one block,
 * and for a fixed row the columns of all images form one run, which is what
 * the weight gradient needs as its k dimension.
 *
 * The geometry scalars (all .i, LOOM_CONV_NUM_SCALARS of them): [0..2]
 * kernel (kd, kh, kw), [3..5] stride, [6..8] padding, [9..11] dilation,
 * [12..14] the col grid (od, oh, ow), i.e. the positions the kernel window
 * visits. Both kernels take exactly these.
 *
 * "im2col.to_col": tensors [0] col (rank 3: C*K, N, L, contiguous, input's
 * dtype), [1] input (rank 5: N, C, D, H, W, any strides).
 * range: C*K*N (one col row of one image per item). Out-of-image taps
 * give 0.
 *
 * "im2col.to_image": tensors [0] image (rank 5: N, C, D, H, W, any
 * strides, float32), [1] col (rank 3: C*K, N, L, contiguous, float32).
 * range: N*C (one image plane per item, item c * N + n). Each image
 * element becomes the sum, in fixed (kd, kh, kw) order, of the col entries
 * that read it; the plane is the accumulator, so lower-precision images go
 * through an fp32 one.
 *
 * The channels-last forms, float32, whose col has one row per output
 * position and the taps' channels along it:
 *
 * "im2col.nhwc_to_col": tensors [0] col (rank 2: N*L rows (n, od, oh, ow)
 * of K*C columns (kd, kh, kw, c), columns contiguous), [1] input (rank 5:
 * N, C, D, H, W, any strides; a run of channels is copied at once when
 * its stride is 1). range: N*L (one col row per item). Out-of-image taps
 * give 0.
 *
 * "im2col.nhwc_to_image": tensors [0] image (rank 5, any strides), [1] col
 * (as above). range: N*D*H*W (one image position, all its channels, per
 * item). Each image element becomes the sum, in fixed (kd, kh, kw) order,
 * of the col entries that read it (0 where none does). */
#ifndef LOOM_KERNELS_IM2COL_CONTRACT_H
#define LOOM_KERNELS_IM2COL_CONTRACT_H

enum { LOOM_CONV_NUM_SCALARS = 15 };

#endif /* LOOM_KERNELS_IM2COL_CONTRACT_H */
