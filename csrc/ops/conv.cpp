// Convolution on loom (1-d, 2-d, 3-d; groups, stride, padding, dilation;
// transposed), forward and backward, through the Overrideable backend that
// aten::_convolution picks for PrivateUse1. All arithmetic is the GEMM's
// micro-kernel. fp32 runs implicit GEMMs that gather col panels as they
// go: over zero-padded rows for 2-d windows (conv_padded.cpp), from the
// image otherwise (kernels/conv_gemm_avx512.c, or its generic twin); so
// does bf16 on AMX tiles (kernels/conv_gemm_amx.c). The rest materialises
// col with im2col/col2im (kernels/im2col.c) for one batched GEMM per pass.
//
// col layout is [C*K][N][L] (kernels/conv.h), so for the weight gradient the
// (image, position) pairs of a group form one contiguous k run.
#include <ATen/native/ConvUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "common.h"
#include "kernels/conv.h"
#include "kernels/gemm/gemm.h"
#include "ops/conv_internal.h"
#include "ops/linalg_gemm.h"
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

int64_t tile_positions(const Tensor& t, int64_t batches, int64_t cols) {
  return loom_conv_tile_positions(batches, cols, device_workers(t));
}

Tensor pack_a(const loom_tensor& c, const loom_tensor& a, const loom_tensor& b,
              loom_gemm_isa isa, const at::TensorOptions& opts, const char* op,
              loom_gemm_plan* plan, const Tensor& flipped_from) {
  TORCH_CHECK(loom_gemm_plan_init(&c, &a, &b, isa, plan) == 0, op,
              ": unsupported operands for the loom GEMM");
  // Only the packed A lives in the workspace.
  Tensor ws = at::empty({std::max<int64_t>(plan->b_offset, 1)}, opts.dtype(at::kByte));
  loom_scalar sc[3] = {scalar_i(isa), scalar_f(1.0), scalar_f(0.0)};
  if (flipped_from.defined()) {
    const Tensor w = flipped_from.reshape({flipped_from.size(0), flipped_from.size(1), -1});
    loom_tensor ops[5] = {c, a, b, describe(ws, op), describe(w, op)};
    const int64_t units = (plan->m_panels + LOOM_CONV_FLIP_PANELS - 1) / LOOM_CONV_FLIP_PANELS;
    launch(op,
           plan->packed_bf16 ? loom_conv_pack_flipped_amx_kernel : loom_conv_pack_flipped_kernel,
           ops, c10::ArrayRef<loom_scalar>(sc, 1), plan->a_count2 * units, 1);
    return ws;
  }
  loom_tensor ops[4] = {c, a, b, describe(ws, op)};
  launch(op, loom_gemm_pack_kernel, ops, sc, plan->pack_units_a, plan->pack_grain);
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
  launch(op, loom_im2col_kernel, ts, sc, rows, grain);
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
  launch(op, loom_col2im_kernel, ts, sc, planes, grain);
  if (bias.defined()) {
    std::vector<int64_t> shape(img.dim(), 1);
    shape[1] = img.size(1);
    acc.add_(bias.reshape(shape));
  }
  if (!acc.is_same(img)) img.copy_(acc);
}

// The implicit GEMMs keep the weight's rows in 12-row register tiles: with
// few output channels per group (depthwise) they would multiply padding,
// and the col path's matrix-vector products do better.
bool implicit_fits(int64_t rows_per_group) { return rows_per_group >= 8; }

// Small images would leave much of each image's last 32-column panel of a
// GEMM over (O, L) empty: then all images' positions form one row of
// columns, (O, N * L).
bool flat_columns(int64_t n, int64_t len) {
  const int64_t padded = (len + 31) / 32 * 32;
  return n > 1 && (padded - len) * 20 > len;
}

// Whether the implicit kernels run `dtype` under `isa`: fp32 always (on
// AVX-512 or as their generic twins), bf16 on AMX tiles.
bool implicit_dtype(at::ScalarType dtype, loom_gemm_isa isa) {
  return dtype == at::kFloat || (dtype == at::kBFloat16 && isa == LOOM_GEMM_AMX);
}

// The forward without a col matrix: the weight is packed once, then
// loom_conv_gemm_kernel (fp32) or loom_conv_gemm_amx_kernel (bf16) gathers
// col panels from the image tile by tile. With `flipped`, the
// convolution's weight is the flipped form of `weight` (see pack_a), which
// is packed from `weight` directly. `whole` says the convolution is a
// layer's own, not one of the phases of an input gradient: those take the
// channels-last kernels only from a copy of dy they share
// (input_grad_by_phases), since each copying dy for its few taps cost more
// than it saved (64->128 3x3/2 at 56, batch 8: 2.4 against 2.1 ms).
void conv_forward_implicit(const Tensor& out, const Tensor& input, const Tensor& weight,
                           const Tensor& bias, const Geom& g, int64_t groups,
                           loom_gemm_isa isa, const char* op, bool flipped = false,
                           bool whole = true) {
  const bool amx = input.scalar_type() == at::kBFloat16;
  Padded pd;
  if (!amx && winograd_fits(g, input, out.size(1), groups, &pd)) {
    conv_forward_winograd(out, input, weight, bias, g, pd, op, flipped);
    return;
  }
  if (amx && whole &&
      nhwc_fits(g, input, input.size(1), flipped ? weight.size(1) : weight.size(0), groups,
                &pd)) {
    conv_forward_nhwc(out, input, weight, bias, g, pd, op, flipped);
    return;
  }
  if (!amx && padded_fits(g, input, &pd)) {
    conv_forward_padded(out, input, weight, bias, g, pd, groups, isa, op, flipped);
    return;
  }
  int64_t n = input.size(0), c = input.size(1);
  int64_t o = flipped ? weight.size(1) * groups : weight.size(0);
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps(), len = g.positions();
  const bool flat = flat_columns(n, len);
  Tensor c_out = flat ? at::empty({o, n, len}, out.options()) : out;
  int64_t bn = flat ? 1 : n, cols = flat ? n * len : len;
  loom_tensor a = view4(weight, op, {bn, groups, og, ck}, {0, og * ck, ck, 1});
  loom_tensor b = view4(input, op, {bn, groups, ck, cols}, {groups * ck * cols, ck * cols, cols, 1});
  loom_tensor cc = view4(c_out, op, {bn, groups, og, cols}, {o * cols, og * cols, cols, 1});
  loom_gemm_plan plan;
  // The kernel reads full panels of a weight used as it is in place when
  // the GEMM's rule says so (deep layers: 512 channels at 7x7, batch 8,
  // 8% faster; at 14x14 by stride 2, 4%); a flipped one is always packed.
  if (!flipped) isa = static_cast<loom_gemm_isa>(isa | LOOM_GEMM_IN_COMPUTE);
  Tensor ws = pack_a(cc, a, b, isa, out.options(), op, &plan, flipped ? weight : Tensor());
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[6] = {cc, a, b, describe(ws, op), image5(input, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  std::array<loom_scalar, 3 + LOOM_CONV_NUM_SCALARS> sc{};
  sc[0] = scalar_i(isa);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  const int64_t tpos = tile_positions(out, bn * groups, cols);
  const int64_t pieces = loom_conv_tail_split(bn * groups, cols, tpos, device_workers(out));
  sc[1] = scalar_i(tpos);
  sc[2 + LOOM_CONV_NUM_SCALARS] = scalar_i(pieces);
  int64_t tiles = bn * groups * ((cols + tpos - 1) / tpos - 1 + pieces);
  launch(op, amx ? loom_conv_gemm_amx_kernel : loom_conv_gemm_kernel,
         c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 6 : 5), sc, tiles, 1);
  if (flat) out.view({n, o, len}).copy_(c_out.permute({1, 0, 2}));
}

// out (N, O, grid) = W (O, C/G, k) * x (N, C, spatial) [+ bias]: the forward
// of a regular convolution.
Tensor conv_forward(const Tensor& input, const Tensor& weight_in,
                    const Tensor& bias, const Geom& g, int64_t groups,
                    std::vector<int64_t> out_sizes, const char* op) {
  Tensor weight = weight_in.contiguous();
  int64_t n = input.size(0), c = input.size(1), o = weight.size(0);
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps(), len = g.positions();
  Tensor out = at::empty(out_sizes, input.options());
  if (out.numel() == 0) return out;
  loom_gemm_isa isa = loom_gemm_isa_selected();
  if (implicit_dtype(input.scalar_type(), isa) && implicit_fits(og) &&
      !(g.pointwise() && input.is_contiguous()) &&
      (!bias.defined() || bias.scalar_type() == input.scalar_type())) {
    conv_forward_implicit(out, input, weight, bias, g, groups, isa, op);
    return out;
  }
  Tensor col;  // alive until both GEMM launches are enqueued
  loom_tensor b;
  if (g.pointwise() && input.is_contiguous()) {
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
// Per image, or over all images' positions at once when they are few
// (flat_columns): the same sums. That needs dy as (O, N, L), which is made
// into *dy_t unless already there (dy_t may be null).
Tensor conv_col_grad(const Tensor& dy, const Tensor& w, int64_t c, int64_t groups,
                     const Geom& g, const char* op, Tensor* dy_t) {
  int64_t n = dy.size(0), o = dy.size(1), len = g.positions();
  int64_t cg = c / groups, og = o / groups, ck = cg * g.taps();
  Tensor col = at::empty({c * g.taps(), n, len}, dy.options().dtype(at::kFloat));
  const bool flat = flat_columns(n, len);
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

// The weight gradient without a col matrix: dy (O, N, L) is packed,
// loom_conv_wgrad_kernel (fp32) or loom_conv_wgrad_amx_kernel (bf16)
// gathers col^T panels from the image.
Tensor conv_weight_grad_implicit(const Tensor& dy_t, const Tensor& input,
                                 std::vector<int64_t> w_sizes, int64_t groups,
                                 const Geom& g, loom_gemm_isa isa, const char* op) {
  int64_t o = dy_t.size(0), nl = dy_t.numel() / o, c = input.size(1);
  int64_t og = o / groups, ck = c / groups * g.taps();
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor a = view4(dy_t, op, {1, groups, og, nl}, {0, og * nl, nl, 1});
  loom_tensor b = view4(input, op, {1, groups, nl, ck}, {0, nl * ck, ck, 1});
  loom_tensor cc = view4(gw, op, {1, groups, og, ck}, {0, og * ck, ck, 1});
  loom_gemm_plan plan;
  Tensor ws = pack_a(cc, a, b, isa, gw.options(), op, &plan);
  loom_tensor ts[5] = {cc, a, b, describe(ws, op), image5(input, op)};
  std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS> sc{};
  sc[0] = scalar_i(isa);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  if (input.scalar_type() == at::kFloat) {
    launch(op, loom_conv_wgrad_kernel, ts, sc, groups * plan.n_panels, 1);
    return gw;
  }
  // An AMX item reads each k block of dy once for up to 4 panels of dW,
  // as long as that leaves every worker 2 items or more.
  const int64_t want = groups * plan.n_panels / (2 * device_workers(gw));
  const int64_t qn = std::clamp<int64_t>(want, 1, 4);
  sc[1] = scalar_i(qn);
  launch(op, loom_conv_wgrad_amx_kernel, ts, sc, groups * ((plan.n_panels + qn - 1) / qn), 1);
  return gw;
}

std::vector<int64_t> grid_of(const Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin() + 2, t.sizes().end());
}

// With stride 1 the input gradient is itself a convolution: of dy with the
// weight's in/out channels swapped and taps reversed, padded d*(k-1) - p.
// Runs it through the implicit forward into `gi`, packing that weight
// straight from w, and returns true, or returns false when that does not
// apply.
bool input_grad_as_conv(const Tensor& gi, const Tensor& dy, const Tensor& w,
                        const Geom& g, int64_t groups, c10::IntArrayRef stride,
                        c10::IntArrayRef padding, c10::IntArrayRef dilation,
                        const char* op) {
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  if (!implicit_dtype(dy.scalar_type(), isa) || !implicit_fits(gi.size(1) / groups) ||
      (dy.scalar_type() == at::kBFloat16 && g.taps() > 32))
    return false;
  for (int i = 0; i < 3; ++i)
    if (g.s[i] != 1 || g.p[i] > g.d[i] * (g.k[i] - 1)) return false;
  const int64_t nsp = w.dim() - 2;
  std::vector<int64_t> pad;
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t j = 3 - nsp + i;
    pad.push_back(g.d[j] * (g.k[j] - 1) - g.p[j]);
  }
  // The flipped weight has the same window as w.
  Geom g2 = make_geom(w, stride, pad, dilation, grid_of(gi));
  conv_forward_implicit(gi, dy, w.contiguous(), Tensor(), g2, groups, isa, op,
                        /*flipped=*/true);
  return true;
}

// With a stride s > 1 (and dilation 1), input position s i + a meets only
// the taps t = a + p (mod s), at dy position i + (a + p - t) / s. So each
// phase a of the input gradient (positions a, a + s, ...) is a stride-1
// convolution of dy with the taps t0, t0 + s, ... of w, reversed: it runs
// through the implicit forward as above, into a phase tensor copied into
// its positions of `gi`; a phase without taps is 0. Its grid may reach
// past the standard output's bottom and right edges (dy reads 0 there),
// which the gathers allow and fp32's padded-row kernels do not: bf16 (AMX)
// only. Outputs under 512 positions per image are left to col2im, whose
// col is small then: each phase pays launches and copies (batch 8,
// forward + backward, 3x3 windows of stride 2: 64->128 at 56, 6.1 against
// 6.7 ms; 128->256 at 28, 5.4 against 3.9; 256->512 at 14, 5.9 against
// 4.0). Returns false when that does not apply.
bool input_grad_by_phases(const Tensor& gi, const Tensor& dy, const Tensor& w, const Geom& g,
                          int64_t groups, const char* op) {
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  if (dy.scalar_type() != at::kBFloat16 || !implicit_dtype(dy.scalar_type(), isa) ||
      !implicit_fits(gi.size(1) / groups) || g.positions() < 512)
    return false;
  struct Phase {
    int64_t t0 = 0, taps = 0, pad = 0, size = 1;
  };
  const int64_t nsp = w.dim() - 2;
  std::array<std::vector<Phase>, 3> phases;
  for (int j = 0; j < 3; ++j) {
    const int64_t s = g.s[j], dim = 2 + j - (3 - nsp);
    if (g.d[j] != 1) return false;
    if (j < 3 - nsp) {
      phases[j].push_back(Phase{0, 1, 0, 1});
      continue;
    }
    for (int64_t a = 0; a < s; ++a) {
      Phase ph;
      ph.size = (gi.size(dim) - a + s - 1) / s;
      for (int64_t t = g.k[j] - 1; t >= 0; --t)
        if ((a + g.p[j] - t) % s == 0) ph.t0 = t, ++ph.taps;
      // dy rows before the first one a phase output reads: its padding
      ph.pad = (ph.t0 + (ph.taps - 1) * s - a - g.p[j]) / s;
      if (ph.taps > 0 && ph.pad < 0) return false;
      phases[j].push_back(ph);
    }
  }
  for (const Phase& pd : phases[0])  // the flipped AMX pack's limit
    for (const Phase& ph : phases[1])
      for (const Phase& pw : phases[2])
        if (pd.taps * ph.taps * pw.taps > 32) return false;
  // The channels-last kernels take every phase of a 2-d gradient from one
  // copy of dy, padded for the phase that reaches furthest, when each
  // phase's grid pays for them, each phase writing its positions of gi in
  // place (64->128 3x3/2 at 56, batch 8: 2.0 -> 1.78 ms).
  Tensor copy;
  int64_t top = 0, left = 0, wq = 0;
  if (nsp == 2 && nhwc_channels_fit(dy, dy.size(1), gi.size(1), groups)) {
    for (const Phase& ph : phases[1]) top = std::max(top, ph.taps > 0 ? ph.pad : 0);
    for (const Phase& pw : phases[2]) left = std::max(left, pw.taps > 0 ? pw.pad : 0);
    for (const Phase& pw : phases[2])
      if (pw.taps > 0) wq = std::max(wq, pw.size + pw.taps - 1 + left - pw.pad);
    bool fit = true;
    int64_t plane = 0;
    for (const Phase& ph : phases[1])
      for (const Phase& pw : phases[2]) {
        if (ph.taps == 0 || pw.taps == 0) continue;
        fit = fit && nhwc_grid_fits(dy.size(0), ph.size, pw.size, wq);
        const int64_t reach = (ph.taps - 1 + top - ph.pad) * wq + pw.taps - 1 + left - pw.pad;
        plane = std::max(plane, round_up(ph.size * wq, 32) + reach);
      }
    if (fit) copy = nhwc_copy(dy, top, left, wq, 1, 1, plane, op);
  }
  std::vector<NhwcConv> in_place;  // phases written in place, in one launch
  for (size_t ad = 0; ad < phases[0].size(); ++ad)
    for (size_t ah = 0; ah < phases[1].size(); ++ah)
      for (size_t aw = 0; aw < phases[2].size(); ++aw) {
        const Phase* ph[3] = {&phases[0][ad], &phases[1][ah], &phases[2][aw]};
        const int64_t at_[3] = {int64_t(ad), int64_t(ah), int64_t(aw)};
        Tensor dst = gi, wsub = w;
        Geom g2;
        bool empty = false;
        for (int j = 3 - nsp; j < 3; ++j) {
          const int64_t dim = 2 + j - (3 - nsp);
          dst = dst.slice(dim, at_[j], gi.size(dim), g.s[j]);
          wsub = wsub.slice(dim, ph[j]->t0, w.size(dim), g.s[j]);
          g2.k[j] = ph[j]->taps, g2.p[j] = ph[j]->pad, g2.grid[j] = ph[j]->size;
          empty = empty || ph[j]->taps == 0;
        }
        if (dst.numel() == 0) continue;
        if (empty) {
          dst.zero_();
          continue;
        }
        const int64_t origin = (top - g2.p[1]) * wq + left - g2.p[2];
        if (copy.defined() && dst.stride(3) <= 2) {
          in_place.push_back(NhwcConv{dst, wsub.contiguous(), g2, origin});
          continue;
        }
        Tensor out = at::empty(dst.sizes(), gi.options());
        if (copy.defined())
          nhwc_run({NhwcConv{out, wsub.contiguous(), g2, origin}}, copy, Tensor(), wq,
                   /*flipped=*/true, op);
        else
          conv_forward_implicit(out, dy, wsub.contiguous(), Tensor(), g2, groups, isa, op,
                                /*flipped=*/true, /*whole=*/false);
        dst.copy_(out);
      }
  // The phases in turn over the same positions, so that their elements of
  // each line of gi meet in the core's cache, where four launches wrote
  // every line four times from the last-level cache (64->128 3x3/2 at 56,
  // batch 8: the stores took 0.7 of 1.9 ms).
  if (!in_place.empty()) nhwc_run(in_place, copy, Tensor(), wq, /*flipped=*/true, op);
  return true;
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
  if (!transposed) {
    auto out_sizes = at::native::conv_output_size(input.sizes(), weight.sizes(), padding,
                                                  stride, dilation);
    std::vector<int64_t> grid(out_sizes.begin() + 2, out_sizes.end());
    Geom g = make_geom(weight, stride, padding, dilation, grid);
    return conv_forward(input, weight, bias, g, groups, out_sizes, op);
  }
  // Transposed: the input gradient of the regular convolution that maps the
  // output back to the input, plus bias.
  auto out_sizes = transposed_out_sizes(input, weight, stride, padding, dilation,
                                        output_padding, groups);
  Tensor out = at::empty(out_sizes, input.options());
  if (out.numel() == 0) return out;
  Geom g = make_geom(weight, stride, padding, dilation, grid_of(input));
  Tensor x = input.contiguous(), w = weight.contiguous();
  int64_t c_out = out_sizes[1];
  Tensor col = conv_col_grad(x, w, c_out, groups, g, op, nullptr);
  col2im(out, col, g, op, bias);
  return out;
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
  Tensor dy = grad_output.contiguous();
  Tensor gi, gw, gb, dy_t;  // dy_t: dy as (O, N, L), made when a pass needs it
  std::vector<int64_t> w_sizes(weight.sizes().begin(), weight.sizes().end());
  if (!transposed) {
    Geom g = make_geom(weight, stride, padding, dilation, grid_of(dy));
    if (mask[0]) {
      Tensor w = weight.contiguous();
      int64_t c = input.size(1);
      gi = at::empty(input.sizes(), input.options());
      if (gi.numel() > 0 && dy.numel() > 0) {
        if (g.pointwise()) {
          int64_t n = dy.size(0), o = dy.size(1), len = g.positions();
          int64_t cg = c / groups, og = o / groups;
          loom_tensor a = view4(w, op, {n, groups, cg, og}, {0, og * cg, 1, cg});
          loom_tensor b = view4(dy, op, {n, groups, og, len}, {o * len, og * len, len, 1});
          loom_tensor cc = view4(gi, op, {n, groups, cg, len}, {c * len, cg * len, len, 1});
          gemm_run(op, gi, cc, a, b, nullptr, 1.0, 0.0);
        } else if (!input_grad_as_conv(gi, dy, w, g, groups, stride, padding, dilation, op) &&
                   !input_grad_by_phases(gi, dy, w, g, groups, op)) {
          // A col (fp32) far past the caches is made a few images at a
          // time, up to 8 MB of it (or one image), which col2im reads back
          // from the last-level cache: the 7x7 stem of ResNet, batch 8 of
          // 224 x 224 (59 MB of col), bf16, 7.1 -> 6.1 ms. Smaller ones
          // lose more to the smaller GEMMs (128->256 3x3/2 at 28, fp32,
          // 3.7 -> 4.1 ms by images of 3.6 MB).
          const int64_t n = dy.size(0), per_image = c * g.taps() * g.positions() * 4;
          const int64_t chunk = per_image * n > (int64_t{32} << 20)
                                    ? std::clamp<int64_t>((int64_t{8} << 20) / per_image, 1, n)
                                    : n;
          for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            const int64_t m = std::min(chunk, n - i0);
            Tensor col = conv_col_grad(dy.narrow(0, i0, m), w, c, groups, g, op,
                                       chunk == n ? &dy_t : nullptr);
            col2im(gi.narrow(0, i0, m), col, g, op);
          }
        }
      } else if (gi.numel() > 0) {
        gi.zero_();
      }
    }
    if (mask[1]) {
      if (dy.numel() == 0 || input.numel() == 0) {
        gw = at::zeros(w_sizes, weight.options());
      } else {
        loom_gemm_isa isa = loom_gemm_isa_selected();
        const bool implicit =
            implicit_dtype(input.scalar_type(), isa) && implicit_fits(dy.size(1) / groups);
        const bool fp32 = input.scalar_type() == at::kFloat;
        Padded pd;
        if (implicit && !fp32 && nhwc_wgrad_fits(g, input, dy.size(1), groups, &pd)) {
          gw = conv_weight_grad_nhwc(dy, input, w_sizes, g, pd, op);
        } else if (implicit && fp32 && winograd_fits(g, input, dy.size(1), groups, &pd)) {
          gw = conv_weight_grad_winograd(dy, input, w_sizes, g, pd, op);
        } else if (implicit && fp32 && padded_fits(g, input, &pd)) {
          gw = conv_weight_grad_padded(dy, input, w_sizes, groups, g, pd, isa, op);
        } else {
          if (!dy_t.defined()) dy_t = dy.transpose(0, 1).contiguous();  // (O, N, L)
          if (implicit) {
            gw = conv_weight_grad_implicit(dy_t, input, w_sizes, groups, g, isa, op);
          } else {
            Tensor col = im2col(input, g, op);
            gw = conv_weight_grad(dy_t, col, w_sizes, groups, op);
          }
        }
      }
    }
  } else {
    // Transposed: input = regular conv's output grid.
    Geom g = make_geom(weight, stride, padding, dilation, grid_of(input));
    if (mask[0]) {
      gi = conv_forward(dy, weight, Tensor(), g, groups,
                        std::vector<int64_t>(input.sizes().begin(), input.sizes().end()), op);
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
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "convolution_overrideable", convolution);
  LOOM_IMPL(m, "convolution_backward_overrideable", convolution_backward);
}

}  // namespace torch_loom
