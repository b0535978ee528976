/* loom/kernels/gemm_epilogue.h — the GEMM with an epilogue: elementwise
 * steps applied to each output tile of C while it is still in cache, so a
 * linear layer's bias, activation, residual add and output cast cost no
 * pass over memory of their own. Every driver provides these names.
 *
 * The steps are the pointwise library's own ops (loom/kernels/pointwise.h),
 * computed in float with the same element functions, rounded to C's dtype
 * after every step (as eager materializes each intermediate): the result
 * is bitwise what the GEMM followed by the pointwise launches gives.
 *
 * An epilogue is `n` step words (n <= LOOM_GEMM_EPILOGUE_MAX_STEPS), each
 *   op | operand << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT | LOOM_GEMM_EPILOGUE_SWAP?
 * op: a unary op without parameters (IDENTITY, RELU, GELU, GELU_TANH,
 * SILU, SIGMOID, TANH, NEG, EXP) with operand 0, or a binary op (ADD, SUB,
 * MUL, DIV, MAXIMUM, MINIMUM, ADD/SUB with alpha 1; GELU_BACKWARD,
 * GELU_TANH_BACKWARD, SILU_BACKWARD, SIGMOID_BACKWARD, TANH_BACKWARD, and
 * THRESHOLD_BACKWARD at threshold 0 (ReLU's backward: the operand is the
 * ReLU's result), with the value as the gradient) with operand k >= 1,
 * the k-th epilogue operand; SWAP makes the operand the op's first input
 * (operand - value instead of value - operand). Operands are rank-4 views
 * with C's sizes (stride 0 where they broadcast: a bias along columns has
 * strides {0, 0, 0, 1}, along rows {0, 0, 1, 0}), fp32, bf16 or fp16.
 * LOOM_GEMM_EPILOGUE_STORE on a step also stores its result (rounded as
 * above) to the next store tensor, which follows the operands: the j-th
 * storing step's tensor comes after the last operand, j places on (store
 * tensors: C's sizes, C's dtype). Adaptive eager uses it for intermediates
 * another op may still read. A view read or written by several steps must
 * be the same map wherever it appears (each row run is read, then written).
 *
 * "gemm.compute_epilogue": a "gemm.compute" launch (loom/kernels/gemm.h;
 * the same plan, range and grain) that runs the epilogue on each tile it
 * finishes and writes the result to D:
 *   tensors: [0] C, [1] A, [2] B, [3] workspace, [4] Cin (always present;
 *            ignored when beta == 0), [5] D (C's sizes, any float dtype,
 *            may be C itself), [6 + k - 1] epilogue operand k, then the
 *            store tensors
 *   scalars: [0..2] as "gemm.compute", [3].i n, [4 + s].i step word s
 * Launched in place of the last pass's "gemm.compute" (the passes before
 * it compute partial sums). With a transposed plan, D and the operands are
 * transposed with C. n | LOOM_GEMM_EPILOGUE_PRODUCT_IN_D: C's memory need
 * not be written (no one reads the product but the steps): when D has C's
 * dtype and a last stride of 1 exactly when C has (the product's plan is
 * then C's), each tile's product is computed into D's memory and the
 * steps read it there, else into C's. The caller guarantees that D shares
 * no memory with A, B, the workspace, Cin or the operands.
 *
 * "gemm.epilogue": the epilogue alone, over rows of C (a GEMV's result, or
 * the unfused reference): tensors [0] C, [1] D, [2 + k - 1] operand k,
 * then the store tensors;
 * scalars [0].i n, [1 + s].i step word s; range batch1 * batch2 * rows,
 * any grain. Bad step words return LOOM_ERROR_INVALID_ARGUMENT. */
#ifndef LOOM_KERNELS_GEMM_EPILOGUE_CONTRACT_H
#define LOOM_KERNELS_GEMM_EPILOGUE_CONTRACT_H

enum {
  LOOM_GEMM_EPILOGUE_MAX_STEPS = 8,
  LOOM_GEMM_EPILOGUE_PRODUCT_IN_D = 1 << 16, /* on the step count: see above */
  LOOM_GEMM_EPILOGUE_OPERAND_SHIFT = 16, /* operand k: bits 16..28 */
  LOOM_GEMM_EPILOGUE_STORE = 1 << 29,
  LOOM_GEMM_EPILOGUE_SWAP = 1 << 30,
};

#endif /* LOOM_KERNELS_GEMM_EPILOGUE_CONTRACT_H */
