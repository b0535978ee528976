// 2-d pooling on loom: max_pool2d_with_indices, avg_pool2d,
// _adaptive_avg_pool2d, adaptive_max_pool2d, and their backward ops; and
// max_unpool2d. Shapes and argument checks come from running the same op on
// the meta device, so bad input raises exactly what the CPU raises;
// kernels/pool.c computes.
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "kernels/pool.h"
#include "register.h"

namespace torch_loom {
namespace {

using at::Tensor;
using Scalars = std::array<loom_scalar, LOOM_POOL_NUM_SCALARS>;

Tensor empty_like_meta(const Tensor& meta, const Tensor& like) {
  return at::empty_strided(meta.sizes(), meta.strides(),
                           meta.options().device(like.device()));
}

// (C, H, W) or (N, C, H, W) as rank 4.
loom_tensor planes4(const Tensor& t, const char* op) {
  loom_tensor d = describe(t, op);
  if (d.rank == 3) {
    for (int i = 3; i > 0; --i) d.sizes[i] = d.sizes[i - 1], d.strides[i] = d.strides[i - 1];
    d.sizes[0] = 1, d.strides[0] = 0, d.rank = 4;
  }
  TORCH_CHECK(d.rank == 4, op, ": expected a 3-D or 4-D tensor");
  return d;
}

int64_t planes(const Tensor& t) { return t.numel() == 0 ? 0 : t.numel() / (t.size(-1) * t.size(-2)); }

bool native_pool(const Tensor& t) { return at::isFloatingType(t.scalar_type()); }

Scalars pool_scalars(loom_pool_mode mode, c10::IntArrayRef k, c10::IntArrayRef s,
                     c10::IntArrayRef p, c10::IntArrayRef d, bool include_pad,
                     std::optional<int64_t> divisor) {
  auto pick = [](c10::IntArrayRef v, int i, int64_t dflt) {
    return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]);
  };
  Scalars sc{};
  sc[0] = scalar_i(mode);
  for (int i = 0; i < 2; ++i) {
    int64_t ki = pick(k, i, 1);
    sc[1 + i] = scalar_i(ki);
    sc[3 + i] = scalar_i(pick(s, i, ki));
    sc[5 + i] = scalar_i(pick(p, i, 0));
    sc[7 + i] = scalar_i(pick(d, i, 1));
  }
  sc[9] = scalar_i(include_pad ? 1 : 0);
  sc[10] = scalar_i(divisor.has_value() ? *divisor : 0);
  return sc;
}

int64_t grain_for(const Tensor& t) {
  int64_t plane = t.dim() >= 2 ? t.size(-1) * t.size(-2) : 1;
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane));
}

void run_forward(const char* op, const Tensor& self, const Tensor& out,
                 const Tensor* indices, const Scalars& sc) {
  if (out.numel() == 0) return;
  loom_tensor ts[3] = {planes4(self, op), planes4(out, op),
                       indices ? planes4(*indices, op) : loom_tensor{}};
  launch(op, loom_pool2d_kernel, c10::ArrayRef<loom_tensor>(ts, indices ? 3 : 2), sc,
         planes(out), grain_for(self));
}

Tensor run_backward(const char* op, const Tensor& grad_output, const Tensor& self,
                    const Tensor* indices, const Scalars& sc) {
  TORCH_CHECK(grad_output.dim() == self.dim(), op, ": expected grad_output of rank ",
              self.dim(), ", got ", grad_output.dim());
  // Overlapping windows add several shares into one input element: for
  // float16 / bfloat16 they accumulate in float32 and round once.
  const at::ScalarType type = grad_output.scalar_type();
  const bool widen = at::isReducedFloatingType(type);
  Tensor gi = at::empty_strided(self.sizes(), self.strides(),
                                grad_output.options().dtype(widen ? at::kFloat : type));
  if (gi.numel() == 0) return gi.to(type);
  loom_tensor ts[3] = {planes4(gi, op), planes4(grad_output, op),
                       indices ? planes4(*indices, op) : loom_tensor{}};
  launch(op, loom_pool2d_backward_kernel, c10::ArrayRef<loom_tensor>(ts, indices ? 3 : 2),
         sc, planes(gi), grain_for(gi));
  return widen ? gi.to(type) : gi;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, c10::IntArrayRef k,
                                                   c10::IntArrayRef s, c10::IntArrayRef p,
                                                   c10::IntArrayRef d, bool ceil_mode) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4,
              "non-empty 3D or 4D (batch mode) tensor expected for input");
  auto [mo, mi] = at::max_pool2d_with_indices(meta_like(self), k, s, p, d, ceil_mode);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self)) {
    auto [o, i] = at::max_pool2d_with_indices(self.cpu(), k, s, p, d, ceil_mode);
    return {o.to(self.device()), i.to(self.device())};
  }
  Tensor out = empty_like_meta(mo, self), ind = empty_like_meta(mi, self);
  run_forward("max_pool2d_with_indices", self, out, &ind,
              pool_scalars(LOOM_POOL_MAX, k, s, p, d, false, std::nullopt));
  return {out, ind};
}

Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Tensor& self,
                                        c10::IntArrayRef k, c10::IntArrayRef s,
                                        c10::IntArrayRef p, c10::IntArrayRef d,
                                        bool ceil_mode, const Tensor& indices) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::max_pool2d_with_indices_backward(grad_output.cpu(), self.cpu(), k, s, p, d,
                                                ceil_mode, indices.cpu())
        .to(self.device());
  return run_backward("max_pool2d_with_indices_backward", grad_output, self, &indices,
                      pool_scalars(LOOM_POOL_MAX, k, s, p, d, false, std::nullopt));
}

Tensor avg_pool2d(const Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s,
                  c10::IntArrayRef p, bool ceil_mode, bool include_pad,
                  std::optional<int64_t> divisor) {
  Tensor mo = at::avg_pool2d(meta_like(self), k, s, p, ceil_mode, include_pad, divisor);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::avg_pool2d(self.cpu(), k, s, p, ceil_mode, include_pad, divisor)
        .to(self.device());
  Tensor out = empty_like_meta(mo, self);
  run_forward("avg_pool2d", self, out, nullptr,
              pool_scalars(LOOM_POOL_AVG, k, s, p, {}, include_pad, divisor));
  return out;
}

Tensor& avg_pool2d_out(const Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s,
                       c10::IntArrayRef p, bool ceil_mode, bool include_pad,
                       std::optional<int64_t> divisor, Tensor& out) {
  return copy_to_out(out, torch_loom::avg_pool2d(self, k, s, p, ceil_mode, include_pad, divisor),
                     "avg_pool2d");
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Tensor& self,
                           c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p,
                           bool ceil_mode, bool include_pad,
                           std::optional<int64_t> divisor) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::avg_pool2d_backward(grad_output.cpu(), self.cpu(), k, s, p, ceil_mode,
                                   include_pad, divisor)
        .to(self.device());
  return run_backward("avg_pool2d_backward", grad_output, self, nullptr,
                      pool_scalars(LOOM_POOL_AVG, k, s, p, {}, include_pad, divisor));
}

Tensor adaptive_avg_pool2d(const Tensor& self, c10::SymIntArrayRef output_size) {
  Tensor mo = at::_adaptive_avg_pool2d_symint(meta_like(self), output_size);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::_adaptive_avg_pool2d_symint(self.cpu(), output_size).to(self.device());
  Tensor out = empty_like_meta(mo, self);
  run_forward("adaptive_avg_pool2d", self, out, nullptr,
              pool_scalars(LOOM_POOL_ADAPTIVE_AVG, {}, {}, {}, {}, false, std::nullopt));
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& self) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::_adaptive_avg_pool2d_backward(grad_output.cpu(), self.cpu()).to(self.device());
  return run_backward("adaptive_avg_pool2d_backward", grad_output, self, nullptr,
                      pool_scalars(LOOM_POOL_ADAPTIVE_AVG, {}, {}, {}, {}, false, std::nullopt));
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& self, c10::IntArrayRef output_size) {
  auto [mo, mi] = at::adaptive_max_pool2d(meta_like(self), output_size);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self)) {
    auto [o, i] = at::adaptive_max_pool2d(self.cpu(), output_size);
    return {o.to(self.device()), i.to(self.device())};
  }
  Tensor out = empty_like_meta(mo, self), ind = empty_like_meta(mi, self);
  run_forward("adaptive_max_pool2d", self, out, &ind,
              pool_scalars(LOOM_POOL_ADAPTIVE_MAX, {}, {}, {}, {}, false, std::nullopt));
  return {out, ind};
}

Tensor adaptive_max_pool2d_backward(const Tensor& grad_output, const Tensor& self,
                                    const Tensor& indices) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return at::adaptive_max_pool2d_backward(grad_output.cpu(), self.cpu(), indices.cpu())
        .to(self.device());
  return run_backward("adaptive_max_pool2d_backward", grad_output, self, &indices,
                      pool_scalars(LOOM_POOL_ADAPTIVE_MAX, {}, {}, {}, {}, false, std::nullopt));
}

// max_unpool2d: each value goes to its index in a zeroed output plane.
Tensor& max_unpool2d_out(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size,
                         Tensor& out) {
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "elements in indices should be type int64 but got: ", indices.scalar_type());
  TORCH_CHECK(size.size() == 2, "There should be exactly two elements (height, width) in "
              "output_size, but got ", size.size(), " elements.");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "Input to max_unpooling2d should be a 3d or "
              "4d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of "
              "the input tensor (", self.sizes(), ") but got indices tensor with shape: ",
              indices.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0, "max_unpooling2d_forward_out_cpu(): Expected input to have "
                "non-zero size for non-batch dimensions, but got ", self.sizes(),
                " with dimension ", i, " being empty.");
  check_out_dtype(out, self, "max_unpool2d");
  const int64_t oh = size[0].expect_int(), ow = size[1].expect_int();
  std::vector<int64_t> shape = self.sizes().vec();
  shape[shape.size() - 2] = oh;
  shape[shape.size() - 1] = ow;
  const int64_t planes = self.numel() / std::max<int64_t>(1, self.size(-1) * self.size(-2));
  Tensor flat = at::zeros({planes, oh * ow}, self.options());
  if (self.numel() > 0)
    flat.scatter_(1, indices.reshape({planes, -1}), self.reshape({planes, -1}));
  at::native::resize_output(out, shape);
  return out.copy_(flat.view(shape));
}

Tensor max_unpool2d(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size) {
  Tensor out = at::empty({0}, self.options());
  return max_unpool2d_out(self, indices, size, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "max_pool2d_with_indices", max_pool2d_with_indices);
  LOOM_IMPL(m, "max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  LOOM_IMPL(m, "avg_pool2d", avg_pool2d);
  LOOM_IMPL(m, "avg_pool2d.out", avg_pool2d_out);
  LOOM_IMPL(m, "avg_pool2d_backward", avg_pool2d_backward);
  LOOM_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg_pool2d);
  LOOM_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
  LOOM_IMPL(m, "max_unpool2d", max_unpool2d);
  LOOM_IMPL(m, "max_unpool2d.out", max_unpool2d_out);
  LOOM_IMPL(m, "adaptive_max_pool2d", adaptive_max_pool2d);
  LOOM_IMPL(m, "adaptive_max_pool2d_backward", adaptive_max_pool2d_backward);
}

}  // namespace torch_loom
