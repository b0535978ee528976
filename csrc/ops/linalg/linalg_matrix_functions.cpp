// Functions of matrices built from loom's products and solves:
// linalg_matrix_exp (scaling and squaring with the degree-13 Padé
// approximant, Higham 2005) and linalg_lstsq (through the SVD).
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>

#include "ops/linalg/linalg_util.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::linalg {
namespace {

using at::Tensor;

// exp(A) for a batch (B, n, n): each matrix scaled by 2^-s so that its
// 1-norm is at most theta_13, the Padé approximant r = (V - U)^-1 (V + U),
// then s squarings (each matrix its own s; the batch squares as often as
// its largest s asks, the others keeping their result).
Tensor pade13_exp(const Tensor& a) {
  static const double b[14] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                               1187353796428800.0,  129060195264000.0,   10559470521600.0,
                               670442572800.0,      33522128640.0,       1323241920.0,
                               40840800.0,          960960.0,            16380.0,
                               182.0,               1.0};
  const double theta13 = 5.371920351148152;
  const int64_t n = a.size(-1);
  const Tensor norm = a.abs().sum(-2).amax(-1);
  const Tensor s = at::ceil(at::log2(norm / theta13)).clamp_min(0).nan_to_num(0, 0, 0);
  const int64_t squarings = a.size(0) ? s.max().item<double>() : 0;
  const Tensor x = a / at::exp2(s).view({-1, 1, 1});
  const Tensor eye = at::eye(n, a.options()).expand_as(a);
  const Tensor x2 = at::bmm(x, x), x4 = at::bmm(x2, x2), x6 = at::bmm(x4, x2);
  const Tensor u = at::bmm(x, at::bmm(x6, b[13] * x6 + b[11] * x4 + b[9] * x2) + b[7] * x6 +
                                  b[5] * x4 + b[3] * x2 + b[1] * eye);
  const Tensor v = at::bmm(x6, b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 +
                   b[2] * x2 + b[0] * eye;
  Tensor r = at::linalg_solve(v - u, v + u);
  for (int64_t i = 0; i < squarings; ++i)
    r = at::where((s > i).view({-1, 1, 1}), at::bmm(r, r), r);
  return r;
}

Tensor matrix_exp_loom(const Tensor& A) {
  Tensor m = at::linalg_matrix_exp(meta_like(A));   // PyTorch's checks
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::linalg_matrix_exp");
    return at::linalg_matrix_exp(A.cpu()).to(A.device());
  }
  if (A.numel() == 0) return at::empty(m.sizes(), A.options());
  if (A.size(-1) == 1) return A.exp();
  // float32 is computed in float64: squaring amplifies the approximant's
  // rounding, which float32 cannot absorb for matrices of large norm.
  const Tensor a = A.reshape({-1, A.size(-1), A.size(-1)}).to(at::kDouble);
  return pade13_exp(a).to(A.scalar_type()).view(A.sizes());
}

Tensor& matrix_exp_out(const Tensor& A, Tensor& out) {
  return copy_to_out(out, matrix_exp_loom(A), "linalg.matrix_exp");
}

// Least squares through the SVD, whichever driver is named: X = V S^+ U^T B
// with the singular values at most rcond * the largest dropped (the
// minimum-norm solution; for a full-rank A every driver's). The other
// results follow the driver as on the CPU: rank for gelsy, gelsd and gelss,
// singular values for gelsd and gelss, squared residuals when m > n, the
// driver is not gelsy and every matrix has full rank.
std::tuple<Tensor&, Tensor&, Tensor&, Tensor&> lstsq_out(
    const Tensor& A, const Tensor& B, std::optional<double> rcond,
    std::optional<c10::string_view> driver_name, Tensor& solution, Tensor& residuals,
    Tensor& rank, Tensor& singular_values) {
  static const char* op = "torch.linalg.lstsq";
  TORCH_CHECK(A.dim() >= 2, op, ": input must have at least 2 dimensions.");
  TORCH_CHECK(B.dim() >= 1, op, ": other must have at least 1 dimension.");
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), op, ": Expected input and other to have the "
              "same dtype, but got input's dtype ", A.scalar_type(), " and other's dtype ",
              B.scalar_type());
  const bool vector = A.dim() - 1 == B.dim();
  TORCH_CHECK(A.dim() >= B.dim() && (vector || A.dim() == B.dim()), op,
              ": input.dim() must be greater or equal to other.dim() and (input.dim() - "
              "other.dim()) <= 1");
  const std::string driver(driver_name.value_or("gelsy"));
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              op, ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  const Tensor b = vector ? B.unsqueeze(-1) : B;
  const int64_t m = A.size(-2), n = A.size(-1);
  TORCH_CHECK(b.size(-2) == m, op, ": input.size(-2) should match other.size(-",
              vector ? 1 : 2, ")");
  check_out_dtype(solution, A, op);
  // residuals and singular values are real, of a complex A's real type
  const at::ScalarType real = c10::toRealValueType(A.scalar_type());
  for (const Tensor* t : {&residuals, &singular_values})
    TORCH_CHECK(t->scalar_type() == real, op, ": expected out tensor to have dtype ", real,
                ", but got ", t->scalar_type(), " instead");
  TORCH_CHECK(rank.scalar_type() == at::kLong, op, ": rank expected to be of dtype Long");
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::linalg_lstsq");
    auto [x, r, k, sv] = at::linalg_lstsq(A.cpu(), B.cpu(), rcond, driver_name);
    copy_to_out(solution, x, op);
    copy_to_out(residuals, r, op);
    copy_to_out(rank, k, op);
    copy_to_out(singular_values, sv, op);
    return {solution, residuals, rank, singular_values};
  }
  const double eps = A.scalar_type() == at::kFloat ? 1.1920928955078125e-07
                                                   : 2.220446049250313e-16;
  const double cut = rcond.has_value() && *rcond > 0 ? *rcond : eps * std::max(m, n);
  auto [U, S, Vh] = at::linalg_svd(A, false);
  Tensor keep = S.numel() ? S > (cut * S.amax(-1, true)) : S.to(at::kBool);
  Tensor inv = at::where(keep, S.reciprocal(), at::zeros_like(S));
  Tensor x = at::matmul(Vh.mH(), inv.unsqueeze(-1) * at::matmul(U.mH(), b));
  Tensor k = keep.sum(-1);
  const Tensor xs = vector ? x.squeeze(-1) : x;
  if (solution.sizes() != xs.sizes()) {
    // A new solution is laid out as the CPU's (LAPACK's): each matrix
    // column-major over max(m, n) rows, of which it is the first n.
    std::vector<int64_t> cols = x.sizes().vec();
    cols[cols.size() - 2] = cols.back();
    cols.back() = std::max(m, n);
    Tensor lay = at::empty(cols, x.options()).transpose(-2, -1).narrow(-2, 0, n);
    solution.set_(vector ? lay.squeeze(-1) : lay);
  }
  solution.copy_(xs);
  const bool has_rank = driver != "gels";
  const bool has_values = driver == "gelsd" || driver == "gelss";
  copy_to_out(rank, has_rank ? k : at::empty({0}, k.options()), op);
  copy_to_out(singular_values, has_values ? S : at::empty({0}, S.options()), op);
  bool full = m > n && driver != "gelsy";
  if (full && has_rank) full = (k == n).all().item<bool>();
  copy_to_out(residuals,
              full ? (at::matmul(A, x) - b).square().sum(-2) : at::empty({0}, A.options()), op);
  return {solution, residuals, rank, singular_values};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "linalg_matrix_exp", matrix_exp_loom);
  LOOM_IMPL(m, "linalg_matrix_exp.out", matrix_exp_out);
  LOOM_IMPL(m, "linalg_lstsq.out", lstsq_out);
}

}  // namespace torch_loom::linalg
