// Device management for torch.loom: initialisation, fork safety, indices
// and properties.
#include <ATen/Context.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include "common.h"
#include "runtime/device.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {

void init_device(py::module& m) {
  m.def("_init", [] {
    torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
    at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  });
  m.def("_is_in_bad_fork",
        [] { return torch::utils::is_device_in_bad_fork(at::kPrivateUse1); });
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_get_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) {
    set_device(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_exchange_device", [](int index) {
    if (index < 0) return -1;
    return static_cast<int>(exchange_device(static_cast<c10::DeviceIndex>(index)));
  });
  m.def("_device_properties", [](int index) {
    check_device_index(static_cast<c10::DeviceIndex>(index),
                       "get_device_properties");
    loom_device_props p{};
    check(loom_device_properties(index, &p), "get_device_properties");
    py::dict d;
    d["name"] = std::string(p.name);
    d["driver"] = std::string(p.driver);
    d["index"] = p.index;
    d["num_threads"] = p.num_threads;
    d["total_memory"] = p.total_memory;
    d["major"] = p.major;
    d["minor"] = p.minor;
    py::list features;
    const std::pair<uint32_t, const char*> names[] = {
        {LOOM_FEATURE_AVX2, "avx2"},
        {LOOM_FEATURE_AVX512F, "avx512f"},
        {LOOM_FEATURE_AVX512BF16, "avx512_bf16"},
        {LOOM_FEATURE_AMX_BF16, "amx_bf16"},
        {LOOM_FEATURE_AVX512FP16, "avx512_fp16"},
        {LOOM_FEATURE_FMA, "fma"}};
    for (const auto& [bit, name] : names)
      if (p.features & bit) features.append(name);
    d["features"] = features;
    d["host_addressable"] = (p.flags & LOOM_DEVICE_HOST_ADDRESSABLE) != 0;
    return d;
  });
  // torch.Event.elapsed_time accepts only exact torch.Event objects; this
  // serves torch.loom.Event, its subclass.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    auto* type = reinterpret_cast<PyObject*>(&THPEventType);
    TORCH_CHECK_TYPE(PyObject_IsInstance(start.ptr(), type) == 1 &&
                         PyObject_IsInstance(end.ptr(), type) == 1,
                     "elapsed_time expects two torch.Event objects");
    auto* a = reinterpret_cast<THPEvent*>(start.ptr());
    auto* b = reinterpret_cast<THPEvent*>(end.ptr());
    py::gil_scoped_release no_gil;
    return a->event.elapsedTime(b->event);
  });
  m.def("_synchronize", [](int index) {
    c10::DeviceIndex d = index < 0 ? current_device()
                                   : static_cast<c10::DeviceIndex>(index);
    check_device_index(d, "synchronize");
    py::gil_scoped_release no_gil;
    check(loom_device_synchronize(d), "synchronize");
  });
}

}  // namespace torch_loom::python
