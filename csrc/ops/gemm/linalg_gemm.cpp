// GEMM launch glue: the family's plan, the workspace, the launches it names.
#include "ops/gemm/linalg_gemm.h"

#include <ATen/Dispatch.h>
#include <c10/core/DeviceGuard.h>

#include <utility>

#include "loom/kernels/gemm.h"
#include "loom/kernels/gemv.h"

namespace torch_loom {

bool gemm_native_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool gemm_int_dtype(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt ||
         t == at::kLong || t == at::kBool;
}

int64_t gemm_int_scalar(const c10::Scalar& s, at::ScalarType t) {
  int64_t v = 0;
  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, t, "gemm_int_scalar",
                                 [&] { v = static_cast<int64_t>(s.to<scalar_t>()); });
  return v;
}

void gemm_run_int(const char* op, const at::Tensor& c_owner, loom_tensor c,
                  loom_tensor a, loom_tensor b, const loom_tensor* cin,
                  int64_t alpha, int64_t beta) {
  const bool has_cin = cin != nullptr && beta != 0;
  c10::DeviceGuard guard(c_owner.device());
  const int64_t rows = c.sizes[0] * c.sizes[1] * c.sizes[2];
  if (rows == 0 || c.sizes[3] == 0) return;
  const loom_tensor tensors[4] = {c, a, b, has_cin ? *cin : loom_tensor{}};
  const loom_scalar scalars[2] = {scalar_i(alpha), scalar_i(beta)};
  const int64_t work = std::max<int64_t>(1, c.sizes[3] * a.sizes[3]);
  launch(op, LOOM_KERNEL("gemm.int"), c10::ArrayRef<loom_tensor>(tensors, has_cin ? 4 : 3),
         scalars, rows, std::max<int64_t>(1, 65536 / work), -1, LaunchInfo{gemm_flops(c, a)});
}

loom_tensor gemm_view(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.dim() <= 4, op, ": expected at most 4 dims, got ", t.dim());
  loom_tensor d = describe(t, op);
  loom_tensor r = d;
  int shift = 4 - d.rank;
  for (int i = 0; i < 4; ++i) {
    r.sizes[i] = i < shift ? 1 : d.sizes[i - shift];
    r.strides[i] = i < shift ? 0 : d.strides[i - shift];
  }
  r.rank = 4;
  return r;
}

loom_tensor gemm_transpose(loom_tensor d) {
  std::swap(d.sizes[2], d.sizes[3]);
  std::swap(d.strides[2], d.strides[3]);
  return d;
}

loom_tensor gemm_broadcast(loom_tensor d, const int64_t sizes[4]) {
  for (int i = 0; i < 4; ++i) {
    if (d.sizes[i] == 1 && sizes[i] != 1) d.strides[i] = 0;
    d.sizes[i] = sizes[i];
  }
  return d;
}

uint64_t gemm_flops(const loom_tensor& c, const loom_tensor& a) {
  return 2 * static_cast<uint64_t>(loom_tensor_numel(&c)) * static_cast<uint64_t>(a.sizes[3]);
}

namespace {

int64_t math_request(GemmMath math) {
  switch (math) {
    case GemmMath::bf16: return LOOM_GEMM_MATH_BF16;
    case GemmMath::bf16x3: return LOOM_GEMM_MATH_BF16X3;
    default: return LOOM_GEMM_MATH_EXACT;
  }
}

}  // namespace

GemmMath matmul_math(at::ScalarType operands) {
  if (operands != at::kFloat) return GemmMath::exact;
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::MEDIUM: return GemmMath::bf16;
    case at::Float32MatmulPrecision::HIGH: return GemmMath::bf16x3;
    default: return GemmMath::exact;
  }
}

void gemm_run(const char* op, const at::Tensor& c_owner, loom_tensor c,
              loom_tensor a, loom_tensor b, const loom_tensor* cin,
              double alpha, double beta, GemmMath math) {
  const bool has_cin = cin != nullptr && beta != 0.0;
  loom_tensor cin_v = has_cin ? *cin : loom_tensor{};
  const LaunchInfo product{gemm_flops(c, a)};
  if (c.dtype == LOOM_FLOAT64) {  // unplanned: a row of C per item
    c10::DeviceGuard guard(c_owner.device());
    const int64_t rows = c.sizes[0] * c.sizes[1] * c.sizes[2];
    if (rows == 0 || c.sizes[3] == 0) return;
    const loom_tensor tensors[4] = {c, a, b, cin_v};
    const loom_scalar scalars[2] = {scalar_f(alpha), scalar_f(beta)};
    const int64_t work = std::max<int64_t>(1, c.sizes[3] * a.sizes[3]);
    launch(op, LOOM_KERNEL("gemm.f64"), c10::ArrayRef<loom_tensor>(tensors, has_cin ? 4 : 3),
           scalars, rows, std::max<int64_t>(1, 65536 / work), -1, product);
    return;
  }
  const loom_tensor operands[3] = {c, a, b};
  const loom_scalar request[2] = {scalar_i(math_request(math)),
                                  scalar_i(device_workers(c_owner))};
  const auto gp = plan<loom_gemm_plan>(op, LOOM_KERNEL("gemm.plan"), operands, request);
  if (gp.transposed) {
    const loom_tensor at = gemm_transpose(b), bt = gemm_transpose(a);
    a = at, b = bt, c = gemm_transpose(c);
    if (has_cin) cin_v = gemm_transpose(cin_v);
  }
  c10::DeviceGuard guard(c_owner.device());
  if (gp.route == LOOM_GEMM_ROUTE_GEMV) {
    if (gp.compute_range == 0) return;
    const loom_tensor tensors[4] = {c, a, b, cin_v};
    const loom_scalar scalars[2] = {scalar_f(alpha), scalar_f(beta)};
    launch(op, LOOM_KERNEL("gemv.compute"),
           c10::ArrayRef<loom_tensor>(tensors, has_cin ? 4 : 3), scalars,
           gp.compute_range, gp.compute_grain, -1, product);
    return;
  }
  if (gp.pack_range == 0 && gp.compute_range == 0) return;
  at::Tensor ws = at::empty({std::max<int64_t>(gp.workspace_bytes, 1)},
                            c_owner.options().dtype(at::kByte));
  const loom_tensor w = describe(ws, op);
  for (int32_t pass = 0; pass < gp.passes; ++pass) {
    // passes after the first add to C
    const bool add = pass > 0;
    const loom_tensor tensors[5] = {c, a, b, w, add ? c : cin_v};
    const loom_scalar scalars[3] = {scalar_i(gp.pass_variant[pass]), scalar_f(alpha),
                                    scalar_f(add ? 1.0 : beta)};
    const size_t nt = add || has_cin ? 5 : 4;
    launch(op, LOOM_KERNEL("gemm.pack"), c10::ArrayRef<loom_tensor>(tensors, nt),
           scalars, gp.pack_range, gp.pack_grain);
    // Each pass computes the whole product (of other parts of A and B).
    launch(op, LOOM_KERNEL("gemm.compute"), c10::ArrayRef<loom_tensor>(tensors, nt),
           scalars, gp.compute_range, gp.compute_grain, -1, product);
  }
}

}  // namespace torch_loom
