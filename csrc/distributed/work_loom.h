// The Work of a loomccl collective: a loomccl work (ended by a loom event on
// the communication stream) and the outputs it produces.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <c10/core/Stream.h>

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

// The Work of a collective that ran to its end before the call returned
// (the collectives between machines: their Gloo part blocks the host):
// completed, with its outputs, on the streams current at its end.
class WorkDone : public c10d::Work {
 public:
  WorkDone(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, c10::Device device);
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds) override { return true; }
  void blockCurrentStream() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_loom::distributed
