// ATen's device-generic compute kernels on sparse loom tensors: the kernels
// the CPU and CUDA both register for an op on a sparse layout, which work on
// a tensor's indices and values with dense ops (so on loom kernels) and
// call the layout-specific steps (add.out, addmm.out, _sparse_csr_sum,
// coalesce...) through the dispatcher, where loom runs them native or on
// the counted fallback. Registered explicitly because the structured ops'
// generated composite kernels would otherwise build a sparse `out` for
// their out= form, which no backend computes into.
#include <ATen/ATen.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/angle_native.h>
#include <ATen/ops/asin_native.h>
#include <ATen/ops/asinh_native.h>
#include <ATen/ops/atan_native.h>
#include <ATen/ops/atanh_native.h>
#include <ATen/ops/ceil_native.h>
#include <ATen/ops/deg2rad_native.h>
#include <ATen/ops/erf_native.h>
#include <ATen/ops/erfinv_native.h>
#include <ATen/ops/expm1_native.h>
#include <ATen/ops/floor_native.h>
#include <ATen/ops/frac_native.h>
#include <ATen/ops/isinf_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/isposinf_native.h>
#include <ATen/ops/log1p_native.h>
#include <ATen/ops/_sparse_mm_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/rad2deg_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/round_native.h>
#include <ATen/ops/sgn_native.h>
#include <ATen/ops/sign_native.h>
#include <ATen/ops/signbit_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sinh_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/tan_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/trunc_native.h>
#include <torch/library.h>

#include "register.h"

namespace torch_loom {
namespace {
namespace native = at::native;

// _sparse_mm is overloaded (a reduce form); this is the product.
at::Tensor sparse_mm(const at::Tensor& sparse, const at::Tensor& dense) {
  return native::_sparse_mm(sparse, dense);
}
}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // The sum of all elements is the sum of the values; a product with a
  // dense matrix is addmm into zeros.
  LOOM_IMPL(m, "sum", native::sum_coo);
  LOOM_IMPL(m, "mm", sparse_mm);
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  // Elementwise functions that keep zeros zero: the same op on the values.
  LOOM_IMPL(m, "sgn", native::sgn_sparse_csr);
  LOOM_IMPL(m, "sgn_", native::sgn_sparse_csr_);
  LOOM_IMPL(m, "sgn.out", native::sgn_sparse_csr_out);
  LOOM_IMPL(m, "asinh", native::asinh_sparse_csr);
  LOOM_IMPL(m, "asinh_", native::asinh_sparse_csr_);
  LOOM_IMPL(m, "asinh.out", native::asinh_sparse_csr_out);
  LOOM_IMPL(m, "atanh", native::atanh_sparse_csr);
  LOOM_IMPL(m, "atanh_", native::atanh_sparse_csr_);
  LOOM_IMPL(m, "atanh.out", native::atanh_sparse_csr_out);
  LOOM_IMPL(m, "asin", native::asin_sparse_csr);
  LOOM_IMPL(m, "asin_", native::asin_sparse_csr_);
  LOOM_IMPL(m, "asin.out", native::asin_sparse_csr_out);
  LOOM_IMPL(m, "atan", native::atan_sparse_csr);
  LOOM_IMPL(m, "atan_", native::atan_sparse_csr_);
  LOOM_IMPL(m, "atan.out", native::atan_sparse_csr_out);
  LOOM_IMPL(m, "ceil", native::ceil_sparse_csr);
  LOOM_IMPL(m, "ceil_", native::ceil_sparse_csr_);
  LOOM_IMPL(m, "ceil.out", native::ceil_sparse_csr_out);
  LOOM_IMPL(m, "erf", native::erf_sparse_csr);
  LOOM_IMPL(m, "erf_", native::erf_sparse_csr_);
  LOOM_IMPL(m, "erf.out", native::erf_sparse_csr_out);
  LOOM_IMPL(m, "expm1", native::expm1_sparse_csr);
  LOOM_IMPL(m, "expm1_", native::expm1_sparse_csr_);
  LOOM_IMPL(m, "expm1.out", native::expm1_sparse_csr_out);
  LOOM_IMPL(m, "floor", native::floor_sparse_csr);
  LOOM_IMPL(m, "floor_", native::floor_sparse_csr_);
  LOOM_IMPL(m, "floor.out", native::floor_sparse_csr_out);
  LOOM_IMPL(m, "frac", native::frac_sparse_csr);
  LOOM_IMPL(m, "frac_", native::frac_sparse_csr_);
  LOOM_IMPL(m, "frac.out", native::frac_sparse_csr_out);
  LOOM_IMPL(m, "log1p", native::log1p_sparse_csr);
  LOOM_IMPL(m, "log1p_", native::log1p_sparse_csr_);
  LOOM_IMPL(m, "log1p.out", native::log1p_sparse_csr_out);
  LOOM_IMPL(m, "neg", native::neg_sparse_csr);
  LOOM_IMPL(m, "neg_", native::neg_sparse_csr_);
  LOOM_IMPL(m, "neg.out", native::neg_sparse_csr_out);
  LOOM_IMPL(m, "round", native::round_sparse_csr);
  LOOM_IMPL(m, "round_", native::round_sparse_csr_);
  LOOM_IMPL(m, "round.out", native::round_sparse_csr_out);
  LOOM_IMPL(m, "sin", native::sin_sparse_csr);
  LOOM_IMPL(m, "sin_", native::sin_sparse_csr_);
  LOOM_IMPL(m, "sin.out", native::sin_sparse_csr_out);
  LOOM_IMPL(m, "sinh", native::sinh_sparse_csr);
  LOOM_IMPL(m, "sinh_", native::sinh_sparse_csr_);
  LOOM_IMPL(m, "sinh.out", native::sinh_sparse_csr_out);
  LOOM_IMPL(m, "sqrt", native::sqrt_sparse_csr);
  LOOM_IMPL(m, "sqrt_", native::sqrt_sparse_csr_);
  LOOM_IMPL(m, "sqrt.out", native::sqrt_sparse_csr_out);
  LOOM_IMPL(m, "tan", native::tan_sparse_csr);
  LOOM_IMPL(m, "tan_", native::tan_sparse_csr_);
  LOOM_IMPL(m, "tan.out", native::tan_sparse_csr_out);
  LOOM_IMPL(m, "tanh", native::tanh_sparse_csr);
  LOOM_IMPL(m, "tanh_", native::tanh_sparse_csr_);
  LOOM_IMPL(m, "tanh.out", native::tanh_sparse_csr_out);
  LOOM_IMPL(m, "trunc", native::trunc_sparse_csr);
  LOOM_IMPL(m, "trunc_", native::trunc_sparse_csr_);
  LOOM_IMPL(m, "trunc.out", native::trunc_sparse_csr_out);
  LOOM_IMPL(m, "erfinv", native::erfinv_sparse_csr);
  LOOM_IMPL(m, "erfinv_", native::erfinv_sparse_csr_);
  LOOM_IMPL(m, "erfinv.out", native::erfinv_sparse_csr_out);
  LOOM_IMPL(m, "sign", native::sign_sparse_csr);
  LOOM_IMPL(m, "sign_", native::sign_sparse_csr_);
  LOOM_IMPL(m, "sign.out", native::sign_sparse_csr_out);
  LOOM_IMPL(m, "abs", native::abs_sparse_csr);
  LOOM_IMPL(m, "abs_", native::abs_sparse_csr_);
  LOOM_IMPL(m, "abs.out", native::abs_sparse_csr_out);
  LOOM_IMPL(m, "rad2deg", native::rad2deg_sparse_csr);
  LOOM_IMPL(m, "rad2deg_", native::rad2deg_sparse_csr_);
  LOOM_IMPL(m, "rad2deg.out", native::rad2deg_sparse_csr_out);
  LOOM_IMPL(m, "deg2rad", native::deg2rad_sparse_csr);
  LOOM_IMPL(m, "deg2rad_", native::deg2rad_sparse_csr_);
  LOOM_IMPL(m, "deg2rad.out", native::deg2rad_sparse_csr_out);
  LOOM_IMPL(m, "signbit", native::signbit_sparse_csr);
  LOOM_IMPL(m, "signbit.out", native::signbit_sparse_csr_out);
  LOOM_IMPL(m, "isposinf", native::isposinf_sparse_csr);
  LOOM_IMPL(m, "isposinf.out", native::isposinf_sparse_csr_out);
  LOOM_IMPL(m, "isneginf", native::isneginf_sparse_csr);
  LOOM_IMPL(m, "isneginf.out", native::isneginf_sparse_csr_out);
  LOOM_IMPL(m, "angle", native::angle_sparse_csr);
  LOOM_IMPL(m, "angle.out", native::angle_sparse_csr_out);
  LOOM_IMPL(m, "isnan", native::isnan_sparse_csr);
  LOOM_IMPL(m, "isinf", native::isinf_sparse_csr);
  LOOM_IMPL(m, "relu", native::relu_sparse_csr);
  LOOM_IMPL(m, "relu_", native::relu_sparse_csr_);
  // Products, sums and the ReLU's gradient.
  LOOM_IMPL(m, "mul.Tensor", native::mul_sparse_csr);
  LOOM_IMPL(m, "mul_.Tensor", native::mul_sparse_csr_);
  LOOM_IMPL(m, "mul.out", native::mul_out_sparse_csr);
  LOOM_IMPL(m, "mul.Scalar", native::mul_scalar_sparse_csr);
  LOOM_IMPL(m, "mul_.Scalar", native::mul__scalar_sparse_csr);
  LOOM_IMPL(m, "add.Tensor", native::add_sparse_csr);
  LOOM_IMPL(m, "add_.Tensor", native::add_sparse_csr_);
  LOOM_IMPL(m, "sum", native::sum_csr);
  LOOM_IMPL(m, "sum.dim_IntList", native::sum_sparse_compressed);
  LOOM_IMPL(m, "mm", native::_sparse_csr_mm);
  LOOM_IMPL(m, "mm.out", native::_sparse_csr_mm_out);
  LOOM_IMPL(m, "addmm", native::addmm_sparse_compressed_dense);
  LOOM_IMPL(m, "threshold_backward", native::threshold_backward_sparse_compressed);
  LOOM_IMPL(m, "threshold_backward.grad_input",
            native::threshold_backward_sparse_compressed_out);
}

}  // namespace torch_loom
