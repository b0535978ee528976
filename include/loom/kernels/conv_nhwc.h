/* loom/kernels/conv_nhwc.h — bf16 2-d convolutions over a channels-last
 * copy of the image: names and argument contracts. The convolution
 * planners (loom/kernels/conv.h) choose them (PATH_NHWC) where the driver
 * runs them; on the host driver, on AMX CPUs and on AVX512-BF16 ones.
 *
 * The image is copied once, zero-padded and split into stride phases as for
 * "conv.pad" (loom/kernels/conv.h), but channels last: each phase
 * plane is a run of positions q = i * wq + j, each of cp channels (a
 * multiple of 32, the channels past the image's zero). Over the grid of
 * output positions q in [0, ho * wq) (columns past wo are computed and
 * thrown away), tap (kh, kw) of position q reads position
 * q + (kh*dh / sh) * wq + kw*dw / sw of phase plane (kh*dh % sh, kw*dw % sw):
 * 16 positions of 32 channels are one AMX A tile, loaded straight from the
 * copy (without AMX: each position's channel pair one broadcast word for
 * vdpbf16ps). The weight is packed into B tiles, 32 in-channels and 16
 * out-channels each, in the order the products take them (a tile's row:
 * one vdpbf16ps operand). Each output sums its in-channels 32 at a time,
 * within each block its taps in order and within a tap the channels in
 * tdpbf16ps's order (without AMX: pair by pair, in order), in fp32,
 * starting from the bias; the sum is rounded to bf16 once. */
#ifndef LOOM_KERNELS_CONV_NHWC_CONTRACT_H
#define LOOM_KERNELS_CONV_NHWC_CONTRACT_H

#include <stdint.h>

/* Channels of the copy and of the packed weight come in blocks of 32
 * (in) and 16 (out); a launch's item covers up to this many positions. */
enum { LOOM_CONV_NHWC_CB = 32, LOOM_CONV_NHWC_OB = 16, LOOM_CONV_NHWC_POSITIONS = 128 };

/* "conv_nhwc.pad": the channels-last padded copy (or, for the weight
 * gradient, with positions in interleaved pairs: dst of rank 5, see below):
 * dst[n][a * sw + b][i * wq + j][c] = padded[n][c][i * sh + a][j * sw + b],
 * where padded is the image with `top` rows and `left` columns of zeros
 * before it (zeros after it as far as the plane goes); c >= C gives 0.
 * tensors: [0] dst (rank 4: N, sh * sw, plane, cp; bf16, cp a multiple of
 *          32; channels unit-stride, positions ps >= cp apart, planes and
 *          images back to back; or rank 5: N, sh * sw, plane / 2, cp, 2,
 *          position q's channel c at (q / 2) * ps + 2 c + q % 2, ps >= 2 cp
 *          and wq even), [1] src (rank 5: N, C, 1, H, W; bf16, any
 *          strides, C <= cp).
 * scalars (.i): [0] top, [1] left, [2] wq, [3] sh, [4] sw.
 * range: N * sh * sw * ceil(plane / wq) (one row of a phase plane per item). */

/* "conv_nhwc.weight": the weight as B tiles:
 * dst[p][cb][t][16 h + r][2 o + e] = wc[t][32 cb + 2 r + e][32 p + 16 h + o],
 * 0 past the in- or out-channels, where wc[t][c][o] is the convolution's
 * weight: w[o][c][t], or with `flipped` w[c][o][T - 1 - t] (the input
 * gradient's convolution, channels swapped and taps reversed). A panel p of 32 out-channels is one run.
 * tensors: [0] dst (rank 5: op / 32, cp / 32, T, 32, 32; bf16, contiguous),
 *          [1] w (rank 3: the forward's O, C, T; bf16, contiguous).
 * scalars: [0].i flipped.
 * range: op / 16 * cp / 32 (32 in-channels by 16 out-channels per item). */

/* "conv_nhwc.forward": the convolution: out[n][o][y][x] = bias[o] + the sum
 * over taps and channels.
 * tensors: [0] out (rank 4: N, O, ho, wo; bf16, elements 1 or 2 apart along rows),
 *          [1] the copy (as dst of "conv_nhwc.pad"; its plane
 *          must hold every position a tap reads: ceil(ho * wq / 32) * 32
 *          plus the window's reach), [2] the packed weight (as dst of
 *          "conv_nhwc.weight", op >= O a multiple of 32),
 *          [3] optional bias (O; bf16).
 * scalars (.i): [0] kh, [1] kw, [2] sh, [3] sw, [4] dh, [5] dw, [6] wq,
 * [7] positions per item (a multiple of 32, at most
 * LOOM_CONV_NHWC_POSITIONS), and optionally [8] an origin (else 0): every
 * tap reads that many positions further on (one copy serving windows of
 * different paddings).
 * More convolutions over the same copy may share the launch (the stride
 * phases of an input gradient, each writing its own elements of one
 * output): [9].i their count E < LOOM_CONV_NHWC_CONVS, tensors [4 + 2i]
 * out and [5 + 2i] packed weight of the i-th, scalars [10 + 3i] kh,
 * [11 + 3i] kw and [12 + 3i] origin, all else as the first's, no bias;
 * tensor [3] must then be present (data NULL: no bias). Each item takes
 * the same positions of every convolution in turn, so their writes to one
 * output meet in the core's cache.
 * Optionally (the launch's scalars [10 + 3E] to [13 + 3E], with [9] E
 * present, 0 for one convolution): where the copy holds the image, rows
 * [top, top + rows) and columns [left, left + cols) of the padded image
 * ("conv_nhwc.pad"'s top and left, the image's H and W). A kernel may then
 * leave out the products of the copy's padding, which add zeros; which
 * ones may depend on the shapes, never on the items, so the bits do not
 * depend on the positions per item.
 * range: N * the most ceil(ho * wq / positions per item) of any. */
enum { LOOM_CONV_NHWC_CONVS = 8 };

/* "conv_nhwc.weight_grad": the weight gradient: dw[o][c][t] = the sum over
 * images and grid positions q of dy[n][o][q] * copy[n][phase][q + offset][c]
 * (the tap's phase plane and offset, as above), in fp32 in the order of the copy's
 * positions p = q + offset, 32 at a time in tdpbf16ps's order (without
 * AMX: pair by pair, in order), images and phase planes in turn; rounded
 * to bf16 once.
 * tensors: [0] dw (rank 3: O, C, T; bf16, contiguous), [1] the copy with
 *          positions in pairs ("conv_nhwc.pad"'s dst of rank 5:
 *          N, sh * sw, plane / 2, cp, 2, the plane a multiple of 32),
 *          [2] dy (rank 3: N, op, span; bf16, contiguous, op a multiple of
 *          32 and >= O): dy on the grid of positions q = y * wq + x from
 *          `lead` on, 0 everywhere else (x >= wo, rows past O, and before
 *          and after the grid as far as any p - offset reaches).
 * scalars (.i): [0] kh, [1] kw, [2] sh, [3] sw, [4] dh, [5] dw, [6] wq,
 * [7] lead (>= every offset; span >= lead + plane), and optionally [8] the
 * blocks of 32 out-channels per item (else 1; times the taps at most
 * LOOM_CONV_NHWC_WG_BLOCKS): they share each chunk of the copy, and [9]
 * the grid's positions ho * wq (else the plane's), past which dy is 0: a
 * kernel may leave the products there out (adding nothing), and, with [9],
 * optionally [10] top, [11] the image's rows H and [12] wo: the copy's
 * padded rows [top, top + H) hold the image and dy is 0 past column wo of
 * each grid row, so a kernel may leave out the products of the padding's
 * rows and past wo too (which ones may depend on the shapes, never on the
 * items or [8]).
 * range: ceil(op / 32 / [8]) * cp / 32 ([8] blocks of 32 out-channels by
 * 32 in-channels per item). The bits do not depend on [8]. */
enum { LOOM_CONV_NHWC_WG_BLOCKS = 64 };

/* Positions per item of a "conv_nhwc.forward" launch over n images whose
 * grid (the most of any of its convolutions) is `grid` positions, for
 * `workers` threads: up to LOOM_CONV_NHWC_POSITIONS, fewer when the items
 * would be too few to share out, four a worker (each output's sums are
 * the same either way). Each item reads the whole weight: 7x7 images of
 * 512 channels, batch 8, ran 6% faster in items of an image than of half
 * of one. */
static inline int64_t loom_conv_nhwc_positions(int64_t n, int64_t grid, int64_t workers) {
  int64_t ppi = LOOM_CONV_NHWC_POSITIONS;
  while (ppi > 32 && n * ((grid + ppi - 1) / ppi) < 4 * workers) ppi /= 2;
  return ppi;
}

#endif /* LOOM_KERNELS_CONV_NHWC_CONTRACT_H */
