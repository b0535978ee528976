// bf16 2-d convolutions on AMX tiles over a channels-last padded copy of
// the image: the adapter of kernels/conv_nhwc_amx.c.
#include "ops/conv_internal.h"

#include <algorithm>

#include "kernels/conv_nhwc.h"

namespace torch_loom::conv {

using at::Tensor;

bool nhwc_channels_fit(const Tensor& input, int64_t in_channels, int64_t out_channels,
                       int64_t groups) {
  if (input.scalar_type() != at::kBFloat16 || loom_gemm_isa_selected() != LOOM_GEMM_AMX ||
      groups != 1 || input.dim() != 4)
    return false;
  // Channels come in blocks of 32: at most a quarter of them padding.
  for (int64_t c : {in_channels, out_channels})
    if (c < 32 || c * 4 < round_up(c, 32) * 3) return false;
  return true;
}

bool nhwc_fits(const Geom& g, const Tensor& input, int64_t in_channels, int64_t out_channels,
               int64_t groups, Padded* pd) {
  if (!nhwc_channels_fit(input, in_channels, out_channels, groups) || g.k[0] != 1 ||
      g.p[0] != 0 || g.s[0] != 1 || g.grid[0] != 1 || g.taps() > 64)
    return false;
  // The padded extent the grid reads, in stride phases of rows wq wide.
  const int64_t ho = g.grid[1], wo = g.grid[2];
  *pd = Padded{(ho - 1) * g.s[1] + g.d[1] * (g.k[1] - 1) + 1,
               (wo - 1) * g.s[2] + g.d[2] * (g.k[2] - 1) + 1, ho, wo, g.s[1], g.s[2]};
  return g.taps() > 1 && nhwc_grid_fits(input.size(0), ho, wo, pd->wq());
}

bool nhwc_grid_fits(int64_t n, int64_t ho, int64_t wo, int64_t wq) {
  // At least 80% of the grid must be output, and the grid (all images')
  // must be large enough to pay for repacking the weight per call: ResNet's
  // 3x3 windows at 14x14, batch 8 (1792 positions), ran 3-9% slower than
  // the implicit GEMM, those at 28x28 (6720) 1-19% faster. A 1x1 window
  // gathers nothing on the implicit path: 7-9% slower here.
  return wo * 5 >= wq * 4 && n * ho * wq >= 4096;
}

Tensor nhwc_copy(const Tensor& input, int64_t top, int64_t left, int64_t wq, int64_t sh,
                 int64_t sw, int64_t plane, const char* op) {
  const int64_t n = input.size(0), cp = round_up(input.size(1), LOOM_CONV_NHWC_CB);
  // Positions an odd number of cache lines apart: a power-of-two stride
  // would put a tile's 16 rows, and the taps' rows, in a few of L1's sets.
  const int64_t ps = cp / LOOM_CONV_NHWC_CB % 2 == 0 ? cp + LOOM_CONV_NHWC_CB : cp;
  Tensor xp = at::empty({n, sh * sw, plane, ps}, input.options()).narrow(3, 0, cp);
  loom_tensor pts[2] = {describe(xp, op), image5(input, op)};
  loom_scalar psc[5] = {scalar_i(top), scalar_i(left), scalar_i(wq), scalar_i(sh), scalar_i(sw)};
  launch(op, loom_conv_nhwc_pad_kernel, pts, psc, n * sh * sw * ((plane + wq - 1) / wq),
         std::max<int64_t>(1, 16384 / (wq * cp)));
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
  launch(op, loom_conv_nhwc_weight_kernel, wts, wsc, wp.size(0) * 2 * wp.size(1), 1);
  return wp;
}

}  // namespace

void nhwc_run(const std::vector<NhwcConv>& convs, const Tensor& xp, const Tensor& bias,
              int64_t wq, bool flipped, const char* op) {
  if (convs.empty()) return;
  if (convs.size() > LOOM_CONV_NHWC_CONVS) {  // more than a launch takes (stride (5, 2): 10 phases)
    const auto cut = convs.begin() + LOOM_CONV_NHWC_CONVS;
    nhwc_run(std::vector<NhwcConv>(convs.begin(), cut), xp, bias, wq, flipped, op);
    nhwc_run(std::vector<NhwcConv>(cut, convs.end()), xp, Tensor(), wq, flipped, op);
    return;
  }
  const Geom& g = convs[0].g;
  const int64_t n = convs[0].out.size(0), cp = xp.size(3);
  std::vector<Tensor> packed;
  int64_t grid = 0;
  for (const NhwcConv& cv : convs) {
    packed.push_back(nhwc_weight(cv.weight, cv.out, cv.g.taps(), cp, flipped, op));
    grid = std::max(grid, cv.out.size(2) * wq);
  }
  // Items of up to 128 positions, fewer when the items would be too few
  // to share out: each output's sums are the same either way.
  const int64_t workers = device_workers(convs[0].out);
  int64_t ppi = LOOM_CONV_NHWC_POSITIONS;
  while (ppi > 32 && n * ((grid + ppi - 1) / ppi) < 8 * workers) ppi /= 2;
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
  launch(op, loom_conv_nhwc_kernel, ts, sc, n * ((grid + ppi - 1) / ppi), 1);
}

void conv_forward_nhwc(const Tensor& out, const Tensor& input, const Tensor& weight,
                       const Tensor& bias, const Geom& g, const Padded& pd, const char* op,
                       bool flipped) {
  Tensor xp = nhwc_copy(input, g.p[1], g.p[2], pd.wq(), pd.sh, pd.sw,
                        pd.positions() + pd.halo(g), op);
  nhwc_run({NhwcConv{out, weight, g, 0}}, xp, bias, pd.wq(), flipped, op);
}

bool nhwc_wgrad_fits(const Geom& g, const Tensor& input, int64_t out_channels, int64_t groups,
                     Padded* pd) {
  // Items are blocks of 32 by 32 channels: at least four of them.
  return input.size(1) >= 64 && out_channels >= 64 &&
         nhwc_fits(g, input, input.size(1), out_channels, groups, pd);
}

Tensor conv_weight_grad_nhwc(const Tensor& dy, const Tensor& input,
                             const std::vector<int64_t>& w_sizes, const Geom& g,
                             const Padded& pd, const char* op) {
  const int64_t n = input.size(0), c = input.size(1), o = dy.size(1), taps = g.taps();
  const int64_t cp = round_up(c, LOOM_CONV_NHWC_CB), op_ = round_up(o, 32);
  const int64_t phases = pd.sh * pd.sw, ho = pd.ho, wo = pd.wo;
  // Rows of an even width start whole pairs of positions.
  const int64_t wq = round_up(pd.wq(), 2), grid = ho * wq;
  const int64_t halo = g.d[1] * (g.k[1] - 1) / pd.sh * wq + g.d[2] * (g.k[2] - 1) / pd.sw;
  const int64_t plane = round_up(round_up(grid, 32) + halo, 32);
  // The image in pairs of positions, each pair an odd number of cache
  // lines from the next (as for the forward's copy).
  const int64_t ps = 2 * cp + 32;
  Tensor xq = at::empty({n * phases * (plane / 2) * ps}, input.options())
                  .as_strided({n, phases, plane / 2, cp, 2},
                              {phases * (plane / 2) * ps, (plane / 2) * ps, ps, 2, 1});
  loom_tensor pts[2] = {describe(xq, op), image5(input, op)};
  loom_scalar psc[5] = {scalar_i(g.p[1]), scalar_i(g.p[2]), scalar_i(wq), scalar_i(pd.sh),
                        scalar_i(pd.sw)};
  launch(op, loom_conv_nhwc_pad_kernel, pts, psc, n * phases * ((plane + wq - 1) / wq),
         std::max<int64_t>(1, 16384 / (wq * cp)));
  // dy on the grid, zero past wo, past O and as far around the grid as the
  // taps reach.
  const int64_t lead = halo, span = lead + plane;
  Tensor dyp = at::zeros({n, op_, span}, dy.options());
  dyp.narrow(1, 0, o).narrow(2, lead, grid).unflatten(2, {ho, wq}).narrow(3, 0, wo).copy_(dy);
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor ts[3] = {describe(gw.view({o, c, taps}), op), describe(xq, op), describe(dyp, op)};
  // Items of several out-channel blocks, which each chunk of the copy
  // serves from the core's cache: where one block an item read the copy
  // from the last-level cache once per block (64->128 3x3/2 at 56, batch
  // 8: bound by those reads). As many blocks as the sums buffer holds,
  // shared evenly, while each worker still gets an item.
  const int64_t obs = op_ / 32, cbs = cp / LOOM_CONV_NHWC_CB;
  const int64_t most = std::max<int64_t>(1, LOOM_CONV_NHWC_WG_BLOCKS / taps);
  const int64_t want = (device_workers(gw) + cbs - 1) / cbs;  // groups for a worker each
  const int64_t groups_ = std::max((obs + most - 1) / most, std::min(want, obs));
  const int64_t group = (obs + groups_ - 1) / groups_;
  loom_scalar sc[9] = {scalar_i(g.k[1]), scalar_i(g.k[2]), scalar_i(g.s[1]), scalar_i(g.s[2]),
                       scalar_i(g.d[1]), scalar_i(g.d[2]), scalar_i(wq), scalar_i(lead),
                       scalar_i(group)};
  launch(op, loom_conv_nhwc_wgrad_kernel, ts, sc, (obs + group - 1) / group * cbs, 1);
  return gw;
}

}  // namespace torch_loom::conv
