// Fractional max pooling on loom (F.fractional_max_pool2d/3d with the
// random samples PyTorch draws, aten::fractional_max_pool{2,3}d and their
// backward, out= variants). Running the op on the meta device checks the
// arguments and sizes the results as the CPU does (contiguous); the
// forward kernel places each plane's windows from its samples with the
// CPU's arithmetic, and the backward is the pooling family's scatter by
// index (pool.backward in an adaptive max mode: each plane's gradients
// added in output order).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "loom/kernels/pool.h"
#include "loom/kernels/pool_fractional.h"
#include "register.h"

namespace torch_loom::pool_fractional {
namespace {

using at::Tensor;

// (N, C, T, H, W) view of a batched or unbatched 2-d / 3-d tensor.
Tensor volumes5(const Tensor& t, int dims) {
  Tensor v = t.dim() == dims + 1 ? t.unsqueeze(0) : t;
  return dims == 2 ? v.unsqueeze(2) : v;
}

int64_t grain(const Tensor& out5) {
  const int64_t planes = std::max<int64_t>(1, out5.size(0) * out5.size(1));
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out5.numel() / planes));
}

const char* name(int dims, bool backward) {
  if (dims == 2) return backward ? "fractional_max_pool2d_backward" : "fractional_max_pool2d";
  return backward ? "fractional_max_pool3d_backward" : "fractional_max_pool3d";
}

void check_float(const Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", op,
                              "\" not implemented for '", t.scalar_type(), "'");
}

Tensor meta_forward(int dims, const Tensor& self, c10::IntArrayRef k, c10::IntArrayRef size,
                    const Tensor& samples) {
  auto r = dims == 2 ? at::fractional_max_pool2d(meta_like(self), k, size, meta_like(samples))
                     : at::fractional_max_pool3d(meta_like(self), k, size, meta_like(samples));
  return std::get<0>(r);
}

// out and indices (sized as the meta result) = the pooling of self.
void forward_into(int dims, const Tensor& self, c10::IntArrayRef k, const Tensor& samples,
                  const Tensor& out, const Tensor& indices) {
  const char* op = name(dims, false);
  check_float(self, op);
  if (out.numel() == 0) return;
  const Tensor o5 = volumes5(out, dims), i5 = volumes5(indices, dims), x5 = volumes5(self, dims);
  TORCH_CHECK(samples.dim() == 3 && samples.size(0) >= x5.size(0) &&
                  samples.size(1) >= x5.size(1) && samples.size(2) == dims,
              op, "(): expected random_samples of shape (", x5.size(0), ", ", x5.size(1), ", ",
              dims, "), got ", samples.sizes());
  TORCH_CHECK(samples.scalar_type() == self.scalar_type(), op,
              "(): expected random_samples of dtype ", self.scalar_type(), ", got ",
              samples.scalar_type());
  const loom_tensor ts[4] = {describe(o5, op), describe(i5, op), describe(x5, op),
                             describe(samples, op)};
  const std::array<loom_scalar, LOOM_POOL_FRACTIONAL_NUM_SCALARS> sc = {
      scalar_i(dims), scalar_i(dims == 3 ? k[0] : 1), scalar_i(k[dims - 2]),
      scalar_i(k[dims - 1])};
  launch(op, LOOM_KERNEL("pool.fractional_max.forward"), ts, sc, o5.size(0) * o5.size(1),
         grain(o5));
}

std::tuple<Tensor, Tensor> forward(int dims, const Tensor& self, c10::IntArrayRef k,
                                   c10::IntArrayRef size, const Tensor& samples) {
  Tensor m = meta_forward(dims, self, k, size, samples);
  Tensor out = at::empty_strided(m.sizes(), m.strides(), self.options());
  Tensor ind = at::empty_strided(m.sizes(), m.strides(), self.options().dtype(at::kLong));
  forward_into(dims, self, k, samples, out, ind);
  return {out, ind};
}

std::tuple<Tensor&, Tensor&> forward_out(int dims, const Tensor& self, c10::IntArrayRef k,
                                         c10::IntArrayRef size, const Tensor& samples,
                                         Tensor& out, Tensor& indices) {
  Tensor m = meta_forward(dims, self, k, size, samples);
  check_out_dtype(out, self, name(dims, false));
  TORCH_CHECK(indices.scalar_type() == at::kLong, name(dims, false),
              "(): expected indices of dtype Long, got ", indices.scalar_type());
  at::native::resize_output(out, m.sizes());
  at::native::resize_output(indices, m.sizes());
  Tensor o = out.is_contiguous() ? out : at::empty(m.sizes(), self.options());
  Tensor i = indices.is_contiguous() ? indices : at::empty(m.sizes(), indices.options());
  forward_into(dims, self, k, samples, o, i);
  if (!o.is_same(out)) out.copy_(o);
  if (!i.is_same(indices)) indices.copy_(i);
  return {out, indices};
}

void backward_into(int dims, const Tensor& grad_output, const Tensor& self,
                   const Tensor& indices, const Tensor& grad_input) {
  const char* op = name(dims, true);
  check_float(grad_output, op);
  TORCH_CHECK(grad_output.sizes() == indices.sizes() && grad_output.dim() == self.dim() &&
                  indices.scalar_type() == at::kLong,
              op, "(): expected grad_output ", grad_output.sizes(),
              " and int64 indices of the same shape, of the rank of self ", self.sizes());
  if (grad_input.numel() == 0) return;
  // Several windows may share an element: float16 / bfloat16 shares add in
  // float32 and round once.
  const bool widen = at::isReducedFloatingType(grad_input.scalar_type());
  Tensor acc = widen ? at::empty(grad_input.sizes(), grad_input.options().dtype(at::kFloat))
                     : grad_input;
  if (grad_output.numel() == 0) {
    acc.zero_();
  } else {
    const Tensor g5 = volumes5(acc, dims);
    const loom_tensor ts[3] = {describe(g5, op), describe(volumes5(grad_output, dims), op),
                               describe(volumes5(indices, dims), op)};
    std::array<loom_scalar, LOOM_POOL_NUM_SCALARS> sc{};
    for (auto& s : sc) s = scalar_i(0);
    sc[0] = scalar_i(LOOM_POOL_ADAPTIVE_MAX);
    launch(op, LOOM_KERNEL("pool.backward"), ts, sc, g5.size(0) * g5.size(1), grain(g5));
  }
  if (!acc.is_same(grad_input)) grad_input.copy_(acc);
}

Tensor backward(int dims, const Tensor& grad_output, const Tensor& self, const Tensor& indices) {
  Tensor gi = at::empty(self.sizes(), grad_output.options());
  backward_into(dims, grad_output, self, indices, gi);
  return gi;
}

Tensor& backward_out(int dims, const Tensor& grad_output, const Tensor& self,
                     const Tensor& indices, Tensor& grad_input) {
  check_out_dtype(grad_input, grad_output, name(dims, true));
  at::native::resize_output(grad_input, self.sizes());
  Tensor gi = grad_input.is_contiguous() ? grad_input : at::empty(self.sizes(), grad_output.options());
  backward_into(dims, grad_output, self, indices, gi);
  if (!gi.is_same(grad_input)) grad_input.copy_(gi);
  return grad_input;
}

#define FRACTIONAL_OPS(D)                                                                      \
  std::tuple<Tensor, Tensor> fmp##D(const Tensor& self, c10::IntArrayRef k,                    \
                                    c10::IntArrayRef size, const Tensor& samples) {            \
    return forward(D, self, k, size, samples);                                                 \
  }                                                                                            \
  std::tuple<Tensor&, Tensor&> fmp##D##_out(const Tensor& self, c10::IntArrayRef k,            \
                                            c10::IntArrayRef size, const Tensor& samples,      \
                                            Tensor& out, Tensor& indices) {                    \
    return forward_out(D, self, k, size, samples, out, indices);                               \
  }                                                                                            \
  Tensor fmp##D##_backward(const Tensor& g, const Tensor& self, c10::IntArrayRef,              \
                           c10::IntArrayRef, const Tensor& indices) {                          \
    return backward(D, g, self, indices);                                                      \
  }                                                                                            \
  Tensor& fmp##D##_backward_out(const Tensor& g, const Tensor& self, c10::IntArrayRef,         \
                                c10::IntArrayRef, const Tensor& indices, Tensor& gi) {         \
    return backward_out(D, g, self, indices, gi);                                              \
  }
FRACTIONAL_OPS(2)
FRACTIONAL_OPS(3)
#undef FRACTIONAL_OPS

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "fractional_max_pool2d", fmp2);
  LOOM_IMPL(m, "fractional_max_pool2d.output", fmp2_out);
  LOOM_IMPL(m, "fractional_max_pool2d_backward", fmp2_backward);
  LOOM_IMPL(m, "fractional_max_pool2d_backward.grad_input", fmp2_backward_out);
  LOOM_IMPL(m, "fractional_max_pool3d", fmp3);
  LOOM_IMPL(m, "fractional_max_pool3d.output", fmp3_out);
  LOOM_IMPL(m, "fractional_max_pool3d_backward", fmp3_backward);
  LOOM_IMPL(m, "fractional_max_pool3d_backward.grad_input", fmp3_backward_out);
}

}  // namespace torch_loom::pool_fractional
