// log_sigmoid on loom: its forward returns (output, buffer) and its
// backward takes the buffer, so it is not a row of the elementwise table;
// the element work is the pointwise kernel's LOG_SIGMOID ops. The buffer
// stays empty (the backward recomputes exp(-|x|) from the input).
#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <tuple>

#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::activation {
namespace {

using at::Tensor;

void check_float(const Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", op,
                              "\" not implemented for '", t.scalar_type(), "'");
}

std::tuple<Tensor&, Tensor&> log_sigmoid_forward_out(const Tensor& self, Tensor& output,
                                                     Tensor& buffer) {
  check_float(self, "log_sigmoid_cpu");
  at::TensorIterator iter;
  iter.build_borrowing_unary_op(output, self);
  const loom_scalar p[4] = {};
  pw::launch_iter("log_sigmoid_forward", iter, LOOM_PW_LOG_SIGMOID,
                  pw::kind_of(iter.common_dtype(), "log_sigmoid_forward"), p);
  at::native::resize_output(buffer, {0});
  return {output, buffer};
}

std::tuple<Tensor, Tensor> log_sigmoid_forward(const Tensor& self) {
  // Contiguous whatever the input's layout, as the CPU's output.
  Tensor output = at::empty_like(self, at::MemoryFormat::Contiguous);
  Tensor buffer = at::empty({0}, self.options());
  log_sigmoid_forward_out(self, output, buffer);
  return {output, buffer};
}

// grad_input may be undefined: the iterator then allocates it.
Tensor log_sigmoid_backward_into(const Tensor& grad_output, const Tensor& self,
                                 const Tensor& grad_input) {
  check_float(self, "log_sigmoid_backward_cpu");
  at::TensorIterator iter;
  iter.build_borrowing_binary_op(grad_input, grad_output, self);
  const loom_scalar p[4] = {};
  pw::launch_iter("log_sigmoid_backward", iter, LOOM_PW_LOG_SIGMOID_BACKWARD,
                  pw::kind_of(iter.common_dtype(), "log_sigmoid_backward"), p);
  return iter.output(0);
}

Tensor& log_sigmoid_backward_out(const Tensor& grad_output, const Tensor& self,
                                 const Tensor& /*buffer*/, Tensor& grad_input) {
  log_sigmoid_backward_into(grad_output, self, grad_input);
  return grad_input;
}

Tensor log_sigmoid_backward(const Tensor& grad_output, const Tensor& self,
                            const Tensor& /*buffer*/) {
  return log_sigmoid_backward_into(grad_output, self, Tensor());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "log_sigmoid_forward", log_sigmoid_forward);
  LOOM_IMPL(m, "log_sigmoid_forward.output", log_sigmoid_forward_out);
  LOOM_IMPL(m, "log_sigmoid_backward", log_sigmoid_backward);
  LOOM_IMPL(m, "log_sigmoid_backward.grad_input", log_sigmoid_backward_out);
}

}  // namespace torch_loom::activation
