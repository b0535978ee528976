// The session: start and stop the runtime's tracing, forward correlation
// ids, drain the rings into activities.
#include "profiler/kineto_session.h"

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <output_base.h>

#include <atomic>
#include <cstdlib>
#include <limits>

namespace torch_loom::profiler {
namespace {

// The correlation ids Kineto pushes on this thread, innermost last: the
// runtime stamps the innermost on what this thread enqueues. A session
// that stopped inside an operator never saw its pop: each session starts a
// generation, and a thread forgets the ids of an older one.
std::atomic<uint64_t> session_generation{0};
thread_local uint64_t tls_generation = 0;
thread_local std::vector<uint64_t> tls_correlations;

std::vector<uint64_t>& thread_correlations() {
  const uint64_t g = session_generation.load(std::memory_order_relaxed);
  if (tls_generation != g) {
    tls_correlations.clear();
    tls_generation = g;
  }
  return tls_correlations;
}

// Records per stream ring: LOOM_PROFILER_RECORDS, else the runtime's
// default.
size_t ring_records() {
  const char* env = std::getenv("LOOM_PROFILER_RECORDS");
  if (!env || !*env) return 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(env, &end, 10);
  TORCH_CHECK(end && !*end && n > 0,
              "LOOM_PROFILER_RECORDS must be a positive number of records, got '", env, "'");
  return static_cast<size_t>(n);
}

}  // namespace

int64_t trace_clock_offset() {
  // The pair read in the shortest interval bounds the offset best.
  int64_t best = std::numeric_limits<int64_t>::max(), offset = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t before = c10::getTime();
    const int64_t trace = static_cast<int64_t>(loom_trace_now());
    const int64_t after = c10::getTime();
    if (after - before < best) {
      best = after - before;
      offset = before + (after - before) / 2 - trace;
    }
  }
  return offset;
}

ActivityProfilerSession::ActivityProfilerSession()
    : buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {}

void ActivityProfilerSession::start() {
  session_generation.fetch_add(1, std::memory_order_relaxed);
  clock_offset_ = trace_clock_offset();
  start_ns_ = c10::getTime();
  const loom_status st = loom_trace_enable(ring_records());
  if (st != LOOM_OK) {
    errors_.push_back(std::string("loom: tracing could not start: ") + loom_last_error());
    status_ = libkineto::TraceStatus::ERROR;
    return;
  }
  status_ = libkineto::TraceStatus::RECORDING;
}

void ActivityProfilerSession::stop() {
  loom_trace_disable();
  stop_ns_ = c10::getTime();
  dropped_ = loom_trace_dropped();  // for getMetadata, which comes before processTrace
  if (status_ == libkineto::TraceStatus::RECORDING) status_ = libkineto::TraceStatus::PROCESSING;
}

void ActivityProfilerSession::processTrace(libkineto::ActivityLogger& logger) {
  processTrace(logger, nullptr, 0, 0);
}

void ActivityProfilerSession::processTrace(libkineto::ActivityLogger& logger,
                                           libkineto::getLinkedActivityCallback getLinkedActivity,
                                           int64_t startTime, int64_t endTime) {
  std::vector<loom_trace_record> records;
  constexpr size_t kBatch = 4096;
  for (;;) {
    const size_t have = records.size();
    records.resize(have + kBatch);
    const size_t got = loom_trace_drain(records.data() + have, kBatch);
    records.resize(have + got);
    if (got == 0) break;
  }
  dropped_ = loom_trace_dropped();
  buffer_->span = libkineto::TraceSpan(startTime ? startTime : start_ns_,
                                       endTime ? endTime : stop_ns_, "loom");
  append_activities(records, clock_offset_, getLinkedActivity, startTime, endTime, *buffer_,
                    logger, streams_);
  if (dropped_) {
    const std::string what =
        "loom profiler: " + std::to_string(dropped_) +
        " device trace records were dropped because a stream's trace ring was full; "
        "set LOOM_PROFILER_RECORDS to more records per stream (default 65536)";
    errors_.push_back(what);
    TORCH_WARN(what);
  }
}

std::unique_ptr<libkineto::DeviceInfo> ActivityProfilerSession::getDeviceInfo() {
  const int64_t device = streams_.empty() ? 0 : streams_.begin()->first;
  const std::string name = "loom:" + std::to_string(device);
  return std::make_unique<libkineto::DeviceInfo>(
      libkineto::DeviceInfo{device, device, name, name});
}

std::vector<libkineto::ResourceInfo> ActivityProfilerSession::getResourceInfos() {
  std::vector<libkineto::ResourceInfo> rows;
  for (const auto& [device, stream] : streams_)
    rows.push_back(libkineto::ResourceInfo{static_cast<int64_t>(stream),
                                           static_cast<int64_t>(stream), device,
                                           "loom stream " + std::to_string(stream)});
  return rows;
}

std::unique_ptr<libkineto::CpuTraceBuffer> ActivityProfilerSession::getTraceBuffer() {
  return std::move(buffer_);
}

void ActivityProfilerSession::pushCorrelationId(uint64_t id) {
  thread_correlations().push_back(id);
  loom_trace_set_correlation(id);
}

void ActivityProfilerSession::popCorrelationId() {
  std::vector<uint64_t>& ids = thread_correlations();
  if (!ids.empty()) ids.pop_back();
  loom_trace_set_correlation(ids.empty() ? 0 : ids.back());
}

std::unordered_map<std::string, std::string> ActivityProfilerSession::getMetadata() {
  if (!dropped_) return {};
  return {{"loom_dropped_trace_records", std::to_string(dropped_)}};
}

}  // namespace torch_loom::profiler
