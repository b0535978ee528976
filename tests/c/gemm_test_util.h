/* tests/c/gemm_test_util.h — what the GEMM kernel tests share: random
 * operands as rank-4 views, the test cases' operand layouts, and the
 * launches run chunk by chunk without the runtime (the compute chunks in
 * reverse order, as a thread pool might). Include from one test file. */
#ifndef LOOM_TESTS_GEMM_TEST_UTIL_H
#define LOOM_TESTS_GEMM_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/gemv.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline float rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static inline float get(const loom_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  int64_t off = i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] +
                i3 * t->strides[3];
  switch (t->dtype) {
    case LOOM_FLOAT32: return ((const float *)t->data)[off];
    case LOOM_BFLOAT16: return loom_bf16_to_f32(((const uint16_t *)t->data)[off]);
    default: return loom_f16_to_f32(((const uint16_t *)t->data)[off]);
  }
}

static inline void put(const loom_tensor *t, int64_t off, float v) {
  switch (t->dtype) {
    case LOOM_FLOAT32: ((float *)t->data)[off] = v; break;
    case LOOM_BFLOAT16: ((uint16_t *)t->data)[off] = loom_f32_to_bf16(v); break;
    default: ((uint16_t *)t->data)[off] = loom_f32_to_f16(v); break;
  }
}

/* A rank-4 view over a fresh buffer of `elems` elements. */
static inline loom_tensor make(int32_t dtype, int64_t elems, const int64_t sizes[4],
                        const int64_t strides[4]) {
  loom_tensor t = {.dtype = dtype, .rank = 4};
  t.data = calloc((size_t)(elems > 0 ? elems : 1), (size_t)loom_dtype_size(dtype));
  for (int d = 0; d < 4; ++d) t.sizes[d] = sizes[d], t.strides[d] = strides[d];
  for (int64_t i = 0; i < elems; ++i) put(&t, i, rnd());
  return t;
}

/* Not a GEMM variant: run() takes it to mean loom_gemv_kernel. */
enum { GEMV = -1 };

static inline const char *isa_name(int isa) {
  return isa == GEMV ? "gemv" : loom_gemm_isa_name(isa);
}

static inline int run_gemv(loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
                    const loom_tensor *cin, double alpha, double beta, int64_t grain) {
  loom_tensor ts[4] = {*c, *a, *b, cin ? *cin : *c};
  loom_scalar sc[2] = {{.f = alpha}, {.f = beta}};
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                           .num_tensors = cin ? 4 : 3, .tensors = ts,
                           .num_scalars = 2, .scalars = sc};
  args.range = c->sizes[0] * c->sizes[1] * ((c->sizes[2] + LOOM_GEMV_ROWS - 1) / LOOM_GEMV_ROWS);
  args.grain = grain ? grain : 1;
  int rc = 0;
  int64_t chunks = args.range ? (args.range + args.grain - 1) / args.grain : 0;
  for (int64_t ch = chunks - 1; ch >= 0 && !rc; --ch) {
    int64_t s = ch * args.grain;
    rc = loom_gemv_kernel(&args, s, s + args.grain < args.range ? s + args.grain : args.range);
  }
  return rc;
}

/* Runs both launches chunk by chunk, the compute chunks in reverse order
 * (as a thread pool might), with the given grain (0: the plan's). */
static inline int run(loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
               const loom_tensor *cin, int isa, double alpha, double beta,
               int64_t grain) {
  if (isa == GEMV) return run_gemv(c, a, b, cin, alpha, beta, grain);
  loom_gemm_plan p;
  int rc = loom_gemm_plan_init(c, a, b, isa, &p);
  if (rc) return rc;
  loom_tensor ws = {.dtype = LOOM_UINT8, .rank = 1,
                    .sizes = {p.workspace_bytes}, .strides = {1}};
  ws.data = malloc((size_t)(p.workspace_bytes > 0 ? p.workspace_bytes : 1));
  memset(ws.data, 0xcd, (size_t)p.workspace_bytes); /* garbage must not leak */
  loom_tensor ts[5] = {*c, *a, *b, ws, cin ? *cin : *c};
  loom_scalar sc[3] = {{.i = isa}, {.f = alpha}, {.f = beta}};
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION,
                           .num_tensors = cin ? 5 : 4, .tensors = ts,
                           .num_scalars = 3, .scalars = sc};
  args.range = p.pack_range;
  args.grain = grain ? grain : p.pack_grain;
  for (int64_t s = 0; s < args.range && !rc; s += args.grain)
    rc = loom_gemm_pack_kernel(&args, s, s + args.grain < args.range ? s + args.grain : args.range);
  args.range = p.compute_range;
  args.grain = grain ? grain : p.compute_grain;
  int64_t chunks = args.range ? (args.range + args.grain - 1) / args.grain : 0;
  for (int64_t ch = chunks - 1; ch >= 0 && !rc; --ch) {
    int64_t s = ch * args.grain;
    rc = loom_gemm_compute_kernel(&args, s, s + args.grain < args.range ? s + args.grain : args.range);
  }
  free(ws.data);
  return rc;
}

typedef struct gemm_case {
  int64_t b1, b2, m, n, k;
  int trans_a, trans_b;  /* operand stored transposed (column-major) */
  int pad;               /* extra elements per row: a sliced operand */
  int bcast_a, bcast_b;  /* batch-broadcast operand (batch stride 0) */
  int32_t in_dtype, out_dtype;
  double alpha, beta;
  int cin_bias;          /* Cin is a row vector broadcast over rows/batch */
} gemm_case;

static inline int64_t operand(const gemm_case *g, int64_t rows, int64_t cols, int trans,
                       int bcast, int64_t sizes[4], int64_t strides[4]) {
  int64_t ld = (trans ? rows : cols) + g->pad;
  int64_t mat = ld * (trans ? cols : rows);
  sizes[0] = g->b1, sizes[1] = g->b2, sizes[2] = rows, sizes[3] = cols;
  strides[2] = trans ? 1 : ld;
  strides[3] = trans ? ld : 1;
  strides[1] = bcast ? 0 : mat;
  strides[0] = bcast ? 0 : mat * g->b2;
  return bcast ? mat : mat * g->b1 * g->b2;
}

#endif /* LOOM_TESTS_GEMM_TEST_UTIL_H */
