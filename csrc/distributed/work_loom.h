// The Work of a loomccl collective: a loomccl work (ended by a loom event on
// the communication stream) and the outputs it produces.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/ccl.h"

namespace torch_loom::distributed {

class WorkLoom : public c10d::Work {
 public:
  // Takes the reference to `work`. `host_wait`: wait() also blocks the
  // host until the work is done (barrier).
  WorkLoom(int rank, c10d::OpType type, const char* name, loom_ccl_work_t* work,
           std::vector<at::Tensor> outputs, c10::Stream comm_stream, bool host_wait);
  ~WorkLoom() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Makes the current stream of the communicator's device wait for the
  // work; a failure of the work becomes an error of that stream.
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void blockCurrentStream() override { synchronize(); }
  // Completed (with the outputs) once the communication stream reaches the
  // end of the work: then() callbacks and value() order themselves after it
  // on their streams, as CUDA futures do.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  const char* name_;
  loom_ccl_work_t* work_;
  std::vector<at::Tensor> outputs_;
  c10::Stream comm_stream_;
  bool host_wait_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The first failure of a Gloo step between hosts (shared by the process
// group, the steps in flight and the Works): it breaks the group as a
// loomccl failure breaks the communicator.
struct HostFailure {
  void set(loom_status status, std::string message);  // the first one stays
  loom_status status();
  std::string message();

 private:
  std::mutex mutex_;
  loom_status status_ = LOOM_OK;
  std::string message_;
};

// The Work of a collective between hosts: the loomccl works inside the
// host, then the Gloo steps and the rest on the communication stream up to
// `end` (an event recorded there). wait() makes the current stream wait
// for all of it, and fail there if a loomccl work or a Gloo step failed;
// `host_wait` (barrier): wait() also blocks the host until it is done.
class WorkAcross : public c10d::Work {
 public:
  // Takes the reference to `end`.
  WorkAcross(int rank, c10d::OpType type, const char* name,
             std::vector<c10::intrusive_ptr<c10d::Work>> local, loom_event_t* end,
             std::shared_ptr<HostFailure> failure, std::vector<at::Tensor> outputs,
             c10::Stream comm_stream, bool host_wait);
  ~WorkAcross() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void blockCurrentStream() override { synchronize(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  const char* name_;
  std::vector<c10::intrusive_ptr<c10d::Work>> local_;
  loom_event_t* end_;
  std::shared_ptr<HostFailure> failure_;
  std::vector<at::Tensor> outputs_;
  c10::Stream comm_stream_;
  bool host_wait_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_loom::distributed
