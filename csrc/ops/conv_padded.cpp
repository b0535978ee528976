// 2-d convolutions over zero-padded rows split into stride phases: the
// adapters of kernels/conv_padded_avx512.c and kernels/conv_winograd_avx512.c
// (fp32; their generic twins run where AVX-512 does not).
#include "ops/conv_internal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace torch_loom::conv {

using at::Tensor;

Tensor pad_planes(const Tensor& x, const Geom& g, const Padded& pd, int64_t needed,
                  const char* op) {
  const int64_t phases = pd.sh * pd.sw;
  Tensor xp = at::empty({x.size(0), x.size(1) * phases, round_up(pd.plane(needed), 16)},
                        x.options());
  loom_tensor ts[2] = {describe(xp, op), image5(x, op)};
  loom_scalar sc[5] = {scalar_i(g.p[1]), scalar_i(g.p[2]), scalar_i(pd.wq()), scalar_i(pd.sh),
                       scalar_i(pd.sw)};
  launch(op, loom_conv_pad_kernel, ts, sc, xp.size(0) * xp.size(1),
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

std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS + 4> padded_scalars(
    const Geom& g, loom_gemm_isa isa, const Padded& pd, int64_t gpad) {
  std::array<loom_scalar, 2 + LOOM_CONV_NUM_SCALARS + 4> sc{};
  sc[0] = scalar_i(isa);
  auto geom = geom_scalars(g);
  std::copy(geom.begin(), geom.end(), sc.begin() + 2);
  sc[17] = scalar_i(pd.wq());
  sc[18] = scalar_i(gpad);
  return sc;
}

}  // namespace

bool padded_fits(const Geom& g, const Tensor& input, Padded* pd) {
  if (g.k[0] != 1 || g.p[0] != 0 || g.s[0] != 1 || g.grid[0] != 1) return false;
  // A 1x1 window reads the image as it is. With a stride, copying the image
  // into phases paid off for the 7x7 stem (33.0 against 36.2 ms forward and
  // backward, batch 8) but not for 3x3 windows, whose strided gather is
  // already cheap, nor for 1x1 ones.
  const bool strided = g.s[1] * g.s[2] > 1;
  if (g.taps() == 1 || (strided && g.taps() < 25)) return false;
  const int64_t h = input.dim() >= 4 ? input.size(-2) : 1, w = input.size(-1);
  *pd = Padded{h + 2 * g.p[1], w + 2 * g.p[2], g.grid[1], g.grid[2], g.s[1], g.s[2]};
  // At least 80% of the grid must be output. A 7x7 image padded by 1 is
  // 77% (49 of 64 positions): there the gather path is faster in the
  // forward and both gradients (512 channels, batch 8: 5.9 against 6.3 ms
  // forward); 14x14 (87.5%) is even.
  return pd->ho * pd->wo * 5 >= pd->positions() * 4;
}

void conv_forward_padded(const Tensor& out, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const Geom& g, const Padded& pd, int64_t groups,
                         loom_gemm_isa isa, const char* op, bool flipped) {
  int64_t n = input.size(0), c = input.size(1);
  int64_t o = flipped ? weight.size(1) * groups : weight.size(0);
  int64_t og = o / groups, ck = c / groups * g.taps(), cols = n * pd.positions();
  Tensor xp = pad_planes(input, g, pd, pd.positions() + pd.halo(g), op);
  loom_tensor a = view4(weight, op, {1, groups, og, ck}, {0, og * ck, ck, 1});
  loom_tensor b = view4(xp, op, {1, groups, ck, cols}, {0, 0, cols, 1});  // shape only
  loom_tensor cc = view4(out, op, {1, groups, og, cols}, {0, og * cols, cols, 1});  // plan only
  loom_gemm_plan plan;
  Tensor ws = pack_a(cc, a, b, isa, out.options(), op, &plan, flipped ? weight : Tensor());
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[7] = {cc, a, b, describe(ws, op), describe(xp, op), plane4(out, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  auto sc = padded_scalars(g, isa, pd, pd.positions());
  const int64_t tpos = tile_positions(out, groups, cols);
  sc[1] = scalar_i(tpos);
  int64_t tiles = groups * ((cols + tpos - 1) / tpos);
  launch(op, loom_conv_padded_gemm_kernel, c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 7 : 6),
         c10::ArrayRef<loom_scalar>(sc.data(), 19), tiles, 1);
}

Tensor conv_weight_grad_padded(const Tensor& dy, const Tensor& input,
                               std::vector<int64_t> w_sizes, int64_t groups, const Geom& g,
                               const Padded& pd, loom_gemm_isa isa, const char* op) {
  int64_t n = input.size(0), c = input.size(1), o = dy.size(1);
  int64_t og = o / groups, ck = c / groups * g.taps();
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor cc = view4(gw, op, {1, groups, og, ck}, {0, og * ck, ck, 1});
  // Each image's k run is padded to whole 32-position panels.
  const int64_t gpad = pd.positions();
  Tensor xp = pad_planes(input, g, pd, gpad + pd.halo(g), op);
  // dy on the same grid, (O, N, gpad): zero past wo in each row and past ho rows.
  Tensor dyp = at::empty({o, n, gpad}, dy.options());
  loom_tensor pt[2] = {describe(dyp.permute({1, 0, 2}), op), image5(dy, op)};
  loom_scalar psc[3] = {scalar_i(0), scalar_i(0), scalar_i(pd.wq())};
  launch(op, loom_conv_pad_kernel, pt, psc, n * o, std::max<int64_t>(1, 65536 / gpad));
  loom_tensor a = view4(dyp, op, {1, groups, og, n * gpad}, {0, og * n * gpad, n * gpad, 1});
  loom_tensor b = view4(xp, op, {1, groups, n * gpad, ck}, {0, 0, ck, 1});  // shape only
  loom_gemm_plan plan;
  // dy's full row panels are read where they lie, k running along its rows
  // (ResNet's 7x7 stem, fp32, batch 8: 14.3 -> 12.5 ms): packing them cost a
  // pass over all of dy.
  isa = static_cast<loom_gemm_isa>(isa | LOOM_GEMM_IN_COMPUTE);
  Tensor ws = pack_a(cc, a, b, isa, gw.options(), op, &plan);
  // Each item is one or more of dW's 32-column panels over one k chunk, and
  // reads the chunk's dy once for all of them. A dy too big to stay in
  // cache (a long k: the early layers) is split into k chunks first, whose
  // partial sums are added afterwards, in order, and each chunk serves a
  // group of panels. Otherwise every panel is an item (dy comes from cache,
  // and a group's dW tiles would crowd it out) and k is split only when
  // the panels are too few. The split depends on the shape only, never on
  // the thread count.
  const bool big_dy = og * plan.kp * int64_t{4} > (int64_t{4} << 20);
  const int64_t blocks = big_dy ? groups : groups * plan.n_panels;
  const int64_t want = std::max<int64_t>(
      1, std::min<int64_t>((16 + blocks - 1) / blocks, plan.kp / (2 * plan.kc)));
  const int64_t kchunk = round_up((plan.kp + want - 1) / want, plan.kc);
  const int64_t chunks = (plan.kp + kchunk - 1) / kchunk;
  const int64_t chunk_items = chunks * groups;
  const int64_t sets = std::min<int64_t>(plan.n_panels, (16 + chunk_items - 1) / chunk_items);
  const int64_t qn = big_dy ? std::min<int64_t>((plan.n_panels + sets - 1) / sets,
                                                LOOM_CONV_WGRAD_MAX_PANELS)
                            : 1;
  const int64_t qgroups = (plan.n_panels + qn - 1) / qn;
  Tensor part = chunks == 1 ? gw : at::empty({chunks, groups, og, ck}, gw.options());
  loom_tensor ts[6] = {cc, a, b, describe(ws, op), describe(xp, op),
                       view4(part, op, {chunks, groups, og, ck}, {groups * og * ck, og * ck, ck, 1})};
  auto sc = padded_scalars(g, isa, pd, gpad);
  sc[19] = scalar_i(kchunk);
  sc[20] = scalar_i(qn);
  launch(op, loom_conv_padded_wgrad_kernel, ts, sc, chunk_items * qgroups, 1);
  if (chunks > 1) {
    Tensor flat = gw.view({groups, og, ck});
    at::sum_out(flat, part, {0});
  }
  return gw;
}

bool winograd_fits(const Geom& g, const Tensor& input, int64_t out_channels, int64_t groups,
                   Padded* pd) {
  const char* env = std::getenv("LOOM_CONV_WINOGRAD");
  if (env && std::strcmp(env, "0") == 0) return false;
  if (groups != 1 || g.k[0] != 1 || g.p[0] != 0 || g.grid[0] != 1 || input.dim() < 4) return false;
  for (int i = 1; i < 3; ++i)
    if (g.k[i] != 3 || g.s[i] != 1 || g.d[i] != 1) return false;
  // Few channels leave the transforms the bulk of the work; the weight
  // gradient's last step holds 16 sums per input channel (kernels/conv.h).
  if (input.size(1) < 16 || out_channels < 16 || input.size(1) > LOOM_CONV_WINOGRAD_MAX_K)
    return false;
  const int64_t h = input.size(-2), w = input.size(-1);
  *pd = Padded{h + 2 * g.p[1], w + 2 * g.p[2], (g.grid[1] + 1) / 2, (g.grid[2] + 1) / 2, 2, 2};
  // Every block of 32 tiles streams the transformed weight, 16 M K floats,
  // through the GEMMs: past 8 MB (512 x 512 channels make 16) that outpaces
  // the cache (14x14, batch 8: 22.1 against 24.7 ms on the GEMM path, where
  // 256 x 256 channels run 3.5 against 5.6). And at least half of the
  // tiles' outputs must be the image's: 8x8 images are half (128 channels,
  // batch 32: 1.87 against 2.36 ms), 7x7 ones 38% (16 of 32 tiles, 49 of
  // their 64 outputs; 512 channels: 9.9 against 6.4 ms).
  if (input.size(1) * out_channels > 128 * 1024) return false;
  return g.grid[1] * g.grid[2] * 2 >= 4 * pd->positions();
}

void conv_forward_winograd(const Tensor& out, const Tensor& input, const Tensor& weight,
                           const Tensor& bias, const Geom& g, const Padded& pd, const char* op,
                           bool flipped) {
  constexpr int64_t mr = LOOM_CONV_WINOGRAD_MR;
  const int64_t m = out.size(1), k = input.size(1), panels = (m + mr - 1) / mr;
  Tensor u = at::empty({16, panels, k, mr}, out.options());
  Tensor w4 = weight.reshape({weight.size(0), weight.size(1), 3, 3});
  loom_tensor wts[2] = {describe(u, op), describe(w4, op)};
  loom_scalar wsc[1] = {scalar_i(flipped ? 1 : 0)};
  launch(op, loom_conv_winograd_weight_kernel, wts, wsc, panels, 1);
  const int64_t gpos = pd.positions();
  Tensor xp = pad_planes(input, g, pd, gpos + pd.wq() + 1, op);
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  loom_tensor ts[4] = {plane4(out, op), describe(u, op), describe(xp, op),
                       bc.defined() ? describe(bc, op) : loom_tensor{}};
  loom_scalar sc[2] = {scalar_i(pd.wq()), scalar_i(gpos)};
  const int64_t items = input.size(0) * (gpos / LOOM_CONV_WINOGRAD_TILES) *
                        ((panels + LOOM_CONV_WINOGRAD_PANELS - 1) / LOOM_CONV_WINOGRAD_PANELS);
  launch(op, loom_conv_winograd_kernel, c10::ArrayRef<loom_tensor>(ts, bc.defined() ? 4 : 3), sc,
         items, 1);
}

Tensor conv_weight_grad_winograd(const Tensor& dy, const Tensor& input,
                                 const std::vector<int64_t>& w_sizes, const Geom& g,
                                 const Padded& pd, const char* op) {
  const int64_t m = dy.size(1), k = input.size(1), gpos = pd.positions(), wq = pd.wq();
  Tensor xp = pad_planes(input, g, pd, gpos + wq + 1, op);
  Geom g0 = g;  // dy's tiles start at its first row and column
  g0.p[1] = g0.p[2] = 0;
  Tensor dyp = pad_planes(dy, g0, Padded{dy.size(-2), 2 * wq, pd.ho, pd.wo, 2, 2}, gpos, op);
  // The tiles are split into chunks, each summing into its own 16 M K
  // floats: up to 16 chunks, as long as their sums stay within 4 MB. Items
  // also split the channels, so the chunks need not be many. The split
  // follows the shape only.
  const int64_t tiles = input.size(0) * gpos;
  const int64_t want = std::clamp<int64_t>((int64_t{4} << 20) / (64 * m * k), 1, 16);
  const int64_t tchunk = round_up((tiles + want - 1) / want, LOOM_CONV_WINOGRAD_TILES);
  const int64_t chunks = (tiles + tchunk - 1) / tchunk;
  Tensor part = at::empty({chunks, 16, m, k}, input.options());
  loom_tensor ts[3] = {describe(part, op), describe(xp, op), describe(dyp, op)};
  loom_scalar sc[3] = {scalar_i(wq), scalar_i(gpos), scalar_i(tchunk)};
  constexpr int64_t wm = LOOM_CONV_WINOGRAD_WG_M, wk = LOOM_CONV_WINOGRAD_WG_K;
  launch(op, loom_conv_winograd_wgrad_kernel, ts, sc,
         chunks * ((m + wm - 1) / wm) * ((k + wk - 1) / wk), 1);
  Tensor gw = at::empty(w_sizes, input.options());
  loom_tensor fts[2] = {describe(gw.view({m, k, 3, 3}), op), describe(part, op)};
  launch(op, loom_conv_winograd_wgrad_finish_kernel, fts, c10::ArrayRef<loom_scalar>(), m,
         std::max<int64_t>(1, 4096 / (k * chunks)));
  return gw;
}

}  // namespace torch_loom::conv
