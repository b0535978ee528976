// F.unfold and F.fold on loom (aten::im2col, aten::col2im): unfold is the
// convolution's own im2col kernel ("im2col.to_col") over a 2-d geometry,
// fold an index_add. Shapes and argument checks come from the meta device.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <array>

#include "common.h"
#include "loom/kernels/im2col.h"
#include "register.h"

namespace torch_loom::fold {
namespace {

using at::Tensor;

// The 2-d window as the kernel's 3-d geometry scalars, depth 1.
std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> geometry(at::IntArrayRef k, at::IntArrayRef d,
                                                        at::IntArrayRef p, at::IntArrayRef s,
                                                        int64_t oh, int64_t ow) {
  std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> sc{};
  for (int i = 0; i < 3; ++i) {
    const bool depth = i == 0;
    sc[i] = scalar_i(depth ? 1 : k[i - 1]);
    sc[3 + i] = scalar_i(depth ? 1 : s[i - 1]);
    sc[6 + i] = scalar_i(depth ? 0 : p[i - 1]);
    sc[9 + i] = scalar_i(depth ? 1 : d[i - 1]);
  }
  sc[12] = scalar_i(1);
  sc[13] = scalar_i(oh);
  sc[14] = scalar_i(ow);
  return sc;
}

// (N, C, H, W) as the kernel's (N, C, D, H, W) with D = 1.
loom_tensor image5(const Tensor& x, const char* op) {
  const loom_tensor d = describe(x, op);
  loom_tensor r = d;
  r.rank = 5;
  r.sizes[2] = 1;
  r.strides[2] = 0;
  for (int i = 3; i < 5; ++i) {
    r.sizes[i] = d.sizes[i - 1];
    r.strides[i] = d.strides[i - 1];
  }
  return r;
}

int64_t windows(int64_t size, int i, at::IntArrayRef k, at::IntArrayRef d, at::IntArrayRef p,
                at::IntArrayRef s) {
  return (size + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
}

Tensor& im2col_out(const Tensor& self, at::IntArrayRef k, at::IntArrayRef d, at::IntArrayRef p,
                   at::IntArrayRef s, Tensor& out) {
  Tensor m = at::im2col(meta_like(self), k, d, p, s);
  check_out_dtype(out, self, "im2col");
  at::native::resize_output(out, m.sizes());
  if (out.numel() == 0) return out;
  const Tensor x = self.dim() == 3 ? self.unsqueeze(0) : self;
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t oh = windows(x.size(2), 0, k, d, p, s), ow = windows(x.size(3), 1, k, d, p, s);
  const int64_t taps = k[0] * k[1], positions = oh * ow;
  Tensor col = at::empty({c * taps, n, positions}, x.options());
  const loom_tensor ts[2] = {describe(col, "im2col"), image5(x, "im2col")};
  const int64_t rows = c * taps * n;
  launch("im2col", LOOM_KERNEL("im2col.to_col"), ts, geometry(k, d, p, s, oh, ow), rows,
         std::max<int64_t>(1, 16384 / std::max<int64_t>(1, positions)));
  Tensor r = col.permute({1, 0, 2});
  return out.copy_(self.dim() == 3 ? r.squeeze(0) : r);
}

Tensor im2col(const Tensor& self, at::IntArrayRef k, at::IntArrayRef d, at::IntArrayRef p,
              at::IntArrayRef s) {
  Tensor out = at::empty({0}, self.options());
  return im2col_out(self, k, d, p, s, out);
}

// Overlapping windows add in (kh, kw) order, in the tensor's dtype, as on
// the CPU: an index_add of every col entry into its image element, or
// into a spare slot past the plane for taps that fall in the padding.
Tensor& col2im_out(const Tensor& self, c10::SymIntArrayRef size, at::IntArrayRef k,
                   at::IntArrayRef d, at::IntArrayRef p, at::IntArrayRef s, Tensor& out) {
  Tensor m = at::col2im_symint(meta_like(self), size, k, d, p, s);
  check_out_dtype(out, self, "col2im");
  at::native::resize_output(out, m.sizes());
  if (out.numel() == 0) return out;
  const Tensor cols = self.dim() == 2 ? self.unsqueeze(0) : self;
  const int64_t n = cols.size(0), oh = size[0].expect_int(), ow = size[1].expect_int();
  const int64_t gh = windows(oh, 0, k, d, p, s), gw = windows(ow, 1, k, d, p, s);
  const int64_t c = cols.size(1) / (k[0] * k[1]);
  const auto opts = self.options().dtype(at::kLong);
  Tensor iy = at::arange(k[0], opts).mul_(d[0]).view({-1, 1, 1, 1}) +
              (at::arange(gh, opts).mul_(s[0]) - p[0]).view({1, 1, -1, 1});
  Tensor ix = at::arange(k[1], opts).mul_(d[1]).view({1, -1, 1, 1}) +
              (at::arange(gw, opts).mul_(s[1]) - p[1]).view({1, 1, 1, -1});
  Tensor inside = (iy >= 0) & (iy < oh) & (ix >= 0) & (ix < ow);
  Tensor dst = at::where(inside, iy * ow + ix, oh * ow).reshape({-1});
  Tensor planes = at::zeros({n, c, oh * ow + 1}, self.options());
  planes.index_add_(2, dst, cols.reshape({n, c, -1}));
  Tensor img = planes.narrow(2, 0, oh * ow).view({n, c, oh, ow});
  return out.copy_(self.dim() == 2 ? img.squeeze(0) : img);
}

Tensor col2im(const Tensor& self, c10::SymIntArrayRef size, at::IntArrayRef k, at::IntArrayRef d,
              at::IntArrayRef p, at::IntArrayRef s) {
  Tensor out = at::empty({0}, self.options());
  return col2im_out(self, size, k, d, p, s, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "im2col", im2col);
  LOOM_IMPL(m, "im2col.out", im2col_out);
  LOOM_IMPL(m, "col2im", col2im);
  LOOM_IMPL(m, "col2im.out", col2im_out);
}

}  // namespace torch_loom::fold
