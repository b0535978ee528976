// ProcessGroupLoom: the c10d backend "loomccl", for loom tensors of the
// processes of one machine, on loomccl (include/loom/ccl.h).
//
// One communicator per process group, created at the first collective (or
// at eagerConnectSingleDevice) on the device of its tensors; rank 0 makes
// the job id and the others read it from the group's Store. Collectives are
// enqueued on a high-priority stream of the device's pool, after the work
// the caller's current stream holds; their Work completes with a loom event
// and wait() makes the current stream wait (no host wait, as on CUDA).
// A failure (a peer died, a timeout, ranks out of step) raises on the
// streams that waited for the work, and at every later collective.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/work_loom.h"
#include "loom/ccl.h"

namespace torch_loom::distributed {

// Backend options, with loomccl's own: the staging bytes per rank and
// chunk (0: the library's default).
struct LoomOptions : c10d::Backend::Options {
  explicit LoomOptions(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
      : c10d::Backend::Options("loomccl", timeout) {}
  int64_t buffer_bytes = 0;
};

// Makes the Gloo process groups loomccl runs between machines: a Gloo
// backend over `store` for `rank` of `size` (set by the Python package,
// which has torch.distributed's Gloo).
using GlooFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout)>;
void set_gloo_factory(GlooFactory factory);

// Where the ranks of a group run: their hosts (LOOM_CCL_HOST_ID, else the
// host name), numbered in the order of their lowest rank, each with its
// ranks in order.
struct Topology {
  std::vector<int> host_of;                // per rank
  std::vector<std::vector<int>> ranks_of;  // per host
  int host = 0, local_rank = 0, local_size = 1;
  int hosts() const { return static_cast<int>(ranks_of.size()); }
  // The index of `rank` among its host's ranks.
  int local_index(int rank) const;
};

class ProcessGroupLoom : public c10d::Backend {
 public:
  ProcessGroupLoom(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                   c10::intrusive_ptr<LoomOptions> options);
  ~ProcessGroupLoom() override;

  const std::string getBackendName() const override { return "loomccl"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override { options_->timeout = timeout; }
  void eagerConnectSingleDevice(at::Device device) override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void abort() override;
  void shutdown() override;
  // The count of pieces of work this group enqueued: the same on every rank
  // that made the same calls (split_group sets it, debugging reads it).
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  // ---- collectives (collectives.cpp) ----
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  const Topology& topology() const { return topo_; }

  // One piece of work being enqueued: it begins after the current stream's
  // work on `device`, takes collectives, and ends in finish(), which gives
  // the Work (nullptr while coalescing: endCoalescing gives it).
  class Call {
   public:
    Call(ProcessGroupLoom& pg, const char* name, c10d::OpType type, c10::Device device);
    ~Call();
    loom_ccl_work_t* work() const { return work_; }
    // Keeps `t`'s memory from reuse until the communication stream is done.
    void use(const at::Tensor& t);
    // Raises `status` naming the call; a failure after the first collective
    // was enqueued breaks the communicator (the peers would wait in vain).
    void check(loom_status status);
    c10::Stream comm_stream() const { return pg_.stream_; }
    c10::intrusive_ptr<c10d::Work> finish(std::vector<at::Tensor> outputs, bool host_wait = false);

   private:
    ProcessGroupLoom& pg_;
    const char* name_;
    c10d::OpType type_;
    loom_ccl_work_t* work_ = nullptr;
    bool coalesced_ = false, finished_ = false, enqueued_ = false;
  };

 private:
  friend class Call;
  // The communicator on `device` (created at the first call).
  loom_ccl_comm_t* comm(c10::Device device);
  c10::Device default_device() const;

  // ---- between machines (hierarchy.cpp) ----
  // Shared memory inside a host (the communicator joins the host's ranks),
  // Gloo between hosts: among the hosts' first ranks (the leaders) for the
  // collectives, between the two ranks for send/recv. A collective between
  // hosts is enqueued, like one inside a host, on the communication stream
  // after the current stream's work: its loomccl steps, the Gloo step as a
  // host callback between them, the combining kernels and copies; its Work
  // ends with an event there.
  //
  // One collective between hosts being enqueued: the current stream is the
  // communication stream (after what the caller's stream held) while it
  // lives; finish() gives its Work (nullptr while coalescing).
  class Across {
   public:
    Across(ProcessGroupLoom& pg, const char* name, c10::Device device);
    ~Across() = default;
    // Keeps `t`'s memory from reuse until the communication stream is done.
    void use(const at::Tensor& t);
    c10::intrusive_ptr<c10d::Work> finish(c10d::OpType type, std::vector<at::Tensor> outputs,
                                          bool host_wait = false);

   private:
    ProcessGroupLoom& pg_;
    const char* name_;
    std::optional<c10::StreamGuard> guard_;
  };
  void discover_hosts();
  bool across_hosts() const { return topo_.hosts() > 1; }
  c10::intrusive_ptr<c10d::Backend> pair(int peer);
  void local_run(const char* name, c10d::OpType type, c10::Device device,
                 const std::function<void(Call&)>& body);
  // Enqueues `step` (Gloo between hosts) as a host callback on the
  // communication stream; a failure is recorded in h_failure_ and aborts
  // the communicator (the host's ranks waiting for this one fail at once).
  void host_step(const char* name, std::function<void()> step);
  // A CPU tensor for Gloo standing for the contiguous loom tensor `d`: a
  // view of its memory where the host can address it, else a pinned host
  // buffer (filled from `d` on the communication stream when `read`);
  // host_commit copies such a buffer back into `d` on that stream.
  at::Tensor host_view(const at::Tensor& d, bool read, const char* name);
  void host_commit(const at::Tensor& d, const at::Tensor& cpu, const char* name);
  void leaders_allgather(const at::Tensor& in, at::Tensor& out, const char* name);
  void h_allreduce_in_place(at::Tensor& t, const c10d::ReduceOp& op, const char* name);
  void h_broadcast_in_place(at::Tensor& t, int root, const char* name);
  void h_allgather_into(at::Tensor& output, const at::Tensor& input, const char* name);
  void leaders_alltoall(const at::Tensor& in, std::vector<int64_t> in_splits, at::Tensor& out,
                        std::vector<int64_t> out_splits, const char* name);
  void h_reduce_scatter(at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op,
                        const char* name);
  void h_all_to_all(const at::Tensor& send, const std::vector<size_t>& send_bytes,
                    at::Tensor& recv, const std::vector<size_t>& recv_bytes, const char* name);
  c10::intrusive_ptr<c10d::Work> h_send(at::Tensor t, int dst, int tag);
  c10::intrusive_ptr<c10d::Work> h_recv(at::Tensor& t, int src, int tag);
  c10::intrusive_ptr<c10d::Work> h_barrier(c10::Device device);
  // The Work of the collective between hosts just enqueued (or of the
  // coalesced group): its loomccl works, an event at its end.
  c10::intrusive_ptr<c10d::Work> h_end(c10d::OpType type, const char* name,
                                       std::vector<at::Tensor> outputs, bool host_wait);
  // Drops the host buffers of finished collectives between hosts.
  void h_prune();

  Topology topo_;
  bool host_addressable_ = true;                // the communicator's device
  c10::intrusive_ptr<c10d::Backend> leaders_;  // on the leaders only
  std::mutex pairs_mutex_;
  std::map<int, c10::intrusive_ptr<c10d::Backend>> pairs_;  // by peer
  bool h_coalescing_ = false;
  std::vector<at::Tensor> h_outputs_;
  // The loomccl works and host buffers of the collective between hosts
  // being enqueued (of the coalesced group while coalescing).
  std::vector<c10::intrusive_ptr<c10d::Work>> h_works_;
  std::vector<at::Tensor> h_keep_;
  std::shared_ptr<HostFailure> h_failure_ = std::make_shared<HostFailure>();
  // Host buffers of collectives in flight, each until its end event.
  std::vector<std::pair<loom_event_t*, std::vector<at::Tensor>>> h_inflight_;

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<LoomOptions> options_;
  std::mutex mutex_;
  loom_ccl_comm_t* comm_ = nullptr;
  uint64_t sequence_ = 0;
  c10::Stream stream_{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  // Coalescing: the open work and the outputs its collectives produce.
  bool coalescing_ = false;
  loom_ccl_work_t* coalesced_work_ = nullptr;
  c10d::OpType coalesced_type_ = c10d::OpType::COALESCED;
  std::vector<at::Tensor> coalesced_outputs_;
};

}  // namespace torch_loom::distributed
