// Kernels Inductor generates for loom graphs (python/torch_loom/_inductor/
// cpp_kernels.py): each loop nest of a generated C++ kernel has an entry
// point with loom's kernel ABI and a function giving its launch range. This
// registers the entry points in the kernel registry and launches them on
// the current stream, in order, with the arguments the compiled graph
// passes. Glue only.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/device_lazy_init.h>

#include "common.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

// A nest's launch range from the kernel's scalar arguments.
using RangeFn = int64_t (*)(const loom_scalar*);

// Chunks per worker a launch aims at at least: enough to balance uneven
// chunks.
constexpr int64_t kChunksPerWorker = 4;
// The tensor bytes a chunk covers at most (about those of a library
// pointwise chunk, LOOM_PW_GRAIN elements of an add): a large launch in
// a few huge chunks leaves a worker that is preempted or behind holding
// an eighth of it while the others wait.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

// The bytes `tensors` span (their elements, as the kernel sees them).
int64_t tensor_bytes(const std::vector<loom_tensor>& tensors) {
  int64_t bytes = 0;
  for (const loom_tensor& t : tensors) bytes += loom_tensor_numel(&t) * loom_dtype_size(t.dtype);
  return bytes;
}

// The registry's handle for `fn` under `name`: registered on first sight.
// The name is derived from the kernel's source, so a source compiled again
// (another graph, a later process's cache hit) finds its first registration,
// whose code stays loaded for the life of the process. NULL when the
// registry is full: the kernel is then launched by its function.
const loom_kernel_t* register_entry(const std::string& name, loom_kernel_fn fn) {
  const loom_kernel_t* k = nullptr;
  if (loom_kernel_lookup(name.c_str(), &k) == LOOM_OK) return k;
  if (loom_kernel_register(name.c_str(), fn) != LOOM_OK &&
      loom_kernel_lookup(name.c_str(), &k) == LOOM_OK)
    return k;  // registered meanwhile
  return loom_kernel_lookup(name.c_str(), &k) == LOOM_OK ? k : nullptr;
}

int64_t workers_of(int device) {
  static int64_t cached[64] = {};
  if (device >= 0 && device < 64 && cached[device]) return cached[device];
  loom_device_props props{};
  const int64_t n =
      loom_device_properties(device, &props) == LOOM_OK && props.num_threads > 0 ? props.num_threads : 1;
  if (device >= 0 && device < 64) cached[device] = n;
  return n;
}

class InductorKernel {
 public:
  struct Nest {
    std::string name;
    const loom_kernel_t* kernel;
    loom_kernel_fn fn;
    RangeFn range;
    bool serial;  // one chunk: its iterations add into shared outputs
  };

  // `kinds`: per argument, 't' a loom tensor, 'i' an integer, 'f' a float.
  // `nests`: (registry name, entry address, range-function address,
  // whether it runs as one chunk).
  InductorKernel(std::string kinds,
                 const std::vector<std::tuple<std::string, uintptr_t, uintptr_t, bool>>& nests)
      : kinds_(std::move(kinds)) {
    for (const auto& [name, entry, range, serial] : nests) {
      TORCH_CHECK(entry && range, "torch.compile on loom: kernel ", name, " has no entry point");
      auto fn = reinterpret_cast<loom_kernel_fn>(entry);
      nests_.push_back(
          {name, register_entry(name, fn), fn, reinterpret_cast<RangeFn>(range), serial});
    }
    for (char c : kinds_) num_tensors_ += c == 't';
  }

  // Launches every nest on the current stream of the tensors' device.
  void operator()(const py::args& args) const {
    const char* op = nests_.empty() ? "inductor kernel" : name_of(nests_[0]);
    TORCH_CHECK(args.size() == kinds_.size(), op, ": expected ", kinds_.size(),
                " arguments, got ", args.size());
    int device = -1;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      if (kinds_[i] != 't') continue;
      TORCH_CHECK_TYPE(THPVariable_Check(args[i].ptr()), op, ": argument ", i, " must be a tensor");
      const at::Tensor& t = THPVariable_Unpack(args[i].ptr());
      if (t.device().type() != c10::DeviceType::PrivateUse1) continue;
      if (device < 0) device = t.device().index();
      TORCH_CHECK(t.device().index() == device, op, ": all tensors must be on one loom device");
    }
    if (device < 0) device = current_device_index();
    std::vector<loom_tensor> tensors;
    tensors.reserve(num_tensors_);
    std::vector<loom_scalar> scalars;
    std::vector<at::Tensor> staged;  // CPU scalars copied to the device
    for (size_t i = 0; i < kinds_.size(); ++i) {
      PyObject* obj = args[i].ptr();
      if (kinds_[i] == 't') {
        const at::Tensor& t = THPVariable_Unpack(obj);
        if (t.device().is_cpu() && t.numel() == 1) {
          // A CPU scalar tensor, which eager code mixes with loom tensors:
          // the kernel reads it later, on the device, so it gets a copy
          // taken now (the copy is staged before returning).
          staged.push_back(t.to(c10::Device(c10::DeviceType::PrivateUse1,
                                            static_cast<c10::DeviceIndex>(device))));
          tensors.push_back(describe(staged.back(), op));
        } else {
          tensors.push_back(describe(t, op));
        }
      } else if (kinds_[i] == 'f') {
        scalars.push_back(scalar_f(args[i].cast<double>()));
      } else {
        scalars.push_back(scalar_i(args[i].cast<int64_t>()));
      }
    }
    loom_stream_t* stream = current_stream(static_cast<c10::DeviceIndex>(device));
    const int64_t workers = workers_of(device);
    const int64_t by_bytes = tensor_bytes(tensors) / kChunkBytes;
    for (const Nest& nest : nests_) {
      const int64_t range = nest.range(scalars.data());
      if (range <= 0) continue;
      loom_launch_desc desc{};
      desc.name = name_of(nest);
      desc.kernel = nest.kernel;
      desc.fn = nest.fn;
      desc.tensors = tensors.data();
      desc.num_tensors = static_cast<uint32_t>(tensors.size());
      desc.scalars = scalars.data();
      desc.num_scalars = static_cast<uint32_t>(scalars.size());
      desc.range = range;
      // Chunks split independent outputs only, so their size changes
      // nothing in the results; a nest that accumulates runs as one.
      const int64_t chunks = std::max(workers * kChunksPerWorker, by_bytes);
      desc.grain = nest.serial ? range : range <= chunks ? 1 : (range + chunks - 1) / chunks;
      desc.flags = LOOM_LAUNCH_MAY_RUN_INLINE;
      check(loom_launch(stream, &desc), desc.name);
    }
  }

  size_t num_nests() const { return nests_.size(); }
  bool registered(size_t i) const { return nests_.at(i).kernel != nullptr; }

 private:
  // Static for the process: errors raised later may name it.
  static const char* name_of(const Nest& n) {
    return n.kernel ? loom_kernel_name(n.kernel) : "inductor kernel";
  }
  static int current_device_index();

  std::string kinds_;
  std::vector<Nest> nests_;
  size_t num_tensors_ = 0;
};

int InductorKernel::current_device_index() {
  loom_stream_t* s = current_stream();
  return loom_stream_device(s);
}

// A tuple (or list) of Python integers as sizes or strides.
void int_tuple(PyObject* obj, const char* what, c10::SmallVector<int64_t, 8>& out) {
  const bool tuple = PyTuple_Check(obj);
  TORCH_CHECK_TYPE(tuple || PyList_Check(obj), "empty_strided_loom: ", what,
                   " must be a tuple of ints, got ", Py_TYPE(obj)->tp_name);
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = tuple ? PyTuple_GET_ITEM(obj, i) : PyList_GET_ITEM(obj, i);
    TORCH_CHECK_TYPE(PyLong_Check(item) || PyIndex_Check(item), "empty_strided_loom: ", what,
                     " must be a tuple of ints, got an element of type ", Py_TYPE(item)->tp_name);
    out[i] = PyLong_Check(item) ? PyLong_AsLongLong(item) : PyNumber_AsSsize_t(item, PyExc_OverflowError);
    if (out[i] == -1 && PyErr_Occurred()) throw py::error_already_set();
  }
}

// empty_strided(size, stride, device='loom', dtype=dtype) for the wrappers
// Inductor generates for loom graphs, as Inductor's empty_strided_cpu and
// _cuda are for theirs: the same allocation on the current loom device,
// without the Python argument parser's keyword handling.
py::object empty_strided_loom(py::handle size, py::handle stride, py::handle dtype) {
  c10::SmallVector<int64_t, 8> sizes, strides;
  int_tuple(size.ptr(), "size", sizes);
  int_tuple(stride.ptr(), "stride", strides);
  TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "empty_strided_loom: dtype must be a torch.dtype");
  TORCH_CHECK(sizes.size() == strides.size(), "empty_strided_loom: ", sizes.size(),
              " sizes but ", strides.size(), " strides");
  const auto scalar_type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  torch::utils::device_lazy_init(c10::DeviceType::PrivateUse1);
  at::Tensor t;
  {
    py::gil_scoped_release no_gil;
    t = at::empty_strided(sizes, strides,
                          at::TensorOptions().dtype(scalar_type).device(c10::DeviceType::PrivateUse1));
  }
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));
}

}  // namespace

void init_inductor(py::module& m) {
  m.def("_empty_strided_loom", &empty_strided_loom, py::arg("size"), py::arg("stride"),
        py::arg("dtype"));
  py::class_<InductorKernel>(m, "_InductorKernel")
      .def(py::init<std::string,
                    const std::vector<std::tuple<std::string, uintptr_t, uintptr_t, bool>>&>(),
           py::arg("kinds"), py::arg("nests"))
      .def("__call__", &InductorKernel::operator())
      .def_property_readonly("num_nests", &InductorKernel::num_nests)
      .def("registered", &InductorKernel::registered);
}

}  // namespace torch_loom::python
