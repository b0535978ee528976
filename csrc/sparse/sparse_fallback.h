// The counted CPU fallback for sparse loom tensors (sparse_fallback.cpp),
// for native sparse kernels to call through at::native::call_fallback_fn
// for the cases they do not cover.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_loom {

// COO arguments: runs the op's SparseCPU kernel.
void sparse_coo_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Compressed (CSR/CSC/BSR/BSC) arguments: runs the op's SparseCsrCPU kernel.
void sparse_compressed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_loom
