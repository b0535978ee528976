// The counted CPU fallback for sparse loom tensors: an op on a COO or
// compressed loom tensor without a loom kernel runs as the dense ops do
// (runtime/fallback.h): sparse and dense arguments are copied to the CPU,
// the CPU's sparse kernel runs, the results come back to loom; the op is
// counted in fallback_ops(), warns once, and LOOM_FALLBACK=error forbids it.
// An op the CPU has no sparse kernel for either raises NotImplementedError
// naming the op, before anything is copied or counted.
#include <ATen/ATen.h>
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

// The CPU's _sparse_mm_reduce_impl (torch.sparse.mm(csr, dense, reduce))
// records the arg-max/min its backward needs only when an input requires
// grad, which the fallback's plain CPU copies never do: the backward then
// read an empty record (a crash). The copies here require grad as the
// originals do (no graph is recorded: this runs below autograd).
std::tuple<at::Tensor, at::Tensor> sparse_mm_reduce_impl(const at::Tensor& self,
                                                         const at::Tensor& other,
                                                         c10::string_view reduce) {
  TORCH_CHECK(self.device() == other.device(),
              "Expected all tensors to be on the same device, but found at least two "
              "devices, ", self.device(), " and ", other.device(),
              "! (when checking arguments for aten::_sparse_mm_reduce_impl)");
  note_cpu_fallback("aten::_sparse_mm_reduce_impl");
  at::Tensor s = self.cpu();
  at::Tensor o = other.cpu();
  if (at::GradMode::is_enabled()) {
    if (self.requires_grad()) s.requires_grad_(true);
    if (other.requires_grad()) o.requires_grad_(true);
  }
  auto [out, arg] = at::_sparse_mm_reduce_impl(s, o, reduce);
  return {out.detach().to(self.device()), arg.to(self.device())};
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

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_sparse_mm_reduce_impl", TORCH_FN(sparse_mm_reduce_impl));
}

}  // namespace torch_loom
