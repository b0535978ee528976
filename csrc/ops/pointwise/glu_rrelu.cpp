// glu, prelu, rrelu and renorm on loom, composed from loom's native elementwise ops (the
// halves' sigmoid and products; rrelu's leaky slope, or in training its
// slopes drawn from loom's generator): no element loop here.
#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "register.h"

namespace torch_loom::glu_rrelu {
namespace {

using at::Tensor;

int64_t glu_dim(const Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(self.size(d) % 2 == 0, "Halving dimension must be even, but dimension ", d,
              " is size ", self.size(d));
  return d;
}

Tensor glu(const Tensor& self, int64_t dim) {
  const int64_t d = glu_dim(self, dim), h = self.size(d) / 2;
  return at::mul(self.narrow(d, 0, h), at::sigmoid(self.narrow(d, h, h)));
}

Tensor& glu_out(const Tensor& self, int64_t dim, Tensor& out) {
  const int64_t d = glu_dim(self, dim), h = self.size(d) / 2;
  return at::mul_out(out, self.narrow(d, 0, h), at::sigmoid(self.narrow(d, h, h)));
}

// d/da = sigmoid(b) * g; d/db = a * sigmoid(b) * (1 - sigmoid(b)) * g.
Tensor& glu_backward_out(const Tensor& grad, const Tensor& self, int64_t dim, Tensor& gi) {
  const int64_t d = glu_dim(self, dim), h = self.size(d) / 2;
  const Tensor a = self.narrow(d, 0, h), sb = at::sigmoid(self.narrow(d, h, h));
  at::native::resize_output(gi, self.sizes());
  gi.narrow(d, 0, h).copy_(at::mul(sb, grad));
  gi.narrow(d, h, h).copy_(at::mul(at::mul(at::mul(at::rsub(sb, 1), sb), a), grad));
  return gi;
}

Tensor glu_backward(const Tensor& grad, const Tensor& self, int64_t dim) {
  Tensor gi = at::empty_like(self, at::MemoryFormat::Contiguous);
  return glu_backward_out(grad, self, dim, gi);
}

// rrelu: eval is leaky_relu with the mean slope; training draws a slope in
// [lower, upper] for each non-positive element (noise 1 elsewhere).
Tensor& rrelu_out(const Tensor& self, Tensor& noise, const at::Scalar& lower,
                  const at::Scalar& upper, bool training, std::optional<at::Generator> gen,
                  Tensor& out) {
  TORCH_CHECK(self.sizes() == noise.sizes(), "rrelu: noise must have the input's shape");
  if (!training) {
    const double slope = (lower.toDouble() + upper.toDouble()) / 2;
    return at::leaky_relu_out(out, self, slope);
  }
  const Tensor r = at::empty_like(self).uniform_(lower.toDouble(), upper.toDouble(), gen);
  noise.copy_(at::where(at::le(self, 0), r, at::ones_like(self)));
  return at::mul_out(out, self, noise);
}

Tensor rrelu(const Tensor& self, Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
             bool training, std::optional<at::Generator> gen) {
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);  // as the CPU's
  return rrelu_out(self, noise, lower, upper, training, gen, out);
}

Tensor& rrelu_(Tensor& self, Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
               bool training, std::optional<at::Generator> gen) {
  return rrelu_out(self.clone(), noise, lower, upper, training, gen, self);
}

// prelu's kernel: x > 0 ? x : w * x (w broadcast by the composite prelu);
// its backward sums the weight's gradient back to the weight's shape, as
// the CPU's does.
Tensor prelu_kernel(const Tensor& self, const Tensor& weight) {
  return at::where(at::gt(self, 0), self, at::mul(weight, self));
}

std::tuple<Tensor, Tensor> prelu_kernel_backward(const Tensor& grad, const Tensor& self,
                                                 const Tensor& weight) {
  const Tensor pos = at::gt(self, 0);
  Tensor gs = at::where(pos, grad, at::mul(weight, grad));
  Tensor gw = at::where(pos, at::zeros({}, self.options()), at::mul(self, grad));
  return {gs, gw.sum_to_size(weight.sizes())};
}

// renorm: each slice along `dim` whose p-norm exceeds maxnorm is scaled by
// maxnorm / (norm + 1e-7), as the CPU scales it.
Tensor& renorm_out(const Tensor& self, const at::Scalar& p, int64_t dim,
                   const at::Scalar& maxnorm, Tensor& out) {
  TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
  TORCH_CHECK(p.toDouble() > 0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
  TORCH_CHECK(maxnorm.toDouble() >= 0, "renorm: expected maxnorm to be >= 0 but got ",
              maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(),
              " dimensions");
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> reduce;
  for (int64_t i = 0; i < self.dim(); ++i)
    if (i != d) reduce.push_back(i);
  const auto acc = at::toAccumulateType(self.scalar_type(), true);
  const Tensor norm = at::linalg_vector_norm(self, p, reduce, /*keepdim=*/true, acc);
  const double mx = maxnorm.toDouble();
  Tensor factor = at::where(at::gt(norm, mx), at::div(at::full({}, mx, norm.options()),
                                                      at::add(norm, 1e-7)),
                            at::ones({}, norm.options()));
  if (factor.scalar_type() != self.scalar_type()) factor = factor.to(self.scalar_type());
  return at::mul_out(out, self, factor);
}

Tensor renorm(const Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm) {
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);  // as the CPU's
  return renorm_out(self, p, dim, maxnorm, out);
}

Tensor& renorm_(Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm) {
  return renorm_out(self, p, dim, maxnorm, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "glu", glu);
  LOOM_IMPL(m, "glu.out", glu_out);
  LOOM_IMPL(m, "glu_backward", glu_backward);
  LOOM_IMPL(m, "glu_backward.grad_input", glu_backward_out);
  LOOM_IMPL(m, "renorm", renorm);
  LOOM_IMPL(m, "renorm.out", renorm_out);
  LOOM_IMPL(m, "renorm_", renorm_);
  LOOM_IMPL(m, "_prelu_kernel", prelu_kernel);
  LOOM_IMPL(m, "_prelu_kernel_backward", prelu_kernel_backward);
  LOOM_IMPL(m, "rrelu_with_noise", rrelu);
  LOOM_IMPL(m, "rrelu_with_noise.out", rrelu_out);
  LOOM_IMPL(m, "rrelu_with_noise_", rrelu_);
}

}  // namespace torch_loom::glu_rrelu
