// Sparse tensors on loom: the COO (SparsePrivateUse1) and compressed
// (SparseCsrPrivateUse1: CSR, CSC, BSR, BSC) tensor types. A sparse loom
// tensor is ATen's SparseTensorImpl / SparseCsrTensorImpl whose indices and
// values are dense loom tensors; the ops that build, resize, take apart and
// copy one are ATen's own device-generic ones (the kernels the CPU and CUDA
// register for the same ops), so indices and values stay in loom memory and
// every element operation on them is a loom op. The compute ops on sparse
// tensors run native where sparse_native.cpp says so and otherwise on the
// counted CPU fallback (sparse_fallback.cpp).
#include <ATen/ATen.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/zeros_native.h>
#include <torch/library.h>

#include "register.h"

namespace torch_loom {
namespace {

namespace native = at::native;

// The CPU fallback writes an op's results into mutated sparse arguments
// with _copy_from_and_resize (CPU result -> loom argument): the argument
// takes the result's sizes, dims and nnz, then its indices and values.
at::Tensor copy_from_and_resize_sparse(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(self.layout() == dst.layout(),
              "_copy_from_and_resize: cannot copy a ", self.layout(),
              " result into a ", dst.layout(), " tensor");
  at::Tensor out = dst;
  if (dst.layout() == c10::kSparse) {
    at::copy_sparse_to_sparse_(out, self);
  } else {
    native::resize_as_sparse_compressed_(out, self);
    out.copy_(self);
  }
  return dst;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // Building and resizing.
  LOOM_IMPL(m, "_sparse_coo_tensor_with_dims", native::new_with_dims_sparse);
  LOOM_IMPL(m, "_sparse_coo_tensor_with_dims_and_tensors",
            native::new_with_dims_and_tensor_sparse_symint);
  LOOM_IMPL(m, "empty.memory_format", native::empty_sparse_symint);
  LOOM_IMPL(m, "empty_like", native::empty_like_sparse_coo);
  LOOM_IMPL(m, "zeros.out", native::zeros_sparse_out);
  LOOM_IMPL(m, "zero_", native::zero_sparse_);
  LOOM_IMPL(m, "sparse_resize_", native::sparse_resize_);
  LOOM_IMPL(m, "sparse_resize_and_clear_", native::sparse_resize_and_clear_);
  LOOM_IMPL(m, "resize_as_sparse_", native::resize_as_sparse_);
  // Taking apart.
  LOOM_IMPL(m, "sparse_dim", native::sparse_dim_sparse);
  LOOM_IMPL(m, "dense_dim", native::dense_dim_sparse);
  LOOM_IMPL(m, "_dimI", native::sparse_dim_sparse);
  LOOM_IMPL(m, "_dimV", native::dense_dim_sparse);
  LOOM_IMPL(m, "_nnz", native::_nnz_sparse);
  LOOM_IMPL(m, "is_coalesced", native::is_coalesced_sparse);
  LOOM_IMPL(m, "_coalesced_", native::_coalesced_sparse_);
  LOOM_IMPL(m, "_indices", native::_indices_sparse);
  LOOM_IMPL(m, "_values", native::_values_sparse);
  LOOM_IMPL(m, "indices", native::indices_sparse);
  LOOM_IMPL(m, "values", native::values_sparse);
  // Copies (loom <-> loom, CPU <-> loom: indices and values copy as dense
  // tensors) and clones.
  LOOM_IMPL(m, "copy_", native::copy_sparse_wrapper_);
  LOOM_IMPL(m, "copy_sparse_to_sparse_", native::copy_sparse_);
  LOOM_IMPL(m, "clone", native::clone_sparse);
  LOOM_IMPL(m, "_copy_from_and_resize", copy_from_and_resize_sparse);
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  LOOM_IMPL(m, "empty.memory_format", native::empty_sparse_compressed_symint);
  LOOM_IMPL(m, "empty_like", native::empty_like_sparse_csr);
  LOOM_IMPL(m, "resize_", native::resize_sparse_csr_);
  LOOM_IMPL(m, "resize_as_sparse_", native::resize_as_sparse_compressed_);
  LOOM_IMPL(m, "zero_", native::zero_sparse_csr_);
  LOOM_IMPL(m, "sparse_dim", native::sparse_dim_sparse_csr);
  LOOM_IMPL(m, "dense_dim", native::dense_dim_sparse_csr);
  LOOM_IMPL(m, "_nnz", native::_nnz_sparse_csr);
  LOOM_IMPL(m, "values", native::values_sparse_csr);
  LOOM_IMPL(m, "crow_indices", native::crow_indices_sparse_csr);
  LOOM_IMPL(m, "col_indices", native::col_indices_sparse_csr);
  LOOM_IMPL(m, "ccol_indices", native::ccol_indices_sparse_csr);
  LOOM_IMPL(m, "row_indices", native::row_indices_sparse_csr);
  LOOM_IMPL(m, "select.int", native::select_sparse_csr);
  LOOM_IMPL(m, "copy_", native::copy_sparse_compressed_);
  LOOM_IMPL(m, "clone", native::clone_sparse_compressed);
  LOOM_IMPL(m, "_copy_from_and_resize", copy_from_and_resize_sparse);
}

}  // namespace torch_loom
