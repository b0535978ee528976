// segment_reduce and its backward on loom: the CPU's argument checks, the
// segments as int64 offsets per outer row (lengths through a cumulative sum
// on loom), then one launch item per outer row and block of inner positions
// (loom/kernels/segment_reduce.h), each walking its segments in order, so
// results never depend on the thread count. float32 and float64 run here;
// float16 and bfloat16 run on the CPU, counted.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/WrapDimUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <string_view>

#include "common.h"
#include "loom/kernels/segment_reduce.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom {
namespace {

using at::Tensor;

constexpr const char* kOp = "segment_reduce";

int64_t reduction_of(std::string_view reduce) {
  if (reduce == "sum") return LOOM_SEGMENT_SUM;
  if (reduce == "mean") return LOOM_SEGMENT_MEAN;
  if (reduce == "max") return LOOM_SEGMENT_MAX;
  if (reduce == "min") return LOOM_SEGMENT_MIN;
  if (reduce == "prod") return LOOM_SEGMENT_PROD;
  TORCH_CHECK(false, "segment_reduce(): unsupported reduction given! ", reduce);
}

bool defined(const std::optional<Tensor>& t) { return t.has_value() && t->defined(); }

// The segments of `data` along `axis` as contiguous int64 offsets of shape
// (outer, segments + 1), from exactly one of lengths and offsets, checked as
// the CPU checks them (and, since the kernel reads through them, offsets too).
Tensor offsets_of(const Tensor& data, const std::optional<Tensor>& lengths,
                  const std::optional<Tensor>& offsets, int64_t axis, bool unsafe) {
  const bool has_l = defined(lengths), has_o = defined(offsets);
  TORCH_CHECK(has_l || has_o, "segment_reduce(): Either lengths or offsets must be defined.");
  TORCH_CHECK(!(has_l && has_o),
              "segment_reduce(): Expected only one of lengths or offsets to be defined.");
  const Tensor& seg = has_o ? *offsets : *lengths;
  const char* what = has_o ? "offsets" : "lengths";
  TORCH_CHECK(seg.device() == data.device(), "segment_reduce(): expected ", what, " on ",
              data.device(), ", got ", seg.device());
  TORCH_CHECK(seg.scalar_type() == at::kLong || seg.scalar_type() == at::kInt,
              "segment_reduce(): expected ", what, " of dtype int64 or int32, got ",
              seg.scalar_type());
  TORCH_CHECK(seg.dim() >= 1 && data.dim() >= seg.dim(),
              "segment_reduce(): expected ", what, " of at least 1 and at most ", data.dim(),
              " dims, got ", seg.dim());
  TORCH_CHECK(axis == seg.dim() - 1, "segment_reduce(): Expected axis to be the last dimension of ",
              what, " but got ", axis, ".");
  TORCH_CHECK(seg.sizes().slice(0, axis).equals(data.sizes().slice(0, axis)),
              "segment_reduce(): the leading sizes of ", what, " ", seg.sizes(),
              " must match those of data ", data.sizes());
  TORCH_CHECK(!has_o || seg.size(-1) >= 1, "segment_reduce(): offsets must not be empty");
  const int64_t outer = c10::multiply_integers(data.sizes().slice(0, axis));
  Tensor s = seg.to(at::kLong).reshape({outer, seg.size(-1)});
  if (has_l) {
    if (!unsafe && s.numel() > 0) {
      TORCH_CHECK(s.min().item<int64_t>() >= 0, "lengths contains negative value!");
      TORCH_CHECK(at::all(s.sum(-1) == data.size(axis)).item<bool>(),
                  "segment_reduce(): Expected all rows of lengths along axis ",
                  "to sum to data.size(lengths.dim()-1) when !unsafe.");
    }
    s = at::cat({at::zeros({outer, 1}, s.options()), s.cumsum(-1)}, -1);
  }
  if (outer > 0 && s.size(1) > 1) {  // the kernel's bounds, checked here to name the op
    const Tensor steps = s.narrow(1, 1, s.size(1) - 1) - s.narrow(1, 0, s.size(1) - 1);
    TORCH_CHECK(steps.min().item<int64_t>() >= 0 && s.min().item<int64_t>() >= 0 &&
                    s.max().item<int64_t>() <= data.size(axis),
                "segment_reduce(): segments must lie within the ", data.size(axis),
                " elements along axis ", axis, " and not end before they start");
  }
  return s.contiguous();
}

double initial_value(const std::optional<c10::Scalar>& initial, at::ScalarType t) {
  if (!initial.has_value()) return 0.0;
  double v = 0.0;
  AT_DISPATCH_FLOATING_TYPES(t, "segment_reduce", [&] { v = initial->to<scalar_t>(); });
  return v;
}

bool native_dtype(const Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble;
}

// (outer, n, inner) sizes of `t` around `axis`.
std::array<int64_t, 3> split3(const Tensor& t, int64_t axis) {
  return {c10::multiply_integers(t.sizes().slice(0, axis)), t.size(axis),
          c10::multiply_integers(t.sizes().slice(axis + 1))};
}

loom_tensor view3(const Tensor& t, int64_t axis) {
  const auto s = split3(t, axis);
  return describe(t.view({s[0], s[1], s[2]}), kOp);
}

Tensor segment_reduce(const Tensor& data, c10::string_view reduce,
                      const std::optional<Tensor>& lengths, const std::optional<Tensor>& indices,
                      const std::optional<Tensor>& offsets, int64_t axis, bool unsafe,
                      const std::optional<c10::Scalar>& initial) {
  axis = at::maybe_wrap_dim(axis, data.dim());
  TORCH_CHECK(!defined(indices), "segment_reduce(): indices based reduction is not supported yet.");
  const int64_t red = reduction_of(std::string_view(reduce.data(), reduce.size()));
  c10::DeviceGuard guard(data.device());
  if (!native_dtype(data)) {
    note_cpu_fallback("aten::segment_reduce");
    auto cpu = [](const std::optional<Tensor>& t) {
      return defined(t) ? std::optional<Tensor>(t->cpu()) : std::nullopt;
    };
    return at::segment_reduce(data.cpu(), reduce, cpu(lengths), cpu(indices), cpu(offsets), axis,
                              unsafe, initial)
        .to(data.device());
  }
  const Tensor off = offsets_of(data, lengths, offsets, axis, unsafe);
  const Tensor x = data.contiguous();
  std::vector<int64_t> shape = data.sizes().vec();
  shape[axis] = off.size(1) - 1;
  Tensor out = at::empty(shape, data.options());
  const auto s = split3(out, axis);
  const int64_t blocks = (s[2] + LOOM_SEGMENT_BLOCK - 1) / LOOM_SEGMENT_BLOCK;
  if (s[0] * s[1] * blocks == 0) return out;
  const loom_tensor t[3] = {view3(out, axis), view3(x, axis), describe(off, kOp)};
  const loom_scalar sc[3] = {scalar_i(red), scalar_i(initial.has_value()),
                             scalar_f(initial_value(initial, data.scalar_type()))};
  launch(kOp, LOOM_KERNEL("segment_reduce.forward"), t, sc, s[0] * blocks, 1);
  return out;
}

Tensor segment_reduce_backward(const Tensor& grad, const Tensor& output, const Tensor& data,
                               c10::string_view reduce, const std::optional<Tensor>& lengths,
                               const std::optional<Tensor>& offsets, int64_t axis,
                               const std::optional<c10::Scalar>& initial) {
  axis = at::maybe_wrap_dim(axis, data.dim());
  const int64_t red = reduction_of(std::string_view(reduce.data(), reduce.size()));
  c10::DeviceGuard guard(data.device());
  if (!native_dtype(data)) {
    note_cpu_fallback("aten::_segment_reduce_backward");
    auto cpu = [](const std::optional<Tensor>& t) {
      return defined(t) ? std::optional<Tensor>(t->cpu()) : std::nullopt;
    };
    return at::_segment_reduce_backward(grad.cpu(), output.cpu(), data.cpu(), reduce,
                                        cpu(lengths), cpu(offsets), axis, initial)
        .to(data.device());
  }
  TORCH_CHECK(grad.scalar_type() == data.scalar_type() &&
                  output.scalar_type() == data.scalar_type(),
              "_segment_reduce_backward: expected grad, output and data of one dtype");
  const Tensor off = offsets_of(data, lengths, offsets, axis, /*unsafe=*/true);
  std::vector<int64_t> shape = data.sizes().vec();
  shape[axis] = off.size(1) - 1;
  TORCH_CHECK(grad.sizes().equals(shape) && output.sizes().equals(shape),
              "_segment_reduce_backward: expected grad and output of size ", shape);
  const Tensor g = grad.contiguous(), y = output.contiguous(), x = data.contiguous();
  Tensor gin = at::zeros(data.sizes(), data.options());
  const auto s = split3(g, axis);
  const int64_t blocks = (s[2] + LOOM_SEGMENT_BLOCK - 1) / LOOM_SEGMENT_BLOCK;
  if (s[0] * s[1] * blocks == 0) return gin;
  const loom_tensor t[5] = {view3(gin, axis), view3(g, axis), view3(y, axis), view3(x, axis),
                            describe(off, kOp)};
  const loom_scalar sc[3] = {scalar_i(red), scalar_i(initial.has_value()),
                             scalar_f(initial_value(initial, data.scalar_type()))};
  launch("_segment_reduce_backward", LOOM_KERNEL("segment_reduce.backward"), t, sc,
         s[0] * blocks, 1);
  return gin;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "segment_reduce", segment_reduce);
  LOOM_IMPL(m, "_segment_reduce_backward", segment_reduce_backward);
}

}  // namespace torch_loom
