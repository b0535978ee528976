// Layout conversions on loom (to_sparse, to_sparse_csr/csc/bsr/bsc from
// dense, COO and compressed tensors): ATen's device-generic conversions,
// the ones the CPU and CUDA register, which find the nonzeros and build the
// indices with dense ops, so on loom kernels; the steps that are not
// generic (index format conversions) are dispatched to loom in turn. They
// ran whole on the CPU fallback. Between row- and column-compressed
// layouts (CSR <-> CSC, BSR <-> BSC and across) ATen transposes with a
// CPU/CUDA-only kernel: those stay on the counted fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_to_sparse_bsc_native.h>
#include <ATen/ops/_to_sparse_bsr_native.h>
#include <ATen/ops/_to_sparse_csc_native.h>
#include <ATen/ops/_to_sparse_csr_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <torch/library.h>

#include "register.h"
#include "sparse/sparse_fallback.h"

namespace torch_loom {
namespace {

namespace native = at::native;

// The two overloads of each conversion to COO: with a number of sparse
// dims, and with a layout (and blocksize, dense dims).
at::Tensor dense_to_coo_dims(const at::Tensor& self, int64_t sparse_dim) {
  return native::dense_to_sparse(self, sparse_dim);
}
at::Tensor dense_to_layout(const at::Tensor& self, std::optional<at::Layout> layout,
                           at::OptionalIntArrayRef blocksize, std::optional<int64_t> dense_dim) {
  return native::dense_to_sparse(self, layout, blocksize, dense_dim);
}
at::Tensor coo_to_coo_dims(const at::Tensor& self, int64_t sparse_dim) {
  return native::sparse_coo_to_sparse(self, sparse_dim);
}
at::Tensor coo_to_layout(const at::Tensor& self, std::optional<at::Layout> layout,
                         at::OptionalIntArrayRef blocksize, std::optional<int64_t> dense_dim) {
  return native::sparse_coo_to_sparse(self, layout, blocksize, dense_dim);
}
at::Tensor compressed_to_coo_dims(const at::Tensor& self, int64_t sparse_dim) {
  return native::sparse_compressed_to_sparse(self, sparse_dim);
}
at::Tensor compressed_to_layout(const at::Tensor& self, std::optional<at::Layout> layout,
                                at::OptionalIntArrayRef blocksize,
                                std::optional<int64_t> dense_dim) {
  return native::sparse_compressed_to_sparse(self, layout, blocksize, dense_dim);
}

bool row_compressed(at::Layout l) { return l == c10::kSparseCsr || l == c10::kSparseBsr; }

at::Tensor compressed_to_csr(const at::Tensor& self, std::optional<int64_t> dense_dim) {
  if (!row_compressed(self.layout())) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback,
                                        ATEN_OP(_to_sparse_csr)>::call(self, dense_dim);
  }
  return native::sparse_compressed_to_sparse_csr(self, dense_dim);
}
at::Tensor compressed_to_csc(const at::Tensor& self, std::optional<int64_t> dense_dim) {
  if (row_compressed(self.layout())) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback,
                                        ATEN_OP(_to_sparse_csc)>::call(self, dense_dim);
  }
  return native::sparse_compressed_to_sparse_csc(self, dense_dim);
}
at::Tensor compressed_to_bsr(const at::Tensor& self, at::IntArrayRef blocksize,
                             std::optional<int64_t> dense_dim) {
  if (!row_compressed(self.layout())) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback,
                                        ATEN_OP(_to_sparse_bsr)>::call(self, blocksize, dense_dim);
  }
  return native::sparse_compressed_to_sparse_bsr(self, blocksize, dense_dim);
}
at::Tensor compressed_to_bsc(const at::Tensor& self, at::IntArrayRef blocksize,
                             std::optional<int64_t> dense_dim) {
  if (row_compressed(self.layout())) {
    return at::native::call_fallback_fn<&sparse_compressed_fallback,
                                        ATEN_OP(_to_sparse_bsc)>::call(self, blocksize, dense_dim);
  }
  return native::sparse_compressed_to_sparse_bsc(self, blocksize, dense_dim);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_to_sparse.sparse_dim", dense_to_coo_dims);
  LOOM_IMPL(m, "_to_sparse", dense_to_layout);
  LOOM_IMPL(m, "_to_sparse_csr", native::dense_to_sparse_csr);
  LOOM_IMPL(m, "_to_sparse_csc", native::dense_to_sparse_csc);
  LOOM_IMPL(m, "_to_sparse_bsr", native::dense_to_sparse_bsr);
  LOOM_IMPL(m, "_to_sparse_bsc", native::dense_to_sparse_bsc);
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  LOOM_IMPL(m, "_to_sparse.sparse_dim", coo_to_coo_dims);
  LOOM_IMPL(m, "_to_sparse", coo_to_layout);
  LOOM_IMPL(m, "_to_sparse_csr", native::coo_to_sparse_csr);
  LOOM_IMPL(m, "_to_sparse_csc", native::coo_to_sparse_csc);
  LOOM_IMPL(m, "_to_sparse_bsr", native::coo_to_sparse_bsr);
  LOOM_IMPL(m, "_to_sparse_bsc", native::coo_to_sparse_bsc);
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  LOOM_IMPL(m, "_to_sparse.sparse_dim", compressed_to_coo_dims);
  LOOM_IMPL(m, "_to_sparse", compressed_to_layout);
  LOOM_IMPL(m, "_to_sparse_csr", compressed_to_csr);
  LOOM_IMPL(m, "_to_sparse_csc", compressed_to_csc);
  LOOM_IMPL(m, "_to_sparse_bsr", compressed_to_bsr);
  LOOM_IMPL(m, "_to_sparse_bsc", compressed_to_bsc);
}

}  // namespace torch_loom
