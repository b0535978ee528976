// resize_ and set_: change a tensor's metadata and, when it needs more
// bytes than its storage holds, grow the storage through the loom allocator
// with a stream-ordered copy of the old contents.
#include <ATen/native/Resize.h>
#include <ATen/ops/set_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "runtime/allocator.h"
#include "common.h"
#include "register.h"

namespace torch_loom {
namespace {

void ensure_storage(c10::TensorImpl* impl) {
  if (impl->numel() == 0) return;
  size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(),
      impl->storage_offset());
  const c10::Storage& storage = impl->unsafe_storage();
  if (needed > storage.nbytes()) resize_storage_bytes(storage, needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, C10_AS_INTARRAYREF_SLOW(size),
                               std::nullopt, /*resize_storage=*/false);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(impl);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage storage,
                               c10::SymInt storage_offset,
                               c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
  int64_t offset = storage_offset.guard_int(__FILE__, __LINE__);
  c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  c10::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkSetStorage(self, std::move(storage), offset, sizes,
                              strides);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt;
  if (strides.data() != nullptr) stride_opt = strides;
  at::native::resize_impl_cpu_(impl, sizes, stride_opt,
                               /*resize_storage=*/false);
  ensure_storage(impl);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(),
                       /*resizable=*/true);
  return self.set_(storage, 0, {0}, {});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "resize_", resize_);
  LOOM_IMPL(m, "set_.source_Storage_storage_offset", set_storage_offset);
  LOOM_IMPL(m, "set_.source_Storage", set_storage);
  LOOM_IMPL(m, "set_.source_Tensor", set_tensor);
  LOOM_IMPL(m, "set_", set_empty);
}

}  // namespace torch_loom
