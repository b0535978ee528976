// The factorizations and triangular solves on loom: linalg_cholesky_ex,
// cholesky, linalg_lu_factor_ex, linalg_lu_solve, linalg_solve_triangular,
// triangular_solve, _cholesky_solve_helper (cholesky_solve), cholesky_inverse.
// The structured ops register their out= form: the functional form is
// PyTorch's default-backend kernel (meta, then the out= form). Arguments
// are checked by PyTorch's meta functions, which also size the results;
// the kernels (loom/kernels/linalg.h) work in column-major batches.
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "ops/gemm/linalg_gemm.h"
#include "ops/linalg/linalg_util.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::linalg {

void prepare_out(const at::Tensor& out, const at::Tensor& meta, const char* op) {
  check_out_dtype(out, meta, op);
  if (at::native::resize_output(out, meta.sizes()) && out.numel() > 0 &&
      out.strides() != meta.strides())
    out.as_strided_(meta.sizes(), meta.strides());
}

void launch_batch(const char* op, const char* name, const loom_kernel_t* k,
                  std::initializer_list<at::Tensor> tensors,
                  std::initializer_list<loom_scalar> scalars, int64_t batch,
                  int64_t work_per_item) {
  if (batch == 0) return;
  std::vector<loom_tensor> d;
  for (const at::Tensor& t : tensors) d.push_back(describe(t, op));
  // About 2^18 multiply-adds per chunk: a function of the shape only.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) /
                                                 std::max<int64_t>(1, work_per_item));
  launch(name, k, d, std::vector<loom_scalar>(scalars), batch, grain);
}

void trsm_inplace(const char* op, const at::Tensor& a, const at::Tensor& x, bool upper,
                  bool trans, bool unit) {
  const int64_t n = x.size(-2), k = x.size(-1);
  const at::Tensor a3 = as_rank3(a), x3 = as_rank3(x);
  launch_batch(op, "linalg.trsm", LOOM_KERNEL("linalg.trsm"), {a3, x3},
               {scalar_i(upper), scalar_i(trans), scalar_i(unit)}, x3.size(0), n * n * k / 2);
}

namespace {

using at::Tensor;

// A's matrices for a kernel over `batch`: A itself where it is column-major
// over exactly that batch, else a column-major copy (broadcast).
Tensor operand(const Tensor& a, const std::vector<int64_t>& batch) {
  if (is_colmajor(a) && batch_of(a) == batch) return a;
  return colmajor_copy(a, batch);
}

// ---- Cholesky ----------------------------------------------------------------------

// From this order on, float32 Cholesky runs blocked, its trailing updates
// on loom's GEMM (parallel within one matrix); below it each matrix is one
// launch item, factored whole where it sits in cache.
constexpr int64_t kBlockedCholesky = 256;
constexpr int64_t kCholeskyPanel = 128;
constexpr int64_t kPanelRows = 64;   // rows per item of a panel's solve

// X L^T = P in place of the panel p (count, rows, kb) of the column-major w,
// L the factored diagonal block d: a solve from the right, whose rows are
// independent, so one matrix's panel is split into items of kPanelRows
// rows over the broadcast block.
void panel_solve(const char* op, const Tensor& d, const Tensor& p) {
  const int64_t count = p.size(0), rows = p.size(1), kb = p.size(2);
  const std::initializer_list<loom_scalar> flags = {scalar_i(0), scalar_i(1), scalar_i(0),
                                                    scalar_i(1)};
  if (count > 1 || rows < 2 * kPanelRows) {
    launch_batch(op, "linalg.trsm", LOOM_KERNEL("linalg.trsm"), {d, p}, flags, count,
                 rows * kb * kb / 2);
    return;
  }
  const int64_t items = rows / kPanelRows, ld = p.stride(2);
  const Tensor block = d.expand({items, kb, kb});
  const Tensor split = p.as_strided({items, kPanelRows, kb}, {kPanelRows, 1, ld});
  launch_batch(op, "linalg.trsm", LOOM_KERNEL("linalg.trsm"), {block, split}, flags, items,
               kPanelRows * kb * kb / 2);
  const int64_t done = items * kPanelRows;
  if (done < rows)
    launch_batch(op, "linalg.trsm", LOOM_KERNEL("linalg.trsm"),
                 {d, p.narrow(1, done, rows - done)}, flags, 1, (rows - done) * kb * kb / 2);
}

// The lower factor of the float32 column-major batch w (count, n, n) in
// place, by panels: the diagonal block ("linalg.cholesky"), the panel below
// it (panel_solve), the trailing matrix less the panel's product with its
// transpose (the GEMM). info keeps the first failing order.
void blocked_cholesky(const char* op, const Tensor& w, const Tensor& info) {
  const int64_t count = w.size(0), n = w.size(1);
  info.zero_();
  Tensor step = at::empty({count}, info.options());
  for (int64_t k = 0; k < n; k += kCholeskyPanel) {
    const int64_t kb = std::min(kCholeskyPanel, n - k), rest = n - k - kb;
    const Tensor d = w.narrow(1, k, kb).narrow(2, k, kb);
    launch_batch(op, "linalg.cholesky", LOOM_KERNEL("linalg.cholesky"), {d, step}, {}, count,
                 kb * kb * kb / 3);
    info.copy_(at::where(info.eq(0).logical_and(step.gt(0)), step + k, info));
    if (rest == 0) break;
    w.narrow(1, k, kb).narrow(2, k + kb, rest).zero_();
    const Tensor p = w.narrow(1, k + kb, rest).narrow(2, k, kb);
    panel_solve(op, d, p);
    const Tensor a22 = w.narrow(1, k + kb, rest).narrow(2, k + kb, rest);
    const loom_tensor c = gemm_view(a22, op);
    gemm_run(op, w, c, gemm_view(p, op), gemm_transpose(gemm_view(p, op)), &c, -1.0, 1.0);
  }
}

// A = L L^T from the lower triangle; the upper form is the lower factor of
// A^T (whose lower triangle is A's upper one), transposed.
std::tuple<Tensor&, Tensor&> cholesky_ex_out(const Tensor& A, bool upper, bool check_errors,
                                             Tensor& L, Tensor& info) {
  static const char* op = "linalg.cholesky_ex";
  auto [mL, minfo] = at::linalg_cholesky_ex(meta_like(A), upper, false);
  prepare_out(L, mL, op);
  prepare_out(info, minfo, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::linalg_cholesky_ex");
    auto [l, i] = at::linalg_cholesky_ex(A.cpu(), upper, false);
    L.copy_(l);
    info.copy_(i);
  } else {
    const auto batch = batch_of(A);
    const int64_t n = A.size(-1), count = batch_count(batch);
    const Tensor target = upper ? L.mT() : L;
    bool direct;
    Tensor w = work_in(target, direct);
    w.copy_(upper ? A.mT() : A);
    Tensor iw = at::empty({count}, info.options());
    if (A.scalar_type() == at::kFloat && n >= kBlockedCholesky && count > 0)
      blocked_cholesky(op, as_rank3(w), iw);
    else
      launch_batch(op, "linalg.cholesky", LOOM_KERNEL("linalg.cholesky"), {as_rank3(w), iw},
                   {}, count, n * n * n / 3);
    if (!direct) target.copy_(w);
    info.copy_(iw.view(info.sizes()));
  }
  if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", A.dim() == 2);
  return {L, info};
}

Tensor& cholesky_out(const Tensor& A, bool upper, Tensor& out) {
  TORCH_CHECK(A.dim() >= 2, "cholesky: The input tensor A must have at least 2 dimensions.");
  Tensor info = at::empty({0}, A.options().dtype(at::kInt));
  cholesky_ex_out(A, upper, false, out, info);
  at::_linalg_check_errors(info, "cholesky", A.dim() == 2);
  return out;
}

Tensor cholesky(const Tensor& A, bool upper) {
  Tensor out = at::empty({0}, A.options());
  return cholesky_out(A, upper, out);
}

// ---- LU ----------------------------------------------------------------------------

std::tuple<Tensor&, Tensor&, Tensor&> lu_factor_ex_out(const Tensor& A, bool pivot,
                                                       bool check_errors, Tensor& LU,
                                                       Tensor& pivots, Tensor& info) {
  static const char* op = "linalg.lu_factor_ex";
  auto [mLU, mpiv, minfo] = at::linalg_lu_factor_ex(meta_like(A), pivot, false);
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the loom "
                     "device");
  prepare_out(LU, mLU, op);
  prepare_out(pivots, mpiv, op);
  prepare_out(info, minfo, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::linalg_lu_factor_ex");
    auto [lu, p, i] = at::linalg_lu_factor_ex(A.cpu(), pivot, false);
    LU.copy_(lu);
    pivots.copy_(p);
    info.copy_(i);
  } else {
    const auto batch = batch_of(A);
    const int64_t m = A.size(-2), n = A.size(-1), count = batch_count(batch);
    bool direct;
    Tensor w = work_in(LU, direct);
    Tensor pw = at::empty({count, std::min(m, n)}, pivots.options());
    Tensor iw = at::empty({count}, info.options());
    // Each item copies its matrix of A in itself (in cache for the
    // factorization) unless A shares memory with the result.
    if (A.scalar_type() == w.scalar_type() && !A.is_neg() && !A.is_alias_of(w) && count > 0) {
      launch_batch(op, "linalg.lu", LOOM_KERNEL("linalg.lu"), {as_rank3(w), pw, iw, as_rank3(A)},
                   {}, count, m * n * std::min(m, n));
    } else {
      w.copy_(A);
      launch_batch(op, "linalg.lu", LOOM_KERNEL("linalg.lu"), {as_rank3(w), pw, iw}, {}, count,
                   m * n * std::min(m, n));
    }
    if (!direct) LU.copy_(w);
    pivots.copy_(pw.view(pivots.sizes()));
    info.copy_(iw.view(info.sizes()));
  }
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  return {LU, pivots, info};
}

// A X = B, A^H X = B, X A = B or X A^H = B: the right-hand forms solve the
// transposed system (A^T X^T = B^T, A X^T = B^T) for X^T.
Tensor& lu_solve_out(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left,
                     bool adjoint, Tensor& out) {
  static const char* op = "linalg.lu_solve";
  Tensor m = at::linalg_lu_solve(meta_like(LU), meta_like(pivots), meta_like(B), left,
                                 adjoint);
  prepare_out(out, m, op);
  if (!native_dtype(LU)) {
    note_cpu_fallback("aten::linalg_lu_solve");
    out.copy_(at::linalg_lu_solve(LU.cpu(), pivots.cpu(), B.cpu(), left, adjoint));
    return out;
  }
  const auto batch = batch_of(out);
  const int64_t n = LU.size(-1), count = batch_count(batch);
  const Tensor target = left ? out : out.mT();
  const Tensor rhs = left ? B : B.mT();
  const Tensor lu = operand(LU, batch);
  const Tensor piv = ints(pivots, batch, n);
  bool direct;
  Tensor w = work_in(target, direct);
  if (!w.is_same(rhs)) w.copy_(rhs.expand(w.sizes()));
  const bool trans = left ? adjoint : !adjoint;
  launch_batch(op, "linalg.lu_solve", LOOM_KERNEL("linalg.lu_solve"),
               {as_rank3(lu), piv, as_rank3(w)}, {scalar_i(trans)}, count,
               n * n * target.size(-1));
  if (!direct) target.copy_(w);
  return out;
}

// ---- triangular solves -------------------------------------------------------------

// op(A) X = B for the column-major batch x (holding B), choosing between A
// and its transpose so that A is read where it lies when it can be.
void triangular_into(const char* op, const Tensor& A, const Tensor& x, bool upper,
                     bool trans, bool unit) {
  const auto batch = batch_of(x);
  if (!is_colmajor(A) && is_colmajor(A.mT()) && batch_of(A) == batch) {
    trsm_inplace(op, A.mT(), x, !upper, !trans, unit);
    return;
  }
  trsm_inplace(op, operand(A, batch), x, upper, trans, unit);
}

Tensor& solve_triangular_out(const Tensor& A, const Tensor& B, bool upper, bool left,
                             bool unitriangular, Tensor& out) {
  static const char* op = "linalg.solve_triangular";
  Tensor m = at::linalg_solve_triangular(meta_like(A), meta_like(B), upper, left,
                                         unitriangular);
  prepare_out(out, m, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::linalg_solve_triangular");
    out.copy_(at::linalg_solve_triangular(A.cpu(), B.cpu(), upper, left, unitriangular));
    return out;
  }
  // X A = B  <=>  A^T X^T = B^T.
  const Tensor target = left ? out : out.mT();
  const Tensor rhs = left ? B : B.mT();
  bool direct;
  Tensor w = work_in(target, direct);
  if (!w.is_same(rhs)) w.copy_(rhs.expand(w.sizes()));
  triangular_into(op, A, w, upper, !left, unitriangular);
  if (!direct) target.copy_(w);
  return out;
}

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left,
                        bool unitriangular) {
  Tensor out = at::empty({0}, A.options());
  return solve_triangular_out(A, B, upper, left, unitriangular, out);
}

std::tuple<Tensor&, Tensor&> triangular_solve_out(const Tensor& B, const Tensor& A,
                                                  bool upper, bool transpose, bool unit,
                                                  Tensor& X, Tensor& M) {
  static const char* op = "triangular_solve";
  auto [mX, mM] = at::triangular_solve(meta_like(B), meta_like(A), upper, transpose, unit);
  prepare_out(X, mX, op);
  prepare_out(M, mM, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::triangular_solve");
    auto [x, mm] = at::triangular_solve(B.cpu(), A.cpu(), upper, transpose, unit);
    X.copy_(x);
    M.copy_(mm);
    return {X, M};
  }
  M.copy_(A.expand(M.sizes()));
  bool direct;
  Tensor w = work_in(X, direct);
  if (!w.is_same(B)) w.copy_(B.expand(w.sizes()));
  triangular_into(op, M, w, upper, transpose, unit);
  if (!direct) X.copy_(w);
  return {X, M};
}

// ---- Cholesky solves ---------------------------------------------------------------

// A X = B with A = L L^T (or U^T U), in place of the column-major batch x.
void cholesky_solve_into(const char* op, const Tensor& factor, const Tensor& x, bool upper) {
  triangular_into(op, factor, x, upper, upper, false);
  triangular_into(op, factor, x, upper, !upper, false);
}

// B and A arrive broadcast to one batch (cholesky_solve is composite).
Tensor& cholesky_solve_helper_out(const Tensor& B, const Tensor& A, bool upper, Tensor& out) {
  static const char* op = "cholesky_solve";
  TORCH_CHECK(B.dim() >= 2 && A.dim() >= 2 && A.size(-1) == A.size(-2) &&
                  A.size(-1) == B.size(-2),
              op, ": expected A (*, n, n) and B (*, n, k), got ", A.sizes(), " and ",
              B.sizes());
  check_out_dtype(out, B, op);
  at::native::resize_output(out, B.sizes());
  if (!native_dtype(B)) {
    note_cpu_fallback("aten::_cholesky_solve_helper");
    out.copy_(at::_cholesky_solve_helper(B.cpu(), A.cpu(), upper));
    return out;
  }
  bool direct;
  Tensor w = work_in(out, direct);
  if (!w.is_same(B)) w.copy_(B);
  cholesky_solve_into(op, A, w, upper);
  if (!direct) out.copy_(w);
  return out;
}

Tensor cholesky_solve_helper(const Tensor& B, const Tensor& A, bool upper) {
  Tensor out = colmajor(batch_of(B), B.size(-2), B.size(-1), B.options());
  return cholesky_solve_helper_out(B, A, upper, out);
}

Tensor& cholesky_inverse_out(const Tensor& factor, bool upper, Tensor& out) {
  static const char* op = "cholesky_inverse";
  Tensor m = at::cholesky_inverse(meta_like(factor), upper);
  prepare_out(out, m, op);
  if (!native_dtype(factor)) {
    note_cpu_fallback("aten::cholesky_inverse");
    out.copy_(at::cholesky_inverse(factor.cpu(), upper));
    return out;
  }
  bool direct;
  Tensor w = work_in(out, direct);
  w.zero_();
  w.diagonal(0, -2, -1).fill_(1);
  cholesky_solve_into(op, factor, w, upper);
  if (!direct) out.copy_(w);
  return out;
}

Tensor cholesky_inverse(const Tensor& factor, bool upper) {
  Tensor out = at::empty({0}, factor.options());
  return cholesky_inverse_out(factor, upper, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "linalg_cholesky_ex.L", cholesky_ex_out);
  LOOM_IMPL(m, "cholesky", cholesky);
  LOOM_IMPL(m, "cholesky.out", cholesky_out);
  LOOM_IMPL(m, "linalg_lu_factor_ex.out", lu_factor_ex_out);
  LOOM_IMPL(m, "linalg_lu_solve.out", lu_solve_out);
  LOOM_IMPL(m, "linalg_solve_triangular", solve_triangular);
  LOOM_IMPL(m, "linalg_solve_triangular.out", solve_triangular_out);
  LOOM_IMPL(m, "triangular_solve.X", triangular_solve_out);
  LOOM_IMPL(m, "_cholesky_solve_helper", cholesky_solve_helper);
  LOOM_IMPL(m, "_cholesky_solve_helper.out", cholesky_solve_helper_out);
  LOOM_IMPL(m, "cholesky_inverse", cholesky_inverse);
  LOOM_IMPL(m, "cholesky_inverse.out", cholesky_inverse_out);
}

}  // namespace torch_loom::linalg
