// The loom device allocator (c10::DeviceAllocator over loom_malloc/loom_free,
// registered for PrivateUse1) and the storage helpers built on it.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace torch_loom {

c10::DeviceAllocator* device_allocator();

// True once a tensor has been allocated on `device` in this process.
bool device_used(c10::DeviceIndex device);

// Defers reuse of the block behind `data` until `stream`'s work so far is
// done (Tensor.record_stream).
void record_stream(const c10::DataPtr& data, const c10::Stream& stream);

// Reallocates `storage` to `nbytes`, copying the old contents that fit in
// stream order (UntypedStorage.resize_, Tensor.resize_ growth).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace torch_loom
