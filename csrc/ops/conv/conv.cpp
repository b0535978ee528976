// Convolution on loom (1-d, 2-d, 3-d; groups, stride, padding, dilation;
// transposed), forward and backward, through the Overrideable backend that
// aten::_convolution picks for PrivateUse1. Each pass is planned by the
// kernel family (loom/kernels/conv.h), which chooses its path for this
// device: implicit GEMMs that gather col panels as they go (over
// zero-padded rows, or by Winograd's transforms, or over a channels-last
// copy, conv_padded.cpp and conv_nhwc.cpp), or col materialised with
// im2col/col2im (loom/kernels/im2col.h) for one batched GEMM per pass.
// This file launches what the plan names.
//
// col layout is [C*K][N][L] (loom/kernels/im2col.h), so for the weight
// gradient the (image, position) pairs of a group form one contiguous k run.
#include <ATen/native/ConvUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "common.h"
#include "loom/kernels/conv.h"
#include "loom/kernels/im2col.h"
#include "ops/conv/conv_internal.h"
#include "ops/gemm/linalg_gemm.h"
#include "register.h"

namespace torch_loom {
namespace conv {

using at::Tensor;

std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> geom_scalars(const Geom& g) {
  std::array<loom_scalar, LOOM_CONV_NUM_SCALARS> sc{};
  for (int i = 0; i < 3; ++i) {
    sc[i] = scalar_i(g.k[i]);
    sc[3 + i] = scalar_i(g.s[i]);
    sc[6 + i] = scalar_i(g.p[i]);
    sc[9 + i] = scalar_i(g.d[i]);
    sc[12 + i] = scalar_i(g.grid[i]);
  }
  return sc;
}

// (N, C, spatial...) as rank 5 (N, C, D, H, W).
loom_tensor image5(const Tensor& t, const char* op) {
  loom_tensor d = describe(t, op);
  loom_tensor r = d;
  r.rank = 5;
  int nsp = d.rank - 2;
  for (int i = 0; i < 5; ++i) {
    if (i < 2) continue;
    int src = i - (3 - nsp);
    r.sizes[i] = src >= 2 ? d.sizes[src] : 1;
    r.strides[i] = src >= 2 ? d.strides[src] : 0;
  }
  return r;
}

// A rank-4 GEMM operand over `t`'s memory with explicit sizes and strides.
loom_tensor view4(const Tensor& t, const char* op, std::array<int64_t, 4> sizes,
                  std::array<int64_t, 4> strides) {
  loom_tensor d = describe(t, op);
  d.rank = 4;
  for (int i = 0; i < 4; ++i) d.sizes[i] = sizes[i], d.strides[i] = strides[i];
  return d;
}

std::vector<loom_scalar> plan_scalars(const Geom& g, int64_t groups, const Tensor& on,
                                      int64_t flags, int64_t phase) {
  auto geom = geom_scalars(g);
  std::vector<loom_scalar> sc(geom.begin(), geom.end());
  sc.push_back(scalar_i(groups));
  sc.push_back(scalar_i(device_workers(on)));
  sc.push_back(scalar_i(flags));
  if (phase >= 0) sc.push_back(scalar_i(phase));
  return sc;
}

loom_conv_forward_plan plan_forward(const Tensor& out, const Tensor& input, const Tensor& weight,
                                    const Geom& g, int64_t groups, int64_t flags,
                                    const char* op) {
  loom_tensor ts[3] = {describe(input, op), describe(out, op), describe(weight, op)};
  return plan<loom_conv_forward_plan>(op, LOOM_KERNEL("conv.forward.plan"), ts,
                                      plan_scalars(g, groups, out, flags));
}

Tensor pack_a(const loom_tensor& c, const loom_tensor& a, const loom_tensor& b, int64_t variant,
              int64_t bytes, int64_t range, int64_t grain, const at::TensorOptions& opts,
              const char* op, const Tensor& flipped_from) {
  Tensor ws = at::empty({bytes}, opts.dtype(at::kByte));
  loom_scalar sc[3] = {scalar_i(variant), scalar_f(1.0), scalar_f(0.0)};
  if (flipped_from.defined()) {
    const Tensor w = flipped_from.reshape({flipped_from.size(0), flipped_from.size(1), -1});
    loom_tensor ops[5] = {c, a, b, describe(ws, op), describe(w, op)};
    launch(op, LOOM_KERNEL("conv.pack_flipped"), ops, c10::ArrayRef<loom_scalar>(sc, 1), range,
           grain);
    return ws;
  }
  loom_tensor ops[4] = {c, a, b, describe(ws, op)};
  launch(op, LOOM_KERNEL("conv.pack"), ops, sc, range, grain);
  return ws;
}

}  // namespace conv

namespace {

using at::Tensor;
using namespace conv;

Geom make_geom(const Tensor& weight, c10::IntArrayRef stride,
               c10::IntArrayRef padding, c10::IntArrayRef dilation,
               c10::IntArrayRef grid) {
  Geom g;
  int64_t nsp = weight.dim() - 2;
  TORCH_CHECK(nsp >= 1 && nsp <= 3, "convolution: expected 1, 2 or 3 spatial dims, got ", nsp);
  auto at_ = [&](c10::IntArrayRef v, int64_t i, int64_t dflt) {
    if (v.empty()) return dflt;
    return v.size() == 1 ? v[0] : v[i];
  };
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t j = 3 - nsp + i;
    g.k[j] = weight.size(2 + i);
    g.s[j] = at_(stride, i, 1);
    g.p[j] = at_(padding, i, 0);
    g.d[j] = at_(dilation, i, 1);
    g.grid[j] = grid[i];
  }
  return g;
}

int64_t spatial_numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t i = 2; i < t.dim(); ++i) n *= t.size(i);
  return n;
}

// col [C*K][N][L] of image `x` (N, C, spatial) for geometry `g`.
Tensor im2col(const Tensor& x, const Geom& g, const char* op) {
  int64_t n = x.size(0), c = x.size(1);
  Tensor col = at::empty({c * g.taps(), n, g.positions()}, x.options());
  auto sc = geom_scalars(g);
  loom_tensor ts[2] = {describe(col, op), image5(x, op)};
  int64_t rows = c * g.taps() * n;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.positions()));
  launch(op, LOOM_KERNEL("im2col.to_col"), ts, sc, rows, grain);
  return col;
}

// Sums the fp32 col [C*K][N][L] back into image `img` (N, C, spatial),
// overwriting it, and adds `bias` per channel when it is defined; the sums
// run in fp32 whatever img's dtype, which they reach with one rounding.
void col2im(const Tensor& img, const Tensor& col, const Geom& g, const char* op,
            const Tensor& bias = Tensor()) {
  Tensor acc = img.scalar_type() == at::kFloat
                   ? img
                   : at::empty(img.sizes(), img.options().dtype(at::kFloat));
  auto sc = geom_scalars(g);
  loom_tensor ts[2] = {image5(acc, op), describe(col, op)};
  int64_t planes = img.size(0) * img.size(1);
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, spatial_numel(img) * g.taps()));
  launch(op, LOOM_KERNEL("im2col.to_image"), ts, sc, planes, grain);
  if (bias.defined()) {
    std::vector<int64_t> shape(img.dim(), 1);
    shape[1] = img.size(1);
    acc.add_(bias.reshape(shape));
  }
  if (!acc.is_same(img)) img.copy_(acc);
}

// The implicit forward: the weight is packed once, then
// "conv.implicit.forward" gathers col panels from the image tile by tile.
void conv_forward_implicit(const Tensor& out, const Tensor& input, const Tensor& weight,
                           const Tensor& bias, const Geom& g, int64_t groups,
                           const loom_conv_forward_plan& p, const char* op, bool flipped) {
  int64_t n = input.size(0), c = input.size(1), o = out.size(1);
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps(), len = g.positions();
  Tensor c_out = p.flat ? at::empty({o, n, len}, out.options()) : out;
  int64_t bn = p.flat ? 1 : n, cols = p.flat ? n * len : len;
  loom_tensor a = view4(weight, op, {bn, groups, og, ck}, {0, og * ck, ck, 1});
  loom_tensor b = view4(input, op, {bn, groups, ck, cols}, {groups * ck * cols, ck * cols, cols, 1});
  loom_tensor cc = view4(c_out, op, {bn, groups, og, cols}, {o * cols, og * cols, cols, 1});
  Tensor ws = pack_a(cc, a, b, p.variant, p.workspace_bytes, p.pack_range, p.pack_grain,
                     out.options(), op, flipped ? weight : Tensor());
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[6] = {cc, a, b, describe(ws, op), image5(input, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  std::array<loom_scalar, 3 + LOOM_CONV_NUM_SCALARS> sc{};
  sc[0] = scalar_i(p.variant);
  sc[1] = scalar_i(p.tile_positions);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  sc[2 + LOOM_CONV_NUM_SCALARS] = scalar_i(p.pieces);
  launch(op, LOOM_KERNEL("conv.implicit.forward"),
         c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 6 : 5), sc, p.range, 1, -1,
         conv_flops(out.numel(), ck));
  if (p.flat) out.view({n, o, len}).copy_(c_out.permute({1, 0, 2}));
}

}  // namespace

namespace conv {

std::pair<Tensor, loom_conv_forward_plan> plan_with_weight(const Tensor& out,
                                                           const Tensor& input,
                                                           const Tensor& weight, const Geom& g,
                                                           int64_t groups, int64_t flags,
                                                           const char* op) {
  const loom_conv_forward_plan p = plan_forward(out, input, weight, g, groups, flags, op);
  if (p.path == LOOM_CONV_PATH_WINOGRAD || weight.is_contiguous()) return {weight, p};
  const Tensor wc = weight.contiguous();
  return {wc, plan_forward(out, input, wc, g, groups, flags, op)};
}

void conv_forward_planned(const Tensor& out, const Tensor& input, const Tensor& weight,
                          const Tensor& bias, const Geom& g, int64_t groups,
                          const loom_conv_forward_plan& p, const char* op, bool flipped) {
  // The Winograd and padded-row kernels (and the flat implicit GEMM's
  // final copy) write `out` through its strides; the others write NCHW,
  // into a temporary when `out` is laid out otherwise.
  const bool nchw_only =
      p.path == LOOM_CONV_PATH_NHWC || (p.path == LOOM_CONV_PATH_IMPLICIT && !p.flat);
  if (nchw_only && !out.is_contiguous()) {
    Tensor tmp = at::empty(out.sizes(), out.options().memory_format(at::MemoryFormat::Contiguous));
    conv_forward_planned(tmp, input, weight, bias, g, groups, p, op, flipped);
    out.copy_(tmp);
    return;
  }
  switch (p.path) {
    case LOOM_CONV_PATH_WINOGRAD:
      return conv_forward_winograd(out, input, weight, bias, p, op, flipped);
    case LOOM_CONV_PATH_NHWC:
      return conv_forward_nhwc(out, input, weight, bias, g, p, op, flipped);
    case LOOM_CONV_PATH_PADDED:
      return conv_forward_padded(out, input, weight, bias, g, groups, p, op, flipped);
    case LOOM_CONV_PATH_IMPLICIT:
      return conv_forward_implicit(out, input, weight, bias, g, groups, p, op, flipped);
    default:
      TORCH_CHECK(false, op, ": no forward for convolution plan path ", p.path);
  }
}

}  // namespace conv

namespace {

// out (N, O, grid) = W (O, C/G, k) * x (N, C, spatial) [+ bias]: the forward
// of a regular convolution, allocated in `fmt`: the channels-last rows and
// the paths that write through strides fill it in place, the others
// compute NCHW and copy.
Tensor conv_forward(const Tensor& input, const Tensor& weight_in,
                    const Tensor& bias, const Geom& g, int64_t groups,
                    std::vector<int64_t> out_sizes, const char* op,
                    at::MemoryFormat fmt = at::MemoryFormat::Contiguous) {
  int64_t n = input.size(0), c = input.size(1), o = weight_in.size(0);
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps(), len = g.positions();
  Tensor out = at::empty(out_sizes, input.options().memory_format(fmt));
  if (out.numel() == 0) return out;
  const loom_conv_forward_plan p0 = plan_forward(out, input, weight_in, g, groups, 0, op);
  if ((p0.path == LOOM_CONV_PATH_GEMM || p0.path == LOOM_CONV_PATH_COL ||
       p0.path == LOOM_CONV_PATH_IMPLICIT) &&
      nhwc_col_fits(input, weight_in, groups, g, fmt)) {
    conv_forward_nhwc_col(out, input, weight_in, bias, g, fmt, op);  // reads the weight in place
    return out;
  }
  const auto [weight, p] = plan_with_weight(out, input, weight_in, g, groups, 0, op);
  if (p.path != LOOM_CONV_PATH_GEMM && p.path != LOOM_CONV_PATH_COL) {
    conv_forward_planned(out, input, weight, bias, g, groups, p, op, /*flipped=*/false);
    return out;
  }
  if (!out.is_contiguous()) {
    Tensor dense = conv_forward(input, weight, bias, g, groups, out_sizes, op);
    out.copy_(dense);
    return out;
  }
  Tensor col;  // alive until both GEMM launches are enqueued
  loom_tensor b;
  if (p.path == LOOM_CONV_PATH_GEMM) {
    b = view4(input, op, {n, groups, cg, len}, {c * len, cg * len, len, 1});
  } else {
    col = im2col(input, g, op);
    b = view4(col, op, {n, groups, ck, len}, {len, ck * n * len, n * len, 1});
  }
  loom_tensor a = view4(weight, op, {n, groups, og, ck}, {0, og * ck, ck, 1});
  loom_tensor cc = view4(out, op, {n, groups, og, len}, {o * len, og * len, len, 1});
  if (bias.defined()) {
    Tensor bc = bias.contiguous();
    loom_tensor cin = view4(bc, op, {n, groups, og, len}, {0, og, 1, 0});
    gemm_run(op, out, cc, a, b, &cin, 1.0, 1.0);
  } else {
    gemm_run(op, out, cc, a, b, nullptr, 1.0, 0.0);
  }
  return out;
}

// col (C*K, N, L) in fp32 = W^T * dy per group: the adjoint of the
// forward's GEMM. `w` is (O, C/G, k) contiguous, dy (N, O, L) contiguous.
// Per image, or with `flat` over all images' positions at once (the
// input gradient's plan says when): the same sums. That needs dy as
// (O, N, L), which is made into *dy_t unless already there (dy_t may be
// null).
Tensor conv_col_grad(const Tensor& dy, const Tensor& w, int64_t c, int64_t groups,
                     const Geom& g, bool flat, const char* op, Tensor* dy_t) {
  int64_t n = dy.size(0), o = dy.size(1), len = g.positions();
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps();
  Tensor col = at::empty({c * g.taps(), n, len}, dy.options().dtype(at::kFloat));
  Tensor own;
  Tensor& dyt = dy_t ? *dy_t : own;
  if (flat && !dyt.defined()) dyt = dy.transpose(0, 1).contiguous();
  const int64_t bn = flat ? 1 : n, cols = flat ? n * len : len;
  loom_tensor a = view4(w, op, {bn, groups, ck, og}, {0, og * ck, 1, ck});
  loom_tensor b = flat ? view4(dyt, op, {1, groups, og, cols}, {0, og * cols, cols, 1})
                       : view4(dy, op, {n, groups, og, len}, {o * len, og * len, len, 1});
  loom_tensor cc = view4(col, op, {bn, groups, ck, cols}, {len, ck * n * len, n * len, 1});
  gemm_run(op, col, cc, a, b, nullptr, 1.0, 0.0);
  return col;
}

// dW (A channels, B*K) per group = src (A, N*L) @ col^T (N*L, B*K), where
// src is a (A, N, L) contiguous tensor and col is [B*K][N][L].
Tensor conv_weight_grad(const Tensor& src_t, const Tensor& col,
                        std::vector<int64_t> w_sizes, int64_t groups,
                        const char* op) {
  int64_t a_ch = src_t.size(0), nl = src_t.numel() / std::max<int64_t>(1, a_ch);
  int64_t rows = col.size(0);
  int64_t ag = a_ch / groups, bk = rows / groups;
  Tensor gw = at::empty(w_sizes, src_t.options());
  if (gw.numel() == 0) return gw;
  loom_tensor a = view4(src_t, op, {1, groups, ag, nl}, {0, ag * nl, nl, 1});
  loom_tensor b = view4(col, op, {1, groups, nl, bk}, {0, bk * nl, 1, nl});
  loom_tensor cc = view4(gw, op, {1, groups, ag, bk}, {0, ag * bk, bk, 1});
  gemm_run(op, gw, cc, a, b, nullptr, 1.0, 0.0);
  return gw;
}

// The weight gradient without a col matrix: dy is packed, and
// "conv.implicit.weight_grad" gathers col^T panels from the image. dy is
// either (O, N, L), every image's positions one k run, or with `per_image`
// (fp32) dy (N, O, L) as it lies, one packed matrix per image whose
// products the kernel sums into dW image by image (k runs of L: the sums
// round per image where L is not a multiple of the k block).
Tensor conv_weight_grad_implicit(const Tensor& dy, bool per_image, const Tensor& input,
                                 std::vector<int64_t> w_sizes, int64_t groups, const Geom& g,
                                 const loom_conv_weight_grad_plan& p, const char* op) {
  int64_t o = w_sizes[0], c = input.size(1), n = input.size(0), len = g.positions();
  int64_t og = o / groups, ck = c / groups * g.taps();
  Tensor gw = at::empty(w_sizes, input.options());
  // per image: as many packed matrices, each no more than 63 bytes over its share of the plan's
  const int64_t bn = per_image ? n : 1, k = per_image ? len : n * len;
  const int64_t ws_bytes = per_image ? p.workspace_bytes + 64 * n * groups : p.workspace_bytes;
  loom_tensor a = per_image ? view4(dy, op, {n, groups, og, len}, {o * len, og * len, len, 1})
                            : view4(dy, op, {1, groups, og, k}, {0, og * k, k, 1});
  loom_tensor b = view4(input, op, {bn, groups, k, ck}, {0, k * ck, ck, 1});
  loom_tensor cc = view4(gw, op, {bn, groups, og, ck}, {0, og * ck, ck, 1});
  Tensor ws = pack_a(cc, a, b, p.variant, ws_bytes, p.pack_range * bn, p.pack_grain * bn,
                     gw.options(), op);
  loom_tensor ts[5] = {cc, a, b, describe(ws, op), image5(input, op)};
  std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS> sc{};
  sc[0] = scalar_i(p.variant);
  sc[1] = scalar_i(p.per_item);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  launch(op, LOOM_KERNEL("conv.implicit.weight_grad"), ts, sc, p.range, 1, -1,
         conv_flops(dy.numel(), ck));
  return gw;
}

std::vector<int64_t> grid_of(const Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin() + 2, t.sizes().end());
}

// "conv.input_grad.plan" for gi (N, C, spatial) from dy over g.
loom_conv_input_grad_plan plan_input_grad(const Tensor& gi, const Tensor& dy, const Geom& g,
                                          int64_t groups, int64_t flags, const char* op) {
  loom_tensor ts[2] = {describe(gi, op), describe(dy, op)};
  return plan<loom_conv_input_grad_plan>(op, LOOM_KERNEL("conv.input_grad.plan"), ts,
                                         plan_scalars(g, groups, gi, flags));
}

// The input gradient as the forward of the flipped weight (the plan's
// PATH_FLIPPED: stride 1), over the geometry `g2` the plan gives, packing
// that weight straight from w.
// Returns dy's planes where the flipped forward is Winograd's and pads dy
// as the weight gradient `wg` (when given, Winograd's too) can read it:
// by one row and column, in rows as wide as its own, long enough for its
// tiles; the weight gradient then reads them instead of padding dy again.
Tensor input_grad_flipped(const Tensor& gi, const Tensor& dy, const Tensor& w, const Geom& g2,
                          int64_t groups, const char* op,
                          const loom_conv_weight_grad_plan* wg) {
  const auto [wc, p] = plan_with_weight(gi, dy, w, g2, groups, LOOM_CONV_FLIPPED, op);
  if (wg && p.path == LOOM_CONV_PATH_WINOGRAD && p.top == 1 && p.left == 1 && p.sh == 2 &&
      p.sw == 2 && p.wq == wg->wq) {
    const int64_t plane = std::max(p.plane, wg->positions + wg->wq + 1);
    Tensor planes = pad_planes(dy, 1, 1, p.wq, 2, 2, plane, op);
    conv_forward_winograd(gi, dy, wc, Tensor(), p, op, /*flipped=*/true, planes);
    return planes;
  }
  conv_forward_planned(gi, dy, wc, Tensor(), g2, groups, p, op, /*flipped=*/true);
  return Tensor();
}

// The input gradient by stride phases (the plan's PATH_PHASES): each phase
// of gi is a stride-1 convolution of dy with some of w's taps, flipped,
// that runs into a temporary copied into its positions of gi, or, from the
// channels-last copy of dy that all phases share, straight into them.
void input_grad_by_phases(const Tensor& gi, const Tensor& dy, const Tensor& w, const Geom& g,
                          int64_t groups, const loom_conv_input_grad_plan& p, const char* op) {
  const int64_t nsp = w.dim() - 2;
  Tensor copy;
  if (p.copy)
    copy = nhwc_copy(dy, p.top, p.left, p.wq, 1, 1, p.plane, p.copy_channels, p.copy_stride, op);
  const loom_tensor ts[2] = {describe(gi, op), describe(dy, op)};
  const int64_t phases = int64_t{p.phases[0]} * p.phases[1] * p.phases[2];
  std::vector<NhwcConv> in_place;  // phases written in place, in one launch
  const NhwcImage image{p.top, dy.size(2), p.left, dy.size(dy.dim() - 1)};
  for (int64_t i = 0; i < phases; ++i) {
    const auto ph = plan<loom_conv_phase_plan>(op, LOOM_KERNEL("conv.input_grad.phase"), ts,
                                               plan_scalars(g, groups, gi, 0, i));
    if (ph.empty) continue;
    Tensor dst = gi, wsub = w;
    for (int64_t j = 3 - nsp; j < 3; ++j) {
      const int64_t dim = 2 + j - (3 - nsp);
      dst = dst.slice(dim, ph.offset[j], gi.size(dim), g.s[j]);
      wsub = wsub.slice(dim, ph.first_tap[j], w.size(dim), g.s[j]);
    }
    if (ph.zero) {
      dst.zero_();
      continue;
    }
    const Geom g2 = Geom::of(ph.geometry);
    if (ph.in_place) {
      in_place.push_back(NhwcConv{dst, wsub.contiguous(), g2, ph.origin});
      continue;
    }
    Tensor out = at::empty(dst.sizes(), gi.options());
    if (copy.defined()) {
      nhwc_run({NhwcConv{out, wsub.contiguous(), g2, ph.origin}}, copy, Tensor(), p.wq,
               /*flipped=*/true, op, &image);
    } else {
      const Tensor wc = wsub.contiguous();
      const loom_conv_forward_plan fp =
          plan_forward(out, dy, wc, g2, groups, LOOM_CONV_FLIPPED | LOOM_CONV_PART, op);
      conv_forward_planned(out, dy, wc, Tensor(), g2, groups, fp, op, /*flipped=*/true);
    }
    dst.copy_(out);
  }
  // The phases in turn over the same positions, so that their elements of
  // each line of gi meet in the core's cache, where four launches wrote
  // every line four times from the last-level cache (64->128 3x3/2 at 56,
  // batch 8: the stores took 0.7 of 1.9 ms).
  if (!in_place.empty()) nhwc_run(in_place, copy, Tensor(), p.wq, /*flipped=*/true, op, &image);
}

}  // namespace

namespace conv {

// A CPU tensor with `t`'s sizes, strides, dtype and requires_grad over no
// memory: what the CPU's choice of convolution backend reads.
Tensor cpu_shape_of(const Tensor& t) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, c10::Device(c10::kCPU)), nullptr, false);
  Tensor r = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  r.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if (t.requires_grad()) r.set_requires_grad(true);
  return r;
}

// The layout the CPU gives this convolution's output (and its backward the
// gradients): the memory format of the backend it would pick for tensors
// of these sizes and strides (oneDNN and the slow 2-d paths: channels last
// when the input or the weight is). The passes below compute in NCHW;
// their results are laid out in this format on return.
at::MemoryFormat conv_memory_format(const Tensor& input, const Tensor& weight,
                                    const Tensor& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  if ((input.dim() != 4 && input.dim() != 5) || input.dim() != weight.dim())
    return at::MemoryFormat::Contiguous;
  const Tensor ci = cpu_shape_of(input), cw = cpu_shape_of(weight);
  std::optional<c10::SymIntArrayRef> bias_sizes;
  if (bias.defined()) bias_sizes = c10::fromIntArrayRefSlow(bias.sizes());
  const auto backend = at::native::select_conv_backend(
      ci, cw, std::nullopt, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(output_padding),
      c10::SymInt(groups), bias_sizes);
  return at::native::_determine_backend_memory_format(ci, cw, backend);
}

std::pair<Tensor, Tensor> input_grad_sharing_dy(const Tensor& dy, const Tensor& input,
                                                const Tensor& weight, c10::IntArrayRef stride,
                                                c10::IntArrayRef padding,
                                                c10::IntArrayRef dilation, int64_t groups,
                                                at::MemoryFormat fmt,
                                                const loom_conv_weight_grad_plan& wg,
                                                const char* op) {
  if (wg.path != LOOM_CONV_PATH_WINOGRAD || dy.numel() == 0 || input.numel() == 0) return {};
  const Geom g = make_geom(weight, stride, padding, dilation, grid_of(dy));
  Tensor gi = at::empty(input.sizes(), input.options().memory_format(fmt));
  const loom_conv_input_grad_plan p = plan_input_grad(gi, dy, g, groups, 0, op);
  if (p.path != LOOM_CONV_PATH_FLIPPED) return {};
  const Geom g2 = Geom::of(p.geometry);
  if (plan_forward(gi, dy, weight, g2, groups, LOOM_CONV_FLIPPED, op).path !=
      LOOM_CONV_PATH_WINOGRAD)
    return {};
  // channels last, both passes read dy in place: nothing to share
  const bool in_place = winograd_wgrad_reads_images(input, dy, wg);
  Tensor planes = input_grad_flipped(gi, dy, weight, g2, groups, op, in_place ? nullptr : &wg);
  return {gi, planes};
}

}  // namespace conv

namespace {

Tensor in_format(const Tensor& t, at::MemoryFormat fmt) {
  return t.defined() && fmt != at::MemoryFormat::Contiguous ? t.contiguous(fmt) : t;
}

bool native_conv(const Tensor& input, const Tensor& weight) {
  return gemm_native_dtype(input.scalar_type()) &&
         input.scalar_type() == weight.scalar_type() && input.dim() >= 3 &&
         input.dim() <= 5;
}

std::vector<int64_t> transposed_out_sizes(const Tensor& input, const Tensor& weight,
                                          c10::IntArrayRef stride, c10::IntArrayRef padding,
                                          c10::IntArrayRef dilation,
                                          c10::IntArrayRef output_padding, int64_t groups) {
  std::vector<int64_t> s = {input.size(0), weight.size(1) * groups};
  for (int64_t i = 2; i < input.dim(); ++i) {
    int64_t j = i - 2;
    auto pick = [&](c10::IntArrayRef v, int64_t d) {
      return v.empty() ? d : (v.size() == 1 ? v[0] : v[j]);
    };
    s.push_back((input.size(i) - 1) * pick(stride, 1) - 2 * pick(padding, 0) +
                pick(dilation, 1) * (weight.size(i) - 1) + pick(output_padding, 0) + 1);
  }
  return s;
}

Tensor convolution(const Tensor& input, const Tensor& weight,
                   const std::optional<Tensor>& bias_opt, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, c10::IntArrayRef dilation,
                   bool transposed, c10::IntArrayRef output_padding,
                   int64_t groups) {
  const char* op = transposed ? "conv_transpose" : "convolution";
  Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
  c10::DeviceGuard guard(input.device());
  if (!native_conv(input, weight) || (bias.defined() && bias.scalar_type() != input.scalar_type())) {
    Tensor r = at::convolution(input.cpu(), weight.cpu(), bias.defined() ? bias.cpu() : Tensor(),
                               stride, padding, dilation, transposed, output_padding, groups);
    return r.to(input.device());
  }
  const at::MemoryFormat fmt = conv_memory_format(input, weight, bias, stride, padding, dilation,
                                                  transposed, output_padding, groups);
  if (!transposed) {
    auto out_sizes = at::native::conv_output_size(input.sizes(), weight.sizes(), padding,
                                                  stride, dilation);
    std::vector<int64_t> grid(out_sizes.begin() + 2, out_sizes.end());
    Geom g = make_geom(weight, stride, padding, dilation, grid);
    return in_format(conv_forward(input, weight, bias, g, groups, out_sizes, op, fmt), fmt);
  }
  // Transposed: the input gradient of the regular convolution that maps the
  // output back to the input, plus bias.
  auto out_sizes = transposed_out_sizes(input, weight, stride, padding, dilation,
                                        output_padding, groups);
  Tensor out = at::empty(out_sizes, input.options());
  if (out.numel() == 0) return in_format(out, fmt);
  Geom g = make_geom(weight, stride, padding, dilation, grid_of(input));
  Tensor x = input.contiguous(), w = weight.contiguous();
  int64_t c_out = out_sizes[1];
  const loom_conv_input_grad_plan p = plan_input_grad(out, x, g, groups, LOOM_CONV_COL_ONLY, op);
  Tensor col = conv_col_grad(x, w, c_out, groups, g, p.flat && x.size(0) > 1, op, nullptr);
  col2im(out, col, g, op, bias);
  return in_format(out, fmt);
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> mask) {
  const char* op = transposed ? "conv_transpose_backward" : "convolution_backward";
  c10::DeviceGuard guard(input.device());
  if (!native_conv(input, weight) || grad_output.scalar_type() != input.scalar_type()) {
    auto r = at::convolution_backward(grad_output.cpu(), input.cpu(), weight.cpu(),
                                      std::nullopt, stride, padding, dilation, transposed,
                                      output_padding, groups, mask);
    auto back = [&](const Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(std::get<0>(r)), back(std::get<1>(r)), back(std::get<2>(r))};
  }
  const at::MemoryFormat fmt = conv_memory_format(input, weight, Tensor(), stride, padding,
                                                  dilation, transposed, output_padding, groups);
  // dy as it comes (channels last from a channels-last model): the passes
  // that read it through its strides (conv.pad's and Winograd's planes, the
  // flipped weight's forward, the (O, N, L) copy) take it so; the GEMM and
  // col input gradients and the bf16 channels-last ones take it contiguous,
  // made once when one of them runs.
  const Tensor& dy_any = transposed ? grad_output.contiguous() : grad_output;
  Tensor dy_dense;
  auto dense = [&]() -> const Tensor& {
    if (!dy_dense.defined()) dy_dense = dy_any.contiguous();
    return dy_dense;
  };
  const Tensor& dy = dy_any;
  Tensor gi, gw, gb, dy_t;  // dy_t: dy as (O, N, L), made when a pass needs it
  std::vector<int64_t> w_sizes(weight.sizes().begin(), weight.sizes().end());
  if (!transposed) {
    Geom g = make_geom(weight, stride, padding, dilation, grid_of(dy));
    const bool wg_any = mask[1] && dy.numel() > 0 && input.numel() > 0;
    loom_conv_weight_grad_plan wp{};
    if (wg_any) {
      loom_tensor ts[2] = {describe(input, op), describe(dy, op)};
      wp = plan<loom_conv_weight_grad_plan>(op, LOOM_KERNEL("conv.weight_grad.plan"), ts,
                                            plan_scalars(g, groups, input, 0));
    }
    // dy's planes, where the input gradient's Winograd pass made them for
    // the weight gradient's
    Tensor dy_planes;
    if (mask[0] && wg_any)
      std::tie(gi, dy_planes) = input_grad_sharing_dy(dy, input, weight, stride, padding,
                                                      dilation, groups, fmt, wp, op);
    if (mask[0] && !gi.defined()) {
      int64_t c = input.size(1);
      // gi in the format it is returned in: the channels-last rows, the
      // flipped forward and col2im write it through its strides, the GEMM
      // and the phases NCHW (into `gd`, copied into gi).
      gi = at::empty(input.sizes(), input.options().memory_format(fmt));
      Tensor gd = gi;
      if (gi.numel() > 0 && dy.numel() > 0) {
        const loom_conv_input_grad_plan p = plan_input_grad(gi, dy, g, groups, 0, op);
        // channels-last rows where the NCHW path gathers col (and, for
        // the flipped weight's forward, where that is not Winograd's,
        // which reads and writes channels last itself: the implicit
        // forward would copy the weight and write gi NCHW, then copy it)
        const bool fits = nhwc_col_fits(input, weight, groups, g, fmt);
        const bool rows =
            fits && (p.path == LOOM_CONV_PATH_GEMM || p.path == LOOM_CONV_PATH_COL ||
                     (p.path == LOOM_CONV_PATH_FLIPPED &&
                      plan_forward(gi, dy, weight, Geom::of(p.geometry), groups,
                                   LOOM_CONV_FLIPPED, op)
                              .path != LOOM_CONV_PATH_WINOGRAD));
        if (!rows && (p.path == LOOM_CONV_PATH_GEMM || p.path == LOOM_CONV_PATH_PHASES) &&
            !gi.is_contiguous())
          gd = at::empty(input.sizes(), input.options());
        // the flipped forward makes the weight contiguous where its path needs it
        const Tensor w =
            rows || p.path == LOOM_CONV_PATH_FLIPPED ? weight : weight.contiguous();
        if (rows) {
          input_grad_nhwc_col(gi, dy, weight, g, fmt, op);
        } else if (p.path == LOOM_CONV_PATH_GEMM) {
          int64_t n = dy.size(0), o = dy.size(1), len = g.positions();
          int64_t cg = c / groups, og = o / groups;
          loom_tensor a = view4(w, op, {n, groups, cg, og}, {0, og * cg, 1, cg});
          loom_tensor b = view4(dense(), op, {n, groups, og, len}, {o * len, og * len, len, 1});
          loom_tensor cc = view4(gd, op, {n, groups, cg, len}, {c * len, cg * len, len, 1});
          gemm_run(op, gd, cc, a, b, nullptr, 1.0, 0.0);
        } else if (p.path == LOOM_CONV_PATH_FLIPPED) {
          input_grad_flipped(gi, dy, w, Geom::of(p.geometry), groups, op, nullptr);
        } else if (p.path == LOOM_CONV_PATH_PHASES) {
          input_grad_by_phases(gd, dense(), w, g, groups, p, op);
        } else {
          // col, made p.chunk images at a time
          const int64_t n = dy.size(0), chunk = p.chunk;
          for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            const int64_t m = std::min(chunk, n - i0);
            Tensor col = conv_col_grad(dense().narrow(0, i0, m), w, c, groups, g,
                                       p.flat && m > 1, op, chunk == n ? &dy_t : nullptr);
            col2im(gi.narrow(0, i0, m), col, g, op);
          }
        }
        if (!gd.is_same(gi)) gi.copy_(gd);
      } else if (gi.numel() > 0) {
        gi.zero_();
      }
    }
    if (mask[1]) {
      if (!wg_any) {
        gw = at::zeros(w_sizes, weight.options());
      } else {
        const loom_conv_weight_grad_plan& p = wp;
        const bool rows = (p.path == LOOM_CONV_PATH_IMPLICIT || p.path == LOOM_CONV_PATH_COL) &&
                          nhwc_col_fits(input, weight, groups, g, fmt);
        // few channels (the stem): through col, or their columns folded into channels
        Tensor folded = p.path == LOOM_CONV_PATH_COL && !rows
                            ? conv_weight_grad_folded(dense(), input, w_sizes, g, groups, op)
                            : Tensor();
        if (rows) {
          gw = weight_grad_nhwc_col(dy, input, w_sizes, g, fmt, op);
        } else if (folded.defined()) {
          gw = folded;
        } else if (p.path == LOOM_CONV_PATH_NHWC) {
          gw = conv_weight_grad_nhwc(dense(), input, w_sizes, g, p, op);
        } else if (p.path == LOOM_CONV_PATH_WINOGRAD) {
          gw = conv_weight_grad_winograd(dy, input, w_sizes, p, op, Tensor(), fmt, dy_planes);
        } else if (p.path == LOOM_CONV_PATH_PADDED) {
          gw = conv_weight_grad_padded(dy, input, w_sizes, groups, g, p, op);
        } else if (p.path == LOOM_CONV_PATH_IMPLICIT) {
          // fp32 dy read as it lies where each image's positions fill the
          // kernel's k blocks of 256 (3x3/2 and 1x1/2 at 32 x 32, batch 32:
          // 4.0 -> 3.8 and 0.81 -> 0.68 ms on one thread, the copy to (O, N,
          // L) gone; at 16 x 16, 64 positions, the shorter blocks cost what
          // the copy saved), unless the input gradient made it (O, N, L)
          const bool per_image = !dy_t.defined() && input.scalar_type() == at::kFloat &&
                                 g.positions() >= 256;
          if (!per_image && !dy_t.defined()) dy_t = dy.transpose(0, 1).contiguous();
          gw = conv_weight_grad_implicit(per_image ? dense() : dy_t, per_image, input, w_sizes,
                                         groups, g, p, op);
        } else {
          if (!dy_t.defined()) dy_t = dy.transpose(0, 1).contiguous();  // (O, N, L)
          Tensor col = im2col(input, g, op);
          gw = conv_weight_grad(dy_t, col, w_sizes, groups, op);
        }
      }
    }
  } else {
    // Transposed: input = regular conv's output grid.
    Geom g = make_geom(weight, stride, padding, dilation, grid_of(input));
    if (mask[0]) {
      gi = conv_forward(dy, weight, Tensor(), g, groups,
                        std::vector<int64_t>(input.sizes().begin(), input.sizes().end()), op,
                        fmt);
    }
    if (mask[1]) {
      if (dy.numel() == 0 || input.numel() == 0) {
        gw = at::zeros(w_sizes, weight.options());
      } else {
        Tensor col = im2col(dy, g, op);
        Tensor x_t = input.transpose(0, 1).contiguous();  // (Cin, N, L)
        gw = conv_weight_grad(x_t, col, w_sizes, groups, op);
      }
    }
  }
  if (mask[2]) {
    std::vector<int64_t> dims = {0};
    for (int64_t i = 2; i < dy.dim(); ++i) dims.push_back(i);
    gb = dy.sum(dims);
  }
  return {in_format(gi, fmt), in_format(gw, fmt), gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "convolution_overrideable", convolution);
  LOOM_IMPL(m, "convolution_backward_overrideable", convolution_backward);
}

}  // namespace torch_loom
