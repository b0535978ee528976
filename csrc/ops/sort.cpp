// Sorting on loom: sort, argsort and msort through it, and topk. Equal
// keys come out in the CPU's order: stable where the CPU sorts stably,
// else in the order of its unstable algorithms. kernels/sort.c sorts each
// slice along the dim in a workspace per chunk of slices.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "common.h"
#include "kernels/sort.h"
#include "register.h"

namespace torch_loom::sort {
namespace {

using at::Tensor;

// Sorts `self` (rank >= 1) along `dim` into values / indices, which hold
// the first k of each sorted slice.
void run_sort(const char* op, const Tensor& self, int64_t dim, bool descending, int64_t k,
              loom_sort_mode mode, const Tensor& values, const Tensor& indices) {
  const int64_t n = self.size(dim);
  if (n == 0 || k == 0 || self.numel() == 0) return;
  const int64_t slices = self.numel() / n;
  loom_device_props props{};
  check(loom_device_properties(self.device().index(), &props), op);
  // One workspace per concurrently sorted chunk of slices.
  const int64_t chunks = std::min<int64_t>(slices, std::max(1, props.num_threads));
  const int64_t grain = (slices + chunks - 1) / chunks;
  Tensor ws = at::empty({(slices + grain - 1) / grain * n * LOOM_SORT_WORKSPACE_PER_ELEMENT},
                        self.options().dtype(at::kByte));
  const loom_tensor ts[4] = {describe(values, op), describe(indices, op), describe(self, op),
                             describe(ws, op)};
  const loom_scalar sc[5] = {scalar_i(dim), scalar_i(descending), scalar_i(k), scalar_i(grain),
                             scalar_i(mode)};
  launch(op, loom_kernel_sort, ts, sc, slices, grain);
}

// A 0-d operand sorts as one element.
Tensor as_1d(const Tensor& t) { return t.dim() ? t : t.view({1}); }

void check_sortable(const Tensor& self, const char* op) {
  TORCH_CHECK(!self.is_complex(), op, "(): input tensor must be of non-complex type");
}

std::tuple<Tensor&, Tensor&> sort_out(const Tensor& self, std::optional<bool> stable,
                                      int64_t dim, bool descending, Tensor& values,
                                      Tensor& indices) {
  check_sortable(self, "sort");
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Expected out tensor to have dtype ", self.scalar_type(), ", but got ",
              values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "Expected out tensor to have dtype long int, but got ", indices.scalar_type(),
              " instead");
  at::native::resize_output(values, self.sizes());
  at::native::resize_output(indices, self.sizes());
  const int64_t n = self.dim() ? self.size(dim) : 1;
  // The CPU sorts stably when asked, when the slice is one repeated element
  // (a zero stride), and with its radix sort (long 1-d ascending integers);
  // elsewhere with its unstable sort, whose order of equal keys this keeps.
  const bool radix = self.dim() == 1 && !descending &&
                     at::isIntegralType(self.scalar_type(), /*includeBool=*/false) &&
                     self.numel() >= at::internal::GRAIN_SIZE &&
                     self.numel() <= std::numeric_limits<int>::max();
  const bool is_stable =
      stable.value_or(false) || (self.dim() && self.stride(dim) == 0) || radix;
  run_sort("sort", as_1d(self), dim, descending, n,
           is_stable ? LOOM_SORT_STABLE : LOOM_SORT_CPU_ORDER, as_1d(values), as_1d(indices));
  return {values, indices};
}

std::tuple<Tensor, Tensor> sort_stable(const Tensor& self, std::optional<bool> stable,
                                       int64_t dim, bool descending) {
  Tensor values = at::empty({0}, self.options());
  Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  sort_out(self, stable, dim, descending, values, indices);
  return {values, indices};
}

std::tuple<Tensor&, Tensor&> topk_out(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                      bool sorted, Tensor& values, Tensor& indices) {
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  const int64_t n = self.dim() ? self.size(dim) : 1;
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  check_sortable(self, "topk");
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Expected out tensor to have dtype ", self.scalar_type(), ", but got ",
              values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "Expected out tensor to have dtype long int, but got ", indices.scalar_type(),
              " instead");
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim()) shape[dim] = k;
  at::native::resize_output(values, shape);
  at::native::resize_output(indices, shape);
  run_sort("topk", as_1d(self), dim, largest, k,
           sorted ? LOOM_SORT_TOPK_SORTED : LOOM_SORT_TOPK_UNSORTED, as_1d(values), as_1d(indices));
  return {values, indices};
}

std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                bool sorted) {
  Tensor values = at::empty({0}, self.options());
  Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  topk_out(self, k, dim, largest, sorted, values, indices);
  return {values, indices};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "sort.stable", sort_stable);
  LOOM_IMPL(m, "sort.values_stable", sort_out);
  LOOM_IMPL(m, "topk", topk);
  LOOM_IMPL(m, "topk.values", topk_out);
}

}  // namespace torch_loom::sort
