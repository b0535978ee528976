// The counted CPU fallback for sparse loom tensors: an op on a COO or
// compressed loom tensor without a loom kernel runs as the dense ops do
// (runtime/fallback.h): sparse and dense arguments are copied to the CPU,
// the CPU's sparse kernel runs, the results come back to loom; the op is
// counted in fallback_ops(), warns once, and LOOM_FALLBACK=error forbids it.
// An op the CPU has no sparse kernel for either raises NotImplementedError
// naming the op, before anything is copied or counted.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

#include "runtime/fallback.h"
#include "sparse/sparse_fallback.h"

namespace torch_loom {
namespace {

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                c10::DispatchKey cpu_key, const char* kind) {
  if (!op.hasComputedKernelForDispatchKey(cpu_key)) {
    const auto& name = op.schema().operator_name();
    std::string full = name.name;
    if (!name.overload_name.empty()) full += "." + name.overload_name;
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, "The operator '", full, "' does not support ", kind,
        " tensors on the loom device (nor on the CPU).");
  }
  loom_cpu_fallback_for(op, stack, cpu_key);
}

}  // namespace

void sparse_coo_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_cpu(op, stack, c10::DispatchKey::SparseCPU, "sparse COO");
}

void sparse_compressed_fallback(const c10::OperatorHandle& op,
                                torch::jit::Stack* stack) {
  run_on_cpu(op, stack, c10::DispatchKey::SparseCsrCPU,
             "sparse compressed (CSR/CSC/BSR/BSC)");
}

// No device guard: as the dense fallback, the CPU kernel needs none and the
// copies back to loom hold their own.
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_coo_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_compressed_fallback>());
}

}  // namespace torch_loom
