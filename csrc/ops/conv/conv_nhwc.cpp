// bf16 2-d convolutions over a channels-last padded copy of the image
// ("conv_nhwc.*", loom/kernels/conv_nhwc.h), launched as their plans say.
#include "ops/conv/conv_internal.h"

#include <algorithm>

namespace torch_loom::conv {

using at::Tensor;

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

Tensor nhwc_copy(const Tensor& input, int64_t top, int64_t left, int64_t wq, int64_t sh,
                 int64_t sw, int64_t plane, int64_t channels, int64_t stride, const char* op) {
  const int64_t n = input.size(0);
  Tensor xp = at::empty({n, sh * sw, plane, stride}, input.options()).narrow(3, 0, channels);
  loom_tensor pts[2] = {describe(xp, op), image5(input, op)};
  loom_scalar psc[5] = {scalar_i(top), scalar_i(left), scalar_i(wq), scalar_i(sh), scalar_i(sw)};
  launch(op, LOOM_KERNEL("conv_nhwc.pad"), pts, psc, n * sh * sw * ((plane + wq - 1) / wq),
         std::max<int64_t>(1, 16384 / (wq * channels)));
  return xp;
}

namespace {

// The weight (O, C, kh, kw) as the kernel's B tiles.
Tensor nhwc_weight(const Tensor& weight, const Tensor& out, int64_t taps, int64_t cp,
                   bool flipped, const char* op) {
  Tensor w3 = weight.reshape({weight.size(0), weight.size(1), taps});
  Tensor wp = at::empty({round_up(out.size(1), 32) / 32, cp / LOOM_CONV_NHWC_CB, taps, 32, 32},
                        out.options());
  loom_tensor wts[2] = {describe(wp, op), describe(w3, op)};
  loom_scalar wsc[1] = {scalar_i(flipped ? 1 : 0)};
  launch(op, LOOM_KERNEL("conv_nhwc.weight"), wts, wsc, wp.size(0) * 2 * wp.size(1), 1);
  return wp;
}

}  // namespace

void nhwc_run(const std::vector<NhwcConv>& convs, const Tensor& xp, const Tensor& bias,
              int64_t wq, bool flipped, const char* op, const NhwcImage* image) {
  if (convs.empty()) return;
  if (convs.size() > LOOM_CONV_NHWC_CONVS) {  // more than a launch takes (stride (5, 2): 10 phases)
    const auto cut = convs.begin() + LOOM_CONV_NHWC_CONVS;
    nhwc_run(std::vector<NhwcConv>(convs.begin(), cut), xp, bias, wq, flipped, op, image);
    nhwc_run(std::vector<NhwcConv>(cut, convs.end()), xp, Tensor(), wq, flipped, op, image);
    return;
  }
  const Geom& g = convs[0].g;
  const int64_t n = convs[0].out.size(0), cp = xp.size(3);
  std::vector<Tensor> packed;
  int64_t grid = 0;
  uint64_t flops = 0;
  for (const NhwcConv& cv : convs) {
    packed.push_back(nhwc_weight(cv.weight, cv.out, cv.g.taps(), cp, flipped, op));
    grid = std::max(grid, cv.out.size(2) * wq);
    flops += conv_flops(cv.out.numel(), cv.weight.size(1) * cv.g.taps()).flops;
  }
  const int64_t ppi = loom_conv_nhwc_positions(n, grid, device_workers(convs[0].out));
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  std::vector<loom_tensor> ts = {describe(convs[0].out, op), describe(xp, op),
                                 describe(packed[0], op),
                                 bc.defined() ? describe(bc, op) : loom_tensor{}};
  std::vector<loom_scalar> sc = {scalar_i(g.k[1]), scalar_i(g.k[2]), scalar_i(g.s[1]),
                                 scalar_i(g.s[2]), scalar_i(g.d[1]), scalar_i(g.d[2]),
                                 scalar_i(wq), scalar_i(ppi), scalar_i(convs[0].origin),
                                 scalar_i(static_cast<int64_t>(convs.size()) - 1)};
  for (size_t i = 1; i < convs.size(); ++i) {
    ts.push_back(describe(convs[i].out, op));
    ts.push_back(describe(packed[i], op));
    sc.push_back(scalar_i(convs[i].g.k[1]));
    sc.push_back(scalar_i(convs[i].g.k[2]));
    sc.push_back(scalar_i(convs[i].origin));
  }
  if (image) {  // where the copy holds the image: the kernel may leave out the padding's products
    for (int64_t v : {image->top, image->rows, image->left, image->cols}) sc.push_back(scalar_i(v));
  }
  launch(op, LOOM_KERNEL("conv_nhwc.forward"), ts, sc, n * ((grid + ppi - 1) / ppi), 1, -1,
         LaunchInfo{flops});
}

void conv_forward_nhwc(const Tensor& out, const Tensor& input, const Tensor& weight,
                       const Tensor& bias, const Geom& g, const loom_conv_forward_plan& p,
                       const char* op, bool flipped) {
  Tensor xp = nhwc_copy(input, p.top, p.left, p.wq, p.sh, p.sw, p.plane, p.copy_channels,
                        p.copy_stride, op);
  const NhwcImage image{p.top, input.size(2), p.left, input.size(3)};
  nhwc_run({NhwcConv{out, weight, g, 0}}, xp, bias, p.wq, flipped, op, &image);
}

Tensor conv_weight_grad_nhwc(const Tensor& dy, const Tensor& input,
                             const std::vector<int64_t>& w_sizes, const Geom& g,
                             const loom_conv_weight_grad_plan& p, const char* op) {
  const int64_t n = input.size(0), c = input.size(1), o = dy.size(1), taps = g.taps();
  const int64_t cp = p.copy_channels, ps = p.copy_stride, phases = int64_t{p.sh} * p.sw;
  const int64_t wq = p.wq, plane = p.plane, ho = g.grid[1], wo = g.grid[2];
  // The image with positions in pairs, each pair copy_stride from the next.
  Tensor xq = at::empty({n * phases * (plane / 2) * ps}, input.options())
                  .as_strided({n, phases, plane / 2, cp, 2},
                              {phases * (plane / 2) * ps, (plane / 2) * ps, ps, 2, 1});
  loom_tensor pts[2] = {describe(xq, op), image5(input, op)};
  loom_scalar psc[5] = {scalar_i(p.top), scalar_i(p.left), scalar_i(wq), scalar_i(p.sh),
                        scalar_i(p.sw)};
  launch(op, LOOM_KERNEL("conv_nhwc.pad"), pts, psc, n * phases * ((plane + wq - 1) / wq),
         std::max<int64_t>(1, 16384 / (wq * cp)));
  // dy on the grid, from p.lead on, zero elsewhere.
  Tensor dyp = at::zeros({n, p.out_channels, p.span}, dy.options());
  dyp.narrow(1, 0, o).narrow(2, p.lead, ho * wq).unflatten(2, {ho, wq}).narrow(3, 0, wo).copy_(dy);
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor ts[3] = {describe(gw.view({o, c, taps}), op), describe(xq, op), describe(dyp, op)};
  // [10]-[12]: the image's rows and the grid's columns, which let the kernel
  // leave out the padding's products
  loom_scalar sc[13] = {scalar_i(g.k[1]), scalar_i(g.k[2]), scalar_i(g.s[1]), scalar_i(g.s[2]),
                        scalar_i(g.d[1]), scalar_i(g.d[2]), scalar_i(wq), scalar_i(p.lead),
                        scalar_i(p.per_item), scalar_i(ho * wq), scalar_i(p.top),
                        scalar_i(input.size(2)), scalar_i(wo)};
  launch(op, LOOM_KERNEL("conv_nhwc.weight_grad"), ts, sc, p.range, 1, -1,
         conv_flops(dy.numel(), w_sizes[1] * taps));
  return gw;
}

namespace {

// Whether a 2-d window over few channels (the stem's 3 by 7x7) may fold its
// columns into the channels: C kw in [16, 32], bf16, one group.
bool foldable(const Tensor& input, const Geom& g, int64_t groups, int64_t out_channels) {
  const int64_t ckw = input.size(1) * g.k[2];
  return input.scalar_type() == at::kBFloat16 && groups == 1 && input.dim() == 4 &&
         g.k[2] > 1 && ckw <= LOOM_CONV_NHWC_CB && ckw * 2 >= LOOM_CONV_NHWC_CB &&
         out_channels >= 64;
}

// The geometry of the folded image: the window one column wide.
Geom folded_geom(const Geom& g) {
  Geom f = g;
  f.k[2] = 1, f.s[2] = 1, f.p[2] = 0, f.d[2] = 1;
  return f;
}

// folded[n][ci * kw + j][y][x] = padded[n][ci][y][x * sw + j * dw]: each
// window column of each channel a channel, the stride along rows taken.
void fold_columns(const Tensor& folded, const Tensor& input, const Geom& g) {
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), kw = g.k[2];
  Tensor xpad = at::constant_pad_nd(input.contiguous(), {g.p[2], g.p[2]});
  const int64_t wp = xpad.size(3);
  folded.view({n, c, kw, h, g.grid[2]})
      .copy_(xpad.as_strided({n, c, kw, h, g.grid[2]}, {c * h * wp, h * wp, g.d[2], wp, g.s[2]}));
}

}  // namespace

Tensor conv_weight_grad_folded(const Tensor& dy, const Tensor& input,
                               const std::vector<int64_t>& w_sizes, const Geom& g,
                               int64_t groups, const char* op) {
  if (!foldable(input, g, groups, dy.size(1))) return Tensor();
  const Geom f = folded_geom(g);
  const int64_t n = input.size(0), c = input.size(1), kw = g.k[2];
  Tensor folded = at::empty({n, c * kw, input.size(2), g.grid[2]}, input.options());
  loom_tensor ts[2] = {describe(folded, op), describe(dy, op)};
  const auto p = plan<loom_conv_weight_grad_plan>(op, LOOM_KERNEL("conv.weight_grad.plan"), ts,
                                                  plan_scalars(f, groups, input, LOOM_CONV_FOLDED));
  if (p.path != LOOM_CONV_PATH_NHWC) return Tensor();
  fold_columns(folded, input, g);
  Tensor gf = conv_weight_grad_nhwc(dy, folded, {w_sizes[0], c * kw, w_sizes[2], 1}, f, p, op);
  // (O, C, kw, kh) -> (O, C, kh, kw)
  return gf.view({w_sizes[0], c, kw, w_sizes[2]}).transpose(2, 3).contiguous();
}

}  // namespace torch_loom::conv
