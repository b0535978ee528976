// Which tensors a loom tensor can take the metadata of in place.
//
// `param.data = t` (`set_data`), `Module._apply` (so `model.to("loom")`
// keeps its Parameter objects, their ties, hooks and an optimizer's
// references) and `swap_tensors` ask `_has_compatible_shallow_copy_type`.
// c10's built-in answer lets the dense CPU, CUDA, MPS, HIP, XPU, HPU and
// MTIA tensors stand in for one another but leaves PrivateUse1 out, so that
// every `.to("loom")` would make new Parameters. A dense loom tensor is
// compatible with every tensor that a dense CUDA tensor is compatible with,
// and with other dense loom tensors whatever their device index.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_loom {
namespace {

bool is_dense(c10::DispatchKeySet ks) {
  constexpr auto backends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
       c10::BackendComponent::MPSBit, c10::BackendComponent::HIPBit,
       c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
       c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
  return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (is_dense(self.key_set()) && is_dense(from.key_set())) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

// The op is CompositeImplicitAutograd: a kernel under PrivateUse1 alone
// would leave AutogradPrivateUse1 to the autograd fallback, so both keys
// get it. Either argument on loom selects it.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace torch_loom
