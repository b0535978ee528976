// Complex matrix products on loom from real ones (complex_gemm.h).
#include "ops/gemm/complex_gemm.h"

namespace torch_loom {

bool complex_gemm_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kComplexFloat || t.scalar_type() == at::kComplexDouble;
}

at::Tensor complex_product(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& f,
                           const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.resolve_conj().resolve_neg(), y = b.resolve_conj().resolve_neg();
  const at::Tensor xr = at::real(x), xi = at::imag(x), yr = at::real(y), yi = at::imag(y);
  const at::Tensor re = f(xr, yr).sub_(f(xi, yi));
  const at::Tensor im = f(xr, yi).add_(f(xi, yr));
  return at::complex(re, im);
}

at::Tensor complex_combine(const at::Tensor& p, const at::Tensor& self, const c10::Scalar& beta,
                           const c10::Scalar& alpha) {
  const c10::complex<double> al = alpha.toComplexDouble(), be = beta.toComplexDouble();
  at::Tensor r = al == c10::complex<double>(1, 0) ? p : p.mul(alpha);
  if (!self.defined() || be == c10::complex<double>(0, 0)) return r;
  const at::Tensor s = self.expand(p.sizes());
  return be == c10::complex<double>(1, 0) ? r.add(s) : r.add(s.mul(beta));
}

}  // namespace torch_loom
