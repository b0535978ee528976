// The JIT (loom/jit.h) for torch_loom.compiler.jit: compiles run as jobs on
// threads of their own, waited for with the GIL released; a module or job
// is a Python object holding one reference; counters as a dict.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>

#include "common.h"
#include "loom/jit.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

constexpr const char* kCompile = "torch_loom.compiler.jit.compile";

// One reference to a compiled module; the last one unregisters its kernels.
class JitModule {
 public:
  explicit JitModule(loom_jit_module_t* m) : m_(m) {}
  JitModule(const JitModule&) = delete;
  JitModule& operator=(const JitModule&) = delete;
  ~JitModule() { loom_jit_module_release(m_); }

  loom_jit_module_info info() const {
    loom_jit_module_info i{};
    check(loom_jit_module_info_get(m_, &i), "torch_loom.compiler.jit.Module");
    return i;
  }

 private:
  loom_jit_module_t* m_;
};

// A compile in flight. Its strings live in the job (loom_jit_compile_async
// copies them).
class JitJob {
 public:
  explicit JitJob(loom_jit_job_t* j) : j_(j) {}
  JitJob(const JitJob&) = delete;
  JitJob& operator=(const JitJob&) = delete;
  ~JitJob() { loom_jit_job_release(j_); }  // waits if it still runs; needs no GIL

  bool done() const { return loom_jit_job_query(j_) != LOOM_ERROR_NOT_READY; }

  std::unique_ptr<JitModule> wait() {
    loom_jit_module_t* m = nullptr;
    loom_status st;
    {
      py::gil_scoped_release no_gil;
      st = loom_jit_job_wait(j_, &m);
    }
    check(st, kCompile);
    return std::make_unique<JitModule>(m);
  }

 private:
  loom_jit_job_t* j_;
};

std::unique_ptr<JitJob> compile_async(const std::string& code,
                                      const std::vector<std::pair<std::string, std::string>>& kernels,
                                      bool fp_contract, const std::vector<std::string>& extra_flags,
                                      const std::string& include_dir,
                                      const std::vector<std::string>& row_maps) {
  // row_maps: empty, or one per kernel ("" for none): the row map's symbol
  if (!row_maps.empty() && row_maps.size() != kernels.size())
    throw std::invalid_argument("_jit_compile_async: one row map symbol per kernel, or none");
  std::vector<loom_jit_kernel> ks;
  for (size_t i = 0; i < kernels.size(); ++i)
    ks.push_back({kernels[i].first.c_str(), kernels[i].second.c_str(),
                  row_maps.empty() || row_maps[i].empty() ? nullptr : row_maps[i].c_str()});
  std::vector<const char*> flags;
  for (const auto& f : extra_flags) flags.push_back(f.c_str());
  loom_jit_source src{};
  src.code = code.c_str();
  src.kernels = ks.data();
  src.num_kernels = static_cast<uint32_t>(ks.size());
  src.flags = fp_contract ? LOOM_JIT_FP_CONTRACT : 0u;
  src.extra_flags = flags.data();
  src.num_extra_flags = static_cast<uint32_t>(flags.size());
  src.include_dir = include_dir.c_str();
  loom_jit_job_t* job = nullptr;
  check(loom_jit_compile_async(&src, &job), kCompile);
  return std::make_unique<JitJob>(job);
}

const char* origin_name(loom_jit_origin origin) {
  switch (origin) {
    case LOOM_JIT_COMPILED: return "compiled";
    case LOOM_JIT_CACHED: return "cached";
    case LOOM_JIT_RESIDENT: return "resident";
  }
  return "unknown";
}

}  // namespace

void init_jit(py::module& m) {
  py::class_<JitModule>(m, "_JitModule")
      .def_property_readonly("key", [](const JitModule& self) { return std::string(self.info().key); })
      .def_property_readonly("origin", [](const JitModule& self) { return origin_name(self.info().origin); })
      .def_property_readonly("persisted", [](const JitModule& self) { return self.info().persisted != 0; });
  py::class_<JitJob>(m, "_JitJob")
      .def("done", &JitJob::done)
      .def("wait", &JitJob::wait);
  m.def("_jit_compile_async", &compile_async, py::arg("code"), py::arg("kernels"),
        py::arg("fp_contract"), py::arg("extra_flags"), py::arg("include_dir"),
        py::arg("row_maps") = std::vector<std::string>());
  // (ok, message): whether a C compiler is there; runs nothing.
  m.def("_jit_compiler_available", [] {
    const loom_status st = loom_jit_compiler_available();
    return py::make_tuple(st == LOOM_OK, std::string(st == LOOM_OK ? "" : loom_last_error()));
  });
  // (ok, path, message): the cache directory and, when refused, why.
  m.def("_jit_cache_dir", [] {
    char path[4096];
    const loom_status st = loom_jit_cache_dir(path, sizeof path);
    return py::make_tuple(st == LOOM_OK, std::string(path),
                          std::string(st == LOOM_OK ? "" : loom_last_error()));
  });
  m.def("_jit_stats", [] {
    loom_jit_stats s{};
    loom_jit_stats_get(&s);
    py::dict d;
    d["compiler_invocations"] = s.compiler_invocations;
    d["cache_hits"] = s.cache_hits;
    d["cache_misses"] = s.cache_misses;
    d["modules_loaded"] = s.modules_loaded;
    d["entries_rejected"] = s.entries_rejected;
    d["cache_refusals"] = s.cache_refusals;
    d["compile_failures"] = s.compile_failures;
    d["compile_seconds"] = s.compile_seconds;
    return d;
  });
}

}  // namespace torch_loom::python
