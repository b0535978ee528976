// Pinned host memory: at::HostAllocator over loom_host_*, registered for
// PrivateUse1 (pin_memory, is_pinned, torch.accelerator.empty_host_cache).
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace torch_loom {

at::HostAllocator* host_allocator();

// True when `storage` was allocated by the pinned host allocator (so a copy
// from or to it may run asynchronously).
bool is_pinned_storage(const c10::Storage& storage);

// Keeps the pinned block of `storage` from being reused until the work
// enqueued on `stream` so far has completed.
void record_host_use(const c10::Storage& storage, const c10::Stream& stream);

}  // namespace torch_loom
