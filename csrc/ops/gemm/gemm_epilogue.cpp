// loom::mm_epilogue: a matrix product whose output tiles go through
// elementwise steps (bias, activation, residual add, cast) while they are
// in cache, for the compiler's fused linear layers. The steps are the
// kernel contract's words (loom/kernels/gemm_epilogue.h); the result is
// bitwise what mm/addmm followed by the pointwise ops gives.
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include "common.h"
#include "loom/kernels/gemm.h"
#include "loom/kernels/gemm_epilogue.h"
#include "ops/gemm/linalg_gemm.h"
#include "register.h"

namespace torch_loom {
namespace {

using at::Tensor;

constexpr const char* kOp = "loom::mm_epilogue";

// A launch's descriptors and scalars, on the stack for the usual counts
// (the product's five tensors, the output, an operand or two; up to
// LOOM_GEMM_EPILOGUE_MAX_STEPS step words): no heap allocation per call.
using Descriptors = c10::SmallVector<loom_tensor, 8>;
using Scalars = c10::SmallVector<loom_scalar, 4 + LOOM_GEMM_EPILOGUE_MAX_STEPS>;

int64_t gemm_math_request(GemmMath math) {
  switch (math) {
    case GemmMath::bf16: return LOOM_GEMM_MATH_BF16;
    case GemmMath::bf16x3: return LOOM_GEMM_MATH_BF16X3;
    default: return LOOM_GEMM_MATH_EXACT;
  }
}

// C = A @ B (+ Cin), then the steps from C into D, as one launch per pass
// (the last pass's compute launch runs the epilogue), or the GEMV and the
// epilogue over C's rows.
void run(const Tensor& c_owner, loom_tensor c, loom_tensor a, loom_tensor b,
         const loom_tensor* cin, loom_tensor d, Descriptors operands,
         c10::ArrayRef<int64_t> steps, GemmMath math) {
  const loom_tensor product[3] = {c, a, b};
  const loom_scalar request[2] = {scalar_i(gemm_math_request(math)),
                                  scalar_i(device_workers(c_owner))};
  const auto gp = plan<loom_gemm_plan>(kOp, LOOM_KERNEL("gemm.plan"), product, request);
  const double beta = cin != nullptr ? 1.0 : 0.0;
  if (gp.route == LOOM_GEMM_ROUTE_GEMV || (gp.pack_range == 0 && gp.compute_range == 0)) {
    gemm_run(kOp, c_owner, c, a, b, cin, 1.0, beta, math);
    Descriptors tensors = {c, d};
    tensors.append(operands.begin(), operands.end());
    Scalars scalars = {scalar_i(static_cast<int64_t>(steps.size()))};
    for (int64_t w : steps) scalars.push_back(scalar_i(w));
    const int64_t rows = c.sizes[0] * c.sizes[1] * c.sizes[2];
    if (rows > 0 && c.sizes[3] > 0)
      launch(kOp, LOOM_KERNEL("gemm.epilogue"), tensors, scalars, rows,
             std::max<int64_t>(1, 65536 / std::max<int64_t>(1, c.sizes[3])));
    return;
  }
  loom_tensor cin_v = cin != nullptr ? *cin : c;
  if (gp.transposed) {
    const loom_tensor at = gemm_transpose(b), bt = gemm_transpose(a);
    a = at, b = bt, c = gemm_transpose(c), d = gemm_transpose(d);
    cin_v = gemm_transpose(cin_v);
    for (loom_tensor& o : operands) o = gemm_transpose(o);
  }
  Tensor ws = at::empty({std::max<int64_t>(gp.workspace_bytes, 1)},
                        c_owner.options().dtype(at::kByte));
  const loom_tensor w = describe(ws, kOp);
  const LaunchInfo info{gemm_flops(c, a)};
  for (int32_t pass = 0; pass < gp.passes; ++pass) {
    const bool add = pass > 0, last = pass + 1 == gp.passes;
    Descriptors tensors = {c, a, b, w, add ? c : cin_v};
    Scalars scalars = {scalar_i(gp.pass_variant[pass]), scalar_f(1.0),
                       scalar_f(add ? 1.0 : beta)};
    const size_t nt = add || cin != nullptr ? 5 : 4;
    launch(kOp, LOOM_KERNEL("gemm.pack"), c10::ArrayRef<loom_tensor>(tensors.data(), nt),
           scalars, gp.pack_range, gp.pack_grain);
    if (!last) {
      launch(kOp, LOOM_KERNEL("gemm.compute"), c10::ArrayRef<loom_tensor>(tensors.data(), nt),
             scalars, gp.compute_range, gp.compute_grain, -1, info);
      continue;
    }
    tensors.push_back(d);
    tensors.append(operands.begin(), operands.end());
    scalars.push_back(scalar_i(static_cast<int64_t>(steps.size())));
    for (int64_t s : steps) scalars.push_back(scalar_i(s));
    launch(kOp, LOOM_KERNEL("gemm.compute_epilogue"), tensors, scalars, gp.compute_range,
           gp.compute_grain, -1, info);
  }
}

// A contiguous operand of the result's shape as the [m, n] rank-4 view the
// kernel reads (what o.reshape(mn) describes, without the tensor op).
loom_tensor rows_view(const Tensor& o, const std::vector<int64_t>& mn) {
  loom_tensor d = describe(o, kOp);
  d.rank = 4;
  const int64_t sizes[4] = {1, 1, mn[0], mn[1]}, strides[4] = {0, 0, mn[1], 1};
  for (int i = 0; i < 4; ++i) d.sizes[i] = sizes[i], d.strides[i] = strides[i];
  return d;
}

// Whether `t` (at most 2 dims) broadcasts to [m, n] as expand would take it.
bool broadcasts_to(const Tensor& t, const std::vector<int64_t>& mn) {
  if (t.dim() > 2) return false;
  for (int64_t i = 1; i <= t.dim(); ++i) {
    const int64_t s = t.size(-i), want = mn[2 - i];
    if (s != 1 && s != want) return false;
  }
  return true;
}

// The arguments' checks, shared by the op and its shape function; returns
// the product's [m, n].
std::vector<int64_t> check_args(const Tensor& self, const Tensor& mat2, at::IntArrayRef steps,
                                at::ScalarType out_dtype, at::IntArrayRef shape) {
  TORCH_CHECK(self.dim() == 2 && mat2.dim() == 2 && self.size(1) == mat2.size(0), kOp,
              ": expected [m, k] and [k, n] matrices, got ", self.sizes(), " and ",
              mat2.sizes());
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type() && gemm_native_dtype(self.scalar_type()),
              kOp, ": operands must share a float dtype (float32, bfloat16, float16), got ",
              self.scalar_type(), " and ", mat2.scalar_type());
  TORCH_CHECK(gemm_native_dtype(out_dtype), kOp, ": out_dtype must be a float dtype, got ",
              out_dtype);
  TORCH_CHECK(static_cast<int64_t>(steps.size()) <= LOOM_GEMM_EPILOGUE_MAX_STEPS, kOp,
              ": at most ", static_cast<int>(LOOM_GEMM_EPILOGUE_MAX_STEPS), " steps, got ",
              steps.size());
  const std::vector<int64_t> mn = {self.size(0), mat2.size(1)};
  TORCH_CHECK(!shape.empty() && shape.back() == mn[1] && c10::multiply_integers(shape) == mn[0] * mn[1],
              kOp, ": shape ", shape, " does not split the rows of the ", mn, " product");
  return mn;
}

// self [m, k] @ mat2 [k, n] (+ bias broadcast to [m, n], as addmm with
// beta = alpha = 1), then `steps` over `operands`, each broadcast to
// `shape` (the product's shape, or its rows split into leading dims); the
// result in `out_dtype` and `shape`. Returns [D], or [C, D] when the
// product itself is wanted too.
std::vector<Tensor> mm_epilogue(const Tensor& self, const Tensor& mat2,
                                const std::optional<Tensor>& bias, at::IntArrayRef steps,
                                at::TensorList operands, at::ScalarType out_dtype,
                                bool keep_product, at::IntArrayRef shape) {
  const std::vector<int64_t> mn = check_args(self, mat2, steps, out_dtype, shape);
  c10::DeviceGuard guard(self.device());
  Tensor c = at::empty(mn, self.options());
  const bool in_place = !keep_product && out_dtype == self.scalar_type();
  Tensor d = in_place ? c : at::empty(mn, self.options().dtype(out_dtype));
  Descriptors views;
  std::vector<Tensor> expanded;  // operands that take a copy to be [m, n]
  for (const Tensor& o : operands) {
    TORCH_CHECK(gemm_native_dtype(o.scalar_type()), kOp,
                ": epilogue operands must be float tensors, got ", o.scalar_type());
    if (o.sizes() == shape && o.is_contiguous()) {
      views.push_back(rows_view(o, mn));  // the usual case: no tensor op
      continue;
    }
    expanded.push_back(o.expand(shape).reshape(mn));
    views.push_back(gemm_view(expanded.back(), kOp));
  }
  Tensor bias_e;
  loom_tensor cin;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == self.scalar_type(), kOp,
                ": bias must have the operands' dtype, got ", bias->scalar_type());
    if (broadcasts_to(*bias, mn)) {
      const int64_t sizes[4] = {1, 1, mn[0], mn[1]};
      cin = gemm_broadcast(gemm_view(*bias, kOp), sizes);
    } else {
      bias_e = bias->expand(mn);  // raises as expand does
      cin = gemm_view(bias_e, kOp);
    }
  }
  run(c, gemm_view(c, kOp), gemm_view(self, kOp), gemm_view(mat2, kOp),
      bias.has_value() && bias->defined() ? &cin : nullptr, gemm_view(d, kOp), std::move(views),
      steps, matmul_math(self.scalar_type()));
  Tensor out = shape.size() == 2 ? d : d.view(shape);
  if (keep_product) return {c, out};
  return {out};
}

// The shape function (Meta, and so fake tensors: graphs that trace the op,
// as Inductor's post-grad pass inserts it, see its outputs' sizes).
std::vector<Tensor> mm_epilogue_meta(const Tensor& self, const Tensor& mat2,
                                     const std::optional<Tensor>& /*bias*/, at::IntArrayRef steps,
                                     at::TensorList /*operands*/, at::ScalarType out_dtype,
                                     bool keep_product, at::IntArrayRef shape) {
  const std::vector<int64_t> mn = check_args(self, mat2, steps, out_dtype, shape);
  Tensor out = at::empty(shape, self.options().dtype(out_dtype));
  if (keep_product) return {at::empty(mn, self.options()), out};
  return {out};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("mm_epilogue(Tensor self, Tensor mat2, Tensor? bias, int[] steps, Tensor[] operands, "
        "ScalarType out_dtype, bool keep_product, int[] shape) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(loom, PrivateUse1, m) {
  LOOM_IMPL(m, "mm_epilogue", mm_epilogue);
}

TORCH_LIBRARY_IMPL(loom, Meta, m) {
  m.impl("mm_epilogue", &mm_epilogue_meta);
}

}  // namespace torch_loom
