// The profiler's hooks for Python: the state of the Kineto plugin, and the
// runtime's trace records for tests (torch.profiler is the user's way in).
#include <vector>

#include "loom/hal.h"
#include "profiler/profiler.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_profiler(py::module& m) {
  // (registered, forwarded): loom's Kineto plugin is in PyTorch's
  // PrivateUse1 profiler registry / the registry handed it to Kineto.
  m.def("_profiler_plugin_state", [] {
    const profiler::PluginState s = profiler::plugin_state();
    return py::make_tuple(s.registered, s.forwarded_to_kineto);
  });
  m.def("_trace_enabled", [] { return loom_trace_enabled() != 0; });
  // Testing hook: takes every record the runtime's trace rings hold (a
  // profiling session would otherwise drain them) as dicts.
  m.def("_trace_drain", [] {
    py::list out;
    std::vector<loom_trace_record> batch(1024);
    for (size_t n; (n = loom_trace_drain(batch.data(), batch.size())) > 0;) {
      for (size_t i = 0; i < n; ++i) {
        const loom_trace_record& r = batch[i];
        py::dict d;
        d["kind"] = r.kind;
        d["device"] = r.device;
        d["stream"] = r.stream;
        d["sequence"] = r.sequence;
        d["correlation"] = r.correlation;
        d["start_ns"] = r.start_ns;
        d["end_ns"] = r.end_ns;
        d["bytes"] = r.bytes;
        d["flops"] = r.flops;
        d["name"] = r.name ? r.name : "";
        d["op"] = r.op ? r.op : "";
        out.append(d);
      }
    }
    return out;
  });
}

}  // namespace torch_loom::python
