// 2-d and 3-d pooling on loom: max_pool{2,3}d_with_indices,
// avg_pool{2,3}d, _adaptive_avg_pool{2,3}d, adaptive_max_pool{2,3}d, and
// their backward ops; and max_unpool{2,3}d. Shapes and argument checks come
// from running the same op on the meta device, so bad input raises exactly
// what the CPU raises; kernels/nn/pool.c computes.
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common.h"
#include "loom/kernels/pool.h"
#include "register.h"

namespace torch_loom {
namespace {

using at::Tensor;
using Scalars = std::array<loom_scalar, LOOM_POOL_NUM_SCALARS>;

Tensor empty_like_meta(const Tensor& meta, const Tensor& like) {
  return at::empty_strided(meta.sizes(), meta.strides(),
                           meta.options().device(like.device()));
}

// A tensor of `dims` spatial dims, batched or not, as the kernel's rank 5
// (N, C, D, H, W): a 2-d one has D = 1.
loom_tensor volumes5(const Tensor& t, int dims, const char* op) {
  const loom_tensor d = describe(t, op);
  TORCH_CHECK(d.rank == dims + 1 || d.rank == dims + 2, op, ": expected a ", dims + 1, "-D or ",
              dims + 2, "-D tensor");
  const int batch = d.rank == dims + 2 ? 1 : 0;
  loom_tensor v = d;
  v.rank = 5;
  v.sizes[0] = batch ? d.sizes[0] : 1, v.strides[0] = batch ? d.strides[0] : 0;
  v.sizes[1] = d.sizes[batch], v.strides[1] = d.strides[batch];
  v.sizes[2] = 1, v.strides[2] = 0;
  for (int j = 0; j < dims; ++j)
    v.sizes[5 - dims + j] = d.sizes[d.rank - dims + j],
    v.strides[5 - dims + j] = d.strides[d.rank - dims + j];
  return v;
}

int64_t spatial(const Tensor& t, int dims) {
  int64_t n = 1;
  for (int i = 1; i <= dims; ++i) n *= t.size(-i);
  return n;
}

int64_t volumes(const Tensor& t, int dims) {
  return t.numel() == 0 ? 0 : t.numel() / spatial(t, dims);
}

bool native_pool(const Tensor& t) { return at::isFloatingType(t.scalar_type()); }

// The kernel's scalars for a pooling of `dims` spatial dims: a 2-d one's
// depth axis is a window of one.
Scalars pool_scalars(loom_pool_mode mode, int dims, c10::IntArrayRef k, c10::IntArrayRef s,
                     c10::IntArrayRef p, c10::IntArrayRef d, bool include_pad,
                     std::optional<int64_t> divisor) {
  auto pick = [](c10::IntArrayRef v, int i, int64_t dflt) {
    return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]);
  };
  Scalars sc{};
  sc[0] = scalar_i(mode);
  for (int axis = 0; axis < 3; ++axis) {
    const int i = axis - (3 - dims);  // the argument's index, < 0: an absent axis
    const int64_t ki = i < 0 ? 1 : pick(k, i, 1);
    sc[1 + axis] = scalar_i(ki);
    sc[4 + axis] = scalar_i(i < 0 ? 1 : pick(s, i, ki));
    sc[7 + axis] = scalar_i(i < 0 ? 0 : pick(p, i, 0));
    sc[10 + axis] = scalar_i(i < 0 ? 1 : pick(d, i, 1));
  }
  sc[13] = scalar_i(include_pad ? 1 : 0);
  sc[14] = scalar_i(divisor.has_value() ? *divisor : 0);
  return sc;
}

int64_t grain_for(const Tensor& t, int dims) {
  const int64_t volume = t.dim() >= dims ? spatial(t, dims) : 1;
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, volume));
}

// Whether a batch of volumes runs channels last ("pool.forward_nhwc",
// "pool.backward_nhwc"): its channels are each position's innermost run,
// in the input and the output (a layout the CPU keeps: its channels-last
// kernels, here one row of all channels per item, no copy to NCHW).
bool channels_last(const Tensor& a, const Tensor& b, int dims) {
  return a.dim() == dims + 2 && a.size(1) > 1 && a.stride(1) == 1 && b.stride(1) == 1;
}

// Items of rows of `row_elems` elements (times the window's taps), about
// 16K element visits each.
int64_t grain_rows(int64_t row_elems, int64_t taps) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems * taps));
}

int64_t window_taps(const Scalars& sc) { return sc[1].i * sc[2].i * sc[3].i; }

void run_forward(const char* op, int dims, const Tensor& self, const Tensor& out,
                 const Tensor* indices, const Scalars& sc) {
  if (out.numel() == 0) return;
  loom_tensor ts[3] = {volumes5(self, dims, op), volumes5(out, dims, op),
                       indices ? volumes5(*indices, dims, op) : loom_tensor{}};
  const c10::ArrayRef<loom_tensor> args(ts, indices ? 3 : 2);
  if (channels_last(self, out, dims) && (!indices || indices->stride(1) == 1)) {
    // one output row of every channel per item
    const int64_t rows = out.numel() / (out.size(1) * out.size(-1));
    const bool adaptive = sc[0].i == LOOM_POOL_ADAPTIVE_AVG || sc[0].i == LOOM_POOL_ADAPTIVE_MAX;
    const int64_t taps = adaptive ? std::max<int64_t>(1, spatial(self, dims) / spatial(out, dims))
                                  : window_taps(sc);
    launch(op, LOOM_KERNEL("pool.forward_nhwc"), args, sc, rows,
           grain_rows(out.size(1) * out.size(-1), taps));
    return;
  }
  launch(op, LOOM_KERNEL("pool.forward"), args, sc, volumes(out, dims), grain_for(self, dims));
}

// `contiguous`: the gradient is contiguous whatever self's layout, as the
// CPU's avg_pool3d, adaptive_avg_pool3d and adaptive_max_pool3d backward
// make theirs.
Tensor run_backward(const char* op, int dims, const Tensor& grad_output, const Tensor& self,
                    const Tensor* indices, const Scalars& sc, bool contiguous = false) {
  TORCH_CHECK(grad_output.dim() == self.dim(), op, ": expected grad_output of rank ",
              self.dim(), ", got ", grad_output.dim());
  // Overlapping windows add several shares into one input element: for
  // float16 / bfloat16 they accumulate in float32 and round once.
  const at::ScalarType type = grad_output.scalar_type();
  const bool widen = at::isReducedFloatingType(type);
  // self's layout when dense, else a dense one: an expanded input's
  // elements alias, where each must have a gradient of its own.
  Tensor gi = at::empty_like(self, grad_output.options().dtype(widen ? at::kFloat : type),
                             contiguous ? std::optional(at::MemoryFormat::Contiguous)
                                        : std::nullopt);
  if (gi.numel() == 0) return gi.to(type);
  loom_tensor ts[3] = {volumes5(gi, dims, op), volumes5(grad_output, dims, op),
                       indices ? volumes5(*indices, dims, op) : loom_tensor{}};
  const c10::ArrayRef<loom_tensor> args(ts, indices ? 3 : 2);
  const bool is_max = sc[0].i == LOOM_POOL_MAX || sc[0].i == LOOM_POOL_ADAPTIVE_MAX;
  if (is_max && gi.dim() == dims + 2 && gi.size(0) >= 8 && gi.size(1) > 1 &&
      grad_output.stride(1) == 1 && indices->stride(1) == 1 &&
      gi.is_contiguous(dims == 2 ? at::MemoryFormat::ChannelsLast
                                 : at::MemoryFormat::ChannelsLast3d)) {
    // A batch of channels-last images: one image per item, each output's
    // gradient added where its index points, in the outputs' order (the
    // same additions in the same order as the rows below, fewer visits).
    launch(op, LOOM_KERNEL("pool.max_backward_nhwc"), args, sc, gi.size(0), 1);
  } else if (channels_last(gi, grad_output, dims) && (!indices || indices->stride(1) == 1)) {
    // one grad_input row of every channel per item, gathering its shares
    const int64_t rows = gi.numel() / (gi.size(1) * gi.size(-1));
    const bool adaptive = sc[0].i == LOOM_POOL_ADAPTIVE_AVG || sc[0].i == LOOM_POOL_ADAPTIVE_MAX;
    const int64_t covering = adaptive ? 1 : std::max<int64_t>(1, window_taps(sc) /
                                                                     (sc[4].i * sc[5].i * sc[6].i));
    launch(op, LOOM_KERNEL("pool.backward_nhwc"), args, sc, rows,
           grain_rows(gi.size(1) * gi.size(-1), covering));
  } else {
    launch(op, LOOM_KERNEL("pool.backward"), args, sc, volumes(gi, dims), grain_for(gi, dims));
  }
  return widen ? gi.to(type) : gi;
}

// The ATen ops of D-d pooling and their names, for the generic bodies
// below: Pool2d and Pool3d.
#define LOOM_POOL_OPS(D)                                                           \
  struct Pool##D##d {                                                              \
    static constexpr int dims = D;                                                 \
    static constexpr const char* max = "max_pool" #D "d_with_indices";            \
    static constexpr const char* max_bwd = "max_pool" #D "d_with_indices_backward"; \
    static constexpr const char* avg = "avg_pool" #D "d";                         \
    static constexpr const char* avg_bwd = "avg_pool" #D "d_backward";            \
    static constexpr const char* aavg = "adaptive_avg_pool" #D "d";               \
    static constexpr const char* aavg_bwd = "adaptive_avg_pool" #D "d_backward";  \
    static constexpr const char* amax = "adaptive_max_pool" #D "d";               \
    static constexpr const char* amax_bwd = "adaptive_max_pool" #D "d_backward";  \
    template <class... A> static auto max_op(A&&... a) {                           \
      return at::max_pool##D##d_with_indices(std::forward<A>(a)...);              \
    }                                                                              \
    template <class... A> static auto max_bwd_op(A&&... a) {                       \
      return at::max_pool##D##d_with_indices_backward(std::forward<A>(a)...);     \
    }                                                                              \
    template <class... A> static auto avg_op(A&&... a) {                           \
      return at::avg_pool##D##d(std::forward<A>(a)...);                           \
    }                                                                              \
    template <class... A> static auto avg_bwd_op(A&&... a) {                       \
      return at::avg_pool##D##d_backward(std::forward<A>(a)...);                  \
    }                                                                              \
    template <class... A> static auto aavg_op(A&&... a) {                          \
      return at::_adaptive_avg_pool##D##d_symint(std::forward<A>(a)...);         \
    }                                                                              \
    template <class... A> static auto aavg_bwd_op(A&&... a) {                      \
      return at::_adaptive_avg_pool##D##d_backward(std::forward<A>(a)...);        \
    }                                                                              \
    template <class... A> static auto amax_op(A&&... a) {                          \
      return at::adaptive_max_pool##D##d(std::forward<A>(a)...);                  \
    }                                                                              \
    template <class... A> static auto amax_bwd_op(A&&... a) {                      \
      return at::adaptive_max_pool##D##d_backward(std::forward<A>(a)...);         \
    }                                                                              \
  };
LOOM_POOL_OPS(2)
LOOM_POOL_OPS(3)
#undef LOOM_POOL_OPS

template <class P>
std::tuple<Tensor, Tensor> max_pool_with_indices(const Tensor& self, c10::IntArrayRef k,
                                                 c10::IntArrayRef s, c10::IntArrayRef p,
                                                 c10::IntArrayRef d, bool ceil_mode) {
  TORCH_CHECK(self.dim() == P::dims + 1 || self.dim() == P::dims + 2, "non-empty ",
              P::dims + 1, "D or ", P::dims + 2, "D (batch mode) tensor expected for input");
  auto [mo, mi] = P::max_op(meta_like(self), k, s, p, d, ceil_mode);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self)) {
    auto [o, i] = P::max_op(self.cpu(), k, s, p, d, ceil_mode);
    return {o.to(self.device()), i.to(self.device())};
  }
  Tensor out = empty_like_meta(mo, self), ind = empty_like_meta(mi, self);
  run_forward(P::max, P::dims, self, out, &ind,
              pool_scalars(LOOM_POOL_MAX, P::dims, k, s, p, d, false, std::nullopt));
  return {out, ind};
}

template <class P>
Tensor max_pool_with_indices_backward(const Tensor& grad_output, const Tensor& self,
                                      c10::IntArrayRef k, c10::IntArrayRef s,
                                      c10::IntArrayRef p, c10::IntArrayRef d, bool ceil_mode,
                                      const Tensor& indices) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return P::max_bwd_op(grad_output.cpu(), self.cpu(), k, s, p, d, ceil_mode, indices.cpu())
        .to(self.device());
  return run_backward(P::max_bwd, P::dims, grad_output, self, &indices,
                      pool_scalars(LOOM_POOL_MAX, P::dims, k, s, p, d, false, std::nullopt));
}

template <class P>
Tensor avg_pool(const Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p,
                bool ceil_mode, bool include_pad, std::optional<int64_t> divisor) {
  Tensor mo = P::avg_op(meta_like(self), k, s, p, ceil_mode, include_pad, divisor);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return P::avg_op(self.cpu(), k, s, p, ceil_mode, include_pad, divisor).to(self.device());
  Tensor out = empty_like_meta(mo, self);
  run_forward(P::avg, P::dims, self, out, nullptr,
              pool_scalars(LOOM_POOL_AVG, P::dims, k, s, p, {}, include_pad, divisor));
  return out;
}

template <class P>
Tensor& avg_pool_out(const Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s,
                     c10::IntArrayRef p, bool ceil_mode, bool include_pad,
                     std::optional<int64_t> divisor, Tensor& out) {
  return copy_to_out(out, avg_pool<P>(self, k, s, p, ceil_mode, include_pad, divisor), P::avg);
}

template <class P>
Tensor avg_pool_backward(const Tensor& grad_output, const Tensor& self, c10::IntArrayRef k,
                         c10::IntArrayRef s, c10::IntArrayRef p, bool ceil_mode,
                         bool include_pad, std::optional<int64_t> divisor) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return P::avg_bwd_op(grad_output.cpu(), self.cpu(), k, s, p, ceil_mode, include_pad,
                         divisor)
        .to(self.device());
  return run_backward(P::avg_bwd, P::dims, grad_output, self, nullptr,
                      pool_scalars(LOOM_POOL_AVG, P::dims, k, s, p, {}, include_pad, divisor),
                      P::dims == 3);
}

template <class P>
Tensor adaptive_avg_pool(const Tensor& self, c10::SymIntArrayRef output_size) {
  Tensor mo = P::aavg_op(meta_like(self), output_size);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self)) return P::aavg_op(self.cpu(), output_size).to(self.device());
  Tensor out = empty_like_meta(mo, self);
  run_forward(P::aavg, P::dims, self, out, nullptr,
              pool_scalars(LOOM_POOL_ADAPTIVE_AVG, P::dims, {}, {}, {}, {}, false, std::nullopt));
  return out;
}

template <class P>
Tensor adaptive_avg_pool_backward(const Tensor& grad_output, const Tensor& self) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return P::aavg_bwd_op(grad_output.cpu(), self.cpu()).to(self.device());
  return run_backward(
      P::aavg_bwd, P::dims, grad_output, self, nullptr,
      pool_scalars(LOOM_POOL_ADAPTIVE_AVG, P::dims, {}, {}, {}, {}, false, std::nullopt),
      P::dims == 3);
}

template <class P>
std::tuple<Tensor, Tensor> adaptive_max_pool(const Tensor& self, c10::IntArrayRef output_size) {
  auto [mo, mi] = P::amax_op(meta_like(self), output_size);
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self)) {
    auto [o, i] = P::amax_op(self.cpu(), output_size);
    return {o.to(self.device()), i.to(self.device())};
  }
  Tensor out = empty_like_meta(mo, self), ind = empty_like_meta(mi, self);
  run_forward(P::amax, P::dims, self, out, &ind,
              pool_scalars(LOOM_POOL_ADAPTIVE_MAX, P::dims, {}, {}, {}, {}, false, std::nullopt));
  return {out, ind};
}

template <class P>
Tensor adaptive_max_pool_backward(const Tensor& grad_output, const Tensor& self,
                                  const Tensor& indices) {
  c10::DeviceGuard guard(self.device());
  if (!native_pool(self))
    return P::amax_bwd_op(grad_output.cpu(), self.cpu(), indices.cpu()).to(self.device());
  return run_backward(
      P::amax_bwd, P::dims, grad_output, self, &indices,
      pool_scalars(LOOM_POOL_ADAPTIVE_MAX, P::dims, {}, {}, {}, {}, false, std::nullopt),
      P::dims == 3);
}

// max_unpool2d / max_unpool3d: each value goes to its index in a zeroed
// output plane or volume. The checks and their messages are the CPU's.
Tensor& max_unpool_out(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size,
                       int dims, Tensor& out) {
  const char* names = dims == 2 ? "two elements (height, width)"
                                : "three elements (depth, height, width)";
  const char* op = dims == 2 ? "max_unpool2d" : "max_unpool3d";
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "elements in indices should be type int64", dims == 2 ? " but got: " : "",
              dims == 2 ? c10::toString(indices.scalar_type()) : "");
  TORCH_CHECK(static_cast<int>(size.size()) == dims, "There should be exactly ", names,
              " in output_size, but got ", size.size(), " elements.");
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, "Input to max_unpooling", dims,
              "d should be a ", dims + 1, "d or ", dims + 2, "d Tensor, but got a tensor with ",
              self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of "
              "the input tensor (", self.sizes(), ") but got indices tensor with shape: ",
              indices.sizes());
  for (int64_t i = 1; i < self.dim(); ++i)
    TORCH_CHECK(self.size(i) > 0, "max_unpooling", dims, "d_forward_out_cpu(): Expected input "
                "to have non-zero size for non-batch dimensions, but got ", self.sizes(),
                " with dimension ", i, " being empty.");
  check_out_dtype(out, self, op);
  std::vector<int64_t> shape = self.sizes().vec();
  int64_t volume = 1;
  for (int i = 0; i < dims; ++i) {
    const int64_t v = size[i].expect_int();
    shape[shape.size() - dims + i] = v;
    volume *= v;
  }
  const int64_t planes = self.numel() / std::max<int64_t>(1, spatial(self, dims));
  Tensor flat = at::zeros({planes, volume}, self.options());
  if (self.numel() > 0)
    flat.scatter_(1, indices.reshape({planes, -1}), self.reshape({planes, -1}));
  // A batch of planes takes the input's memory format, as on the CPU.
  if (dims == 2 && self.dim() == 4)
    out.resize_(shape, self.suggest_memory_format());
  else
    at::native::resize_output(out, shape);
  return out.copy_(flat.view(shape));
}

Tensor& max_unpool2d_out(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size,
                         Tensor& out) {
  return max_unpool_out(self, indices, size, 2, out);
}

Tensor max_unpool2d(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size) {
  Tensor out = at::empty({0}, self.options());
  return max_unpool_out(self, indices, size, 2, out);
}

// max_unpool3d's stride and padding only shape the CPU's checks: the
// indices say where each value goes.
Tensor& max_unpool3d_out(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size,
                         c10::IntArrayRef stride, c10::IntArrayRef padding, Tensor& out) {
  TORCH_CHECK(stride.size() == 3, "There should be exactly three elements (depth, height, "
              "width) in stride, but got: ", stride.size(), " elements.");
  TORCH_CHECK(padding.size() == 3, "There should be exactly three elements (depth, height, "
              "width) in padding, but got: ", padding.size(), " elements.");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0,
              "strides should be greater than zero, but got stride: ", stride);
  return max_unpool_out(self, indices, size, 3, out);
}

Tensor max_unpool3d(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef size,
                    c10::IntArrayRef stride, c10::IntArrayRef padding) {
  Tensor out = at::empty({0}, self.options());
  return max_unpool3d_out(self, indices, size, stride, padding, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "max_pool2d_with_indices", max_pool_with_indices<Pool2d>);
  LOOM_IMPL(m, "max_pool2d_with_indices_backward", max_pool_with_indices_backward<Pool2d>);
  LOOM_IMPL(m, "avg_pool2d", avg_pool<Pool2d>);
  LOOM_IMPL(m, "avg_pool2d.out", avg_pool_out<Pool2d>);
  LOOM_IMPL(m, "avg_pool2d_backward", avg_pool_backward<Pool2d>);
  LOOM_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg_pool<Pool2d>);
  LOOM_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg_pool_backward<Pool2d>);
  LOOM_IMPL(m, "adaptive_max_pool2d", adaptive_max_pool<Pool2d>);
  LOOM_IMPL(m, "adaptive_max_pool2d_backward", adaptive_max_pool_backward<Pool2d>);
  LOOM_IMPL(m, "max_pool3d_with_indices", max_pool_with_indices<Pool3d>);
  LOOM_IMPL(m, "max_pool3d_with_indices_backward", max_pool_with_indices_backward<Pool3d>);
  LOOM_IMPL(m, "avg_pool3d", avg_pool<Pool3d>);
  LOOM_IMPL(m, "avg_pool3d.out", avg_pool_out<Pool3d>);
  LOOM_IMPL(m, "avg_pool3d_backward", avg_pool_backward<Pool3d>);
  LOOM_IMPL(m, "_adaptive_avg_pool3d", adaptive_avg_pool<Pool3d>);
  LOOM_IMPL(m, "_adaptive_avg_pool3d_backward", adaptive_avg_pool_backward<Pool3d>);
  LOOM_IMPL(m, "adaptive_max_pool3d", adaptive_max_pool<Pool3d>);
  LOOM_IMPL(m, "adaptive_max_pool3d_backward", adaptive_max_pool_backward<Pool3d>);
  LOOM_IMPL(m, "max_unpool2d", max_unpool2d);
  LOOM_IMPL(m, "max_unpool2d.out", max_unpool2d_out);
  LOOM_IMPL(m, "max_unpool3d", max_unpool3d);
  LOOM_IMPL(m, "max_unpool3d.out", max_unpool3d_out);
}

}  // namespace torch_loom
