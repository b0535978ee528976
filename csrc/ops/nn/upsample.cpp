// Resampling on loom (F.interpolate): nearest, nearest-exact and linear in
// 1-d, nearest, nearest-exact and bilinear in 2-d, forward and backward,
// with out= variants. Shapes and argument checks come from running the op
// on the meta device, so bad input raises what the CPU raises;
// kernels/nn/upsample.c computes with the CPU's index and weight arithmetic.
// Integer images (the CPU's uint8 support) are resampled on the CPU.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>

#include "common.h"
#include "loom/kernels/upsample.h"
#include "ops/nn/upsample_op.h"
#include "register.h"

namespace torch_loom::upsample {
namespace {

using at::Tensor;
using upsample_common::Scale;
using upsample_common::Sizes;
using upsample_common::accumulator_for;
using upsample_common::check_positive_sizes;
using upsample_common::empty_as;

struct Spec {
  loom_upsample_mode mode;
  int dims;
  bool align;
  Scale h, w;
};

// (N, C, [H,] W) as (N, C, H, W).
loom_tensor image4(const Tensor& t, int dims, const char* op) {
  return describe(dims == 1 ? t.unsqueeze(2) : t, op);
}

// The CPU resamples small (H + W <= 128) or channels-last (C > 3) 2-d
// images with a kernel that keeps linear weights in float; its generic one
// stores them in the input's dtype.
bool weights_in_dtype(const Spec& s, const Tensor& in, const Tensor& out) {
  if (s.dims == 1) return true;
  const bool cl = in.is_contiguous(at::MemoryFormat::ChannelsLast) && in.size(1) > 3;
  return !(cl || out.size(-2) + out.size(-1) <= 128);
}

std::array<loom_scalar, LOOM_UPSAMPLE_NUM_SCALARS> scalars(const Spec& s, bool round_weights) {
  return {scalar_i(s.mode), scalar_i(s.dims), scalar_i(s.align),
          scalar_f(s.h.value_or(0.0)), scalar_f(s.w.value_or(0.0)), scalar_i(round_weights)};
}

// About 16K elements per chunk of planes.
int64_t grain_of(const Tensor& t) {
  const int64_t planes = std::max<int64_t>(1, t.size(0) * t.size(1));
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, t.numel() / planes));
}

// out (sized as the meta result) = resample(self).
void forward_into(const char* op, const Spec& s, const Tensor& self, const Tensor& out) {
  if (out.numel() == 0) return;
  const loom_tensor ts[2] = {image4(out, s.dims, op), image4(self, s.dims, op)};
  launch(op, LOOM_KERNEL("upsample.forward"), ts, scalars(s, weights_in_dtype(s, self, out)),
         out.size(0) * out.size(1), grain_of(out));
}

// grad_in (sized as the meta result) = the adjoint of resampling, summed in
// float32 (float64 for float64).
void backward_into(const char* op, const Spec& s, const Tensor& grad_out, const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor acc = accumulator_for(grad_in);
  const loom_tensor ts[2] = {image4(acc, s.dims, op), image4(grad_out, s.dims, op)};
  launch(op, LOOM_KERNEL("upsample.backward"), ts, scalars(s, false), acc.size(0) * acc.size(1),
         grain_of(acc));
  if (!acc.is_same(grad_in)) grad_in.copy_(acc);
}

// The functional and out= forms of one op, given the op itself: on the
// meta device it checks the arguments and sizes the result; integer images
// go through it on the CPU.
template <typename Call>
Tensor& forward_out(const char* op, const Spec& s, const Tensor& self, Sizes size, Tensor& out,
                    Call call) {
  check_positive_sizes(self, size);
  Tensor m = call(meta_like(self));
  check_out_dtype(out, self, op);
  at::native::resize_output(out, m.sizes());
  if (!at::isFloatingType(self.scalar_type())) return out.copy_(call(self.cpu()));
  forward_into(op, s, self, out);
  return out;
}

template <typename Call>
Tensor forward(const char* op, const Spec& s, const Tensor& self, Sizes size, Call call) {
  check_positive_sizes(self, size);
  Tensor m = call(meta_like(self));
  if (!at::isFloatingType(self.scalar_type())) return call(self.cpu()).to(self.device());
  Tensor out = empty_as(m, self);
  forward_into(op, s, self, out);
  return out;
}

template <typename Call>
Tensor& backward_out(const char* op, const Spec& s, const Tensor& grad_out, Tensor& grad_in,
                     Call call) {
  Tensor m = call(meta_like(grad_out));
  check_out_dtype(grad_in, grad_out, op);
  at::native::resize_output(grad_in, m.sizes());
  backward_into(op, s, grad_out, grad_in);
  return grad_in;
}

template <typename Call>
Tensor backward(const char* op, const Spec& s, const Tensor& grad_out, Call call) {
  Tensor m = call(meta_like(grad_out));
  Tensor grad_in = empty_as(m, grad_out);
  backward_into(op, s, grad_out, grad_in);
  return grad_in;
}

// ---- the registered ops ----------------------------------------------------
// Each defines NAME, NAME_out, NAME_backward and NAME_backward_out from the
// spec, the parameters after the sizes, and how they pass on.

#define P1 , Scale sc
#define A1 , sc
#define P2 , Scale h, Scale w
#define A2 , h, w
#define PL1 , bool align, Scale sc
#define AL1 , align, sc
#define PL2 , bool align, Scale h, Scale w
#define AL2 , align, h, w
LOOM_UPSAMPLE_OP(nearest1d, upsample_nearest1d,
                 (Spec{LOOM_UPSAMPLE_NEAREST, 1, false, std::nullopt, sc}), P1, A1)
LOOM_UPSAMPLE_OP(nearest_exact1d, _upsample_nearest_exact1d,
                 (Spec{LOOM_UPSAMPLE_NEAREST_EXACT, 1, false, std::nullopt, sc}), P1, A1)
LOOM_UPSAMPLE_OP(nearest2d, upsample_nearest2d, (Spec{LOOM_UPSAMPLE_NEAREST, 2, false, h, w}),
                 P2, A2)
LOOM_UPSAMPLE_OP(nearest_exact2d, _upsample_nearest_exact2d,
                 (Spec{LOOM_UPSAMPLE_NEAREST_EXACT, 2, false, h, w}), P2, A2)
LOOM_UPSAMPLE_OP(linear1d, upsample_linear1d,
                 (Spec{LOOM_UPSAMPLE_LINEAR, 1, align, std::nullopt, sc}), PL1, AL1)
LOOM_UPSAMPLE_OP(bilinear2d, upsample_bilinear2d, (Spec{LOOM_UPSAMPLE_LINEAR, 2, align, h, w}),
                 PL2, AL2)
#undef P1
#undef A1
#undef P2
#undef A2
#undef PL1
#undef AL1
#undef PL2
#undef AL2

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_UPSAMPLE_REGISTER(m, upsample_nearest1d, nearest1d)
  LOOM_UPSAMPLE_REGISTER(m, _upsample_nearest_exact1d, nearest_exact1d)
  LOOM_UPSAMPLE_REGISTER(m, upsample_nearest2d, nearest2d)
  LOOM_UPSAMPLE_REGISTER(m, _upsample_nearest_exact2d, nearest_exact2d)
  LOOM_UPSAMPLE_REGISTER(m, upsample_linear1d, linear1d)
  LOOM_UPSAMPLE_REGISTER(m, upsample_bilinear2d, bilinear2d)
}

}  // namespace torch_loom::upsample
