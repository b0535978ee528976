// What the resampling adapters (upsample.cpp, upsample_nd.cpp) share: the
// result allocated as the meta result, the size checks, the backward's
// accumulator, and the macros that define and register each op's four
// forms (functional, out=, backward, backward out=).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>

namespace torch_loom::upsample_common {

using Scale = std::optional<double>;
using Sizes = c10::SymIntArrayRef;

// A tensor on `like`'s device, sized and laid out as the meta result.
inline at::Tensor empty_as(const at::Tensor& meta, const at::Tensor& like) {
  return at::empty_strided(meta.sizes(), meta.strides(), like.options());
}

// Every output size and the input's resampled sizes positive, checked
// before the meta call, whose arithmetic would divide by a zero.
inline void check_positive_sizes(const at::Tensor& self, Sizes size) {
  const int64_t first = self.dim() - static_cast<int64_t>(size.size());
  if (first < 2) return;  // the meta call reports the rank
  for (size_t i = 0; i < size.size(); ++i)
    TORCH_CHECK(size[i] > 0 && self.size(first + i) > 0,
                "Input and output sizes should be greater than 0, but got input ",
                self.sizes(), " and output ", size);
}

// Where a backward sums: grad_in itself if it is float32 or float64, else
// a float32 tensor of its sizes, copied into grad_in afterwards.
inline at::Tensor accumulator_for(const at::Tensor& grad_in) {
  const at::ScalarType acc_type =
      grad_in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return grad_in.scalar_type() == acc_type
             ? grad_in
             : at::empty(grad_in.sizes(), grad_in.options().dtype(acc_type));
}

}  // namespace torch_loom::upsample_common

// Defines NAME, NAME_out, NAME_backward and NAME_backward_out of the aten
// op `aten` from a Spec expression, the parameters after the sizes (PARAMS,
// each with a leading comma) and how they pass on (ARGS). The including
// file provides Spec and forward, forward_out, backward and backward_out,
// each given the op's name, the spec, the tensors and the op itself (run
// on the meta device for the result's sizes and layout).
#define LOOM_UPSAMPLE_OP(name, aten, SPEC, PARAMS, ARGS)                                       \
  Tensor name(const Tensor& self, Sizes size PARAMS) {                                         \
    const Spec s = SPEC;                                                                       \
    return forward(#aten, s, self, size,                                                       \
                   [&](const Tensor& x) { return at::aten##_symint(x, size ARGS); });          \
  }                                                                                            \
  Tensor& name##_out(const Tensor& self, Sizes size PARAMS, Tensor& out) {                     \
    const Spec s = SPEC;                                                                       \
    return forward_out(#aten, s, self, size, out,                                              \
                       [&](const Tensor& x) { return at::aten##_symint(x, size ARGS); });      \
  }                                                                                            \
  Tensor name##_backward(const Tensor& g, Sizes size, Sizes in PARAMS) {                       \
    const Spec s = SPEC;                                                                       \
    return backward(#aten "_backward", s, g, [&](const Tensor& x) {                            \
      return at::aten##_backward_symint(x, size, in ARGS);                                     \
    });                                                                                        \
  }                                                                                            \
  Tensor& name##_backward_out(const Tensor& g, Sizes size, Sizes in PARAMS, Tensor& out) {     \
    const Spec s = SPEC;                                                                       \
    return backward_out(#aten "_backward", s, g, out, [&](const Tensor& x) {                   \
      return at::aten##_backward_symint(x, size, in ARGS);                                     \
    });                                                                                        \
  }

// Registers the four forms LOOM_UPSAMPLE_OP defined as `fn` for aten's `op`.
#define LOOM_UPSAMPLE_REGISTER(m, op, fn)                      \
  LOOM_IMPL(m, #op, fn);                                       \
  LOOM_IMPL(m, #op ".out", fn##_out);                          \
  LOOM_IMPL(m, #op "_backward", fn##_backward);                \
  LOOM_IMPL(m, #op "_backward.grad_input", fn##_backward_out);
