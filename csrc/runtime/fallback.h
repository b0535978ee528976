// The boxed CPU fallback for ops without a native loom kernel, and the
// record of which ops took it.
#pragma once

#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_loom {

enum class FallbackMode { kWarn, kSilent, kError };

// LOOM_FALLBACK=warn (default: one warning per op), silent, or error.
FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);

// Runs `op` on the CPU (copies of its arguments; results copied back),
// counted in fallback_record() and subject to the mode, as for an op with no
// loom kernel. Native kernels call it through at::native::call_fallback_fn
// for the argument kinds they do not cover.
void loom_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// loom_cpu_fallback for the other functionalities of the loom backend
// (sparse tensors): runs the op's kernel for `cpu_key` (SparseCPU,
// SparseCsrCPU), with the same device check, counting and mode.
void loom_cpu_fallback_for(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                           c10::DispatchKey cpu_key);

// For a native kernel that computes a case it does not cover (a complex
// dtype, say) with CPU ATen calls of its own: counts `full` ("aten::addmm")
// in fallback_record() and applies the mode (raising under
// LOOM_FALLBACK=error, warning once under warn) exactly as
// loom_cpu_fallback does; the caller then runs the CPU computation.
void note_cpu_fallback(const std::string& full);

// (op name, times it ran on the CPU) for every op that fell back so far.
std::vector<std::pair<std::string, int64_t>> fallback_record();
void clear_fallback_record();

}  // namespace torch_loom
