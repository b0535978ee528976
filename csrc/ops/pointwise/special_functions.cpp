// The special functions on loom (i0, special_i0e/i1/i1e, ndtri, erfcx,
// log_ndtr, the Bessel
// and Airy functions, the orthogonal polynomials) and the shrink activations: a float TensorIterator
// (integral inputs promote to the default float dtype, as on the CPU) and a
// launch of the "pointwise.special" kernel (loom/kernels/special.h).
#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "loom/kernels/special.h"
#include "ops/pointwise/pointwise_iter.h"
#include "register.h"

namespace torch_loom::special_fn {
namespace {

using at::Tensor;

loom_pw_kind float_kind(const at::TensorIteratorBase& iter, const char* name) {
  const auto t = iter.common_dtype();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t), name, ": dtype ", t,
                              " is not supported on loom");
  return t == at::kDouble ? LOOM_PW_F64 : LOOM_PW_F32;
}

// "pointwise.special" takes pointwise.apply's arguments; p0 is its one
// parameter (the shrinks' lambda).
void launch_special(const char* name, at::TensorIteratorBase& iter, int op, double p0 = 0) {
  const loom_pw_kind kind = float_kind(iter, name);
  const loom_scalar params[4] = {scalar_f(p0), scalar_f(0), scalar_f(0), scalar_f(0)};
  pw::launch_iter_kernel(name, LOOM_KERNEL("pointwise.special"), iter, op, kind, params);
}

template <int OP>
Tensor unary_into(const char* name, const Tensor& self, const Tensor& out) {
  at::TensorIterator iter;
  iter.build_borrowing_unary_float_op(out, self);
  launch_special(name, iter, OP);
  return iter.output(0);
}

template <int OP>
Tensor binary_into(const char* name, const Tensor& x, const Tensor& n, const Tensor& out) {
  at::TensorIterator iter;
  iter.build_borrowing_binary_float_op(out, x, n);
  launch_special(name, iter, OP);
  return iter.output(0);
}

#define UNARY(FN, OP, NAME)                                              \
  Tensor FN(const Tensor& self) { return unary_into<OP>(NAME, self, Tensor()); } \
  Tensor& FN##_out(const Tensor& self, Tensor& out) {                    \
    unary_into<OP>(NAME, self, out);                                     \
    return out;                                                          \
  }
#define BINARY(FN, OP, NAME)                                             \
  Tensor FN(const Tensor& x, const Tensor& n) { return binary_into<OP>(NAME, x, n, Tensor()); } \
  Tensor& FN##_out(const Tensor& x, const Tensor& n, Tensor& out) {     \
    binary_into<OP>(NAME, x, n, out);                                    \
    return out;                                                          \
  }

UNARY(i0, LOOM_SPECIAL_I0, "i0")
UNARY(i0e, LOOM_SPECIAL_I0E, "special_i0e")
UNARY(i1, LOOM_SPECIAL_I1, "special_i1")
UNARY(i1e, LOOM_SPECIAL_I1E, "special_i1e")
UNARY(ndtri, LOOM_SPECIAL_NDTRI, "special_ndtri")
UNARY(erfcx, LOOM_SPECIAL_ERFCX, "special_erfcx")
UNARY(log_ndtr, LOOM_SPECIAL_LOG_NDTR, "special_log_ndtr")
UNARY(sph_j0, LOOM_SPECIAL_SPHERICAL_BESSEL_J0, "special_spherical_bessel_j0")
UNARY(airy_ai, LOOM_SPECIAL_AIRY_AI, "special_airy_ai")
UNARY(bessel_j0, LOOM_SPECIAL_BESSEL_J0, "special_bessel_j0")
UNARY(bessel_j1, LOOM_SPECIAL_BESSEL_J1, "special_bessel_j1")
UNARY(bessel_y0, LOOM_SPECIAL_BESSEL_Y0, "special_bessel_y0")
UNARY(bessel_y1, LOOM_SPECIAL_BESSEL_Y1, "special_bessel_y1")
UNARY(mod_i0, LOOM_SPECIAL_MODIFIED_BESSEL_I0, "special_modified_bessel_i0")
UNARY(mod_i1, LOOM_SPECIAL_MODIFIED_BESSEL_I1, "special_modified_bessel_i1")
UNARY(mod_k0, LOOM_SPECIAL_MODIFIED_BESSEL_K0, "special_modified_bessel_k0")
UNARY(mod_k1, LOOM_SPECIAL_MODIFIED_BESSEL_K1, "special_modified_bessel_k1")
UNARY(scaled_k0, LOOM_SPECIAL_SCALED_MODIFIED_BESSEL_K0, "special_scaled_modified_bessel_k0")
UNARY(scaled_k1, LOOM_SPECIAL_SCALED_MODIFIED_BESSEL_K1, "special_scaled_modified_bessel_k1")
BINARY(cheb_t, LOOM_SPECIAL_CHEBYSHEV_T, "special_chebyshev_polynomial_t")
BINARY(cheb_u, LOOM_SPECIAL_CHEBYSHEV_U, "special_chebyshev_polynomial_u")
BINARY(cheb_v, LOOM_SPECIAL_CHEBYSHEV_V, "special_chebyshev_polynomial_v")
BINARY(cheb_w, LOOM_SPECIAL_CHEBYSHEV_W, "special_chebyshev_polynomial_w")
BINARY(scheb_t, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_T, "special_shifted_chebyshev_polynomial_t")
BINARY(scheb_u, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_U, "special_shifted_chebyshev_polynomial_u")
BINARY(scheb_v, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_V, "special_shifted_chebyshev_polynomial_v")
BINARY(scheb_w, LOOM_SPECIAL_SHIFTED_CHEBYSHEV_W, "special_shifted_chebyshev_polynomial_w")
BINARY(herm_h, LOOM_SPECIAL_HERMITE_H, "special_hermite_polynomial_h")
BINARY(herm_he, LOOM_SPECIAL_HERMITE_HE, "special_hermite_polynomial_he")
BINARY(lag_l, LOOM_SPECIAL_LAGUERRE_L, "special_laguerre_polynomial_l")
BINARY(leg_p, LOOM_SPECIAL_LEGENDRE_P, "special_legendre_polynomial_p")

// hardshrink / softshrink and their common backward, on floating dtypes
// (others raise, as on the CPU).
// hardshrink and the backward compare with lambda cast to a float16 /
// bfloat16 dtype (the CPU's lambd.to<scalar_t>()); softshrink reads it as
// float.
template <int OP>
Tensor shrink_into(const char* name, const Tensor& self, const at::Scalar& lambd,
                   const Tensor& out) {
  at::TensorIterator iter;
  iter.build_borrowing_unary_op(out, self);
  const double l = lambd.toDouble();
  launch_special(name, iter, OP,
                 OP == LOOM_SPECIAL_HARDSHRINK ? pw::narrow_scalar(l, iter.common_dtype()) : l);
  return iter.output(0);
}

Tensor shrink_backward_into(const char* name, const Tensor& grad, const Tensor& self,
                            const at::Scalar& lambd, const Tensor& out) {
  at::TensorIterator iter;
  iter.build_borrowing_binary_op(out, grad, self);
  launch_special(name, iter, LOOM_SPECIAL_SHRINK_BACKWARD,
                 pw::narrow_scalar(lambd.toDouble(), iter.common_dtype()));
  return iter.output(0);
}

Tensor hardshrink(const Tensor& self, const at::Scalar& lambd) {
  return shrink_into<LOOM_SPECIAL_HARDSHRINK>("hardshrink", self, lambd, Tensor());
}
Tensor& hardshrink_out(const Tensor& self, const at::Scalar& lambd, Tensor& out) {
  shrink_into<LOOM_SPECIAL_HARDSHRINK>("hardshrink", self, lambd, out);
  return out;
}
void check_lambd(const at::Scalar& lambd) {
  TORCH_CHECK(lambd.toDouble() >= 0, "softshrink: lambda must be non-negative, but found ",
              lambd);
}
Tensor softshrink(const Tensor& self, const at::Scalar& lambd) {
  check_lambd(lambd);
  return shrink_into<LOOM_SPECIAL_SOFTSHRINK>("softshrink", self, lambd, Tensor());
}
Tensor& softshrink_out(const Tensor& self, const at::Scalar& lambd, Tensor& out) {
  check_lambd(lambd);
  shrink_into<LOOM_SPECIAL_SOFTSHRINK>("softshrink", self, lambd, out);
  return out;
}
Tensor shrink_backward(const Tensor& grad, const Tensor& self, const at::Scalar& lambd) {
  return shrink_backward_into("shrink_backward", grad, self, lambd, Tensor());
}
Tensor& shrink_backward_out(const Tensor& grad, const Tensor& self, const at::Scalar& lambd,
                            Tensor& out) {
  shrink_backward_into("shrink_backward", grad, self, lambd, out);
  return out;
}

Tensor& i0_inplace(Tensor& self) {
  unary_into<LOOM_SPECIAL_I0>("i0_", self, self);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define REG(NAME, FN)           \
  LOOM_IMPL(m, NAME, FN);       \
  LOOM_IMPL(m, NAME ".out", FN##_out);
  REG("i0", i0)
  LOOM_IMPL(m, "i0_", i0_inplace);
  REG("special_i0e", i0e)
  REG("special_i1", i1)
  REG("special_i1e", i1e)
  REG("special_ndtri", ndtri)
  REG("special_erfcx", erfcx)
  REG("special_log_ndtr", log_ndtr)
  REG("special_spherical_bessel_j0", sph_j0)
  REG("special_airy_ai", airy_ai)
  REG("special_bessel_j0", bessel_j0)
  REG("special_bessel_j1", bessel_j1)
  REG("special_bessel_y0", bessel_y0)
  REG("special_bessel_y1", bessel_y1)
  REG("special_modified_bessel_i0", mod_i0)
  REG("special_modified_bessel_i1", mod_i1)
  REG("special_modified_bessel_k0", mod_k0)
  REG("special_modified_bessel_k1", mod_k1)
  REG("special_scaled_modified_bessel_k0", scaled_k0)
  REG("special_scaled_modified_bessel_k1", scaled_k1)
  REG("special_chebyshev_polynomial_t", cheb_t)
  REG("special_chebyshev_polynomial_u", cheb_u)
  REG("special_chebyshev_polynomial_v", cheb_v)
  REG("special_chebyshev_polynomial_w", cheb_w)
  REG("special_shifted_chebyshev_polynomial_t", scheb_t)
  REG("special_shifted_chebyshev_polynomial_u", scheb_u)
  REG("special_shifted_chebyshev_polynomial_v", scheb_v)
  REG("special_shifted_chebyshev_polynomial_w", scheb_w)
  REG("special_hermite_polynomial_h", herm_h)
  REG("special_hermite_polynomial_he", herm_he)
  REG("special_laguerre_polynomial_l", lag_l)
  REG("special_legendre_polynomial_p", leg_p)
#undef REG
  LOOM_IMPL(m, "hardshrink", hardshrink);
  LOOM_IMPL(m, "hardshrink.out", hardshrink_out);
  LOOM_IMPL(m, "softshrink", softshrink);
  LOOM_IMPL(m, "softshrink.out", softshrink_out);
  LOOM_IMPL(m, "hardshrink_backward", shrink_backward);
  LOOM_IMPL(m, "hardshrink_backward.grad_input", shrink_backward_out);
  LOOM_IMPL(m, "softshrink_backward", shrink_backward);
  LOOM_IMPL(m, "softshrink_backward.grad_input", shrink_backward_out);
}

}  // namespace torch_loom::special_fn
