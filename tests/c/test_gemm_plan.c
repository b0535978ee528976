/* tests/c/test_gemm_plan.c — "gemm.plan" chooses for every variant, AMX
 * included (planning runs none of them), what the binding chose before the
 * choice moved into the family: the GEMV for a single result row or column,
 * the transposed product for a column-major or thin C, the bf16 passes that
 * "medium" and "high" ask for only where bf16 products serve them (both on
 * AMX, "medium" on AVX512BF16 too), and the same
 * variant words and geometry. Also that the registry resolves the planner
 * to the variant this process selected, and that it rejects bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemv.h"
#include "loom/hal.h"
#include "test_util.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static int64_t pick(int64_t n) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (int64_t)((rng >> 33) % (uint64_t)n);
}

static loom_tensor transposed(loom_tensor d) {
  const int64_t size = d.sizes[2], stride = d.strides[2];
  d.sizes[2] = d.sizes[3], d.strides[2] = d.strides[3];
  d.sizes[3] = size, d.strides[3] = stride;
  return d;
}

/* A rank-4 view at a made-up address (planning never reads data):
 * rows x cols, row- or column-major, batches broadcast or not. */
static loom_tensor view(int32_t dtype, uintptr_t address, int64_t b1, int64_t b2, int64_t rows,
                        int64_t cols, int col_major, int broadcast) {
  loom_tensor t = {.data = (void *)address, .dtype = dtype, .rank = 4,
                   .sizes = {b1, b2, rows, cols}};
  t.strides[2] = col_major ? 1 : cols;
  t.strides[3] = col_major ? rows : 1;
  t.strides[1] = broadcast ? 0 : rows * cols;
  t.strides[0] = broadcast ? 0 : b2 * rows * cols;
  return t;
}

/* What the binding's gemm_run decided before "gemm.plan" existed, given
 * the variant and the math torch's precision asked for (C's dtype decided
 * whether it asked). */
typedef struct before {
  int gemv, transposed, passes, rc;
  int64_t units;
  int32_t words[LOOM_GEMM_MAX_PASSES];
  loom_gemm_plan plan;
} before;

static int64_t padded_area(int64_t m, int64_t n, int64_t mr, int64_t nr) {
  return (m + mr - 1) / mr * mr * ((n + nr - 1) / nr * nr);
}

static void decide_before(loom_tensor c, loom_tensor a, loom_tensor b, int isa, int math,
                          int64_t workers, before *o) {
  memset(o, 0, sizeof *o);
  if (c.dtype != LOOM_FLOAT32 ||
      !(isa == LOOM_GEMM_AMX || (isa == LOOM_GEMM_AVX512BF16 && math == LOOM_GEMM_MATH_BF16)))
    math = LOOM_GEMM_MATH_EXACT;
  if (c.sizes[3] == 1 || c.sizes[2] == 1) {
    o->gemv = 1;
    if (c.sizes[3] != 1) {
      loom_tensor at = transposed(b), bt = transposed(a);
      a = at, b = bt, c = transposed(c);
      o->transposed = 1;
    }
    o->units = c.sizes[0] * c.sizes[1] * ((c.sizes[2] + LOOM_GEMV_ROWS - 1) / LOOM_GEMV_ROWS);
    return;
  }
  int64_t m = c.sizes[2], n = c.sizes[3];
  int swap = n > 1 && c.strides[3] != 1 && (m == 1 || c.strides[2] == 1);
  if (!swap && (m == 1 || c.strides[2] == 1)) {
    loom_gemm_plan p;
    if (loom_gemm_plan_init(&c, &a, &b, isa, &p) == 0 &&
        padded_area(n, m, p.mr, p.nr) * 2 < padded_area(m, n, p.mr, p.nr))
      swap = 1;
  }
  if (swap) {
    loom_tensor at = transposed(b), bt = transposed(a);
    a = at, b = bt, c = transposed(c);
  }
  o->transposed = swap;
  int32_t passes[3] = {0, 0, 0};
  o->passes = 1;
  if (math == LOOM_GEMM_MATH_BF16 && a.dtype == LOOM_FLOAT32) {
    passes[0] = LOOM_GEMM_BF16_MATH;
  } else if (math == LOOM_GEMM_MATH_BF16X3 && a.dtype == LOOM_FLOAT32) {
    passes[0] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_A_LOW;
    passes[1] = LOOM_GEMM_BF16_MATH | LOOM_GEMM_B_LOW;
    passes[2] = LOOM_GEMM_BF16_MATH;
    o->passes = 3;
  }
  for (int p = 0; p < o->passes; ++p) {
    o->words[p] = isa | LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE | passes[p] |
                  LOOM_GEMM_WORKERS(workers);
    loom_gemm_plan pp;
    const int rc = loom_gemm_plan_init(&c, &a, &b, o->words[p], &pp);
    if (p == 0) o->plan = pp, o->rc = rc;
    /* every pass shares the first one's geometry; only the part differs */
    pp.bf16_math = o->plan.bf16_math;
    CHECK(rc == o->rc && !memcmp(&pp, &o->plan, sizeof pp));
  }
}

static const int32_t dtypes[][2] = {/* A and B, C */
                                    {LOOM_FLOAT32, LOOM_FLOAT32},   {LOOM_BFLOAT16, LOOM_BFLOAT16},
                                    {LOOM_FLOAT16, LOOM_FLOAT16},   {LOOM_BFLOAT16, LOOM_FLOAT32},
                                    {LOOM_FLOAT32, LOOM_BFLOAT16}};
static const int64_t dims[] = {1, 2, 3, 12, 13, 31, 32, 33, 64, 100, 300, 1000};
static const int64_t depths[] = {1, 2, 7, 32, 33, 200, 1000};

/* One product's operands, drawn at random. */
static void draw(loom_tensor *c, loom_tensor *a, loom_tensor *b) {
  const int64_t m = dims[pick(12)], n = dims[pick(12)], k = depths[pick(7)];
  const int batched = (int)pick(3);
  const int64_t b1 = batched == 2 ? 3 : 1, b2 = batched ? 2 : 1;
  const int32_t *dt = dtypes[pick(5)];
  const int bcast = (int)pick(3); /* 1: A broadcast over the batch, 2: B */
  /* odd addresses too: reading A in place needs 4-byte alignment */
  *a = view(dt[0], 0x10000 + 2 * (uintptr_t)pick(2), b1, b2, m, k, (int)pick(2), bcast == 1);
  *b = view(dt[0], 0x20000, b1, b2, k, n, (int)pick(2), bcast == 2);
  const int c_layout = (int)pick(3); /* row-major, column-major, rows padded */
  *c = view(dt[1], 0x30000, b1, b2, m, n, c_layout == 1, 0);
  if (c_layout == 2) c->strides[2] = n + 5, c->strides[1] = m * (n + 5), c->strides[0] = b2 * m * (n + 5);
}

static void test_plans_match_the_binding_before(void) {
  int compared = 0, mismatched = 0;
  for (int i = 0; i < 40000; ++i) {
    loom_tensor t[3];
    draw(&t[0], &t[1], &t[2]);
    const int isa = (int)pick(LOOM_GEMM_ISA_COUNT), math = (int)pick(3);
    const int64_t workers = pick(3) == 0 ? 1 : pick(2) ? 2 : 16;
    /* the binding asks only for fp32 results (torch's matmul precision) */
    const int asked = t[0].dtype == LOOM_FLOAT32 ? math : LOOM_GEMM_MATH_EXACT;
    loom_scalar s[2] = {{.i = asked}, {.i = workers}};
    loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                             .tensors = t, .num_scalars = 2, .scalars = s};
    loom_gemm_plan got;
    const int rc = loom_gemm_plan_for(&args, (loom_gemm_isa)isa, &got);
    before want;
    decide_before(t[0], t[1], t[2], isa, math, workers, &want);
    ++compared;
    int ok;
    if (want.gemv) {
      ok = rc == 0 && got.route == LOOM_GEMM_ROUTE_GEMV && got.transposed == want.transposed &&
           got.compute_range == want.units && got.compute_grain == 1 &&
           got.math == LOOM_GEMM_MATH_EXACT;
    } else {
      loom_gemm_plan geometry = got;
      geometry.route = geometry.transposed = geometry.math = geometry.passes = 0;
      memset(geometry.pass_variant, 0, sizeof geometry.pass_variant);
      ok = rc == want.rc && (rc != 0 || (got.route == LOOM_GEMM_ROUTE_TILES &&
                                         got.transposed == want.transposed &&
                                         got.passes == want.passes &&
                                         !memcmp(&geometry, &want.plan, sizeof geometry)));
      for (int p = 0; ok && rc == 0 && p < want.passes; ++p) ok = got.pass_variant[p] == want.words[p];
      if (ok && rc == 0)
        ok = got.math == (want.passes == 3 ? LOOM_GEMM_MATH_BF16X3
                          : want.words[0] & LOOM_GEMM_BF16_MATH ? LOOM_GEMM_MATH_BF16
                                                               : LOOM_GEMM_MATH_EXACT);
    }
    if (!ok && ++mismatched <= 5)
      fprintf(stderr, "  %s: C %lldx%lld (dtype %d, strides %lld,%lld), A dtype %d, k %lld, math %d\n",
              loom_gemm_isa_name((loom_gemm_isa)isa), (long long)t[0].sizes[2],
              (long long)t[0].sizes[3], t[0].dtype, (long long)t[0].strides[2],
              (long long)t[0].strides[3], t[1].dtype, (long long)t[1].sizes[3], math);
  }
  CHECK_EQ_INT(mismatched, 0);
  CHECK(compared == 40000);
}

/* AMX serves "medium" and "high" on fp32 operands, AVX512BF16 "medium";
 * the generic and AVX512 variants neither (gemm_select.c's policy). */
static void test_math_served_by_bf16_variants(void) {
  loom_tensor t[3] = {view(LOOM_FLOAT32, 0x30000, 1, 1, 64, 64, 0, 0),
                      view(LOOM_FLOAT32, 0x10000, 1, 1, 64, 64, 0, 0),
                      view(LOOM_FLOAT32, 0x20000, 1, 1, 64, 64, 0, 0)};
  for (int isa = 0; isa < LOOM_GEMM_ISA_COUNT; ++isa) {
    for (int math = LOOM_GEMM_MATH_EXACT; math <= LOOM_GEMM_MATH_BF16X3; ++math) {
      loom_scalar s[2] = {{.i = math}, {.i = 2}};
      loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                               .tensors = t, .num_scalars = 2, .scalars = s};
      loom_gemm_plan p;
      CHECK_EQ_INT(loom_gemm_plan_for(&args, (loom_gemm_isa)isa, &p), 0);
      const int served = isa == LOOM_GEMM_AMX ? math
                         : isa == LOOM_GEMM_AVX512BF16 && math == LOOM_GEMM_MATH_BF16
                             ? math
                             : LOOM_GEMM_MATH_EXACT;
      CHECK_EQ_INT(p.math, served);
      CHECK_EQ_INT(p.passes, served == LOOM_GEMM_MATH_BF16X3 ? 3 : 1);
      CHECK_EQ_INT(p.bf16_math != 0, served != LOOM_GEMM_MATH_EXACT);
    }
  }
}

static void test_registry_plans_with_the_selected_variant(void) {
  CHECK_OK(loom_init());
  const loom_kernel_t *k = NULL;
  CHECK_OK(loom_kernel_lookup("gemm.plan", &k));
  const char *launched[] = {"gemm.pack", "gemm.compute", "gemv.compute"};
  for (int i = 0; i < 3; ++i) {
    const loom_kernel_t *l = NULL;
    CHECK_OK(loom_kernel_lookup(launched[i], &l));
  }
  for (int i = 0; i < 200; ++i) {
    loom_tensor t[3];
    draw(&t[0], &t[1], &t[2]);
    loom_scalar s[2] = {{.i = pick(3)}, {.i = 2}};
    loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                             .tensors = t, .num_scalars = 2, .scalars = s};
    loom_gemm_plan via_registry, direct;
    const loom_status st = loom_kernel_plan(k, &args, &via_registry, sizeof via_registry);
    const int rc = loom_gemm_plan_for(&args, loom_gemm_isa_selected(), &direct);
    CHECK_EQ_INT(st, rc);
    if (st == LOOM_OK) CHECK(!memcmp(&via_registry, &direct, sizeof direct));
  }
  /* Bad input: a plan of the wrong size, operands that do not multiply. */
  loom_tensor t[3] = {view(LOOM_FLOAT32, 0x30000, 1, 1, 8, 8, 0, 0),
                      view(LOOM_FLOAT32, 0x10000, 1, 1, 8, 4, 0, 0),
                      view(LOOM_FLOAT32, 0x20000, 1, 1, 5, 8, 0, 0)};
  loom_scalar s[2] = {{.i = 0}, {.i = 2}};
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                           .tensors = t, .num_scalars = 2, .scalars = s};
  loom_gemm_plan p;
  CHECK(loom_kernel_plan(k, &args, &p, sizeof p - 8) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(loom_kernel_plan(k, &args, &p, sizeof p) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "gemm.plan") != NULL);
  s[0].i = 7; /* no such math */
  t[1].sizes[2] = 8, t[2].sizes[2] = 4;
  CHECK(loom_kernel_plan(k, &args, &p, sizeof p) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_shutdown();
}

int main(void) {
  RUN_TEST(test_plans_match_the_binding_before);
  RUN_TEST(test_math_served_by_bf16_variants);
  RUN_TEST(test_registry_plans_with_the_selected_variant);
  TEST_MAIN_END();
}
