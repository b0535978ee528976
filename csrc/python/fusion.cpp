// Adaptive eager (loom/fuse.h) for torch_loom.loom.fusion: the mode, the
// counters as a dict, the kernels that declare themselves elementwise.
#include <string>
#include <vector>

#include "common.h"
#include "loom/fuse.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_fusion(py::module& m) {
  m.def("_fuse_get_mode", [] { return static_cast<int>(loom_fuse_get_mode()); });
  m.def("_fuse_set_mode", [](int mode) {
    TORCH_CHECK_VALUE(mode >= LOOM_FUSE_OFF && mode <= LOOM_FUSE_VERIFY,
                      "torch.loom.fusion.set_mode: mode must be 0, 1 or 2, got ", mode);
    loom_fuse_set_mode(static_cast<loom_fuse_mode>(mode));
  });
  m.def("_fuse_stats", [] {
    loom_fuse_stats s{};
    loom_fuse_stats_get(&s);
    py::dict d;
    d["groups"] = s.groups;
    d["ops_fused"] = s.ops_fused;
    d["reordered"] = s.reordered;
    d["bytes_cached"] = s.bytes_cached;
    d["bytes_not_written"] = s.bytes_not_written;
    d["compiled_regions"] = s.compiled_regions;
    d["verified"] = s.verified;
    d["verify_skipped"] = s.verify_skipped;
    return d;
  });
  m.def("_fuse_stats_reset", [] { loom_fuse_stats_reset(); });
  m.def("_fuse_elementwise_kernels", [] {
    const size_t n = loom_fuse_elementwise_kernels(nullptr, 0);
    std::vector<const char*> names(n);
    loom_fuse_elementwise_kernels(names.data(), n);
    return std::vector<std::string>(names.begin(), names.end());
  });
}

}  // namespace torch_loom::python
