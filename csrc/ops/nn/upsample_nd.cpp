// Resampling on loom beyond nearest and (bi)linear (F.interpolate's
// bicubic and trilinear modes and antialias=True): upsample_bicubic2d,
// upsample_trilinear3d, _upsample_bilinear2d_aa and _upsample_bicubic2d_aa,
// forward and backward, with out= variants. As in upsample.cpp, running
// the op on the meta device checks the arguments and gives the result's
// sizes and strides (its memory format is the CPU's); the kernels
// (kernels/nn/upsample_nd.c) compute with the CPU's arithmetic. Integer
// images are resampled on the CPU, counted as a fallback.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "common.h"
#include "loom/kernels/upsample_nd.h"
#include "ops/nn/upsample_op.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::upsample_nd {
namespace {

using at::Tensor;
using upsample_common::Scale;
using upsample_common::Sizes;
using upsample_common::accumulator_for;
using upsample_common::check_positive_sizes;
using upsample_common::empty_as;

enum class Kind { Bicubic, Trilinear, AALinear, AACubic };

struct Spec {
  Kind kind;
  bool align;
  Scale d, h, w;
};

std::array<loom_scalar, LOOM_UPSAMPLE_ND_NUM_SCALARS> scalars(const Spec& s, int axis = 0) {
  const int filter = s.kind == Kind::AACubic ? LOOM_UPSAMPLE_FILTER_CUBIC : LOOM_UPSAMPLE_FILTER_LINEAR;
  return {scalar_i(s.align), scalar_i(filter), scalar_i(axis), scalar_f(s.d.value_or(0.0)),
          scalar_f(s.h.value_or(0.0)), scalar_f(s.w.value_or(0.0))};
}

int64_t planes(const Tensor& t) { return t.size(0) * t.size(1); }

// About 16K elements per chunk of planes: a function of the shape only.
int64_t grain_of(const Tensor& t) {
  const int64_t per_plane = std::max<int64_t>(1, t.numel() / std::max<int64_t>(1, planes(t)));
  return std::max<int64_t>(1, 16384 / per_plane);
}

void run(const char* op, const loom_kernel_t* k, const Spec& s, const Tensor& a, const Tensor& b,
         int axis = 0) {
  const loom_tensor ts[2] = {describe(a, op), describe(b, op)};
  launch(op, k, ts, scalars(s, axis), planes(a), grain_of(a));
}

// out (sized and laid out as the meta result) = resample(self).
void forward_into(const char* op, const Spec& s, const Tensor& self, const Tensor& out) {
  if (out.numel() == 0) return;
  switch (s.kind) {
    case Kind::Bicubic:
      run(op, LOOM_KERNEL("upsample.bicubic2d.forward"), s, out, self);
      return;
    case Kind::Trilinear:
      run(op, LOOM_KERNEL("upsample.trilinear3d.forward"), s, out, self);
      return;
    default:
      break;
  }
  // The anti-aliased forms, as the CPU computes them: columns first, then
  // rows, through an intermediate in the input's dtype; an axis whose size
  // is unchanged is not resampled.
  const bool cols = out.size(3) != self.size(3), rows = out.size(2) != self.size(2);
  if (!cols && !rows) {
    out.copy_(self);
    return;
  }
  Tensor src = self;
  if (cols) {
    Tensor dst = rows ? at::empty({self.size(0), self.size(1), self.size(2), out.size(3)},
                                  self.options())
                      : out;
    run(op, LOOM_KERNEL("upsample.aa.pass"), s, dst, src, 3);
    src = dst;
  }
  if (rows) run(op, LOOM_KERNEL("upsample.aa.pass"), s, out, src, 2);
}

const loom_kernel_t* backward_kernel(Kind kind) {
  switch (kind) {
    case Kind::Bicubic: return LOOM_KERNEL("upsample.bicubic2d.backward");
    case Kind::Trilinear: return LOOM_KERNEL("upsample.trilinear3d.backward");
    default: return LOOM_KERNEL("upsample.aa.backward");
  }
}

// grad_in (sized as the meta result) = the adjoint, summed per plane in
// float32 (float64 for float64) in the CPU's order.
void backward_into(const char* op, const Spec& s, const Tensor& grad_out, const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor acc = accumulator_for(grad_in);
  if (grad_out.numel() == 0) {
    acc.zero_();
  } else {
    run(op, backward_kernel(s.kind), s, acc, grad_out);
  }
  if (!acc.is_same(grad_in)) grad_in.copy_(acc);
}

// Checked before the meta call, whose arithmetic would divide by the zero
// (and which takes a 4-d input to upsample_trilinear3d).
void check_sizes(const Tensor& self, Sizes size) {
  const int64_t want = static_cast<int64_t>(size.size()) + 2;
  TORCH_CHECK(self.dim() == want || (want != 4 && want != 5), "It is expected input_size equals to ",
              want, ", but got size ", self.dim());
  check_positive_sizes(self, size);
}

// Integer images: the CPU computes them, counted as a fallback.
template <typename Call>
Tensor on_cpu(const char* op, const Tensor& self, Call call) {
  note_cpu_fallback(std::string("aten::") + op);
  return call(self.cpu());
}

template <typename Call>
Tensor forward(const char* op, const Spec& s, const Tensor& self, Sizes size, Call call) {
  check_sizes(self, size);
  Tensor m = call(meta_like(self));
  if (!at::isFloatingType(self.scalar_type())) return on_cpu(op, self, call).to(self.device());
  Tensor out = empty_as(m, self);
  forward_into(op, s, self, out);
  return out;
}

template <typename Call>
Tensor& forward_out(const char* op, const Spec& s, const Tensor& self, Sizes size, Tensor& out,
                    Call call) {
  check_sizes(self, size);
  Tensor m = call(meta_like(self));
  check_out_dtype(out, self, op);
  resize_output_as(out, m);
  if (!at::isFloatingType(self.scalar_type())) return out.copy_(on_cpu(op, self, call));
  if (out.is_contiguous(m.suggest_memory_format()) || out.is_contiguous()) {
    forward_into(op, s, self, out);
  } else {
    Tensor r = empty_as(m, self);
    forward_into(op, s, self, r);
    out.copy_(r);
  }
  return out;
}

template <typename Call>
Tensor backward(const char* op, const Spec& s, const Tensor& grad_out, Call call) {
  Tensor m = call(meta_like(grad_out));
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(grad_out.scalar_type()), "\"", op,
                              "\" not implemented for '", grad_out.scalar_type(), "'");
  Tensor grad_in = empty_as(m, grad_out);
  backward_into(op, s, grad_out, grad_in);
  return grad_in;
}

template <typename Call>
Tensor& backward_out(const char* op, const Spec& s, const Tensor& grad_out, Tensor& grad_in,
                     Call call) {
  Tensor m = call(meta_like(grad_out));
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(grad_out.scalar_type()), "\"", op,
                              "\" not implemented for '", grad_out.scalar_type(), "'");
  check_out_dtype(grad_in, grad_out, op);
  resize_output_as(grad_in, m);
  backward_into(op, s, grad_out, grad_in);
  return grad_in;
}

// ---- the registered ops ----------------------------------------------------
// Each defines NAME, NAME_out, NAME_backward and NAME_backward_out from the
// spec, the parameters after the sizes, and how they pass on.

#define P2 , bool align, Scale h, Scale w
#define A2 , align, h, w
#define P3 , bool align, Scale d, Scale h, Scale w
#define A3 , align, d, h, w
LOOM_UPSAMPLE_OP(bicubic2d, upsample_bicubic2d, (Spec{Kind::Bicubic, align, std::nullopt, h, w}),
                 P2, A2)
LOOM_UPSAMPLE_OP(trilinear3d, upsample_trilinear3d, (Spec{Kind::Trilinear, align, d, h, w}), P3,
                 A3)
LOOM_UPSAMPLE_OP(bilinear2d_aa, _upsample_bilinear2d_aa,
                 (Spec{Kind::AALinear, align, std::nullopt, h, w}), P2, A2)
LOOM_UPSAMPLE_OP(bicubic2d_aa, _upsample_bicubic2d_aa,
                 (Spec{Kind::AACubic, align, std::nullopt, h, w}), P2, A2)
#undef P2
#undef A2
#undef P3
#undef A3

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_UPSAMPLE_REGISTER(m, upsample_bicubic2d, bicubic2d)
  LOOM_UPSAMPLE_REGISTER(m, upsample_trilinear3d, trilinear3d)
  LOOM_UPSAMPLE_REGISTER(m, _upsample_bilinear2d_aa, bilinear2d_aa)
  LOOM_UPSAMPLE_REGISTER(m, _upsample_bicubic2d_aa, bicubic2d_aa)
}

}  // namespace torch_loom::upsample_nd
