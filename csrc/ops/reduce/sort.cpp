// Sorting on loom: sort, argsort and msort through it, topk, kthvalue,
// median, nanmedian, mode, unique and unique_consecutive. Equal keys come out in the CPU's order:
// stable where the CPU sorts stably, else in the order of its unstable
// algorithms. kernels/reduce/sort.c sorts each slice along the dim in a
// workspace per chunk of slices.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "common.h"
#include "loom/kernels/sort.h"
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
  launch(op, LOOM_KERNEL("sort.along_dim"), ts, sc, slices, grain);
}

// A 0-d operand sorts as one element.
Tensor as_1d(const Tensor& t) { return t.dim() ? t : t.view({1}); }

void check_sortable(const Tensor& self, const char* op) {
  TORCH_CHECK(!self.is_complex(), op, "(): input tensor must be of non-complex type");
}

// The dtypes of the values / indices out= tensors.
void check_outs(const Tensor& self, const Tensor& values, const Tensor& indices) {
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "Expected out tensor to have dtype long int, but got ", indices.scalar_type(),
              " instead");
}

std::tuple<Tensor&, Tensor&> sort_out(const Tensor& self, std::optional<bool> stable,
                                      int64_t dim, bool descending, Tensor& values,
                                      Tensor& indices) {
  check_sortable(self, "sort");
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_outs(self, values, indices);
  // Resized outputs take self's dense strides (or dense ones in its
  // order), as the CPU's sort lays them out.
  const std::vector<int64_t> strides = self.is_non_overlapping_and_dense()
                                           ? self.strides().vec()
                                           : at::infer_dense_strides(self.sizes(), self.strides());
  for (const Tensor* t : {&values, &indices})
    if (at::native::resize_output(*t, self.sizes()))
      t->unsafeGetTensorImpl()->set_sizes_and_strides(self.sizes(), strides);
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
  check_outs(self, values, indices);
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

// kthvalue, median, nanmedian and mode: one element of each slice, with
// the index the CPU reports.
std::tuple<Tensor&, Tensor&> pick_out(const char* op, loom_sort_mode mode, const Tensor& self,
                                      int64_t k, int64_t dim, bool keepdim, Tensor& values,
                                      Tensor& indices) {
  check_sortable(self, op);
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  const int64_t n = self.dim() ? self.size(dim) : 1;
  if (mode == LOOM_SORT_KTHVALUE) {
    TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", dim);
  } else {
    TORCH_CHECK_INDEX(n > 0, mode == LOOM_SORT_MODE ? "mode" : "median",
                      "(): Expected reduction dim ", dim, " to have non-zero size.");
  }
  check_outs(self, values, indices);
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim()) shape[dim] = 1;
  Tensor v = at::empty(shape, self.options()), i = at::empty(shape, indices.options());
  run_sort(op, as_1d(self), dim, false, mode == LOOM_SORT_KTHVALUE ? k : 1, mode, as_1d(v),
           as_1d(i));
  if (!keepdim && self.dim()) {
    v = v.squeeze(dim);
    i = i.squeeze(dim);
  }
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

std::tuple<Tensor, Tensor> pick(const char* op, loom_sort_mode mode, const Tensor& self,
                                int64_t k, int64_t dim, bool keepdim) {
  Tensor values = at::empty({0}, self.options());
  Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  pick_out(op, mode, self, k, dim, keepdim, values, indices);
  return {values, indices};
}

std::tuple<Tensor&, Tensor&> kthvalue_out(const Tensor& self, int64_t k, int64_t dim,
                                          bool keepdim, Tensor& values, Tensor& indices) {
  return pick_out("kthvalue", LOOM_SORT_KTHVALUE, self, k, dim, keepdim, values, indices);
}
std::tuple<Tensor, Tensor> kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  return pick("kthvalue", LOOM_SORT_KTHVALUE, self, k, dim, keepdim);
}
std::tuple<Tensor&, Tensor&> median_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                            Tensor& values, Tensor& indices) {
  return pick_out("median", LOOM_SORT_MEDIAN, self, 1, dim, keepdim, values, indices);
}
std::tuple<Tensor, Tensor> median_dim(const Tensor& self, int64_t dim, bool keepdim) {
  return pick("median", LOOM_SORT_MEDIAN, self, 1, dim, keepdim);
}
std::tuple<Tensor&, Tensor&> nanmedian_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                               Tensor& values, Tensor& indices) {
  return pick_out("nanmedian", LOOM_SORT_NANMEDIAN, self, 1, dim, keepdim, values, indices);
}
std::tuple<Tensor, Tensor> nanmedian_dim(const Tensor& self, int64_t dim, bool keepdim) {
  return pick("nanmedian", LOOM_SORT_NANMEDIAN, self, 1, dim, keepdim);
}
std::tuple<Tensor&, Tensor&> mode_out(const Tensor& self, int64_t dim, bool keepdim,
                                      Tensor& values, Tensor& indices) {
  return pick_out("mode", LOOM_SORT_MODE, self, 1, dim, keepdim, values, indices);
}
std::tuple<Tensor, Tensor> mode(const Tensor& self, int64_t dim, bool keepdim) {
  return pick("mode", LOOM_SORT_MODE, self, 1, dim, keepdim);
}

// The median of all elements; NaN for none. As on the CPU, median's NaN
// (any NaN in the input) is a fresh one, not the input's.
Tensor median_all(const Tensor& self, loom_sort_mode mode) {
  check_sortable(self, "median");
  if (self.numel() == 0) return at::full({}, NAN, self.options());
  Tensor m = std::get<0>(pick("median", mode, self.reshape({-1}), 1, 0, false));
  if (mode != LOOM_SORT_MEDIAN || !m.is_floating_point()) return m;
  return at::where(m.isnan(), at::full({}, NAN, m.options()), m);
}
Tensor median(const Tensor& self) { return median_all(self, LOOM_SORT_MEDIAN); }
Tensor nanmedian(const Tensor& self) { return median_all(self, LOOM_SORT_NANMEDIAN); }

// ---- unique -------------------------------------------------------------
// Runs of equal elements of `flat` (NaN equals nothing, so each NaN is its
// own run): the values, each element's run and each run's length.
std::tuple<Tensor, Tensor, Tensor> runs(const Tensor& flat, const Tensor& order,
                                        const at::IntArrayRef shape, bool inverse, bool counts) {
  const int64_t n = flat.numel();
  Tensor is_new = at::ones({n}, flat.options().dtype(at::kBool));
  if (n > 1) is_new.slice(0, 1).copy_(at::ne(flat.slice(0, 1), flat.slice(0, 0, n - 1)));
  Tensor starts = at::nonzero(is_new).squeeze(1);
  Tensor values = flat.index_select(0, starts);
  Tensor inv = at::empty({0}, flat.options().dtype(at::kLong));
  Tensor cnt = at::empty({0}, inv.options());
  if (inverse) {
    Tensor run = is_new.cumsum(0, at::kLong).sub_(1);
    inv = order.defined() ? at::empty({n}, inv.options()).scatter_(0, order, run) : run;
    inv = inv.view(shape);
  }
  if (counts) {
    Tensor ends = at::cat({starts.slice(0, 1), at::full({1}, n, inv.options())});
    cnt = ends.sub(starts);
  }
  return {values, inv, cnt};
}

std::tuple<Tensor, Tensor, Tensor> unique2(const Tensor& self, bool /*sorted*/,
                                           bool return_inverse, bool return_counts) {
  // Sorted whatever `sorted` says, as the CPU's results are.
  Tensor flat = self.reshape({-1});
  if (flat.numel() == 0)
    return {at::empty({0}, self.options()),
            return_inverse ? at::empty(self.sizes(), self.options().dtype(at::kLong))
                           : at::empty({0}, self.options().dtype(at::kLong)),
            at::empty({0}, self.options().dtype(at::kLong))};
  auto [sorted, order] = at::sort(flat, /*stable=*/true, 0, false);
  return runs(sorted, order, self.sizes(), return_inverse, return_counts);
}

// The older unique: values and inverse, no counts.
std::tuple<Tensor, Tensor> unique_old(const Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& self, bool return_inverse,
                                                      bool return_counts,
                                                      std::optional<int64_t> dim) {
  if (dim.has_value() && self.dim() > 0) {  // whole slices compare: on the CPU
    auto [v, i, c] = at::unique_consecutive(self.cpu(), return_inverse, return_counts, dim);
    return {v.to(self.device()), i.to(self.device()), c.to(self.device())};
  }
  Tensor flat = self.reshape({-1});
  if (flat.numel() == 0)
    return {at::empty({0}, self.options()), at::empty({0}, self.options().dtype(at::kLong)),
            at::empty({0}, self.options().dtype(at::kLong))};
  return runs(flat, Tensor(), self.sizes(), return_inverse, return_counts);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_unique2", unique2);
  LOOM_IMPL(m, "_unique", unique_old);
  LOOM_IMPL(m, "unique_consecutive", unique_consecutive);
  LOOM_IMPL(m, "kthvalue", kthvalue);
  LOOM_IMPL(m, "kthvalue.values", kthvalue_out);
  LOOM_IMPL(m, "median", median);
  LOOM_IMPL(m, "median.dim", median_dim);
  LOOM_IMPL(m, "median.dim_values", median_dim_out);
  LOOM_IMPL(m, "nanmedian", nanmedian);
  LOOM_IMPL(m, "nanmedian.dim", nanmedian_dim);
  LOOM_IMPL(m, "nanmedian.dim_values", nanmedian_dim_out);
  LOOM_IMPL(m, "mode", mode);
  LOOM_IMPL(m, "mode.values", mode_out);
  LOOM_IMPL(m, "sort.stable", sort_stable);
  LOOM_IMPL(m, "sort.values_stable", sort_out);
  LOOM_IMPL(m, "topk", topk);
  LOOM_IMPL(m, "topk.values", topk_out);
}

}  // namespace torch_loom::sort
