// Complex operands of the elementwise table (pointwise.cpp): the ops that
// "complex.apply" computes (loom/kernels/complex.h).
#pragma once

#include <ATen/core/stack.h>

#include "ops/pointwise/pointwise_iter.h"

namespace torch_loom::pw {

// Runs aten::<name> (add, sub, mul, div without rounding, neg, abs, angle,
// exp, log, sqrt, rsqrt, reciprocal, sin, cos, tan, sinh, cosh, tanh, asin,
// acos, atan, asinh, acosh, atanh, sigmoid, sgn, pow, where, tanh_backward,
// sigmoid_backward, in any of their
// overloads) on complex operands natively, leaving its result on `stack`;
// false, touching nothing, for a call it does not cover.
bool run_complex(const char* name, const Args& a, torch::jit::Stack* stack);

}  // namespace torch_loom::pw
