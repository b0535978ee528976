// Complex matrix products from real ones: the parts of complex64 /
// complex128 operands (strided views, no copies) multiplied by loom's real
// products and combined as (ar br - ai bi) + i (ar bi + ai br), the four
// products a complex GEMM computes, rather than the three of Gauss's trick,
// whose cancellation costs accuracy.
#pragma once

#include <ATen/ATen.h>

#include <functional>

namespace torch_loom {

// Whether products of this dtype run here (complex64, complex128).
bool complex_gemm_dtype(const at::Tensor& t);

// f(a, b) for complex a, b, where f is a real product (mm, bmm, mv, dot,
// outer), linear in each operand; conjugate and negative views resolved.
at::Tensor complex_product(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
                           const at::Tensor& a, const at::Tensor& b);

// beta * self + alpha * p, as the CPU combines them: self (broadcast to p's
// shape) is ignored when it is undefined or beta is 0, alpha 1 multiplies
// nothing.
at::Tensor complex_combine(const at::Tensor& p, const at::Tensor& self, const c10::Scalar& beta,
                           const c10::Scalar& alpha);

}  // namespace torch_loom
