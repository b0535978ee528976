// The orthogonal factorizations on loom: geqrf, linalg_householder_product
// (orgqr), ormqr, linalg_qr, _linalg_eigh (linalg.eigh, eigvalsh) and
// _linalg_svd (linalg.svd, svdvals, and through them pinv, matrix_rank,
// matrix_norm, cond). Arguments are checked by PyTorch's meta functions
// where the op has one.
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "ops/linalg/linalg_util.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::linalg {
namespace {

using at::Tensor;

// A batch of float vectors (batch, k) for a kernel: `t` when it is
// contiguous, else a new one (the caller copies back).
Tensor vectors_of(const Tensor& t, int64_t count, int64_t k) {
  return t.is_contiguous() ? t.view({count, k}) : at::empty({count, k}, t.options());
}

// ---- QR ------------------------------------------------------------------------------

std::tuple<Tensor&, Tensor&> geqrf_out(const Tensor& A, Tensor& a, Tensor& tau) {
  static const char* op = "geqrf";
  TORCH_CHECK(A.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  TORCH_CHECK(at::isFloatingType(A.scalar_type()) || at::isComplexType(A.scalar_type()),
              "torch.geqrf: Expected a floating point or complex tensor as input. Got ",
              A.scalar_type());
  check_out_dtype(a, A, op);
  check_out_dtype(tau, A, op);
  const auto batch = batch_of(A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), count = batch_count(batch);
  std::vector<int64_t> tau_shape(batch);
  tau_shape.push_back(k);
  if (at::native::resize_output(a, A.sizes()) && a.numel() > 0)
    a.as_strided_(A.sizes(), colmajor(batch, m, n, A.options().device(c10::kMeta)).strides());
  at::native::resize_output(tau, tau_shape);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::geqrf");
    auto [ra, rt] = at::geqrf(A.cpu());
    a.copy_(ra);
    tau.copy_(rt);
    return {a, tau};
  }
  bool direct;
  Tensor w = work_in(a, direct);
  w.copy_(A);
  Tensor t = vectors_of(tau, count, k);
  launch_batch(op, "linalg.geqrf", LOOM_KERNEL("linalg.geqrf"), {as_rank3(w), t}, {}, count,
               2 * m * n * k);
  if (!direct) a.copy_(w);
  if (!t.is_same(tau) && t.data_ptr() != tau.data_ptr()) tau.copy_(t.view(tau.sizes()));
  return {a, tau};
}

std::tuple<Tensor, Tensor> geqrf(const Tensor& A) {
  Tensor a = at::empty({0}, A.options()), tau = at::empty({0}, A.options());
  geqrf_out(A, a, tau);
  return {a, tau};
}

Tensor& householder_product_out(const Tensor& input, const Tensor& tau, Tensor& out) {
  static const char* op = "linalg.householder_product";
  Tensor m = at::linalg_householder_product(meta_like(input), meta_like(tau));
  prepare_out(out, m, op);
  if (!native_dtype(input)) {
    note_cpu_fallback("aten::linalg_householder_product");
    out.copy_(at::linalg_householder_product(input.cpu(), tau.cpu()));
    return out;
  }
  const auto batch = batch_of(out);
  const int64_t count = batch_count(batch), k = tau.size(-1);
  bool direct;
  Tensor w = work_in(out, direct);
  w.copy_(input);
  const Tensor t = tau.contiguous().view({count, k});   // tau's batch is input's (meta)
  launch_batch(op, "linalg.orgqr", LOOM_KERNEL("linalg.orgqr"), {as_rank3(w), t}, {}, count,
               2 * input.size(-2) * input.size(-1) * k);
  if (!direct) out.copy_(w);
  return out;
}

Tensor householder_product(const Tensor& input, const Tensor& tau) {
  Tensor out = at::empty({0}, input.options());
  return householder_product_out(input, tau, out);
}

// C = op(Q) C or C op(Q); input (the reflectors) and tau broadcast to C's batch.
Tensor& ormqr_out(const Tensor& input, const Tensor& tau, const Tensor& other, bool left,
                  bool transpose, Tensor& out) {
  static const char* op = "ormqr";
  Tensor m = at::ormqr(meta_like(input), meta_like(tau), meta_like(other), left, transpose);
  prepare_out(out, m, op);
  if (!native_dtype(other)) {
    note_cpu_fallback("aten::ormqr");
    out.copy_(at::ormqr(input.cpu(), tau.cpu(), other.cpu(), left, transpose));
    return out;
  }
  const auto batch = batch_of(out);
  const int64_t count = batch_count(batch), k = tau.size(-1);
  std::vector<int64_t> tau_shape(batch);
  tau_shape.push_back(k);
  const Tensor v = (is_colmajor(input) && batch_of(input) == batch)
                       ? input
                       : colmajor_copy(input, batch);
  const Tensor t = tau.expand(tau_shape).contiguous().view({count, k});
  bool direct;
  Tensor w = work_in(out, direct);
  if (!w.is_same(other)) w.copy_(other.expand(w.sizes()));
  launch_batch(op, "linalg.ormqr", LOOM_KERNEL("linalg.ormqr"),
               {as_rank3(v), t, as_rank3(w)}, {scalar_i(left), scalar_i(transpose)}, count,
               2 * out.size(-2) * out.size(-1) * k);
  if (!direct) out.copy_(w);
  return out;
}

Tensor ormqr(const Tensor& input, const Tensor& tau, const Tensor& other, bool left,
             bool transpose) {
  Tensor out = at::empty({0}, other.options());
  return ormqr_out(input, tau, other, left, transpose, out);
}

// Q and R from geqrf: R the upper triangle, Q the product of the reflectors
// (m x k, or m x m for "complete", the reflectors padded with zero columns).
std::tuple<Tensor&, Tensor&> qr_out(const Tensor& A, c10::string_view mode, Tensor& Q,
                                    Tensor& R) {
  static const char* op = "linalg.qr";
  auto [mQ, mR] = at::linalg_qr(meta_like(A), mode);
  prepare_out(Q, mQ, op);
  prepare_out(R, mR, op);
  const auto [compute_q, reduced] = at::native::_parse_qr_mode(mode);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  auto [a, tau] = at::geqrf(A);
  const bool rows_m = !reduced && m > n;   // "complete" with a tall A: R is m x n
  at::triu_out(R, rows_m ? a : a.narrow(-2, 0, k), 0);
  if (!compute_q) return {Q, R};
  if (!rows_m) {
    at::linalg_householder_product_out(Q, a.narrow(-1, 0, k), tau);
  } else {
    Tensor padded = at::zeros_like(Q);
    padded.narrow(-1, 0, k).copy_(a.narrow(-1, 0, k));
    at::linalg_householder_product_out(Q, padded, tau);
  }
  return {Q, R};
}

// ---- eigh ---------------------------------------------------------------------------

std::tuple<Tensor&, Tensor&> eigh_out(const Tensor& A, c10::string_view uplo, bool compute_v,
                                      Tensor& values, Tensor& vectors) {
  static const char* op = "linalg.eigh";
  auto [mw, mv] = at::_linalg_eigh(meta_like(A), uplo, compute_v);
  prepare_out(values, mw, op);
  prepare_out(vectors, mv, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::_linalg_eigh");
    auto [w, v] = at::_linalg_eigh(A.cpu(), uplo, compute_v);
    values.copy_(w);
    vectors.copy_(v);
    return {values, vectors};
  }
  const bool upper = uplo == "U" || uplo == "u";
  const auto batch = batch_of(A);
  const int64_t n = A.size(-1), count = batch_count(batch);
  Tensor a = colmajor_copy(A, batch);
  Tensor w = vectors_of(values, count, n);
  bool direct = false;
  Tensor v = compute_v ? work_in(vectors, direct) : Tensor();
  Tensor info = at::empty({count}, A.options().dtype(at::kInt));
  const loom_kernel_t* k = LOOM_KERNEL("linalg.eigh");
  std::vector<loom_tensor> d = {describe(as_rank3(a), op), describe(w, op),
                                compute_v ? describe(as_rank3(v), op) : loom_tensor{},
                                describe(info, op)};
  if (count > 0)
    launch("linalg.eigh", k, d, {scalar_i(upper)}, count,
           std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, 30 * n * n * n)));
  if (compute_v && !direct) vectors.copy_(v);
  if (w.data_ptr() != values.data_ptr()) values.copy_(w.view(values.sizes()));
  at::_linalg_check_errors(info.view(batch), op, A.dim() == 2);
  return {values, vectors};
}

// ---- SVD ----------------------------------------------------------------------------

// One-sided Jacobi on the tall one of A and A^T: with A^T = U' S V'^T,
// A = V' S U'^T.
std::tuple<Tensor&, Tensor&, Tensor&> svd_out(const Tensor& A, bool full_matrices,
                                              bool compute_uv,
                                              std::optional<c10::string_view> driver,
                                              Tensor& U, Tensor& S, Tensor& Vh) {
  static const char* op = "linalg.svd";
  TORCH_CHECK(!driver.has_value(), "torch.linalg.svd: keyword argument `driver=` is only "
                                   "supported on CUDA inputs with cuSOLVER backend.");
  auto [mU, mS, mVh] = at::_linalg_svd(meta_like(A), full_matrices, compute_uv);
  prepare_out(U, mU, op);
  prepare_out(S, mS, op);
  prepare_out(Vh, mVh, op);
  if (!native_dtype(A)) {
    note_cpu_fallback("aten::_linalg_svd");
    auto [u, s, vh] = at::_linalg_svd(A.cpu(), full_matrices, compute_uv);
    U.copy_(u);
    S.copy_(s);
    Vh.copy_(vh);
    return {U, S, Vh};
  }
  const auto batch = batch_of(A);
  const int64_t m = A.size(-2), n = A.size(-1), count = batch_count(batch);
  const bool tall = m >= n;
  const Tensor src = tall ? A : A.mT();
  const int64_t rows = std::max(m, n), cols = std::min(m, n);
  const int64_t ucols = compute_uv && full_matrices ? rows : cols;
  Tensor u = colmajor(batch, rows, ucols, A.options());
  u.narrow(-1, 0, cols).copy_(src);
  Tensor v = compute_uv ? colmajor(batch, cols, cols, A.options()) : Tensor();
  Tensor s = vectors_of(S, count, cols);
  Tensor info = at::empty({count}, A.options().dtype(at::kInt));
  std::vector<loom_tensor> d = {describe(as_rank3(u), op), describe(s, op),
                                compute_uv ? describe(as_rank3(v), op) : loom_tensor{},
                                describe(info, op)};
  if (count > 0)
    launch("linalg.svd", LOOM_KERNEL("linalg.svd"), d, {}, count,
           std::max<int64_t>(1, (int64_t{1} << 18) /
                                    std::max<int64_t>(1, 30 * rows * cols * cols)));
  if (s.data_ptr() != S.data_ptr()) S.copy_(s.view(S.sizes()));
  if (compute_uv) {
    U.copy_(tall ? u : v);
    Vh.copy_(tall ? v.mT() : u.mT());
  }
  at::_linalg_check_errors(info.view(batch), op, A.dim() == 2);
  return {U, S, Vh};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "geqrf", geqrf);
  LOOM_IMPL(m, "geqrf.a", geqrf_out);
  LOOM_IMPL(m, "linalg_householder_product", householder_product);
  LOOM_IMPL(m, "linalg_householder_product.out", householder_product_out);
  LOOM_IMPL(m, "ormqr", ormqr);
  LOOM_IMPL(m, "ormqr.out", ormqr_out);
  LOOM_IMPL(m, "linalg_qr.out", qr_out);
  LOOM_IMPL(m, "_linalg_eigh.eigenvalues", eigh_out);
  LOOM_IMPL(m, "_linalg_svd.U", svd_out);
}

}  // namespace torch_loom::linalg
