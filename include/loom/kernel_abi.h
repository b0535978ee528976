/* loom/kernel_abi.h — the contract between the runtime and every kernel:
 * library kernels, compiler-generated kernels and user kernels alike.
 *
 * Treat it as a file format: fields are only ever appended, and
 * LOOM_KERNEL_ABI_VERSION changes whenever the layout does.
 *
 * A launch hands a kernel tensor descriptors, scalar arguments and a
 * sub-range [begin, end) of the launch's parallel dimension. The runtime
 * splits the full range [0, range) into chunks of `grain` (the last may be
 * shorter) with boundaries that never depend on the thread count, and calls
 * the kernel once per chunk, possibly concurrently. A kernel therefore must
 * be reentrant, keep no globals, allocate nothing and call nothing in the OS.
 * It returns 0 on success or a loom_status code on failure (for instance
 * LOOM_ERROR_INVALID_ARGUMENT for an integer division by zero,
 * LOOM_ERROR_INDEX_OUT_OF_RANGE for an index outside its dimension). A
 * library kernel may state the reason with loom_error() (loom/status.h) and
 * return its result; the runtime then carries that message to the error. */
#ifndef LOOM_KERNEL_ABI_H
#define LOOM_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_KERNEL_ABI_VERSION 1
#define LOOM_MAX_DIMS 16

/* Element types. Values are part of the ABI. */
typedef enum loom_dtype {
  LOOM_FLOAT32 = 0,
  LOOM_FLOAT64 = 1,
  LOOM_FLOAT16 = 2,
  LOOM_BFLOAT16 = 3,
  LOOM_INT8 = 4,
  LOOM_INT16 = 5,
  LOOM_INT32 = 6,
  LOOM_INT64 = 7,
  LOOM_UINT8 = 8,
  LOOM_BOOL = 9,
  LOOM_COMPLEX64 = 10,
  LOOM_COMPLEX128 = 11,
  LOOM_DTYPE_COUNT = 12,
} loom_dtype;

/* A strided view of device memory. `data` already includes the storage
 * offset. Sizes and strides are in elements; strides may be 0 (broadcast)
 * or negative. rank 0 is a scalar tensor with one element. */
typedef struct loom_tensor {
  void *data;
  int32_t dtype; /* loom_dtype */
  int32_t rank;
  int64_t sizes[LOOM_MAX_DIMS];
  int64_t strides[LOOM_MAX_DIMS];
} loom_tensor;

/* A scalar argument; which member is meaningful is the kernel's contract. */
typedef union loom_scalar {
  int64_t i;
  double f;
  uint64_t u;
} loom_scalar;

typedef struct loom_kernel_args {
  uint32_t abi_version; /* LOOM_KERNEL_ABI_VERSION of the caller */
  uint32_t num_tensors;
  const loom_tensor *tensors;
  uint32_t num_scalars;
  const loom_scalar *scalars;
  int64_t range; /* the full parallel range of this launch */
  int64_t grain; /* chunk size: chunk k covers [k*grain, min((k+1)*grain, range)) */
  /* Appended without a version change: 0 means "no hints", every caller
   * zero-initializes the struct, and a kernel that ignores it stays
   * correct. LOOM_KERNEL_HINT_* bits. */
  uint32_t hints;
} loom_kernel_args;

/* Hints a kernel may use for speed, never for what it computes. */
enum {
  /* What this launch writes is read again soon by another launch on the
   * same chunk (a fused group's intermediate): keep it in the cache rather
   * than streaming it past. */
  LOOM_KERNEL_HINT_CACHED = 1u << 0,
  /* Nothing reads what this launch writes before it has left the cache: a
   * fused group's member whose outputs no later member touches, in a group
   * writing more such bytes than the last-level cache holds. Its large
   * outputs may be stored past the cache (no line read for ownership).
   * Never set with LOOM_KERNEL_HINT_CACHED. */
  LOOM_KERNEL_HINT_STREAM = 1u << 1,
};

/* What a kernel declares about itself (its library entry's `flags`).
 *
 * LOOM_KERNEL_ELEMENTWISE: every launch of the kernel iterates one logical
 * shape, that of its tensors (each of the launch's tensors has those sizes,
 * or rank 0 and is read as a scalar), `range` is its number of elements,
 * and the call for [begin, end) touches, of every tensor of that shape,
 * exactly the elements whose row-major linear index lies in [begin, end),
 * and nothing else in memory; of them it writes tensor 0 only. Its
 * results therefore do not depend on the
 * grain, and chunk k of two such launches over the same range may run one
 * after the other, before chunk k + 1 of either (the host driver's adaptive
 * eager fuses queued launches so). tests/test_fusion.py checks the
 * declared kernels at many grains. */
enum {
  LOOM_KERNEL_ELEMENTWISE = 1u << 0,
};

typedef int (*loom_kernel_fn)(const loom_kernel_args *args, int64_t begin,
                              int64_t end);

/* A kernel's planner: host code that sizes launches for `args` (shapes,
 * dtypes, strides and scalars; it never reads tensor data) and fills the
 * plan, `size` bytes at `out_plan`, whose layout the kernel family's
 * contract defines. Returns 0 or a loom_status code, like a kernel; the
 * same rules hold (reentrant, no globals, no allocation). Planning belongs
 * to the kernel family because the variant it chooses (ISA, tiles) decides
 * the geometry. */
typedef int (*loom_kernel_plan_fn)(const loom_kernel_args *args, void *out_plan,
                                   uint64_t size);

/* Size in bytes of one element of `dtype` (0 for an unknown value). */
static inline int64_t loom_dtype_size(int32_t dtype) {
  static const int8_t sizes[LOOM_DTYPE_COUNT] = {4, 8, 2, 2, 1, 2,
                                                 4, 8, 1, 1, 8, 16};
  return (dtype >= 0 && dtype < LOOM_DTYPE_COUNT) ? sizes[dtype] : 0;
}

static inline int64_t loom_tensor_numel(const loom_tensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d) n *= t->sizes[d];
  return n;
}

#ifdef __cplusplus
}
#endif
#endif /* LOOM_KERNEL_ABI_H */
