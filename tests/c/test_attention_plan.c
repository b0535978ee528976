/* tests/c/test_attention_plan.c — "attention.plan" chooses, with and
 * without AMX (planning runs no kernel), what the binding chose before the
 * choice moved into the family: the bf16 tiles for an unmasked bf16
 * attention whose head dims they hold, decoding for a few queries, a key
 * and value pack when several query items share them, the blocked float
 * kernels where the head dims fit, and the exact rows elsewhere, with the
 * same ranges, grains and workspaces. Also that the registry resolves the
 * planner and rejects bad input. */
#include <stdint.h>
#include <string.h>

#include "kernels/nn/attention.h"
#include "kernels/gemm/gemm.h"
#include "loom/hal.h"
#include "test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t pick(int64_t n) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (int64_t)((rng >> 33) % (uint64_t)n);
}

/* (BH, rows, cols) at a made-up address; `unit` 0 strides the last dim. */
static loom_tensor view3(int32_t dtype, int64_t bh, int64_t rows, int64_t cols, int unit) {
  const int64_t s2 = unit ? 1 : 2;
  return (loom_tensor){.data = (void *)(uintptr_t)0x10000, .dtype = dtype, .rank = 3,
                       .sizes = {bh, rows, cols},
                       .strides = {rows * cols * s2, cols * s2, s2}};
}

static int64_t grain_for(int64_t work) {
  const int64_t g = (int64_t)(1 << 14) / (work > 1 ? work : 1);
  return g > 1 ? g : 1;
}

static int64_t round32(int64_t x) { return (x + 31) / 32 * 32; }

/* What the binding's sdpa_forward and sdpa_backward launched before
 * "attention.plan" existed. */
static loom_attention_plan decide_before(const loom_tensor *q, const loom_tensor *k,
                                         const loom_tensor *v, int masked, int amx) {
  loom_attention_plan p;
  memset(&p, 0, sizeof p);
  const int64_t BH = q->sizes[0], L = q->sizes[1], S = k->sizes[1], E = q->sizes[2],
                Ev = v->sizes[2];
  const int blocked = q->dtype != LOOM_FLOAT64 && E <= LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM &&
                      Ev <= LOOM_ATTENTION_BLOCKED_MAX_HEAD_DIM;
  const int64_t bl = BH * ((L + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  const int64_t bs = BH * ((S + LOOM_ATTENTION_BLOCK - 1) / LOOM_ATTENTION_BLOCK);
  p.backward = blocked ? LOOM_ATTENTION_BLOCKED : LOOM_ATTENTION_ROWS;
  p.backward_q_range = blocked ? bl : BH * L;
  p.backward_q_grain = blocked ? 1 : grain_for(S * (E + Ev));
  p.backward_kv_range = blocked ? bs : BH * S;
  p.backward_kv_grain = blocked ? 1 : grain_for(L * (E + Ev));
  const int use_amx = q->dtype == LOOM_BFLOAT16 && !masked && amx && S > 0 &&
                      round32(E) <= LOOM_ATTENTION_AMX_MAX_HEAD_DIM &&
                      round32(Ev) <= LOOM_ATTENTION_AMX_MAX_HEAD_DIM && q->strides[2] == 1 &&
                      k->strides[2] == 1 && v->strides[2] == 1;
  if (!use_amx) {
    p.forward = p.backward;
    p.forward_range = blocked ? bl : BH * L;
    p.forward_grain = blocked ? 1 : grain_for(S * (E + Ev));
    return p;
  }
  const int64_t keys = LOOM_ATTENTION_AMX_KEYS, queries = LOOM_ATTENTION_AMX_QUERIES;
  const int64_t blocks = (S + keys - 1) / keys, items = BH * ((L + queries - 1) / queries);
  p.forward_grain = 1;
  if (L <= LOOM_ATTENTION_DECODE_QUERIES && S <= LOOM_ATTENTION_DECODE_KEYS) {
    p.forward = LOOM_ATTENTION_BF16_DECODE;
    p.forward_range = BH;
  } else {
    p.forward = LOOM_ATTENTION_BF16;
    p.forward_range = items;
    if (L > queries) {
      p.pack_range = BH * blocks, p.pack_grain = 1;
      p.k_pack = BH * blocks * keys * round32(E);
      p.v_pack = BH * blocks * keys * round32(Ev);
    }
  }
  return p;
}

static const int32_t dtypes[] = {LOOM_FLOAT32, LOOM_BFLOAT16, LOOM_FLOAT16, LOOM_FLOAT64};
static const int64_t lens[] = {1, 3, 4, 5, 63, 64, 65, 200, 16384, 16385};
static const int64_t heads[] = {1, 16, 64, 200, 224, 225, 256, 257, 300, 512};

static void test_plans_match_the_binding_before(void) {
  int mismatched = 0;
  for (int i = 0; i < 20000; ++i) {
    const int32_t dt = dtypes[pick(4)];
    const int64_t bh = 1 + pick(5), L = lens[pick(10)], S = pick(8) ? lens[pick(10)] : 0;
    const int64_t E = heads[pick(10)], Ev = pick(2) ? E : heads[pick(10)];
    const int masked = (int)pick(2), amx = (int)pick(2);
    loom_tensor t[4] = {view3(dt, bh, L, E, (int)pick(6) != 0), view3(dt, bh, S, E, (int)pick(6) != 0),
                        view3(dt, bh, S, Ev, (int)pick(6) != 0), {0}};
    if (masked) t[3] = view3(LOOM_BOOL, bh, L, S, 1);
    if (masked && S == 0) t[3].data = NULL; /* an empty mask has no storage */
    loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4,
                             .tensors = t};
    loom_attention_plan got;
    const int rc = loom_attention_plan_for(&args, amx, &got);
    const loom_attention_plan want = decide_before(&t[0], &t[1], &t[2], masked, amx);
    if ((rc != 0 || memcmp(&got, &want, sizeof got)) && ++mismatched <= 5)
      fprintf(stderr, "  dtype %d BH %lld L %lld S %lld E %lld Ev %lld mask %d amx %d: forward %d/%d\n",
              dt, (long long)bh, (long long)L, (long long)S, (long long)E, (long long)Ev, masked,
              amx, got.forward, want.forward);
  }
  CHECK_EQ_INT(mismatched, 0);
}

static void test_registry_plans_with_the_selected_variant(void) {
  CHECK_OK(loom_init());
  const loom_kernel_t *k = NULL;
  CHECK_OK(loom_kernel_lookup("attention.plan", &k));
  const char *launched[] = {"attention.forward",        "attention.backward_q",
                            "attention.backward_kv",    "attention.blocked_forward",
                            "attention.blocked_backward_q", "attention.blocked_backward_kv",
                            "attention.bf16_pack",      "attention.bf16_forward",
                            "attention.bf16_decode"};
  for (size_t i = 0; i < sizeof launched / sizeof *launched; ++i) {
    const loom_kernel_t *l = NULL;
    CHECK_OK(loom_kernel_lookup(launched[i], &l));
  }
  /* the fused bf16 kernels run where the GEMM runs bf16 pairs */
  const loom_gemm_isa isa = loom_gemm_isa_selected();
  const int amx = isa == LOOM_GEMM_AMX || isa == LOOM_GEMM_AVX512BF16;
  loom_tensor t[4] = {view3(LOOM_BFLOAT16, 4, 200, 64, 1), view3(LOOM_BFLOAT16, 4, 300, 64, 1),
                      view3(LOOM_BFLOAT16, 4, 300, 64, 1), {0}};
  loom_kernel_args args = {.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 4,
                           .tensors = t};
  loom_attention_plan p, direct;
  CHECK_OK(loom_kernel_plan(k, &args, &p, sizeof p));
  CHECK_EQ_INT(loom_attention_plan_for(&args, amx, &direct), 0);
  CHECK(!memcmp(&p, &direct, sizeof p));
  CHECK_EQ_INT(p.forward, amx ? LOOM_ATTENTION_BF16 : LOOM_ATTENTION_BLOCKED);
  CHECK(loom_kernel_plan(k, &args, &p, sizeof p + 8) == LOOM_ERROR_INVALID_ARGUMENT);
  args.num_tensors = 3;
  CHECK(loom_kernel_plan(k, &args, &p, sizeof p) == LOOM_ERROR_INVALID_ARGUMENT);
  loom_shutdown();
}

int main(void) {
  RUN_TEST(test_plans_match_the_binding_before);
  RUN_TEST(test_registry_plans_with_the_selected_variant);
  TEST_MAIN_END();
}
