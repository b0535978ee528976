/* kernels/gemm/gemm_epilogue.c — the GEMM's epilogue (contract in
 * loom/kernels/gemm_epilogue.h): the pointwise library's element functions
 * over each finished tile of C, a row run at a time, while the tile is in
 * the core's cache.
 *
 * Each row run is read in place (float32) or staged in float (loom_pw_load),
 * every step runs through
 * loom_pw_apply_f32 or its AVX-512 twin, chosen exactly as the pointwise
 * kernel chooses them, and a 16-bit C has every step's result rounded
 * through its dtype: the bits the unfused launches give. */
#include "loom/kernels/gemm_epilogue.h"

#include <string.h>

#include "base/cpu.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/pointwise/pointwise.h"
#include "loom/status.h"

/* Floats of a row run staged at once (on the stack). */
enum { EPI_RUN = 256 };

typedef int (*epi_apply_fn)(int op, int64_t n, float *out, const float *const *in,
                            const loom_scalar *p);

typedef struct epilogue {
  const loom_tensor *c, *d, *operands;
  int32_t num_operands, steps;
  int32_t op[LOOM_GEMM_EPILOGUE_MAX_STEPS], operand[LOOM_GEMM_EPILOGUE_MAX_STEPS],
      swap[LOOM_GEMM_EPILOGUE_MAX_STEPS];
  /* the tensor a step stores its result to (LOOM_GEMM_EPILOGUE_STORE), or NULL */
  const loom_tensor *store[LOOM_GEMM_EPILOGUE_MAX_STEPS];
  epi_apply_fn apply;
} epilogue;

static int epi_unary_ok(int op) {
  switch (op) {
    case LOOM_PW_IDENTITY: case LOOM_PW_RELU: case LOOM_PW_GELU: case LOOM_PW_GELU_TANH:
    case LOOM_PW_SILU: case LOOM_PW_SIGMOID: case LOOM_PW_TANH: case LOOM_PW_NEG:
    case LOOM_PW_EXP:
      return 1;
    default: return 0;
  }
}

static int epi_binary_ok(int op) {
  switch (op) {
    case LOOM_PW_ADD: case LOOM_PW_SUB: case LOOM_PW_MUL: case LOOM_PW_DIV:
    case LOOM_PW_MAXIMUM: case LOOM_PW_MINIMUM:
    /* backward forms: the value is the gradient, the operand the input */
    case LOOM_PW_GELU_BACKWARD: case LOOM_PW_GELU_TANH_BACKWARD: case LOOM_PW_SILU_BACKWARD:
    case LOOM_PW_SIGMOID_BACKWARD: case LOOM_PW_TANH_BACKWARD:
    case LOOM_PW_THRESHOLD_BACKWARD: /* at threshold 0: ReLU's backward */
      return 1;
    default: return 0;
  }
}

static int epi_float(int32_t dtype) {
  return dtype == LOOM_FLOAT32 || dtype == LOOM_BFLOAT16 || dtype == LOOM_FLOAT16;
}

static int epi_same_sizes(const loom_tensor *t, const loom_tensor *c) {
  if (t->rank != 4 || !epi_float(t->dtype)) return 0;
  for (int i = 0; i < 4; ++i)
    if (t->sizes[i] != c->sizes[i]) return 0;
  return 1;
}

/* Reads the step words at `words` and checks every tensor; `operands` holds
 * the operands, then the store tensors (`num_tensors` in all). */
static int epi_init(epilogue *e, const loom_tensor *c, const loom_tensor *d,
                    const loom_tensor *operands, int32_t num_tensors, const loom_scalar *words,
                    int64_t steps) {
  memset(e, 0, sizeof *e);
  if (steps < 0 || steps > LOOM_GEMM_EPILOGUE_MAX_STEPS)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm epilogue: %lld steps (at most %d)",
                      (long long)steps, LOOM_GEMM_EPILOGUE_MAX_STEPS);
  int32_t stores = 0;
  for (int64_t s = 0; s < steps; ++s) stores += (words[s].i & LOOM_GEMM_EPILOGUE_STORE) != 0;
  const int32_t num_operands = num_tensors - stores;
  if (num_operands < 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "gemm epilogue: %d storing steps but %d tensors after D", (int)stores,
                      (int)num_tensors);
  for (int32_t j = 0; j < stores; ++j) {
    const loom_tensor *t = &operands[num_operands + j];
    if (!epi_same_sizes(t, c) || t->dtype != c->dtype)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "gemm epilogue: store tensor %d must be a view of C's sizes and dtype",
                        (int)j);
  }
  if (c->rank != 4 || !epi_float(c->dtype) || !epi_same_sizes(d, c))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "gemm epilogue: C and D must be rank-4 float views of one shape");
  for (int32_t k = 0; k < num_operands; ++k)
    if (!epi_same_sizes(&operands[k], c))
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                        "gemm epilogue: operand %d must be a float view with C's sizes", k + 1);
  e->c = c, e->d = d, e->operands = operands, e->num_operands = num_operands;
  e->steps = (int32_t)steps;
  int32_t next_store = num_operands;
  for (int32_t s = 0; s < e->steps; ++s) {
    const int64_t w = words[s].i;
    const int op = (int)(w & 0xffff);
    const int k = (int)((w >> LOOM_GEMM_EPILOGUE_OPERAND_SHIFT) & 0x1fff);
    const int ok = k == 0 ? epi_unary_ok(op) : (epi_binary_ok(op) && k <= num_operands);
    if (!ok || (w & ~(int64_t)(LOOM_GEMM_EPILOGUE_SWAP | LOOM_GEMM_EPILOGUE_STORE |
                               0x1fffffff)) != 0)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm epilogue: bad step %d (word %lld)",
                        (int)s, (long long)w);
    e->op[s] = op, e->operand[s] = k, e->swap[s] = (w & LOOM_GEMM_EPILOGUE_SWAP) != 0;
    if (w & LOOM_GEMM_EPILOGUE_STORE) e->store[s] = &operands[next_store++];
  }
  e->apply = (loom_cpu_features() & LOOM_FEATURE_AVX512F) ? loom_pw_apply_f32_avx512
                                                           : loom_pw_apply_f32;
  return 0;
}

/* Floats of row `row`, columns from `col` of matrix (i1, i2) of t, read in
 * place when t is a float32 row run, else staged into `buf`. */
static const float *epi_row_in(const loom_tensor *t, int64_t i1, int64_t i2, int64_t row,
                               int64_t col, int64_t n, float *buf) {
  const char *src = loom_gemm_elem(t, i1, i2, row, col);
  if (t->dtype == LOOM_FLOAT32 && (t->strides[3] == 1 || n == 1)) return (const float *)src;
  loom_pw_load(LOOM_PW_F32, buf, src, t->dtype, t->strides[3] * loom_dtype_size(t->dtype), n);
  return buf;
}

/* Columns [col0, col0 + cols) of row `row` of matrix (i1, i2): C's values
 * through the steps into D. Float32 rows are read and, for the last step,
 * written in place; the steps between go through two row buffers. */
static int epi_run(const epilogue *e, int64_t i1, int64_t i2, int64_t row, int64_t col0,
                   int64_t cols) {
  float x[EPI_RUN], y[EPI_RUN], o[EPI_RUN];
  uint16_t r16[EPI_RUN];
  const loom_tensor *c = e->c, *d = e->d;
  const int64_t ds = loom_dtype_size(d->dtype);
  /* the one parameter a step takes: alpha 1 (ADD, SUB) or threshold 0 */
  const loom_scalar p[4] = {{.f = 1.0}, {.f = 0.0}, {.f = 0.0}, {.f = 0.0}};
  const loom_scalar p_threshold[4] = {{.f = 0.0}, {.f = 0.0}, {.f = 0.0}, {.f = 0.0}};
  for (int64_t j0 = 0; j0 < cols; j0 += EPI_RUN) {
    const int64_t n = cols - j0 < EPI_RUN ? cols - j0 : EPI_RUN;
    char *dst = (char *)loom_gemm_elem(d, i1, i2, row, col0 + j0);
    float *d_row = d->dtype == LOOM_FLOAT32 && (d->strides[3] == 1 || n == 1) ? (float *)dst
                                                                               : NULL;
    const float *cur = epi_row_in(c, i1, i2, row, col0 + j0, n, x);
    for (int32_t s = 0; s < e->steps; ++s) {
      /* the last step into D itself, unless that is its input (D is C) */
      float *next = s + 1 == e->steps && d_row && d_row != cur ? d_row : (cur == x ? y : x);
      const float *in[LOOM_PW_MAX_INPUTS] = {cur, NULL, NULL}; /* the op reads all three */
      if (e->operand[s]) {
        const float *v = epi_row_in(&e->operands[e->operand[s] - 1], i1, i2, row, col0 + j0, n, o);
        in[0] = e->swap[s] ? v : cur;
        in[1] = e->swap[s] ? cur : v;
      }
      const int rc = e->apply(e->op[s], n, next, in,
                              e->op[s] == LOOM_PW_THRESHOLD_BACKWARD ? p_threshold : p);
      if (rc) return rc;
      if (c->dtype != LOOM_FLOAT32) { /* the intermediate as eager stores it */
        loom_pw_store(LOOM_PW_F32, (char *)r16, c->dtype, 2, next, n);
        loom_pw_load(LOOM_PW_F32, next, (const char *)r16, c->dtype, 2, n);
      }
      if (e->store[s]) {
        const loom_tensor *t = e->store[s];
        loom_pw_store(LOOM_PW_F32, (char *)loom_gemm_elem(t, i1, i2, row, col0 + j0), t->dtype,
                      t->strides[3] * loom_dtype_size(t->dtype), next, n);
      }
      cur = next;
    }
    if (cur != d_row)
      loom_pw_store(LOOM_PW_F32, dst, d->dtype, d->strides[3] * ds, cur, n);
  }
  return 0;
}

int loom_gemm_epilogue_kernel(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 2 || args->num_scalars < 1)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.epilogue: needs C, D and a step count");
  const loom_tensor *c = &args->tensors[0];
  const int64_t steps = args->scalars[0].i;
  if (steps < 0 || (int64_t)args->num_scalars < 1 + steps)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.epilogue: missing step words");
  epilogue e;
  int rc = epi_init(&e, c, &args->tensors[1], args->tensors + 2,
                    (int32_t)args->num_tensors - 2, args->scalars + 1, steps);
  if (rc) return rc;
  const int64_t m = c->sizes[2], b2 = c->sizes[1];
  if (m == 0 || b2 == 0) return 0;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t row = r % m, mat = r / m;
    rc = epi_run(&e, mat / b2, mat % b2, row, 0, c->sizes[3]);
    if (rc) return rc;
  }
  return 0;
}

int loom_gemm_compute_epilogue_kernel(const loom_kernel_args *args, int64_t begin,
                                      int64_t end) {
  if (args->num_tensors < 6 || args->num_scalars < 4)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "gemm.compute_epilogue: needs C, A, B, workspace, Cin, D and a step count");
  const loom_tensor *c = &args->tensors[0], *d = &args->tensors[5];
  const int64_t word = args->scalars[3].i;
  const int64_t steps = word & ~(int64_t)LOOM_GEMM_EPILOGUE_PRODUCT_IN_D;
  if (steps < 0 || (int64_t)args->num_scalars < 4 + steps)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "gemm.compute_epilogue: missing step words");
  /* the product into D's memory: the same plan, the same bits */
  const int in_d = (word & LOOM_GEMM_EPILOGUE_PRODUCT_IN_D) && d->dtype == c->dtype &&
                   (d->strides[3] == 1) == (c->strides[3] == 1);
  epilogue e;
  int rc = epi_init(&e, in_d ? d : c, d, args->tensors + 6, (int32_t)args->num_tensors - 6,
                    args->scalars + 4, steps);
  if (rc) return rc;
  loom_gemm_plan p;
  rc = loom_gemm_plan_init(c, &args->tensors[1], &args->tensors[2], (int32_t)args->scalars[0].i,
                           &p);
  if (rc) return rc;
  /* the product alone: Cin only where beta asks for it */
  loom_tensor product[5];
  memcpy(product, args->tensors, 5 * sizeof *product);
  if (in_d) product[0] = *d;
  loom_kernel_args inner = *args;
  inner.tensors = product;
  inner.num_tensors = args->scalars[2].f != 0.0 ? 5 : 4;
  inner.num_scalars = 3;
  for (int64_t t = begin; t < end; ++t) {
    rc = loom_gemm_compute_kernel(&inner, t, t + 1);
    if (rc) return rc;
    /* the tile compute_kernel just finished (its numbering) */
    const int64_t ni = t % p.n_tiles, rest = t / p.n_tiles;
    const int64_t mi = rest % p.m_tiles, mat = rest / p.m_tiles;
    const int64_t i2 = mat % p.batch2, i1 = mat / p.batch2;
    const int64_t n0 = ni * p.nt;
    int64_t m0, mt;
    loom_gemm_tile_rows(&p, mi, &m0, &mt);
    const int64_t nt = p.n - n0 < p.nt ? p.n - n0 : p.nt;
    for (int64_t i = 0; i < mt; ++i) {
      rc = epi_run(&e, i1, i2, m0 + i, n0, nt);
      if (rc) return rc;
    }
  }
  return 0;
}
