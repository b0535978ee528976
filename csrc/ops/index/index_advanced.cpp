// Advanced indexing on loom: x[i, j] and x[mask] (aten::index), their
// assignments x[i] = v and x[i] += v (aten::_index_put_impl_), nonzero,
// masked_select, masked_scatter_, take / put_, count_nonzero,
// repeat_interleave, isin and equal. Index tensors are
// prepared as the CPU backend prepares them (masks become nonzero's
// indices, all broadcast together, non-adjacent indexed dims moved to the
// front) and the checks raise what the CPU raises; kernels/index/index_advanced.c
// moves the elements.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorAdvancedIndexingUtils.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "common.h"
#include "loom/kernels/index_advanced.h"
#include "register.h"

namespace torch_loom::index_advanced {
namespace {

using at::Tensor;
using Indices = c10::List<std::optional<Tensor>>;

// The indexed tensor as the kernel sees it: `src` is self with its indexed
// dims replaced by the index shape at stride 0; `indices` (int64) broadcast
// against src's shape; `sizes` / `strides` are those of the indexed dims.
struct Indexed {
  Tensor src;
  std::vector<Tensor> indices;
  std::vector<int64_t> sizes, strides;
};

Indexed prepare(const Tensor& self, const Indices& orig) {
  TORCH_CHECK_INDEX(orig.size() <= static_cast<size_t>(self.dim()),
                    "too many indices for tensor of dimension ", self.dim(), " (got ",
                    orig.size(), ")");
  at::native::checkIndexTensorTypes(orig, /*allow_int=*/true);
  std::vector<Tensor> indices = at::native::expandTensors(self, orig, /*ensure_same_device=*/true);
  try {
    indices = at::expand_outplace(indices);
  } catch (std::exception&) {
    std::ostringstream shapes;
    for (const auto& i : indices)
      if (i.defined()) shapes << i.sizes() << " ";
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together "
                      "with shapes ", shapes.str());
  }
  while (indices.size() < static_cast<size_t>(self.dim())) indices.emplace_back();
  Tensor src = self;
  if (!at::native::hasContiguousSubspace(indices))
    std::tie(src, indices) = at::native::transposeToFront(src, indices);

  Indexed r;
  int64_t before = 0, after = 0, indexed = 0;
  at::IntArrayRef shape;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].defined()) {
      ++(indexed ? after : before);
      continue;
    }
    ++indexed;
    shape = indices[d].sizes();
    r.sizes.push_back(src.size(d));
    r.strides.push_back(src.stride(d));
  }
  // No index is valid for an empty dim: with a non-empty index shape every
  // index is out of range.
  TORCH_CHECK_INDEX(std::find(r.sizes.begin(), r.sizes.end(), 0) == r.sizes.end() ||
                        std::find(shape.begin(), shape.end(), 0) != shape.end(),
                    "index is out of bounds for dimension with size 0");
  at::DimVector sizes(src.sizes()), strides(src.strides());
  sizes.erase(sizes.begin() + before, sizes.begin() + before + indexed);
  strides.erase(strides.begin() + before, strides.begin() + before + indexed);
  sizes.insert(sizes.begin() + before, shape.begin(), shape.end());
  strides.insert(strides.begin() + before, shape.size(), 0);
  r.src = src.as_strided(sizes, strides);
  for (const auto& i : indices) {
    if (!i.defined()) continue;
    at::DimVector s(before, 1);
    s.append(i.sizes().begin(), i.sizes().end());
    s.append(after, 1);
    r.indices.push_back(i.to(at::kLong).reshape(s).expand(sizes));
  }
  return r;
}

// More indexed dims than the kernel takes: fold them into one element
// offset, after checking every index against its dim as the kernel would.
void fold_indices(Indexed& ix) {
  if (ix.indices.size() <= LOOM_INDEX_ADVANCED_MAX) return;
  Tensor offset = at::zeros_like(ix.indices[0], at::MemoryFormat::Contiguous);
  for (size_t j = 0; j < ix.indices.size(); ++j) {
    const Tensor& i = ix.indices[j];
    const int64_t size = ix.sizes[j];
    const bool bad = ((i < -size) | (i >= size)).any().item<bool>();
    TORCH_CHECK_INDEX(!bad, "index is out of bounds for dimension with size ", size);
    offset.add_(at::where(i < 0, i + size, i), ix.strides[j]);
  }
  ix.indices = {offset};
  ix.sizes = {std::numeric_limits<int64_t>::max()};
  ix.strides = {1};
}

void run(const char* op, int mode, const Tensor& dst, const Tensor& src, Indexed& ix) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  fold_indices(ix);
  const size_t k = ix.indices.size();
  std::vector<loom_tensor> ts = {describe(dst, op), describe(src, op)};
  std::vector<loom_scalar> sc = {scalar_i(mode), scalar_i(static_cast<int64_t>(k))};
  for (const auto& i : ix.indices) ts.push_back(describe(i, op));
  for (int64_t s : ix.sizes) sc.push_back(scalar_i(s));
  for (int64_t s : ix.strides) sc.push_back(scalar_i(s));
  // Assignments run as one call, in element order: duplicate indices give
  // the same result whatever the thread count.
  const int64_t grain = mode == LOOM_INDEX_ADVANCED_GET ? 16384 : n;
  launch(op, LOOM_KERNEL("index_advanced.get_put"), ts, sc, n, grain);
}

Tensor index_get(const Tensor& self, const Indices& indices) {
  Indexed ix = prepare(self, indices);
  Tensor out = at::empty(ix.src.sizes(), self.options());
  run("index", LOOM_INDEX_ADVANCED_GET, out, ix.src, ix);
  return out;
}

Tensor& index_out(const Tensor& self, const Indices& indices, Tensor& out) {
  return copy_to_out(out, index_get(self, indices), "index_out");
}

Tensor& index_put_impl_(Tensor& self, const Indices& indices, const Tensor& values,
                        bool accumulate, bool /*unsafe*/) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                    "too many indices for tensor of dimension ", self.dim(), " (got ",
                    indices.size(), ")");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. Please clone() the "
               "tensor before performing this operation. This also applies to advanced "
               "indexing e.g. tensor[indices] = tensor");
  if (!accumulate) {
    auto [fill, mask] = at::native::canDispatchToMaskedFill(self, indices, values);
    if (fill) return self.masked_fill_(mask, values.item());
  }
  Tensor v = values;
  if (v.device() != self.device() && v.numel() == 1 && v.dim() == 0) v = v.to(self.device());
  at::assert_no_overlap(self, v);
  for (const std::optional<Tensor>& i : indices)
    if (i.has_value() && i->defined()) at::assert_no_overlap(self, *i);
  Indexed ix = prepare(self, indices);
  TORCH_CHECK(at::is_expandable_to(v.sizes(), ix.src.sizes()),
              "shape mismatch: value tensor of shape ", v.sizes(),
              " cannot be broadcast to indexing result of shape ", ix.src.sizes());
  TORCH_CHECK(v.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", v.scalar_type(), " for the source.");
  run("index_put_", accumulate ? LOOM_INDEX_ADVANCED_PUT_ADD : LOOM_INDEX_ADVANCED_PUT, ix.src,
      v.expand(ix.src.sizes()), ix);
  return self;
}

// Fixed chunks of the input: each is counted, then written at its first
// row, so the rows come out in row-major order for any thread count.
constexpr int64_t kNonzeroChunk = 1 << 16;

Tensor& nonzero_out(const Tensor& self, Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  TORCH_CHECK(self.dim() <= LOOM_MAX_DIMS, "nonzero is not supported for tensors with more than ",
              LOOM_MAX_DIMS, " dimensions");
  const int64_t numel = self.numel(), chunks = (numel + kNonzeroChunk - 1) / kNonzeroChunk;
  if (numel == 0) {
    at::native::resize_output(out, {0, self.dim()});
    return out;
  }
  const loom_scalar sc[1] = {scalar_i(kNonzeroChunk)};
  Tensor counts = at::empty({chunks}, self.options().dtype(at::kLong));
  const loom_tensor tc[2] = {describe(self, "nonzero"), describe(counts, "nonzero")};
  launch("nonzero", LOOM_KERNEL("index_advanced.nonzero_count"), tc, sc, chunks, 1);
  Tensor first = counts.cpu();  // waits for the counts
  const int64_t total = loom_nonzero_first_rows(first.data_ptr<int64_t>(), chunks);
  // A resized result is column-major (each coordinate's column contiguous),
  // as the CPU's.
  if (at::native::resize_output(out, {total, self.dim()}))
    out.unsafeGetTensorImpl()->set_sizes_and_strides(
        c10::IntArrayRef{total, self.dim()}, c10::IntArrayRef{1, total});
  if (total == 0 || self.dim() == 0) return out;
  Tensor first_d = first.to(self.device());
  const loom_tensor tw[3] = {describe(self, "nonzero"), describe(first_d, "nonzero"),
                             describe(out, "nonzero")};
  launch("nonzero", LOOM_KERNEL("index_advanced.nonzero_write"), tw, sc, chunks, 1);
  return out;
}

// nonzero_static: nonzero's first `size` rows, padded with fill_value.
Tensor& nonzero_static_out(const Tensor& self, c10::SymInt size_sym, int64_t fill_value,
                           Tensor& out) {
  const int64_t size = size_sym.expect_int();
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero_static: Expected out tensor to have "
              "scalar type Long but got scalar type", out.scalar_type());
  Tensor nz = at::empty({0}, self.options().dtype(at::kLong));
  nonzero_out(self, nz);
  at::native::resize_output(out, {size, self.dim()});
  const int64_t rows = std::min(size, nz.size(0));
  if (rows > 0) out.narrow(0, 0, rows).copy_(nz.narrow(0, 0, rows));
  if (rows < size) out.narrow(0, rows, size - rows).fill_(fill_value);
  return out;
}

Tensor nonzero_static(const Tensor& self, c10::SymInt size, int64_t fill_value) {
  Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_static_out(self, size, fill_value, out);
}

Tensor nonzero(const Tensor& self) {
  Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}

Tensor masked_select_get(const Tensor& self, const Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [s, m] = at::expand_outplace(self, mask);
  // The result is 1-d, 0-d operands included.
  Indices idx;
  idx.push_back(std::optional<Tensor>(m->dim() ? *m : m->reshape({1})));
  return index_get(s->dim() ? *s : s->reshape({1}), idx);
}

Tensor& masked_select_out(const Tensor& self, const Tensor& mask, Tensor& out) {
  return copy_to_out(out, masked_select_get(self, mask), "masked_select");
}

// take / put_ index the tensor as if it were flattened in row-major order.
Tensor flat_index(const Tensor& index, const Tensor& self, const char* op) {
  TORCH_CHECK(index.scalar_type() == at::kLong, op,
              "(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, op,
                    "(): tried to take from an empty tensor");
  return index.reshape({-1});
}

Tensor take_get(const Tensor& self, const Tensor& index) {
  Indices idx;
  idx.push_back(std::optional<Tensor>(flat_index(index, self, "take")));
  return index_get(self.reshape({-1}), idx).view(index.sizes());
}

Tensor& take_out(const Tensor& self, const Tensor& index, Tensor& out) {
  return copy_to_out(out, take_get(self, index), "take");
}

Tensor& put_(Tensor& self, const Tensor& index, const Tensor& source, bool accumulate) {
  TORCH_CHECK(source.scalar_type() == self.scalar_type(), "put_(): self and source expected to "
              "have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(index.numel() == source.numel(), "put_(): Expected source and index to "
                    "have the same number of elements, but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  Indices idx;
  idx.push_back(std::optional<Tensor>(flat_index(index, self, "put_")));
  Tensor flat = self.is_contiguous() ? self.view({-1}) : self.contiguous().view({-1});
  index_put_impl_(flat, idx, source.reshape({-1}), accumulate, false);
  if (!flat.is_alias_of(self)) self.copy_(flat.view(self.sizes()));
  return self;
}

Tensor count_nonzero_dims(const Tensor& self, at::IntArrayRef dims) {
  return at::ne(self, 0).sum(dims, /*keepdim=*/false, at::kLong);
}

// repeat_interleave(repeats): index i repeated repeats[i] times. A 1 marks
// where each index after the first starts; their running sum is the result.
Tensor repeat_interleave(const Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK_NOT_IMPLEMENTED(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
                              "\"repeat_interleave_cpu\" not implemented for '",
                              repeats.scalar_type(), "'");
  const int64_t n = repeats.numel();
  if (n == 0) return at::empty({0}, repeats.options());
  Tensor ends = repeats.cumsum(0, at::kLong);
  // One read from the device: the smallest count and the total.
  Tensor host = at::stack({repeats.min().to(at::kLong), ends[-1]}).cpu();
  TORCH_CHECK(host[0].item<int64_t>() >= 0, "repeats can not be negative");
  const int64_t total = output_size ? output_size->expect_int() : host[1].item<int64_t>();
  Tensor mark = at::zeros({total + 1}, repeats.options().dtype(at::kLong));
  mark.index_add_(0, ends.slice(0, 0, n - 1).clamp_max(total),
                  at::ones({n - 1}, mark.options()));
  return mark.slice(0, 0, total).cumsum(0).to(repeats.scalar_type());
}

// masked_scatter_: the source's leading elements go, in order, to the
// positions the (broadcast) mask selects.
Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter: expected self and source to have same dtypes but got",
              self.scalar_type(), " and ", source.scalar_type());
  Tensor m = mask.expand(self.sizes()).reshape({-1});
  Tensor positions = at::nonzero(m).squeeze(1);
  const int64_t n = positions.numel();
  TORCH_CHECK(source.numel() >= n, "Number of elements of source < number of ones in mask");
  if (n == 0) return self;
  Tensor flat = self.is_contiguous() ? self.view({-1}) : self.contiguous().view({-1});
  Indices idx;
  idx.push_back(std::optional<Tensor>(positions));
  index_put_impl_(flat, idx, source.reshape({-1}).slice(0, 0, n), false, false);
  if (!flat.is_alias_of(self)) self.copy_(flat.view(self.sizes()));
  return self;
}

// isin: each element's lower bound among the sorted test elements, and
// whether it is there (NaN never is).
Tensor& isin_out(const Tensor& elements, const Tensor& test, bool /*assume_unique*/, bool invert,
                 Tensor& out) {
  for (const Tensor* t : {&elements, &test})
    TORCH_CHECK(t->scalar_type() != at::kBool,
                "Unsupported input type encountered for isin(): ", t->scalar_type());
  at::native::resize_output(out, elements.sizes());
  if (elements.numel() == 0) return out;
  if (test.numel() == 0) return out.fill_(invert);
  const at::ScalarType common = at::result_type(elements, test);
  Tensor e = elements.to(common), sorted = std::get<0>(at::sort(test.to(common).reshape({-1})));
  if (sorted.is_floating_point()) {  // NaNs sort last and match nothing: drop them
    const int64_t numbers = at::isnan(sorted).logical_not().sum().item<int64_t>();
    if (numbers == 0) return out.fill_(invert);
    sorted = sorted.slice(0, 0, numbers);
  }
  Tensor pos = at::searchsorted(sorted, e.contiguous()).clamp_max_(sorted.numel() - 1);
  Tensor found = at::eq(sorted.index_select(0, pos.reshape({-1})).view(e.sizes()), e);
  return out.copy_(invert ? found.logical_not() : found);
}

Tensor isin_tensors(const Tensor& elements, const Tensor& test, bool assume_unique, bool invert) {
  Tensor out = at::empty({0}, elements.options().dtype(at::kBool));
  return isin_out(elements, test, assume_unique, invert, out);
}

Tensor isin_scalar_test(const Tensor& elements, const at::Scalar& test, bool assume_unique,
                        bool invert) {
  return isin_tensors(elements, at::scalar_tensor(test, elements.options().dtype(test.type())),
              assume_unique, invert);
}

Tensor isin_scalar_elements(const at::Scalar& element, const Tensor& test, bool assume_unique,
                            bool invert) {
  return isin_tensors(at::scalar_tensor(element, test.options().dtype(element.type())), test,
              assume_unique, invert);
}

// Values compare after type promotion, as on the CPU.
bool equal(const Tensor& self, const Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different "
              "devices. Got: ", self.device(), " and ", other.device());
  if (!self.is_same_size(other)) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "index.Tensor", index_get);
  LOOM_IMPL(m, "index.Tensor_out", index_out);
  LOOM_IMPL(m, "_index_put_impl_", index_put_impl_);
  LOOM_IMPL(m, "nonzero", nonzero);
  LOOM_IMPL(m, "nonzero.out", nonzero_out);
  LOOM_IMPL(m, "nonzero_static", nonzero_static);
  LOOM_IMPL(m, "nonzero_static.out", nonzero_static_out);
  LOOM_IMPL(m, "masked_select", masked_select_get);
  LOOM_IMPL(m, "masked_select.out", masked_select_out);
  LOOM_IMPL(m, "equal", equal);
  LOOM_IMPL(m, "take", take_get);
  LOOM_IMPL(m, "take.out", take_out);
  LOOM_IMPL(m, "put_", put_);
  LOOM_IMPL(m, "count_nonzero.dim_IntList", count_nonzero_dims);
  LOOM_IMPL(m, "repeat_interleave.Tensor", repeat_interleave);
  LOOM_IMPL(m, "masked_scatter_", masked_scatter_);
  LOOM_IMPL(m, "isin.Tensor_Tensor", isin_tensors);
  LOOM_IMPL(m, "isin.Tensor_Tensor_out", isin_out);
  LOOM_IMPL(m, "isin.Tensor_Scalar", isin_scalar_test);
  LOOM_IMPL(m, "isin.Scalar_Tensor", isin_scalar_elements);
}

}  // namespace torch_loom::index_advanced
