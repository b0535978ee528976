// Trace records -> Kineto activities.
//
// A command's record becomes a device activity on its stream's row
// (pid = device, tid = stream): CONCURRENT_KERNEL for a kernel,
// GPU_MEMSET for a fill, GPU_MEMCPY for a copy (types that PyTorch counts
// as PrivateUse1 device time), PRIVATEUSE1_DRIVER for a host callback.
// Its enqueue becomes a PRIVATEUSE1_RUNTIME activity on the enqueuing
// thread's row, as a CUDA launch call does. Both link to the operator
// whose correlation id the enqueuing thread carried (so that PyTorch adds
// the device time to that operator), and a flow (the command's sequence
// number) joins the enqueue to the execution in the trace viewer.
#include <unistd.h>

#include <output_base.h>

#include <string>

#include "profiler/kineto_session.h"

namespace torch_loom::profiler {
namespace {

libkineto::ActivityType activity_type(uint32_t kind) {
  switch (kind) {
    case LOOM_TRACE_FILL: return libkineto::ActivityType::GPU_MEMSET;
    case LOOM_TRACE_COPY: return libkineto::ActivityType::GPU_MEMCPY;
    case LOOM_TRACE_CALLBACK: return libkineto::ActivityType::PRIVATEUSE1_DRIVER;
    case LOOM_TRACE_ENQUEUE: return libkineto::ActivityType::PRIVATEUSE1_RUNTIME;
    default: return libkineto::ActivityType::CONCURRENT_KERNEL;
  }
}

}  // namespace

void append_activities(const std::vector<loom_trace_record>& records, int64_t clock_offset,
                       const libkineto::getLinkedActivityCallback& linked,
                       int64_t window_start, int64_t window_end,
                       libkineto::CpuTraceBuffer& buffer, libkineto::ActivityLogger& logger,
                       std::set<std::pair<int32_t, uint64_t>>& streams) {
  const bool windowed = window_start != 0 || window_end != 0;
  const int32_t pid = static_cast<int32_t>(getpid());
  for (const loom_trace_record& r : records) {
    const int64_t start = static_cast<int64_t>(r.start_ns) + clock_offset;
    const int64_t end = static_cast<int64_t>(r.end_ns) + clock_offset;
    if (windowed && (end < window_start || start > window_end)) continue;
    const libkineto::ITraceActivity* op =
        linked && r.correlation ? linked(static_cast<int32_t>(r.correlation)) : nullptr;
    const bool enqueue = r.kind == LOOM_TRACE_ENQUEUE;
    // An enqueue outside any recorded operator has nothing to show the
    // flow from; PyTorch would take it for an operator of its own.
    if (enqueue && !op) continue;
    buffer.emplace_activity(buffer.span, activity_type(r.kind), r.name ? r.name : "");
    libkineto::GenericTraceActivity& a = libkineto::CpuTraceBuffer::toRef(buffer.activities.back());
    a.startTime = start;
    a.endTime = end;
    a.id = static_cast<int32_t>(r.sequence);
    a.linked = op;
    a.flow.id = static_cast<uint32_t>(r.sequence);
    a.flow.type = libkineto::kLinkAsyncCpuGpu;
    a.flow.start = enqueue;
    a.addMetadata("correlation", r.sequence);
    if (enqueue) {
      a.device = pid;
      a.resource = static_cast<int32_t>(r.thread);
      a.threadId = static_cast<int32_t>(r.thread);
      if (r.op) a.addMetadataQuoted("op", r.op);
    } else {
      a.device = r.device;
      a.resource = static_cast<int32_t>(r.stream);
      a.threadId = static_cast<int32_t>(r.stream);
      streams.emplace(r.device, r.stream);
      a.addMetadata("device", r.device);
      a.addMetadata("stream", r.stream);
      if (r.op) a.addMetadataQuoted("op", r.op);
      if (r.kind != LOOM_TRACE_CALLBACK) a.addMetadata("bytes", r.bytes);
      if (r.flops) a.addMetadata("flops", r.flops);
      if (r.kind == LOOM_TRACE_COPY && end > start)
        a.addMetadata("memory bandwidth (GB/s)", static_cast<double>(r.bytes) /
                                                     static_cast<double>(end - start));
    }
    logger.handleActivity(a);
  }
}

}  // namespace torch_loom::profiler
