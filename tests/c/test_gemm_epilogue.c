/* tests/c/test_gemm_epilogue.c — the GEMM's epilogue against the unfused
 * sequence it replaces: the same product by "gemm.compute", then one
 * "pointwise.apply" launch per step into intermediates of C's dtype. Every
 * GEMM variant the CPU runs, with and without the compute launch's own
 * packing (the matmul's tilings); bias along columns and along rows, addmm's
 * Cin, residual adds, activations, 16-bit C with a cast to fp32, D = C in
 * place, the GEMM-less "gemm.epilogue" kernel, and bad step words. The
 * results must be bitwise equal. Calls the kernels directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/pointwise/pointwise.h"
#include "loom/kernels/gemm_epilogue.h"
#include "loom/status.h"
#include "test_util.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xffffff) / (float)0x1000000 * 4.0f - 2.0f;
}

static loom_tensor make(int32_t dtype, const int64_t sizes[4], const int64_t strides[4],
                        int64_t elems) {
  loom_tensor t = {.dtype = dtype, .rank = 4};
  t.data = calloc((size_t)elems, (size_t)loom_dtype_size(dtype));
  for (int d = 0; d < 4; ++d) t.sizes[d] = sizes[d], t.strides[d] = strides[d];
  for (int64_t i = 0; i < elems; ++i) loom_gemm_store(t.data, dtype, i, rnd());
  return t;
}

static loom_tensor dense(int32_t dtype, int64_t b, int64_t m, int64_t n) {
  const int64_t s[4] = {1, b, m, n}, st[4] = {b * m * n, m * n, n, 1};
  return make(dtype, s, st, b * m * n);
}

/* The order run_gemm's compute tiles run in: last to first, or first to
 * last (an epilogue that visits rows of a tile other than its own then
 * reads them before or after their product). */
static int tiles_forward;

/* pack + compute (kernel "gemm.compute" or "gemm.compute_epilogue"), each
 * compute tile a call of its own, in tiles_forward's order. */
static int run_gemm(const loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
                    const loom_tensor *cin, double beta, int isa, const loom_tensor *extra,
                    int n_extra, const loom_scalar *words, int steps, int fused) {
  loom_gemm_plan p;
  int rc = loom_gemm_plan_init(c, a, b, isa, &p);
  if (rc) return rc;
  loom_tensor ws = {.dtype = LOOM_UINT8, .rank = 1, .sizes = {p.workspace_bytes}, .strides = {1}};
  ws.data = malloc((size_t)(p.workspace_bytes > 0 ? p.workspace_bytes : 1));
  loom_tensor ts[16] = {*c, *a, *b, ws, cin ? *cin : *c};
  for (int i = 0; i < n_extra; ++i) ts[5 + i] = extra[i];
  loom_scalar sc[4 + LOOM_GEMM_EPILOGUE_MAX_STEPS] = {{.i = isa}, {.f = 1.0}, {.f = beta},
                                                      {.i = steps}};
  for (int s = 0; s < steps; ++s) sc[4 + s] = words[s];
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .tensors = ts,
                           .num_tensors = fused ? 5 + n_extra : (cin ? 5 : 4),
                           .scalars = sc, .num_scalars = fused ? 4 + steps : 3};
  for (int64_t s = 0; s < p.pack_range && !rc; s += p.pack_grain)
    rc = loom_gemm_pack_kernel(&args, s, s + p.pack_grain < p.pack_range ? s + p.pack_grain
                                                                          : p.pack_range);
  for (int64_t i = 0; i < p.compute_range && !rc; ++i) {
    const int64_t t = tiles_forward ? i : p.compute_range - 1 - i;
    rc = fused ? loom_gemm_compute_epilogue_kernel(&args, t, t + 1)
               : loom_gemm_compute_kernel(&args, t, t + 1);
  }
  free(ws.data);
  return rc;
}

/* out = op(x[, y]) by the pointwise library's kernel (y first when swap). */
static int pointwise(const loom_tensor *out, int op, const loom_tensor *x, const loom_tensor *y,
                     int swap) {
  loom_tensor ts[3] = {*out, swap ? *y : *x, y ? (swap ? *x : *y) : *x};
  /* alpha 1 for ADD/SUB; threshold 0 for THRESHOLD_BACKWARD (ReLU's) */
  loom_scalar sc[LOOM_PW_CONST + 2] = {{.i = op}, {.i = LOOM_PW_F32},
                                       {.f = op == LOOM_PW_THRESHOLD_BACKWARD ? 0.0 : 1.0}};
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .tensors = ts,
                           .num_tensors = y ? 3 : 2, .scalars = sc,
                           .num_scalars = LOOM_PW_CONST + 2};
  const int64_t n = loom_tensor_numel(out);
  args.range = n, args.grain = LOOM_PW_GRAIN;
  return loom_kernel_pointwise(&args, 0, n);
}

typedef struct epi_case {
  const char *name;
  int64_t b, m, n, k;
  int32_t dtype, out_dtype; /* operands and C; D */
  int bias;                 /* 1: along columns (operand 1), 2: along rows */
  int addmm;                /* the bias as Cin with beta 1, not as a step */
  int residual;             /* a full operand added after the activation */
  int in_place;             /* D is C */
  int act[3];               /* unary steps after the bias (0 ends) */
  int resid_op;             /* the residual's op (0: ADD, the operand first) */
} epi_case;

static void check_case(const epi_case *cs, int isa) {
  test_label = cs->name;
  loom_tensor a = dense(cs->dtype, cs->b, cs->m, cs->k), b = dense(cs->dtype, cs->b, cs->k, cs->n);
  loom_tensor c_ref = dense(cs->dtype, cs->b, cs->m, cs->n);
  loom_tensor c_fused = dense(cs->dtype, cs->b, cs->m, cs->n);
  loom_tensor d_fused = dense(cs->out_dtype, cs->b, cs->m, cs->n);
  loom_tensor d_ref = dense(cs->out_dtype, cs->b, cs->m, cs->n);
  /* a bias vector broadcast as a rank-4 view with C's sizes */
  const int64_t vs[4] = {1, cs->b, cs->m, cs->n};
  const int64_t along_n[4] = {0, 0, 0, 1}, along_m[4] = {0, 0, 1, 0};
  loom_tensor bias = make(cs->dtype, vs, cs->bias == 2 ? along_m : along_n,
                          cs->bias == 2 ? cs->m : cs->n);
  loom_tensor resid = dense(cs->dtype, cs->b, cs->m, cs->n);
  loom_tensor ops[2];
  int n_ops = 0;
  loom_scalar words[LOOM_GEMM_EPILOGUE_MAX_STEPS];
  int steps = 0;
  const int bias_step = cs->bias && !cs->addmm;
  if (bias_step) {
    ops[n_ops++] = bias;
    words[steps++].i = LOOM_PW_ADD | (int64_t)n_ops << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT;
  }
  for (int i = 0; i < 3 && cs->act[i]; ++i) words[steps++].i = cs->act[i];
  if (cs->residual) {
    ops[n_ops++] = resid;
    words[steps++].i = cs->resid_op ? cs->resid_op | (int64_t)n_ops << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT
                                    : LOOM_PW_ADD | (int64_t)n_ops << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT |
                                          LOOM_GEMM_EPILOGUE_SWAP;
  }
  if (cs->out_dtype != cs->dtype) words[steps++].i = LOOM_PW_IDENTITY;

  /* unfused: the product, then one pointwise launch per step */
  const loom_tensor *cin = cs->addmm ? &bias : NULL;
  const double beta = cs->addmm ? 1.0 : 0.0;
  CHECK_OK(run_gemm(&c_ref, &a, &b, cin, beta, isa, NULL, 0, NULL, 0, 0));
  loom_tensor cur = dense(cs->dtype, cs->b, cs->m, cs->n);
  memcpy(cur.data, c_ref.data, (size_t)(loom_tensor_numel(&cur) * loom_dtype_size(cs->dtype)));
  loom_tensor nxt = dense(cs->dtype, cs->b, cs->m, cs->n);
  for (int s = 0; s < steps; ++s) {
    const int op = (int)(words[s].i & 0xffff);
    const int k = (int)(words[s].i >> LOOM_GEMM_EPILOGUE_OPERAND_SHIFT & 0x3fff);
    const int last = s == steps - 1;
    const loom_tensor *out = last ? &d_ref : &nxt;
    if (op == LOOM_PW_IDENTITY && last) out = &d_ref; /* the cast */
    CHECK_OK(pointwise(out, op, &cur, k ? &ops[k - 1] : NULL,
                       (words[s].i & LOOM_GEMM_EPILOGUE_SWAP) != 0));
    if (!last) {
      void *t = cur.data;
      cur.data = nxt.data, nxt.data = t;
    }
  }
  if (steps == 0) CHECK_OK(pointwise(&d_ref, LOOM_PW_IDENTITY, &cur, NULL, 0));

  /* fused, the tiles in either order (C, also when it is D, is written
   * whole by the product: beta is 0 or Cin is the bias) */
  loom_tensor extra[4] = {cs->in_place ? c_fused : d_fused};
  for (int i = 0; i < n_ops; ++i) extra[1 + i] = ops[i];
  const size_t cbytes = (size_t)(loom_tensor_numel(&c_ref) * loom_dtype_size(cs->dtype));
  const size_t dbytes = (size_t)(loom_tensor_numel(&d_ref) * loom_dtype_size(cs->out_dtype));
  for (tiles_forward = 0; tiles_forward < 2; ++tiles_forward) {
    CHECK_OK(run_gemm(&c_fused, &a, &b, cin, beta, isa, extra, 1 + n_ops, words, steps, 1));
    if (cs->in_place) {
      CHECK_MSG(memcmp(c_fused.data, d_ref.data, dbytes) == 0,
                "%s [%s, forward %d]: in-place D differs", cs->name,
                loom_gemm_isa_name((loom_gemm_isa)(isa & 0xff)), tiles_forward);
    } else {
      CHECK_MSG(memcmp(c_fused.data, c_ref.data, cbytes) == 0, "%s [%s, forward %d]: C differs",
                cs->name, loom_gemm_isa_name((loom_gemm_isa)(isa & 0xff)), tiles_forward);
      CHECK_MSG(memcmp(d_fused.data, d_ref.data, dbytes) == 0, "%s [%s, forward %d]: D differs",
                cs->name, loom_gemm_isa_name((loom_gemm_isa)(isa & 0xff)), tiles_forward);
    }
  }
  tiles_forward = 0;

  /* "gemm.epilogue" alone over C's rows gives the same D */
  if (!cs->in_place) {
    loom_tensor d_rows = dense(cs->out_dtype, cs->b, cs->m, cs->n);
    loom_tensor ts[4] = {c_ref, d_rows};
    for (int i = 0; i < n_ops; ++i) ts[2 + i] = ops[i];
    loom_scalar sc[1 + LOOM_GEMM_EPILOGUE_MAX_STEPS] = {{.i = steps}};
    for (int s = 0; s < steps; ++s) sc[1 + s] = words[s];
    loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .tensors = ts,
                             .num_tensors = 2 + n_ops, .scalars = sc,
                             .num_scalars = 1 + steps};
    const int64_t rows = cs->b * cs->m;
    for (int64_t r = 0; r < rows; r += 7)
      CHECK_OK(loom_gemm_epilogue_kernel(&args, r, r + 7 < rows ? r + 7 : rows));
    CHECK_MSG(memcmp(d_rows.data, d_ref.data, dbytes) == 0, "%s: gemm.epilogue differs",
              cs->name);
    free(d_rows.data);
  }
  loom_tensor all[] = {a, b, c_ref, c_fused, d_fused, d_ref, bias, resid, cur, nxt};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i].data);
  test_label = NULL;
}

static void test_bad_steps(void) {
  loom_tensor c = dense(LOOM_FLOAT32, 1, 4, 4), d = dense(LOOM_FLOAT32, 1, 4, 4);
  loom_tensor ts[2] = {c, d};
  loom_scalar sc[2] = {{.i = 1}, {.i = LOOM_PW_ADD}}; /* binary with no operand */
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .tensors = ts,
                           .num_tensors = 2, .scalars = sc, .num_scalars = 2};
  CHECK_EQ_INT(loom_gemm_epilogue_kernel(&args, 0, 4), LOOM_ERROR_INVALID_ARGUMENT);
  sc[1].i = LOOM_PW_RELU | (int64_t)1 << LOOM_GEMM_EPILOGUE_OPERAND_SHIFT; /* no operand 1 */
  CHECK_EQ_INT(loom_gemm_epilogue_kernel(&args, 0, 4), LOOM_ERROR_INVALID_ARGUMENT);
  sc[1].i = LOOM_PW_LOGIT; /* takes parameters: not an epilogue step */
  CHECK_EQ_INT(loom_gemm_epilogue_kernel(&args, 0, 4), LOOM_ERROR_INVALID_ARGUMENT);
  sc[0].i = LOOM_GEMM_EPILOGUE_MAX_STEPS + 1;
  CHECK_EQ_INT(loom_gemm_epilogue_kernel(&args, 0, 4), LOOM_ERROR_INVALID_ARGUMENT);
  free(c.data), free(d.data);
}

int main(void) {
  const epi_case cases[] = {
      {"linear+bias+gelu", 1, 37, 45, 29, LOOM_FLOAT32, LOOM_FLOAT32, 1, 0, 0, 0,
       {LOOM_PW_GELU}},
      {"addmm+gelu_tanh+residual", 1, 50, 70, 33, LOOM_FLOAT32, LOOM_FLOAT32, 1, 1, 1, 0,
       {LOOM_PW_GELU_TANH}},
      {"bias along rows+relu, in place", 2, 40, 19, 64, LOOM_FLOAT32, LOOM_FLOAT32, 2, 0, 0, 1,
       {LOOM_PW_RELU}},
      {"silu+sigmoid, wide", 1, 13, 600, 40, LOOM_FLOAT32, LOOM_FLOAT32, 1, 0, 0, 0,
       {LOOM_PW_SILU, LOOM_PW_SIGMOID}},
      {"bf16 bias+gelu, cast to fp32", 1, 33, 47, 38, LOOM_BFLOAT16, LOOM_FLOAT32, 1, 0, 0, 0,
       {LOOM_PW_GELU}},
      {"fp16 addmm+tanh+residual", 1, 29, 31, 16, LOOM_FLOAT16, LOOM_FLOAT16, 1, 1, 1, 0,
       {LOOM_PW_TANH}},
      {"mm then gelu_backward (a backward's epilogue)", 1, 26, 35, 21, LOOM_FLOAT32,
       LOOM_FLOAT32, 0, 0, 1, 0, {0}, LOOM_PW_GELU_BACKWARD},
      {"mm then relu's threshold_backward", 1, 31, 40, 17, LOOM_FLOAT32, LOOM_FLOAT32, 0, 0,
       1, 0, {0}, LOOM_PW_THRESHOLD_BACKWARD},
      {"bf16 mm then relu's threshold_backward", 1, 24, 33, 20, LOOM_BFLOAT16, LOOM_BFLOAT16, 0,
       0, 1, 0, {0}, LOOM_PW_THRESHOLD_BACKWARD},
      {"no steps", 1, 9, 9, 9, LOOM_FLOAT32, LOOM_FLOAT32, 0, 0, 0, 0, {0}},
      /* the matmul's launches: row tiles as wide as C, the rows shared out
       * evenly (26 row panels, 17 column panels); in place, so a row the
       * epilogue visits twice or misses shows */
      {"bias+relu in place, tiles as wide as C", 1, 301, 513, 700, LOOM_FLOAT32, LOOM_FLOAT32,
       1, 0, 0, 1, {LOOM_PW_RELU}, 0},
  };
  test_bad_steps();
  for (int isa = 0; isa < LOOM_GEMM_ISA_COUNT; ++isa) {
    if (!loom_gemm_isa_supported((loom_gemm_isa)isa)) {
      test_skip("%s: not supported by this CPU", loom_gemm_isa_name((loom_gemm_isa)isa));
      continue;
    }
    const int before = test_failed;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
      check_case(&cases[i], isa);
      check_case(&cases[i], isa | LOOM_GEMM_IN_COMPUTE);
      check_case(&cases[i], isa | LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE);
    }
    printf("%s: %s\n", loom_gemm_isa_name((loom_gemm_isa)isa),
           test_failed == before ? "ok" : "FAILED");
  }
  TEST_MAIN_END();
}
