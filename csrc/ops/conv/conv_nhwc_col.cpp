// fp32 convolutions over a channels-last image as plain GEMMs of
// channels-last rows: one row per output position, holding every tap's
// channels ("im2col.nhwc_to_col"; a 1x1 window of stride 1 reads the image
// itself), times the weight laid out channels last, (O, kd, kh, kw, C),
// which is the (O, K) matrix of those rows' columns. The input gradient is
// the adjoint (rows of dy times the weight, summed back into the image by
// "im2col.nhwc_to_image"), the weight gradient dy's columns times the rows.
// Every result is written channels last where it lies, as the CPU returns
// it, with no layout copy.
#include "ops/conv/conv_internal.h"

#include <algorithm>
#include <numeric>

#include "ops/gemm/linalg_gemm.h"

namespace torch_loom::conv {

using at::Tensor;

namespace {

// Past this the col matrix would leave the caches far behind and cost
// more memory than the paths that gather as they go.
constexpr int64_t kMaxColBytes = int64_t{64} << 20;

// Images per pass of the forward and the gradients: their col rows
// within about 2 MB, which the GEMM reads back from the cache the pass
// before it wrote them to (a batch's col at once goes out to memory and
// back: a 3x3/2 window over 32 channels at 32x32, batch 32, is 9 MB of col,
// 1.2x the time of 4-image passes). Each row's sums do not depend on how
// many rows a GEMM has, so the bits do not depend on the chunks.
constexpr int64_t kChunkColBytes = int64_t{2} << 20;

int64_t images_per_pass(int64_t n, int64_t col_bytes_per_image) {
  return std::clamp<int64_t>(kChunkColBytes / std::max<int64_t>(1, col_bytes_per_image), 1,
                             std::max<int64_t>(1, n));
}

// A 1x1 window of stride 1 without padding: the image's rows are the col.
bool rows_are_image(const Geom& g) { return g.pointwise(); }

int64_t rows_of(const Tensor& t) {  // images times positions
  int64_t r = t.size(0);
  for (int64_t i = 2; i < t.dim(); ++i) r *= t.size(i);
  return r;
}

// A (rows, cols) GEMM operand over `t`'s memory with strides (rs, cs).
loom_tensor mat(const Tensor& t, const char* op, int64_t rows, int64_t cols, int64_t rs,
                int64_t cs) {
  return view4(t, op, {1, 1, rows, cols}, {0, 0, rs, cs});
}

// The col rows (N*L, K*C) of a channels-last image x over g.
Tensor nhwc_col(const Tensor& x, const Geom& g, const char* op) {
  const int64_t rows = x.size(0) * g.positions(), k = g.taps() * x.size(1);
  Tensor col = at::empty({rows, k}, x.options());
  auto sc = geom_scalars(g);
  loom_tensor ts[2] = {describe(col, op), image5(x, op)};
  launch(op, LOOM_KERNEL("im2col.nhwc_to_col"), ts, sc, rows,
         std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k)));
  return col;
}

}  // namespace

bool nhwc_col_fits(const Tensor& input, const Tensor& weight, int64_t groups, const Geom& g,
                   at::MemoryFormat fmt) {
  const bool cl = (fmt == at::MemoryFormat::ChannelsLast && input.dim() == 4) ||
                  (fmt == at::MemoryFormat::ChannelsLast3d && input.dim() == 5);
  if (!cl || groups != 1 || input.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kFloat || !input.is_contiguous(fmt))
    return false;
  const int64_t col_bytes = input.size(0) * g.positions() * g.taps() * input.size(1) * 4;
  return rows_are_image(g) || col_bytes <= kMaxColBytes;
}

void conv_forward_nhwc_col(const Tensor& out, const Tensor& input, const Tensor& weight,
                           const Tensor& bias, const Geom& g, at::MemoryFormat fmt,
                           const char* op) {
  const int64_t o = out.size(1), k = g.taps() * input.size(1), n = input.size(0);
  const Tensor w = weight.contiguous(fmt);  // (O, K) rows
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  const int64_t step = rows_are_image(g) || n == 0
                           ? std::max<int64_t>(1, n)
                           : images_per_pass(n, g.positions() * k * 4);
  for (int64_t i0 = 0; i0 < std::max<int64_t>(1, n); i0 += step) {
    const int64_t m = std::min(step, n - i0);
    const Tensor x = m == n ? input : input.narrow(0, i0, m);
    const Tensor y = m == n ? out : out.narrow(0, i0, m);
    const int64_t rows = rows_of(y);
    const Tensor col = rows_are_image(g) ? x : nhwc_col(x, g, op);
    loom_tensor a = mat(col, op, rows, k, k, 1), b = mat(w, op, k, o, 1, k);
    loom_tensor c = mat(y, op, rows, o, o, 1);
    if (bc.defined()) {
      loom_tensor cin = mat(bc, op, rows, o, 0, 1);
      gemm_run(op, y, c, a, b, &cin, 1.0, 1.0);
    } else {
      gemm_run(op, y, c, a, b, nullptr, 1.0, 0.0);
    }
  }
}

void input_grad_nhwc_col(const Tensor& gi, const Tensor& dy_in, const Tensor& weight,
                         const Geom& g, at::MemoryFormat fmt, const char* op) {
  const Tensor dy = dy_in.contiguous(fmt);
  const int64_t o = dy.size(1), k = g.taps() * gi.size(1), n = dy.size(0);
  const Tensor w = weight.contiguous(fmt);
  if (rows_are_image(g)) {
    const int64_t rows = rows_of(dy);
    loom_tensor a = mat(dy, op, rows, o, o, 1), b = mat(w, op, o, k, k, 1);
    gemm_run(op, gi, mat(gi, op, rows, k, k, 1), a, b, nullptr, 1.0, 0.0);
    return;
  }
  const int64_t step = images_per_pass(n, g.positions() * k * 4);
  for (int64_t i0 = 0; i0 < n; i0 += step) {
    const int64_t m = std::min(step, n - i0);
    const Tensor d = m == n ? dy : dy.narrow(0, i0, m);
    const Tensor x = m == n ? gi : gi.narrow(0, i0, m);
    const int64_t rows = rows_of(d);
    loom_tensor a = mat(d, op, rows, o, o, 1), b = mat(w, op, o, k, k, 1);
    Tensor col = at::empty({rows, k}, dy.options());
    gemm_run(op, col, mat(col, op, rows, k, k, 1), a, b, nullptr, 1.0, 0.0);
    auto sc = geom_scalars(g);
    loom_tensor ts[2] = {image5(x, op), describe(col, op)};
    launch(op, LOOM_KERNEL("im2col.nhwc_to_image"), ts, sc, rows_of(x),
           std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k)));
  }
}

Tensor weight_grad_nhwc_col(const Tensor& dy_in, const Tensor& input,
                            const std::vector<int64_t>& w_sizes, const Geom& g,
                            at::MemoryFormat fmt, const char* op) {
  const Tensor dy = dy_in.contiguous(fmt);
  const int64_t o = dy.size(1), k = g.taps() * input.size(1), n = input.size(0);
  Tensor gw = at::empty(w_sizes, input.options().memory_format(fmt));
  if (rows_are_image(g)) {
    const int64_t rows = rows_of(dy);
    loom_tensor a = mat(dy, op, o, rows, 1, o), b = mat(input, op, rows, k, k, 1);
    gemm_run(op, gw, mat(gw, op, o, k, k, 1), a, b, nullptr, 1.0, 0.0);
    return gw;
  }
  // The positions are the GEMM's k: passes of images add their products
  // to the sums so far (two buffers in turn, the last pass into gw). Passes
  // of a multiple of 256 rows end where the fp32 GEMM's k blocks end, so
  // the sums are added in the order one GEMM over the batch adds them.
  const int64_t per = g.positions(), align = 256 / std::gcd<int64_t>(per, 256);
  int64_t step = images_per_pass(n, per * k * 4);
  if (step >= align) step -= step % align;
  const int64_t passes = (n + step - 1) / step;
  Tensor spare = passes > 1 ? at::empty_like(gw) : Tensor();
  Tensor prev;
  for (int64_t j = 0; j < passes; ++j) {
    const int64_t i0 = j * step, m = std::min(step, n - i0);
    const Tensor x = m == n ? input : input.narrow(0, i0, m);
    const Tensor d = m == n ? dy : dy.narrow(0, i0, m);
    const int64_t rows = rows_of(d);
    const Tensor col = nhwc_col(x, g, op);
    // the last pass writes gw; the ones before alternate so that none
    // reads the buffer it writes
    const Tensor& dst = (passes - 1 - j) % 2 == 0 ? gw : spare;
    loom_tensor a = mat(d, op, o, rows, 1, o), b = mat(col, op, rows, k, k, 1);
    if (prev.defined()) {
      loom_tensor cin = mat(prev, op, o, k, k, 1);
      gemm_run(op, dst, mat(dst, op, o, k, k, 1), a, b, &cin, 1.0, 1.0);
    } else {
      gemm_run(op, dst, mat(dst, op, o, k, k, 1), a, b, nullptr, 1.0, 0.0);
    }
    prev = dst;
  }
  return gw;
}

}  // namespace torch_loom::conv
