// The one header every csrc/ file includes: C status -> Python exception,
// ATen tensor -> kernel descriptor, and kernel launch on the current stream.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include "loom/hal.h"

namespace torch_loom {

// Turns a failed status into the matching c10 exception (OOM ->
// c10::OutOfMemoryError, invalid argument -> c10::Error, index out of range
// -> c10::IndexError, unsupported -> c10::NotImplementedError), with `what`
// (the op or call) and loom_last_error() in the message. The only place that
// does so.
[[noreturn]] void raise_status(loom_status status, const char* what);

inline void check(loom_status status, const char* what) {
  if (status != LOOM_OK) raise_status(status, what);
}

// The loom_dtype of an ATen scalar type; throws (TypeError) naming `op` for
// a type the kernel ABI does not carry.
loom_dtype to_loom_dtype(at::ScalarType type, const char* op);

// Descriptor of a loom tensor: data pointer (storage offset applied), dtype,
// sizes and strides in elements. Throws if `t` is not on loom or has more
// than LOOM_MAX_DIMS dims.
loom_tensor describe(const at::Tensor& t, const char* op);

// The current stream of `device` (-1: the current device), borrowed.
loom_stream_t* current_stream(c10::DeviceIndex device = -1);

// The kernel named `name` (loom/kernels/*.h list the names); throws, naming
// it, when the driver has none. Handles live as long as the process: look
// each up once, with LOOM_KERNEL.
const loom_kernel_t* kernel(const char* name);

// What a launch tells the profiler beyond its tensors (whose bytes the
// runtime counts itself): the arithmetic of the whole launch where the
// adapter knows it (0: not counted), and whether it only sets memory (a
// fill, traced as a memset). Nothing reads it while the profiler is off.
struct LaunchInfo {
  uint64_t flops = 0;
  bool fill = false;
};

// Enqueues `kernel` over [0, range) in chunks of `grain` on the current
// stream of `device` (-1: the current device, which the registration guard
// of register.h has made the operands' device), after checking the stream
// for pending asynchronous errors. Descriptors and scalars are copied.
void launch(const char* name, const loom_kernel_t* kernel,
            c10::ArrayRef<loom_tensor> tensors,
            c10::ArrayRef<loom_scalar> scalars, int64_t range, int64_t grain,
            c10::DeviceIndex device = -1, LaunchInfo info = {});

// Fills `size` bytes at `out` with the plan the planner `planner` makes for
// these arguments (its family's contract in loom/kernels/ gives the plan's
// layout; tensor data is never read); throws, naming `op`, when it fails.
void plan(const char* op, const loom_kernel_t* planner,
          c10::ArrayRef<loom_tensor> tensors, c10::ArrayRef<loom_scalar> scalars,
          void* out, size_t size);

template <typename Plan>
Plan plan(const char* op, const loom_kernel_t* planner,
          c10::ArrayRef<loom_tensor> tensors, c10::ArrayRef<loom_scalar> scalars) {
  Plan p;
  plan(op, planner, tensors, scalars, &p, sizeof p);
  return p;
}

// The threads that run `t`'s device's launches (1 if it cannot say).
int64_t device_workers(const at::Tensor& t);

// An empty tensor on the meta device with `t`'s sizes, strides and dtype:
// running an op on it checks the arguments and sizes the result exactly as
// the CPU backend does, without computing.
at::Tensor meta_like(const at::Tensor& t);

// out= arguments: the dtype check the CPU backend makes ("op: expected out
// tensor to have dtype ..."), and an out= form built on the functional
// result `r` (checked, resized into, copied to).
void check_out_dtype(const at::Tensor& out, const at::Tensor& like, const char* op);
at::Tensor& copy_to_out(at::Tensor& out, const at::Tensor& r, const char* op);

// resize_output(out, like.sizes()), and where that resized `out`, `like`'s
// strides when it is dense (a channels-last result stays channels last),
// as the CPU's structured kernels lay out a resized out=. True if resized.
bool resize_output_as(const at::Tensor& out, const at::Tensor& like);

// An uninitialised result of `type` over the broadcast of `operands` (on
// their device), laid out as TensorIterator lays out an elementwise op's
// output: in the operands' memory format (channels last stays channels last).
at::Tensor empty_elementwise(at::TensorList operands, at::ScalarType type);

inline loom_scalar scalar_i(int64_t v) { loom_scalar s; s.i = v; return s; }
inline loom_scalar scalar_f(double v) { loom_scalar s; s.f = v; return s; }

}  // namespace torch_loom

// The handle of the kernel named by the string literal `name`, looked up on
// the first use at this call site.
#define LOOM_KERNEL(name)                                                  \
  ([]() -> const loom_kernel_t* {                                          \
    static const loom_kernel_t* const k = ::torch_loom::kernel(name);      \
    return k;                                                              \
  }())

