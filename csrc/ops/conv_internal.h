// csrc/ops/conv_internal.h — what the convolution adapters share: the
// geometry, its kernel scalars and descriptors, and the padded-row paths
// (conv_padded.cpp).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <vector>

#include "common.h"
#include "kernels/conv.h"
#include "kernels/gemm/gemm.h"

namespace torch_loom::conv {

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Convolution geometry padded to 3 spatial dims; `grid` is the set of
// window positions (the col columns per image).
struct Geom {
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0},
          d[3] = {1, 1, 1}, grid[3] = {1, 1, 1};
  int64_t taps() const { return k[0] * k[1] * k[2]; }
  int64_t positions() const { return grid[0] * grid[1] * grid[2]; }
  bool pointwise() const {
    for (int i = 0; i < 3; ++i)
      if (k[i] != 1 || s[i] != 1 || p[i] != 0) return false;
    return true;
  }
};

// The geometry as the kernels' scalars (kernels/conv.h).
std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> geom_scalars(const Geom& g);

// Positions per tile of the forward kernels for `batches` x `cols`
// positions on `t`'s device (loom_conv_tile_positions for its workers).
int64_t tile_positions(const at::Tensor& t, int64_t batches, int64_t cols);

// (N, C, spatial...) as rank 5 (N, C, D, H, W).
loom_tensor image5(const at::Tensor& t, const char* op);

// A rank-4 GEMM operand over `t`'s memory with explicit sizes and strides.
loom_tensor view4(const at::Tensor& t, const char* op, std::array<int64_t, 4> sizes,
                  std::array<int64_t, 4> strides);

// Plans C = A @ B for an implicit GEMM and packs A (the weight, or dy) into
// a new workspace, which it returns; the kernels gather B themselves. With
// `flipped_from` (a forward's contiguous weight), A is that weight with its
// channels swapped and taps reversed, packed without being written out;
// `a` then gives the shape only.
at::Tensor pack_a(const loom_tensor& c, const loom_tensor& a, const loom_tensor& b,
                  loom_gemm_isa isa, const at::TensorOptions& opts, const char* op,
                  loom_gemm_plan* plan, const at::Tensor& flipped_from = {});

// 2-d geometry over zero-padded rows split into stride phases
// (kernels/conv_padded_avx512.c): the GEMMs run over ho rows of wq phase
// columns per image, rounded up to whole 32-position panels, so they apply
// where the thrown-away columns and the rounding waste little.
struct Padded {
  int64_t hp, wp, ho, wo, sh, sw;
  int64_t wq() const { return (wp + sw - 1) / sw; }
  int64_t positions() const { return (ho * wq() + 31) / 32 * 32; }
  int64_t halo(const Geom& g) const {
    return g.d[1] * (g.k[1] - 1) / sh * wq() + g.d[2] * (g.k[2] - 1) / sw;
  }
  // A phase plane with room for `needed` elements and every padded row.
  int64_t plane(int64_t needed) const {
    return std::max(needed, (hp + sh - 1) / sh * wq());
  }
};

// (N, C * phases, plane) fp32: image `x` zero-padded by g and split into
// pd's stride phases, rows pd.wq() wide, `needed` elements per plane or more.
at::Tensor pad_planes(const at::Tensor& x, const Geom& g, const Padded& pd, int64_t needed,
                      const char* op);

// Whether the Winograd kernels apply to `g` over `input` (2-d 3x3 windows
// of stride and dilation 1, no groups, 16 or more channels in and out and
// at most 128K channel pairs, tiles at least half output); fills *pd with
// the tile grid: ho, wo in tiles, stride-2 phases. LOOM_CONV_WINOGRAD=0
// turns them off.
bool winograd_fits(const Geom& g, const at::Tensor& input, int64_t out_channels, int64_t groups,
                   Padded* pd);

// The forward by Winograd's F(2x2, 3x3) into `out` (flipped as for
// conv_forward_padded).
void conv_forward_winograd(const at::Tensor& out, const at::Tensor& input,
                           const at::Tensor& weight, const at::Tensor& bias, const Geom& g,
                           const Padded& pd, const char* op, bool flipped);

// The weight gradient (w_sizes) by F(2x2, 3x3), where winograd_fits gave pd.
at::Tensor conv_weight_grad_winograd(const at::Tensor& dy, const at::Tensor& input,
                                     const std::vector<int64_t>& w_sizes, const Geom& g,
                                     const Padded& pd, const char* op);

// Whether the padded kernels apply to `g` over `input`; fills *pd.
bool padded_fits(const Geom& g, const at::Tensor& input, Padded* pd);

// The forward over a padded copy of the image, into `out`; with `flipped`,
// the convolution's weight is the flipped form of `weight` (see pack_a).
void conv_forward_padded(const at::Tensor& out, const at::Tensor& input,
                         const at::Tensor& weight, const at::Tensor& bias, const Geom& g,
                         const Padded& pd, int64_t groups, loom_gemm_isa isa, const char* op,
                         bool flipped = false);

// The weight gradient over padded copies of the image and of dy.
at::Tensor conv_weight_grad_padded(const at::Tensor& dy, const at::Tensor& input,
                                   std::vector<int64_t> w_sizes, int64_t groups,
                                   const Geom& g, const Padded& pd, loom_gemm_isa isa,
                                   const char* op);

// Whether the channels-last AMX kernels (kernels/conv_nhwc.h) take
// `input`'s channels: bf16 on AMX, 2-d, no groups, 32 or more channels in
// and out of which at most a quarter is padding to blocks of 32.
bool nhwc_channels_fit(const at::Tensor& input, int64_t in_channels, int64_t out_channels,
                       int64_t groups);

// Whether they pay on a grid of n images of ho x wo outputs in rows wq wide.
bool nhwc_grid_fits(int64_t n, int64_t ho, int64_t wo, int64_t wq);

// Whether the channels-last AMX kernels (kernels/conv_nhwc.h) apply: bf16
// on AMX, 2-d, no groups, 32 or more channels in and out of which at most a
// quarter is padding to blocks of 32, and at least 80% of the padded grid
// output; fills *pd with the padded extent the grid reads.
bool nhwc_fits(const Geom& g, const at::Tensor& input, int64_t in_channels,
               int64_t out_channels, int64_t groups, Padded* pd);

// The forward over a channels-last padded copy of `input` into `out`
// (flipped as for conv_forward_padded).
void conv_forward_nhwc(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       const at::Tensor& bias, const Geom& g, const Padded& pd, const char* op,
                       bool flipped);

// The channels-last padded copy of `input` (N, C, H, W) for the kernels
// of kernels/conv_nhwc.h: `top` rows and `left` columns of zeros first,
// phase planes (sh x sw) of rows wq wide and `plane` positions.
at::Tensor nhwc_copy(const at::Tensor& input, int64_t top, int64_t left, int64_t wq, int64_t sh,
                     int64_t sw, int64_t plane, const char* op);

// One convolution over a copy (nhwc_run): g's window, stride and
// dilation into `out`, every tap reading `origin` positions further on.
struct NhwcConv {
  at::Tensor out, weight;
  Geom g;
  int64_t origin = 0;
};

// Convolutions over one copy of rows wq wide, in launches of up to
// LOOM_CONV_NHWC_CONVS that take the same positions of each in turn
// (flipped as for conv_forward_padded; strides and dilations the first's;
// `bias` the first's only).
void nhwc_run(const std::vector<NhwcConv>& convs, const at::Tensor& xp, const at::Tensor& bias,
              int64_t wq, bool flipped, const char* op);

// Whether the channels-last weight gradient applies: as nhwc_fits, with
// 64 or more channels in and out.
bool nhwc_wgrad_fits(const Geom& g, const at::Tensor& input, int64_t out_channels,
                     int64_t groups, Padded* pd);

// The weight gradient (w_sizes) over a channels-last copy of `input` in
// pairs of positions, where nhwc_wgrad_fits gave pd.
at::Tensor conv_weight_grad_nhwc(const at::Tensor& dy, const at::Tensor& input,
                                 const std::vector<int64_t>& w_sizes, const Geom& g,
                                 const Padded& pd, const char* op);

}  // namespace torch_loom::conv
