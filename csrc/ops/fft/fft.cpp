// The FFT on loom: aten::_fft_c2c, _fft_r2c and _fft_c2r (and their out=
// forms), which every torch.fft function and stft/istft reach. A transform
// over several dims is one launch of "fft.*" per dim (loom/kernels/fft.h),
// the first from the input into the result, the others in place; the
// normalisation scale rides on the last launch. Tables come from a cache
// keyed by (device, n, sign, dtype).
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <numeric>
#include <mutex>
#include <tuple>
#include <vector>

#include "common.h"
#include "loom/kernels/fft.h"
#include "register.h"

namespace torch_loom::fft {
namespace {

using at::Tensor;

// Tables kept per (device, n, sign, real dtype, kind, n2): the most recently
// used kCacheSize of them (a table is about 2n complex, 6m for Bluestein; the
// four-step twiddles of (n, n2) n n2 complex).
constexpr size_t kCacheSize = 32;

enum TableKind { kComplexTable = 0, kRealTable = 1, kTwiddles = 2 };

struct Table {
  std::tuple<int, int64_t, int, int, int, int64_t> key;
  loom_fft_plan plan;
  Tensor bytes;  // uint8 on the device (the twiddles: the real dtype)
};

// The table of (n, sign, real, kind) on `like`'s device: a transform's
// ("fft.init"; kind kRealTable for real signals) or the four-step twiddles
// of (n, n2) ("fft.twiddles").
const Table& table_for(const Tensor& like, int64_t n, int sign, loom_dtype real, TableKind kind,
                       int64_t n2 = 0) {
  static std::mutex mutex;
  static auto* cache = new std::list<Table>();  // never destroyed: outlives the allocator's users
  const int dev = like.device().index();
  const auto key = std::make_tuple(dev, n, sign, static_cast<int>(real), static_cast<int>(kind), n2);
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = cache->begin(); it != cache->end(); ++it)
    if (it->key == key) {
      cache->splice(cache->begin(), *cache, it);
      return cache->front();
    }
  Table t;
  t.key = key;
  if (kind == kTwiddles) {
    const loom_scalar s[3] = {scalar_i(n), scalar_i(n2), scalar_i(sign)};
    t.plan = {};
    t.bytes = at::empty({loom_fft_twiddles_numel(n, n2)},
                        like.options().dtype(real == LOOM_FLOAT32 ? at::kFloat : at::kDouble));
    const loom_tensor d = describe(t.bytes, "fft");
    launch("fft", LOOM_KERNEL("fft.twiddles"), {&d, 1}, s, n,
           std::max<int64_t>(1, 65536 / n2), dev);
  } else {
    const loom_scalar s[4] = {scalar_i(n), scalar_i(sign), scalar_i(real),
                              scalar_i(kind == kRealTable ? 1 : 0)};
    t.plan = plan<loom_fft_plan>("fft", LOOM_KERNEL("fft.plan"), {}, s);
    t.bytes = at::empty({t.plan.table_bytes}, like.options().dtype(at::kByte));
    const loom_tensor d = describe(t.bytes, "fft");
    launch("fft", LOOM_KERNEL("fft.init"), {&d, 1}, s, 1, 1, dev);
  }
  // Other streams may use the table next: it is complete before it is shared.
  check(loom_stream_synchronize(current_stream(dev)), "fft");
  cache->push_front(std::move(t));
  if (cache->size() > kCacheSize) cache->pop_back();
  return cache->front();
}

loom_dtype real_of(at::ScalarType type) {
  return (type == at::kFloat || type == at::kComplexFloat) ? LOOM_FLOAT32 : LOOM_FLOAT64;
}

// Transforms at least this long (and with no prime factor above the
// radices) run as the four-step decomposition: two passes of short
// transforms over blocks of rows, split over the workers, instead of one
// long transform per row.
constexpr int64_t kFourStepMin = 16384;

at::ScalarType complex_of(loom_dtype real) {
  return real == LOOM_FLOAT32 ? at::kComplexFloat : at::kComplexDouble;
}

LaunchInfo flops_info(int64_t rows, int64_t n) {
  LaunchInfo info;
  info.flops = static_cast<uint64_t>(5.0 * rows * n * std::log2(std::max<double>(2, n)));
  return info;
}

// How a row launch splits `rows` transforms of length n: blocks of up to
// one vector's rows (16 floats, 8 doubles: the stages vectorize across
// them), at most 32K (16K) points of workspace per buffer; chunks of whole
// blocks, about a sixteenth of the rows and at least 16K points each. All
// set by the shapes alone.
struct RowSplit {
  int64_t rows, block, grain, chunks;
};

RowSplit row_split(int64_t rows, int64_t n, loom_dtype real, const loom_fft_plan& plan) {
  const int64_t lanes = real == LOOM_FLOAT32 ? 16 : 8;
  const int64_t block =
      std::min<int64_t>({lanes, rows, std::max<int64_t>(1, 2048 * lanes / plan.m)});
  int64_t grain = std::max<int64_t>({block, 16384 / std::max<int64_t>(1, n), (rows + 15) / 16});
  grain = (grain + block - 1) / block * block;
  return {rows, block, grain, (rows + grain - 1) / grain};
}

// One launch of `kernel` over the rows of `out` / `in`, their last dims (of
// length n) transformed and the others the batch, with the table of
// (n, sign) and, for the four-step's first pass, its twiddles.
void rows_pass(const char* kernel_name, const loom_kernel_t* kernel, const Tensor& out,
               const Tensor& in, int64_t n, int sign, double scale,
               const Tensor* twiddles = nullptr) {
  if (out.numel() == 0 || in.numel() == 0) return;
  // Rows are transformed together in blocks along the innermost batch dim.
  // Size-1 batch dims address nothing: dropped, that dim is one with rows
  // side by side (a trailing 1 made every block one row). And it merges
  // with the next while both tensors hold the two as one run of rows (a
  // (513, 3) batch of rows one element apart is 1539 rows side by side, not
  // blocks of 3). The four-step's twiddles follow that dim as given.
  if (!twiddles) {
    for (int64_t d = out.dim() - 2; d >= 0; --d)
      if (out.size(d) == 1) return rows_pass(kernel_name, kernel, out.squeeze(d), in.squeeze(d),
                                             n, sign, scale);
    const int64_t d = out.dim() - 2;
    if (d >= 1 && out.stride(d - 1) == out.stride(d) * out.size(d) &&
        in.stride(d - 1) == in.stride(d) * in.size(d)) {
      std::vector<int64_t> sizes = out.sizes().vec(), isizes = in.sizes().vec();
      sizes[d - 1] *= sizes[d];
      sizes.erase(sizes.begin() + d);
      isizes[d - 1] *= isizes[d];
      isizes.erase(isizes.begin() + d);
      return rows_pass(kernel_name, kernel, out.view(sizes), in.view(isizes), n, sign, scale);
    }
  }
  const loom_dtype real = real_of(out.scalar_type());
  // a copy: another thread's look-up may drop the cache's entry
  const Table t = table_for(out, n, sign, real,
                            kernel != LOOM_KERNEL("fft.c2c") ? kRealTable : kComplexTable);
  const RowSplit sp = row_split(out.numel() / out.size(-1), n, real, t.plan);
  Tensor work = at::empty({sp.chunks * sp.block * t.plan.work},
                          out.options().dtype(complex_of(real)));
  const loom_tensor d[5] = {describe(out, "fft"), describe(in, "fft"), describe(t.bytes, "fft"),
                            describe(work, "fft"),
                            twiddles ? describe(*twiddles, "fft") : loom_tensor{}};
  const loom_scalar s[4] = {scalar_i(n), scalar_i(sign), scalar_f(scale), scalar_i(sp.block)};
  launch(kernel_name, kernel, c10::ArrayRef<loom_tensor>(d, twiddles ? 5 : 4), s, sp.rows,
         sp.grain, out.device().index(), flops_info(sp.rows, n));
}

// Panels this many bytes at most (the 2-d r2c's intermediate; a larger one
// runs as two passes over the result).
constexpr int64_t kPanelBytesMax = int64_t{256} << 20;

// The 2-d r2c transform of in's last two dims (n2 x n reals) into out
// (n2 x h complex) through panels ("fft.r2c_panels", "fft.c2c_panels"): the
// row transforms write the column transforms' buffers, so the column pass
// gathers nothing. False (nothing done) where the panels do not apply.
bool r2c_2d_panels(const Tensor& out, const Tensor& in, int64_t n, double scale) {
  const int64_t n2 = in.size(-2), h = out.size(-1);
  if (n2 < 2 || n2 >= kFourStepMin) return false;
  const loom_dtype real = real_of(out.scalar_type());
  const Table rt = table_for(out, n, -1, real, kRealTable);
  const Table ct = table_for(out, n2, -1, real, kComplexTable);
  const int64_t width = real == LOOM_FLOAT32 ? 16 : 8;  // a vector's columns per panel
  const int64_t cap = ct.plan.m + 1, signals = in.numel() / (n2 * n);
  const int64_t panels = signals * ((h + width - 1) / width);
  const int64_t csize = real == LOOM_FLOAT32 ? 8 : 16;
  if (panels * width * cap * csize > kPanelBytesMax) return false;
  const at::TensorOptions copts = out.options().dtype(complex_of(real));
  Tensor pan = at::empty({panels * width * cap}, copts);
  const int dev = out.device().index();
  {
    const RowSplit sp = row_split(signals * n2, n, real, rt.plan);
    Tensor work = at::empty({sp.chunks * sp.block * rt.plan.work}, copts);
    const loom_tensor d[4] = {describe(pan, "fft"), describe(in, "fft"),
                              describe(rt.bytes, "fft"), describe(work, "fft")};
    const loom_scalar s[7] = {scalar_i(n),     scalar_i(-1),    scalar_f(1.0), scalar_i(sp.block),
                              scalar_i(h),     scalar_i(width), scalar_i(cap)};
    launch("_fft_r2c", LOOM_KERNEL("fft.r2c_panels"), d, s, sp.rows, sp.grain, dev,
           flops_info(sp.rows, n));
  }
  // An eighth of the panels a chunk, rounded down (each chunk's buffer
  // starts cold; a signal's last panel, often narrow, then mostly rides in
  // a chunk of its own: 33 panels of 1024 columns split 8 x 4 + 1).
  const int64_t grain = std::max<int64_t>(1, panels / 8), chunks = (panels + grain - 1) / grain;
  Tensor work = at::empty({chunks * width * cap}, copts);
  const Tensor cols = out.movedim(-2, -1);
  const loom_tensor d[4] = {describe(cols, "fft"), describe(pan, "fft"), describe(ct.bytes, "fft"),
                            describe(work, "fft")};
  const loom_scalar s[5] = {scalar_i(n2), scalar_i(-1), scalar_f(scale), scalar_i(width),
                            scalar_i(cap)};
  launch("_fft_r2c", LOOM_KERNEL("fft.c2c_panels"), d, s, panels, grain, dev,
         flops_info(signals * h, n2));
  return true;
}

// The four-step split n = n1 n2 (n1 the largest divisor <= sqrt(n)), or 0
// when n runs as one transform.
int64_t four_step_split(const Tensor& like, int64_t n, int sign) {
  if (n < kFourStepMin) return 0;
  const loom_scalar s[4] = {scalar_i(n), scalar_i(sign), scalar_i(real_of(like.scalar_type())),
                            scalar_i(0)};
  if (plan<loom_fft_plan>("fft", LOOM_KERNEL("fft.plan"), {}, s).bluestein) return 0;
  int64_t n1 = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (n1 > 1 && n % n1 != 0) --n1;
  return n1 >= 16 ? n1 : 0;
}

// The c2c transform of length n = n1 n2 along `dim` by the four-step
// decomposition (loom/kernels/fft.h): with j = n2 j1 + j2, k = k1 + n1 k2,
// the columns j2 transformed over j1 with the twiddles into t[k1][j2], then
// the rows of t over j2 into X[k1 + n1 k2].
void four_step(const Tensor& out, const Tensor& in, int64_t dim, int64_t n, int64_t n1,
               int sign, double scale) {
  const int64_t n2 = n / n1;
  const Tensor tw = table_for(out, n1, sign, real_of(out.scalar_type()), kTwiddles, n2).bytes;
  // in as (others..., j2, j1); t as (others..., k1, j2) in memory
  const Tensor cols = in.unflatten(dim, {n1, n2}).movedim({dim + 1, dim}, {-2, -1});
  std::vector<int64_t> tsizes = cols.sizes().vec();
  tsizes[tsizes.size() - 2] = n1;
  tsizes[tsizes.size() - 1] = n2;
  const Tensor t = at::empty(tsizes, out.options());
  rows_pass("_fft_c2c", LOOM_KERNEL("fft.c2c"), t.transpose(-1, -2), cols, n1, sign, 1.0, &tw);
  // out as (others..., k1, k2)
  const Tensor rows = out.unflatten(dim, {n2, n1}).movedim({dim + 1, dim}, {-2, -1});
  rows_pass("_fft_c2c", LOOM_KERNEL("fft.c2c"), rows, t, n2, sign, scale);
}

// One transform of length n of every row of `out` / `in` along `dim`.
void pass(const char* kernel_name, const loom_kernel_t* kernel, const Tensor& out,
          const Tensor& in, int64_t dim, int64_t n, int sign, double scale) {
  if (out.numel() == 0 || in.numel() == 0) return;
  if (kernel == LOOM_KERNEL("fft.c2c")) {
    const int64_t n1 = four_step_split(out, n, sign);
    if (n1) return four_step(out, in, dim, n, n1, sign, scale);
  }
  rows_pass(kernel_name, kernel, out.movedim(dim, -1), in.movedim(dim, -1), n, sign, scale);
}

std::vector<int64_t> wrap_dims(c10::IntArrayRef dim, int64_t ndim, const char* op) {
  std::vector<int64_t> dims;
  for (int64_t d : dim) {
    const int64_t w = at::maybe_wrap_dim(d, ndim);
    for (int64_t e : dims) TORCH_CHECK(e != w, op, ": dims must be unique, got ", dim);
    dims.push_back(w);
  }
  return dims;
}

// 1, 1/sqrt(n) or 1/n for ATen's fft_norm_mode (none, by_root_n, by_n).
double norm_scale(int64_t normalization, int64_t signal_numel) {
  if (normalization == 1) return 1.0 / std::sqrt(static_cast<double>(signal_numel));
  if (normalization == 2) return 1.0 / static_cast<double>(signal_numel);
  return 1.0;
}

void check_input(const Tensor& self, bool complex, const char* op) {
  const at::ScalarType t = self.scalar_type();
  const bool ok = complex ? (t == at::kComplexFloat || t == at::kComplexDouble)
                          : (t == at::kFloat || t == at::kDouble);
  TORCH_CHECK_NOT_IMPLEMENTED(ok, op, ": unsupported dtype ", t, " on the loom device (",
                              complex ? "complex64 and complex128" : "float32 and float64",
                              " are)");
}

int64_t checked_length(int64_t n, const char* op) {
  TORCH_CHECK(n >= 1, op, ": Invalid number of data points (", n, ") specified");
  TORCH_CHECK(n <= LOOM_FFT_MAX_N, op, ": transform length ", n, " exceeds the maximum ",
              LOOM_FFT_MAX_N);
  return n;
}

// c2c passes over `dims` (all in place on `out` after the first, which
// reads `in`); the scale on the last.
void c2c_passes(const Tensor& out, const Tensor& in, c10::ArrayRef<int64_t> dims, int sign,
                double scale) {
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t n = checked_length(out.size(dims[k]), "fft");
    pass("_fft_c2c", LOOM_KERNEL("fft.c2c"), out, k == 0 ? in : out, dims[k], n, sign,
         k + 1 == dims.size() ? scale : 1.0);
  }
}

// A new result laid out as the CPU lays out its FFTs' (ATen's MKL path,
// _exec_fft): the dims not transformed outermost, in the input's stride
// order (largest first), then the transformed dims packed in the order of
// `dims`, which is sorted by the input's strides as the CPU sorts it (all
// but the last when `keep_last`: a one-sided transform's halved dim). The
// same std::partition and std::sort over the same sequences as the CPU's,
// so ties (size-1 dims) fall alike.
Tensor empty_as_cpu(const Tensor& in, c10::IntArrayRef sizes, std::vector<int64_t> dims,
                    bool keep_last, const at::TensorOptions& options) {
  const c10::IntArrayRef st = in.strides();
  const auto by_stride = [&](int64_t a, int64_t b) { return st[a] > st[b]; };
  std::sort(dims.begin(), dims.end() - (keep_last && !dims.empty() ? 1 : 0), by_stride);
  const int64_t ndim = in.dim();
  std::vector<int64_t> perm(ndim);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::vector<bool> transformed(ndim, false);
  for (int64_t d : dims) transformed[d] = true;
  const auto batch_end =
      std::partition(perm.begin(), perm.end(), [&](int64_t d) { return !transformed[d]; });
  std::sort(perm.begin(), batch_end, by_stride);
  std::copy(dims.begin(), dims.end(), batch_end);
  const int64_t batch_dims = batch_end - perm.begin();
  std::vector<int64_t> strides(ndim);
  int64_t s = 1;  // the signal dims contiguous, then the batch dims over them
  for (int64_t i = ndim - 1; i >= batch_dims; --i) {
    strides[perm[i]] = s;
    s *= std::max<int64_t>(sizes[perm[i]], 1);
  }
  for (int64_t i = batch_dims - 1; i >= 0; --i) {
    strides[perm[i]] = s;
    s *= sizes[perm[i]];
  }
  return at::empty_strided(sizes, strides, options);
}

Tensor fft_c2c(const Tensor& self_in, c10::SymIntArrayRef dim_sym, int64_t normalization,
               bool forward) {
  check_input(self_in, true, "_fft_c2c");
  const Tensor self = self_in.resolve_conj().resolve_neg();
  std::vector<int64_t> dim_raw;
  for (const auto& d : dim_sym) dim_raw.push_back(d.expect_int());
  const auto dims = wrap_dims(dim_raw, self.dim(), "_fft_c2c");
  Tensor out = empty_as_cpu(self, self.sizes(), dims, false, self.options());
  if (dims.empty()) return out.copy_(self);
  int64_t signal = 1;
  for (int64_t d : dims) signal *= self.size(d);
  c2c_passes(out, self, dims, forward ? -1 : 1, norm_scale(normalization, signal));
  return out;
}

Tensor fft_r2c(const Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided) {
  check_input(self, false, "_fft_r2c");
  const auto dims = wrap_dims(dim, self.dim(), "_fft_r2c");
  const at::ScalarType ctype = self.scalar_type() == at::kFloat ? at::kComplexFloat
                                                                : at::kComplexDouble;
  TORCH_CHECK(!dims.empty(), "_fft_r2c: at least one dim is transformed");
  int64_t signal = 1;
  for (int64_t d : dims) signal *= self.size(d);
  const double scale = norm_scale(normalization, signal);
  const int64_t last = dims.back(), n = self.size(last);
  std::vector<int64_t> sizes = self.sizes().vec();
  if (onesided) sizes[last] = n / 2 + 1;
  Tensor out = empty_as_cpu(self, sizes, dims, true, self.options().dtype(ctype));
  if (!onesided) {  // the whole spectrum: a c2c transform of the signal made complex
    if (out.numel() > 0) c2c_passes(out, self.to(ctype), dims, -1, scale);
    return out;
  }
  if (out.numel() == 0) return out;
  checked_length(n, "_fft_r2c");
  const int64_t nd = self.dim();
  if (dims.size() == 2 && dims[0] == nd - 2 && dims[1] == nd - 1 &&
      r2c_2d_panels(out, self, n, scale))
    return out;
  pass("_fft_r2c", LOOM_KERNEL("fft.r2c"), out, self, last, n, -1,
       dims.size() == 1 ? scale : 1.0);
  c2c_passes(out, out, c10::ArrayRef<int64_t>(dims).slice(0, dims.size() - 1), -1, scale);
  return out;
}

Tensor fft_c2r(const Tensor& self_in, c10::IntArrayRef dim, int64_t normalization,
               c10::SymInt last_dim_size) {
  check_input(self_in, true, "_fft_c2r");
  const Tensor self = self_in.resolve_conj().resolve_neg();
  const auto dims = wrap_dims(dim, self.dim(), "_fft_c2r");
  TORCH_CHECK(!dims.empty(), "_fft_c2r: at least one dim is transformed");
  const int64_t last = dims.back(), n = checked_length(last_dim_size.expect_int(), "_fft_c2r");
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[last] = n;
  // The CPU's layout: the c2c over the other dims first (as its own
  // transform), then the c2r of the last over that.
  const std::vector<int64_t> others(dims.begin(), dims.end() - 1);
  Tensor half = others.empty() ? self : empty_as_cpu(self, self.sizes(), others, false,
                                                     self.options());
  Tensor out = empty_as_cpu(half, sizes, {last}, false,
                            self.options().dtype(c10::toRealValueType(self.scalar_type())));
  int64_t signal = 1;
  for (int64_t d : dims) signal *= out.size(d);
  if (out.numel() == 0) return out;
  const double scale = norm_scale(normalization, signal);
  if (!others.empty()) c2c_passes(half, self, others, 1, 1.0);
  pass("_fft_c2r", LOOM_KERNEL("fft.c2r"), out, half, last, n, 1, scale);
  return out;
}

Tensor& fft_c2c_out(const Tensor& self, c10::SymIntArrayRef dim, int64_t normalization,
                    bool forward, Tensor& out) {
  return copy_to_out(out, fft_c2c(self, dim, normalization, forward), "_fft_c2c_out");
}

Tensor& fft_r2c_out(const Tensor& self, c10::IntArrayRef dim, int64_t normalization,
                    bool onesided, Tensor& out) {
  return copy_to_out(out, fft_r2c(self, dim, normalization, onesided), "_fft_r2c_out");
}

Tensor& fft_c2r_out(const Tensor& self, c10::IntArrayRef dim, int64_t normalization,
                    c10::SymInt last_dim_size, Tensor& out) {
  return copy_to_out(out, fft_c2r(self, dim, normalization, std::move(last_dim_size)),
                     "_fft_c2r_out");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_fft_c2c", fft_c2c);
  LOOM_IMPL(m, "_fft_c2c.out", fft_c2c_out);
  LOOM_IMPL(m, "_fft_r2c", fft_r2c);
  LOOM_IMPL(m, "_fft_r2c.out", fft_r2c_out);
  LOOM_IMPL(m, "_fft_c2r", fft_c2r);
  LOOM_IMPL(m, "_fft_c2r.out", fft_c2r_out);
}

}  // namespace torch_loom::fft
