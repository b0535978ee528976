// What loom builds on its LU: _linalg_solve_ex (linalg.solve), linalg_inv_ex
// (linalg.inv), _linalg_det (det), _linalg_slogdet (slogdet, logdet),
// lu_unpack and linalg_lu. They compose the LU kernels with ops loom runs
// natively, as PyTorch's CPU kernels do: the same LU (of A for solve, of A^T
// for a row-major A in det and slogdet), which the derivative formulas use.
#include <torch/library.h>

#include "ops/linalg/linalg_util.h"
#include "register.h"

namespace torch_loom::linalg {
namespace {

using at::Tensor;

// B is a vector (or a batch of them) rather than a matrix, as numpy reads it.
bool is_vector_rhs(const Tensor& A, const Tensor& B) {
  return B.dim() == 1 ||
         (A.dim() - 1 == B.dim() && B.sizes() == A.sizes().slice(0, A.dim() - 1));
}

// The sign of the permutation in pivots: (-1)^(number of real swaps).
Tensor pivots_sign(const Tensor& pivots) {
  return (at::arange(1, pivots.size(-1) + 1, pivots.options()) != pivots)
      .sum(-1, false, at::kLong)
      .fmod_(2)
      .mul_(-2)
      .add_(1);
}

std::tuple<Tensor&, Tensor&, Tensor&, Tensor&> solve_ex_out(const Tensor& A, const Tensor& B,
                                                            bool left, bool check_errors,
                                                            Tensor& result, Tensor& LU,
                                                            Tensor& pivots, Tensor& info) {
  static const char* op = "linalg.solve_ex";
  auto [mr, mlu, mp, mi] = at::_linalg_solve_ex(meta_like(A), meta_like(B), left, false);
  prepare_out(result, mr, op);
  prepare_out(LU, mlu, op);
  prepare_out(pivots, mp, op);
  prepare_out(info, mi, op);
  // The LU of A itself, as PyTorch's CPU kernel returns it (the derivative
  // formula solves with it).
  at::linalg_lu_factor_ex_out(LU, pivots, info, A);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  const bool vector = is_vector_rhs(LU, B);
  Tensor r = vector ? result.unsqueeze(-1) : result;
  at::linalg_lu_solve_out(r, LU, pivots, vector ? B.unsqueeze(-1) : B, left, false);
  return {result, LU, pivots, info};
}

std::tuple<Tensor&, Tensor&> inv_ex_out(const Tensor& A, bool check_errors, Tensor& inverse,
                                        Tensor& info) {
  static const char* op = "linalg.inv_ex";
  auto [mi, minfo] = at::linalg_inv_ex(meta_like(A), false);
  prepare_out(inverse, mi, op);
  prepare_out(info, minfo, op);
  inverse.zero_();
  inverse.diagonal(0, -2, -1).fill_(1);
  at::linalg_solve_ex_out(inverse, info, A, inverse, true);
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return {inverse, info};
}

// det(A) = det(P) prod(diag(U)); a row-major A is factored as A^T (det(A^T)
// = det(A)), which the derivative formula expects.
std::tuple<Tensor&, Tensor&, Tensor&> det_out(const Tensor& A, Tensor& result, Tensor& LU,
                                              Tensor& pivots) {
  static const char* op = "linalg.det";
  auto [md, mlu, mp] = at::_linalg_det(meta_like(A));
  prepare_out(result, md, op);
  prepare_out(LU, mlu, op);
  prepare_out(pivots, mp, op);
  Tensor info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info,
                              A.is_contiguous() && !A.is_complex() ? A.mH() : A);
  at::mul_out(result, pivots_sign(pivots), at::prod(LU.diagonal(0, -2, -1), -1));
  return {result, LU, pivots};
}

std::tuple<Tensor&, Tensor&, Tensor&, Tensor&> slogdet_out(const Tensor& A, Tensor& sign,
                                                           Tensor& logabsdet, Tensor& LU,
                                                           Tensor& pivots) {
  static const char* op = "linalg.slogdet";
  auto [ms, ml, mlu, mp] = at::_linalg_slogdet(meta_like(A));
  prepare_out(sign, ms, op);
  prepare_out(logabsdet, ml, op);
  prepare_out(LU, mlu, op);
  prepare_out(pivots, mp, op);
  Tensor info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info,
                              A.is_contiguous() && !A.is_complex() ? A.mH() : A);
  const Tensor diag = LU.diagonal(0, -2, -1);
  at::mul_out(sign, diag.sgn().prod(-1), pivots_sign(pivots));
  at::sum_out(logabsdet, diag.abs().log_(), -1);
  return {sign, logabsdet, LU, pivots};
}

// P from the pivots ("linalg.lu_perm"); L = tril(LU, -1) + I, U = triu(LU)
// (the order matters when L is LU itself).
std::tuple<Tensor&, Tensor&, Tensor&> lu_unpack_out(const Tensor& LU, const Tensor& pivots,
                                                    bool unpack_data, bool unpack_pivots,
                                                    Tensor& P, Tensor& L, Tensor& U) {
  static const char* op = "lu_unpack";
  auto [mP, mL, mU] = at::lu_unpack(meta_like(LU), meta_like(pivots), unpack_data,
                                    unpack_pivots);
  prepare_out(P, mP, op);
  prepare_out(L, mL, op);
  prepare_out(U, mU, op);
  const int64_t m = LU.size(-2), n = LU.size(-1);
  if (unpack_data) {
    if (m > n || LU.is_same(L)) {
      at::triu_out(U, m == n ? LU : LU.narrow(-2, 0, n), 0);
      at::tril_out(L, LU, -1);
    } else {
      at::tril_out(L, m == n ? LU : LU.narrow(-1, 0, m), -1);
      at::triu_out(U, LU, 0);
    }
    L.diagonal(0, -2, -1).fill_(1);
  }
  if (unpack_pivots) {
    TORCH_CHECK(native_dtype(P) || P.scalar_type() == at::kHalf ||
                    P.scalar_type() == at::kBFloat16 || P.is_complex(),
                op, ": unsupported dtype ", P.scalar_type());
    const auto batch = batch_of(P);
    const int64_t count = batch_count(batch);
    const Tensor piv = ints(pivots, batch, pivots.size(-1));
    const bool direct = native_dtype(P) && P.is_contiguous();
    Tensor w = direct ? P
                      : at::empty(P.sizes(), P.options().dtype(at::kFloat));
    launch_batch(op, "linalg.lu_perm", LOOM_KERNEL("linalg.lu_perm"),
                 {piv, w.reshape({count, m, m})}, {}, count, m * m);
    if (!direct) P.copy_(w);
  }
  return {P, L, U};
}

std::tuple<Tensor&, Tensor&, Tensor&> lu_out(const Tensor& A, bool pivot, Tensor& P, Tensor& L,
                                             Tensor& U) {
  static const char* op = "linalg.lu";
  auto [mP, mL, mU] = at::linalg_lu(meta_like(A), pivot);
  prepare_out(P, mP, op);
  prepare_out(L, mL, op);
  prepare_out(U, mU, op);
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(A, pivot, false);
  at::lu_unpack_out(P, L, U, LU, pivots, true, pivot);
  return {P, L, U};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_linalg_solve_ex.result", solve_ex_out);
  LOOM_IMPL(m, "linalg_inv_ex.inverse", inv_ex_out);
  LOOM_IMPL(m, "_linalg_det.result", det_out);
  LOOM_IMPL(m, "_linalg_slogdet.sign", slogdet_out);
  LOOM_IMPL(m, "lu_unpack.out", lu_unpack_out);
  LOOM_IMPL(m, "linalg_lu.out", lu_out);
}

}  // namespace torch_loom::linalg
