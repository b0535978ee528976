// ProcessGroupLoom between machines: shared memory inside a host, Gloo
// between hosts.
//
// The ranks of a group say which host they run on (LOOM_CCL_HOST_ID, else
// the host name) through the group's Store; hosts are numbered in the order
// of their lowest rank. With more than one host, the communicator joins
// only the host's ranks, and the first rank of each host (its leader) also
// belongs to a Gloo group of the leaders. A collective runs in three
// phases: inside each host (loomccl), between the leaders (Gloo, on CPU
// tensors: views of the loom memory where the device's memory is host
// memory, pinned host copies where it is not, as on the guarded driver),
// and inside each host again. Reductions combine the hosts' partial results
// with loomccl's kernel in host order, after each host combined its ranks
// in rank order: a fixed order, so results are the same bits on every rank
// and from run to run. Send and recv between hosts use a two-rank Gloo
// group per pair of ranks, made at their first exchange.
//
// These collectives block the calling thread until they are done (the
// Gloo part waits on the host): their Work is complete when returned.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common.h"
#include "distributed/process_group_loom.h"
#include "distributed/reduction.h"
#include "distributed/work_loom.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace torch_loom::distributed {
namespace {

using c10d::OpType;
using Work = c10::intrusive_ptr<c10d::Work>;

GlooFactory& gloo_factory() {
  static GlooFactory factory;
  return factory;
}

c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, std::chrono::milliseconds timeout) {
  TORCH_CHECK(gloo_factory(), "loomccl: the ranks run on several hosts, which needs "
                              "torch.distributed's Gloo (import torch_loom installs it)");
  auto backend = gloo_factory()(store, rank, size, timeout);
  TORCH_CHECK(backend, "loomccl: could not make a Gloo process group between hosts");
  return backend;
}

std::string host_id() {
  if (const char* id = std::getenv("LOOM_CCL_HOST_ID"); id && *id) return id;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// A tensor's memory as bytes (a dense tensor spans one block).
at::Tensor byte_view(const at::Tensor& t) {
  at::Tensor b = at::empty({0}, t.options().dtype(at::kByte));
  b.set_(t.storage(), t.storage_offset() * t.element_size(),
         {static_cast<int64_t>(bytes(t))}, {1});
  return b;
}

// A CPU tensor for Gloo standing for a contiguous loom tensor: a view of
// its memory where the host can address it, else a pinned host copy
// (filled from the device when `read`, copied back by commit()).
struct HostView {
  at::Tensor dev, cpu;
  bool staged;
  HostView(const at::Tensor& d, bool read, bool host_addressable) : dev(d), staged(!host_addressable) {
    const auto options = at::TensorOptions().dtype(d.dtype()).device(at::kCPU);
    if (!staged) {
      cpu = at::from_blob(d.data_ptr(), d.sizes(), options);
    } else {
      cpu = at::empty(d.sizes(), options.pinned_memory(true));
      if (read) cpu.copy_(d);
    }
  }
  void commit() {
    if (staged) dev.copy_(cpu);
  }
};

}  // namespace

void set_gloo_factory(GlooFactory factory) { gloo_factory() = std::move(factory); }

int Topology::local_index(int rank) const {
  const auto& ranks = ranks_of[host_of[rank]];
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
}

void ProcessGroupLoom::discover_hosts() {
  topo_ = Topology{};
  std::vector<std::string> ids(size_);
  if (size_ > 1) {
    const std::string mine = host_id();
    store_->set("loomccl/host/" + std::to_string(rank_),
                std::vector<uint8_t>(mine.begin(), mine.end()));
    for (int p = 0; p < size_; ++p) {
      const auto v = store_->get("loomccl/host/" + std::to_string(p));
      ids[p].assign(v.begin(), v.end());
    }
  }
  std::vector<std::string> hosts;  // in the order of their lowest rank
  topo_.host_of.resize(size_);
  for (int p = 0; p < size_; ++p) {
    auto it = std::find(hosts.begin(), hosts.end(), ids[p]);
    if (it == hosts.end()) {
      hosts.push_back(ids[p]);
      topo_.ranks_of.emplace_back();
      it = hosts.end() - 1;
    }
    const int h = static_cast<int>(it - hosts.begin());
    topo_.host_of[p] = h;
    topo_.ranks_of[h].push_back(p);
  }
  topo_.host = topo_.host_of[rank_];
  topo_.local_rank = topo_.local_index(rank_);
  topo_.local_size = static_cast<int>(topo_.ranks_of[topo_.host].size());
  if (across_hosts() && topo_.local_rank == 0)
    leaders_ = make_gloo(c10::make_intrusive<c10d::PrefixStore>("loomccl/leaders", store_),
                         topo_.host, topo_.hosts(), options_->timeout);
}

c10d::Backend& ProcessGroupLoom::pair(int peer) {
  std::lock_guard<std::mutex> lock(pairs_mutex_);
  auto& backend = pairs_[peer];
  if (!backend) {
    const int lo = std::min(rank_, peer), hi = std::max(rank_, peer);
    backend = make_gloo(c10::make_intrusive<c10d::PrefixStore>(
                            "loomccl/pair/" + std::to_string(lo) + "/" + std::to_string(hi), store_),
                        rank_ == lo ? 0 : 1, 2, options_->timeout);
  }
  return *backend;
}

void ProcessGroupLoom::sync_current(c10::Device device, const char* name) {
  check(loom_stream_synchronize(current_stream(device.index())), name);
}

void ProcessGroupLoom::local_run(const char* name, OpType type, c10::Device device,
                                 const std::function<void(Call&)>& body) {
  Work work;
  {
    Call call(*this, name, type, device);
    body(call);
    work = call.finish({});
  }
  work->wait();
  sync_current(device, name);
}

// out ([hosts, n] bytes) <- every leader's `in` (n bytes), in host order.
void ProcessGroupLoom::leaders_allgather(const at::Tensor& in, at::Tensor& out, const char* name) {
  TORCH_CHECK(leaders_, name, ": not a leader");
  HostView vin(in, true, host_addressable_), vout(out, false, host_addressable_);
  std::vector<at::Tensor> inputs{vin.cpu};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int h = 0; h < topo_.hosts(); ++h) outputs[0].push_back(vout.cpu[h]);
  leaders_->allgather(outputs, inputs, c10d::AllgatherOptions())->wait();
  vout.commit();
  sync_current(out.device(), name);
}

void ProcessGroupLoom::h_allreduce_in_place(at::Tensor& t, const c10d::ReduceOp& op,
                                            const char* name) {
  Reduction r = reduction_for(t, op, name);
  if (t.numel() == 0) return;
  const c10::Device device = t.device();
  // Inside the host: its ranks' values combined in rank order, on the
  // leader (avg: the sum; the division comes once, at the end).
  loom_ccl_reduction local = r.op;
  if (local.op == LOOM_CCL_AVG) local.op = LOOM_CCL_SUM;
  local_run(name, OpType::ALLREDUCE, device, [&](Call& call) {
    call.check(loom_ccl_reduce(call.work(), ptr(t), ptr(t), r.count, r.dtype, &local, 0));
    call.use(t);
    call.use(r.factor);
  });
  if (topo_.local_rank == 0) {
    // Between the hosts: every leader gathers the hosts' partial results
    // and combines them in host order (the same bits on every leader).
    const int64_t n = static_cast<int64_t>(bytes(t));
    at::Tensor parts = at::empty({topo_.hosts(), n}, t.options().dtype(at::kByte));
    leaders_allgather(byte_view(t), parts, name);
    std::vector<const void*> srcs;
    for (int h = 0; h < topo_.hosts(); ++h)
      srcs.push_back(static_cast<const char*>(parts.data_ptr()) + h * n);
    loom_ccl_reduction across = r.op;
    if (across.op == LOOM_CCL_PREMUL_SUM) across = loom_ccl_reduction{LOOM_CCL_SUM, 0, nullptr};
    check(loom_ccl_combine(current_stream(device.index()), ptr(t), srcs.data(), topo_.hosts(),
                           r.count, r.dtype, &across, size_),
          name);
    sync_current(device, name);
  }
  local_run(name, OpType::BROADCAST, device, [&](Call& call) {
    call.check(loom_ccl_broadcast(call.work(), ptr(t), bytes(t), LOOM_UINT8, 0));
    call.use(t);
  });
}

void ProcessGroupLoom::h_broadcast_in_place(at::Tensor& t, int root, const char* name) {
  TORCH_CHECK(root >= 0 && root < size_, name, ": root ", root, " out of range [0, ", size_, ")");
  if (t.numel() == 0) return;
  const c10::Device device = t.device();
  const int root_host = topo_.host_of[root], root_local = topo_.local_index(root);
  const bool on_root_host = topo_.host == root_host;
  auto local_broadcast = [&](int local_root) {
    local_run(name, OpType::BROADCAST, device, [&](Call& call) {
      call.check(loom_ccl_broadcast(call.work(), ptr(t), bytes(t), LOOM_UINT8, local_root));
      call.use(t);
    });
  };
  sync_current(device, name);
  if (on_root_host) local_broadcast(root_local);
  if (topo_.local_rank == 0) {
    HostView view(byte_view(t), on_root_host, host_addressable_);
    std::vector<at::Tensor> tensors{view.cpu};
    c10d::BroadcastOptions opts;
    opts.rootRank = root_host;
    leaders_->broadcast(tensors, opts)->wait();
    view.commit();
    sync_current(device, name);
  }
  if (!on_root_host) local_broadcast(0);
}

// output (world parts of input's size, rank order) <- every rank's input.
void ProcessGroupLoom::h_allgather_into(at::Tensor& output, const at::Tensor& input,
                                        const char* name) {
  const int64_t n = static_cast<int64_t>(bytes(input));
  if (n == 0) return;
  const c10::Device device = output.device();
  int most = 0;  // ranks of the largest host: every host's block has room for them
  for (const auto& ranks : topo_.ranks_of) most = std::max(most, static_cast<int>(ranks.size()));
  const auto byte_options = output.options().dtype(at::kByte);
  at::Tensor block = at::empty({most * n}, byte_options);
  at::Tensor out = byte_view(output);
  sync_current(device, name);
  // Inside the host: its ranks' inputs, in rank order, on the leader.
  local_run(name, OpType::ALLGATHER, device, [&](Call& call) {
    std::vector<void*> recv(topo_.local_size, nullptr);
    if (topo_.local_rank == 0)
      for (int i = 0; i < topo_.local_size; ++i)
        recv[i] = static_cast<char*>(block.data_ptr()) + i * n;
    call.check(loom_ccl_gather(call.work(), ptr(input), recv.data(), static_cast<size_t>(n),
                               LOOM_UINT8, 0));
    call.use(input);
    call.use(block);
  });
  if (topo_.local_rank == 0) {
    at::Tensor blocks = at::empty({topo_.hosts(), most * n}, byte_options);
    leaders_allgather(block, blocks, name);
    for (int h = 0; h < topo_.hosts(); ++h) {
      const auto& ranks = topo_.ranks_of[h];
      for (size_t i = 0; i < ranks.size(); ++i)
        out.narrow(0, ranks[i] * n, n).copy_(blocks[h].narrow(0, static_cast<int64_t>(i) * n, n));
    }
    sync_current(device, name);
  }
  local_run(name, OpType::BROADCAST, device, [&](Call& call) {
    call.check(loom_ccl_broadcast(call.work(), ptr(out), bytes(out), LOOM_UINT8, 0));
    call.use(out);
  });
}

Work ProcessGroupLoom::h_done(OpType type, std::vector<at::Tensor> outputs, c10::Device device) {
  if (h_coalescing_) {
    for (auto& t : outputs) h_outputs_.push_back(std::move(t));
    return nullptr;
  }
  return c10::make_intrusive<WorkDone>(rank_, type, std::move(outputs), device);
}

Work ProcessGroupLoom::h_send(at::Tensor t, int dst, int tag) {
  const char* name = "loomccl send";
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, name, ": bad destination rank ", dst);
  const c10::Device device = t.device();
  if (topo_.host_of[dst] == topo_.host) {
    local_run(name, OpType::SEND, device, [&](Call& call) {
      call.check(loom_ccl_send(call.work(), ptr(t), bytes(t), LOOM_UINT8, topo_.local_index(dst)));
      call.use(t);
    });
  } else if (t.numel()) {
    sync_current(device, name);
    HostView view(byte_view(t), true, host_addressable_);
    std::vector<at::Tensor> tensors{view.cpu};
    pair(dst).send(tensors, rank_ < dst ? 1 : 0, tag)->wait();
  }
  return h_done(OpType::SEND, {}, device);
}

Work ProcessGroupLoom::h_recv(at::Tensor& t, int src, int tag) {
  const char* name = "loomccl recv";
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, name, ": bad source rank ", src);
  const c10::Device device = t.device();
  if (topo_.host_of[src] == topo_.host) {
    local_run(name, OpType::RECV, device, [&](Call& call) {
      call.check(loom_ccl_recv(call.work(), ptr(t), bytes(t), LOOM_UINT8, topo_.local_index(src)));
      call.use(t);
    });
  } else if (t.numel()) {
    sync_current(device, name);
    HostView view(byte_view(t), false, host_addressable_);
    std::vector<at::Tensor> tensors{view.cpu};
    pair(src).recv(tensors, rank_ < src ? 1 : 0, tag)->wait();
    view.commit();
    sync_current(device, name);
  }
  return h_done(OpType::RECV, {t}, device);
}

Work ProcessGroupLoom::h_barrier(c10::Device device) {
  const char* name = "loomccl barrier";
  auto local_barrier = [&] {
    local_run(name, OpType::BARRIER, device,
              [&](Call& call) { call.check(loom_ccl_barrier(call.work())); });
  };
  local_barrier();
  if (topo_.local_rank == 0) leaders_->barrier(c10d::BarrierOptions())->wait();
  local_barrier();
  return h_done(OpType::BARRIER, {}, device);
}

}  // namespace torch_loom::distributed
