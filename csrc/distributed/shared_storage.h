// Loom storages shared between processes (torch.multiprocessing): the
// producer moves a storage into a shared region once (loom/ccl.h,
// loom_ccl_shared_*), and every process that receives its descriptor maps
// the same memory as a loom storage of its own.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace torch_loom::distributed {

// (descriptor, region bytes, device, storage bytes) of the shared region
// behind `t`'s storage, making it first if the storage is not yet shared:
// the storage's own memory where the allocator can hand over the segment
// it fills (LOOM_SHAREABLE_MEMORY=1 on the host driver: no copy), else a
// fresh region the storage moves into (one device copy, as share_memory_()
// makes of a CPU tensor). Either way the storage keeps its identity.
// Waits for the current stream, so a receiver sees what was enqueued
// before. The descriptor belongs to the storage: the caller duplicates it.
std::tuple<int64_t, int64_t, int64_t, int64_t> share_storage(const at::Tensor& t);

// A uint8 loom tensor of `used` bytes (-1: all) over the region of `nbytes`
// behind `fd` (which the caller keeps), on loom:<device>.
at::Tensor open_shared_storage(int64_t fd, int64_t nbytes, int64_t device, int64_t used = -1);

// (storages shared in place, storages moved, bytes moved) by share_storage
// in this process so far.
std::tuple<int64_t, int64_t, int64_t> sharing_counts();

// Whether `t`'s storage is such a region.
bool is_shared_storage(const at::Tensor& t);

}  // namespace torch_loom::distributed
