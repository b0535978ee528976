// Random ops drawn on the device from the loom generator (Philox): the
// output depends only on the seed, the generator's offset and the element
// index, so it is reproducible and independent of the thread count.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/Generator.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "common.h"
#include "loom/graph.h"
#include "runtime/generator.h"
#include "loom/kernels/random.h"
#include "register.h"

namespace torch_loom {
namespace {

// Launches `kernel` over `out` with (seed, offset, params...) after reserving
// numel(out) counters of the generator. While the current stream captures a
// graph, the launch instead carries the generator's state cell as its last
// tensor and its offset within the graph (loom/kernels/random.h): each
// replay then draws from the generator's state at that replay.
void draw(const char* name, const loom_kernel_t* kernel, const at::Tensor& out,
          std::optional<at::Generator> gen,
          std::initializer_list<loom_scalar> params,
          const at::Tensor* p = nullptr) {
  if (out.numel() == 0) return;
  c10::DeviceGuard guard(out.device());
  auto* g = at::get_generator_or_default<LoomGenerator>(
      gen, default_generator(out.device().index()));
  loom_scalar s[6];
  at::Tensor cell;  // during a capture: the generator's state cell
  const bool captured = loom_stream_is_capturing(current_stream(out.device().index())) != 0;
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    if (captured) {
      s[0].u = 0;
      cell = g->reserve_captured(static_cast<uint64_t>(out.numel()), &s[1].u, name);
    } else {
      s[0].u = g->current_seed();
      s[1].u = g->reserve(static_cast<uint64_t>(out.numel()));
    }
  }
  size_t n = 2;
  for (loom_scalar v : params) s[n++] = v;
  loom_tensor t[3];
  t[0] = describe(out, name);
  uint32_t nt = 1;
  if (p) t[nt++] = describe(*p, name);
  if (cell.defined()) t[nt++] = describe(cell, name);
  launch(name, kernel, {t, nt}, {s, n}, out.numel(), LOOM_RANDOM_GRAIN);
}

// Complex tensors draw their real and imaginary parts independently.
at::Tensor real_view(const at::Tensor& self) {
  return self.is_complex() ? at::view_as_real(self) : self;
}

void check_floating(const at::Tensor& self, const char* op) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || self.is_complex(),
              op, " expects a floating point tensor, but got ",
              self.scalar_type());
}

at::Tensor& uniform_(at::Tensor& self, double from, double to,
                     std::optional<at::Generator> gen) {
  check_floating(self, "uniform_");
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, "
              "but found from=", from, " > to=", to);
  draw("uniform_", LOOM_KERNEL("random.uniform"), real_view(self), gen,
       {scalar_f(from), scalar_f(to)});
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std,
                    std::optional<at::Generator> gen) {
  check_floating(self, "normal_");
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  if (self.is_complex()) std /= std::sqrt(2.0);  // as CPU: unit total variance
  draw("normal_", LOOM_KERNEL("random.normal"), real_view(self), gen,
       {scalar_f(mean), scalar_f(std)});
  return self;
}

at::Tensor& exponential_(at::Tensor& self, double lambd,
                         std::optional<at::Generator> gen) {
  check_floating(self, "exponential_");
  TORCH_CHECK(lambd > 0.0 && !std::isinf(lambd) && !std::isnan(lambd),
              "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  draw("exponential_", LOOM_KERNEL("random.exponential"), real_view(self), gen,
       {scalar_f(lambd)});
  return self;
}

// Largest value random_ draws for a dtype when no bound is given: the
// largest integer the type represents exactly (floating) or its maximum.
int64_t default_upper(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return int64_t{1} << 24;
    case at::kDouble: return int64_t{1} << 53;
    case at::kHalf: return int64_t{1} << 11;
    case at::kBFloat16: return int64_t{1} << 8;
    case at::kBool: return 1;
    case at::kByte: return 255;
    case at::kChar: return 127;
    case at::kShort: return 32767;
    case at::kInt: return 2147483647;
    case at::kLong: return std::numeric_limits<int64_t>::max();
    default:
      TORCH_CHECK_TYPE(false, "random_ is not supported for dtype ", type);
  }
}

// Draws integers in [from, to_inclusive].
at::Tensor& random_inclusive(at::Tensor& self, int64_t from, int64_t to_inclusive,
                             std::optional<at::Generator> gen) {
  TORCH_CHECK(!self.is_complex(), "random_ is not supported for complex tensors");
  uint64_t range = static_cast<uint64_t>(to_inclusive) -
                   static_cast<uint64_t>(from) + 1;  // 0: all 2^64 values
  loom_scalar r;
  r.u = range;
  draw("random_", LOOM_KERNEL("random.integers"), self, gen, {scalar_i(from), r});
  return self;
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_inclusive(self, 0, default_upper(self.scalar_type()), gen);
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  if (to) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', "
                "but got from=", from, " >= to=", *to);
    return random_inclusive(self, from, *to - 1, gen);
  }
  int64_t upper = default_upper(self.scalar_type());
  TORCH_CHECK(from <= upper, "random_ expects 'from' casted to dtype to be "
              "less than or equal to 'to' casted to dtype, but got from=",
              from, " > to=", upper);
  return random_inclusive(self, from, upper, gen);
}

at::Tensor& random_to(at::Tensor& self, int64_t to,
                      std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}

at::Tensor& bernoulli_float(at::Tensor& self, double p,
                            std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  TORCH_CHECK(!self.is_complex(), "bernoulli_ is not supported for complex tensors");
  draw("bernoulli_", LOOM_KERNEL("random.bernoulli"), self, gen, {scalar_f(p)});
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p_in,
                             std::optional<at::Generator> gen) {
  TORCH_CHECK(!self.is_complex(), "bernoulli_ is not supported for complex tensors");
  TORCH_CHECK(at::isFloatingType(p_in.scalar_type()),
              "bernoulli_: expected a floating point probability tensor, got ",
              p_in.scalar_type());
  at::Tensor p = p_in.to(self.device()).expand(self.sizes());
  draw("bernoulli_", LOOM_KERNEL("random.bernoulli_tensor"), self, gen, {}, &p);
  return self;
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input,
                                                  double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0) {
    return {input, at::empty_like(input, input.options().dtype(at::kBool))};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  double keep = 1.0 - p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool),
                                   at::MemoryFormat::Contiguous);
  bernoulli_float(mask, keep, std::nullopt);
  at::Tensor output = input.mul(mask).mul_(scale);
  return {output, mask};
}

// torch.normal with tensor arguments: standard normal draws, scaled and
// shifted on the device.
at::Tensor normal_tensor_float(const at::Tensor& mean, double std,
                               std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  at::Tensor out = at::empty_like(mean, at::MemoryFormat::Contiguous);
  normal_(out, 0.0, std, gen);
  return out.add_(mean);
}

at::Tensor normal_float_tensor(double mean, const at::Tensor& std,
                               std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(std, at::MemoryFormat::Contiguous);
  normal_(out, 0.0, 1.0, gen);
  return out.mul_(std).add_(mean);
}

at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std,
                                std::optional<at::Generator> gen) {
  at::Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()),
                             mean.options().dtype(at::result_type(mean, std)));
  normal_(out, 0.0, 1.0, gen);
  return out.mul_(std).add_(mean);
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask,
                                   double scale) {
  // As on the CPU, integer gradients times the float scale give floats.
  at::Tensor kept = grad.mul(mask);
  if (at::isFloatingType(kept.scalar_type())) return kept.mul_(scale);
  return kept.mul(scale);
}

// The out= forms of normal with tensor arguments.
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std,
                                    std::optional<at::Generator> gen, at::Tensor& out) {
  return copy_to_out(out, normal_tensor_float(mean, std, gen), "normal");
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std,
                                    std::optional<at::Generator> gen, at::Tensor& out) {
  return copy_to_out(out, normal_float_tensor(mean, std, gen), "normal");
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std,
                                     std::optional<at::Generator> gen, at::Tensor& out) {
  return copy_to_out(out, normal_tensor_tensor(mean, std, gen), "normal");
}

// geometric_: the number of Bernoulli(p) trials to the first success,
// ceil(log(1 - u) / log(1 - p)) for u ~ U[0, 1).
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  if (self.numel() == 0) return self;
  at::Tensor u = at::empty(self.sizes(), self.options().dtype(at::kDouble)).uniform_(0, 1, gen);
  return self.copy_(at::ceil(at::log1p(-u) / std::log1p(-p)));
}

// log_normal_: exp of normal samples.
at::Tensor& log_normal_(at::Tensor& self, double mean, double std,
                        std::optional<at::Generator> gen) {
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  check_floating(self, "log_normal_");
  return normal_(self, mean, std, gen).exp_();
}

// multinomial: without replacement (or for one sample) the CPU's
// exponential race, argmax / topk of p / q with q ~ Exp(1); with
// replacement, the first category whose normalised cumulative probability
// exceeds u ~ U[0, 1).
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(),
              "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ",
              result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= n,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n <= int64_t{1} << 24, "number of categories cannot exceed 2^24");
  if (self.dim() == 1) result.resize_({n_sample});
  else result.resize_({self.size(0), n_sample});
  if (result.numel() == 0) return result;
  // One read from the device for both checks.
  at::Tensor sums = self.sum(-1);
  at::Tensor flags = at::stack({((self.max() < INFINITY) & (self.min() >= 0)).to(at::kLong),
                                (sums == 0).any().to(at::kLong)}).cpu();
  TORCH_CHECK(flags[0].item<int64_t>(),
              "probability tensor contains either `inf`, `nan` or element < 0");
  TORCH_CHECK(!flags[1].item<int64_t>(),
              "invalid multinomial distribution (sum of probabilities <= 0)");
  if (!replacement || n_sample == 1) {
    at::Tensor q = self / at::empty(self.sizes(), self.options()).exponential_(1, gen);
    if (n_sample == 1) return at::argmax_out(result, q, -1, /*keepdim=*/true);
    at::Tensor values = at::empty(result.sizes(), self.options());
    at::topk_out(values, result, q, n_sample);
    return result;
  }
  at::Tensor cdf = self.to(at::kDouble).cumsum(-1);
  cdf = cdf / cdf.narrow(-1, n - 1, 1);  // the last is exactly 1
  at::Tensor u = at::empty(result.sizes(), cdf.options()).uniform_(0, 1, gen);
  at::searchsorted_out(result, cdf, u, /*out_int32=*/false, /*right=*/true);
  return result.clamp_max_(n - 1);
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement,
                       std::optional<at::Generator> gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out(self, n_sample, replacement, gen, result);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "multinomial", multinomial);
  LOOM_IMPL(m, "normal.Tensor_float_out", normal_tensor_float_out);
  LOOM_IMPL(m, "normal.float_Tensor_out", normal_float_tensor_out);
  LOOM_IMPL(m, "normal.Tensor_Tensor_out", normal_tensor_tensor_out);
  LOOM_IMPL(m, "geometric_", geometric_);
  LOOM_IMPL(m, "log_normal_", log_normal_);
  LOOM_IMPL(m, "multinomial.out", multinomial_out);
  LOOM_IMPL(m, "uniform_", uniform_);
  LOOM_IMPL(m, "normal_", normal_);
  LOOM_IMPL(m, "exponential_", exponential_);
  LOOM_IMPL(m, "random_", random_);
  LOOM_IMPL(m, "random_.from", random_from);
  LOOM_IMPL(m, "random_.to", random_to);
  LOOM_IMPL(m, "bernoulli_.float", bernoulli_float);
  LOOM_IMPL(m, "bernoulli_.Tensor", bernoulli_tensor);
  LOOM_IMPL(m, "native_dropout", native_dropout);
  LOOM_IMPL(m, "native_dropout_backward", native_dropout_backward);
  LOOM_IMPL(m, "normal.Tensor_float", normal_tensor_float);
  LOOM_IMPL(m, "normal.float_Tensor", normal_float_tensor);
  LOOM_IMPL(m, "normal.Tensor_Tensor", normal_tensor_tensor);
}

}  // namespace torch_loom
