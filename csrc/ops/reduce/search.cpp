// searchsorted and bucketize on loom. The CPU backend's own checks and
// input preparation (BucketizationUtils.h: common dtype, contiguous
// copies) run first; kernels/reduce/search.c does the binary searches.
#include <ATen/ATen.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <optional>

#include "common.h"
#include "loom/kernels/search.h"
#include "register.h"

namespace torch_loom::search {
namespace {

using at::Tensor;
using Side = std::optional<c10::string_view>;

Tensor& searchsorted_out(const Tensor& boundaries, const Tensor& self, bool out_int32,
                         bool right, Side side, const std::optional<Tensor>& sorter_opt,
                         Tensor& result) {
  const Tensor sorter = sorter_opt.has_value() ? *sorter_opt : Tensor();
  at::native::searchsorted_pre_check(boundaries, self, result, out_int32, right, side, sorter);
  at::native::resize_output(result, self.sizes());
  if (self.numel() == 0) return result;
  Tensor in, bd, st;
  at::native::searchsorted_maybe_trim_input_tensors(in, bd, st, self, boundaries, sorter);
  if (!in.defined()) in = self;
  if (!bd.defined()) bd = boundaries;
  if (!st.defined()) st = sorter;
  Tensor out = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
  const loom_tensor ts[4] = {describe(out, "searchsorted"), describe(in, "searchsorted"),
                             describe(bd, "searchsorted"),
                             st.defined() ? describe(st, "searchsorted") : loom_tensor{}};
  const bool is_right = right || (side.has_value() && *side == "right");
  const loom_scalar sc[2] = {scalar_i(is_right), scalar_i(bd.dim() == 1 ? 0 : in.size(-1))};
  launch("searchsorted", LOOM_KERNEL("search.searchsorted"), ts, sc, in.numel(), 4096);
  if (!out.is_same(result)) result.copy_(out);
  return result;
}

Tensor searchsorted_tensor(const Tensor& boundaries, const Tensor& self, bool out_int32, bool right,
                    Side side, const std::optional<Tensor>& sorter) {
  Tensor result = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return searchsorted_out(boundaries, self, out_int32, right, side, sorter, result);
}

Tensor searchsorted_scalar(const Tensor& boundaries, const at::Scalar& self, bool out_int32,
                           bool right, Side side, const std::optional<Tensor>& sorter) {
  const Tensor value = at::native::searchsorted_scalar_tensor(self, boundaries.device());
  return searchsorted_tensor(boundaries, value, out_int32, right, side, sorter);
}

Tensor& searchsorted_scalar_out(const Tensor& boundaries, const at::Scalar& self, bool out_int32,
                                bool right, Side side, const std::optional<Tensor>& sorter,
                                Tensor& result) {
  return searchsorted_out(boundaries,
                          at::native::searchsorted_scalar_tensor(self, boundaries.device()),
                          out_int32, right, side, sorter, result);
}

void check_bucketize(const Tensor& boundaries) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(",
              boundaries.dim(), ")");
}

Tensor& bucketize_out(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right,
                      Tensor& result) {
  check_bucketize(boundaries);
  return searchsorted_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, result);
}

Tensor bucketize_tensor(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right) {
  check_bucketize(boundaries);
  return searchsorted_tensor(boundaries, self, out_int32, right, std::nullopt, std::nullopt);
}

Tensor bucketize_scalar(const at::Scalar& self, const Tensor& boundaries, bool out_int32,
                        bool right) {
  check_bucketize(boundaries);
  return searchsorted_scalar(boundaries, self, out_int32, right, std::nullopt, std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "searchsorted.Tensor", searchsorted_tensor);
  LOOM_IMPL(m, "searchsorted.Tensor_out", searchsorted_out);
  LOOM_IMPL(m, "searchsorted.Scalar", searchsorted_scalar);
  LOOM_IMPL(m, "searchsorted.Scalar_out", searchsorted_scalar_out);
  LOOM_IMPL(m, "bucketize.Tensor", bucketize_tensor);
  LOOM_IMPL(m, "bucketize.Tensor_out", bucketize_out);
  LOOM_IMPL(m, "bucketize.Scalar", bucketize_scalar);
}

}  // namespace torch_loom::search
