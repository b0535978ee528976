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
// and from run to run. reduce_scatter moves only the parts: each leader
// sends every other leader the parts of that host's ranks (Gloo's
// all-to-all) and combines what it receives, as all_reduce combines.
// all_to_all goes through the leaders too: each host's send buffers meet
// on its leader, the leaders exchange what crosses hosts, and hand their
// ranks what they receive. Send and recv between hosts use a two-rank Gloo
// group per pair of ranks, made at their first exchange.
//
// These collectives are enqueued as those inside a host are: after the
// current stream's work, on the communication stream, where the Gloo part
// is a host callback between the loomccl steps, the combining kernels and
// the copies (to and from pinned host buffers where the device's memory is
// not host memory); the call returns at once and Work.wait() makes the
// current stream wait. The Gloo calls of every collective are made in the
// order of the collectives, on one thread (the stream's), as the leaders'
// Gloo group needs. A Gloo failure (a timeout, a peer gone) is recorded for
// the group, aborts the communicator (so the host's ranks waiting for their
// leader fail too, not hang), and reaches the streams that wait for the
// work and every later collective, as a loomccl failure does. One call
// waits on the host: all_to_all between hosts, for the byte counts every
// rank sends (the host plans the exchange from them), not for the data.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <numeric>

#include "common.h"
#include "distributed/process_group_loom.h"
#include "distributed/reduction.h"
#include "distributed/shared_storage.h"
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

c10::intrusive_ptr<c10d::Backend> ProcessGroupLoom::pair(int peer) {
  std::lock_guard<std::mutex> lock(pairs_mutex_);
  auto& backend = pairs_[peer];
  if (!backend) {
    const int lo = std::min(rank_, peer), hi = std::max(rank_, peer);
    backend = make_gloo(c10::make_intrusive<c10d::PrefixStore>(
                            "loomccl/pair/" + std::to_string(lo) + "/" + std::to_string(hi), store_),
                        rank_ == lo ? 0 : 1, 2, options_->timeout);
  }
  return backend;
}

ProcessGroupLoom::Across::Across(ProcessGroupLoom& pg, const char* name, c10::Device device)
    : pg_(pg), name_(name) {
  loom_stream_t* caller = current_stream(device.has_index() ? device.index() : current_device());
  {
    std::lock_guard<std::mutex> lock(pg_.mutex_);
    pg_.comm(device);
    pg_.h_prune();
  }
  if (pg_.h_failure_->status() != LOOM_OK)
    raise_status(loom_error(pg_.h_failure_->status(), "%s", pg_.h_failure_->message().c_str()),
                 name_);
  // The communication stream begins after the caller's work so far; the
  // collective's kernels, copies and temporaries go there.
  loom_event_t* ready = nullptr;
  loom_status st = loom_event_create(pg_.stream_.device_index(), LOOM_EVENT_DEFAULT, &ready);
  if (st == LOOM_OK && (st = loom_event_record(ready, caller)) == LOOM_OK)
    st = loom_stream_wait_event(native_stream(pg_.stream_), ready);
  if (ready) loom_event_release(ready);
  check(st, name_);
  guard_.emplace(pg_.stream_);
}

void ProcessGroupLoom::Across::use(const at::Tensor& t) {
  if (t.defined() && t.numel() > 0 && !is_shared_storage(t))
    check(loom_record_stream(t.storage().data_ptr().get(), native_stream(pg_.stream_)), name_);
}

Work ProcessGroupLoom::Across::finish(OpType type, std::vector<at::Tensor> outputs,
                                      bool host_wait) {
  for (const auto& t : outputs) use(t);
  if (pg_.h_coalescing_) {
    for (auto& t : outputs) pg_.h_outputs_.push_back(std::move(t));
    return nullptr;
  }
  return pg_.h_end(type, name_, std::move(outputs), host_wait);
}

Work ProcessGroupLoom::h_end(OpType type, const char* name, std::vector<at::Tensor> outputs,
                             bool host_wait) {
  loom_event_t* end = nullptr;
  loom_status st = loom_event_create(stream_.device_index(), LOOM_EVENT_DEFAULT, &end);
  if (st == LOOM_OK) st = loom_event_record(end, native_stream(stream_));
  if (st != LOOM_OK) {
    if (end) loom_event_release(end);
    raise_status(st, name);
  }
  loom_event_retain(end);
  h_inflight_.emplace_back(end, std::move(h_keep_));
  h_keep_.clear();
  std::vector<Work> local = std::move(h_works_);
  h_works_.clear();
  return c10::make_intrusive<WorkAcross>(rank_, type, name, std::move(local), end, h_failure_,
                                         std::move(outputs), stream_, host_wait);
}

void ProcessGroupLoom::h_prune() {
  auto done = [](auto& entry) {
    if (loom_event_query(entry.first) == LOOM_ERROR_NOT_READY) return false;
    loom_event_release(entry.first);
    return true;
  };
  h_inflight_.erase(std::remove_if(h_inflight_.begin(), h_inflight_.end(), done),
                    h_inflight_.end());
}

void ProcessGroupLoom::local_run(const char* name, OpType type, c10::Device device,
                                 const std::function<void(Call&)>& body) {
  // Inside an Across: the current stream is the communication stream, so
  // the work follows what was enqueued there so far.
  Call call(*this, name, type, device);
  body(call);
  Work work = call.finish({});
  if (work) h_works_.push_back(std::move(work));
}

namespace {

struct HostStep {
  std::function<void()> run;
  std::shared_ptr<HostFailure> failure;
  loom_ccl_comm_t* comm;
  const char* name;
};

void run_host_step(void* user) {
  std::unique_ptr<HostStep> step(static_cast<HostStep*>(user));
  if (step->failure->status() != LOOM_OK) return;  // the group is broken
  std::string message;
  try {
    step->run();
    return;
  } catch (const std::exception& e) {
    message = std::string(step->name) + ": between hosts: " + e.what();
  } catch (...) {
    message = std::string(step->name) + ": between hosts: an unknown error";
  }
  step->failure->set(LOOM_ERROR_DEVICE, std::move(message));
  loom_ccl_comm_abort(step->comm);
}

}  // namespace

void ProcessGroupLoom::host_step(const char* name, std::function<void()> run) {
  auto* step = new HostStep{std::move(run), h_failure_, comm_, name};
  const loom_status st = loom_host_callback(native_stream(stream_), run_host_step, step, name);
  if (st != LOOM_OK) {
    delete step;
    loom_ccl_comm_abort(comm_);  // the peers would wait for this step in vain
    raise_status(st, name);
  }
}

at::Tensor ProcessGroupLoom::host_view(const at::Tensor& d, bool read, const char* name) {
  const auto options = at::TensorOptions().dtype(d.dtype()).device(at::kCPU);
  if (host_addressable_) return at::from_blob(d.data_ptr(), d.sizes(), options);
  at::Tensor cpu = at::empty(d.sizes(), options.pinned_memory(true));
  h_keep_.push_back(cpu);
  if (read && bytes(d))
    check(loom_memcpy(native_stream(stream_), cpu.data_ptr(), d.data_ptr(), bytes(d)), name);
  return cpu;
}

void ProcessGroupLoom::host_commit(const at::Tensor& d, const at::Tensor& cpu, const char* name) {
  if (!host_addressable_ && bytes(d))
    check(loom_memcpy(native_stream(stream_), d.data_ptr(), cpu.data_ptr(), bytes(d)), name);
}

// out ([hosts, n] bytes) <- every leader's `in` (n bytes), in host order.
void ProcessGroupLoom::leaders_allgather(const at::Tensor& in, at::Tensor& out, const char* name) {
  TORCH_CHECK(leaders_, name, ": not a leader");
  at::Tensor vin = host_view(in, true, name), vout = host_view(out, false, name);
  std::vector<at::Tensor> outputs;
  for (int h = 0; h < topo_.hosts(); ++h) outputs.push_back(vout[h]);
  host_step(name, [leaders = leaders_, vin, outputs] {
    std::vector<at::Tensor> inputs{vin};
    std::vector<std::vector<at::Tensor>> outs{outputs};
    leaders->allgather(outs, inputs, c10d::AllgatherOptions())->wait();
  });
  host_commit(out, vout, name);
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
  if (on_root_host) local_broadcast(root_local);
  if (topo_.local_rank == 0) {
    const at::Tensor b = byte_view(t);
    at::Tensor view = host_view(b, on_root_host, name);
    host_step(name, [leaders = leaders_, view, root_host] {
      std::vector<at::Tensor> tensors{view};
      c10d::BroadcastOptions opts;
      opts.rootRank = root_host;
      leaders->broadcast(tensors, opts)->wait();
    });
    host_commit(b, view, name);
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
  }
  local_run(name, OpType::BROADCAST, device, [&](Call& call) {
    call.check(loom_ccl_broadcast(call.work(), ptr(out), bytes(out), LOOM_UINT8, 0));
    call.use(out);
  });
}

// out <- the leaders' blocks of `in` for each other (Gloo's all-to-all
// between the leaders; splits in bytes, one per host, in host order).
void ProcessGroupLoom::leaders_alltoall(const at::Tensor& in, std::vector<int64_t> in_splits,
                                        at::Tensor& out, std::vector<int64_t> out_splits,
                                        const char* name) {
  TORCH_CHECK(leaders_, name, ": not a leader");
  at::Tensor vin = host_view(in, true, name), vout = host_view(out, false, name);
  host_step(name, [leaders = leaders_, vin, vout, in_splits = std::move(in_splits),
                   out_splits = std::move(out_splits)]() mutable {
    at::Tensor o = vout, i = vin;
    leaders->alltoall_base(o, i, out_splits, in_splits, c10d::AllToAllOptions())->wait();
  });
  host_commit(out, vout, name);
}

// output (n elements) <- the reduction of part `rank` (elements
// [rank * n, (rank + 1) * n)) of every rank's input. Each host reduces its
// ranks' inputs on its leader in rank order, as h_allreduce_in_place does;
// the leaders then exchange only the parts of each other's ranks and
// combine them in host order with the same kernel and rules, so every
// element is the bits all_reduce gives it; the leader scatters the parts.
void ProcessGroupLoom::h_reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                        const c10d::ReduceOp& op, const char* name) {
  Reduction whole = reduction_for(input, op, name), part = reduction_for(output, op, name);
  if (output.numel() == 0) return;
  const c10::Device device = output.device();
  const bool leader = topo_.local_rank == 0;
  const int64_t n = static_cast<int64_t>(bytes(output));  // one rank's part, in bytes
  const auto byte_options = output.options().dtype(at::kByte);
  at::Tensor partial = leader ? at::empty({size_ * n}, byte_options) : at::Tensor();
  loom_ccl_reduction local = whole.op;
  if (local.op == LOOM_CCL_AVG) local.op = LOOM_CCL_SUM;
  local_run(name, OpType::REDUCE_SCATTER, device, [&](Call& call) {
    call.check(loom_ccl_reduce(call.work(), ptr(input), leader ? ptr(partial) : nullptr,
                               whole.count, whole.dtype, &local, 0));
    call.use(input);
    if (leader) call.use(partial);
    call.use(whole.factor);
  });
  at::Tensor mine = leader ? at::empty({topo_.local_size * n}, byte_options) : at::Tensor();
  if (leader) {
    // To host h: the parts of its ranks, in their order.
    const int hosts = topo_.hosts();
    at::Tensor send = at::empty({size_ * n}, byte_options);
    std::vector<int64_t> in_splits, out_splits;
    int64_t k = 0;
    for (int h = 0; h < hosts; ++h) {
      for (int p : topo_.ranks_of[h])
        send.narrow(0, (k++) * n, n).copy_(partial.narrow(0, p * n, n));
      in_splits.push_back(static_cast<int64_t>(topo_.ranks_of[h].size()) * n);
      out_splits.push_back(topo_.local_size * n);
    }
    at::Tensor recv = at::empty({hosts * topo_.local_size * n}, byte_options);
    leaders_alltoall(send, in_splits, recv, out_splits, name);
    // Part of local rank i: the hosts' partial results combined in host order.
    loom_ccl_reduction across = part.op;
    if (across.op == LOOM_CCL_PREMUL_SUM) across = loom_ccl_reduction{LOOM_CCL_SUM, 0, nullptr};
    const char* base = static_cast<const char*>(recv.data_ptr());
    for (int i = 0; i < topo_.local_size; ++i) {
      std::vector<const void*> srcs;
      for (int h = 0; h < hosts; ++h) srcs.push_back(base + (h * topo_.local_size + i) * n);
      check(loom_ccl_combine(current_stream(device.index()),
                             static_cast<char*>(mine.data_ptr()) + i * n, srcs.data(), hosts,
                             part.count, part.dtype, &across, size_),
            name);
    }
  }
  local_run(name, OpType::SCATTER, device, [&](Call& call) {
    std::vector<const void*> parts(topo_.local_size, nullptr);
    if (leader)
      for (int i = 0; i < topo_.local_size; ++i)
        parts[i] = static_cast<const char*>(mine.data_ptr()) + i * n;
    call.check(loom_ccl_scatter(call.work(), leader ? parts.data() : nullptr, ptr(output),
                                static_cast<size_t>(n), LOOM_UINT8, 0));
    call.use(output);
    if (leader) call.use(mine);
  });
}

// recv <- from every rank q, in rank order, what q sends this rank
// (send: this rank's blocks for every rank, in rank order; byte counts).
// The ranks first learn every count (so that they all refuse counts that
// do not match, together); each host's ranks hand their send buffers to
// the leader, the leaders exchange what crosses hosts (Gloo's all-to-all),
// and each leader hands its ranks what they receive.
void ProcessGroupLoom::h_all_to_all(const at::Tensor& send, const std::vector<size_t>& send_bytes,
                                    at::Tensor& recv, const std::vector<size_t>& recv_bytes,
                                    const char* name) {
  const c10::Device device = recv.device();
  const int w = size_;
  // counts[q][0..w): what q sends to each rank; counts[q][w..2w): what q
  // expects from each rank.
  at::Tensor mine = at::empty({2 * w}, at::TensorOptions().dtype(at::kLong));
  for (int p = 0; p < w; ++p) {
    mine[p] = static_cast<int64_t>(send_bytes[p]);
    mine[w + p] = static_cast<int64_t>(recv_bytes[p]);
  }
  at::Tensor all = at::empty({w * 2 * w}, recv.options().dtype(at::kLong));
  h_allgather_into(all, mine.to(device), name);
  const at::Tensor counts_cpu = all.cpu().view({w, 2 * w});
  const int64_t* c = counts_cpu.data_ptr<int64_t>();
  auto sent = [&](int q, int p) { return c[q * 2 * w + p]; };  // bytes q sends p
  int64_t crossing = 0;
  for (int q = 0; q < w; ++q)
    for (int p = 0; p < w; ++p) {
      TORCH_CHECK(sent(q, p) == c[p * 2 * w + w + q], name, ": rank ", q, " sends rank ", p, " ",
                  sent(q, p), " bytes, but rank ", p, " expects ", c[p * 2 * w + w + q]);
      if (topo_.host_of[q] != topo_.host_of[p]) crossing += sent(q, p);
    }
  const auto byte_options = recv.options().dtype(at::kByte);
  const auto& local = topo_.ranks_of[topo_.host];
  const bool leader = topo_.local_rank == 0;
  auto total_sent = [&](int q) {
    int64_t t = 0;
    for (int p = 0; p < w; ++p) t += sent(q, p);
    return t;
  };
  auto total_received = [&](int p) {
    int64_t t = 0;
    for (int q = 0; q < w; ++q) t += sent(q, p);
    return t;
  };
  // Inside the host: every rank's send buffer, in local order, on the leader.
  std::vector<int64_t> gathered_at(local.size() + 1, 0);
  for (size_t i = 0; i < local.size(); ++i)
    gathered_at[i + 1] = gathered_at[i] + total_sent(local[i]);
  at::Tensor gathered = at::empty({leader ? gathered_at.back() : 0}, byte_options);
  local_run(name, OpType::ALLTOALL, device, [&](Call& call) {
    std::vector<size_t> sc(local.size(), 0), so(local.size(), 0), rc(local.size(), 0),
        ro(local.size(), 0);
    sc[0] = static_cast<size_t>(total_sent(rank_));
    if (leader)
      for (size_t i = 0; i < local.size(); ++i)
        rc[i] = static_cast<size_t>(total_sent(local[i])), ro[i] = gathered_at[i];
    call.check(loom_ccl_all_to_all(call.work(), ptr(send), sc.data(), so.data(), ptr(gathered),
                                   rc.data(), ro.data(), LOOM_UINT8));
    call.use(send);
    call.use(gathered);
  });
  // The leader's blocks for its own ranks, in local order: each one's
  // receive buffer (its sources in rank order).
  std::vector<int64_t> delivered_at(local.size() + 1, 0);
  for (size_t i = 0; i < local.size(); ++i)
    delivered_at[i + 1] = delivered_at[i] + total_received(local[i]);
  at::Tensor delivered = at::empty({leader ? delivered_at.back() : 0}, byte_options);
  if (leader) {
    // Where q's block for p starts in q's send buffer (q on this host).
    auto send_offset = [&](int q, int p) {
      int64_t o = 0;
      for (int r = 0; r < p; ++r) o += sent(q, r);
      return o;
    };
    auto source_offset = [&](int p, int q) {  // in p's receive buffer
      int64_t o = 0;
      for (int r = 0; r < q; ++r) o += sent(r, p);
      return o;
    };
    const int hosts = topo_.hosts();
    // To host h, ordered by its ranks, then this host's ranks (the sources).
    std::vector<int64_t> in_splits(hosts, 0), out_splits(hosts, 0);
    for (int h = 0; h < hosts; ++h)
      for (int p : topo_.ranks_of[h])
        for (int q : local) {
          in_splits[h] += sent(q, p);
          out_splits[h] += sent(p, q);
        }
    at::Tensor outgoing = at::empty({std::accumulate(in_splits.begin(), in_splits.end(),
                                                     int64_t{0})}, byte_options);
    at::Tensor incoming = at::empty({std::accumulate(out_splits.begin(), out_splits.end(),
                                                     int64_t{0})}, byte_options);
    int64_t at_out = 0;
    for (int h = 0; h < hosts; ++h)
      for (int p : topo_.ranks_of[h])
        for (size_t i = 0; i < local.size(); ++i) {
          const int q = local[i];
          const int64_t b = sent(q, p);
          if (b) outgoing.narrow(0, at_out, b).copy_(
              gathered.narrow(0, gathered_at[i] + send_offset(q, p), b));
          at_out += b;
        }
    if (crossing) {
      leaders_alltoall(outgoing, in_splits, incoming, out_splits, name);
    } else {
      incoming.copy_(outgoing);  // all on this host: its own block
    }
    // From host h, ordered by this host's ranks (the destinations), then h's.
    int64_t at_in = 0;
    for (int h = 0; h < hosts; ++h)
      for (size_t i = 0; i < local.size(); ++i)
        for (int q : topo_.ranks_of[h]) {
          const int p = local[i];
          const int64_t b = sent(q, p);
          if (b) delivered.narrow(0, delivered_at[i] + source_offset(p, q), b)
                     .copy_(incoming.narrow(0, at_in, b));
          at_in += b;
        }
  }
  local_run(name, OpType::ALLTOALL, device, [&](Call& call) {
    std::vector<size_t> sc(local.size(), 0), so(local.size(), 0), rc(local.size(), 0),
        ro(local.size(), 0);
    rc[0] = static_cast<size_t>(total_received(rank_));
    if (leader)
      for (size_t i = 0; i < local.size(); ++i)
        sc[i] = static_cast<size_t>(total_received(local[i])), so[i] = delivered_at[i];
    call.check(loom_ccl_all_to_all(call.work(), ptr(delivered), sc.data(), so.data(), ptr(recv),
                                   rc.data(), ro.data(), LOOM_UINT8));
    call.use(delivered);
    call.use(recv);
  });
}

Work ProcessGroupLoom::h_send(at::Tensor t, int dst, int tag) {
  const char* name = "loomccl send";
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, name, ": bad destination rank ", dst);
  const c10::Device device = t.device();
  Across across(*this, name, device);
  if (topo_.host_of[dst] == topo_.host) {
    local_run(name, OpType::SEND, device, [&](Call& call) {
      call.check(loom_ccl_send(call.work(), ptr(t), bytes(t), LOOM_UINT8, topo_.local_index(dst)));
      call.use(t);
    });
  } else if (t.numel()) {
    auto peer = pair(dst);  // made here: the Gloo factory is Python's
    at::Tensor view = host_view(byte_view(t), true, name);
    across.use(t);
    host_step(name, [peer, view, to = rank_ < dst ? 1 : 0, tag] {
      std::vector<at::Tensor> tensors{view};
      peer->send(tensors, to, tag)->wait();
    });
  }
  return across.finish(OpType::SEND, {});
}

Work ProcessGroupLoom::h_recv(at::Tensor& t, int src, int tag) {
  const char* name = "loomccl recv";
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, name, ": bad source rank ", src);
  const c10::Device device = t.device();
  Across across(*this, name, device);
  if (topo_.host_of[src] == topo_.host) {
    local_run(name, OpType::RECV, device, [&](Call& call) {
      call.check(loom_ccl_recv(call.work(), ptr(t), bytes(t), LOOM_UINT8, topo_.local_index(src)));
      call.use(t);
    });
  } else if (t.numel()) {
    auto peer = pair(src);
    const at::Tensor b = byte_view(t);
    at::Tensor view = host_view(b, false, name);
    host_step(name, [peer, view, from = rank_ < src ? 1 : 0, tag] {
      std::vector<at::Tensor> tensors{view};
      peer->recv(tensors, from, tag)->wait();
    });
    host_commit(b, view, name);
  }
  return across.finish(OpType::RECV, {t});
}

Work ProcessGroupLoom::h_barrier(c10::Device device) {
  const char* name = "loomccl barrier";
  Across across(*this, name, device);
  auto local_barrier = [&] {
    local_run(name, OpType::BARRIER, device,
              [&](Call& call) { call.check(loom_ccl_barrier(call.work())); });
  };
  local_barrier();
  if (topo_.local_rank == 0)
    host_step(name, [leaders = leaders_] { leaders->barrier(c10d::BarrierOptions())->wait(); });
  local_barrier();
  return across.finish(OpType::BARRIER, {}, /*host_wait=*/true);
}

}  // namespace torch_loom::distributed
