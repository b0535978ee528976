// Tensor creation: empty.memory_format and empty_strided allocate through
// the loom allocator on the requested device.
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "runtime/allocator.h"
#include "common.h"
#include "runtime/device.h"
#include "register.h"

namespace torch_loom {
namespace {

constexpr c10::DispatchKeySet kLoomKeys(c10::DispatchKey::PrivateUse1);

void check_options(const char* op, c10::Device device,
                   std::optional<c10::Layout> layout,
                   std::optional<bool> pin_memory) {
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, op,
              ": expected a loom device but got ", device);
  if (device.has_index()) check_device_index(device.index(), op);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": only strided tensors are supported on loom, got layout ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device_opt,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::Device device = c10::device_or_default(device_opt);
  check_options("empty", device, layout, pin_memory);
  return at::detail::empty_generic(size, device_allocator(), kLoomKeys,
                                   c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device_opt,
                         std::optional<bool> pin_memory) {
  c10::Device device = c10::device_or_default(device_opt);
  check_options("empty_strided", device, layout, pin_memory);
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           kLoomKeys,
                                           c10::dtype_or_default(dtype));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "empty.memory_format", empty_memory_format);
  LOOM_IMPL(m, "empty_strided", empty_strided);
}

}  // namespace torch_loom
