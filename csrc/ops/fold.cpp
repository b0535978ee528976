// F.unfold and F.fold on loom (aten::im2col, aten::col2im): unfold is the
// convolution's own im2col kernel (kernels/im2col.c) over a 2-d geometry,
// fold an index_add. Shapes and argument checks come from the meta device.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "ops/conv_internal.h"
#include "register.h"

namespace torch_loom::fold {
namespace {

using at::Tensor;
using conv::Geom;

Geom geometry(at::IntArrayRef k, at::IntArrayRef d, at::IntArrayRef p, at::IntArrayRef s,
              int64_t oh, int64_t ow) {
  Geom g;
  for (int i = 0; i < 2; ++i) {
    g.k[1 + i] = k[i];
    g.d[1 + i] = d[i];
    g.p[1 + i] = p[i];
    g.s[1 + i] = s[i];
  }
  g.grid[1] = oh;
  g.grid[2] = ow;
  return g;
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
  const Geom g = geometry(k, d, p, s, windows(x.size(2), 0, k, d, p, s),
                          windows(x.size(3), 1, k, d, p, s));
  Tensor col = at::empty({c * g.taps(), n, g.positions()}, x.options());
  const loom_tensor ts[2] = {describe(col, "im2col"), conv::image5(x, "im2col")};
  const int64_t rows = c * g.taps() * n;
  launch("im2col", loom_im2col_kernel, ts, conv::geom_scalars(g), rows,
         std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.positions())));
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
