// Indexing and data movement on loom: index_select, gather, scatter
// (+ add / reduce), index_add/copy/fill, masked_fill, cat, flip, roll,
// narrow_copy. Shapes and checks follow the CPU backend (its own check
// helpers where ATen exports them); the element loops are the kernels
// "index.along_dim" and "copy.strided".
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ScatterGatherChecks.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/unfold_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "loom/kernels/copy.h"
#include "loom/kernels/index.h"
#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::index {
namespace {

loom_scalar value_param(const at::Scalar& v, const at::Tensor& dst) {
  if (dst.is_complex()) return scalar_f(v.toComplexDouble().real());
  return at::isIntegralType(dst.scalar_type(), true) ? scalar_i(v.toLong())
                                                     : scalar_f(v.toDouble());
}

// The imaginary part of a value written into a complex tensor (the index
// kernel's fifth scalar).
double imag_param(const at::Scalar& v, const at::Tensor& dst) {
  return dst.is_complex() ? v.toComplexDouble().imag() : 0.0;
}

void launch_index(const char* name, int op, int64_t dim,
                  c10::ArrayRef<loom_tensor> t, loom_scalar value, int reduce,
                  int64_t range, int64_t per_item, const at::Tensor& on, double imag = 0.0) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !on.is_complex() || (reduce != LOOM_INDEX_AMAX && reduce != LOOM_INDEX_AMIN), name,
      "(): reduce \"", reduce == LOOM_INDEX_AMAX ? "amax" : "amin", "\" not implemented for '",
      on.scalar_type(), "'");
  const loom_scalar s[5] = {scalar_i(op), scalar_i(dim), value, scalar_i(reduce), scalar_f(imag)};
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, per_item));
  launch(name, LOOM_KERNEL("index.along_dim"), t, s, range, grain, on.device().index());
}

void check_index_1d(const at::Tensor& index, const char* name) {
  TORCH_CHECK_INDEX(index.dim() <= 1, name, "(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              name, "(): Expected dtype int32/int64 for index");
}

// ---- index_select / gather ----------------------------------------------

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim,
                             const at::Tensor& index, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_1d(index, "index_select");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "index_select(): self and result must have the same scalar type");
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) shape[dim] = index.numel();
  at::native::resize_output(out, shape);
  if (out.numel() == 0) return out;
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) > 0, "index_select(): index out of range in self");
  const loom_tensor t[3] = {describe(out, "index_select"), describe(self, "index_select"),
                            describe(index, "index_select")};
  launch_index("index_select", LOOM_INDEX_SELECT, dim, t, scalar_i(0), 0, out.numel(), 1, out);
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       bool sparse_grad, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "gather(): Expected self.dtype to be equal to src.dtype");
  at::native::resize_output(out, index.sizes());
  // As on the CPU, an empty index is not checked against self.
  if (index.numel() == 0) return out;
  at::native::scatter_gather_dtype_check("gather", self, index, std::nullopt);
  at::native::gather_shape_check(self, dim, index);
  const loom_tensor t[3] = {describe(out, "gather"), describe(self, "gather"), describe(index, "gather")};
  launch_index("gather", LOOM_INDEX_GATHER, dim, t, scalar_i(0), 0, out.numel(), 1, out);
  return out;
}

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  at::Tensor out = at::empty({0}, self.options());
  return gather_out(self, dim, index, sparse_grad, out);
}

// ---- scatter family -------------------------------------------------------

int reduce_of(c10::string_view reduce, bool two) {
  if (two) {
    if (reduce == "sum") return LOOM_INDEX_SUM;
    if (reduce == "prod") return LOOM_INDEX_PROD;
    if (reduce == "amax") return LOOM_INDEX_AMAX;
    if (reduce == "amin") return LOOM_INDEX_AMIN;
    if (reduce == "mean") return LOOM_INDEX_SUM;
    TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
  }
  if (reduce == "add") return LOOM_INDEX_SUM;
  if (reduce == "multiply") return LOOM_INDEX_PROD;
  TORCH_CHECK(false, "reduce argument must be either add or multiply.");
}

// Scatters into `self` in place: src tensor or a scalar value. Sums and
// products into float16 / bfloat16 accumulate in a float32 copy and round
// once, as the CPU backend's do.
void scatter_into(const char* name, at::Tensor& self, int64_t dim, const at::Tensor& index,
                  const std::optional<at::Tensor>& src, const at::Scalar& value, int reduce) {
  if (index.numel() == 0) return;
  if ((reduce == LOOM_INDEX_SUM || reduce == LOOM_INDEX_PROD) &&
      at::isReducedFloatingType(self.scalar_type())) {
    at::Tensor acc = self.to(at::kFloat);
    scatter_into(name, acc, dim, index, src, value, reduce);
    self.copy_(acc);
    return;
  }
  const loom_tensor t[3] = {describe(self, name), describe(index, name),
                            src ? describe(*src, name) : loom_tensor{}};
  const int64_t per = index.dim() ? index.size(dim) : 1;
  launch_index(name, LOOM_INDEX_SCATTER, dim, t, value_param(value, self), reduce,
               index.numel() / per, per, self, imag_param(value, self));
}

at::Tensor& scatter_impl(const char* name, const at::Tensor& self, int64_t dim,
                         const at::Tensor& index, const std::optional<at::Tensor>& src,
                         const at::Scalar& value, int reduce, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::native::scatter_gather_dtype_check(name, self, index, src);
  at::native::scatter_shape_check(self, dim, index, src);
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  scatter_into(name, out, dim, index, src, value, reduce);
  return out;
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  return scatter_impl("scatter", self, dim, index, src, 0, LOOM_INDEX_ASSIGN, out);
}
at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_src_out(self, dim, index, src, out);
}
at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_src_out(self, dim, index, src, self);
}
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Scalar& value, at::Tensor& out) {
  return scatter_impl("scatter", self, dim, index, std::nullopt, value, LOOM_INDEX_ASSIGN, out);
}
at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_value_out(self, dim, index, value, out);
}
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  return scatter_value_out(self, dim, index, value, self);
}
at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Tensor& src, c10::string_view reduce, at::Tensor& out) {
  return scatter_impl("scatter", self, dim, index, src, 0, reduce_of(reduce, false), out);
}
at::Tensor scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& src, c10::string_view reduce) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_reduce_out(self, dim, index, src, reduce, out);
}
at::Tensor& scatter_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, c10::string_view reduce) {
  return scatter_reduce_out(self, dim, index, src, reduce, self);
}
at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  return scatter_impl("scatter", self, dim, index, std::nullopt, value, reduce_of(reduce, false), out);
}
at::Tensor scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Scalar& value, c10::string_view reduce) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_value_reduce_out(self, dim, index, value, reduce, out);
}
at::Tensor& scatter_value_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                                  const at::Scalar& value, c10::string_view reduce) {
  return scatter_value_reduce_out(self, dim, index, value, reduce, self);
}
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  return scatter_impl("scatter_add", self, dim, index, src, 0, LOOM_INDEX_SUM, out);
}
at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_add_out(self, dim, index, src, out);
}
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_add_out(self, dim, index, src, self);
}

// The extreme values of a dtype, the identities of amax / amin.
at::Scalar lowest(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kBool: return 0;
    case at::kChar: return std::numeric_limits<int8_t>::min();
    case at::kShort: return std::numeric_limits<int16_t>::min();
    case at::kInt: return std::numeric_limits<int32_t>::min();
    case at::kLong: return std::numeric_limits<int64_t>::min();
    default: return -INFINITY;
  }
}
at::Scalar highest(at::ScalarType t) {
  switch (t) {
    case at::kByte: return 255;
    case at::kBool: return 1;
    case at::kChar: return std::numeric_limits<int8_t>::max();
    case at::kShort: return std::numeric_limits<int16_t>::max();
    case at::kInt: return std::numeric_limits<int32_t>::max();
    case at::kLong: return std::numeric_limits<int64_t>::max();
    default: return INFINITY;
  }
}

// The identity of a reduction: where touched slots start without
// include_self.
at::Scalar identity_of(int op, at::ScalarType type) {
  if (op == LOOM_INDEX_PROD) return 1;
  if (op == LOOM_INDEX_AMAX) return lowest(type);
  if (op == LOOM_INDEX_AMIN) return highest(type);
  return 0;
}

// mean's division by the number of contributions (plus self's), given
// those counts; untouched slots keep their value.
void divide_by_counts(at::Tensor& out, at::Tensor& count) {
  count.masked_fill_(count == 0, 1);
  if (out.is_floating_point()) out.div_(count);
  else out.div_(count, "floor");
}

// scatter_reduce.two: without include_self the touched slots start from the
// reduction's identity; mean divides by the number of contributions.
at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce,
                                   bool include_self, at::Tensor& out) {
  const int op = reduce_of(reduce, true);
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::native::scatter_gather_dtype_check("scatter_reduce", self, index, src);
  at::native::scatter_shape_check(self, dim, index, src);
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (index.numel() == 0) return out;
  if (!include_self)
    scatter_into("scatter_reduce", out, dim, index, std::nullopt,
                 identity_of(op, self.scalar_type()), LOOM_INDEX_ASSIGN);
  scatter_into("scatter_reduce", out, dim, index, src, 0, op);
  if (reduce == "mean") {
    at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
    count.scatter_add_(dim, index, at::ones_like(src));
    divide_by_counts(out, count);
  }
  return out;
}
at::Tensor scatter_reduce_two(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src, c10::string_view reduce, bool include_self) {
  at::Tensor out = at::empty({0}, self.options());
  return scatter_reduce_two_out(self, dim, index, src, reduce, include_self, out);
}
at::Tensor& scatter_reduce_two_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& src, c10::string_view reduce, bool include_self) {
  return scatter_reduce_two_out(self, dim, index, src, reduce, include_self, self);
}

// ---- index_add / index_copy / index_fill ------------------------------------

at::Tensor& index_source_impl(const char* name, int op, const at::Tensor& self, int64_t dim,
                              const at::Tensor& index, const at::Tensor& source,
                              const at::Scalar& alpha, at::Tensor& out,
                              int reduce = LOOM_INDEX_ASSIGN) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_1d(index, name);
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), name,
              "(): self (", self.scalar_type(), ") and source (", source.scalar_type(),
              ") must have the same scalar type");
  TORCH_CHECK(self.dim() == source.dim() || source.dim() == 0 || self.dim() == 0, name,
              "(): self and source must have the same number of dimensions");
  if (self.dim() > 0 && source.dim() > 0) {
    bool same = self.dim() == source.dim();
    for (int64_t d = 0; same && d < self.dim(); ++d)
      same = d == dim || self.size(d) == source.size(d);
    TORCH_CHECK(same, name, "(): source tensor shape must match self tensor shape, excluding the "
                "specified dimension. Got self.shape = ", self.sizes(), " source.shape = ",
                source.sizes());
  }
  TORCH_CHECK(index.numel() == (source.dim() == 0 ? 1 : source.size(dim)), name,
              "(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim): (",
              (source.dim() == 0 ? 1 : source.size(dim)), "), for dim: ", dim);
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (source.numel() == 0) return out;
  const loom_tensor t[3] = {describe(out, name), describe(index, name), describe(source, name)};
  const int64_t per = source.dim() ? source.size(dim) : 1;
  launch_index(name, op, dim, t, value_param(alpha, out), reduce, source.numel() / per, per,
               out, imag_param(alpha, out));
  return out;
}

// index_reduce: prod, mean, amax or amin of the source slices into self's;
// without include_self the touched slices start from the identity.
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             const at::Tensor& source, c10::string_view reduce,
                             bool include_self, at::Tensor& out) {
  TORCH_CHECK(reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
              "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ",
              reduce, ".");
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), "index_reduce(): not implemented for '",
                              self.scalar_type(), "'");
  const int op = reduce_of(reduce, true);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (!include_self && index.numel() > 0)
    out.index_fill_(dim, index, identity_of(op, self.scalar_type()));
  index_source_impl("index_reduce", LOOM_INDEX_ADD, out, dim, index, source, 1, out, op);
  if (reduce == "mean") {
    at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
    count.index_add_(dim, index, at::ones_like(source));
    divide_by_counts(out, count);
  }
  return out;
}

at::Tensor index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& source, c10::string_view reduce, bool include_self) {
  at::Tensor out = at::empty({0}, self.options());
  return index_reduce_out(self, dim, index, source, reduce, include_self, out);
}

at::Tensor& index_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, c10::string_view reduce, bool include_self) {
  return index_reduce_out(self, dim, index, source, reduce, include_self, self);
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const at::Scalar& alpha, at::Tensor& out) {
  return index_source_impl("index_add", LOOM_INDEX_ADD, self, dim, index, source, alpha, out);
}
at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& source, const at::Scalar& alpha) {
  at::Tensor out = at::empty({0}, self.options());
  return index_add_out(self, dim, index, source, alpha, out);
}
at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, const at::Scalar& alpha) {
  return index_add_out(self, dim, index, source, alpha, self);
}
at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor& source, at::Tensor& out) {
  return index_source_impl("index_copy", LOOM_INDEX_COPY, self, dim, index, source, 1, out);
}
at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  at::Tensor out = at::empty({0}, self.options());
  return index_copy_out(self, dim, index, source, out);
}
at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  return index_copy_out(self, dim, index, source, self);
}

at::Tensor& index_fill_scalar_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Scalar& value) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_1d(index, "index_fill_");
  if (self.numel() == 0 || index.numel() == 0) return self;
  const loom_tensor t[2] = {describe(self, "index_fill_"), describe(index, "index_fill_")};
  const int64_t per = self.dim() ? self.size(dim) : 1;
  launch_index("index_fill_", LOOM_INDEX_FILL, dim, t, value_param(value, self), 0,
               self.numel() / per, index.numel(), self, imag_param(value, self));
  return self;
}
at::Tensor& index_fill_tensor_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return index_fill_scalar_(self, dim, index, value.item());
}

// ---- masked_fill: the elementwise select kernel ------------------------------

at::Tensor& masked_fill_impl(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_fill_ only supports boolean masks, but got mask with dtype ", mask.scalar_type());
  if (self.is_complex() && self.scalar_type() != at::kComplexHalf) {
    // Each part takes its part of the value: the real select over the
    // pairs' view, twice; a conjugate or negative view is filled through
    // its plain memory with the value conjugated or negated to match.
    c10::complex<double> v = value.item().toComplexDouble();
    at::Tensor plain = self;
    if (plain.is_conj()) { plain = plain.conj(); v = c10::complex<double>(v.real(), -v.imag()); }
    if (plain.is_neg()) { plain = at::_neg_view(plain); v = -v; }
    const at::Tensor parts = at::view_as_real(plain);
    parts.select(-1, 0).masked_fill_(mask, v.real());
    parts.select(-1, 1).masked_fill_(mask, v.imag());
    return self;
  }
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false).resize_outputs(false)
      .allow_cpu_scalars(true)
      .add_output(self).add_const_input(mask).add_const_input(value).add_const_input(self);
  at::TensorIterator iter;
  iter.build(config);
  const loom_pw_kind kind = pw::kind_of(self.scalar_type(), "masked_fill_");
  const loom_scalar p[4] = {};
  pw::launch_iter("masked_fill_", iter, LOOM_PW_WHERE, kind, p);
  return self;
}
at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  return masked_fill_impl(self, mask, at::native::wrapped_scalar_tensor(value));
}
at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_impl(self, mask, value.device() == self.device() ? value : value.to(self.device()));
}

// ---- copies: cat, flip, roll, narrow_copy -------------------------------------

void copy_into(const char* name, const at::Tensor& dst, const loom_tensor& src) {
  if (dst.numel() == 0) return;
  const loom_tensor t[2] = {describe(dst, name), src};
  launch(name, LOOM_KERNEL("copy.strided"), t, c10::ArrayRef<loom_scalar>(), dst.numel(),
         LOOM_COPY_GRAIN, dst.device().index());
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  std::vector<at::Tensor> list;
  for (const at::Tensor& t : tensors) list.push_back(t);
  TORCH_CHECK(!list.empty(), "torch.cat(): expected a non-empty list of Tensors");
  // Legacy 1-d empty tensors are skipped, as the CPU backend does.
  const at::Tensor* ref = nullptr;
  for (const auto& t : list)
    if (!(t.dim() == 1 && t.numel() == 0)) { ref = &t; break; }
  if (!ref) ref = &list[0];
  dim = (ref->dim() == 1 && ref->numel() == 0) ? dim : at::maybe_wrap_dim(dim, ref->dim());
  std::vector<int64_t> shape = ref->sizes().vec();
  int64_t total = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    if (t.dim() == 1 && t.numel() == 0) continue;
    TORCH_CHECK(t.dim() == ref->dim(), "Tensors must have same number of dimensions: got ",
                ref->dim(), " and ", t.dim());
    TORCH_CHECK(t.device() == out.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                out.device(), " and ", t.device(), "!");
    for (int64_t d = 0; d < t.dim(); ++d)
      if (d != dim)
        TORCH_CHECK(t.size(d) == shape[d], "Sizes of tensors must match except in dimension ", dim,
                    ". Expected size ", shape[d], " but got size ", t.size(d), " for tensor number ",
                    i, " in the list.");
    total += t.size(dim);
  }
  if (ref->dim() > 0) shape[dim] = total;
  TORCH_CHECK(at::canCast(at::native::result_type(list), out.scalar_type()), "torch.cat(): input types can't be cast to the desired output type ", out.scalar_type());
  // A resized output takes the inputs' memory format where they all share
  // one (else contiguous), as the CPU's cat lays it out.
  c10::MemoryFormat format = list[0].suggest_memory_format();
  for (const auto& t : list)
    if (t.suggest_memory_format() != format) format = c10::MemoryFormat::Contiguous;
  if (at::native::resize_output(out, shape) && format != c10::MemoryFormat::Contiguous)
    out.unsafeGetTensorImpl()->empty_tensor_restride(format);
  int64_t offset = 0;
  for (const auto& t : list) {
    if (t.dim() == 1 && t.numel() == 0) continue;
    const int64_t n = t.size(dim);
    copy_into("cat", out.narrow(dim, offset, n), describe(t, "cat"));
    offset += n;
  }
  return out;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  std::vector<at::Tensor> list;
  for (const at::Tensor& t : tensors) list.push_back(t);
  TORCH_CHECK(!list.empty(), "torch.cat(): expected a non-empty list of Tensors");
  const at::ScalarType type = at::native::result_type(list);
  at::Tensor out = at::empty({0}, list[0].options().dtype(type));
  return cat_out(tensors, dim, out);
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  const auto mask = at::dim_list_to_bitset(dims, self.dim());
  loom_tensor src = describe(self, "flip");
  char* data = static_cast<char*>(src.data);
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[d] || self.size(d) == 0) continue;
    data += (self.size(d) - 1) * self.stride(d) * self.element_size();
    src.strides[d] = -src.strides[d];
  }
  src.data = data;
  copy_into("flip", out, src);
  return out;
}

at::Tensor roll_dims(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) {
    const int64_t zero[1] = {0};
    return roll_dims(self.flatten(), shifts, zero).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ",
              shifts.size(), ", dims:", dims.size());
  const int64_t dim = at::maybe_wrap_dim(dims[0], self.dim());
  const int64_t n = self.size(dim);
  if (n == 0) return self.clone(at::MemoryFormat::Preserve);
  const int64_t s = ((shifts[0] % n) + n) % n;
  // The CPU's roll is a cat of the two pieces: in self's memory format, but
  // contiguous when one piece is empty (no shift).
  at::Tensor out = at::empty(self.sizes(), self.options(),
                             s == 0 ? at::MemoryFormat::Contiguous : self.suggest_memory_format());
  copy_into("roll", out.narrow(dim, s, n - s), describe(self.narrow(dim, 0, n - s), "roll"));
  if (s > 0) copy_into("roll", out.narrow(dim, 0, s), describe(self.narrow(dim, n - s, s), "roll"));
  if (dims.size() > 1) return roll_dims(out, shifts.slice(1), dims.slice(1));
  return out;
}

at::Tensor& narrow_copy_out(const at::Tensor& self, int64_t dim, int64_t start, int64_t length,
                            at::Tensor& out) {
  const at::Tensor view = self.narrow(dim, start, length);
  at::native::resize_output(out, view.sizes());
  copy_into("narrow_copy", out, describe(view, "narrow_copy"));
  return out;
}
at::Tensor narrow_copy(const at::Tensor& self, int64_t dim, int64_t start, int64_t length) {
  at::Tensor out = at::empty({0}, self.options());
  return narrow_copy_out(self, dim, start, length, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // unfold is a view (as_strided over the same storage); repeat uses it.
  LOOM_IMPL(m, "unfold", at::native::unfold);
  LOOM_IMPL(m, "index_select", index_select);
  LOOM_IMPL(m, "index_select.out", index_select_out);
  LOOM_IMPL(m, "gather", gather);
  LOOM_IMPL(m, "gather.out", gather_out);
  LOOM_IMPL(m, "scatter.src", scatter_src);
  LOOM_IMPL(m, "scatter.src_out", scatter_src_out);
  LOOM_IMPL(m, "scatter_.src", scatter_src_);
  LOOM_IMPL(m, "scatter.value", scatter_value);
  LOOM_IMPL(m, "scatter.value_out", scatter_value_out);
  LOOM_IMPL(m, "scatter_.value", scatter_value_);
  LOOM_IMPL(m, "scatter.reduce", scatter_reduce);
  LOOM_IMPL(m, "scatter.reduce_out", scatter_reduce_out);
  LOOM_IMPL(m, "scatter_.reduce", scatter_reduce_);
  LOOM_IMPL(m, "scatter.value_reduce", scatter_value_reduce);
  LOOM_IMPL(m, "scatter.value_reduce_out", scatter_value_reduce_out);
  LOOM_IMPL(m, "scatter_.value_reduce", scatter_value_reduce_);
  LOOM_IMPL(m, "scatter_add", scatter_add);
  LOOM_IMPL(m, "scatter_add.out", scatter_add_out);
  LOOM_IMPL(m, "scatter_add_", scatter_add_);
  LOOM_IMPL(m, "scatter_reduce.two", scatter_reduce_two);
  LOOM_IMPL(m, "scatter_reduce.two_out", scatter_reduce_two_out);
  LOOM_IMPL(m, "scatter_reduce_.two", scatter_reduce_two_);
  LOOM_IMPL(m, "index_add", index_add);
  LOOM_IMPL(m, "index_add.out", index_add_out);
  LOOM_IMPL(m, "index_add_", index_add_);
  LOOM_IMPL(m, "index_reduce", index_reduce);
  LOOM_IMPL(m, "index_reduce.out", index_reduce_out);
  LOOM_IMPL(m, "index_reduce_", index_reduce_);
  LOOM_IMPL(m, "index_copy", index_copy);
  LOOM_IMPL(m, "index_copy.out", index_copy_out);
  LOOM_IMPL(m, "index_copy_", index_copy_);
  LOOM_IMPL(m, "index_fill_.int_Scalar", index_fill_scalar_);
  LOOM_IMPL(m, "index_fill_.int_Tensor", index_fill_tensor_);
  LOOM_IMPL(m, "masked_fill_.Scalar", masked_fill_scalar_);
  LOOM_IMPL(m, "masked_fill_.Tensor", masked_fill_tensor_);
  LOOM_IMPL(m, "cat", cat);
  LOOM_IMPL(m, "cat.out", cat_out);
  LOOM_IMPL(m, "flip", flip);
  LOOM_IMPL(m, "roll", roll_dims);
  LOOM_IMPL(m, "narrow_copy", narrow_copy);
  LOOM_IMPL(m, "narrow_copy.out", narrow_copy_out);
}

}  // namespace
}  // namespace torch_loom::index
