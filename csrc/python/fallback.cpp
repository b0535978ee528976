// The CPU-fallback record and mode, for torch.loom.fallback_ops().
#include "runtime/fallback.h"

#include <c10/util/Exception.h>

#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_fallback(py::module& m) {
  m.def("_fallback_ops", [] {
    py::dict d;
    for (const auto& [name, count] : fallback_record()) d[py::str(name)] = count;
    return d;
  });
  m.def("_clear_fallback_ops", [] { clear_fallback_record(); });
  m.def("_get_fallback_mode", [] {
    switch (fallback_mode()) {
      case FallbackMode::kSilent: return "silent";
      case FallbackMode::kError: return "error";
      default: return "warn";
    }
  });
  m.def("_set_fallback_mode", [](const std::string& mode) {
    if (mode == "warn") set_fallback_mode(FallbackMode::kWarn);
    else if (mode == "silent") set_fallback_mode(FallbackMode::kSilent);
    else if (mode == "error") set_fallback_mode(FallbackMode::kError);
    else TORCH_CHECK_VALUE(false, "fallback mode must be 'warn', 'silent' or 'error', got '", mode, "'");
  });
}

}  // namespace torch_loom::python
