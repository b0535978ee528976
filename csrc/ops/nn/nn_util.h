// Glue shared by the neural-network op adapters (csrc/ops/nn_*.cpp).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "common.h"

namespace torch_loom::nn {

// Descriptor of an optional tensor: data == NULL when absent, which the nn
// kernels read as "not given".
inline loom_tensor describe_opt(const at::Tensor& t, const char* op) {
  if (!t.defined()) return loom_tensor{};
  return describe(t, op);
}

inline at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

// Chunk size for a launch whose items each touch `work` elements: about
// 16K elements per chunk. A function of the shape only, never of the thread
// count, so results cannot depend on it.
inline int64_t grain_for(int64_t work) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, work));
}

inline void check_float(const at::Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", op,
                              "\" not implemented for '",
                              t.scalar_type(), "'");
}

inline void check_loom(const at::Tensor& t, const at::Tensor& like,
                       const char* op, const char* what) {
  if (!t.defined()) return;
  TORCH_CHECK(t.device() == like.device(), op, ": expected ", what,
              " on ", like.device(), " but got it on ", t.device());
}

}  // namespace torch_loom::nn
