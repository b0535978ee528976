#include "distributed/work_loom.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

#include "common.h"
#include "runtime/stream.h"

namespace torch_loom::distributed {

WorkLoom::WorkLoom(int rank, c10d::OpType type, const char* name, loom_ccl_work_t* work,
                   std::vector<at::Tensor> outputs, c10::Stream comm_stream, bool host_wait)
    : c10d::Work(rank, type),
      name_(name),
      work_(work),
      outputs_(std::move(outputs)),
      comm_stream_(comm_stream),
      host_wait_(host_wait) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{comm_stream.device()});
  // The future records its events on the current streams: the
  // communication stream, whose work so far ends with this work's.
  c10::StreamGuard guard(comm_stream_);
  future_->markCompleted(c10::IValue(outputs_));
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
  try {
    raise_status(st, name_);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
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

WorkDone::WorkDone(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   c10::Device device)
    : c10d::Work(rank, type), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     std::vector<c10::Device>{device});
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

}  // namespace torch_loom::distributed
