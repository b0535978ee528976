// How a c10d reduction runs on loomccl: the element type and count (complex
// as pairs of reals), the op, and the premul_sum factor tensor to keep
// alive while the reduction runs.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "loom/ccl.h"

namespace torch_loom::distributed {

struct Reduction {
  loom_dtype dtype;
  size_t count;
  loom_ccl_reduction op{};
  at::Tensor factor;
};

// Checks that `op` applies to `t` (raising naming `name`).
Reduction reduction_for(const at::Tensor& t, const c10d::ReduceOp& op, const char* name);

inline void* ptr(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }
inline size_t bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

}  // namespace torch_loom::distributed
