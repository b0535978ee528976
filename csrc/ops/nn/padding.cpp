// Reflection and replication padding on loom (F.pad's "reflect" and
// "replicate" modes) in 1, 2 and 3 dims, forward, backward and out=. Shapes
// and argument checks come from running the op on the meta device, so bad
// input raises what the CPU raises; "padding.forward" and "padding.backward"
// move the elements.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "common.h"
#include "loom/kernels/padding.h"
#include "register.h"

namespace torch_loom::padding {
namespace {

using at::Tensor;
using Pads = c10::SymIntArrayRef;

// ([N,] C, [[D,] H,] W) as (N, C, D, H, W).
loom_tensor as5(const Tensor& t, int dims, const char* op) {
  Tensor v = t.dim() == dims + 1 ? t.unsqueeze(0) : t;
  for (int i = dims; i < 3; ++i) v = v.unsqueeze(2);
  return describe(v, op);
}

void run(const char* op, const loom_kernel_t* kernel, loom_padding_mode mode, int dims, Pads pads,
         const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  // F.pad order: (W before, W after, H before, H after, D before, D after)
  std::array<loom_scalar, 4> sc{scalar_i(mode), scalar_i(0), scalar_i(0), scalar_i(0)};
  for (int i = 0; i < dims; ++i) sc[3 - i] = scalar_i(pads[2 * i].expect_int());
  const loom_tensor ts[2] = {as5(dst, dims, op), as5(src, dims, op)};
  const int64_t planes = ts[0].sizes[0] * ts[0].sizes[1];
  const int64_t per_plane = std::max<int64_t>(1, dst.numel() / std::max<int64_t>(1, planes));
  launch(op, kernel, ts, sc, planes, std::max<int64_t>(1, 16384 / per_plane));
}

// `out` resized to the meta result's shape and then laid out in the
// input's memory format (a channels-last input gives a channels-last
// result), as the CPU's paddings and their gradients are.
void resize_in_format(const Tensor& out, const Tensor& meta, const Tensor& input) {
  const auto format = input.suggest_memory_format();
  if (at::native::resize_output(out, meta.sizes()) && out.dim() == input.dim() &&
      format != at::MemoryFormat::Contiguous)
    out.unsafeGetTensorImpl()->empty_tensor_restride(format);
}

template <typename Call>
Tensor& forward_out(const char* op, loom_padding_mode mode, int dims, const Tensor& self,
                    Pads pads, Tensor& out, Call call) {
  // Before the meta call, which raises another exception type for this.
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, "Expected ", dims + 1, "D or ",
              dims + 2, "D (batch mode) tensor with possibly 0 batch size and other non-zero "
              "dimensions for input, but got: ", self.sizes());
  Tensor m = call(meta_like(self));
  check_out_dtype(out, self, op);
  resize_in_format(out, m, self);
  run(op, LOOM_KERNEL("padding.forward"), mode, dims, pads, out, self);
  return out;
}

template <typename Call>
Tensor& backward_out(const char* op, loom_padding_mode mode, int dims, const Tensor& grad_out,
                     const Tensor& self, Pads pads, Tensor& grad_in, Call call) {
  Tensor m = call(meta_like(grad_out), meta_like(self));
  check_out_dtype(grad_in, grad_out, op);
  resize_in_format(grad_in, m, self);
  if (!at::isFloatingType(grad_out.scalar_type()))
    return grad_in.copy_(call(grad_out.cpu(), self.cpu()));
  run(op, LOOM_KERNEL("padding.backward"), mode, dims, pads, grad_in, grad_out);
  return grad_in;
}

#define PADDING_OP(aten, MODE, DIMS)                                                        \
  Tensor& aten##_out(const Tensor& self, Pads pads, Tensor& out) {                          \
    return forward_out(#aten, MODE, DIMS, self, pads, out,                                  \
                       [&](const Tensor& x) { return at::aten##_symint(x, pads); });        \
  }                                                                                         \
  Tensor aten(const Tensor& self, Pads pads) {                                              \
    Tensor out = at::empty({0}, self.options());                                            \
    return aten##_out(self, pads, out);                                                     \
  }                                                                                         \
  Tensor& aten##_backward_out(const Tensor& g, const Tensor& self, Pads pads, Tensor& out) { \
    return backward_out(#aten "_backward", MODE, DIMS, g, self, pads, out,                  \
                        [&](const Tensor& x, const Tensor& s) {                             \
                          return at::aten##_backward_symint(x, s, pads);                    \
                        });                                                                 \
  }                                                                                         \
  Tensor aten##_backward(const Tensor& g, const Tensor& self, Pads pads) {                   \
    Tensor out = at::empty({0}, g.options());                                               \
    return aten##_backward_out(g, self, pads, out);                                         \
  }

PADDING_OP(reflection_pad1d, LOOM_PAD_REFLECT, 1)
PADDING_OP(reflection_pad2d, LOOM_PAD_REFLECT, 2)
PADDING_OP(reflection_pad3d, LOOM_PAD_REFLECT, 3)
PADDING_OP(replication_pad1d, LOOM_PAD_REPLICATE, 1)
PADDING_OP(replication_pad2d, LOOM_PAD_REPLICATE, 2)
PADDING_OP(replication_pad3d, LOOM_PAD_REPLICATE, 3)
#undef PADDING_OP

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define REGISTER(op)                                   \
  LOOM_IMPL(m, #op, op);                               \
  LOOM_IMPL(m, #op ".out", op##_out);                  \
  LOOM_IMPL(m, #op "_backward", op##_backward);        \
  LOOM_IMPL(m, #op "_backward.grad_input", op##_backward_out);
  REGISTER(reflection_pad1d)
  REGISTER(reflection_pad2d)
  REGISTER(reflection_pad3d)
  REGISTER(replication_pad1d)
  REGISTER(replication_pad2d)
  REGISTER(replication_pad3d)
#undef REGISTER
}

}  // namespace torch_loom::padding
