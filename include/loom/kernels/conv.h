/* loom/kernels/conv.h — the convolutions' names, plans and argument
 * contracts (the channels-last bf16 kernels are in loom/kernels/conv_nhwc.h,
 * im2col and col2im, the geometry scalars and the col layout in
 * loom/kernels/im2col.h). Every driver provides these names.
 *
 * A convolution pass (forward, input gradient, weight gradient) is planned
 * first: the family chooses the way it runs (PATH_*), and with it the
 * variant (on the host driver from the CPU's features, capped by LOOM_GEMM
 * and LOOM_CPU_FEATURES; LOOM_CONV_WINOGRAD=0 turns Winograd off), the
 * tiling and the sizes of the copies and workspaces the caller allocates.
 * The caller then makes the launches the plan's path lists, below.
 *
 * The planners take the same arguments:
 *   tensors: [0] the image the window slides over (N, C, spatial...; rank
 *            3 to 5, the convolution's 1 to 3 spatial dims), [1] the
 *            tensor on the window's grid (N, O, grid...; same rank); shapes,
 *            dtypes and strides only, data is never read;
 *   scalars (.i): [0..14] the geometry (loom/kernels/im2col.h; 1-d and 2-d
 *            convolutions in its last dims), [15] groups, [16] the threads
 *            the launches run on (it sizes tiles only: no result depends on
 *            it), [17] flags (LOOM_CONV_FLIPPED, LOOM_CONV_PART,
 *            LOOM_CONV_COL_ONLY, LOOM_CONV_FOLDED; 0: none).
 * The dtypes are fp32, bf16 or fp16, the same for both; every other path
 * than COL and GEMM needs fp32 or (on some CPUs) bf16.
 *
 * Launch contracts name GEMM operands "(b1, b2, rows, cols)" as in
 * loom/kernels/gemm.h: rank-4 strided views, whose sizes and strides the
 * path's text gives exactly (the planner sized the workspace for those). */
#ifndef LOOM_KERNELS_CONV_CONTRACT_H
#define LOOM_KERNELS_CONV_CONTRACT_H

#include <stdint.h>

#include "loom/kernels/im2col.h"

/* ---- planning -------------------------------------------------------------- */

enum {
  LOOM_CONV_FLIPPED = 1,  /* forward: the weight is the flipped form of the given one
                             (channels swapped, taps reversed): a stride-1 input
                             gradient, [0] is dy and [1] dx */
  LOOM_CONV_PART = 2,     /* forward: one stride phase of an input gradient */
  LOOM_CONV_COL_ONLY = 4, /* input gradient: through col (a transposed
                             convolution's forward, whose col2im adds its bias) */
  LOOM_CONV_FOLDED = 8,   /* weight gradient: the image's window columns are its
                             channels (few, such as a stem's 3 by 7) and the window
                             one column wide: PATH_NHWC wherever it runs, however few
                             the channels (else the plan as without the flag) */
};

enum {
  LOOM_CONV_PATH_GEMM = 0,     /* 1x1 windows: one GEMM per image and group over the
                                  tensors as they lie (loom/kernels/gemm.h) */
  LOOM_CONV_PATH_COL = 1,      /* im2col or col2im and GEMMs */
  LOOM_CONV_PATH_IMPLICIT = 2, /* "conv.implicit.*": GEMMs that gather col panels
                                  from the image as they go */
  LOOM_CONV_PATH_PADDED = 3,   /* "conv.padded.*" over "conv.pad"'s zero-padded planes */
  LOOM_CONV_PATH_WINOGRAD = 4, /* "conv.winograd.*": F(2x2, 3x3) */
  LOOM_CONV_PATH_NHWC = 5,     /* "conv_nhwc.*" over a channels-last copy */
  LOOM_CONV_PATH_FLIPPED = 6,  /* input gradient: a forward with LOOM_CONV_FLIPPED */
  LOOM_CONV_PATH_PHASES = 7,   /* input gradient: one forward per stride phase */
};

/* "conv.forward.plan": out [1] = the convolution of image [0] (with
 * LOOM_CONV_FLIPPED, of dy with the flipped weight), and optionally [2]
 * the weight as given (where it lies decides whether a GEMM reads it in
 * place). PATH_GEMM and PATH_COL are chosen without flags only.
 *  - PATH_GEMM: per image and group, out = W @ x (x contiguous).
 *  - PATH_COL: "im2col.to_col", then per image and group out = W @ col.
 *  - PATH_IMPLICIT: the weight A packed into a workspace of
 *    workspace_bytes, then "conv.implicit.forward" over [0, range) with
 *    scalars [0] variant, [1] tile_positions, [2..16] the geometry,
 *    [17] pieces. Operands (bn = flat ? 1 : N, cols = flat ? N L : L; og,
 *    cg the out and in channels per group, ck = cg K): C (bn, G, og, cols)
 *    strides (O cols, og cols, cols, 1), over a temporary (O, N, L) when
 *    flat, else over out; A the weight (bn, G, og, ck) strides (0, og ck,
 *    ck, 1); B the image (bn, G, ck, cols) strides (G ck cols, ck cols,
 *    cols, 1).
 *  - PATH_PADDED: "conv.pad" of the image (top, left, wq, sh, sw) into
 *    (N, C sh sw, plane), A packed, then "conv.padded.forward" over
 *    [0, range) with scalars [0] variant, [1] tile_positions, [2..16] the
 *    geometry, [17] wq, [18] positions; cols = N positions: C (1, G, og,
 *    cols) strides (0, og cols, cols, 1), A (1, G, og, ck) strides
 *    (0, og ck, ck, 1), B the copy (1, G, ck, cols) strides (0, 0, cols, 1).
 *  - PATH_WINOGRAD: "conv.winograd.weight" over [0, panels) into U (16,
 *    panels, C, LOOM_CONV_WINOGRAD_MR), "conv.pad" as for PATH_PADDED, then
 *    "conv.winograd.forward" over [0, range) with scalars wq, positions;
 *    or, reading the image in place (no "conv.pad"), over [0, image_range)
 *    with scalars image_wq, image_positions, top, left: a dense grid whose
 *    blocks of tiles span images.
 *  - PATH_NHWC: "conv_nhwc.pad" of the image (top, left, wq, sh, sw) into
 *    (N, sh sw, plane, copy_channels) with positions copy_stride apart, then
 *    "conv_nhwc.weight" and "conv_nhwc.forward" (loom/kernels/conv_nhwc.h).
 * The pack of A: "conv.pack" over [0, pack_range), grain pack_grain, with
 * tensors [0] C, [1] A, [2] B, [3] workspace and scalars [0].i variant,
 * [1].f 1, [2].f 0; with LOOM_CONV_FLIPPED "conv.pack_flipped" instead,
 * tensors [4] the given weight (O, C/G, K) contiguous, scalars [0].i
 * variant, grain 1. */
typedef struct loom_conv_forward_plan {
  int32_t path;    /* LOOM_CONV_PATH_* */
  int32_t variant; /* scalars[0].i of the packs and the GEMM launch */
  int32_t flat;    /* IMPLICIT: every image's positions form one row of columns */
  int32_t sh, sw;  /* PADDED, WINOGRAD, NHWC: the copy's stride phases */
  int64_t top, left, wq, plane; /* and its zeros before the image, rows, plane */
  int64_t positions;            /* PADDED, WINOGRAD: grid positions per image */
  int64_t copy_channels, copy_stride; /* NHWC: channels, and positions' distance */
  int64_t workspace_bytes;            /* IMPLICIT, PADDED: the packed A */
  int64_t pack_range, pack_grain;
  int64_t tile_positions, pieces; /* IMPLICIT, PADDED */
  int64_t panels;                 /* WINOGRAD: of U */
  int64_t range;                  /* the path's last launch */
  int64_t image_wq, image_positions, image_range; /* WINOGRAD, the image read in place */
} loom_conv_forward_plan;

/* "conv.input_grad.plan": dx [0] from dy [1] and the weight.
 *  - PATH_GEMM: per image and group, dx = W^T @ dy.
 *  - PATH_FLIPPED: the forward planned with LOOM_CONV_FLIPPED over
 *    `geometry` writes dx.
 *  - PATH_PHASES: phases[0] * phases[1] * phases[2] stride phases, each
 *    planned by "conv.input_grad.phase" (the same arguments, and scalars
 *    [18] the phase's index, d major). With `copy`, dy is copied once by
 *    "conv_nhwc.pad" (top, left, wq, strides 1) into planes of `plane`
 *    positions, copy_channels wide, copy_stride apart, which the phases'
 *    "conv_nhwc.forward" launches read.
 *  - PATH_COL: chunk images at a time, col (C K, n, L) fp32 = W^T @ dy,
 *    per image and group, or with `flat` and more than one image, over
 *    every image's positions as one row of columns; then
 *    "im2col.to_image". */
typedef struct loom_conv_input_grad_plan {
  int32_t path;
  int32_t flat;
  int32_t copy;
  int32_t phases[3];
  int64_t geometry[LOOM_CONV_NUM_SCALARS];
  int64_t chunk;
  int64_t top, left, wq, plane, copy_channels, copy_stride;
} loom_conv_input_grad_plan;

/* "conv.input_grad.phase": the phase of dx at offsets (d, h, w), every
 * stride-th position from there: the convolution `geometry` of dy with the
 * taps first_tap, first_tap + stride, ... of the weight (per dim),
 * flipped. `empty`: no position of dx is in it. `zero`: no tap reaches it,
 * it is 0. `in_place`: one "conv_nhwc.forward" launch over the copy writes
 * it with the other such phases straight into dx, with its own `origin`;
 * else it runs into a temporary: by "conv_nhwc.forward" with `origin`
 * where the pass plan has a copy, else by the forward planned with
 * LOOM_CONV_FLIPPED | LOOM_CONV_PART. */
typedef struct loom_conv_phase_plan {
  int32_t empty, zero, in_place;
  int64_t offset[3], first_tap[3];
  int64_t geometry[LOOM_CONV_NUM_SCALARS];
  int64_t origin;
} loom_conv_phase_plan;

/* "conv.weight_grad.plan": dW from the image [0] and dy [1].
 *  - PATH_COL: "im2col.to_col", then dW = dy @ col^T per group.
 *  - PATH_IMPLICIT: dy as (O, N, L) contiguous is A, packed, then
 *    "conv.implicit.weight_grad" over [0, range) with scalars [0] variant,
 *    [1] per_item, [2..16] the geometry. C dW (1, G, og, ck) strides
 *    (0, og ck, ck, 1); A (1, G, og, N L) strides (0, og N L, N L, 1);
 *    B the image (1, G, N L, ck) strides (0, N L ck, ck, 1). Or (fp32
 *    only) dy (N, O, L) as it lies, one A per image: A (N, G, og, L)
 *    strides (O L, og L, L, 1), B (N, G, L, ck) strides (0, L ck, ck, 1),
 *    C (N, G, og, ck) strides (0, og ck, ck, 1); "conv.pack" over N times
 *    the plan's pack range and grain into a workspace of N G packed
 *    matrices (the plan's bytes + 64 N G). Each image's products add into
 *    dW in turn: where L is not a multiple of the k block the sums round
 *    per image, not as the single matrix's.
 *  - PATH_PADDED: "conv.pad" of the image as for the forward, and of dy
 *    into dyp (O, N, positions) (top 0, left 0, wq, tensor [0] dyp
 *    permuted to (N, O, positions)), A dyp packed, then
 *    "conv.padded.weight_grad" over [0, range) with scalars [0] variant,
 *    [1] 0, [2..16] the geometry, [17] wq, [18] positions, [19] chunk,
 *    [20] per_item, into chunks partial sums (chunks, G, og, ck) that add
 *    up to dW in order (dW itself when chunks is 1). C (1, G, og, ck) as
 *    above, A (1, G, og, N positions) strides (0, og ld, ld, 1) with ld =
 *    loom_conv_padded_dy_row(N, positions), B the copy (1, G,
 *    N positions, ck) strides (0, 0, ck, 1).
 *  - PATH_WINOGRAD: "conv.pad" of the image as for the forward, and of dy
 *    (top 0, left 0, wq, 2, 2) into (N, 4 O, dy_plane); then
 *    "conv.winograd.weight_grad" over [0, range) with scalars wq,
 *    positions, chunk into chunks partial sums (chunks, 16, O, C), and
 *    "conv.winograd.weight_grad_finish" over [0, O), grain finish_grain.
 *    Reading x and dy in place (no "conv.pad"), the image_* fields stand
 *    for those: a dense grid whose blocks of tiles span images.
 *  - PATH_NHWC: "conv_nhwc.pad" of the image (top, left, wq, sh, sw) with
 *    positions in pairs (N, sh sw, plane / 2, copy_channels, 2),
 *    copy_stride apart; dy on the grid in a zeroed (N, out_channels, span)
 *    from lead on; then "conv_nhwc.weight_grad" over [0, range) with
 *    per_item blocks per item.
 * The pack of A, where there is one, as for the forward ("conv.pack"). */
/* The distance of dyp's channels' rows (PATH_PADDED's weight gradient, fp32):
 * N positions, or 16 floats more where that is a multiple of 4 KB, at
 * which the rows' lines share sets of the L1 cache (the pad from a
 * channels-last dy writes 32 channels at once; the GEMM would pack the
 * rows rather than read them in place). */
static inline int64_t loom_conv_padded_dy_row(int64_t n, int64_t positions) {
  const int64_t k = n * positions;
  return k % 1024 == 0 ? k + 16 : k;
}

typedef struct loom_conv_weight_grad_plan {
  int32_t path;
  int32_t variant;
  int32_t sh, sw;
  int64_t top, left, wq, plane, positions;
  int64_t dy_plane;                   /* WINOGRAD */
  int64_t copy_channels, copy_stride; /* NHWC */
  int64_t lead, span, out_channels;   /* NHWC: dy's copy */
  int64_t workspace_bytes, pack_range, pack_grain;
  int64_t chunk, chunks, per_item;
  int64_t range;
  int64_t finish_grain;
  /* WINOGRAD, x and dy read in place */
  int64_t image_wq, image_positions, image_chunk, image_chunks, image_range, image_finish_grain;
} loom_conv_weight_grad_plan;

/* ---- kernels --------------------------------------------------------------- */

/* "conv.pack": packs A for the implicit and padded-row kernels, as
 * "gemm.pack" does for the plan of the given variant (which may take
 * panels over, read in place by the GEMM launch: then it packs only
 * what remains). Tensors and scalars: see "conv.forward.plan". */

/* "conv.pack_flipped": packs the GEMM A panels of the convolution that
 * gives a stride-1 input gradient, straight from the forward's weight w:
 * that convolution's weight is wf[g][c][o][K-1-t] = w[g * O/G + o][c][t]
 * (channels swapped, taps reversed), which is never written out.
 * tensors: [0] C, [1] A (1, G, C/G, O/G * K; shape only), [2] B, [3]
 *          workspace: as for "conv.pack"; [4] w (O, C/G, K), contiguous,
 *          fp32 (or bf16 where the plan packs bf16, K <= 32).
 * scalars: [0].i variant. range: G * ceil(m panels / LOOM_CONV_FLIP_PANELS)
 * (the planner's pack_range). */
enum { LOOM_CONV_FLIP_PANELS = 4 };

/* "conv.pad": 2-d image planes into zero-padded phase planes of row width
 * wq. With strides (sh, sw), the padded image (top, left zeros before
 * each dim) is split into sh * sw phases, phase (a, b) holding padded rows
 * a, a + sh, ... and columns b, b + sw, ...:
 * dst[n][(c * sh + a) * sw + b][i * wq + j] = padded[n][c][i*sh + a][j*sw + b],
 * zero elsewhere in the plane. Stride 1 is one phase: the padded image.
 * tensors: [0] dst (rank 3: N, C * sh * sw, plane; fp32, unit last stride,
 *          planes in any order), [1] src (rank 5: N, C, 1, H, W; fp32, any
 *          strides).
 * scalars (.i): [0] top, [1] left, [2] wq, and optionally [3] sh, [4] sw
 * (else 1). range: N * C * sh * sw (one phase plane per item). */

/* "conv.implicit.forward": the forward as an implicit GEMM: col panels are
 * gathered from the image per tile, never materialised. fp32, or bf16
 * where the planner chose this path for it (AMX tiles, whose sums run in
 * fp32 and are rounded once).
 * tensors: [0] C, [1] A, [2] B (shape only), [3] workspace: the operands
 *          of the plan (above), A packed by "conv.pack" unless the variant
 *          reads its full panels in place; C's dtype is the image's, with
 *          unit column stride; [4] image (rank 5: N, C, D, H, W, any
 *          strides); [5] optional bias (O).
 * scalars: [0].i variant, [1].i positions per tile, [2..16] the geometry,
 * and optionally [17].i the pieces of the last tile (else 1).
 * range: C's batch * G * (ceil(C's cols / positions per tile) - 1 + pieces),
 * grain any. Each output element sums its k in the GEMM's fixed order,
 * whatever the tiling. */
enum { LOOM_CONV_GEMM_POSITIONS = 128 };

/* "conv.implicit.weight_grad": dW[g] = dy[g] @ col[g]^T with k running
 * over (image, position), col^T panels gathered from the image.
 * tensors: [0] dW C, [1] dy A packed by "conv.pack", [2] col^T B (shape
 *          only), [3] workspace, [4] the image as for the forward; dW, dy
 *          and the image fp32, or bf16 (sums in fp32, rounded once).
 *          fp32 dy may be one packed matrix per image (C and A of batch
 *          N, k = L, C's batch stride 0: "conv.weight_grad.plan"), whose
 *          products add into dW image after image; a workspace short of
 *          the packed matrices is refused.
 * scalars: [0].i variant, [1].i (bf16) dW panels per item in [1, 4],
 * [2..16] the geometry. range: the planner's. */

/* "conv.padded.forward": the 2-d forward over zero-padded phase planes
 * ("conv.pad", rows of width wq >= wo + dw*(kw-1)/sw), fp32. The GEMM runs
 * over every image's grid q = y * wq + x, q < gpos (a multiple of 32,
 * >= ho * wq), in turn; positions with x >= wo or y >= ho are dropped.
 * halo = dh*(kh-1)/sh * wq + dw*(kw-1)/sw is how far a window reads past q.
 * tensors: [0] C, [1] A, [2] B (shape only), [3] workspace: the plan's
 *          operands (C's data is not used); [4] the phase planes (N,
 *          C * sh * sw, plane), plane >= gpos + halo; [5] out (N, O, ho,
 *          wo), any strides; [6] optional bias (O).
 * scalars: [0].i variant, [1].i positions per tile, [2..16] the geometry,
 * [17].i wq, [18].i gpos. range: G * ceil(N * gpos / positions per tile). */

/* "conv.padded.weight_grad": the 2-d weight gradient over the same phase
 * planes: dW[g] = dyp[g] @ col[g]^T with k over (image, q) and each
 * image's q padded to gpad, a multiple of 32; dyp is dy on the same grid,
 * zero in columns x >= wo and past ho * wq.
 * tensors: [0] dW C, [1] dyp A (packed by "conv.pack" but for the full row
 *          panels the variant reads in place), [2] B (shape only), [3]
 *          workspace, [4] the phase planes, plane >= gpad + halo; [5]
 *          partial sums P (chunks, G, O/G, C/G*K), unit last stride: P[i]
 *          sums k in [i * kchunk, (i + 1) * kchunk), and dW is their sum in
 *          order (the caller's; P may be dW itself when there is one).
 * scalars: [0].i variant, [1] unused, [2..16] the geometry, (.i) [17] wq,
 * [18] gpad, [19] kchunk, a multiple of the plan's k block, [20] qn, the
 * column panels of dW per item (at most LOOM_CONV_WGRAD_MAX_PANELS).
 * range: chunks * G * ceil(dW's column panels / qn). */
enum { LOOM_CONV_WGRAD_MAX_PANELS = 64 };

/* Winograd F(2x2, 3x3) for 3x3 windows with stride and dilation 1, fp32.
 * About 2.25 times fewer multiplications than the GEMM paths; the results
 * differ from theirs by rounding only (the transforms' adds and halvings).
 *
 * How the kernels split the work, which sizes their tensors and ranges: */
enum {
  LOOM_CONV_WINOGRAD_MR = 12,     /* output channels per panel of U */
  LOOM_CONV_WINOGRAD_TILES = 32,  /* grid tiles per block; tchunk (and planes' gpos) multiples */
  LOOM_CONV_WINOGRAD_PANELS = 8,  /* panels per forward item */
  LOOM_CONV_WINOGRAD_WG_M = 96,   /* output channels per weight-gradient item */
  LOOM_CONV_WINOGRAD_WG_K = 64,   /* input channels per weight-gradient item */
};
/*
 * "conv.winograd.weight": the weight, transformed: U[e][p][k][i] is element
 * e of G g G^T for output channel m = MR p + i and input channel k (zero
 * for m past the last).
 * tensors: [0] U (16, ceil(M / MR), K, MR) contiguous fp32, [1] w (O, C,
 * 3, 3) fp32, any strides >= 0 (contiguous or channels last). scalars: [0].i flipped: 0, the convolution's
 * weight is w (M = O, K = C); 1, it is w with channels swapped and taps
 * reversed (M = C, K = O), the stride-1 input gradient's.
 * range: ceil(M / MR) (one panel per item).
 *
 * "conv.winograd.forward": the convolution of 2x2 output tiles over a grid
 * of tho = ceil(ho / 2) rows of wq tiles per image (tiles past
 * ceil(wo / 2) dropped), gpos positions per image, one image's after the
 * other's; items are blocks of TILES consecutive positions (the last one
 * cut at N gpos).
 * tensors: [0] out (N, M, ho, wo) fp32, any strides; [1] U as above;
 * [2] the stride-2 phase planes of the zero-padded image ("conv.pad" with
 * sh = sw = 2, rows wq wide; N, 4 K, plane), plane >= gpos + wq + 1, or
 * the image itself (N, K, H, W), channels last (stride 1 along K) or by
 * rows (stride 1 along W: NCHW), strides >= 0, read where "conv.pad"
 * would have copied it from (same values, same bits; no planes);
 * [3] optional bias (M).
 * scalars (.i): [0] wq >= ceil(wo / 2) + 1, [1] gpos, a multiple of TILES,
 * >= tho * wq (the grid tiles per image, rounded up); with the image,
 * [2] top and [3] left, its padding (0 to 2) as "conv.pad"'s, and any
 * grid wq >= ceil(wo / 2), gpos >= tho * wq: the dense one, wq =
 * ceil(wo / 2) and gpos = tho wq, fills every block but the batch's last.
 * range: ceil(N * gpos / TILES) * ceil(ceil(M / MR) / PANELS) (or less).
 * Each output sums its input channels in a fixed order, whatever the
 * split and the grid: the same bits on any grid.
 *
 * "conv.winograd.weight_grad": the weight gradient in the transformed
 * domain: for each element e, dU[e][m][k] = sum over tiles of
 * (A dY A^T)[e] (B^T d B)[e], dY the 2x2 tiles of dy and d the 4x4 patches
 * of the image; then dW = G^T dU G.
 * tensors: [0] P (chunks, 16, M, K) contiguous fp32: the sums over chunks
 *          of tchunk grid tiles (every image's gpos in turn);
 *          [1] the image's stride-2 phase planes, zero-padded, rows wq wide
 *          (N, 4 K, plane), plane >= gpos + wq + 1;
 *          [2] dy's, not padded (N, 4 M, plane), plane >= gpos; or, with
 *          scalar [3] 1, padded by one row and column as the input
 *          gradient's flipped forward pads it (top 1, left 1, wq, 2, 2),
 *          plane >= gpos + wq + 1: phase (1 - i, 1 - j) at i wq + j holds
 *          what phase (i, j) holds unpadded, so the two passes share one
 *          copy of dy and read the same values;
 *          or [1] and [2] both the images themselves: x (N, K, H, W) and
 *          dy (N, M, ho, wo), both stride 1 along channels (channels
 *          last) or both along W (NCHW), strides >= 0, read where
 *          "conv.pad" would have copied them from (same values, same
 *          bits; no planes).
 * scalars (.i): [0] wq >= ceil(wo / 2) + 1, [1] gpos, a multiple of TILES,
 * >= ceil(ho / 2) wq, [2] tchunk, a multiple of TILES, [3] (optional, 0)
 * whether dy's planes are padded (0 with the images); with the images,
 * [4] top and [5] left, x's padding (0 to 2) as "conv.pad"'s, and any
 * grid wq >= ceil(wo / 2), gpos >= ceil(ho / 2) wq (as the forward's).
 * The sums' order follows the grid and tchunk, never the split.
 * range: chunks * ceil(M / WG_M) * ceil(K / WG_K).
 *
 * "conv.winograd.weight_grad_finish": dW (M, K, 3, 3) fp32, any strides
 * >= 0 (contiguous or channels last) = G^T (P's chunks summed in order) G; K <= LOOM_CONV_WINOGRAD_MAX_K.
 * tensors: [0] dW, [1] P as above. range: M (one output channel per item). */
enum { LOOM_CONV_WINOGRAD_MAX_K = 4096 };

/* ---- the implicit forward's tiling ----------------------------------------- */

/* The pool's workers take items in order, each as it comes free: gives
 * `cost` to the least busy of `workers` and returns its new load. */
static inline int64_t loom_conv_take(int64_t *busy, int64_t workers, int64_t cost) {
  int64_t w = 0;
  for (int64_t j = 1; j < workers; ++j)
    if (busy[j] < busy[w]) w = j;
  return busy[w] += cost;
}

/* Positions per tile of the forward kernels over `batches` (images times
 * groups) of `cols` positions, for `workers` threads: the widest of 128,
 * 64 and 32 that keeps the workers as busy as any of them to within 5%.
 * Narrower tiles spread small outputs (deep layers, one image) over the
 * workers but read the weight's panels more often. The workers take tiles
 * in order as they come free, which is simulated while the tiles are few. */
static inline int64_t loom_conv_tile_positions(int64_t batches, int64_t cols, int64_t workers) {
  enum { MAX_WORKERS = 64 };
  if (workers > MAX_WORKERS) workers = MAX_WORKERS;
  if (workers <= 1 || batches * cols <= 0 ||
      batches * ((cols + LOOM_CONV_GEMM_POSITIONS - 1) / LOOM_CONV_GEMM_POSITIONS) >= 8 * workers)
    return LOOM_CONV_GEMM_POSITIONS;
  double eff[3], best = 0.0;
  for (int i = 0; i < 3; ++i) {
    const int64_t p = LOOM_CONV_GEMM_POSITIONS >> i, per = (cols + p - 1) / p;
    int64_t busy[MAX_WORKERS] = {0}, span = 0;
    for (int64_t t = 0; t < batches * per; ++t) {
      const int64_t j0 = t % per * p;
      const int64_t load = loom_conv_take(busy, workers, cols - j0 < p ? cols - j0 : p);
      if (load > span) span = load;
    }
    eff[i] = (double)(batches * cols) / (double)(span * workers);
    if (eff[i] > best) best = eff[i];
  }
  for (int i = 0; i < 3; ++i)
    if (eff[i] >= 0.95 * best) return LOOM_CONV_GEMM_POSITIONS >> i;
  return 32;
}

/* Into how many pieces, by rows of C (output channels), the last position
 * tile of each batch is cut: `workers` when the workers' loads come out
 * more even by over 3% (when few tiles leave one worker an extra partial
 * tile, as 13 panels over 2 do), else 1. Tiles are costed by their
 * 32-position panels, and taken in order as the workers come free. */
static inline int64_t loom_conv_tail_split(int64_t batches, int64_t cols, int64_t tpos,
                                           int64_t workers) {
  enum { MAX_WORKERS = 64 };
  if (workers <= 1 || workers > MAX_WORKERS || batches <= 0 || cols <= 0 ||
      batches * ((cols + tpos - 1) / tpos) >= 8 * workers)
    return 1;
  const int64_t per = (cols + tpos - 1) / tpos, tail = cols - (per - 1) * tpos;
  int64_t span[2] = {0, 0};
  for (int v = 0; v < 2; ++v) {
    const int64_t split = v ? workers : 1;
    int64_t busy[MAX_WORKERS] = {0};
    /* in units of 1/workers of a panel */
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t t = 0; t < per - 1 + split; ++t) {
        const int64_t load = loom_conv_take(
            busy, workers, t < per - 1 ? tpos / 32 * workers : (tail + 31) / 32 * workers / split);
        if (load > span[v]) span[v] = load;
      }
  }
  return span[1] * 100 < span[0] * 97 ? workers : 1;
}

#endif /* LOOM_KERNELS_CONV_CONTRACT_H */
