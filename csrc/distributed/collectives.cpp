// ProcessGroupLoom's collectives: check the tensors, prepare what must be
// ready on the current stream (contiguous inputs, the premul_sum factor),
// then enqueue loomccl calls inside one Call. Data that is only moved goes
// as bytes (every dtype); reductions go in the tensor's dtype, complex as
// pairs of reals (sum, avg and premul_sum only, as NCCL allows).
#include <c10/core/StreamGuard.h>

#include <numeric>

#include "common.h"
#include "distributed/process_group_loom.h"
#include "distributed/reduction.h"

namespace torch_loom::distributed {
namespace {

using c10d::OpType;
using Work = c10::intrusive_ptr<c10d::Work>;

void check_loom(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), op, ": undefined tensor");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op,
              ": loomccl handles loom tensors, got one on ", t.device(),
              " (use \"cpu:gloo,loom:loomccl\" for CPU tensors)");
  TORCH_CHECK(!t.is_sparse(), op, ": sparse tensors are not supported");
}

// A tensor a collective reads or writes as one block of memory.
void check_contiguous(const at::Tensor& t, const char* op) {
  check_loom(t, op);
  TORCH_CHECK(t.is_contiguous(), op, ": tensors must be contiguous");
}

// In-place elementwise collectives accept any dense layout (the ranks'
// tensors have the same layout).
void check_dense(const at::Tensor& t, const char* op) {
  check_loom(t, op);
  TORCH_CHECK(t.is_non_overlapping_and_dense(), op, ": tensors must be dense");
}

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, op, ": expected one tensor per process, got ", tensors.size());
  return tensors[0];
}

void check_same(const at::Tensor& a, const at::Tensor& b, int64_t factor, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": dtypes differ (", a.scalar_type(), " and ",
              b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel() * factor, op, ": expected ", b.numel() * factor,
              " elements, got ", a.numel());
}

}  // namespace

Reduction reduction_for(const at::Tensor& t, const c10d::ReduceOp& op, const char* name) {
  Reduction r;
  r.count = t.numel();
  at::ScalarType type = t.scalar_type();
  if (t.is_complex()) {
    TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG ||
                    op == c10d::ReduceOp::PREMUL_SUM,
                name, ": complex tensors support sum, avg and premul_sum only");
    type = c10::toRealValueType(type);
    r.count *= 2;
  }
  r.dtype = to_loom_dtype(type, name);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op.op = LOOM_CCL_SUM; break;
    case c10d::ReduceOp::AVG: r.op.op = LOOM_CCL_AVG; break;
    case c10d::ReduceOp::PRODUCT: r.op.op = LOOM_CCL_PROD; break;
    case c10d::ReduceOp::MIN: r.op.op = LOOM_CCL_MIN; break;
    case c10d::ReduceOp::MAX: r.op.op = LOOM_CCL_MAX; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.op.op = LOOM_CCL_PREMUL_SUM;
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, name, ": premul_sum without its factor");
      if (s->tensor_factor.defined()) {
        // Read where the reduction runs: a copy in the data's real dtype on
        // its device, enqueued before the work begins.
        r.factor = s->tensor_factor.to(t.device(), type).reshape({1}).contiguous();
        r.op.factor_ptr = r.factor.data_ptr();
      } else {
        r.op.factor = s->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": ReduceOp ", static_cast<int>(op.op_),
                                  " (bitwise ops) is not supported by loomccl");
  }
  TORCH_CHECK_NOT_IMPLEMENTED(r.op.op != LOOM_CCL_PREMUL_SUM || at::isFloatingType(type), name,
                              ": premul_sum needs floating tensors, got ", t.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(r.op.op != LOOM_CCL_AVG || type != at::kBool, name,
                              ": avg of bool tensors is not supported");
  return r;
}

Work ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                 const c10d::BroadcastOptions& opts) {
  const char* name = "loomccl broadcast";
  at::Tensor& t = single(tensors, name);
  check_dense(t, name);
  if (across_hosts()) {
    Across across(*this, name, t.device());
    h_broadcast_in_place(t, static_cast<int>(opts.rootRank), name);
    return across.finish(OpType::BROADCAST, {t});
  }
  Call call(*this, name, OpType::BROADCAST, t.device());
  call.check(loom_ccl_broadcast(call.work(), ptr(t), bytes(t), LOOM_UINT8,
                                static_cast<int>(opts.rootRank)));
  call.use(t);
  return call.finish({t});
}

Work ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                 const c10d::AllreduceOptions& opts) {
  const char* name = "loomccl allreduce";
  at::Tensor& t = single(tensors, name);
  check_dense(t, name);
  if (across_hosts()) {
    Across across(*this, name, t.device());
    h_allreduce_in_place(t, opts.reduceOp, name);
    return across.finish(OpType::ALLREDUCE, {t});
  }
  Reduction r = reduction_for(t, opts.reduceOp, name);
  Call call(*this, name, OpType::ALLREDUCE, t.device());
  call.check(loom_ccl_allreduce(call.work(), ptr(t), ptr(t), r.count, r.dtype, &r.op));
  call.use(t);
  call.use(r.factor);
  return call.finish({t});
}

Work ProcessGroupLoom::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceCoalescedOptions& opts) {
  const char* name = "loomccl allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), name, ": no tensors");
  std::vector<Reduction> rs;
  for (auto& t : tensors) {
    check_dense(t, name);
    TORCH_CHECK(t.device() == tensors[0].device(), name, ": tensors on different devices");
    rs.push_back(reduction_for(t, opts.reduceOp, name));
  }
  if (across_hosts()) {
    Across across(*this, name, tensors[0].device());
    for (auto& t : tensors) h_allreduce_in_place(t, opts.reduceOp, name);
    return across.finish(OpType::ALLREDUCE_COALESCED, tensors);
  }
  Call call(*this, name, OpType::ALLREDUCE_COALESCED, tensors[0].device());
  for (size_t i = 0; i < tensors.size(); ++i) {
    call.check(loom_ccl_allreduce(call.work(), ptr(tensors[i]), ptr(tensors[i]), rs[i].count,
                                  rs[i].dtype, &rs[i].op));
    call.use(tensors[i]);
    call.use(rs[i].factor);
  }
  return call.finish(tensors);
}

Work ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* name = "loomccl reduce";
  at::Tensor& t = single(tensors, name);
  check_dense(t, name);
  if (across_hosts()) {
    Across across(*this, name, t.device());
    // Every rank computes the result; the root keeps it.
    at::Tensor result = t.clone();
    h_allreduce_in_place(result, opts.reduceOp, name);
    if (rank_ == static_cast<int>(opts.rootRank)) t.copy_(result);
    return across.finish(OpType::REDUCE, {t});
  }
  Reduction r = reduction_for(t, opts.reduceOp, name);
  Call call(*this, name, OpType::REDUCE, t.device());
  call.check(loom_ccl_reduce(call.work(), ptr(t), ptr(t), r.count, r.dtype, &r.op,
                             static_cast<int>(opts.rootRank)));
  call.use(t);
  call.use(r.factor);
  return call.finish({t});
}

Work ProcessGroupLoom::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                 std::vector<at::Tensor>& inputs,
                                 const c10d::AllgatherOptions& opts) {
  const char* name = "loomccl allgather";
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_), name,
              ": expected one list of ", size_, " output tensors");
  at::Tensor input = single(inputs, name);
  check_loom(input, name);
  input = input.contiguous();
  std::vector<void*> recv;
  for (auto& o : outputs[0]) {
    check_contiguous(o, name);
    check_same(o, input, 1, name);
    recv.push_back(ptr(o));
  }
  if (across_hosts()) {
    Across across(*this, name, input.device());
    at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
    h_allgather_into(flat, input, name);
    for (int p = 0; p < size_; ++p)
      outputs[0][p].copy_(flat.narrow(0, p * input.numel(), input.numel()).view(input.sizes()));
    across.use(input);
    return across.finish(OpType::ALLGATHER, outputs[0]);
  }
  Call call(*this, name, OpType::ALLGATHER, input.device());
  call.check(loom_ccl_allgather(call.work(), ptr(input), recv.data(), bytes(input), LOOM_UINT8));
  call.use(input);
  for (auto& o : outputs[0]) call.use(o);
  return call.finish(outputs[0]);
}

namespace {
// Enqueues output <- every rank's input, one after the other.
void allgather_into(ProcessGroupLoom::Call& call, at::Tensor& output, const at::Tensor& input,
                    int world) {
  std::vector<void*> recv;
  for (int p = 0; p < world; ++p)
    recv.push_back(input.numel() ? static_cast<char*>(output.data_ptr()) + p * bytes(input)
                                 : nullptr);
  call.check(loom_ccl_allgather(call.work(), ptr(input), recv.data(), bytes(input), LOOM_UINT8));
  call.use(input);
  call.use(output);
}

// Enqueues output <- the reduction of every rank's part `rank` of input.
void reduce_scatter_from(ProcessGroupLoom::Call& call, at::Tensor& output, const at::Tensor& input,
                         const Reduction& r, int world) {
  std::vector<const void*> send;
  const size_t part = bytes(output);
  for (int p = 0; p < world; ++p)
    send.push_back(part ? static_cast<const char*>(input.data_ptr()) + p * part : nullptr);
  call.check(loom_ccl_reduce_scatter(call.work(), send.data(), ptr(output), r.count, r.dtype,
                                     &r.op));
  call.use(input);
  call.use(output);
  call.use(r.factor);
}
}  // namespace

Work ProcessGroupLoom::_allgather_base(at::Tensor& output, at::Tensor& input,
                                       const c10d::AllgatherOptions& opts) {
  const char* name = "loomccl _allgather_base";
  check_loom(input, name);
  check_contiguous(output, name);
  check_same(output, input, size_, name);
  at::Tensor in = input.contiguous();
  if (across_hosts()) {
    Across across(*this, name, output.device());
    h_allgather_into(output, in, name);
    across.use(in);
    return across.finish(OpType::_ALLGATHER_BASE, {output});
  }
  Call call(*this, name, OpType::_ALLGATHER_BASE, output.device());
  allgather_into(call, output, in, size_);
  return call.finish({output});
}

Work ProcessGroupLoom::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& opts) {
  const char* name = "loomccl allgather_into_tensor_coalesced";
  TORCH_CHECK(!outputs.empty() && outputs.size() == inputs.size(), name,
              ": expected as many outputs as inputs");
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_loom(inputs[i], name);
    check_contiguous(outputs[i], name);
    check_same(outputs[i], inputs[i], size_, name);
    ins.push_back(inputs[i].contiguous());
  }
  if (across_hosts()) {
    Across across(*this, name, outputs[0].device());
    for (size_t i = 0; i < ins.size(); ++i) h_allgather_into(outputs[i], ins[i], name);
    for (auto& in : ins) across.use(in);
    return across.finish(OpType::COALESCED, outputs);
  }
  Call call(*this, name, OpType::COALESCED, outputs[0].device());
  for (size_t i = 0; i < ins.size(); ++i) allgather_into(call, outputs[i], ins[i], size_);
  return call.finish(outputs);
}

Work ProcessGroupLoom::reduce_scatter(std::vector<at::Tensor>& outputs,
                                      std::vector<std::vector<at::Tensor>>& inputs,
                                      const c10d::ReduceScatterOptions& opts) {
  const char* name = "loomccl reduce_scatter";
  at::Tensor& output = single(outputs, name);
  check_contiguous(output, name);
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), name,
              ": expected one list of ", size_, " input tensors");
  std::vector<at::Tensor> ins;
  std::vector<const void*> send;
  for (auto& in : inputs[0]) {
    check_loom(in, name);
    check_same(in, output, 1, name);
    ins.push_back(in.contiguous());
    send.push_back(ptr(ins.back()));
  }
  if (across_hosts()) {
    Across across(*this, name, output.device());
    // Each host's ranks in rank order, then the hosts in order (as all_reduce).
    std::vector<at::Tensor> flat;
    for (auto& in : ins) flat.push_back(in.reshape({-1}));
    h_reduce_scatter(output, at::cat(flat), opts.reduceOp, name);
    for (auto& in : ins) across.use(in);
    return across.finish(OpType::REDUCE_SCATTER, {output});
  }
  Reduction r = reduction_for(output, opts.reduceOp, name);
  Call call(*this, name, OpType::REDUCE_SCATTER, output.device());
  call.check(loom_ccl_reduce_scatter(call.work(), send.data(), ptr(output), r.count, r.dtype,
                                     &r.op));
  for (auto& in : ins) call.use(in);
  call.use(output);
  call.use(r.factor);
  return call.finish({output});
}

Work ProcessGroupLoom::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                            const c10d::ReduceScatterOptions& opts) {
  const char* name = "loomccl _reduce_scatter_base";
  check_loom(input, name);
  check_contiguous(output, name);
  check_same(input, output, size_, name);
  at::Tensor in = input.contiguous();
  if (across_hosts()) {
    Across across(*this, name, output.device());
    h_reduce_scatter(output, in, opts.reduceOp, name);
    across.use(in);
    return across.finish(OpType::_REDUCE_SCATTER_BASE, {output});
  }
  Reduction r = reduction_for(output, opts.reduceOp, name);
  Call call(*this, name, OpType::_REDUCE_SCATTER_BASE, output.device());
  reduce_scatter_from(call, output, in, r, size_);
  return call.finish({output});
}

Work ProcessGroupLoom::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  const char* name = "loomccl reduce_scatter_tensor_coalesced";
  TORCH_CHECK(!outputs.empty() && outputs.size() == inputs.size(), name,
              ": expected as many outputs as inputs");
  std::vector<at::Tensor> ins;
  std::vector<Reduction> rs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_loom(inputs[i], name);
    check_contiguous(outputs[i], name);
    check_same(inputs[i], outputs[i], size_, name);
    ins.push_back(inputs[i].contiguous());
    rs.push_back(reduction_for(outputs[i], opts.reduceOp, name));
  }
  if (across_hosts()) {
    Across across(*this, name, outputs[0].device());
    for (size_t i = 0; i < ins.size(); ++i) h_reduce_scatter(outputs[i], ins[i], opts.reduceOp, name);
    for (auto& in : ins) across.use(in);
    return across.finish(OpType::COALESCED, outputs);
  }
  Call call(*this, name, OpType::COALESCED, outputs[0].device());
  for (size_t i = 0; i < ins.size(); ++i) reduce_scatter_from(call, outputs[i], ins[i], rs[i], size_);
  return call.finish(outputs);
}

Work ProcessGroupLoom::alltoall_base(at::Tensor& output, at::Tensor& input,
                                     std::vector<int64_t>& output_splits,
                                     std::vector<int64_t>& input_splits,
                                     const c10d::AllToAllOptions& opts) {
  const char* name = "loomccl alltoall_base";
  check_loom(input, name);
  check_contiguous(output, name);
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), name, ": dtypes differ");
  at::Tensor in = input.contiguous();
  // Splits count rows (dim 0); none: equal parts.
  auto byte_counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits,
                         const char* side) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const size_t row_bytes = rows ? bytes(t) / rows : 0;
    std::vector<size_t> counts(size_), offsets(size_);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, name, ": the ", side, " has ", rows,
                  " rows, not divisible by the group size ", size_);
      std::fill(counts.begin(), counts.end(), static_cast<size_t>(rows / size_) * row_bytes);
    } else {
      TORCH_CHECK(splits.size() == static_cast<size_t>(size_), name, ": ", side, " splits need ",
                  size_, " entries");
      TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows, name, ": ",
                  side, " splits do not sum to its ", rows, " rows");
      for (int p = 0; p < size_; ++p) counts[p] = static_cast<size_t>(splits[p]) * row_bytes;
    }
    for (int p = 1; p < size_; ++p) offsets[p] = offsets[p - 1] + counts[p - 1];
    return std::make_pair(counts, offsets);
  };
  auto [scount, soff] = byte_counts(in, input_splits, "input");
  auto [rcount, roff] = byte_counts(output, output_splits, "output");
  if (across_hosts()) {
    Across across(*this, name, output.device());
    h_all_to_all(in, scount, output, rcount, name);
    across.use(in);
    return across.finish(OpType::ALLTOALL_BASE, {output});
  }
  Call call(*this, name, OpType::ALLTOALL_BASE, output.device());
  call.check(loom_ccl_all_to_all(call.work(), ptr(in), scount.data(), soff.data(), ptr(output),
                                 rcount.data(), roff.data(), LOOM_UINT8));
  call.use(in);
  call.use(output);
  return call.finish({output});
}

Work ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                const c10d::AllToAllOptions& opts) {
  const char* name = "loomccl alltoall";
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) && inputs.size() == outputs.size(),
              name, ": expected ", size_, " input and output tensors");
  std::vector<at::Tensor> flat_in, flat_out;
  std::vector<size_t> scount, soff, rcount, roff;
  size_t stotal = 0, rtotal = 0;
  for (int p = 0; p < size_; ++p) {
    check_loom(inputs[p], name);
    check_loom(outputs[p], name);
    TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                    outputs[p].scalar_type() == inputs[0].scalar_type(),
                name, ": dtypes differ");
    flat_in.push_back(inputs[p].reshape({-1}));
    scount.push_back(bytes(inputs[p])), soff.push_back(stotal), stotal += scount.back();
    rcount.push_back(bytes(outputs[p])), roff.push_back(rtotal), rtotal += rcount.back();
  }
  // One contiguous buffer each way; the outputs are filled from the
  // received buffer on the communication stream.
  const at::Tensor send = at::cat(flat_in);
  const at::Tensor recv = at::empty({static_cast<int64_t>(rtotal / outputs[0].element_size())},
                                    outputs[0].options());
  if (across_hosts()) {
    Across across(*this, name, outputs[0].device());
    at::Tensor received = recv;
    h_all_to_all(send, scount, received, rcount, name);
    const int64_t es = outputs[0].element_size();
    for (int p = 0; p < size_; ++p)
      outputs[p].copy_(recv.narrow(0, static_cast<int64_t>(roff[p]) / es, outputs[p].numel())
                           .view(outputs[p].sizes()));
    across.use(send);
    across.use(recv);
    return across.finish(OpType::ALLTOALL, outputs);
  }
  Call call(*this, name, OpType::ALLTOALL, outputs[0].device());
  call.check(loom_ccl_all_to_all(call.work(), ptr(send), scount.data(), soff.data(), ptr(recv),
                                 rcount.data(), roff.data(), LOOM_UINT8));
  {
    c10::StreamGuard guard(call.comm_stream());
    const int64_t es = outputs[0].element_size();
    for (int p = 0; p < size_; ++p)
      outputs[p].copy_(recv.narrow(0, static_cast<int64_t>(roff[p]) / es,
                                   outputs[p].numel()).view(outputs[p].sizes()));
  }
  call.use(send);
  call.use(recv);
  for (auto& o : outputs) call.use(o);
  return call.finish(outputs);
}

Work ProcessGroupLoom::gather(std::vector<std::vector<at::Tensor>>& outputs,
                              std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* name = "loomccl gather";
  at::Tensor input = single(inputs, name);
  check_loom(input, name);
  input = input.contiguous();
  const int root = static_cast<int>(opts.rootRank);
  std::vector<void*> recv(size_, nullptr);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_), name,
                ": the root needs one list of ", size_, " output tensors");
    for (int p = 0; p < size_; ++p) {
      check_contiguous(outputs[0][p], name);
      check_same(outputs[0][p], input, 1, name);
      recv[p] = ptr(outputs[0][p]);
    }
    outs = outputs[0];
  }
  if (across_hosts()) {
    Across across(*this, name, input.device());
    at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
    h_allgather_into(flat, input, name);
    for (int p = 0; p < static_cast<int>(outs.size()); ++p)
      outs[p].copy_(flat.narrow(0, p * input.numel(), input.numel()).view(outs[p].sizes()));
    across.use(input);
    return across.finish(OpType::GATHER, outs);
  }
  Call call(*this, name, OpType::GATHER, input.device());
  call.check(loom_ccl_gather(call.work(), ptr(input), recv.data(), bytes(input), LOOM_UINT8, root));
  call.use(input);
  for (auto& o : outs) call.use(o);
  return call.finish(outs);
}

Work ProcessGroupLoom::scatter(std::vector<at::Tensor>& outputs,
                               std::vector<std::vector<at::Tensor>>& inputs,
                               const c10d::ScatterOptions& opts) {
  const char* name = "loomccl scatter";
  at::Tensor& output = single(outputs, name);
  check_contiguous(output, name);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<const void*> send(size_, nullptr);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), name,
                ": the root needs one list of ", size_, " input tensors");
    for (int p = 0; p < size_; ++p) {
      check_loom(inputs[0][p], name);
      check_same(inputs[0][p], output, 1, name);
      ins.push_back(inputs[0][p].contiguous());
      send[p] = ptr(ins.back());
    }
  }
  if (across_hosts()) {
    Across across(*this, name, output.device());
    // The root's parts go to every rank; each keeps its own.
    at::Tensor flat = at::empty({size_ * output.numel()}, output.options());
    for (int p = 0; p < static_cast<int>(ins.size()); ++p)
      flat.narrow(0, p * output.numel(), output.numel()).copy_(ins[p].reshape({-1}));
    h_broadcast_in_place(flat, root, name);
    output.copy_(flat.narrow(0, rank_ * output.numel(), output.numel()).view(output.sizes()));
    for (auto& in : ins) across.use(in);
    return across.finish(OpType::SCATTER, {output});
  }
  Call call(*this, name, OpType::SCATTER, output.device());
  call.check(loom_ccl_scatter(call.work(), send.data(), ptr(output), bytes(output), LOOM_UINT8,
                              root));
  for (auto& in : ins) call.use(in);
  call.use(output);
  return call.finish({output});
}

Work ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const char* name = "loomccl send";
  at::Tensor t = single(tensors, name);
  check_loom(t, name);
  t = t.contiguous();
  if (across_hosts()) return h_send(t, dst, tag);
  Call call(*this, name, OpType::SEND, t.device());
  call.check(loom_ccl_send(call.work(), ptr(t), bytes(t), LOOM_UINT8, dst));
  call.use(t);
  return call.finish({});
}

Work ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const char* name = "loomccl recv";
  at::Tensor& t = single(tensors, name);
  check_contiguous(t, name);
  if (across_hosts()) return h_recv(t, src, tag);
  Call call(*this, name, OpType::RECV, t.device());
  call.check(loom_ccl_recv(call.work(), ptr(t), bytes(t), LOOM_UINT8, src));
  call.use(t);
  return call.finish({t});
}

Work ProcessGroupLoom::barrier(const c10d::BarrierOptions& opts) {
  const char* name = "loomccl barrier";
  c10::Device device = default_device();
  if (!opts.device_ids.empty())
    device = c10::Device(c10::DeviceType::PrivateUse1,
                         static_cast<c10::DeviceIndex>(opts.device_ids[0]));
  else if (opts.device && opts.device->type() == c10::DeviceType::PrivateUse1 &&
           opts.device->has_index())
    device = *opts.device;
  if (across_hosts()) return h_barrier(device);
  Call call(*this, name, OpType::BARRIER, device);
  call.check(loom_ccl_barrier(call.work()));
  return call.finish({}, /*host_wait=*/true);
}

}  // namespace torch_loom::distributed
