// Every aten op without a loom kernel runs here: arguments go to the CPU,
// the CPU kernel runs, results come back. Each op name is counted; the first
// time an op falls back it warns (LOOM_FALLBACK=warn), or the op raises
// NotImplementedError instead (LOOM_FALLBACK=error).
#include "runtime/fallback.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace torch_loom {
namespace {

std::mutex g_mutex;
auto& g_counts = *new std::map<std::string, int64_t>();

FallbackMode mode_from_env() {
  const char* v = std::getenv("LOOM_FALLBACK");
  if (!v || !*v || std::strcmp(v, "warn") == 0) return FallbackMode::kWarn;
  if (std::strcmp(v, "silent") == 0) return FallbackMode::kSilent;
  if (std::strcmp(v, "error") == 0) return FallbackMode::kError;
  TORCH_WARN("LOOM_FALLBACK=", v,
             " is not one of warn, silent, error; using warn");
  return FallbackMode::kWarn;
}

std::atomic<FallbackMode>& mode_slot() {
  static std::atomic<FallbackMode> mode{mode_from_env()};
  return mode;
}

// The fallback would quietly compute with a CPU tensor where a loom one is
// expected; reject mixed devices as a native kernel does. Zero-dim CPU
// tensors (wrapped scalars) and the CPU indices that indexing ops accept
// are allowed.
void check_same_device(const c10::OperatorHandle& op,
                       const torch::jit::Stack& stack, const std::string& name) {
  const auto& args = op.schema().arguments();
  const bool indexing = name.rfind("aten::index", 0) == 0 ||
                        name.rfind("aten::_index", 0) == 0;
  std::optional<c10::Device> loom;
  std::optional<c10::Device> other;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().type() == c10::DeviceType::PrivateUse1) {
      if (loom && *loom != t.device()) other = t.device();
      else loom = t.device();
    } else if (!(t.device().is_cpu() && t.dim() == 0)) {
      other = t.device();
    }
  };
  auto first = stack.end() - static_cast<std::ptrdiff_t>(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (indexing && args[i].name() == "indices") continue;
    const c10::IValue& v = *(first + static_cast<std::ptrdiff_t>(i));
    if (v.isTensor()) {
      visit(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) visit(t);
    } else if (v.isOptionalTensorList()) {
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> ot = t;
        if (ot) visit(*ot);
      }
    }
  }
  TORCH_CHECK(!(loom && other),
              "Expected all tensors to be on the same device, but found at "
              "least two devices, ", *loom, " and ", other.value_or(*loom),
              "! (when checking arguments for ", name, ")");
}

}  // namespace

void note_cpu_fallback(const std::string& full) {
  FallbackMode mode = fallback_mode();
  TORCH_CHECK_NOT_IMPLEMENTED(
      mode != FallbackMode::kError, "The operator '", full,
      "' has no native implementation on the loom device, and "
      "LOOM_FALLBACK=error forbids running it on the CPU.");
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    first = ++g_counts[full] == 1;
  }
  if (first && mode == FallbackMode::kWarn) {
    TORCH_WARN("The operator '", full,
               "' has no native implementation on the loom device; it runs "
               "on the CPU (slower: its tensors are copied). Set "
               "LOOM_FALLBACK=silent to hide this warning.");
  }
}

void loom_cpu_fallback_for(const c10::OperatorHandle& op,
                           torch::jit::Stack* stack, c10::DispatchKey cpu_key) {
  const auto& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  check_same_device(op, *stack, name.name);
  note_cpu_fallback(full);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false, cpu_key);
}

void loom_cpu_fallback(const c10::OperatorHandle& op,
                       torch::jit::Stack* stack) {
  loom_cpu_fallback_for(op, stack, c10::DispatchKey::CPU);
}

FallbackMode fallback_mode() { return mode_slot().load(); }

void set_fallback_mode(FallbackMode mode) { mode_slot().store(mode); }

std::vector<std::pair<std::string, int64_t>> fallback_record() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_counts.begin(), g_counts.end()};
}

void clear_fallback_record() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_counts.clear();
}

// No device guard (register.h) here: the CPU kernel needs none, and
// cpu_fallback brings results back with loom ops (_to_copy to the first
// tensor argument's device, _copy_from_and_resize into inputs), which hold
// their own.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&loom_cpu_fallback>());
}

}  // namespace torch_loom
