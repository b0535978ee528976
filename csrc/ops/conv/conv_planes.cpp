// loom::conv2d_planes and loom::conv2d_planes_backward: a 2-d convolution
// whose forward and weight gradient both read the input through the same
// zero-padded phase planes ("conv.pad", loom/kernels/conv.h: the padded-row
// and Winograd paths), padded once. The forward returns the planes beside
// its output; the backward takes them and runs the weight gradient over
// them instead of padding the input a second time. Compiled training steps
// use the pair (python/torch_loom/compiler/planes.py): autograd's eager
// convolution keeps only the input between the passes.
//
// The input and the weight may each be contiguous or channels last; the
// output and the gradients are laid out as the regular convolution lays
// them out (conv_memory_format), with the same plans, so the same bits.
// Where the two passes would not share planes (other paths, other dtypes
// or layouts, or Winograd's, which both passes read in place, NCHW or
// channels last), the forward returns an empty (0) tensor in their place and
// both ops are the regular convolution's. The planes' shape is a function
// of the shapes alone (the path, the padding, the row width wq and the
// plane's length never depend on the thread count), so the shape function
// (Meta) gives it without data.
#include <ATen/native/ConvUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "common.h"
#include "loom/kernels/conv.h"
#include "ops/conv/conv_internal.h"
#include "register.h"

namespace torch_loom::conv {
namespace {

using at::Tensor;

constexpr const char* kFwd = "loom::conv2d_planes";
constexpr const char* kBwd = "loom::conv2d_planes_backward";

// A tensor's shape, dtype and strides for a planner (data is never read).
loom_tensor shape_of(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType type,
                     const char* op) {
  loom_tensor d{};
  d.dtype = to_loom_dtype(type, op);
  d.rank = static_cast<int32_t>(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) d.sizes[i] = sizes[i], d.strides[i] = strides[i];
  return d;
}

Geom geom2d(const Tensor& weight, c10::IntArrayRef stride, c10::IntArrayRef padding,
            c10::IntArrayRef dilation, c10::IntArrayRef out_sizes) {
  auto at_ = [](c10::IntArrayRef v, int64_t i, int64_t dflt) {
    return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]);
  };
  Geom g;
  for (int64_t i = 0; i < 2; ++i) {
    g.k[1 + i] = weight.size(2 + i);
    g.s[1 + i] = at_(stride, i, 1);
    g.p[1 + i] = at_(padding, i, 0);
    g.d[1 + i] = at_(dilation, i, 1);
    g.grid[1 + i] = out_sizes[2 + i];
  }
  return g;
}

// The plans of a forward and a weight gradient that read the same planes.
struct Shared {
  loom_conv_forward_plan fwd;
  loom_conv_weight_grad_plan wgrad;
  int64_t plane;
};

bool dense(const Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// The shared planes of the convolution of `input` by `weight` into an
// output of `out_sizes` laid out in `fmt` (shapes only; fp32 4-d tensors,
// each contiguous or channels last; out's shape is dy's), if the forward
// and the weight gradient both take the padded-row or the Winograd path
// over the same phase planes. The forward is planned as the regular one
// plans it (plan_with_weight: the padded rows with the weight contiguous).
std::optional<Shared> shared_planes(const Tensor& input, const Tensor& weight,
                                    c10::IntArrayRef out_sizes, at::MemoryFormat fmt,
                                    const Geom& g, int64_t groups, int64_t workers,
                                    const char* op) {
  if (input.dim() != 4 || weight.dim() != 4 || input.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kFloat || !dense(input) || !dense(weight))
    return std::nullopt;
  for (int64_t s : out_sizes)
    if (s <= 0) return std::nullopt;
  if (input.numel() == 0) return std::nullopt;
  std::vector<int64_t> out_strides = c10::get_channels_last_strides_2d(out_sizes);
  if (fmt != at::MemoryFormat::ChannelsLast) {
    const auto cs = c10::contiguous_strides(out_sizes);
    out_strides.assign(cs.begin(), cs.end());
  }
  const loom_tensor x = shape_of(input.sizes(), input.strides(), at::kFloat, op);
  const loom_tensor y = shape_of(out_sizes, out_strides, at::kFloat, op);
  auto sc = plan_scalars(g, groups, input, 0);
  sc[LOOM_CONV_NUM_SCALARS + 1] = scalar_i(workers);
  auto plan_fwd = [&](c10::IntArrayRef w_strides) {
    loom_tensor fts[3] = {x, y, shape_of(weight.sizes(), w_strides, at::kFloat, op)};
    return plan<loom_conv_forward_plan>(op, LOOM_KERNEL("conv.forward.plan"), fts, sc);
  };
  auto f = plan_fwd(weight.strides());
  if (f.path != LOOM_CONV_PATH_WINOGRAD && !weight.is_contiguous())
    f = plan_fwd(c10::contiguous_strides(weight.sizes()));
  if (f.path != LOOM_CONV_PATH_WINOGRAD && f.path != LOOM_CONV_PATH_PADDED) return std::nullopt;
  // Winograd reads a channels-last input (and dy) in place: nothing to pad
  if (f.path == LOOM_CONV_PATH_WINOGRAD && winograd_reads_image(input, f)) return std::nullopt;
  loom_tensor wts[2] = {x, y};
  const auto wg = plan<loom_conv_weight_grad_plan>(op, LOOM_KERNEL("conv.weight_grad.plan"),
                                                   wts, sc);
  if (wg.path != f.path || wg.top != f.top || wg.left != f.left || wg.wq != f.wq ||
      wg.sh != f.sh || wg.sw != f.sw)
    return std::nullopt;
  return Shared{f, wg, std::max(f.plane, wg.plane)};
}

std::vector<int64_t> out_sizes_of(const Tensor& input, const Tensor& weight,
                                  c10::IntArrayRef stride, c10::IntArrayRef padding,
                                  c10::IntArrayRef dilation) {
  return at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
}

void check_args(const Tensor& input, const Tensor& weight, const char* op) {
  TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, op,
              ": expected a 4-d input and weight (a 2-d convolution), got ", input.dim(),
              "-d and ", weight.dim(), "-d");
}

// What the forward and its shape function both decide: the output's sizes,
// its geometry, and whether the forward and the weight gradient would share
// padded planes (checked arguments first).
struct ForwardShape {
  std::vector<int64_t> out_sizes;
  Geom g;
  at::MemoryFormat fmt;
  std::optional<Shared> sh;
};

ForwardShape forward_shape(const Tensor& input, const Tensor& weight, const Tensor& bias,
                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                           c10::IntArrayRef dilation, int64_t groups) {
  check_args(input, weight, kFwd);
  auto out_sizes = out_sizes_of(input, weight, stride, padding, dilation);
  const Geom g = geom2d(weight, stride, padding, dilation, out_sizes);
  const bool bias_ok = !bias.defined() || bias.scalar_type() == input.scalar_type();
  const at::MemoryFormat fmt = conv_memory_format(input, weight, bias, stride, padding, dilation,
                                                  false, {0, 0}, groups);
  auto sh = bias_ok ? shared_planes(input, weight, out_sizes, fmt, g, groups, 1, kFwd)
                    : std::nullopt;
  return {std::move(out_sizes), g, fmt, std::move(sh)};
}

// The regular convolution, and no planes, where they would not be shared.
std::tuple<Tensor, Tensor> regular_forward(const Tensor& input, const Tensor& weight,
                                           const Tensor& bias, c10::IntArrayRef stride,
                                           c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                           int64_t groups) {
  Tensor out = at::convolution(input, weight, bias, stride, padding, dilation, false, {0, 0},
                               groups);
  return {out, at::empty({0}, input.options())};
}

std::tuple<Tensor, Tensor> conv2d_planes(const Tensor& input, const Tensor& weight,
                                         const std::optional<Tensor>& bias_opt,
                                         c10::IntArrayRef stride, c10::IntArrayRef padding,
                                         c10::IntArrayRef dilation, int64_t groups) {
  c10::DeviceGuard guard(input.device());
  const Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
  const ForwardShape f0 = forward_shape(input, weight, bias, stride, padding, dilation, groups);
  const auto& out_sizes = f0.out_sizes;
  const Geom& g = f0.g;
  const auto& sh = f0.sh;
  if (!sh) return regular_forward(input, weight, bias, stride, padding, dilation, groups);
  Tensor out = at::empty(out_sizes, input.options().memory_format(f0.fmt));
  const auto [w, p] = plan_with_weight(out, input, weight, g, groups, 0, kFwd);
  TORCH_CHECK(p.path == sh->fwd.path && p.wq == sh->fwd.wq && p.plane <= sh->plane, kFwd,
              ": the forward's plan changed between its shape and its launch");
  const auto& f = sh->fwd;
  Tensor planes = pad_planes(input, f.top, f.left, f.wq, f.sh, f.sw, sh->plane, kFwd);
  if (p.path == LOOM_CONV_PATH_WINOGRAD)
    conv_forward_winograd(out, input, w, bias, p, kFwd, false, planes);
  else
    conv_forward_padded(out, input, w, bias, g, groups, p, kFwd, false, planes);
  return {out, planes};
}

std::tuple<Tensor, Tensor> conv2d_planes_meta(const Tensor& input, const Tensor& weight,
                                              const std::optional<Tensor>& bias_opt,
                                              c10::IntArrayRef stride, c10::IntArrayRef padding,
                                              c10::IntArrayRef dilation, int64_t groups) {
  const Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
  const ForwardShape f0 = forward_shape(input, weight, bias, stride, padding, dilation, groups);
  const auto& out_sizes = f0.out_sizes;
  const auto& sh = f0.sh;
  if (!sh) return regular_forward(input, weight, bias, stride, padding, dilation, groups);
  const int64_t phases = int64_t{sh->fwd.sh} * sh->fwd.sw;
  return {at::empty(out_sizes, input.options().memory_format(f0.fmt)),
          at::empty({input.size(0), input.size(1) * phases, sh->plane}, input.options())};
}

std::tuple<Tensor, Tensor, Tensor> conv2d_planes_backward(
    const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Tensor& planes,
    at::OptionalIntArrayRef bias_sizes, c10::IntArrayRef stride, c10::IntArrayRef padding,
    c10::IntArrayRef dilation, int64_t groups, std::array<bool, 3> mask) {
  check_args(input, weight, kBwd);
  c10::DeviceGuard guard(input.device());
  auto regular = [&](std::array<bool, 3> m) {
    return at::convolution_backward(grad_out, input, weight, bias_sizes, stride, padding,
                                    dilation, false, {0, 0}, groups, m);
  };
  // dy as the regular backward takes it (through its strides: channels
  // last from a channels-last model), gradients in its layout
  const Tensor& dy = grad_out;
  const at::MemoryFormat fmt = conv_memory_format(input, weight, Tensor(), stride, padding,
                                                  dilation, false, {0, 0}, groups);
  std::optional<Shared> sh;
  if (mask[1] && planes.numel() > 0 && grad_out.scalar_type() == input.scalar_type()) {
    const Geom g = geom2d(weight, stride, padding, dilation, dy.sizes());
    sh = shared_planes(input, weight, dy.sizes(), fmt, g, groups, 1, kBwd);
  }
  const int64_t phases = sh ? int64_t{sh->wgrad.sh} * sh->wgrad.sw : 0;
  if (!sh || planes.dim() != 3 || planes.size(0) != input.size(0) ||
      planes.size(1) != input.size(1) * phases || planes.size(2) != sh->plane ||
      !planes.is_contiguous() || planes.scalar_type() != at::kFloat)
    return regular(mask);
  Tensor gi, gw, gb, dy_planes;
  const Geom g = geom2d(weight, stride, padding, dilation, dy.sizes());
  loom_tensor ts[2] = {describe(input, kBwd), describe(dy, kBwd)};
  const auto p = plan<loom_conv_weight_grad_plan>(kBwd, LOOM_KERNEL("conv.weight_grad.plan"), ts,
                                                  plan_scalars(g, groups, input, 0));
  const bool planned = p.path == sh->wgrad.path && p.wq == sh->wgrad.wq && p.plane <= sh->plane;
  // the input gradient's Winograd pass pads dy for the weight gradient too
  if (mask[0] && planned)
    std::tie(gi, dy_planes) = input_grad_sharing_dy(dy, input, weight, stride, padding, dilation,
                                                    groups, fmt, p, kBwd);
  if ((mask[0] && !gi.defined()) || mask[2]) {
    Tensor g0;
    std::tie(g0, std::ignore, gb) = regular({mask[0] && !gi.defined(), false, mask[2]});
    if (!gi.defined()) gi = g0;
  }
  const std::vector<int64_t> w_sizes(weight.sizes().begin(), weight.sizes().end());
  if (!planned) {
    std::tie(std::ignore, gw, std::ignore) = regular({false, true, false});
  } else if (p.path == LOOM_CONV_PATH_WINOGRAD) {
    gw = conv_weight_grad_winograd(dy, input, w_sizes, p, kBwd, planes, fmt, dy_planes);
  } else {
    gw = conv_weight_grad_padded(dy, input, w_sizes, groups, g, p, kBwd, planes);
    if (fmt != at::MemoryFormat::Contiguous) gw = gw.contiguous(fmt);
  }
  return {gi, gw, gb};
}

std::tuple<Tensor, Tensor, Tensor> conv2d_planes_backward_meta(
    const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Tensor& planes,
    at::OptionalIntArrayRef bias_sizes, c10::IntArrayRef stride, c10::IntArrayRef padding,
    c10::IntArrayRef dilation, int64_t groups, std::array<bool, 3> mask) {
  (void)planes;
  check_args(input, weight, kBwd);
  return at::convolution_backward(grad_out, input, weight, bias_sizes, stride, padding,
                                  dilation, false, {0, 0}, groups, mask);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("conv2d_planes(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
        "int[] dilation, int groups) -> (Tensor, Tensor)");
  m.def("conv2d_planes_backward(Tensor grad_out, Tensor input, Tensor weight, Tensor planes, "
        "int[]? bias_sizes, int[] stride, int[] padding, int[] dilation, int groups, "
        "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(loom, PrivateUse1, m) {
  LOOM_IMPL(m, "conv2d_planes", conv2d_planes);
  LOOM_IMPL(m, "conv2d_planes_backward", conv2d_planes_backward);
}

TORCH_LIBRARY_IMPL(loom, Meta, m) {
  m.impl("conv2d_planes", &conv2d_planes_meta);
  m.impl("conv2d_planes_backward", &conv2d_planes_backward_meta);
}

}  // namespace torch_loom::conv
