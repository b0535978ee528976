// softmax / log_softmax and their gradients on loom.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include "loom/kernels/softmax.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

int64_t rows_of(const at::Tensor& t, int64_t dim) {
  if (t.dim() == 0) return 1;
  const int64_t n = t.size(dim);
  return n == 0 ? 0 : t.numel() / n;
}

int64_t row_length(const at::Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 1 : t.size(dim);
}

at::ScalarType softmax_out_type(const at::Tensor& self, bool half_to_float,
                                const char* op) {
  check_float(self, op);
  if (!half_to_float) return self.scalar_type();
  TORCH_CHECK(self.scalar_type() == at::kHalf, op,
              ": conversion is supported for Half type only");
  return at::kFloat;
}

void softmax_launch(const at::Tensor& self, int64_t dim, bool take_log,
                    const at::Tensor& out, const char* op) {
  if (out.numel() == 0) return;
  const loom_tensor t[2] = {describe(self, op), describe(out, op)};
  const loom_scalar s[2] = {scalar_i(dim), scalar_i(take_log)};
  launch(op, LOOM_KERNEL("softmax.forward"), t, s, rows_of(self, dim),
         grain_for(row_length(self, dim)), self.device().index());
}

at::Tensor& softmax_out_common(const at::Tensor& self, int64_t dim,
                               bool half_to_float, bool take_log,
                               at::Tensor& out, const char* op) {
  const auto type = softmax_out_type(self, half_to_float, op);
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(out.scalar_type() == type, op, ": expected out dtype ", type,
              " but got ", out.scalar_type());
  check_loom(out, self, op, "out");
  at::native::resize_output(out, self.sizes());
  softmax_launch(self, dim, take_log, out, op);
  return out;
}

at::Tensor softmax_common(const at::Tensor& self, int64_t dim,
                          bool half_to_float, bool take_log, const char* op) {
  const auto type = softmax_out_type(self, half_to_float, op);
  dim = c10::maybe_wrap_dim(dim, self.dim());
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(type));
  softmax_launch(self, dim, take_log, out, op);
  return out;
}

at::Tensor& softmax_backward_out_common(const at::Tensor& grad,
                                        const at::Tensor& output, int64_t dim,
                                        at::ScalarType input_dtype,
                                        bool take_log, at::Tensor& grad_input,
                                        const char* op) {
  check_float(output, op);
  dim = c10::maybe_wrap_dim(dim, output.dim());
  TORCH_CHECK(grad.sizes() == output.sizes(), op,
              ": grad_output of size ", grad.sizes(),
              " does not match output of size ", output.sizes());
  check_loom(grad, output, op, "grad_output");
  at::native::resize_output(grad_input, output.sizes());
  if (grad_input.numel() == 0) return grad_input;
  const loom_tensor t[3] = {describe(grad, op), describe(output, op),
                            describe(grad_input, op)};
  const loom_scalar s[2] = {scalar_i(dim), scalar_i(take_log)};
  launch(op, LOOM_KERNEL("softmax.backward"), t, s, rows_of(output, dim),
         grain_for(row_length(output, dim)), output.device().index());
  return grad_input;
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_common(self, dim, half_to_float, false, "_softmax");
}
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmax_common(self, dim, half_to_float, true, "_log_softmax");
}
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                        at::Tensor& out) {
  return softmax_out_common(self, dim, half_to_float, false, out, "_softmax.out");
}
at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim,
                            bool half_to_float, at::Tensor& out) {
  return softmax_out_common(self, dim, half_to_float, true, out, "_log_softmax.out");
}

at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output,
                            int64_t dim, at::ScalarType input_dtype) {
  at::Tensor gi = at::empty(output.sizes(), output.options().dtype(input_dtype));
  return softmax_backward_out_common(grad, output, dim, input_dtype, false, gi,
                                     "_softmax_backward_data");
}
at::Tensor log_softmax_backward(const at::Tensor& grad, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype) {
  at::Tensor gi = at::empty(output.sizes(), output.options().dtype(input_dtype));
  return softmax_backward_out_common(grad, output, dim, input_dtype, true, gi,
                                     "_log_softmax_backward_data");
}
at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output,
                                 int64_t dim, at::ScalarType input_dtype,
                                 at::Tensor& grad_input) {
  return softmax_backward_out_common(grad, output, dim, input_dtype, false,
                                     grad_input, "_softmax_backward_data.out");
}
at::Tensor& log_softmax_backward_out(const at::Tensor& grad,
                                     const at::Tensor& output, int64_t dim,
                                     at::ScalarType input_dtype,
                                     at::Tensor& out) {
  return softmax_backward_out_common(grad, output, dim, input_dtype, true, out,
                                     "_log_softmax_backward_data.out");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_softmax", softmax);
  LOOM_IMPL(m, "_softmax.out", softmax_out);
  LOOM_IMPL(m, "_log_softmax", log_softmax);
  LOOM_IMPL(m, "_log_softmax.out", log_softmax_out);
  LOOM_IMPL(m, "_softmax_backward_data", softmax_backward);
  LOOM_IMPL(m, "_softmax_backward_data.out", softmax_backward_out);
  LOOM_IMPL(m, "_log_softmax_backward_data", log_softmax_backward);
  LOOM_IMPL(m, "_log_softmax_backward_data.out", log_softmax_backward_out);
}

}  // namespace torch_loom::nn
