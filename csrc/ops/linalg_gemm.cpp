// GEMM launch glue: plan, workspace, the two launches.
#include "ops/linalg_gemm.h"

#include <c10/core/DeviceGuard.h>

#include <utility>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"

namespace torch_loom {

bool gemm_native_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
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

namespace {

// Wasted work of a register tile over an m x n result: padded area.
int64_t padded_area(int64_t m, int64_t n, int64_t mr, int64_t nr) {
  return (m + mr - 1) / mr * mr * ((n + nr - 1) / nr * nr);
}

}  // namespace

GemmMath matmul_math(at::ScalarType operands) {
  if (operands != at::kFloat || loom_gemm_isa_selected() != LOOM_GEMM_AMX) return GemmMath::exact;
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::MEDIUM: return GemmMath::bf16;
    case at::Float32MatmulPrecision::HIGH: return GemmMath::bf16x3;
    default: return GemmMath::exact;
  }
}

void gemm_run(const char* op, const at::Tensor& c_owner, loom_tensor c,
              loom_tensor a, loom_tensor b, const loom_tensor* cin,
              double alpha, double beta, GemmMath math) {
  loom_gemm_isa isa = loom_gemm_isa_selected();
  loom_tensor cin_v{};
  bool has_cin = cin != nullptr && beta != 0.0;
  if (has_cin) cin_v = *cin;
  // A single result column (or row, transposed into one): a matrix-vector
  // product, which a register tile would mostly spend on padding.
  if (c.sizes[3] == 1 || c.sizes[2] == 1) {
    if (c.sizes[3] != 1) {
      loom_tensor at = gemm_transpose(b), bt = gemm_transpose(a);
      a = at, b = bt, c = gemm_transpose(c);
      if (has_cin) cin_v = gemm_transpose(cin_v);
    }
    int64_t units = c.sizes[0] * c.sizes[1] * ((c.sizes[2] + LOOM_GEMV_ROWS - 1) / LOOM_GEMV_ROWS);
    if (units == 0) return;
    c10::DeviceGuard guard(c_owner.device());
    loom_tensor tensors[4] = {c, a, b, cin_v};
    loom_scalar scalars[2] = {scalar_f(alpha), scalar_f(beta)};
    launch(op, loom_gemv_kernel, c10::ArrayRef<loom_tensor>(tensors, has_cin ? 4 : 3), scalars,
           units, 1);
    return;
  }
  // C^T = B^T A^T when C is column-major (no fp32 accumulator needed) or
  // when the transposed problem pads the register tile much less (thin C).
  int64_t m = c.sizes[2], n = c.sizes[3];
  bool col_major = n > 1 && c.strides[3] != 1 && (m == 1 || c.strides[2] == 1);
  bool swap = col_major;
  if (!swap && (m == 1 || c.strides[2] == 1)) {
    loom_gemm_plan p;
    if (loom_gemm_plan_init(&c, &a, &b, isa, &p) == 0 &&
        padded_area(n, m, p.mr, p.nr) * 2 < padded_area(m, n, p.mr, p.nr))
      swap = true;
  }
  if (swap) {
    loom_tensor at = gemm_transpose(b), bt = gemm_transpose(a);
    a = at, b = bt, c = gemm_transpose(c);
    if (has_cin) cin_v = gemm_transpose(cin_v);
  }
  // bf16x3: the products of the low parts with the high ones, then of the
  // high parts, each pass adding to C (small terms first)
  int32_t passes[3] = {0, 0, 0};
  int n_passes = 1;
  if (math == GemmMath::bf16 && a.dtype == LOOM_FLOAT32) {
    passes[0] = LOOM_GEMM_BF16_MATH;
  } else if (math == GemmMath::bf16x3 && a.dtype == LOOM_FLOAT32) {
    passes[0] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_A_LOW;
    passes[1] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_B_LOW;
    passes[2] = LOOM_GEMM_BF16_MATH;
    n_passes = 3;
  }
  c10::DeviceGuard guard(c_owner.device());
  for (int pass = 0; pass < n_passes; ++pass) {
    const int32_t isa_in_compute = isa | LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE |
                                   passes[pass] | LOOM_GEMM_WORKERS(device_workers(c_owner));
    loom_gemm_plan plan;
    int rc = loom_gemm_plan_init(&c, &a, &b, isa_in_compute, &plan);
    TORCH_CHECK(rc == 0, op, ": unsupported operands for the loom GEMM");
    if (plan.pack_range == 0 && plan.compute_range == 0) return;
    at::Tensor ws = at::empty({std::max<int64_t>(plan.workspace_bytes, 1)},
                              c_owner.options().dtype(at::kByte));
    loom_tensor w = describe(ws, op);
    // passes after the first add to C
    const bool add = pass > 0;
    loom_tensor tensors[5] = {c, a, b, w, add ? c : cin_v};
    loom_scalar scalars[3] = {scalar_i(isa_in_compute), scalar_f(alpha),
                              scalar_f(add ? 1.0 : beta)};
    size_t nt = add || has_cin ? 5 : 4;
    launch(op, loom_gemm_pack_kernel, c10::ArrayRef<loom_tensor>(tensors, nt),
           scalars, plan.pack_range, plan.pack_grain);
    launch(op, loom_gemm_compute_kernel, c10::ArrayRef<loom_tensor>(tensors, nt),
           scalars, plan.compute_range, plan.compute_grain);
  }
}

}  // namespace torch_loom
