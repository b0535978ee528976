// The most used COO compute ops native on loom, composed of loom's dense
// kernels (index_select, index_add_, sort, unique_consecutive and
// elementwise arithmetic) on the tensor's indices and values; no element
// leaves the device:
//   _to_dense  each value added at its linear position in zeros,
//   _coalesce  stable sort of the linear positions, duplicates summed in
//              their order (as the CPU sums them),
//   addmm      (sparse 2-d @ dense 2-d, so mm, torch.sparse.mm and @): each
//              stored value times its row of the dense operand, added into
//              the result rows,
//   add, add_  (dense + alpha * sparse, the SGD step on a sparse gradient):
//              alpha times each value added at its position,
//   sparse_mask (dense filtered by a sparse tensor's indices, the gradient
//              of to_sparse): the dense elements at the mask's positions,
// and for CSR the product with a dense matrix (addmm.out, which mm, addmm
// and @ reach): as COO's, each value's row taken from the row pointers;
// for CSR and CSC _to_dense: each value added at its linear position.
// Cases outside these (hybrid products, non-2-d operands, sparse + sparse) run the CPU's
// kernels through the counted fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "register.h"
#include "sparse/sparse_fallback.h"

namespace torch_loom {
namespace {

// The row-major linear position of each nonzero among the sparse dims
// (indices: sparse_dim x nnz).
at::Tensor linear_positions(const at::Tensor& indices, at::IntArrayRef sizes) {
  const int64_t sparse_dim = indices.size(0);
  at::Tensor lin = indices.select(0, 0).clone();
  for (int64_t d = 1; d < sparse_dim; ++d) {
    lin.mul_(sizes[d]).add_(indices.select(0, d));
  }
  return lin;
}

at::Tensor to_dense(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                    std::optional<bool> masked_grad) {
  TORCH_CHECK(!dtype.has_value(), "dtype argument is not supported by sparse_to_dense");
  const at::Tensor values = self._values();
  at::Tensor out = at::zeros(self.sizes(), values.options());
  if (self._nnz() == 0 || out.numel() == 0) return out;
  const int64_t sparse_dim = self.sparse_dim();
  std::vector<int64_t> flat_shape{-1};
  for (int64_t d = sparse_dim; d < self.dim(); ++d) flat_shape.push_back(self.size(d));
  out.view(flat_shape).index_add_(0, linear_positions(self._indices(), self.sizes()), values);
  return out;
}

at::Tensor coalesce(const at::Tensor& self) {
  const int64_t nnz = self._nnz();
  const int64_t sparse_dim = self.sparse_dim();
  if (nnz < 2) {
    at::Tensor dst = self.clone();
    dst._coalesced_(true);
    return dst;
  }
  if (sparse_dim == 0) {
    return at::native::call_fallback_fn<&sparse_coo_fallback, ATEN_OP(_coalesce)>::call(self);
  }
  const at::Tensor indices = self._indices();
  const at::Tensor values = self._values();
  auto [sorted, order] = at::sort(linear_positions(indices, self.sizes()), /*stable=*/true,
                                  /*dim=*/0, /*descending=*/false);
  auto [unique, inverse, counts] =
      at::unique_consecutive(sorted, /*return_inverse=*/true, /*return_counts=*/false, 0);
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = unique.size(0);
  at::Tensor new_values = at::zeros(value_shape, values.options());
  new_values.index_add_(0, inverse, values.index_select(0, order));
  // Back from linear positions to one index row per sparse dim.
  at::Tensor new_indices = at::empty({sparse_dim, unique.size(0)}, indices.options());
  at::Tensor rest = unique;
  for (int64_t d = sparse_dim - 1; d >= 0; --d) {
    new_indices.select(0, d).copy_(at::remainder(rest, self.size(d)));
    rest = at::div(rest, self.size(d), "floor");
  }
  return at::_sparse_coo_tensor_with_dims_and_tensors(
      sparse_dim, self.dense_dim(), self.sizes(), new_indices, new_values,
      values.scalar_type(), c10::kSparse, values.device(), std::nullopt,
      /*is_coalesced=*/true);
}

at::Tensor product_from_coordinates(const at::Tensor& input, const at::Tensor& rows,
                                    const at::Tensor& cols, const at::Tensor& values,
                                    const at::Tensor& dense, int64_t m, const at::Scalar& beta,
                                    const at::Scalar& alpha);
void check_product(const at::Tensor& input, const at::Tensor& sparse, const at::Tensor& dense);
at::Tensor expand_compressed(const at::Tensor& compressed, int64_t nnz);

at::Tensor addmm(const at::Tensor& input, const at::Tensor& sparse, const at::Tensor& dense,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  const bool covered = sparse.is_sparse() && sparse.dim() == 2 && sparse.dense_dim() == 0 &&
                       dense.layout() == c10::kStrided && dense.dim() == 2 &&
                       input.layout() == c10::kStrided &&
                       dense.scalar_type() == sparse.scalar_type() &&
                       input.scalar_type() == sparse.scalar_type() &&
                       at::isFloatingType(sparse.scalar_type());
  if (!covered) {
    return at::native::call_fallback_fn<&sparse_coo_fallback, ATEN_OP(addmm)>::call(
        input, sparse, dense, beta, alpha);
  }
  check_product(input, sparse, dense);
  const at::Tensor indices = sparse._indices();
  return product_from_coordinates(input, indices.select(0, 0), indices.select(0, 1),
                                  sparse._values(), dense, sparse.size(0), beta, alpha);
}

// dense + alpha * sparse of the same sizes, dtype and device, dense
// contiguous: the case the native add covers.
bool dense_plus_sparse(const at::Tensor& self, const at::Tensor& other) {
  return self.layout() == c10::kStrided && other.is_sparse() && self.is_contiguous() &&
         self.sizes() == other.sizes() && self.scalar_type() == other.scalar_type() &&
         self.device() == other.device() && other.sparse_dim() > 0;
}

void add_sparse_into(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (other._nnz() == 0 || self.numel() == 0) return;
  std::vector<int64_t> flat_shape{-1};
  for (int64_t d = other.sparse_dim(); d < other.dim(); ++d) flat_shape.push_back(other.size(d));
  self.view(flat_shape).index_add_(0, linear_positions(other._indices(), other.sizes()),
                                   other._values(), alpha);
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!dense_plus_sparse(self, other)) {
    return at::native::call_fallback_fn<&sparse_coo_fallback, ATEN_OP(add__Tensor)>::call(
        self, other, alpha);
  }
  add_sparse_into(self, other, alpha);
  return self;
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!dense_plus_sparse(self, other)) {
    return at::native::call_fallback_fn<&sparse_coo_fallback, ATEN_OP(add_Tensor)>::call(
        self, other, alpha);
  }
  at::Tensor out = self.clone();
  add_sparse_into(out, other, alpha);
  return out;
}

// beta * input + alpha * (rows, cols, values) @ dense, the product's
// nonzeros given as coordinates (m x k sparse, k x n dense).
at::Tensor product_from_coordinates(const at::Tensor& input, const at::Tensor& rows,
                                    const at::Tensor& cols, const at::Tensor& values,
                                    const at::Tensor& dense, int64_t m, const at::Scalar& beta,
                                    const at::Scalar& alpha) {
  const int64_t n = dense.size(1);
  at::Tensor out;
  if (beta.toComplexDouble() == 0.0) {
    out = at::zeros({m, n}, dense.options());
  } else {
    out = at::mul(input.expand({m, n}), beta);
  }
  if (values.numel() == 0 || m == 0 || n == 0) return out;
  at::Tensor scaled = at::mul(values, alpha);
  out.index_add_(0, rows, at::mul(dense.index_select(0, cols), scaled.unsqueeze(1)));
  return out;
}

void check_product(const at::Tensor& input, const at::Tensor& sparse, const at::Tensor& dense) {
  TORCH_CHECK(sparse.size(1) == dense.size(0), "mat1 and mat2 shapes cannot be multiplied (",
              sparse.size(0), "x", sparse.size(1), " and ", dense.size(0), "x", dense.size(1),
              ")");
  TORCH_CHECK(input.device() == sparse.device() && dense.device() == sparse.device(),
              "Expected all tensors to be on the same device, but found ", input.device(),
              ", ", sparse.device(), " and ", dense.device(), " (addmm)");
}

at::Tensor& addmm_out_csr(const at::Tensor& input, const at::Tensor& sparse,
                          const at::Tensor& dense, const at::Scalar& beta,
                          const at::Scalar& alpha, at::Tensor& out) {
  const bool covered = sparse.layout() == c10::kSparseCsr && sparse.dim() == 2 &&
                       sparse.dense_dim() == 0 && dense.layout() == c10::kStrided &&
                       dense.dim() == 2 && input.layout() == c10::kStrided &&
                       out.layout() == c10::kStrided &&
                       dense.scalar_type() == sparse.scalar_type() &&
                       input.scalar_type() == sparse.scalar_type() &&
                       out.scalar_type() == sparse.scalar_type() &&
                       out.device() == sparse.device() &&
                       at::isFloatingType(sparse.scalar_type());
  if (!covered) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback, ATEN_OP(addmm_out)>::call(
        input, sparse, dense, beta, alpha, out);
  }
  check_product(input, sparse, dense);
  const int64_t m = sparse.size(0);
  at::Tensor rows = expand_compressed(sparse.crow_indices(), sparse._nnz());
  at::Tensor result =
      product_from_coordinates(input, rows, sparse.col_indices().to(at::kLong), sparse.values(),
                               dense, m, beta, alpha);
  out.resize_({m, dense.size(1)});
  out.copy_(result);
  return out;
}

at::Tensor sparse_mask(const at::Tensor& self, const at::Tensor& mask) {
  const bool covered = self.layout() == c10::kStrided && mask.is_sparse() &&
                       self.sizes() == mask.sizes() && self.device() == mask.device() &&
                       mask.sparse_dim() > 0;
  if (!covered) {
    return at::native::call_fallback_fn<&sparse_coo_fallback, ATEN_OP(sparse_mask)>::call(self,
                                                                                      mask);
  }
  const int64_t sparse_dim = mask.sparse_dim();
  std::vector<int64_t> flat_shape{-1};
  for (int64_t d = sparse_dim; d < mask.dim(); ++d) flat_shape.push_back(mask.size(d));
  const at::Tensor indices = mask._indices();
  at::Tensor values = self.reshape(flat_shape).index_select(0, linear_positions(indices, mask.sizes()));
  // The mask's indices as they are (repeated ones included), as the CPU.
  return at::_sparse_coo_tensor_with_dims_and_tensors(
      sparse_dim, mask.dense_dim(), mask.sizes(), indices.clone(), values, self.scalar_type(),
      c10::kSparse, self.device(), std::nullopt, mask.is_coalesced());
}

// The index of the compressed dimension of each stored value: i repeated
// once per value compressed row (column) i holds.
at::Tensor expand_compressed(const at::Tensor& compressed, int64_t nnz) {
  const at::Tensor c = compressed.to(at::kLong);
  const int64_t n = c.size(0) - 1;
  return at::_ops::repeat_interleave_Tensor::call(c.slice(0, 1) - c.slice(0, 0, n),
                                                  c10::SymInt(nnz));
}

at::Tensor compressed_to_dense(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                               std::optional<bool> masked_grad) {
  const bool csr = self.layout() == c10::kSparseCsr;
  const bool covered = (csr || self.layout() == c10::kSparseCsc) && self.dim() == 2 &&
                       self.dense_dim() == 0 && !dtype.has_value();
  if (!covered) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback, ATEN_OP(_to_dense)>::call(
        self, dtype, masked_grad);
  }
  const at::Tensor values = self.values();
  at::Tensor out = at::zeros(self.sizes(), values.options());
  const int64_t nnz = self._nnz();
  if (nnz == 0 || out.numel() == 0) return out;
  at::Tensor rows, cols;
  if (csr) {
    rows = expand_compressed(self.crow_indices(), nnz);
    cols = self.col_indices().to(at::kLong);
  } else {
    cols = expand_compressed(self.ccol_indices(), nnz);
    rows = self.row_indices().to(at::kLong);
  }
  out.view({-1}).index_add_(0, rows.mul_(self.size(1)).add_(cols), values);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  LOOM_IMPL(m, "_to_dense", to_dense);
  LOOM_IMPL(m, "_coalesce", coalesce);
  LOOM_IMPL(m, "addmm", addmm);
  LOOM_IMPL(m, "add_.Tensor", add_);
  LOOM_IMPL(m, "add.Tensor", add);
  LOOM_IMPL(m, "sparse_mask", sparse_mask);
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  LOOM_IMPL(m, "addmm.out", addmm_out_csr);
  LOOM_IMPL(m, "_to_dense", compressed_to_dense);
}

}  // namespace torch_loom
