// frexp on loom: a TensorIterator with frexp's two outputs (the mantissa in
// the input's dtype, the exponent int32) and one launch of
// "pointwise.frexp" (loom/kernels/frexp.h) through the elementwise launch
// builder.
#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "loom/kernels/frexp.h"
#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::frexp_op {
namespace {

std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa,
                                               at::Tensor& exponent) {
  // the CPU's checks and messages
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ",
              self.dtype(), " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt,
              "torch.frexp() expects exponent to have int dtype but got ", exponent.dtype());
  auto iter = at::TensorIteratorConfig()
                  .add_output(mantissa)
                  .add_output(exponent)
                  .add_const_input(self)
                  .check_all_same_dtype(false)
                  .set_check_mem_overlap(true)
                  .build();
  const loom_scalar none[4] = {};
  pw::launch_iter_kernel("frexp", LOOM_KERNEL("pointwise.frexp"), iter, 0,
                         self.scalar_type() == at::kDouble ? LOOM_PW_F64 : LOOM_PW_F32, none);
  return std::forward_as_tuple(mantissa, exponent);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "frexp.Tensor_out", frexp_out);
}

}  // namespace torch_loom::frexp_op
