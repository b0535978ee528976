// Loom storages in shared regions: the glue between c10::Storage and
// loom_ccl_shared_* (include/loom/ccl.h).
#include "distributed/shared_storage.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <atomic>

#include "common.h"
#include "loom/ccl.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace torch_loom::distributed {
namespace {

// Storages this process made shared: in place, or moved (one copy).
std::atomic<int64_t> shared_in_place{0}, shared_by_copy{0}, bytes_copied{0};

void release_shared(void* ctx) {
  loom_ccl_shared_release(static_cast<loom_ccl_shared_t*>(ctx));
}

loom_ccl_shared_t* shared_of(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  return data.get_deleter() == &release_shared
             ? static_cast<loom_ccl_shared_t*>(data.get_context())
             : nullptr;
}

c10::DataPtr wrap(loom_ccl_shared_t* shared) {
  return c10::DataPtr(loom_ccl_shared_ptr(shared), shared, &release_shared,
                      loom_device(static_cast<c10::DeviceIndex>(loom_ccl_shared_device(shared))));
}

void check_loom(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op,
              ": expected a loom tensor, got one on ", t.device());
}

}  // namespace

std::tuple<int64_t, int64_t, int64_t, int64_t> share_storage(const at::Tensor& t) {
  check_loom(t, "share_storage");
  const c10::Storage& storage = t.storage();
  const auto device = storage.device().index();
  loom_stream_t* stream = native_stream(get_current_stream(device));
  loom_ccl_shared_t* shared = shared_of(storage);
  if (!shared) {
    const size_t nbytes = storage.nbytes();
    TORCH_CHECK(nbytes > 0, "share_storage: the storage is empty");
    // Where the allocator's block fills a segment the driver can hand over,
    // the storage's memory becomes the region as it lies: no copy. The
    // writes enqueued so far finish first (the allocator forgets the block).
    check(loom_stream_synchronize(stream), "share_storage");
    const c10::DataPtr& data = storage.data_ptr();
    if (data.get_deleter() == c10::GetAllocator(c10::DeviceType::PrivateUse1)->raw_deleter() &&
        data.get() && loom_ccl_shared_adopt(data.get(), &shared) == LOOM_OK) {
      c10::DataPtr previous = storage.unsafeGetStorageImpl()->set_data_ptr(wrap(shared));
      (void)previous.release_context();  // the region owns the memory now
      shared_in_place.fetch_add(1);
      return {loom_ccl_shared_fd(shared), static_cast<int64_t>(loom_ccl_shared_size(shared)),
              loom_ccl_shared_device(shared), static_cast<int64_t>(nbytes)};
    }
    loom_clear_error();
    shared = nullptr;
    check(loom_ccl_shared_create(device, nbytes, &shared), "share_storage");
    c10::DataPtr fresh = wrap(shared);  // owns the region from here on
    check(loom_memcpy(stream, fresh.get(), storage.data(), nbytes), "share_storage");
    shared_by_copy.fetch_add(1);
    bytes_copied.fetch_add(static_cast<int64_t>(nbytes));
    // The old block returns to the allocator, in this stream's order.
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  }
  check(loom_stream_synchronize(stream), "share_storage");
  return {loom_ccl_shared_fd(shared), static_cast<int64_t>(loom_ccl_shared_size(shared)),
          loom_ccl_shared_device(shared), static_cast<int64_t>(storage.nbytes())};
}

at::Tensor open_shared_storage(int64_t fd, int64_t nbytes, int64_t device, int64_t used) {
  TORCH_CHECK(nbytes > 0, "open_shared_storage: nbytes must be positive, got ", nbytes);
  if (used < 0) used = nbytes;
  TORCH_CHECK(used <= nbytes, "open_shared_storage: the storage's ", used,
              " bytes exceed the region's ", nbytes);
  TORCH_CHECK(device >= 0 && device < loom_device_count(), "open_shared_storage: no device loom:",
              device, " in this process (", loom_device_count(), " devices)");
  loom_ccl_shared_t* shared = nullptr;
  check(loom_ccl_shared_open(static_cast<int>(device), static_cast<int>(fd),
                             static_cast<size_t>(nbytes), &shared),
        "open_shared_storage");
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), static_cast<size_t>(used), wrap(shared),
      /*allocator=*/nullptr, /*resizable=*/false));
  at::Tensor out = at::empty({0}, at::TensorOptions()
                                      .dtype(at::kByte)
                                      .device(loom_device(static_cast<c10::DeviceIndex>(device))));
  out.set_(storage, 0, {used}, {1});
  return out;
}

bool is_shared_storage(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1 && t.has_storage() &&
         shared_of(t.storage()) != nullptr;
}

std::tuple<int64_t, int64_t, int64_t> sharing_counts() {
  return {shared_in_place.load(), shared_by_copy.load(), bytes_copied.load()};
}

}  // namespace torch_loom::distributed
