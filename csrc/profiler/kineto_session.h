// One profiling session of loom's Kineto plugin: it turns the runtime's
// tracing on and off, hands the runtime the correlation id of the operator
// being recorded, and converts the trace records into Kineto activities.
// Built with USE_KINETO and the wheel's kineto headers (CMakeLists.txt).
#pragma once

#include <IActivityProfiler.h>
#include <libkineto.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/hal.h"

namespace torch_loom::profiler {

// Offsets from the runtime's trace clock (loom_trace_now) to Kineto's
// (c10::getTime(), the clock of the CPU operators' events), sampled where
// the two are read closest together.
int64_t trace_clock_offset();

// Appends the activities of `records` to `buffer` and logs them: kernels,
// fills and copies on their stream's row of their device, enqueues on the
// enqueuing thread's row, each linked to the operator with its correlation
// id (through `linked`, which may be empty) and joined to its enqueue by a
// flow. Records wholly outside [window_start, window_end] (Kineto's ns; 0,
// 0: no window) are left out. Adds each (device, stream) used to
// `streams`.
void append_activities(const std::vector<loom_trace_record>& records, int64_t clock_offset,
                       const libkineto::getLinkedActivityCallback& linked,
                       int64_t window_start, int64_t window_end,
                       libkineto::CpuTraceBuffer& buffer, libkineto::ActivityLogger& logger,
                       std::set<std::pair<int32_t, uint64_t>>& streams);

class ActivityProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  ActivityProfilerSession();

  void start() override;
  void stop() override;
  std::vector<std::string> errors() override { return errors_; }
  void processTrace(libkineto::ActivityLogger& logger) override;
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback getLinkedActivity,
                    int64_t startTime, int64_t endTime) override;
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override;
  std::vector<libkineto::ResourceInfo> getResourceInfos() override;
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override;
  void pushCorrelationId(uint64_t id) override;
  void popCorrelationId() override;
  std::unordered_map<std::string, std::string> getMetadata() override;

 private:
  // Activities point to the buffer's span: the buffer stays where it is
  // until getTraceBuffer hands it over.
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<std::string> errors_;
  std::set<std::pair<int32_t, uint64_t>> streams_;  // (device, stream id)
  int64_t start_ns_ = 0, stop_ns_ = 0;
  int64_t clock_offset_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace torch_loom::profiler
