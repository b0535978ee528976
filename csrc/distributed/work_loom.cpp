#include "distributed/work_loom.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

#include <cstdint>
#include <memory>

#include "common.h"
#include "runtime/stream.h"

namespace torch_loom::distributed {
namespace {

// A work's future: its outputs, completed on the communication stream. The
// future records its events on the current streams: the communication
// stream, whose work so far ends with this work's.
c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs,
                                                         c10::Stream comm_stream) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{comm_stream.device()});
  c10::StreamGuard guard(comm_stream);
  future->markCompleted(c10::IValue(outputs));
  return future;
}

// The exception a failed status raises, with the work's name.
std::exception_ptr status_exception(loom_status st, const char* name) {
  try {
    raise_status(st, name);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

WorkLoom::WorkLoom(int rank, c10d::OpType type, const char* name, loom_ccl_work_t* work,
                   std::vector<at::Tensor> outputs, c10::Stream comm_stream, bool host_wait)
    : c10d::Work(rank, type),
      name_(name),
      work_(work),
      outputs_(std::move(outputs)),
      comm_stream_(comm_stream),
      host_wait_(host_wait) {
  future_ = completed_future(outputs_, comm_stream_);
}

WorkLoom::~WorkLoom() { loom_ccl_work_release(work_); }

bool WorkLoom::isCompleted() {
  return loom_ccl_work_query(work_) != LOOM_ERROR_NOT_READY;
}

bool WorkLoom::isSuccess() const {
  const loom_status st = loom_ccl_work_query(work_);
  return st == LOOM_OK || st == LOOM_ERROR_NOT_READY;
}

std::exception_ptr WorkLoom::exception() const {
  const loom_status st = loom_ccl_work_query(work_);
  if (st == LOOM_OK || st == LOOM_ERROR_NOT_READY) return nullptr;
  return status_exception(st, name_);
}

void WorkLoom::synchronize() {
  check(loom_ccl_work_wait(work_, current_stream(comm_stream_.device_index())), name_);
}

bool WorkLoom::wait(std::chrono::milliseconds timeout) {
  synchronize();
  // A barrier is a meeting of the hosts: wait() returns when every rank
  // reached it (bounded by the communicator's timeout).
  if (host_wait_) check(loom_ccl_work_synchronize(work_), name_);
  return true;
}

void HostFailure::set(loom_status status, std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (status_ != LOOM_OK) return;
  status_ = status;
  message_ = std::move(message);
}

loom_status HostFailure::status() {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

std::string HostFailure::message() {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

namespace {

// One element's launch on the waiting stream: the Gloo steps' status, which
// the runtime records on that stream as an asynchronous error. It owns the
// heap reference it is given (it runs exactly once).
int across_check(const loom_kernel_args* args, int64_t, int64_t) {
  std::unique_ptr<std::shared_ptr<HostFailure>> failure(
      reinterpret_cast<std::shared_ptr<HostFailure>*>(static_cast<uintptr_t>(args->scalars[0].u)));
  const loom_status st = (*failure)->status();
  if (st == LOOM_OK) return LOOM_OK;
  return loom_error(st, "%s", (*failure)->message().c_str());
}

}  // namespace

WorkAcross::WorkAcross(int rank, c10d::OpType type, const char* name,
                       std::vector<c10::intrusive_ptr<c10d::Work>> local, loom_event_t* end,
                       std::shared_ptr<HostFailure> failure, std::vector<at::Tensor> outputs,
                       c10::Stream comm_stream, bool host_wait)
    : c10d::Work(rank, type),
      name_(name),
      local_(std::move(local)),
      end_(end),
      failure_(std::move(failure)),
      outputs_(std::move(outputs)),
      comm_stream_(comm_stream),
      host_wait_(host_wait) {
  future_ = completed_future(outputs_, comm_stream_);
}

WorkAcross::~WorkAcross() { loom_event_release(end_); }

bool WorkAcross::isCompleted() {
  if (loom_event_query(end_) == LOOM_ERROR_NOT_READY) return false;
  for (auto& w : local_)
    if (!w->isCompleted()) return false;
  return true;
}

bool WorkAcross::isSuccess() const {
  if (failure_->status() != LOOM_OK) return false;
  for (auto& w : local_)
    if (!w->isSuccess()) return false;
  return true;
}

std::exception_ptr WorkAcross::exception() const {
  const loom_status st = failure_->status();
  if (st != LOOM_OK)
    return status_exception(loom_error(st, "%s", failure_->message().c_str()), name_);
  for (auto& w : local_)
    if (auto e = w->exception()) return e;
  return nullptr;
}

void WorkAcross::synchronize() {
  // The Gloo steps' status first: a failure there aborts the communicator,
  // so the loomccl works after it fail too, with a message that says less.
  loom_stream_t* stream = current_stream(comm_stream_.device_index());
  check(loom_stream_wait_event(stream, end_), name_);
  loom_scalar arg;
  auto* ref = new std::shared_ptr<HostFailure>(failure_);
  arg.u = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ref));
  loom_launch_desc desc{};
  desc.name = name_;
  desc.fn = across_check;
  desc.scalars = &arg;
  desc.num_scalars = 1;
  desc.range = 1;
  desc.grain = 1;
  const loom_status st = loom_launch(stream, &desc);
  if (st != LOOM_OK) {
    delete ref;
    raise_status(st, name_);
  }
  for (auto& w : local_) w->synchronize();
}

bool WorkAcross::wait(std::chrono::milliseconds) {
  synchronize();
  if (host_wait_) {
    check(loom_event_synchronize(end_), name_);
    const loom_status st = failure_->status();
    if (st != LOOM_OK) raise_status(loom_error(st, "%s", failure_->message().c_str()), name_);
    for (auto& w : local_) w->wait();
  }
  return true;
}

}  // namespace torch_loom::distributed
