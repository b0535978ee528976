// The device of a boxed call, for the guard of register.h.
#include "register.h"

namespace torch_loom::guard_detail {

c10::DeviceIndex stack_device(const torch::jit::Stack& stack, size_t num_args) {
  Found found;
  for (size_t i = stack.size() - num_args; i < stack.size() && found.tensor < 0; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      take(found, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        take(found, t);
        if (found.tensor >= 0) break;
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        take(found, t);
        if (found.tensor >= 0) break;
      }
    } else if (v.isDevice()) {
      take(found, std::optional<c10::Device>(v.toDevice()));
    }
  }
  return found.index();
}

}  // namespace torch_loom::guard_detail
