// embedding_bag on loom: the CPU's argument checks, then one launch item per
// bag (loom/kernels/embedding_bag.h). The weight's gradient buckets the
// indices by row first ("embedding.backward_bucket"), so each row adds its
// contributions in index order without atomics; max mode adds per column.
// Results never depend on the thread count. float16 and bfloat16 tables and
// gradients are computed in float32 and rounded once at the end.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#include "loom/kernels/embedding.h"
#include "loom/kernels/embedding_bag.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

using at::Tensor;

void check_index_dtype(const Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt,
              "embedding_bag: expected ", what, " to be Long or Int, but got ", t.scalar_type());
}

bool is_16bit(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

struct BagArgs {
  Tensor idx, offs, psw;
  int64_t bags;
};

// The CPU's checks of _embedding_bag's arguments; indices and offsets as
// contiguous int64.
BagArgs bag_args(const Tensor& weight, const Tensor& indices, const Tensor& offsets, int64_t mode,
                 const std::optional<Tensor>& psw_opt, bool include_last_offset,
                 const char* op) {
  TORCH_CHECK(weight.dim() == 2, op, ": weight has to be a 2D Tensor, but got Tensor of dimension ",
              weight.dim());
  TORCH_CHECK(indices.dim() == 1, op, ": input has to be a 1D or 2D Tensor, but got Tensor of dimension ",
              indices.dim());
  TORCH_CHECK(offsets.dim() == 1, op, ": offsets has to be a 1D Tensor, but got Tensor of dimension ",
              offsets.dim());
  check_index_dtype(indices, "indices");
  check_index_dtype(offsets, "offsets");
  TORCH_CHECK(indices.scalar_type() == offsets.scalar_type(), op,
              ": expected indices and offsets to have the same dtype, but got ",
              indices.scalar_type(), " and ", offsets.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(
      weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kDouble, "\"", op,
      "\" not implemented for '", weight.scalar_type(), "' on loom");
  TORCH_CHECK(mode >= LOOM_EMBAG_SUM && mode <= LOOM_EMBAG_MAX, op, ": unknown mode ", mode);
  if (include_last_offset)
    TORCH_CHECK(offsets.size(0) >= 1, "include_last_offset: number of offset should be at least 1");
  const Tensor psw = nn::value_or_undefined(psw_opt);
  if (psw.defined()) {
    TORCH_CHECK(mode == LOOM_EMBAG_SUM, "embedding_bag: per_sample_weights was not None. ",
                "per_sample_weights is only supported for mode='sum' (got mode='",
                mode == LOOM_EMBAG_MEAN ? "mean" : "max", "'). Please open a feature request on GitHub.");
    TORCH_CHECK(psw.scalar_type() == weight.scalar_type(), op,
                ": expected per_sample_weights of dtype ", weight.scalar_type(), " but got ",
                psw.scalar_type());
    TORCH_CHECK(psw.dim() == 1 && psw.numel() == indices.numel(), op,
                ": per_sample_weights of size ", psw.sizes(),
                " must have the same shape as the input ", indices.sizes());
    check_loom(psw, weight, op, "per_sample_weights");
  }
  check_loom(indices, weight, op, "indices");
  check_loom(offsets, weight, op, "offsets");
  const int64_t bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  return {indices.to(at::kLong).contiguous(), offsets.to(at::kLong).contiguous(),
          psw.defined() ? psw.contiguous() : psw, bags};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> embedding_bag(
    const Tensor& weight, const Tensor& indices, const Tensor& offsets, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const std::optional<Tensor>& psw_opt, bool include_last_offset,
    int64_t padding_idx) {
  static const char* op = "embedding_bag";
  if (is_16bit(weight)) {
    // A 16-bit table is summed in float32 and rounded once, as the CPU's
    // kernel accumulates it; max picks one value, exactly.
    check_loom(indices, weight, op, "indices");
    const Tensor psw = nn::value_or_undefined(psw_opt);
    TORCH_CHECK(!psw.defined() || psw.scalar_type() == weight.scalar_type(), op,
                ": expected per_sample_weights of dtype ", weight.scalar_type(), " but got ",
                psw.scalar_type());
    auto r = embedding_bag(weight.to(at::kFloat), indices, offsets, scale_grad_by_freq, mode,
                           sparse, psw.defined() ? std::optional<Tensor>(psw.to(at::kFloat))
                                                 : std::nullopt,
                           include_last_offset, padding_idx);
    std::get<0>(r) = std::get<0>(r).to(weight.scalar_type());
    return r;
  }
  const BagArgs a = bag_args(weight, indices, offsets, mode, psw_opt, include_last_offset, op);
  const int64_t n = a.idx.numel(), d = weight.size(1);
  const auto long_opts = a.idx.options();
  Tensor out = at::empty({a.bags, d}, weight.options());
  // indices after the last offset (include_last_offset) stay in no bag: -1
  Tensor offset2bag = at::full({n}, -1, long_opts);
  Tensor bag_size = at::zeros({a.bags}, long_opts);
  Tensor max_indices = mode == LOOM_EMBAG_MAX ? at::empty({a.bags, d}, long_opts) : Tensor();
  if (a.bags > 0 && d > 0) {
    const loom_tensor t[8] = {describe(out, op),         describe(offset2bag, op),
                              describe(bag_size, op),    describe_opt(max_indices, op),
                              describe(weight, op),      describe(a.idx, op),
                              describe(a.offs, op),      describe_opt(a.psw, op)};
    const loom_scalar s[3] = {scalar_i(mode), scalar_i(include_last_offset),
                              scalar_i(padding_idx)};
    launch(op, LOOM_KERNEL("embedding_bag.forward"), t, s, a.bags, grain_for(d * 8),
           weight.device().index());
  } else if (a.bags > 0) {
    if (max_indices.defined()) max_indices.zero_();
  }
  // as on the CPU, max_indices is the bag sizes outside max mode
  if (!max_indices.defined()) max_indices = bag_size.clone();
  return {out, offset2bag, bag_size, max_indices};
}

Tensor dense_backward(const Tensor& grad, const Tensor& indices, const Tensor& offset2bag,
                      const Tensor& bag_size, const Tensor& max_indices, int64_t num_weights,
                      bool scale_grad_by_freq, int64_t mode,
                      const std::optional<Tensor>& psw_opt, int64_t padding_idx) {
  static const char* op = "embedding_bag_backward";
  TORCH_CHECK(grad.dim() == 2, op, ": grad has to be a 2D Tensor");
  if (is_16bit(grad)) {
    // Summed in float32, rounded once.
    const Tensor psw = nn::value_or_undefined(psw_opt);
    return dense_backward(grad.to(at::kFloat), indices, offset2bag, bag_size, max_indices,
                          num_weights, scale_grad_by_freq, mode,
                          psw.defined() ? std::optional<Tensor>(psw.to(at::kFloat))
                                        : std::nullopt,
                          padding_idx)
        .to(grad.scalar_type());
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kDouble, "\"", op,
      "\" not implemented for '", grad.scalar_type(), "' on loom");
  check_index_dtype(indices, "indices");
  check_loom(indices, grad, op, "indices");
  check_loom(offset2bag, grad, op, "offset2bag");
  check_loom(bag_size, grad, op, "bag_size");
  const Tensor psw = nn::value_or_undefined(psw_opt);
  const int64_t n = indices.numel(), d = grad.size(1);
  TORCH_CHECK(offset2bag.numel() == n && bag_size.numel() == grad.size(0), op,
              ": offset2bag and bag_size do not match the indices and the bags");
  TORCH_CHECK(!psw.defined() || psw.numel() == n, op,
              ": per_sample_weights do not match the indices");
  const auto dev = grad.device().index();
  const Tensor bsz = bag_size.to(at::kLong).contiguous();
  if (mode == LOOM_EMBAG_MAX) {
    Tensor gw = at::zeros({num_weights, d}, grad.options());
    if (d == 0 || grad.size(0) == 0) return gw;
    TORCH_CHECK(max_indices.dim() == 2 && max_indices.size(0) == grad.size(0) &&
                    max_indices.size(1) == d,
                op, ": max_indices do not match the gradient");
    const Tensor mi = max_indices.to(at::kLong).contiguous();
    const loom_tensor t[4] = {describe(gw, op), describe(grad, op), describe(mi, op),
                              describe(bsz, op)};
    launch(op, LOOM_KERNEL("embedding_bag.backward_max"), t, {}, d,
           std::max<int64_t>(1, grain_for(grad.size(0))), dev);
    return gw;
  }
  Tensor gw = at::empty({num_weights, d}, grad.options());
  if (num_weights == 0 || d == 0) return gw;
  const auto long_opts = grad.options().dtype(at::kLong);
  Tensor offsets = at::empty({num_weights + 1}, long_opts);
  Tensor order = at::empty({std::max<int64_t>(n, 1)}, long_opts);
  const Tensor idx = indices.to(at::kLong).contiguous();
  if (n > 0) {
    const loom_tensor t[3] = {describe(idx, op), describe(offsets, op), describe(order, op)};
    const loom_scalar s[1] = {scalar_i(num_weights)};
    launch(op, LOOM_KERNEL("embedding.backward_bucket"), t, s, 1, 1, dev);
  } else {
    offsets.zero_();
  }
  const Tensor o2b = offset2bag.to(at::kLong).contiguous();
  const Tensor w = psw.defined() ? psw.to(grad.scalar_type()).contiguous() : psw;
  loom_tensor t[7] = {describe(gw, op),    describe(grad, op), describe(offsets, op),
                      describe(order, op), describe(o2b, op),  describe(bsz, op),
                      describe_opt(w, op)};
  if (n == 0) t[3].sizes[0] = 0;
  const loom_scalar s[3] = {scalar_i(mode), scalar_i(padding_idx), scalar_i(scale_grad_by_freq)};
  launch(op, LOOM_KERNEL("embedding_bag.backward_rows"), t, s, num_weights, grain_for(d), dev);
  return gw;
}

Tensor embedding_bag_dense_backward(const Tensor& grad, const Tensor& indices,
                                    const Tensor& offset2bag, const Tensor& bag_size,
                                    const Tensor& max_indices, c10::SymInt num_weights,
                                    bool scale_grad_by_freq, int64_t mode,
                                    const std::optional<Tensor>& psw, int64_t padding_idx) {
  return dense_backward(grad, indices, offset2bag, bag_size, max_indices,
                        num_weights.guard_int(__FILE__, __LINE__), scale_grad_by_freq, mode, psw,
                        padding_idx);
}

Tensor embedding_bag_backward(const Tensor& grad, const Tensor& indices, const Tensor& offsets,
                              const Tensor& offset2bag, const Tensor& bag_size,
                              const Tensor& max_indices, c10::SymInt num_weights,
                              bool scale_grad_by_freq, int64_t mode, bool sparse,
                              const std::optional<Tensor>& psw, int64_t padding_idx) {
  TORCH_CHECK(!sparse, "embedding_bag: sparse gradients are not supported on loom");
  return dense_backward(grad, indices, offset2bag, bag_size, max_indices,
                        num_weights.guard_int(__FILE__, __LINE__), scale_grad_by_freq, mode, psw,
                        padding_idx);
}

Tensor per_sample_weights_backward(const Tensor& grad, const Tensor& weight,
                                   const Tensor& indices, const Tensor& offsets,
                                   const Tensor& offset2bag, int64_t mode, int64_t padding_idx) {
  static const char* op = "embedding_bag_per_sample_weights_backward";
  TORCH_CHECK(mode == LOOM_EMBAG_SUM,
              "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  TORCH_CHECK(grad.dim() == 2 && weight.dim() == 2 && grad.size(1) == weight.size(1), op,
              ": grad and weight must be 2-D with the same number of columns");
  TORCH_CHECK(grad.scalar_type() == weight.scalar_type(), op,
              ": expected grad and weight of one dtype");
  check_loom(weight, grad, op, "weight");
  if (is_16bit(grad))  // the dot products in float32, rounded once
    return per_sample_weights_backward(grad.to(at::kFloat), weight.to(at::kFloat), indices,
                                       offsets, offset2bag, mode, padding_idx)
        .to(grad.scalar_type());
  check_loom(indices, grad, op, "indices");
  check_loom(offset2bag, grad, op, "offset2bag");
  const int64_t n = indices.numel();
  TORCH_CHECK(offset2bag.numel() == n, op, ": offset2bag does not match the indices");
  Tensor out = at::empty({n}, grad.options());
  if (n == 0) return out;
  const Tensor idx = indices.to(at::kLong).contiguous();
  const Tensor o2b = offset2bag.to(at::kLong).contiguous();
  const loom_tensor t[5] = {describe(out, op), describe(grad, op), describe(weight, op),
                            describe(idx, op), describe(o2b, op)};
  const loom_scalar s[1] = {scalar_i(padding_idx)};
  launch(op, LOOM_KERNEL("embedding_bag.per_sample_weights_backward"), t, s, n,
         grain_for(weight.size(1)), grad.device().index());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_embedding_bag", embedding_bag);
  LOOM_IMPL(m, "_embedding_bag_forward_only", embedding_bag);
  LOOM_IMPL(m, "_embedding_bag_backward", embedding_bag_backward);
  LOOM_IMPL(m, "_embedding_bag_dense_backward", embedding_bag_dense_backward);
  LOOM_IMPL(m, "_embedding_bag_per_sample_weights_backward", per_sample_weights_backward);
}

}  // namespace torch_loom::nn
