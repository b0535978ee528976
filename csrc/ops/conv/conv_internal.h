// csrc/ops/conv/conv_internal.h — what the convolution adapters share: the
// geometry and its kernel scalars, the planners' arguments, and the
// launches of the paths a plan names (conv_padded.cpp: padded rows and
// Winograd; conv_nhwc.cpp: channels last).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <utility>
#include <vector>

#include "common.h"
#include "loom/kernels/conv.h"
#include "loom/kernels/conv_nhwc.h"

namespace torch_loom::conv {

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
  // The geometry a plan names, in the order of the kernels' scalars.
  static Geom of(const int64_t (&v)[LOOM_CONV_NUM_SCALARS]) {
    Geom g;
    for (int i = 0; i < 3; ++i)
      g.k[i] = v[i], g.s[i] = v[3 + i], g.p[i] = v[6 + i], g.d[i] = v[9 + i],
      g.grid[i] = v[12 + i];
    return g;
  }
};

// What a convolution launch tells the profiler: the arithmetic of the
// direct form, 2 per multiply-add, whichever path computes it (Winograd
// multiplies less): each of `results` sums (the output's elements for a
// forward, dy's for a weight gradient) over `reduced` products (C/groups
// times the taps).
inline LaunchInfo conv_flops(int64_t results, int64_t reduced) {
  return LaunchInfo{2 * static_cast<uint64_t>(results) * static_cast<uint64_t>(reduced)};
}

// The geometry as the kernels' scalars (loom/kernels/im2col.h).
std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> geom_scalars(const Geom& g);

// The planners' scalars (loom/kernels/conv.h): the geometry, groups, the
// workers of `on`'s device, flags, and a phase's index when it is >= 0.
std::vector<loom_scalar> plan_scalars(const Geom& g, int64_t groups, const at::Tensor& on,
                                      int64_t flags, int64_t phase = -1);

// (N, C, spatial...) as rank 5 (N, C, D, H, W).
loom_tensor image5(const at::Tensor& t, const char* op);

// The layout the CPU gives this convolution's output and gradients (the
// memory format of the backend it would pick: channels last when the
// input or the weight is), from sizes and strides alone (conv.cpp).
at::MemoryFormat conv_memory_format(const at::Tensor& input, const at::Tensor& weight,
                                    const at::Tensor& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups);

// A rank-4 GEMM operand over `t`'s memory with explicit sizes and strides.
loom_tensor view4(const at::Tensor& t, const char* op, std::array<int64_t, 4> sizes,
                  std::array<int64_t, 4> strides);

// "conv.forward.plan" for `out` = the convolution of `input` by `weight`
// over g (flags: LOOM_CONV_FLIPPED, LOOM_CONV_PART).
loom_conv_forward_plan plan_forward(const at::Tensor& out, const at::Tensor& input,
                                    const at::Tensor& weight, const Geom& g, int64_t groups,
                                    int64_t flags, const char* op);

// The forward's plan and the weight its path reads: `weight` itself for
// Winograd (through its strides: contiguous or channels last), else
// `weight` contiguous (planned again when that is a copy).
std::pair<at::Tensor, loom_conv_forward_plan> plan_with_weight(const at::Tensor& out,
                                                               const at::Tensor& input,
                                                               const at::Tensor& weight,
                                                               const Geom& g, int64_t groups,
                                                               int64_t flags, const char* op);

// The forward into `out` by the plan's implicit, padded-row, Winograd or
// channels-last path. With `flipped`, the convolution's weight is the
// flipped form of `weight` (channels swapped, taps reversed: a stride-1
// input gradient's), which is packed from `weight` directly.
void conv_forward_planned(const at::Tensor& out, const at::Tensor& input,
                          const at::Tensor& weight, const at::Tensor& bias, const Geom& g,
                          int64_t groups, const loom_conv_forward_plan& p, const char* op,
                          bool flipped);

// Packs A (the weight, or dy) of C = A @ B into a new workspace of
// `bytes`, which it returns ("conv.pack", or "conv.pack_flipped" from a
// forward's contiguous weight `flipped_from`); the kernels gather B
// themselves.
at::Tensor pack_a(const loom_tensor& c, const loom_tensor& a, const loom_tensor& b,
                  int64_t variant, int64_t bytes, int64_t range, int64_t grain,
                  const at::TensorOptions& opts, const char* op,
                  const at::Tensor& flipped_from = {});

// (N, C * sh * sw, plane) fp32: image `x` zero-padded (top, left first)
// and split into stride phases with rows wq wide ("conv.pad").
at::Tensor pad_planes(const at::Tensor& x, int64_t top, int64_t left, int64_t wq, int64_t sh,
                      int64_t sw, int64_t plane, const char* op);

// The paths of conv_padded.cpp, as their plans give them. `planes`, when
// defined, is the input already in the plan's phase planes (pad_planes with
// the plan's top, left, wq, sh, sw; at least its plane long), which the
// pass then reads instead of padding the input again (conv_planes.cpp).
void conv_forward_padded(const at::Tensor& out, const at::Tensor& input,
                         const at::Tensor& weight, const at::Tensor& bias, const Geom& g,
                         int64_t groups, const loom_conv_forward_plan& p, const char* op,
                         bool flipped, const at::Tensor& planes = {});
at::Tensor conv_weight_grad_padded(const at::Tensor& dy, const at::Tensor& input,
                                   const std::vector<int64_t>& w_sizes, int64_t groups,
                                   const Geom& g, const loom_conv_weight_grad_plan& p,
                                   const char* op, const at::Tensor& planes = {});
// Whether Winograd's forward reads `x` in place (channels last, or NCHW by
// rows: unit column stride; the plan's padding within the kernel's) rather
// than conv.pad's planes of it.
bool winograd_reads_image(const at::Tensor& x, const loom_conv_forward_plan& p);
void conv_forward_winograd(const at::Tensor& out, const at::Tensor& input,
                           const at::Tensor& weight, const at::Tensor& bias,
                           const loom_conv_forward_plan& p, const char* op, bool flipped,
                           const at::Tensor& planes = {});
// Whether Winograd's weight gradient reads `x` and `dy` in place (both
// channels last, or both by rows; the plan's padding within the kernel's)
// where neither's planes are given.
bool winograd_wgrad_reads_images(const at::Tensor& x, const at::Tensor& dy,
                                 const loom_conv_weight_grad_plan& p);
// (Its result is laid out in `fmt`: the finish writes it through its strides.)
// `dy_planes`, when defined, is dy already in the input gradient's planes
// (pad_planes(dy, 1, 1, p.wq, 2, 2, plane) with plane >= p.positions +
// p.wq + 1), which the pass reads instead of padding dy again.
at::Tensor conv_weight_grad_winograd(const at::Tensor& dy, const at::Tensor& input,
                                     const std::vector<int64_t>& w_sizes,
                                     const loom_conv_weight_grad_plan& p, const char* op,
                                     const at::Tensor& planes = {},
                                     at::MemoryFormat fmt = at::MemoryFormat::Contiguous,
                                     const at::Tensor& dy_planes = {});

// The input gradient of a 2-d convolution where convolution_backward runs
// it as the flipped weight's Winograd forward and the weight gradient's
// plan `wg` is Winograd's: gi (laid out in fmt, as convolution_backward
// lays it out) and, where they fit, dy's planes for the weight gradient
// (conv_weight_grad_winograd's dy_planes). Two undefined tensors where the
// input gradient takes another path.
std::pair<at::Tensor, at::Tensor> input_grad_sharing_dy(
    const at::Tensor& dy, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    int64_t groups, at::MemoryFormat fmt, const loom_conv_weight_grad_plan& wg, const char* op);

// The channels-last padded copy of `input` (N, C, H, W) for the kernels
// of loom/kernels/conv_nhwc.h: `top` rows and `left` columns of zeros
// first, phase planes (sh x sw) of rows wq wide and `plane` positions,
// `channels` wide, positions `stride` apart.
at::Tensor nhwc_copy(const at::Tensor& input, int64_t top, int64_t left, int64_t wq, int64_t sh,
                     int64_t sw, int64_t plane, int64_t channels, int64_t stride,
                     const char* op);

// One convolution over a copy (nhwc_run): g's window, stride and
// dilation into `out`, every tap reading `origin` positions further on.
struct NhwcConv {
  at::Tensor out, weight;
  Geom g;
  int64_t origin = 0;
};

// Where a copy holds its image: rows [top, top + rows) and columns
// [left, left + cols) of the padded image ("conv_nhwc.forward"'s optional
// scalars).
struct NhwcImage {
  int64_t top, rows, left, cols;
};

// Convolutions over one copy of rows wq wide, in launches of up to
// LOOM_CONV_NHWC_CONVS that take the same positions of each in turn
// (flipped as for conv_forward_planned; strides and dilations the first's;
// `bias` the first's only); with `image`, the kernels leave out the
// products of the copy's padding.
void nhwc_run(const std::vector<NhwcConv>& convs, const at::Tensor& xp, const at::Tensor& bias,
              int64_t wq, bool flipped, const char* op, const NhwcImage* image = nullptr);

// The channels-last paths of conv_nhwc.cpp, as their plans give them.
void conv_forward_nhwc(const at::Tensor& out, const at::Tensor& input, const at::Tensor& weight,
                       const at::Tensor& bias, const Geom& g, const loom_conv_forward_plan& p,
                       const char* op, bool flipped);
// The weight gradient of a 2-d bf16 window over few channels (C kw <= 32,
// such as the 3-channel 7x7 stem) through the channels-last path, the
// window's columns folded into the channels (its forward that way summed
// 32 channels for 21 and ran slower than col's GEMM); undefined where the
// planner does not take it (the caller's path then).
at::Tensor conv_weight_grad_folded(const at::Tensor& dy, const at::Tensor& input,
                                   const std::vector<int64_t>& w_sizes, const Geom& g,
                                   int64_t groups, const char* op);
at::Tensor conv_weight_grad_nhwc(const at::Tensor& dy, const at::Tensor& input,
                                 const std::vector<int64_t>& w_sizes, const Geom& g,
                                 const loom_conv_weight_grad_plan& p, const char* op);

// The channels-last col path of conv_nhwc_col.cpp: fp32, no groups, an
// input laid out in `fmt` (channels last), results in `fmt`. Whether it
// takes the convolution of `input` over g (the caller leaves it the
// passes whose plan gathers or uses col anyway: Winograd and the padded
// rows read the image through its strides already).
bool nhwc_col_fits(const at::Tensor& input, const at::Tensor& weight, int64_t groups,
                   const Geom& g, at::MemoryFormat fmt);
void conv_forward_nhwc_col(const at::Tensor& out, const at::Tensor& input,
                           const at::Tensor& weight, const at::Tensor& bias, const Geom& g,
                           at::MemoryFormat fmt, const char* op);
void input_grad_nhwc_col(const at::Tensor& gi, const at::Tensor& dy, const at::Tensor& weight,
                         const Geom& g, at::MemoryFormat fmt, const char* op);
at::Tensor weight_grad_nhwc_col(const at::Tensor& dy, const at::Tensor& input,
                                const std::vector<int64_t>& w_sizes, const Geom& g,
                                at::MemoryFormat fmt, const char* op);

}  // namespace torch_loom::conv
