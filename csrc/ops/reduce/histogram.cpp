// histc and histogram on loom: the CPU's checks and choice of the outer bin
// edges, the edges by loom's linspace (or the caller's), then one launch of
// "histogram.bins" (loom/kernels/histogram.h) counting fixed blocks of the
// input into rows of partials, and loom's sum of the rows. The blocks are a
// function of the input's size only, so the result never depends on the
// thread count. float16/bfloat16 run on the counted CPU fallback.
#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

#include "loom/kernels/histogram.h"
#include "ops/nn/nn_util.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::histogram_op {
namespace {

using at::Tensor;
using nn::check_loom;
using nn::describe_opt;

// Input elements one launch item counts.
constexpr int64_t kHistBlock = 1 << 16;

bool low_precision(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

void check_dtype(const Tensor& self, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble, "\"", op,
      "\" not implemented for '", self.scalar_type(), "'");
}

// The CPU's histogramdd_prepare_out for one dimension.
void prepare_out(const Tensor& self, int64_t bins, const Tensor& hist, const Tensor* edges) {
  TORCH_CHECK(self.dtype() == hist.dtype(), "torch.histogram: input tensor and hist tensor should",
              " have the same dtype, but got input ", self.dtype(), " and hist ", hist.dtype());
  if (edges)
    TORCH_CHECK(self.dtype() == edges->dtype(), "torch.histogram: input tensor and bin_edges",
                " tensor should have the same dtype, but got input ", self.dtype(),
                " and bin_edges ", edges->dtype(), " for dimension 0");
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins,
              " for dimension 0");
  check_loom(hist, self, "histogram", "hist");
  if (edges) {
    check_loom(*edges, self, "histogram", "bin_edges");
    at::native::resize_output(*edges, {bins + 1});
  }
  at::native::resize_output(hist, {bins});
}

// The CPU's histogramdd_check_inputs for a flattened input and one
// sequence of edges.
void check_inputs(const Tensor& self, const Tensor& edges, const std::optional<Tensor>& weight) {
  TORCH_CHECK(self.dtype() == edges.dtype(), "torch.histogramdd: input tensor and bins tensors",
              " should have the same dtype, but got input with dtype ", self.dtype(),
              " and bins for dimension 0 with dtype ", edges.dtype());
  TORCH_CHECK(edges.dim() == 1, "torch.histogramdd: bins tensor should have one dimension,",
              " but got ", edges.dim(), " dimensions in the bins tensor for dimension 0");
  TORCH_CHECK(edges.numel() > 0, "torch.histogramdd: bins tensor should have at least 1",
              " element, but got ", edges.numel(), " elements in the bins tensor for dimension 0");
  if (weight.has_value()) {
    TORCH_CHECK(self.dtype() == weight->dtype(), "torch.histogramdd: if weight tensor is",
                " provided, input tensor and weight tensor should have the same dtype, but got",
                " input(", self.dtype(), "), and weight(", weight->dtype(), ")");
    TORCH_CHECK(weight->numel() == self.numel() && (weight->dim() <= 1 || weight->dim() == self.dim()) &&
                    (weight->dim() == 0 ? self.numel() == 1 : weight->sizes() == self.sizes() || weight->dim() == 1),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as",
                " the input tensor excluding its innermost dimension, but got input with shape ",
                self.reshape({self.numel(), 1}).sizes(), " and weight with shape ", weight->sizes());
    check_loom(*weight, self, "histogram", "weight");
  }
  check_loom(edges, self, "histogram", "bins");
}

// Counts the flattened input (with optional weights) into hist over edges;
// density as the CPU normalizes it.
void run(const char* op, const Tensor& self, const std::optional<Tensor>& weight,
         const Tensor& edges, int algorithm, bool density, Tensor& hist) {
  const int64_t n = self.numel(), nb = edges.numel() - 1;
  if (n == 0 || nb == 0) {
    hist.zero_();
  } else {
    const Tensor x = self.reshape({n}).contiguous();
    const Tensor w = weight.has_value() ? weight->reshape({n}).contiguous() : Tensor();
    const Tensor e = edges.contiguous();
    const int64_t parts = (n + kHistBlock - 1) / kHistBlock;
    const bool direct = parts == 1 && hist.is_contiguous();
    Tensor partials = direct ? hist.view({1, nb}) : at::empty({parts, nb}, hist.options());
    const loom_tensor t[4] = {describe(partials, op), describe(x, op), describe_opt(w, op),
                              describe(e, op)};
    const loom_scalar s[2] = {scalar_i(algorithm), scalar_i(kHistBlock)};
    launch(op, LOOM_KERNEL("histogram.bins"), t, s, parts, 1, self.device().index());
    if (!direct) at::sum_out(hist, partials, {0});
  }
  if (density) {
    hist.div_(hist.sum().item());
    hist.div_(edges.diff());
  }
}

// The bin edges of `bins` equal bins over [lo, hi], as the CPU's linspace
// rounds them (its vector lanes and halves decide the last bits): computed
// by the CPU's own linspace on bins + 1 values, then copied to loom.
Tensor linear_edges(double lo, double hi, int64_t bins, const Tensor& like) {
  return at::linspace(lo, hi, bins + 1, like.options().device(at::kCPU)).to(like.device());
}

// ---- histc ------------------------------------------------------------------------

Tensor& histc_out(const Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                  Tensor& hist) {
  static const char* op = "histc";
  if (low_precision(self))
    return at::native::call_fallback_fn<&loom_cpu_fallback, ATEN_OP2(histc, out)>::call(
        self, bins, min, max, hist);
  check_dtype(self, op);
  prepare_out(self, bins, hist, nullptr);
  double lo = min.to<double>(), hi = max.to<double>();
  if (lo == hi && self.numel() > 0) {
    const auto extrema = at::aminmax(self);
    lo = std::get<0>(extrema).item<double>();
    hi = std::get<1>(extrema).item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)),
              "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  const Tensor edges = linear_edges(lo, hi, bins, self);
  run(op, self, std::nullopt, edges, LOOM_HIST_LINEAR, false, hist);
  return hist;
}

Tensor histc(const Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  Tensor hist = at::empty({0}, self.options());
  return histc_out(self, bins, min, max, hist);
}

// ---- histogram --------------------------------------------------------------------

std::tuple<Tensor&, Tensor&> histogram_bins_out(const Tensor& self, const Tensor& bins,
                                                const std::optional<Tensor>& weight, bool density,
                                                Tensor& hist, Tensor& bin_edges) {
  static const char* op = "histogram";
  if (low_precision(self))
    return at::native::call_fallback_fn<&loom_cpu_fallback,
                                        ATEN_OP2(histogram, bins_tensor_out)>::call(
        self, bins, weight, density, hist, bin_edges);
  check_dtype(self, op);
  check_inputs(self, bins, weight);
  prepare_out(self, bins.numel() - 1, hist, &bin_edges);
  bin_edges.copy_(bins);
  run(op, self, weight, bin_edges, LOOM_HIST_BINARY, density, hist);
  return std::forward_as_tuple(hist, bin_edges);
}

std::tuple<Tensor, Tensor> histogram_bins(const Tensor& self, const Tensor& bins,
                                          const std::optional<Tensor>& weight, bool density) {
  Tensor hist = at::empty({0}, self.options());
  Tensor bin_edges = at::empty({0}, bins.options());
  histogram_bins_out(self, bins, weight, density, hist, bin_edges);
  return {hist, bin_edges};
}

std::tuple<Tensor&, Tensor&> histogram_ct_out(const Tensor& self, int64_t bins,
                                              std::optional<at::ArrayRef<double>> range,
                                              const std::optional<Tensor>& weight, bool density,
                                              Tensor& hist, Tensor& bin_edges) {
  static const char* op = "histogram";
  if (low_precision(self))
    return at::native::call_fallback_fn<&loom_cpu_fallback,
                                        ATEN_OP2(histogram, bin_ct_out)>::call(
        self, bins, range, weight, density, hist, bin_edges);
  check_dtype(self, op);
  prepare_out(self, bins, hist, &bin_edges);
  // the CPU's select_outer_bin_edges
  double lo = 0., hi = 1.;
  if (range.has_value()) {
    TORCH_CHECK(range->size() == 2, "torch.histogramdd: for a 1-dimensional histogram range",
                " should have 2 elements, but got ", range->size());
    lo = (*range)[0];
    hi = (*range)[1];
  } else if (self.numel() > 0) {
    const auto extrema = at::aminmax(self);
    lo = std::get<0>(extrema).item<double>();
    hi = std::get<1>(extrema).item<double>();
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogramdd: dimension 0's range [",
              lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histogramdd: min should not exceed max, but got min ", lo,
              " max ", hi, " for dimension 0");
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  bin_edges.copy_(linear_edges(lo, hi, bins, self));
  check_inputs(self, bin_edges, weight);
  run(op, self, weight, bin_edges, LOOM_HIST_LINEAR_SEARCH, density, hist);
  return std::forward_as_tuple(hist, bin_edges);
}

std::tuple<Tensor, Tensor> histogram_ct(const Tensor& self, int64_t bins,
                                        std::optional<at::ArrayRef<double>> range,
                                        const std::optional<Tensor>& weight, bool density) {
  Tensor hist = at::empty({0}, self.options());
  Tensor bin_edges = at::empty({0}, self.options());
  histogram_ct_out(self, bins, range, weight, density, hist, bin_edges);
  return {hist, bin_edges};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "histc", histc);
  LOOM_IMPL(m, "histc.out", histc_out);
  LOOM_IMPL(m, "histogram.bins_tensor", histogram_bins);
  LOOM_IMPL(m, "histogram.bins_tensor_out", histogram_bins_out);
  LOOM_IMPL(m, "histogram.bin_ct", histogram_ct);
  LOOM_IMPL(m, "histogram.bin_ct_out", histogram_ct_out);
}

}  // namespace torch_loom::histogram_op
