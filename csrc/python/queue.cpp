// Streams' bounded queues (LOOM_QUEUE_DEPTH): a Python thread that submits
// to a full queue waits without the GIL, so that other Python threads run
// meanwhile (and a host step that needs the GIL on a device thread can
// finish); and the count of such waits per stream.
#include <Python.h>

#include "common.h"
#include "runtime/stream.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_loom::python {
namespace {

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Releases the GIL if this thread holds it; the thread state to restore.
void* release_gil() {
  if (!Py_IsInitialized() || finalizing() || !PyGILState_Check()) return nullptr;
  return PyEval_SaveThread();
}

void restore_gil(void* token) {
  if (token) PyEval_RestoreThread(static_cast<PyThreadState*>(token));
}

}  // namespace

void init_queue(py::module& m) {
  loom_set_queue_wait_hooks(release_gil, restore_gil);
  m.def("_stream_queue_waits", [](const c10::Stream& stream) {
    return loom_stream_queue_waits(native_stream(stream));
  });
}

}  // namespace torch_loom::python
