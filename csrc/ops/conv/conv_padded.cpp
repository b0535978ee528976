// 2-d convolutions over zero-padded rows split into stride phases: the
// padded-row implicit GEMMs ("conv.padded.*") and Winograd's F(2x2, 3x3)
// ("conv.winograd.*"), fp32, launched as their plans say.
#include "ops/conv/conv_internal.h"

#include <algorithm>

namespace torch_loom::conv {

using at::Tensor;

Tensor pad_planes(const Tensor& x, int64_t top, int64_t left, int64_t wq, int64_t sh,
                  int64_t sw, int64_t plane, const char* op) {
  Tensor xp = at::empty({x.size(0), x.size(1) * sh * sw, plane}, x.options());
  loom_tensor ts[2] = {describe(xp, op), image5(x, op)};
  loom_scalar sc[5] = {scalar_i(top), scalar_i(left), scalar_i(wq), scalar_i(sh), scalar_i(sw)};
  launch(op, LOOM_KERNEL("conv.pad"), ts, sc, xp.size(0) * xp.size(1),
         std::max<int64_t>(1, 65536 / xp.size(2)));
  return xp;
}

namespace {

// `t` (N, C, [D = 1,] [H,] W) as rank 4 (N, C, H, W).
loom_tensor plane4(const Tensor& t, const char* op) {
  loom_tensor d = image5(t, op);
  d.rank = 4;
  for (int i = 2; i < 4; ++i) d.sizes[i] = d.sizes[i + 1], d.strides[i] = d.strides[i + 1];
  return d;
}

std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS + 4> padded_scalars(const Geom& g,
                                                                      int64_t variant,
                                                                      int64_t wq, int64_t gpad) {
  std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS + 4> sc{};
  sc[0] = scalar_i(variant);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  sc[17] = scalar_i(wq);
  sc[18] = scalar_i(gpad);
  return sc;
}

}  // namespace

void conv_forward_padded(const Tensor& out, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const Geom& g, int64_t groups,
                         const loom_conv_forward_plan& p, const char* op, bool flipped,
                         const Tensor& planes) {
  int64_t n = input.size(0), c = input.size(1), o = out.size(1);
  int64_t og = o / groups, ck = c / groups * g.taps(), cols = n * p.positions;
  Tensor xp = planes.defined() ? planes
                               : pad_planes(input, p.top, p.left, p.wq, p.sh, p.sw, p.plane, op);
  loom_tensor a = view4(weight, op, {1, groups, og, ck}, {0, og * ck, ck, 1});
  loom_tensor b = view4(xp, op, {1, groups, ck, cols}, {0, 0, cols, 1});  // shape only
  loom_tensor cc = view4(out, op, {1, groups, og, cols}, {0, og * cols, cols, 1});  // plan only
  Tensor ws = pack_a(cc, a, b, p.variant, p.workspace_bytes, p.pack_range, p.pack_grain,
                     out.options(), op, flipped ? weight : Tensor());
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[7] = {cc, a, b, describe(ws, op), describe(xp, op), plane4(out, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  auto sc = padded_scalars(g, p.variant, p.wq, p.positions);
  sc[1] = scalar_i(p.tile_positions);
  launch(op, LOOM_KERNEL("conv.padded.forward"),
         c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 7 : 6),
         c10::ArrayRef<loom_scalar>(sc.data(), 19), p.range, 1, -1,
         conv_flops(out.numel(), ck));
}

Tensor conv_weight_grad_padded(const Tensor& dy, const Tensor& input,
                               const std::vector<int64_t>& w_sizes, int64_t groups,
                               const Geom& g, const loom_conv_weight_grad_plan& p,
                               const char* op, const Tensor& planes) {
  int64_t n = input.size(0), c = input.size(1), o = dy.size(1);
  int64_t og = o / groups, ck = c / groups * g.taps();
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor cc = view4(gw, op, {1, groups, og, ck}, {0, og * ck, ck, 1});
  const int64_t gpad = p.positions;
  Tensor xp = planes.defined() ? planes
                               : pad_planes(input, p.top, p.left, p.wq, p.sh, p.sw, p.plane, op);
  // dy on the same grid, (O, N, gpad): zero past wo in each row and past ho
  // rows; channels' rows ld apart (the plan's: not a multiple of 4 KB, at
  // which the pad from a channels-last dy, writing 32 channels' planes at
  // once, had all its stores in one set of the L1 cache: 3x NCHW's time).
  const int64_t ld = loom_conv_padded_dy_row(n, gpad);
  Tensor dyp = at::empty({o * ld}, dy.options()).as_strided({o, n, gpad}, {ld, gpad, 1});
  loom_tensor pt[2] = {describe(dyp.permute({1, 0, 2}), op), image5(dy, op)};
  loom_scalar psc[3] = {scalar_i(0), scalar_i(0), scalar_i(p.wq)};
  launch(op, LOOM_KERNEL("conv.pad"), pt, psc, n * o, std::max<int64_t>(1, 65536 / gpad));
  loom_tensor a = view4(dyp, op, {1, groups, og, n * gpad}, {0, og * ld, ld, 1});
  loom_tensor b = view4(xp, op, {1, groups, n * gpad, ck}, {0, 0, ck, 1});  // shape only
  Tensor ws = pack_a(cc, a, b, p.variant, p.workspace_bytes, p.pack_range, p.pack_grain,
                     gw.options(), op);
  Tensor part = p.chunks == 1 ? gw : at::empty({p.chunks, groups, og, ck}, gw.options());
  loom_tensor ts[6] = {
      cc, a, b, describe(ws, op), describe(xp, op),
      view4(part, op, {p.chunks, groups, og, ck}, {groups * og * ck, og * ck, ck, 1})};
  auto sc = padded_scalars(g, p.variant, p.wq, gpad);
  sc[19] = scalar_i(p.chunk);
  sc[20] = scalar_i(p.per_item);
  launch(op, LOOM_KERNEL("conv.padded.weight_grad"), ts, sc, p.range, 1, -1,
         conv_flops(dy.numel(), ck));
  if (p.chunks > 1) {
    Tensor flat = gw.view({groups, og, ck});
    at::sum_out(flat, part, {0});
  }
  return gw;
}

namespace {

// Channels last as the Winograd kernels read an image in place.
bool image_in_place(const Tensor& x) {
  return x.dim() == 4 && x.size(1) > 1 && x.stride(1) == 1 && x.stride(0) >= 0 &&
         x.stride(2) >= 0 && x.stride(3) >= 0;
}

// Rows (unit column stride: NCHW), which the Winograd kernels also read in
// place.
bool image_rows(const Tensor& x) {
  return x.dim() == 4 && x.stride(3) == 1 && x.stride(0) >= 0 && x.stride(1) >= 0 &&
         x.stride(2) >= 0;
}

bool padding_in_place(int64_t top, int64_t left) {
  return top >= 0 && top <= 2 && left >= 0 && left <= 2;
}

}  // namespace

bool winograd_reads_image(const Tensor& x, const loom_conv_forward_plan& p) {
  return (image_in_place(x) || image_rows(x)) && padding_in_place(p.top, p.left) && p.sh == 2 &&
         p.sw == 2;
}

bool winograd_wgrad_reads_images(const Tensor& x, const Tensor& dy,
                                 const loom_conv_weight_grad_plan& p) {
  return ((image_in_place(x) && image_in_place(dy)) || (image_rows(x) && image_rows(dy))) &&
         padding_in_place(p.top, p.left) && p.sh == 2 && p.sw == 2;
}

void conv_forward_winograd(const Tensor& out, const Tensor& input, const Tensor& weight,
                           const Tensor& bias, const loom_conv_forward_plan& p, const char* op,
                           bool flipped, const Tensor& planes) {
  const int64_t k = input.size(1);
  Tensor u = at::empty({16, p.panels, k, LOOM_CONV_WINOGRAD_MR}, out.options());
  Tensor w4 = weight.reshape({weight.size(0), weight.size(1), 3, 3});
  loom_tensor wts[2] = {describe(u, op), describe(w4, op)};
  loom_scalar wsc[1] = {scalar_i(flipped ? 1 : 0)};
  launch(op, LOOM_KERNEL("conv.winograd.weight"), wts, wsc, p.panels, 1);
  // a channels-last image is read in place, where its planes (a pass
  // whose strided reads cost 2-3x the NCHW pad's from memory) would be
  const bool direct = !planes.defined() && winograd_reads_image(input, p);
  Tensor xp = planes.defined() ? planes
              : direct         ? input
                               : pad_planes(input, p.top, p.left, p.wq, p.sh, p.sw, p.plane, op);
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[4] = {plane4(out, op), describe(u, op), describe(xp, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  // the image read in place takes the dense grid, whose blocks span images
  loom_scalar sc[4] = {scalar_i(direct ? p.image_wq : p.wq),
                       scalar_i(direct ? p.image_positions : p.positions), scalar_i(p.top),
                       scalar_i(p.left)};
  launch(op, LOOM_KERNEL("conv.winograd.forward"),
         c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 4 : 3),
         c10::ArrayRef<loom_scalar>(sc, direct ? 4 : 2), direct ? p.image_range : p.range, 1, -1,
         conv_flops(out.numel(), k * 9));
}

Tensor conv_weight_grad_winograd(const Tensor& dy, const Tensor& input,
                                 const std::vector<int64_t>& w_sizes,
                                 const loom_conv_weight_grad_plan& p, const char* op,
                                 const Tensor& planes, at::MemoryFormat fmt,
                                 const Tensor& dy_planes) {
  const int64_t m = dy.size(1), k = input.size(1);
  // channels-last x and dy are read in place, where planes are not given
  const bool direct = !planes.defined() && !dy_planes.defined() &&
                      winograd_wgrad_reads_images(input, dy, p);
  Tensor xp = planes.defined() ? planes
              : direct         ? input
                               : pad_planes(input, p.top, p.left, p.wq, p.sh, p.sw, p.plane, op);
  const bool shared = dy_planes.defined();
  Tensor dyp = shared ? dy_planes : direct ? dy : pad_planes(dy, 0, 0, p.wq, 2, 2, p.dy_plane, op);
  // x and dy read in place take the dense grid, whose blocks span images
  const int64_t chunks = direct ? p.image_chunks : p.chunks;
  Tensor part = at::empty({chunks, 16, m, k}, input.options());
  loom_tensor ts[3] = {describe(part, op), describe(xp, op), describe(dyp, op)};
  loom_scalar sc[6] = {scalar_i(direct ? p.image_wq : p.wq),
                       scalar_i(direct ? p.image_positions : p.positions),
                       scalar_i(direct ? p.image_chunk : p.chunk),
                       scalar_i(shared ? 1 : 0),
                       scalar_i(p.top),
                       scalar_i(p.left)};
  launch(op, LOOM_KERNEL("conv.winograd.weight_grad"), ts,
         c10::ArrayRef<loom_scalar>(sc, direct ? 6 : 4), direct ? p.image_range : p.range, 1, -1,
         conv_flops(dy.numel(), k * 9));
  Tensor gw = at::empty(w_sizes, input.options().memory_format(fmt));
  loom_tensor fts[2] = {describe(gw.view({m, k, 3, 3}), op), describe(part, op)};
  launch(op, LOOM_KERNEL("conv.winograd.weight_grad_finish"), fts,
         c10::ArrayRef<loom_scalar>(), m, direct ? p.image_finish_grain : p.finish_grain);
  return gw;
}

}  // namespace torch_loom::conv
