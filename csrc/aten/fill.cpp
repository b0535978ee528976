// fill_ and zero_ with the fill kernel. The value is first converted to the
// tensor's dtype on the host (with PyTorch's overflow check), so the kernel
// stores it exactly.
#include <ATen/Dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"
#include "loom/kernels/fill.h"
#include "register.h"

namespace torch_loom {
namespace {

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  loom_scalar s[2] = {scalar_i(0), scalar_f(0)};
  uint32_t n = 1;
  at::ScalarType type = self.scalar_type();
  if (at::isComplexType(type)) {
    AT_DISPATCH_COMPLEX_TYPES(type, "fill_", [&] {
      auto v = value.to<scalar_t>();
      s[0] = scalar_f(v.real());
      s[1] = scalar_f(v.imag());
    });
    n = 2;
  } else if (at::isFloatingType(type)) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type, "fill_", [&] {
      s[0] = scalar_f(static_cast<double>(value.to<scalar_t>()));
    });
  } else {
    AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, type, "fill_", [&] {
      s[0] = scalar_i(static_cast<int64_t>(value.to<scalar_t>()));
    });
  }
  loom_tensor t = describe(self, "fill_");
  // A dense tensor in another dimension order (channels last, a permuted
  // view) is still one run of memory, and every element takes the same
  // value: filled as that run, not element by element at its strides.
  if (self.dim() > 1 && !self.is_contiguous() && self.is_non_overlapping_and_dense()) {
    t.rank = 1;
    t.sizes[0] = self.numel();
    t.strides[0] = 1;
  }
  launch("fill_", LOOM_KERNEL("fill.strided"), {&t, 1}, {s, n}, self.numel(),
         LOOM_FILL_GRAIN, -1, LaunchInfo{0, /*fill=*/true});
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "fill_ only supports 0-dimension value tensor but got tensor "
              "with ", value.dim(), " dimensions.");
  if (value.device().is_cpu()) return fill_scalar(self, value.item());
  // A loom value stays on the device: broadcast-copy it.
  self.copy_(value);
  return self;
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "fill_.Scalar", fill_scalar);
  LOOM_IMPL(m, "fill_.Tensor", fill_tensor);
  LOOM_IMPL(m, "zero_", zero);
}

}  // namespace torch_loom
