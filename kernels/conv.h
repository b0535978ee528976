/* kernels/conv.h — the kernels of convolution: im2col and col2im (their
 * contracts and names, the geometry scalars and the col layout in
 * loom/kernels/im2col.h), and the implicit-GEMM convolutions with their
 * packing and padding helpers.
 * The arithmetic is the GEMM's (kernels/gemm/gemm.h). */
#ifndef LOOM_KERNELS_CONV_H
#define LOOM_KERNELS_CONV_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

int loom_im2col_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_col2im_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Packs the GEMM A panels of the convolution that gives a stride-1 input
 * gradient, straight from the forward's weight w: that convolution's
 * weight is wf[g][c][o][K-1-t] = w[g * O/G + o][c][t] (channels swapped,
 * taps reversed), which is never written out.
 * tensors: [0] C, [1] A (1, G, C/G, O/G * K; shape only), [2] B, [3]
 *          workspace: as for loom_gemm_pack_kernel (fp32 operands);
 *          [4] w (O, C/G, K), contiguous fp32.
 * scalars: [0].i isa. range: G * ceil(plan.m_panels / LOOM_CONV_FLIP_PANELS)
 * (that many of a group's panels per item). */
enum { LOOM_CONV_FLIP_PANELS = 4 };
int loom_conv_pack_flipped_kernel(const loom_kernel_args *args, int64_t begin,
                                  int64_t end);

/* The same for a bf16 w and the AMX plan's A panels (AMX CPUs only,
 * kernels/conv_gemm_amx.c); K <= 32. */
int loom_conv_pack_flipped_amx_kernel(const loom_kernel_args *args, int64_t begin,
                                      int64_t end);

/* 2-d image planes into zero-padded phase planes of row width wq, for the
 * padded implicit GEMMs below. With strides (sh, sw), the padded image
 * (top, left zeros before each dim) is split into sh * sw phases, phase
 * (a, b) holding padded rows a, a + sh, ... and columns b, b + sw, ...:
 * dst[n][(c * sh + a) * sw + b][i * wq + j] = padded[n][c][i*sh + a][j*sw + b],
 * zero elsewhere in the plane. Stride 1 is one phase: the padded image.
 * tensors: [0] dst (rank 3: N, C * sh * sw, plane; fp32, unit last stride,
 *          planes in any order), [1] src (rank 5: N, C, 1, H, W; fp32, any
 *          strides).
 * scalars (.i): [0] top, [1] left, [2] wq, and optionally [3] sh, [4] sw
 * (else 1). range: N * C * sh * sw (one phase plane per item). */
int loom_conv_pad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Forward convolution as an implicit GEMM (fp32): the col panels are
 * gathered from the image per tile, never materialised. Any plan: the
 * AVX-512 variant runs for AVX-512 plans, a generic twin for the others
 * (kernels/conv_variants.h); so for the padded-row kernels below.
 * tensors: [0] out C, [1] weight A, [2] col B, [3] workspace: the GEMM
 *          operands of kernels/gemm/gemm.h (rank 4: N, G, rows, cols, or
 *          1, G, rows, N * cols with every image's positions in turn; B's
 *          data is not read, only its shape), with A already packed by
 *          loom_gemm_pack_kernel over [0, plan.pack_units_a); C fp32 with
 *          unit column stride; [4] image (rank 5: N, C, D, H, W, fp32, any
 *          strides); [5] optional bias (O, fp32).
 * scalars: [0].i isa, which may carry LOOM_GEMM_IN_COMPUTE: then the full
 * panels of an A that the plan reads in place (plan.a_in_place) are not
 * packed and are read from A itself; [1].i positions per tile
 * (loom_conv_tile_positions), [2..16] the geometry (loom/kernels/im2col.h),
 * and optionally [17].i the pieces of the last tile (loom_conv_tail_split;
 * else 1).
 * range: C's batch * G * (ceil(C's cols / positions per tile) - 1 + pieces),
 * grain any. Each output element sums its k in the GEMM's fixed order,
 * whatever the tiling. */
enum { LOOM_CONV_GEMM_POSITIONS = 128 };

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

int loom_conv_gemm_kernel(const loom_kernel_args *args, int64_t begin,
                          int64_t end);

/* The same forward for bf16 on AMX CPUs (kernels/conv_gemm_amx.c): tensors
 * and scalars as loom_conv_gemm_kernel's, with C, A, the image and the bias
 * bf16 and the isa LOOM_GEMM_AMX (A packed by that plan); C's tiles sum in
 * fp32 and are rounded once. */
int loom_conv_gemm_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* Weight gradient as an implicit GEMM (fp32, any plan):
 * dW[g] = dy[g] @ col[g]^T with k running over (image, position).
 * tensors: [0] dW C (1, G, O/G, C/G*K) fp32, unit column stride;
 *          [1] dy A (1, G, O/G, N*L), already packed by
 *          loom_gemm_pack_kernel over [0, plan.pack_units_a); [2] col^T B
 *          (1, G, N*L, C/G*K), shape only; [3] workspace; [4] image as
 *          for the forward.
 * scalars: as for loom_conv_gemm_kernel ([1] unused).
 * range: G * plan.n_panels (one column panel of dW per item). */
int loom_conv_wgrad_kernel(const loom_kernel_args *args, int64_t begin,
                           int64_t end);

/* The same weight gradient for bf16 on AMX CPUs (kernels/conv_gemm_amx.c):
 * tensors as loom_conv_wgrad_kernel's, with dW, dy and the image bf16 and
 * the isa LOOM_GEMM_AMX (dy packed by that plan, not read in place); dW's
 * sums run in fp32 and are rounded once.
 * scalars: [0].i isa, [1].i qn in [1, 4], dW panels per item, [2..16] the
 * geometry. range: G * ceil(ceil((C/G*K) / 32) / qn). */
int loom_conv_wgrad_amx_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* 2-d forward over zero-padded phase planes (loom_conv_pad_kernel, rows
 * of width wq >= wo + dw*(kw-1)/sw), fp32, any plan. The GEMM
 * runs over every image's grid q = y * wq + x, q < gpos (a multiple of 32,
 * >= ho * wq), in turn; positions with x >= wo or y >= ho are dropped.
 * halo = dh*(kh-1)/sh * wq + dw*(kw-1)/sw is how far a window reads past q.
 * tensors: [0] C (1, G, O/G, N * gpos), [1] weight A (1, G, O/G, C/G*K),
 * [2] B (1, G, C/G*K, N * gpos), shape only, [3] workspace: as for
 * loom_conv_gemm_kernel (C's data is not used); [4] the phase planes (N,
 * C * sh * sw, plane), plane >= gpos + halo; [5] out (N, O, ho, wo), any
 * strides; [6] optional bias (O).
 * scalars: [0].i isa, [1].i positions per tile (loom_conv_tile_positions),
 * [2..16] the geometry, [17].i wq, [18].i gpos.
 * range: G * ceil(N * gpos / positions per tile). */
int loom_conv_padded_gemm_kernel(const loom_kernel_args *args, int64_t begin,
                                 int64_t end);

/* 2-d weight gradient over the same phase planes: dW[g] = dyp[g] @
 * col[g]^T with k over (image, q) and each image's q padded to gpad, a
 * multiple of 32; dyp is dy on the same grid, zero in columns x >= wo and
 * past ho * wq. tensors: [0] dW C (1, G, O/G, C/G*K),
 * [1] dyp A (1, G, O/G, N * gpad), packed into [3] as for
 * loom_conv_wgrad_kernel, but for the full row panels of a plan that reads
 * them in place (isa | LOOM_GEMM_IN_COMPUTE); [2] B (1, G, N * gpad,
 * C/G*K), shape only;
 * [4] the phase planes (N, C * sh * sw, plane), plane >= gpad + halo;
 * [5] partial sums P (ceil(N * gpad / kchunk), G, O/G, C/G*K), unit last
 * stride: P[i] sums k in [i * kchunk, (i + 1) * kchunk), and dW is their
 * sum in order (the caller's; P may be dW itself when there is one).
 * scalars: as for loom_conv_padded_gemm_kernel ([1] unused), and (.i) [18] gpad,
 * [19] kchunk, a multiple of the plan's k block, [20] qn, the column
 * panels of dW per item (at most LOOM_CONV_WGRAD_MAX_PANELS).
 * range: ceil(N * gpad / kchunk) * G * ceil(plan.n_panels / qn) (qn
 * panels of one partial sum per item, which reads its k chunk of dyp once
 * for all of them). */
enum { LOOM_CONV_WGRAD_MAX_PANELS = 64 };
int loom_conv_padded_wgrad_kernel(const loom_kernel_args *args, int64_t begin,
                                  int64_t end);

/* Winograd F(2x2, 3x3) for 3x3 windows with stride and dilation 1, fp32,
 * kernels/conv_winograd_avx512.c on CPUs whose GEMM variant is AVX-512's,
 * generic twins with the same bits but for the micro-kernel's fused
 * multiply-adds elsewhere (loom_gemm_isa_selected()). About 2.25 times
 * fewer multiplications than the GEMM paths; the results differ from
 * theirs by rounding only (the transforms' adds and halvings).
 *
 * How the kernels split the work, which sizes their tensors and ranges: */
enum {
  LOOM_CONV_WINOGRAD_MR = 12,     /* output channels per panel of U */
  LOOM_CONV_WINOGRAD_TILES = 32,  /* grid tiles per block; gpos and tchunk are multiples */
  LOOM_CONV_WINOGRAD_PANELS = 8,  /* panels per forward item */
  LOOM_CONV_WINOGRAD_WG_M = 96,   /* output channels per weight-gradient item */
  LOOM_CONV_WINOGRAD_WG_K = 64,   /* input channels per weight-gradient item */
};
/*
 * The weight, transformed: U[e][p][k][i] is element e of G g G^T for output
 * channel m = MR p + i and input channel k (zero for m past the last; MR
 * is LOOM_CONV_WINOGRAD_MR).
 * tensors: [0] U (16, ceil(M / MR), K, MR) contiguous fp32, [1] w (O, C,
 * 3, 3) contiguous fp32. scalars: [0].i flipped: 0, the convolution's
 * weight is w (M = O, K = C); 1, it is w with channels swapped and taps
 * reversed (M = C, K = O), the stride-1 input gradient's.
 * range: ceil(M / MR) (one panel per item). */
int loom_conv_winograd_weight_kernel(const loom_kernel_args *args, int64_t begin,
                                     int64_t end);

/* The convolution of 2x2 output tiles over a grid of tho = ceil(ho / 2)
 * rows of wq tiles per image (tiles past ceil(wo / 2) dropped).
 * tensors: [0] out (N, M, ho, wo) fp32, any strides; [1] U as above;
 * [2] the stride-2 phase planes of the zero-padded image
 * (loom_conv_pad_kernel with sh = sw = 2, rows wq wide; N, 4 K, plane),
 * plane >= gpos + wq + 1; [3] optional bias (M).
 * scalars (.i): [0] wq >= ceil(wo / 2) + 1, [1] gpos, a multiple of TILES,
 * >= tho * wq (the grid tiles per image, rounded up).
 * range: N * gpos / TILES * ceil(ceil(M / MR) / PANELS) (TILES tiles by
 * PANELS panels of output channels per item; names LOOM_CONV_WINOGRAD_*). Each output sums its input channels in a fixed
 * order, whatever the split. */
int loom_conv_winograd_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* The weight gradient in the transformed domain: for each element e,
 * dU[e][m][k] = sum over tiles of (A dY A^T)[e] (B^T d B)[e], dY the 2x2
 * tiles of dy and d the 4x4 patches of the image; then dW = G^T dU G.
 * tensors: [0] P (chunks, 16, M, K) contiguous fp32: the sums over chunks
 *          of tchunk grid tiles (every image's gpos in turn);
 *          [1] the image's stride-2 phase planes, zero-padded, rows wq wide
 *          (loom_conv_pad_kernel; N, 4 K, plane), plane >= gpos + wq + 1;
 *          [2] dy's, not padded (N, 4 M, plane), plane >= gpos.
 * scalars (.i): [0] wq >= ceil(wo / 2) + 1, [1] gpos, a multiple of TILES,
 * >= ceil(ho / 2) wq, [2] tchunk, a multiple of TILES.
 * range: chunks * ceil(M / WG_M) * ceil(K / WG_K) (a chunk's tiles for WG_M
 * output by WG_K input channels per item; names LOOM_CONV_WINOGRAD_*). */
int loom_conv_winograd_wgrad_kernel(const loom_kernel_args *args, int64_t begin, int64_t end);

/* dW (M, K, 3, 3) contiguous fp32 = G^T (P's chunks summed in order) G;
 * K <= LOOM_CONV_WINOGRAD_MAX_K (each item holds 16 K sums).
 * tensors: [0] dW, [1] P as above. range: M (one output channel per item). */
enum { LOOM_CONV_WINOGRAD_MAX_K = 4096 };
int loom_conv_winograd_wgrad_finish_kernel(const loom_kernel_args *args, int64_t begin,
                                           int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNELS_CONV_H */
