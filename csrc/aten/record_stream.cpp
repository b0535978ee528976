// Tensor.record_stream: keep the tensor's block from reuse until the
// stream's work so far has completed.
#include <torch/library.h>

#include "runtime/allocator.h"
#include "register.h"

namespace torch_loom {
namespace {

void record_stream_op(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected a loom stream, got one of ",
              stream.device());
  record_stream(self.storage().data_ptr(), stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "record_stream", record_stream_op);
}

}  // namespace torch_loom
