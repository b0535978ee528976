// Autocast on loom: torch.autocast("loom") casts as torch.autocast("cuda")
// does. PyTorch registers neither the fallthrough nor any cast policy for
// an out-of-tree device, so without this file every op fails inside the
// context. The op lists are PyTorch's own (ATen/autocast_mode.h), the ones
// its CUDA registration expands, so loom keeps CUDA's policy as PyTorch
// revises it: matmuls, convolutions and attention in the lower precision;
// softmax, log_softmax, sums and cumulative ops with an fp32 result; norms,
// losses, exp/log/pow in fp32; the promoting ops in the widest input type.
// Where CPU autocast differs (it leaves softmax, the norms and sums in the
// input's type; it promotes cat and stack, which promote by themselves
// anyway), loom does what a CUDA user expects. CUDA's two cudnn_convolution
// entries name cuDNN ops that loom never runs.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_loom::amp {
namespace {

// As on CUDA: binary_cross_entropy is unsafe in fp16 and has no fp32 policy.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

}  // namespace

// Ops without a policy run as they are, in the types they are given.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// The shared lists spell their signatures as ATen's own namespace does.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define LOOM_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define LOOM_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define LOOM_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define LOOM_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(LOOM_LOWER_PRECISION_FP)
  AT_FORALL_FP32(LOOM_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(LOOM_FP32_SET_OPT_DTYPE)
  // norm.Scalar and norm.ScalarOpt_dim: redispatched with dtype=fp32
  // appended (fp32_append_dtype), since norm does not promote by itself.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(LOOM_PROMOTE)
#undef LOOM_LOWER_PRECISION_FP
#undef LOOM_FP32
#undef LOOM_FP32_SET_OPT_DTYPE
#undef LOOM_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace torch_loom::amp
