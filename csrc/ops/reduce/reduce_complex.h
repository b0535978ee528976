// Complex inputs of the reduction table (reduce.cpp) and of cumsum/cumprod
// (ops/base/factory.cpp): prod, all/any, cumsum/cumprod on the complex
// reduction kernels (loom/kernels/reduce_complex.h); var/std (and with
// mean), the vector norms and logsumexp composed of native ops as the CPU
// composes them.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_loom::reduce {

// Runs aten::<name> (a row of the reduction table) on a complex `self`,
// leaving its results on the stack; false, touching nothing, when self is
// not complex or the op is one the table's own path covers for complex
// input (sum, mean) or refuses (max, min and their kin).
bool run_complex(const char* name, const c10::OperatorHandle& op, torch::jit::Stack* stack);

// cumsum / cumprod (cumprod when `prod`) of a complex self or into a
// complex out: the scan of self converted to out's dtype along dim.
at::Tensor& cum_complex_out(bool prod, const at::Tensor& self, int64_t dim, at::Tensor& out);

}  // namespace torch_loom::reduce
