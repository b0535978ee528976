// The elementwise ops on loom: one table row per aten op family, one boxed
// kernel per shape of op (unary, binary, comparison, ternary, backward).
// Each registered overload gets a functor that carries its table row, so a
// call costs no name lookup. TensorIterator computes output shape, dtype and
// strides exactly as the CPU backend does; the loops are in kernels/.
#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/pointwise/complex.h"
#include "ops/pointwise/pointwise_iter.h"
#include "register.h"
#include "runtime/fallback.h"

namespace torch_loom::pw {
namespace {

enum class Shape {
  kUnary,       // dtype kept (ints allowed unless kFloatOnly)
  kUnaryFloat,  // integer inputs promote to the default float dtype
  kUnaryBool,   // bool result
  kBinary,
  kBinaryFloat,
  kComparison,  // bool result (also logical and/or/xor)
  kDiv,         // div with an optional rounding mode
  kPowScalar,   // pow.Tensor_Scalar
  kClamp,       // clamp / clamp_min / clamp_max with Scalar bounds
  kClampTensor, // clamp / clamp_min / clamp_max with Tensor bounds
  kWhere,
  kTernary,     // lerp.Tensor, addcmul, addcdiv
  kBackward,    // (grad_output, forward input or result)
};

enum Types : unsigned {
  kBoolOk = 1, kIntOk = 2, kFloatOk = 4,
  kAll = kBoolOk | kIntOk | kFloatOk,
  kNoBool = kIntOk | kFloatOk,
  kFloatOnly = kFloatOk,
  kIntegral = kBoolOk | kIntOk,
};

struct Entry {
  const char* name;       // aten base name; the in-place form adds '_'
  const char* overloads;  // space separated; "-" is the default overload
  Shape shape;
  int op;
  unsigned types;
};

#define U(n, op, types) {#n, "- out", Shape::kUnary, LOOM_PW_##op, types}
#define UF(n, op) {#n, "- out", Shape::kUnaryFloat, LOOM_PW_##op, kAll}
#define BIN(n, ovl, op, types) {#n, ovl, Shape::kBinary, LOOM_PW_##op, types}
#define CMP(n, op) {#n, "Tensor Scalar Tensor_out Scalar_out", Shape::kComparison, LOOM_PW_##op, kAll}
#define BWD(n, op) {#n, "- grad_input", Shape::kBackward, LOOM_PW_##op, kFloatOnly}

const Entry kEntries[] = {
    U(abs, ABS, kNoBool), U(neg, NEG, kNoBool), U(sign, SIGN, kAll),
    U(sgn, SIGN, kAll), U(floor, FLOOR, kNoBool), U(ceil, CEIL, kNoBool),
    {"round", "- out decimals decimals_out", Shape::kUnary, LOOM_PW_ROUND, kNoBool},
    U(trunc, TRUNC, kNoBool), U(frac, FRAC, kFloatOnly),
    {"relu", "-", Shape::kUnary, LOOM_PW_RELU, kNoBool},
    U(gelu, GELU, kFloatOnly), U(silu, SILU, kFloatOnly),
    U(mish, MISH, kFloatOnly), U(softplus, SOFTPLUS, kFloatOnly),
    U(leaky_relu, LEAKY_RELU, kFloatOnly), U(elu, ELU, kFloatOnly),
    U(hardtanh, HARDTANH, kNoBool), U(hardsigmoid, HARDSIGMOID, kFloatOnly),
    U(hardswish, HARDSWISH, kFloatOnly), U(nan_to_num, NAN_TO_NUM, kAll),
    U(bitwise_not, BITWISE_NOT, kIntegral), U(threshold, THRESHOLD, kNoBool),
    UF(exp, EXP), UF(exp2, EXP2), UF(expm1, EXPM1), UF(log, LOG),
    UF(log2, LOG2), UF(log10, LOG10), UF(log1p, LOG1P), UF(sqrt, SQRT),
    UF(rsqrt, RSQRT), UF(sin, SIN), UF(cos, COS), UF(tan, TAN), UF(asin, ASIN),
    UF(acos, ACOS), UF(atan, ATAN), UF(sinh, SINH), UF(cosh, COSH),
    UF(tanh, TANH), UF(asinh, ASINH), UF(acosh, ACOSH), UF(atanh, ATANH),
    UF(sigmoid, SIGMOID), UF(logit, LOGIT), UF(erf, ERF), UF(erfc, ERFC),
    UF(erfinv, ERFINV), UF(reciprocal, RECIPROCAL), UF(lgamma, LGAMMA),
    UF(digamma, DIGAMMA), UF(sinc, SINC), UF(angle, ANGLE), UF(special_entr, ENTR),
    {"isnan", "-", Shape::kUnaryBool, LOOM_PW_ISNAN, kAll},
    {"isposinf", "- out", Shape::kUnaryBool, LOOM_PW_ISPOSINF, kAll},
    {"isneginf", "- out", Shape::kUnaryBool, LOOM_PW_ISNEGINF, kAll},
    {"signbit", "- out", Shape::kUnaryBool, LOOM_PW_SIGNBIT, kAll},
    {"logical_not", "- out", Shape::kUnaryBool, LOOM_PW_LOGICAL_NOT, kAll},

    BIN(add, "Tensor Scalar out", ADD, kAll),
    BIN(sub, "Tensor Scalar out", SUB, kAll),
    BIN(rsub, "Tensor", SUB, kAll),
    BIN(mul, "Tensor Scalar out", MUL, kAll),
    {"div", "Tensor Scalar Tensor_mode Scalar_mode out out_mode", Shape::kDiv, LOOM_PW_DIV, kAll},
    {"floor_divide", "- Scalar out", Shape::kDiv, LOOM_PW_DIV_FLOOR, kNoBool},
    {"floor_divide", "Tensor", Shape::kDiv, LOOM_PW_DIV_FLOOR, kNoBool},
    BIN(remainder, "Tensor Scalar Tensor_out Scalar_Tensor", REMAINDER, kNoBool),
    BIN(fmod, "Tensor Scalar Tensor_out", FMOD, kNoBool),
    BIN(pow, "Tensor_Tensor Tensor_Tensor_out Scalar Scalar_out Tensor", POW, kNoBool),
    {"pow", "Tensor_Scalar Tensor_Scalar_out", Shape::kPowScalar, LOOM_PW_POW_SCALAR, kNoBool},
    {"atan2", "- out", Shape::kBinaryFloat, LOOM_PW_ATAN2, kAll},
    BIN(maximum, "- out", MAXIMUM, kAll), BIN(minimum, "- out", MINIMUM, kAll),
    BIN(fmax, "- out", FMAX, kAll), BIN(fmin, "- out", FMIN, kAll),
    CMP(eq, EQ), CMP(ne, NE), CMP(lt, LT), CMP(le, LE), CMP(gt, GT), CMP(ge, GE),
    {"logical_and", "- out", Shape::kComparison, LOOM_PW_LOGICAL_AND, kAll},
    {"logical_or", "- out", Shape::kComparison, LOOM_PW_LOGICAL_OR, kAll},
    {"logical_xor", "- out", Shape::kComparison, LOOM_PW_LOGICAL_XOR, kAll},
    BIN(bitwise_and, "Tensor Scalar Tensor_out", BITWISE_AND, kIntegral),
    BIN(bitwise_or, "Tensor Scalar Tensor_out", BITWISE_OR, kIntegral),
    BIN(bitwise_xor, "Tensor Scalar Tensor_out", BITWISE_XOR, kIntegral),
    BIN(bitwise_left_shift, "Tensor Tensor_out Tensor_Scalar", LSHIFT, kIntOk),
    BIN(bitwise_right_shift, "Tensor Tensor_out Tensor_Scalar", RSHIFT, kIntOk),
    BIN(__lshift__, "Tensor Scalar", LSHIFT, kIntOk),
    BIN(__rshift__, "Tensor Scalar", RSHIFT, kIntOk),
    {"copysign", "Tensor Scalar out", Shape::kBinaryFloat, LOOM_PW_COPYSIGN, kAll},
    BIN(hypot, "- out", HYPOT, kFloatOnly),
    BIN(nextafter, "- out", NEXTAFTER, kFloatOnly),
    BIN(igamma, "- out", IGAMMA, kFloatOnly), BIN(igammac, "- out", IGAMMAC, kFloatOnly),
    BIN(logaddexp, "- out", LOGADDEXP, kFloatOnly),
    BIN(logaddexp2, "- out", LOGADDEXP2, kFloatOnly),
    BIN(heaviside, "- out", HEAVISIDE, kAll),
    {"xlogy", "Tensor OutTensor Scalar_Other", Shape::kBinaryFloat, LOOM_PW_XLOGY, kAll},
    {"special_xlog1py", "- out self_scalar self_scalar_out other_scalar other_scalar_out",
     Shape::kBinaryFloat, LOOM_PW_XLOG1PY, kAll},
    {"special_zeta", "- out self_scalar self_scalar_out other_scalar other_scalar_out",
     Shape::kBinaryFloat, LOOM_PW_ZETA, kNoBool},
    BIN(lerp, "Scalar Scalar_out", LERP_SCALAR, kFloatOnly),
    {"lerp", "Tensor Tensor_out", Shape::kTernary, LOOM_PW_LERP, kFloatOnly},
    {"addcmul", "- out", Shape::kTernary, LOOM_PW_ADDCMUL, kNoBool},
    {"addcdiv", "- out", Shape::kTernary, LOOM_PW_ADDCDIV, kFloatOnly},
    {"where", "self self_out", Shape::kWhere, LOOM_PW_WHERE, kAll},
    {"clamp", "- out", Shape::kClamp, LOOM_PW_CLAMP, kNoBool},
    {"clamp_min", "- out", Shape::kClamp, LOOM_PW_CLAMP, kNoBool},
    {"clamp_max", "- out", Shape::kClamp, LOOM_PW_CLAMP, kNoBool},
    {"clamp", "Tensor Tensor_out", Shape::kClampTensor, LOOM_PW_CLAMP_T, kNoBool},
    {"clamp_min", "Tensor Tensor_out", Shape::kClampTensor, LOOM_PW_CLAMP_MIN_T, kAll},
    {"clamp_max", "Tensor Tensor_out", Shape::kClampTensor, LOOM_PW_CLAMP_MAX_T, kAll},

    {"threshold_backward", "- grad_input", Shape::kBackward, LOOM_PW_THRESHOLD_BACKWARD, kNoBool},
    BWD(sigmoid_backward, SIGMOID_BACKWARD), BWD(tanh_backward, TANH_BACKWARD),
    BWD(gelu_backward, GELU_BACKWARD), BWD(silu_backward, SILU_BACKWARD),
    {"hardswish_backward", "-", Shape::kBackward, LOOM_PW_HARDSWISH_BACKWARD, kFloatOnly},
    {"mish_backward", "-", Shape::kBackward, LOOM_PW_MISH_BACKWARD, kFloatOnly},
    BWD(leaky_relu_backward, LEAKY_RELU_BACKWARD), BWD(elu_backward, ELU_BACKWARD),
    BWD(softplus_backward, SOFTPLUS_BACKWARD),
    BWD(hardtanh_backward, HARDTANH_BACKWARD),
    BWD(hardsigmoid_backward, HARDSIGMOID_BACKWARD),
    BWD(logit_backward, LOGIT_BACKWARD),
};

#undef U
#undef UF
#undef BIN
#undef CMP
#undef BWD

void check_types(const Entry& e, at::ScalarType t) {
  const unsigned cls = t == at::kBool ? unsigned(kBoolOk)
                       : at::isIntegralType(t, false) ? unsigned(kIntOk)
                       : at::isFloatingType(t) ? unsigned(kFloatOk) : 0u;
  TORCH_CHECK_NOT_IMPLEMENTED((cls & e.types) != 0, "\"", e.name,
                              "\" not implemented for '", t, "'");
}

// The iterator's output for the call's variant: self (in place), out=, or
// undefined (allocated by the iterator).
at::Tensor out_for(const Args& a) {
  if (a.inplace()) return a.tensor("self");
  return a.out();
}

at::Tensor result_of(const Args& a, const at::TensorIteratorBase& iter) {
  return iter.output(0);
}

double float_max(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 65504.0;
    case at::kBFloat16: return 3.3895313892515355e38;
    case at::kFloat: return FLT_MAX;
    default: return DBL_MAX;
  }
}

// Parameters of a unary op from its arguments; may change the op.
void unary_params(const Entry& e, const Args& a, at::ScalarType dtype,
                  loom_pw_kind kind, int* op, loom_scalar* p) {
  switch (e.op) {
    case LOOM_PW_ROUND: {
      const int64_t decimals = a.scalar("decimals", 0).toLong();
      if (decimals != 0) {
        TORCH_CHECK_NOT_IMPLEMENTED(kind != LOOM_PW_I64, "\"round_cpu\" not implemented for '", dtype, "'");
        *op = LOOM_PW_ROUND_DECIMALS;
        p[0] = scalar_i(decimals);
      }
      break;
    }
    case LOOM_PW_LOGIT: {
      auto eps = a.opt_scalar("eps");
      p[0] = scalar_f(eps ? eps->toDouble() : -1.0);
      break;
    }
    case LOOM_PW_GELU:
      if (a.str("approximate", "none") == "tanh") *op = LOOM_PW_GELU_TANH;
      break;
    case LOOM_PW_SOFTPLUS:
      p[0] = param(a.scalar("beta", 1), kind);
      p[1] = param(a.scalar("threshold", 20), kind);
      break;
    case LOOM_PW_LEAKY_RELU: p[0] = param(a.scalar("negative_slope", 0.01), kind); break;
    case LOOM_PW_ELU:
      p[0] = param(a.scalar("alpha", 1), kind);
      p[1] = param(a.scalar("scale", 1), kind);
      p[2] = param(a.scalar("input_scale", 1), kind);
      break;
    case LOOM_PW_HARDTANH:
      TORCH_CHECK(dtype != at::kByte || (a.scalar("min_val", -1).toLong() >= 0 &&
                                         a.scalar("max_val", 1).toLong() >= 0),
                  "cannot do hardtanh on an unsigned type with negative limits");
      p[0] = param(a.scalar("min_val", -1), kind);
      p[1] = param(a.scalar("max_val", 1), kind);
      break;
    case LOOM_PW_THRESHOLD:
      p[0] = param(a.scalar("threshold"), kind);
      p[1] = param(a.scalar("value"), kind);
      break;
    case LOOM_PW_NAN_TO_NUM: {
      if (kind == LOOM_PW_I64) { *op = LOOM_PW_IDENTITY; break; }
      const double big = float_max(dtype);
      auto nan = a.opt_scalar("nan"), pos = a.opt_scalar("posinf"), neg = a.opt_scalar("neginf");
      p[0] = scalar_f(nan ? nan->toDouble() : 0.0);
      p[1] = scalar_f(pos ? pos->toDouble() : big);
      p[2] = scalar_f(neg ? neg->toDouble() : -big);
      break;
    }
    case LOOM_PW_BITWISE_NOT:
      if (dtype == at::kBool) *op = LOOM_PW_LOGICAL_NOT;
      break;
    default: break;
  }
}

void run_unary(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor self = a.tensor("self");
  at::Tensor out = out_for(a);
  at::TensorIterator iter;
  // the CPU's own messages, ahead of the dtype check's generic one
  TORCH_CHECK(!(e.op == LOOM_PW_NEG && self.scalar_type() == at::kBool),
              "Negation, the `-` operator, on a bool tensor is not "
              "supported. If you are trying to invert a mask, use the `~` "
              "or `logical_not()` operator instead.");
  TORCH_CHECK(!(e.op == LOOM_PW_HARDTANH && self.scalar_type() == at::kBool),
              "Bool inputs not supported for hardtanh");
  check_types(e, self.scalar_type());
  switch (e.shape) {
    case Shape::kUnaryFloat: iter.build_borrowing_unary_float_op(out, self); break;
    case Shape::kUnaryBool:
      if (e.op == LOOM_PW_LOGICAL_NOT) {
        if (!out.defined()) out = at::empty({0}, self.options().dtype(at::kBool));
        at::TensorIteratorConfig config;
        config.check_all_same_dtype(false).add_output(out).add_const_input(self);
        iter.build(config);
      } else {
        iter.build_borrowing_unary_force_boolean_op(out, self);
      }
      break;
    default: iter.build_borrowing_unary_op(out, self);
  }
  const at::ScalarType in_type = iter.dtype(1);
  const loom_pw_kind kind = kind_of(
      e.shape == Shape::kUnaryFloat ? iter.common_dtype() : in_type, e.name);
  int op = e.op;
  loom_scalar p[4] = {};
  unary_params(e, a, in_type, kind, &op, p);
  launch_iter(e.name, iter, op, kind, p,
              e.shape == Shape::kUnaryFloat ? iter.common_dtype() : at::ScalarType::Undefined);
  finish(stack, a, result_of(a, iter));
}

bool is_int_division(int op) {
  return op == LOOM_PW_DIV_TRUNC || op == LOOM_PW_DIV_FLOOR ||
         op == LOOM_PW_REMAINDER || op == LOOM_PW_FMOD;
}

void run_binary(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  const bool pow = e.op == LOOM_PW_POW;
  at::Tensor self = a.tensor("self");
  at::Tensor other = a.tensor(pow                            ? "exponent"
                              : e.op == LOOM_PW_LERP_SCALAR  ? "end"
                              : e.op == LOOM_PW_HEAVISIDE    ? "values"
                                                             : "other");
  TORCH_CHECK(e.op != LOOM_PW_HEAVISIDE || self.scalar_type() == other.scalar_type(),
              "heaviside is not yet implemented for tensors with different dtypes");
  if (std::strcmp(e.name, "rsub") == 0) std::swap(self, other);
  at::Tensor out = out_for(a);
  at::TensorIterator iter;
  int op = e.op;
  loom_scalar p[4] = {};
  switch (e.shape) {
    case Shape::kBinaryFloat: iter.build_borrowing_binary_float_op(out, self, other); break;
    case Shape::kComparison: iter.build_borrowing_comparison_op(out, self, other); break;
    case Shape::kDiv: {
      std::string mode = a.str("rounding_mode", "");
      if (e.op == LOOM_PW_DIV_FLOOR) mode = "floor";
      TORCH_CHECK(mode.empty() || mode == "trunc" || mode == "floor",
                  "div expected rounding_mode to be one of None, 'trunc', or "
                  "'floor' but found '", mode, "'");
      if (mode.empty()) {
        iter.build_borrowing_binary_float_op(out, self, other);
        op = LOOM_PW_DIV;
      } else {
        iter.build_borrowing_binary_op(out, self, other);
        op = mode == "trunc" ? LOOM_PW_DIV_TRUNC : LOOM_PW_DIV_FLOOR;
      }
      break;
    }
    default:
      if (e.op == LOOM_PW_SUB) at::native::sub_check(self, other);
      iter.build_borrowing_binary_op(out, self, other);
  }
  const at::ScalarType common = iter.common_dtype();
  if (e.shape != Shape::kComparison) check_types(e, common);
  const loom_pw_kind kind = kind_of(common, e.name);
  if (e.op == LOOM_PW_ADD || e.op == LOOM_PW_SUB) {
    const at::Scalar alpha = a.scalar("alpha", 1);
    at::native::alpha_check(common, alpha);
    check_fits(common, alpha);
    p[0] = kind == LOOM_PW_I64 ? param(alpha, kind)
                               : scalar_f(narrow_scalar(alpha.toDouble(), common));
  } else if ((e.op == LOOM_PW_XLOGY || e.op == LOOM_PW_XLOG1PY) &&
             (common == at::kHalf || common == at::kBFloat16)) {
    op = LOOM_PW_XLOGY_16BIT;
    p[0] = scalar_f(e.op == LOOM_PW_XLOG1PY ? 1.0 : 0.0);
    p[1] = scalar_f(common == at::kBFloat16 ? 1.0 : 0.0);
  } else if (e.op == LOOM_PW_LERP_SCALAR) {
    TORCH_CHECK(self.scalar_type() == other.scalar_type(), "expected dtype ",
                self.scalar_type(), " for `end` but got dtype ", other.scalar_type());
    p[0] = param(a.scalar("weight"), kind);
  }
  // The CPU casts a number operand to a float16 / bfloat16 common dtype,
  // except the second operand of mul and div, read as float (mul_.Scalar
  // passes its number as the first: mul_out(self, number, self)).
  const c10::IValue* second_arg = a.find("other");
  const bool number_first = e.op == LOOM_PW_MUL && a.inplace() && second_arg &&
                            second_arg->isScalar();
  const bool keeps = !number_first && (op == LOOM_PW_MUL || op == LOOM_PW_DIV ||
                                       op == LOOM_PW_DIV_TRUNC || op == LOOM_PW_DIV_FLOOR);
  launch_iter(e.name, iter, op, kind, p, common, keeps ? 2 : -1);
  if (kind == LOOM_PW_I64 && is_int_division(op)) check_division(e.name, iter);
  finish(stack, a, result_of(a, iter));
}

void run_pow_scalar(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor base = a.tensor("self");
  const at::Scalar exp = a.scalar("exponent");
  TORCH_CHECK(!(at::isIntegralType(base.scalar_type(), true) &&
                exp.isIntegral(true) && exp.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
  const at::ScalarType common = at::result_type(base, exp);
  check_types(e, common);
  at::Tensor out = out_for(a);
  at::Tensor cast = base.scalar_type() == common ? base : base.to(common);
  at::TensorIterator iter;
  iter.build_output_borrowing_argument_owning_unary_op(out, cast);
  const loom_pw_kind kind = kind_of(common, e.name);
  int op = LOOM_PW_POW_SCALAR;
  // float16 / bfloat16 raise to the exponent cast to their dtype, as the CPU
  if (common == at::kHalf || common == at::kBFloat16) check_fits(common, exp);
  loom_scalar p[4] = {kind == LOOM_PW_I64 ? param(exp, kind)
                                          : scalar_f(narrow_scalar(exp.toDouble(), common))};
  if (kind != LOOM_PW_I64) {
    const double x = exp.toDouble();
    if (x == 2.0) op = LOOM_PW_SQUARE;
    else if (x == 0.5) op = LOOM_PW_SQRT;
    else if (x == -1.0) op = LOOM_PW_RECIPROCAL;
    else if (x == -0.5) op = LOOM_PW_RSQRT;
    else if (x == 1.0) op = LOOM_PW_IDENTITY;
  }
  const double cast_exp = narrow_scalar(exp.toDouble(), common);
  if (common == at::kBFloat16 && (cast_exp == 3.0 || cast_exp == -2.0)) {
    // The CPU cubes bfloat16 (and inverts its square) in bfloat16 steps:
    // x * x rounded, then times x (or inverted) and rounded again; an out=
    // of another dtype gets that bfloat16 result.
    at::Tensor square = at::empty_like(cast);
    at::TensorIterator first;
    first.build_output_borrowing_argument_owning_unary_op(square, cast);
    launch_iter(e.name, first, LOOM_PW_SQUARE, kind, p);
    const at::Tensor& result = iter.output(0);
    at::Tensor dst = result.scalar_type() == common ? result : at::empty_like(square);
    at::TensorIterator second;
    if (cast_exp == 3.0) {
      second.build_borrowing_binary_op(dst, square, cast);
      launch_iter(e.name, second, LOOM_PW_MUL, kind, p);
    } else {
      second.build_borrowing_unary_op(dst, square);
      launch_iter(e.name, second, LOOM_PW_RECIPROCAL, kind, p);
    }
    if (!dst.is_same(result)) result.copy_(dst);
    finish(stack, a, result_of(a, iter));
    return;
  }
  launch_iter(e.name, iter, op, kind, p, common);
  finish(stack, a, result_of(a, iter));
}

void run_clamp(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor self = a.tensor("self");
  const bool is_min = std::strcmp(e.name, "clamp_min") == 0;
  const bool is_max = std::strcmp(e.name, "clamp_max") == 0;
  std::optional<at::Scalar> lo = is_max ? std::nullopt : a.opt_scalar("min");
  std::optional<at::Scalar> hi = is_min ? std::nullopt : a.opt_scalar("max");
  TORCH_CHECK(lo || hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  // clamp promotes with its bounds as numbers (clamp_min/max do not), and
  // never beyond floating types.
  at::ScalarType type = self.scalar_type();
  if (!is_min && !is_max && !at::isFloatingType(type)) {
    at::native::ResultTypeState state = {};
    state = at::native::update_result_type_state(self, state);
    if (lo) state = at::native::update_result_type_state(*lo, state);
    if (hi) state = at::native::update_result_type_state(*hi, state);
    type = at::native::result_type(state);
    TORCH_CHECK(type == self.scalar_type() || !a.inplace(), "result type ", type,
                " can't be cast to the desired output type ", self.scalar_type());
  }
  check_types(e, type);
  at::Tensor out = out_for(a);
  at::Tensor cast = self.scalar_type() == type ? self : self.to(type);
  at::TensorIterator iter;
  iter.build_output_borrowing_argument_owning_unary_op(out, cast);
  const loom_pw_kind kind = kind_of(type, e.name);
  loom_scalar p[4];
  if (kind == LOOM_PW_I64) {
    p[0] = scalar_i(lo ? lo->toLong() : std::numeric_limits<int64_t>::min());
    p[1] = scalar_i(hi ? hi->toLong() : std::numeric_limits<int64_t>::max());
  } else {
    p[0] = scalar_f(lo ? lo->toDouble() : -INFINITY);
    p[1] = scalar_f(hi ? hi->toDouble() : INFINITY);
  }
  launch_iter(e.name, iter, LOOM_PW_CLAMP, kind, p);
  finish(stack, a, result_of(a, iter));
}

at::TensorIteratorConfig promoting_config(const at::Tensor& out) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true)
      .add_output(out)
      .promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true);
  return config;
}

void run_clamp_tensor(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor self = a.tensor("self");
  std::optional<at::Tensor> lo = a.opt_tensor("min"), hi = a.opt_tensor("max");
  if (e.op == LOOM_PW_CLAMP_MIN_T) hi.reset();
  if (e.op == LOOM_PW_CLAMP_MAX_T) lo.reset();
  TORCH_CHECK(lo || hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::Tensor out = out_for(a);
  at::TensorIteratorConfig config = promoting_config(out);
  config.add_const_input(self);
  int op = LOOM_PW_CLAMP_T;
  if (lo) config.add_const_input(*lo);
  if (hi) config.add_const_input(*hi);
  if (!lo) op = LOOM_PW_CLAMP_MAX_T;
  if (!hi) op = LOOM_PW_CLAMP_MIN_T;
  at::TensorIterator iter;
  iter.build(config);
  // One-sided tensor bounds are a maximum / minimum: bool is fine, as on the CPU.
  if (op == LOOM_PW_CLAMP_T || iter.common_dtype() != at::kBool) check_types(e, iter.common_dtype());
  const loom_scalar p[4] = {};
  launch_iter(e.name, iter, op, kind_of(iter.common_dtype(), e.name), p, iter.common_dtype());
  finish(stack, a, result_of(a, iter));
}

void run_where(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor cond = a.tensor("condition");
  at::Tensor self = a.tensor("self"), other = a.tensor("other");
  const at::ScalarType type = at::result_type(self, other);
  at::Tensor out = a.out();
  if (!out.defined()) out = at::empty({0}, self.options().dtype(type));
  TORCH_CHECK(out.scalar_type() == type, "Expected out type to be ", type,
              " but got ", out.scalar_type());
  const auto device = out.device();
  auto place = [&](at::Tensor t, bool cast) {
    if (cast && t.scalar_type() != type) t = t.to(type);
    if (t.device() != device && t.dim() == 0) t = t.to(device);
    return t;
  };
  self = place(self, true);
  other = place(other, true);
  cond = place(cond, false);
  if (cond.scalar_type() == at::kByte) cond = cond.to(at::kBool);
  TORCH_CHECK(cond.scalar_type() == at::kBool,
              "where expected condition to be a boolean tensor, but got a "
              "tensor with dtype ", cond.scalar_type());
  at::TensorIterator iter;
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(out).add_const_input(cond)
      .add_const_input(self).add_const_input(other);
  iter.build(config);
  const loom_scalar p[4] = {};
  launch_iter(e.name, iter, LOOM_PW_WHERE, kind_of(type, e.name), p);
  finish(stack, a, out);
}

void run_ternary(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor self = a.tensor("self");
  at::Tensor x, y;
  if (e.op == LOOM_PW_LERP) {
    x = a.tensor("end");
    y = a.tensor("weight");
    TORCH_CHECK(self.scalar_type() == x.scalar_type(), "expected dtype ",
                self.scalar_type(), " for `end` but got dtype ", x.scalar_type());
    TORCH_CHECK(self.scalar_type() == y.scalar_type(), "expected dtype ",
                self.scalar_type(), " for `weight` but got dtype ", y.scalar_type());
  } else {
    x = a.tensor("tensor1");
    y = a.tensor("tensor2");
  }
  if (e.op == LOOM_PW_ADDCDIV)
    TORCH_CHECK(!(at::isIntegralType(x.scalar_type(), true) &&
                  at::isIntegralType(y.scalar_type(), true)),
                "Integer division with addcdiv is no longer supported, and in "
                "a future release addcdiv will perform a true division of "
                "tensor1 and tensor2. The historic addcdiv behavior can be "
                "implemented as (input + value * torch.trunc(tensor1 / "
                "tensor2)).to(input.dtype) for integer inputs and as (input + "
                "value * tensor1 / tensor2) for float inputs. The future "
                "addcdiv behavior is just the latter implementation: (input + "
                "value * tensor1 / tensor2), for all dtypes.");
  at::Tensor out = out_for(a);
  at::TensorIterator iter;
  iter.build_ternary_op(out, self, x, y);
  check_types(e, iter.common_dtype());
  const loom_pw_kind kind = kind_of(iter.common_dtype(), e.name);
  loom_scalar p[4] = {};
  if (e.op != LOOM_PW_LERP) p[0] = param(a.scalar("value", 1), kind);
  launch_iter(e.name, iter, e.op, kind, p, iter.common_dtype());
  finish(stack, a, result_of(a, iter));
}

void run_backward(const Entry& e, const Args& a, torch::jit::Stack* stack) {
  at::Tensor grad = a.tensor("grad_output");
  const char* second = "self";
  for (const char* n : {"self", "output", "self_or_result"})
    if (a.find(n)) { second = n; break; }
  at::Tensor x = a.tensor(second);
  at::Tensor out = a.out();
  // The CPU's threshold_backward and leaky_relu_backward iterate over self,
  // then the gradient (the others the other way round): where their layouts
  // differ (a channels-last input, a contiguous gradient), the result takes
  // self's, as there.
  if (!out.defined() && !a.inplace() && grad.strides() != x.strides() &&
      (e.op == LOOM_PW_THRESHOLD_BACKWARD || e.op == LOOM_PW_LEAKY_RELU_BACKWARD))
    out = empty_elementwise({x, grad}, at::result_type(grad, x));
  at::TensorIterator iter;
  iter.build_borrowing_binary_op(out, grad, x);
  check_types(e, iter.common_dtype());
  const loom_pw_kind kind = kind_of(iter.common_dtype(), e.name);
  int op = e.op;
  loom_scalar p[4] = {};
  switch (e.op) {
    case LOOM_PW_THRESHOLD_BACKWARD: p[0] = param(a.scalar("threshold"), kind); break;
    case LOOM_PW_GELU_BACKWARD:
      if (a.str("approximate", "none") == "tanh") op = LOOM_PW_GELU_TANH_BACKWARD;
      break;
    case LOOM_PW_LEAKY_RELU_BACKWARD: p[0] = param(a.scalar("negative_slope"), kind); break;
    case LOOM_PW_ELU_BACKWARD:
      p[0] = param(a.scalar("alpha"), kind);
      p[1] = param(a.scalar("scale"), kind);
      p[2] = param(a.scalar("input_scale"), kind);
      p[3] = scalar_f(a.flag("is_result") ? 1.0 : 0.0);
      break;
    case LOOM_PW_SOFTPLUS_BACKWARD:
      p[0] = param(a.scalar("beta"), kind);
      p[1] = param(a.scalar("threshold"), kind);
      break;
    case LOOM_PW_HARDTANH_BACKWARD:
      p[0] = param(a.scalar("min_val"), kind);
      p[1] = param(a.scalar("max_val"), kind);
      break;
    case LOOM_PW_LOGIT_BACKWARD: {
      auto eps = a.opt_scalar("eps");
      p[0] = scalar_f(eps ? eps->toDouble() : -1.0);
      break;
    }
    default: break;
  }
  launch_iter(e.name, iter, op, kind, p, iter.common_dtype());
  finish(stack, a, iter.output(0));
}

// Complex inputs: the ops complex.cpp covers run there, others on the CPU.
bool has_complex(const Args& a, torch::jit::Stack* stack) {
  for (size_t i = stack->size() - a.size(); i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_complex()) return true;
    if (v.isScalar() && v.toScalar().isComplex()) return true;
  }
  return false;
}

void run_entry(const Entry& e, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Args a(op.schema(), stack);
  if (has_complex(a, stack)) {
    if (run_complex(e.name, a, stack)) return;
    loom_cpu_fallback(op, stack);
    return;
  }
  if (e.op == LOOM_PW_NEXTAFTER || e.op == LOOM_PW_IGAMMA || e.op == LOOM_PW_IGAMMAC) {
    // float16/bfloat16 step in their own encodings (nextafter) or compute
    // in them step by step on the CPU (igamma, igammac); the kernel covers
    // float and double, the rest runs on the CPU, counted
    const at::ScalarType t = at::result_type(a.tensor("self"), a.tensor("other"));
    if (t == at::kHalf || t == at::kBFloat16) {
      loom_cpu_fallback(op, stack);
      return;
    }
  }
  switch (e.shape) {
    case Shape::kUnary:
    case Shape::kUnaryFloat:
    case Shape::kUnaryBool: run_unary(e, a, stack); break;
    case Shape::kPowScalar: run_pow_scalar(e, a, stack); break;
    case Shape::kClamp: run_clamp(e, a, stack); break;
    case Shape::kClampTensor: run_clamp_tensor(e, a, stack); break;
    case Shape::kWhere: run_where(e, a, stack); break;
    case Shape::kTernary: run_ternary(e, a, stack); break;
    case Shape::kBackward: run_backward(e, a, stack); break;
    default: run_binary(e, a, stack); break;
  }
}

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(const Entry* e) : entry(e) {}
  const Entry* entry;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                  torch::jit::Stack* stack) {
    run_entry(*entry, op, stack);
  }
};

const Entry* find_entry(const char* name, const char* overload);

void register_entry(torch::Library& m, const Entry& e) {
  for (const std::string& base : {std::string(e.name), std::string(e.name) + "_"})
    for_each_overload(base, e.overloads, [&](const std::string& full) {
      if (has_fast_kernel(full)) return;
      // pow.Scalar is number ** tensor, but pow_.Scalar is tensor **= number:
      // pow.Tensor_Scalar's row
      const Entry* row = full == "pow_.Scalar" ? find_entry("pow", "Tensor_Scalar") : &e;
      impl_boxed<Kernel>(m, full.c_str(), row);
    });
}

// The row of aten::<name> whose overload list holds `overload`.
const Entry* find_entry(const char* name, const char* overload) {
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, name) != 0) continue;
    const std::string list = std::string(" ") + e.overloads + " ";
    if (list.find(std::string(" ") + overload + " ") != std::string::npos) return &e;
  }
  return nullptr;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const Entry& e : kEntries) register_entry(m, e);
}

}  // namespace

TableKernel::TableKernel(const char* name, const char* overload)
    : entry_(find_entry(name, overload)) {
  TORCH_INTERNAL_ASSERT(entry_, "no pointwise table row for aten::", name, ".", overload);
}

void TableKernel::run(const c10::OperatorHandle& op, torch::jit::Stack* stack) const {
  run_entry(*static_cast<const Entry*>(entry_), op, stack);
}
}  // namespace torch_loom::pw
