// The launch of a torch_loom.tile kernel (python/torch_loom/tile/jit.py):
// `kernel[grid](*args, **kwargs)` binds the arguments to the kernel's
// parameters, computes the specialisation key, finds the compiled entry and
// enqueues it on the current stream, in one call from Python. Anything it
// does not handle -- a key with no entry yet (the first launch of a
// specialisation, which traces and compiles), the interpreter
// (LOOM_TILE_INTERPRET), arguments that need Python's binding (a missing
// argument, one given twice), an unusual grid -- goes to the kernel's Python
// launch, JITFunction._launch, which raises what it raises. Glue only.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include "common.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

// A compiled specialisation: the registry's handle and which arguments are
// its tensors and its run-time scalars.
struct TileEntry {
  const loom_kernel_t* kernel;
  const char* name;  // the registry's copy, static: errors may name it later
  std::vector<int> tensors, scalars;
  int64_t chunk_cap;  // programs a chunk holds at most (by the work each stores)
};

// A kernel's parameters and its entries by key (held by JITFunction as a
// capsule; it holds nothing that refers back to the kernel).
struct TileState {
  PyObject* name = nullptr;      // str: the kernel's, for errors
  PyObject* params = nullptr;    // tuple of str
  PyObject* defaults = nullptr;  // tuple, `empty` where none
  PyObject* empty = nullptr;     // inspect.Parameter.empty
  PyObject* entries = nullptr;   // dict: key -> capsule of TileEntry
  std::vector<char> is_const;    // per parameter: annotated tl.constexpr

  ~TileState() {
    Py_XDECREF(name);
    Py_XDECREF(params);
    Py_XDECREF(defaults);
    Py_XDECREF(empty);
    Py_XDECREF(entries);
  }
};

constexpr const char* kStateCapsule = "torch_loom.tile.state";
constexpr const char* kEntryCapsule = "torch_loom.tile.entry";

// Set once by _tile_setup: tl.constexpr's type, os.environ's bytes dict
// (NULL where the platform has none) and tile.interpreting.
PyObject* g_constexpr_type = nullptr;
PyObject* g_environ = nullptr;
PyObject* g_interpreting = nullptr;
PyObject* g_interpret_name = nullptr;  // b"LOOM_TILE_INTERPRET"
PyObject* g_half = nullptr;            // 0.5: the key of a float argument
PyObject* g_c = nullptr;               // "c": other values are ("c", v)
PyObject* g_value = nullptr;           // "value"
PyObject* g_launch = nullptr;          // "_launch"

void free_state(PyObject* capsule) {
  delete static_cast<TileState*>(PyCapsule_GetPointer(capsule, kStateCapsule));
}

void free_entry(PyObject* capsule) {
  delete static_cast<TileEntry*>(PyCapsule_GetPointer(capsule, kEntryCapsule));
}

TileState* state_of(PyObject* capsule) {
  auto* s = static_cast<TileState*>(PyCapsule_GetPointer(capsule, kStateCapsule));
  if (!s) throw py::error_already_set();
  return s;
}

// Whether LOOM_TILE_INTERPRET is set, as tile.interpreting() reads it (at
// every launch: a test may set it for a while). -1 on error.
int interpreting() {
  if (g_environ) {
    PyObject* v = PyDict_GetItemWithError(g_environ, g_interpret_name);
    if (!v) return PyErr_Occurred() ? -1 : 0;
    if (!PyBytes_Check(v)) return 1;
    const Py_ssize_t n = PyBytes_GET_SIZE(v);
    return !(n == 0 || (n == 1 && PyBytes_AS_STRING(v)[0] == '0'));
  }
  PyObject* r = PyObject_CallNoArgs(g_interpreting);
  if (!r) return -1;
  const int truth = PyObject_IsTrue(r);
  Py_DECREF(r);
  return truth;
}

// The specialisation key of the bound values (one per parameter): per
// parameter a constexpr's value; a tensor's dtype and whether its data is
// 16-byte aligned (3 + 2 * scalar type + aligned); an int's kind (1: equal
// to 1, 0: in int32's range, 2: beyond); 0.5 for a float; ("c", v) for
// anything else; then whether no two tensors share a storage (loads may then
// read in place). New reference, NULL with an exception set.
PyObject* make_key(const TileState& s, PyObject* const* values, Py_ssize_t n) {
  PyObject* key = PyTuple_New(n + 1);
  if (!key) return nullptr;
  c10::SmallVector<const void*, 8> storages;
  bool distinct = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = values[i];
    PyObject* item;
    if (s.is_const[i]) {
      if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(g_constexpr_type))) {
        item = PyObject_GetAttr(v, g_value);
        if (!item) {
          Py_DECREF(key);
          return nullptr;
        }
      } else {
        Py_INCREF(v);
        item = v;
      }
    } else if (THPVariable_Check(v)) {
      const at::Tensor& t = THPVariable_Unpack(v);
      if (!t.defined() || !t.has_storage()) {
        Py_DECREF(key);
        PyErr_Format(PyExc_TypeError, "%U: argument '%U' is a tensor without storage; kernels take dense tensors",
                     s.name, PyTuple_GET_ITEM(s.params, i));
        return nullptr;
      }
      const bool aligned = reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
      item = PyLong_FromLong(3 + 2 * static_cast<long>(t.scalar_type()) + (aligned ? 1 : 0));
      const void* storage = t.storage().data();
      for (const void* p : storages) distinct = distinct && p != storage;
      storages.push_back(storage);
    } else if (PyLong_CheckExact(v)) {
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (x == -1 && PyErr_Occurred()) {
        Py_DECREF(key);
        return nullptr;
      }
      item = PyLong_FromLong(overflow ? 2 : x == 1 ? 1 : (x >= INT32_MIN && x <= INT32_MAX) ? 0 : 2);
    } else if (PyFloat_CheckExact(v)) {
      Py_INCREF(g_half);
      item = g_half;
    } else {
      item = PyTuple_Pack(2, g_c, v);
    }
    if (!item) {
      Py_DECREF(key);
      return nullptr;
    }
    PyTuple_SET_ITEM(key, i, item);
  }
  PyObject* flag = distinct ? Py_True : Py_False;
  Py_INCREF(flag);
  PyTuple_SET_ITEM(key, n, flag);
  return key;
}

// A grid of exact ints (an int, or a tuple or list of 1 to 3 non-negative
// ints below 2^31 whose product fits int64) as three sizes; false for
// anything else (the Python launch converts or rejects it).
bool read_grid(PyObject* grid, int64_t g[3]) {
  g[0] = g[1] = g[2] = 1;
  auto one = [](PyObject* o, int64_t* out) {
    if (!PyLong_CheckExact(o)) return false;
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || x < 0 || x > INT32_MAX) {
      PyErr_Clear();
      return false;
    }
    *out = x;
    return true;
  };
  if (PyLong_CheckExact(grid)) return one(grid, &g[0]);
  if (!PyTuple_CheckExact(grid) && !PyList_CheckExact(grid)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(grid);
  if (n < 1 || n > 3) return false;
  PyObject** items = PySequence_Fast_ITEMS(grid);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!one(items[i], &g[i])) return false;
  int64_t total;
  return !__builtin_mul_overflow(g[0], g[1], &total) && !__builtin_mul_overflow(total, g[2], &total);
}

// Enqueues `e` over the grid with the bound values.
void enqueue(const TileEntry& e, const int64_t g[3], PyObject* const* values) {
  const int64_t total = g[0] * g[1] * g[2];
  if (total == 0) return;
  c10::SmallVector<loom_tensor, 8> descs;
  c10::DeviceIndex device = -1;
  for (int i : e.tensors) {
    const at::Tensor& t = THPVariable_Unpack(values[i]);
    descs.push_back(describe(t, e.name));
    if (descs.size() == 1) {
      device = t.device().index();
    } else {
      TORCH_CHECK(t.device().index() == device, e.name, ": all tensors must be on one device, got ",
                  THPVariable_Unpack(values[e.tensors[0]]).device(), " and ", t.device());
    }
  }
  c10::SmallVector<loom_scalar, 16> scalars{scalar_i(g[0]), scalar_i(g[1]), scalar_i(g[2])};
  for (int i : e.scalars) {
    PyObject* v = values[i];
    if (PyFloat_Check(v)) {
      scalars.push_back(scalar_f(PyFloat_AS_DOUBLE(v)));
    } else {
      const long long x = PyLong_AsLongLong(v);
      if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
      scalars.push_back(scalar_i(x));
    }
  }
  const int64_t grain = std::max<int64_t>(1, std::min(total / 32, e.chunk_cap));
  launch(e.name, e.kernel, descs, scalars, total, grain, device);
}

// `kernel[grid]`: calling it launches.
struct TileLaunch {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;     // the JITFunction (its _launch is the Python path)
  PyObject* state;  // its capsule
  PyObject* grid;
};

PyObject* python_launch(TileLaunch* self, PyObject* grid, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) {
  PyObject* tuple = PyTuple_New(nargs);
  if (!tuple) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(tuple, i, args[i]);
  }
  PyObject* kwargs = PyDict_New();
  if (!kwargs) {
    Py_DECREF(tuple);
    return nullptr;
  }
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, k), args[nargs + k]) < 0) {
      Py_DECREF(tuple);
      Py_DECREF(kwargs);
      return nullptr;
    }
  }
  PyObject* r = PyObject_CallMethodObjArgs(self->fn, g_launch, grid, tuple, kwargs, nullptr);
  Py_DECREF(tuple);
  Py_DECREF(kwargs);
  return r;
}

PyObject* tile_launch_call(PyObject* obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  auto* self = reinterpret_cast<TileLaunch*>(obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const int interp = interpreting();
  if (interp < 0) return nullptr;
  if (interp) return python_launch(self, self->grid, args, nargs, kwnames);
  const TileState& s = *state_of(self->state);
  const Py_ssize_t n = PyTuple_GET_SIZE(s.params);
  if (nargs > n) return python_launch(self, self->grid, args, nargs, kwnames);
  // Bind: positional, then keywords by name (others are launch options:
  // num_warps ...), then defaults.
  c10::SmallVector<PyObject*, 16> values(n, nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) values[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* kw = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t j = nargs + k < n && PyTuple_GET_ITEM(s.params, nargs + k) == kw ? nargs + k : -1;
    for (Py_ssize_t p = 0; j < 0 && p < n; ++p) {
      PyObject* name = PyTuple_GET_ITEM(s.params, p);
      if (name == kw || PyUnicode_Compare(name, kw) == 0) j = p;
    }
    if (j < 0) continue;
    if (values[j]) return python_launch(self, self->grid, args, nargs, kwnames);
    values[j] = args[nargs + k];
  }
  if (PyErr_Occurred()) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (values[i]) continue;
    values[i] = PyTuple_GET_ITEM(s.defaults, i);
    if (values[i] == s.empty) return python_launch(self, self->grid, args, nargs, kwnames);
  }
  // The grid; a callable one is called with the arguments by name.
  PyObject* grid = self->grid;
  py::object called;
  if (!PyLong_CheckExact(grid) && !PyTuple_CheckExact(grid) && !PyList_CheckExact(grid) &&
      PyCallable_Check(grid)) {
    py::dict meta;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (PyDict_SetItem(meta.ptr(), PyTuple_GET_ITEM(s.params, i), values[i]) < 0) return nullptr;
    for (Py_ssize_t k = 0; k < nkw; ++k)
      if (PyDict_SetItem(meta.ptr(), PyTuple_GET_ITEM(kwnames, k), args[nargs + k]) < 0) return nullptr;
    called = py::reinterpret_steal<py::object>(PyObject_CallOneArg(grid, meta.ptr()));
    if (!called) return nullptr;
    grid = called.ptr();
  }
  int64_t g[3];
  if (!read_grid(grid, g)) return python_launch(self, grid, args, nargs, kwnames);
  PyObject* key = make_key(s, values.data(), n);
  if (!key) return nullptr;
  PyObject* capsule = PyDict_GetItemWithError(s.entries, key);
  Py_DECREF(key);
  if (!capsule) {
    PyErr_Clear();  // a miss, or an unhashable constexpr: the Python launch says which
    return python_launch(self, grid, args, nargs, kwnames);
  }
  auto* e = static_cast<TileEntry*>(PyCapsule_GetPointer(capsule, kEntryCapsule));
  if (!e) return nullptr;
  enqueue(*e, g, values.data());
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* tile_launch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *state, *grid;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "_TileLaunch(fn, state, grid)");
    return nullptr;
  }
  if (!PyArg_UnpackTuple(args, "_TileLaunch", 3, 3, &fn, &state, &grid)) return nullptr;
  if (!PyCapsule_IsValid(state, kStateCapsule)) {
    PyErr_SetString(PyExc_TypeError, "_TileLaunch: state must be a kernel's _tile_state");
    return nullptr;
  }
  auto* self = reinterpret_cast<TileLaunch*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  self->vectorcall = tile_launch_call;
  Py_INCREF(fn);
  Py_INCREF(state);
  Py_INCREF(grid);
  self->fn = fn;
  self->state = state;
  self->grid = grid;
  return reinterpret_cast<PyObject*>(self);
}

void tile_launch_dealloc(PyObject* obj) {
  auto* self = reinterpret_cast<TileLaunch*>(obj);
  Py_XDECREF(self->fn);
  Py_XDECREF(self->state);
  Py_XDECREF(self->grid);
  Py_TYPE(obj)->tp_free(obj);
}

PyTypeObject tile_launch_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "torch_loom._C._TileLaunch";
  t.tp_basicsize = sizeof(TileLaunch);
  t.tp_dealloc = tile_launch_dealloc;
  t.tp_vectorcall_offset = offsetof(TileLaunch, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "kernel[grid]: calling it launches the kernel over the grid.";
  t.tp_new = tile_launch_new;
  return t;
}();

py::object state_new(py::str name, py::tuple params, py::tuple consts, py::tuple defaults, py::object empty) {
  TORCH_CHECK_VALUE(consts.size() == params.size() && defaults.size() == params.size(),
                    "_tile_state: params, consts and defaults differ in length");
  auto s = std::make_unique<TileState>();
  s->name = name.inc_ref().ptr();
  s->params = params.inc_ref().ptr();
  s->defaults = defaults.inc_ref().ptr();
  s->empty = empty.inc_ref().ptr();
  s->entries = PyDict_New();
  if (!s->entries) throw py::error_already_set();
  for (auto c : consts) s->is_const.push_back(py::cast<bool>(c));
  PyObject* capsule = PyCapsule_New(s.get(), kStateCapsule, free_state);
  if (!capsule) throw py::error_already_set();
  s.release();
  return py::reinterpret_steal<py::object>(capsule);
}

py::object key_of(py::handle state, py::sequence values) {
  const TileState& s = *state_of(state.ptr());
  py::tuple v(values);
  TORCH_CHECK_VALUE(static_cast<Py_ssize_t>(v.size()) == PyTuple_GET_SIZE(s.params),
                    "_tile_key: one value per parameter");
  PyObject* key = make_key(s, &PySequence_Fast_ITEMS(v.ptr())[0], v.size());
  if (!key) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(key);
}

void register_entry(py::handle state, py::object key, const std::string& name, std::vector<int> tensors,
                    std::vector<int> scalars, int64_t chunk_cap) {
  const TileState& s = *state_of(state.ptr());
  const Py_ssize_t n = PyTuple_GET_SIZE(s.params);
  for (int i : tensors) TORCH_CHECK_VALUE(i >= 0 && i < n, "_tile_register: tensor index out of range");
  for (int i : scalars) TORCH_CHECK_VALUE(i >= 0 && i < n, "_tile_register: scalar index out of range");
  auto e = std::make_unique<TileEntry>();
  e->kernel = kernel(name.c_str());
  e->name = loom_kernel_name(e->kernel);
  e->tensors = std::move(tensors);
  e->scalars = std::move(scalars);
  e->chunk_cap = chunk_cap;
  PyObject* capsule = PyCapsule_New(e.get(), kEntryCapsule, free_entry);
  if (!capsule) throw py::error_already_set();
  e.release();
  const int st = PyDict_SetItem(s.entries, key.ptr(), capsule);
  Py_DECREF(capsule);
  if (st < 0) throw py::error_already_set();
}

void setup(py::object constexpr_type, py::object environ, py::object interpreting_fn) {
  TORCH_CHECK_TYPE(PyType_Check(constexpr_type.ptr()), "_tile_setup: constexpr_type must be a type");
  auto replace = [](PyObject*& slot, PyObject* v) {
    Py_XINCREF(v);
    Py_XDECREF(slot);
    slot = v;
  };
  replace(g_constexpr_type, constexpr_type.ptr());
  replace(g_environ, PyDict_Check(environ.ptr()) ? environ.ptr() : nullptr);
  replace(g_interpreting, interpreting_fn.ptr());
}

}  // namespace

void init_tile(py::module& m) {
  g_interpret_name = PyBytes_FromString("LOOM_TILE_INTERPRET");
  g_half = PyFloat_FromDouble(0.5);
  g_c = PyUnicode_InternFromString("c");
  g_value = PyUnicode_InternFromString("value");
  g_launch = PyUnicode_InternFromString("_launch");
  if (!g_interpret_name || !g_half || !g_c || !g_value || !g_launch || PyType_Ready(&tile_launch_type) < 0)
    throw py::error_already_set();
  Py_INCREF(&tile_launch_type);
  m.add_object("_TileLaunch", py::handle(reinterpret_cast<PyObject*>(&tile_launch_type)));
  // Once, at import: tl.constexpr's type, os.environ's bytes dict (or None)
  // and tile.interpreting (read where that dict is None).
  m.def("_tile_setup", &setup, py::arg("constexpr_type"), py::arg("environ"), py::arg("interpreting"));
  // A kernel's state: its name, parameter names, which are constexprs,
  // their defaults and the marker of none.
  m.def("_tile_state", &state_new, py::arg("name"), py::arg("params"), py::arg("consts"),
        py::arg("defaults"), py::arg("empty"));
  // The specialisation key of one value per parameter.
  m.def("_tile_key", &key_of, py::arg("state"), py::arg("values"));
  // Makes `key` launch the registered kernel `name` with these arguments
  // as tensors and scalars (after the grid's three sizes), chunks holding
  // at most `chunk_cap` programs.
  m.def("_tile_register", &register_entry, py::arg("state"), py::arg("key"), py::arg("name"),
        py::arg("tensors"), py::arg("scalars"), py::arg("chunk_cap"));
}

}  // namespace torch_loom::python
