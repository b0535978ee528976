// The one way C++ glue runs a matrix multiply on loom: rank-4 descriptors
// (batch1, batch2, rows, cols), planned by "gemm.plan" and launched as its
// plan says (loom/kernels/gemm.h).
#pragma once

#include <ATen/ATen.h>

#include "common.h"

namespace torch_loom {

// Descriptor of `t` (rank <= 4) as rank 4: leading dims of size 1, stride 0.
loom_tensor gemm_view(const at::Tensor& t, const char* op);

// `d` with its last two dims swapped (a transposed view; no data moves).
loom_tensor gemm_transpose(loom_tensor d);

// `d` broadcast to `sizes` (right-aligned; size-1 dims get stride 0).
loom_tensor gemm_broadcast(loom_tensor d, const int64_t sizes[4]);

// How fp32 operands may be multiplied, as PyTorch's float32 matmul
// precision allows (LOOM_GEMM_MATH_* in loom/kernels/gemm.h): as they are,
// as one product of their bf16 roundings ("medium"), or as three products
// of their high and low bf16 parts ("high", about 16 bits of each operand
// kept). A request; the GEMM's planner serves it where its variant has bf16
// products and computes exactly elsewhere.
enum class GemmMath { exact, bf16, bf16x3 };

// The GemmMath that torch.set_float32_matmul_precision asks of matrix
// products of `operands` (exact for every dtype but fp32).
GemmMath matmul_math(at::ScalarType operands);

// C = alpha * A @ B + beta * Cin (Cin null or beta == 0: ignored), enqueued
// on the current stream of C's device. C, A, B, Cin are rank-4 views of loom
// memory; A and B fp32/bf16/fp16 of one dtype, C fp32/bf16/fp16. Allocates
// the packing workspace from the loom allocator. `math` is asked for fp32
// A and B; the plan decides what it applies to.
void gemm_run(const char* op, const at::Tensor& c_owner, loom_tensor c,
              loom_tensor a, loom_tensor b, const loom_tensor* cin,
              double alpha, double beta, GemmMath math = GemmMath::exact);

// The arithmetic of C = A @ B for rank-4 views (2 per multiply-add): what
// a launch computing all of C tells the profiler.
uint64_t gemm_flops(const loom_tensor& c, const loom_tensor& a);

// True for the dtypes the loom GEMM computes natively.
bool gemm_native_dtype(at::ScalarType t);

// True for the integer dtypes "gemm.int" computes (and bool, which only
// addr reaches on the CPU).
bool gemm_int_dtype(at::ScalarType t);

// `s` as the CPU's integer products take it for dtype `t`: converted to
// the dtype (floating values truncated; out of range raises as the CPU
// does), then widened to int64 for "gemm.int".
int64_t gemm_int_scalar(const c10::Scalar& s, at::ScalarType t);

// C = alpha * A @ B + beta * Cin for integer or bool views ("gemm.int",
// unplanned, a row of C per item): integers wrap in the dtype.
void gemm_run_int(const char* op, const at::Tensor& c_owner, loom_tensor c,
                  loom_tensor a, loom_tensor b, const loom_tensor* cin,
                  int64_t alpha, int64_t beta);

}  // namespace torch_loom
