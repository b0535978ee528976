// polygamma on loom: its order comes before the tensor, so it is not a row
// of the elementwise table; order 0 is digamma, the others the pointwise
// kernel's POLYGAMMA op (trigamma, or the Hurwitz zeta function).
#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::special {
namespace {

using at::Tensor;

// Orders from 1; out may be undefined (the iterator then allocates it).
Tensor polygamma_into(int64_t n, const Tensor& self, const Tensor& out) {
  at::TensorIterator iter;
  iter.build_borrowing_unary_float_op(out, self);
  const loom_scalar p[4] = {scalar_i(n)};
  pw::launch_iter("polygamma", iter, LOOM_PW_POLYGAMMA,
                  pw::kind_of(iter.common_dtype(), "polygamma"), p);
  return iter.output(0);
}

void check_order(int64_t n) {
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
}

Tensor polygamma(int64_t n, const Tensor& self) {
  check_order(n);
  return n == 0 ? at::digamma(self) : polygamma_into(n, self, Tensor());
}

Tensor& polygamma_out(int64_t n, const Tensor& self, Tensor& out) {
  check_order(n);
  if (n == 0) return at::digamma_out(out, self);
  polygamma_into(n, self, out);
  return out;
}

Tensor& polygamma_(Tensor& self, int64_t n) { return polygamma_out(n, self, self); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "polygamma", polygamma);
  LOOM_IMPL(m, "polygamma.out", polygamma_out);
  LOOM_IMPL(m, "polygamma_", polygamma_);
}

}  // namespace torch_loom::special
