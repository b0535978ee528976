// ProcessGroupLoom: the communicator, calls and their Work, coalescing,
// splitting. The collectives themselves are in collectives.cpp.
#include "distributed/process_group_loom.h"

#include <algorithm>
#include <cstring>

#include "common.h"
#include "distributed/shared_storage.h"
#include "distributed/work_loom.h"
#include "loom/driver.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace torch_loom::distributed {

ProcessGroupLoom::ProcessGroupLoom(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                   c10::intrusive_ptr<LoomOptions> options)
    : c10d::Backend(rank, size), store_(std::move(store)), options_(std::move(options)) {
  TORCH_CHECK(options_, "loomccl: no options");
  // One of several processes: device memory allocated from now on can be
  // shared with them where it lies (LOOM_SHAREABLE_MEMORY unset).
  if (size > 1) loom_host_memory_join_job();
  discover_hosts();
}

ProcessGroupLoom::~ProcessGroupLoom() { shutdown(); }

void ProcessGroupLoom::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (coalesced_work_) {
    loom_ccl_work_release(coalesced_work_);
    coalesced_work_ = nullptr;
  }
  // Waits for the communication stream (every wait in it is bounded by
  // the timeout), tells the peers this rank left, unmaps the segment.
  loom_ccl_comm_destroy(comm_);
  comm_ = nullptr;
  // The stream is done: the host buffers of collectives between hosts too.
  for (auto& entry : h_inflight_) loom_event_release(entry.first);
  h_inflight_.clear();
  h_keep_.clear();
  h_works_.clear();
}

void ProcessGroupLoom::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  loom_ccl_comm_abort(comm_);
}

c10::Device ProcessGroupLoom::default_device() const {
  if (comm_) return stream_.device();
  if (auto bound = getBoundDeviceId()) return *bound;
  return loom_device(current_device());
}

loom_ccl_comm_t* ProcessGroupLoom::comm(c10::Device device) {
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1,
              "loomccl: expected loom tensors, got tensors on ", device);
  const c10::DeviceIndex index = device.has_index() ? device.index() : current_device();
  check_device_index(index, "loomccl");
  if (comm_) {
    TORCH_CHECK(index == stream_.device_index(), "loomccl: this process group communicates on ",
                stream_.device(), "; got tensors on loom:", static_cast<int>(index),
                " (one device per process and group)");
    return comm_;
  }
  // The job id: the host's first rank makes it, the others wait for it in
  // the Store (the group's own prefix: one key per group and host). The
  // communicator joins the ranks of this host.
  const std::string key =
      across_hosts() ? "loomccl/job/" + std::to_string(topo_.host) : std::string("loomccl/job");
  char job[LOOM_CCL_JOB_ID_LEN + 1] = {0};
  if (topo_.local_rank == 0) {
    check(loom_ccl_make_job_id(job), "loomccl");
    store_->set(key, std::vector<uint8_t>(job, job + LOOM_CCL_JOB_ID_LEN));
  } else {
    const std::vector<uint8_t> value = store_->get(key);
    TORCH_CHECK(value.size() == LOOM_CCL_JOB_ID_LEN, "loomccl: bad job id in the store");
    std::memcpy(job, value.data(), LOOM_CCL_JOB_ID_LEN);
  }
  c10::Stream stream = stream_from_pool(index, -1);
  loom_ccl_config config{};
  config.rank = topo_.local_rank;
  config.world_size = topo_.local_size;
  std::memcpy(config.job_id, job, sizeof config.job_id);
  config.stream = native_stream(stream);
  config.timeout_ms = static_cast<uint64_t>(std::max<int64_t>(1, options_->timeout.count()));
  config.buffer_bytes = static_cast<size_t>(std::max<int64_t>(0, options_->buffer_bytes));
  loom_device_props props{};
  check(loom_device_properties(index, &props), "loomccl");
  host_addressable_ = (props.flags & LOOM_DEVICE_HOST_ADDRESSABLE) != 0;
  check(loom_ccl_comm_create(&config, &comm_), "loomccl: joining the process group");
  stream_ = stream;
  return comm_;
}

void ProcessGroupLoom::eagerConnectSingleDevice(at::Device device) {
  std::lock_guard<std::mutex> lock(mutex_);
  comm(device);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupLoom::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  const auto it = std::find(sorted.begin(), sorted.end(), rank_);
  if (it == sorted.end()) return nullptr;
  auto options = c10::make_intrusive<LoomOptions>(opts ? opts->timeout : options_->timeout);
  if (auto* ours = dynamic_cast<LoomOptions*>(opts.get())) options->buffer_bytes = ours->buffer_bytes;
  else options->buffer_bytes = options_->buffer_bytes;
  if (opts) {
    options->group_name = opts->group_name;
    options->group_desc = opts->group_desc;
  }
  auto child = c10::make_intrusive<ProcessGroupLoom>(
      store, static_cast<int>(it - sorted.begin()), static_cast<int>(sorted.size()), options);
  child->setBoundDeviceId(getBoundDeviceId());
  return child;
}

// ---- coalescing -------------------------------------------------------------------

void ProcessGroupLoom::startCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!coalescing_ && !h_coalescing_, "loomccl: startCoalescing while coalescing");
  if (across_hosts()) {
    // Each call is enqueued as it comes; the Work of the group ends after
    // the last and waits for them all.
    h_coalescing_ = true;
    h_outputs_.clear();
    return;
  }
  coalescing_ = true;
  coalesced_type_ = c10d::OpType::COALESCED;
  coalesced_outputs_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::endCoalescing() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (h_coalescing_) {
    h_coalescing_ = false;
    if (!comm_) return nullptr; /* nothing was called */
    return h_end(c10d::OpType::COALESCED, "loomccl coalesced collectives", std::move(h_outputs_),
                 false);
  }
  TORCH_CHECK(coalescing_, "loomccl: endCoalescing without startCoalescing");
  coalescing_ = false;
  loom_ccl_work_t* work = coalesced_work_;
  coalesced_work_ = nullptr;
  if (!work) return nullptr; /* nothing was called */
  const loom_status st = loom_ccl_end(work);
  if (st != LOOM_OK) {
    loom_ccl_work_release(work);
    loom_ccl_comm_abort(comm_);
    raise_status(st, "loomccl coalesced collectives");
  }
  return c10::make_intrusive<WorkLoom>(rank_, coalesced_type_, "loomccl coalesced collectives",
                                       work, std::move(coalesced_outputs_), stream_, false);
}

// ---- calls ------------------------------------------------------------------------------

ProcessGroupLoom::Call::Call(ProcessGroupLoom& pg, const char* name, c10d::OpType type,
                             c10::Device device)
    : pg_(pg), name_(name), type_(type) {
  pg_.mutex_.lock();
  try {
    loom_ccl_comm_t* comm = pg_.comm(device);
    if (pg_.coalescing_ && pg_.coalesced_work_) {
      work_ = pg_.coalesced_work_;
      coalesced_ = true;
      return;
    }
    check(loom_ccl_begin(comm, native_stream(get_current_stream(pg_.stream_.device_index())),
                         name_, &work_));
    ++pg_.sequence_;
    if (pg_.coalescing_) {
      pg_.coalesced_work_ = work_;
      pg_.coalesced_type_ = type;
      coalesced_ = true;
    }
  } catch (...) {
    pg_.mutex_.unlock();
    throw;
  }
}

ProcessGroupLoom::Call::~Call() {
  if (!finished_ && work_ && !coalesced_) {
    // Left by an exception: end the work so that nothing waits for it.
    (void)loom_ccl_end(work_);
    loom_ccl_work_release(work_);
  }
  pg_.mutex_.unlock();
}

void ProcessGroupLoom::Call::use(const at::Tensor& t) {
  // A shared region is not the allocator's: its release waits for the
  // device instead.
  if (t.defined() && t.numel() > 0 && !is_shared_storage(t))
    check(loom_record_stream(t.storage().data_ptr().get(), native_stream(pg_.stream_)));
}

void ProcessGroupLoom::Call::check(loom_status status) {
  if (status == LOOM_OK) {
    enqueued_ = true;
    return;
  }
  if (enqueued_ || coalesced_) loom_ccl_comm_abort(pg_.comm_);
  raise_status(status, name_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::Call::finish(std::vector<at::Tensor> outputs,
                                                              bool host_wait) {
  finished_ = true;
  if (coalesced_) {
    for (auto& t : outputs) pg_.coalesced_outputs_.push_back(std::move(t));
    return nullptr;
  }
  const loom_status st = loom_ccl_end(work_);
  if (st != LOOM_OK) {
    loom_ccl_work_release(work_);
    work_ = nullptr;
    check(st);
  }
  loom_ccl_work_t* work = work_;
  work_ = nullptr;
  return c10::make_intrusive<WorkLoom>(pg_.rank_, type_, name_, work, std::move(outputs),
                                       pg_.stream_, host_wait);
}

}  // namespace torch_loom::distributed
