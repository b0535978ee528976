// Adaptive eager (loom/fuse.h) for torch_loom.loom.fusion: the mode, the
// counters as a dict, the kernels that declare themselves elementwise.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "loom/fuse.h"
#include "loom/hal.h"
#include "loom/kernels/pointwise.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

namespace {

// The loom_pw_op codes by name (without LOOM_PW_), for the ops compiled
// regions may spell (torch_loom/compiler/regions.py maps them to the IR).
#define PW(name) {#name, LOOM_PW_##name}
const std::pair<const char*, int> kPwOps[] = {
    PW(IDENTITY), PW(ABS), PW(NEG), PW(SIGN), PW(EXP), PW(EXP2), PW(EXPM1), PW(LOG), PW(LOG2),
    PW(LOG10), PW(LOG1P), PW(SQRT), PW(RSQRT), PW(SQUARE), PW(SIN), PW(COS), PW(TAN), PW(ASIN),
    PW(ACOS), PW(ATAN), PW(SINH), PW(COSH), PW(TANH), PW(SIGMOID), PW(ERF), PW(ERFC), PW(FLOOR),
    PW(CEIL), PW(ROUND), PW(TRUNC), PW(RECIPROCAL), PW(RELU), PW(GELU), PW(GELU_TANH), PW(SILU),
    PW(CLAMP), PW(POW_SCALAR), PW(RPOW_SCALAR), PW(ADD), PW(SUB), PW(MUL), PW(DIV),
    PW(DIV_TRUNC), PW(DIV_FLOOR), PW(POW), PW(MAXIMUM), PW(MINIMUM), PW(LERP_SCALAR),
    PW(THRESHOLD_BACKWARD), PW(SIGMOID_BACKWARD), PW(TANH_BACKWARD), PW(GELU_BACKWARD),
    PW(GELU_TANH_BACKWARD), PW(SILU_BACKWARD), PW(WHERE), PW(LERP), PW(ADDCMUL), PW(ADDCDIV),
};
#undef PW

}  // namespace

void init_fusion(py::module& m) {
  m.def("_fuse_pw_ops", [] {
    py::dict d;
    for (const auto& [name, code] : kPwOps) d[name] = code;
    return d;
  });
  // The codes the compiler thread spells (None: none; no signature is counted).
  m.def("_fuse_region_set_ops", [](std::optional<std::vector<int>> codes) {
    if (!codes) {
      loom_fuse_region_set_ops(nullptr, 0);
      return;
    }
    uint64_t bits[4] = {0, 0, 0, 0};
    for (int c : *codes)
      if (c >= 0 && c < 256) bits[c / 64] |= uint64_t{1} << (c % 64);
    loom_fuse_region_set_ops(bits, 4);
  });
  // (id, signature words), None after `timeout_ms` without a request, or
  // False once stopped. Waits without the GIL.
  m.def("_fuse_region_next", [](int timeout_ms) -> py::object {
    std::vector<int32_t> words(LOOM_FUSE_REGION_MAX_WORDS);
    uint64_t id = 0;
    int n;
    {
      py::gil_scoped_release unlocked;
      n = loom_fuse_region_next(&id, words.data(), words.size(), timeout_ms);
    }
    if (n < 0) return py::bool_(false);
    if (n == 0) return py::none();
    words.resize(static_cast<size_t>(n));
    return py::make_tuple(id, words);
  });
  // Installs the registered kernel `name` for request `id` (None: none could be made).
  m.def("_fuse_region_install", [](uint64_t id, std::optional<std::string> name) {
    loom_kernel_fn fn = nullptr;
    if (name) {
      const loom_kernel_t* k = nullptr;
      check(loom_kernel_lookup(name->c_str(), &k), "torch.loom.fusion: compiled region");
      check(loom_kernel_function(k, &fn), "torch.loom.fusion: compiled region");
    }
    loom_fuse_region_install(id, fn);
  });
  m.def("_fuse_region_set_sightings", [](int n) { loom_fuse_region_set_sightings(n); });
  m.def("_fuse_region_pending", [] { return loom_fuse_region_pending(); });
  m.def("_fuse_region_stop", [] { loom_fuse_region_stop(); });
  m.def("_fuse_region_reset", [] { loom_fuse_region_reset(); });

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
