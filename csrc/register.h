// Registration of loom kernels with a device guard.
//
// The dispatcher gives out-of-tree kernels no device guard (CUDA's generated
// wrappers hold one on the device of the first tensor argument). Without it
// everything that works on "the current device" inside a kernel (allocation
// through c10's copy-on-write materialisation, the current stream, the
// default generator) would act on the current device, not on the operands'.
// Every loom kernel is registered through LOOM_IMPL / impl_boxed below, which
// make the device of the first loom tensor argument (else the `device`
// argument of a factory) current for the call. Switching costs only when the
// device differs from the current one.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <utility>

#include "runtime/device.h"

namespace torch_loom {
namespace guard_detail {

// The first loom device among a call's tensor arguments, and the first
// explicit device argument (factories).
struct Found {
  c10::DeviceIndex tensor = -1;
  c10::DeviceIndex device = -1;
  c10::DeviceIndex index() const { return tensor >= 0 ? tensor : device; }
};

inline void take(Found& f, const at::Tensor& t) {
  if (f.tensor < 0 && t.defined() && t.device().is_privateuseone())
    f.tensor = t.device().index();
}
inline void take(Found& f, const std::optional<at::Tensor>& t) {
  if (t) take(f, *t);
}
inline void take(Found& f, at::TensorList ts) {
  for (const at::Tensor& t : ts) {
    if (f.tensor >= 0) return;
    take(f, t);
  }
}
inline void take(Found& f, const at::ITensorListRef& ts) {
  for (const at::Tensor& t : ts) {
    if (f.tensor >= 0) return;
    take(f, t);
  }
}
inline void take(Found& f, const c10::List<std::optional<at::Tensor>>& ts) {
  for (const std::optional<at::Tensor>& t : ts) {
    if (f.tensor >= 0) return;
    take(f, t);
  }
}
inline void take(Found& f, const std::optional<c10::Device>& d) {
  if (f.device < 0 && d && d->is_privateuseone() && d->has_index())
    f.device = d->index();
}
// Every other argument type carries no device.
template <class T>
inline void take(Found&, const T&) {}

// Makes `index` current for the guard's lifetime, when it is a device that
// is not current already.
inline void enter(c10::OptionalDeviceGuard& guard, c10::DeviceIndex index) {
  if (index >= 0 && index != current_device())
    guard.reset_device(loom_device(index));
}

template <class FnPtr, FnPtr Fn>
struct Guarded;

template <class R, class... A, R (*Fn)(A...)>
struct Guarded<R (*)(A...), Fn> {
  static R call(A... args) {
    Found found;
    (take(found, args), ...);
    c10::OptionalDeviceGuard guard;
    enter(guard, found.index());
    return Fn(std::forward<A>(args)...);
  }
};

// The device of a boxed call's tensor arguments (the top `num_args` values
// of the stack).
c10::DeviceIndex stack_device(const torch::jit::Stack& stack, size_t num_args);

template <class Kernel>
struct GuardedBoxed final : c10::OperatorKernel {
  template <class... A>
  explicit GuardedBoxed(A&&... a) : inner(std::forward<A>(a)...) {}
  Kernel inner;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    c10::OptionalDeviceGuard guard;
    enter(guard, stack_device(*stack, op.schema().arguments().size()));
    inner(op, keys, stack);
  }
};

}  // namespace guard_detail

// Registers a boxed kernel functor (an OperatorKernel with the boxed call
// operator) under `name`, behind the device guard. `a` constructs it.
template <class Kernel, class... A>
void impl_boxed(torch::Library& m, const char* name, A&&... a) {
  m.impl(name, torch::CppFunction::makeFromBoxedFunctor(
                   std::make_unique<guard_detail::GuardedBoxed<Kernel>>(
                       std::forward<A>(a)...)));
}

}  // namespace torch_loom

// m.impl(name, fn) behind the device guard; `fn` names one function (cast
// an overloaded name to its signature first).
#define LOOM_IMPL(m, name, fn)                                              \
  (m).impl(name, TORCH_FN((::torch_loom::guard_detail::Guarded<            \
                           decltype(&(fn)), &(fn)>::call)))
