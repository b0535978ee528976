// Glue shared by the linear algebra adapters (csrc/ops/linalg/): the
// column-major batched workspaces the kernels of loom/kernels/linalg.h
// work in, out= preparation from PyTorch's own meta functions, launches.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "common.h"

namespace torch_loom::linalg {

// The dtypes the kernels compute (float32, float64). Others (complex) take
// the CPU route of each adapter.
inline bool native_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble;
}

// All dims but the last two.
inline std::vector<int64_t> batch_of(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - 2);
}

inline int64_t batch_count(const std::vector<int64_t>& batch) {
  int64_t n = 1;
  for (int64_t b : batch) n *= b;
  return n;
}

// Whether `t` is a batch of column-major matrices, its batch dims
// contiguous around them: the layout the kernels take (LAPACK's).
inline bool is_colmajor(const at::Tensor& t) {
  return t.dim() >= 2 && t.mT().is_contiguous();
}

// A new batch (`batch` + {rows, cols}) of column-major matrices.
inline at::Tensor colmajor(const std::vector<int64_t>& batch, int64_t rows, int64_t cols,
                           const at::TensorOptions& options) {
  std::vector<int64_t> s(batch);
  s.push_back(cols);
  s.push_back(rows);
  return at::empty(s, options).mT();
}

// `src` broadcast to `batch` and copied into new column-major matrices.
inline at::Tensor colmajor_copy(const at::Tensor& src, const std::vector<int64_t>& batch) {
  at::Tensor w = colmajor(batch, src.size(-2), src.size(-1), src.options());
  w.copy_(src);
  return w;
}

// `target` itself where the kernels can work in it, else a new column-major
// batch of its shape; `direct` says which (the caller copies back if not).
inline at::Tensor work_in(const at::Tensor& target, bool& direct) {
  direct = is_colmajor(target);
  return direct ? target : colmajor(batch_of(target), target.size(-2), target.size(-1),
                                    target.options());
}

// A column-major batch seen as (batch, rows, cols), without copying.
inline at::Tensor as_rank3(const at::Tensor& t) {
  return t.dim() == 2 ? t.unsqueeze(0) : t.flatten(0, t.dim() - 3);
}

// An int32 batch of vectors seen as (batch, k) (k = 0: (batch,)).
inline at::Tensor ints(const at::Tensor& t, const std::vector<int64_t>& batch, int64_t k) {
  std::vector<int64_t> s(batch);
  if (k >= 0) s.push_back(k);
  at::Tensor r = t.to(at::kInt).expand(s).contiguous();
  return r.reshape(k >= 0 ? std::vector<int64_t>{batch_count(batch), k}
                          : std::vector<int64_t>{batch_count(batch)});
}

// Prepares an out= tensor as PyTorch's structured kernels do: the meta
// result's dtype is required; a tensor that had to be resized takes the
// meta result's strides.
void prepare_out(const at::Tensor& out, const at::Tensor& meta, const char* op);

// Enqueues `name` over the batch; tensors are described here.
void launch_batch(const char* op, const char* name, const loom_kernel_t* kernel,
                  std::initializer_list<at::Tensor> tensors,
                  std::initializer_list<loom_scalar> scalars, int64_t batch,
                  int64_t work_per_item);

// op(A) X = B in place of `x` (a column-major batch over the same batch
// as `a`): "linalg.trsm".
void trsm_inplace(const char* op, const at::Tensor& a, const at::Tensor& x, bool upper,
                  bool trans, bool unit);

}  // namespace torch_loom::linalg
