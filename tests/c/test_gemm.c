/* tests/c/test_gemm.c — every GEMM variant the CPU runs against a naive
 * double-precision reference and against the generic variant: odd shapes,
 * transposed and strided operands, batch broadcasting, alpha/beta with a
 * broadcast Cin, bf16/fp16 operands and outputs, and bitwise independence
 * of the chunking; the matrix-vector kernel on single-column results.
 * Calls the kernels directly, without the runtime. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/gemm/gemv.h"
#include "loom/status.h"
#include "test_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static float get(const loom_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  int64_t off = i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] +
                i3 * t->strides[3];
  switch (t->dtype) {
    case LOOM_FLOAT32: return ((const float *)t->data)[off];
    case LOOM_BFLOAT16: return loom_bf16_to_f32(((const uint16_t *)t->data)[off]);
    default: return loom_f16_to_f32(((const uint16_t *)t->data)[off]);
  }
}

static void put(const loom_tensor *t, int64_t off, float v) {
  switch (t->dtype) {
    case LOOM_FLOAT32: ((float *)t->data)[off] = v; break;
    case LOOM_BFLOAT16: ((uint16_t *)t->data)[off] = loom_f32_to_bf16(v); break;
    default: ((uint16_t *)t->data)[off] = loom_f32_to_f16(v); break;
  }
}

/* A rank-4 view over a fresh buffer of `elems` elements. */
static loom_tensor make(int32_t dtype, int64_t elems, const int64_t sizes[4],
                        const int64_t strides[4]) {
  loom_tensor t = {.dtype = dtype, .rank = 4};
  t.data = calloc((size_t)(elems > 0 ? elems : 1), (size_t)loom_dtype_size(dtype));
  for (int d = 0; d < 4; ++d) t.sizes[d] = sizes[d], t.strides[d] = strides[d];
  for (int64_t i = 0; i < elems; ++i) put(&t, i, rnd());
  return t;
}

/* Not a GEMM variant: run() takes it to mean loom_gemv_kernel. */
enum { GEMV = -1 };

static const char *isa_name(int isa) {
  return isa == GEMV ? "gemv" : loom_gemm_isa_name(isa);
}

static int run_gemv(loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
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
static int run(loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
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

static int64_t operand(const gemm_case *g, int64_t rows, int64_t cols, int trans,
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

static void check_case(const gemm_case *g, int isa) {
  int64_t sa[4], ta[4], sb[4], tb[4];
  int64_t na = operand(g, g->m, g->k, g->trans_a, g->bcast_a, sa, ta);
  int64_t nb = operand(g, g->k, g->n, g->trans_b, g->bcast_b, sb, tb);
  loom_tensor a = make(g->in_dtype, na, sa, ta);
  loom_tensor b = make(g->in_dtype, nb, sb, tb);
  int64_t ldc = g->n + g->pad;
  int64_t csz[4] = {g->b1, g->b2, g->m, g->n};
  int64_t cst[4] = {g->b2 * g->m * ldc, g->m * ldc, ldc, 1};
  loom_tensor c = make(g->out_dtype, g->b1 * g->b2 * g->m * ldc, csz, cst);
  loom_tensor c2 = make(g->out_dtype, g->b1 * g->b2 * g->m * ldc, csz, cst);
  loom_tensor cin;
  if (g->cin_bias) {
    int64_t bst[4] = {0, 0, 0, 1};
    cin = make(LOOM_FLOAT32, g->n, csz, bst);
  } else {
    cin = make(LOOM_FLOAT32, g->b1 * g->b2 * g->m * ldc, csz, cst);
  }
  const loom_tensor *cinp = g->beta != 0.0 ? &cin : NULL;
  int rc = run(&c, &a, &b, cinp, isa, g->alpha, g->beta, 0);
  CHECK_MSG(rc == 0, "isa %d: rc %d", isa, rc);
  /* Another chunking must give the same bits. */
  rc = run(&c2, &a, &b, cinp, isa, g->alpha, g->beta, 3);
  CHECK_MSG(rc == 0, "isa %d: rc %d (grain 3)", isa, rc);
  double tol_in = g->in_dtype == LOOM_FLOAT32 ? 2e-6 : 2e-6; /* products exact */
  double tol_out = g->out_dtype == LOOM_FLOAT32 ? 0 : g->out_dtype == LOOM_BFLOAT16 ? 1.0 / 128 : 1.0 / 1024;
  int bad = 0, diff = 0;
  for (int64_t i1 = 0; i1 < g->b1; ++i1)
    for (int64_t i2 = 0; i2 < g->b2; ++i2)
      for (int64_t i = 0; i < g->m; ++i)
        for (int64_t j = 0; j < g->n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t kk = 0; kk < g->k; ++kk) {
            double x = (double)get(&a, i1, i2, i, kk) * get(&b, i1, i2, kk, j);
            ref += x, mag += fabs(x);
          }
          ref *= g->alpha, mag *= fabs(g->alpha);
          if (g->beta != 0.0) {
            double ci = get(&cin, i1, i2, i, j);
            ref += g->beta * ci, mag += fabs(g->beta * ci);
          }
          double got = get(&c, i1, i2, i, j);
          double tol = tol_in * (mag + 1) * (1 + g->k / 64.0) + tol_out * fabs(ref) + 1e-30;
          if (!(fabs(got - ref) <= tol)) {
            if (bad++ < 3)
              fprintf(stderr, "  [%ld,%ld,%ld,%ld] got %g want %g\n", (long)i1,
                      (long)i2, (long)i, (long)j, got, ref);
          }
          int64_t off = i1 * cst[0] + i2 * cst[1] + i * cst[2] + j;
          size_t es = (size_t)loom_dtype_size(g->out_dtype);
          if (memcmp((char *)c.data + off * es, (char *)c2.data + off * es, es)) ++diff;
        }
  CHECK_MSG(bad == 0, "isa %s b=%ldx%ld m=%ld n=%ld k=%ld ta=%d tb=%d pad=%d in=%d out=%d: %d wrong",
        isa_name(isa), (long)g->b1, (long)g->b2, (long)g->m, (long)g->n,
        (long)g->k, g->trans_a, g->trans_b, g->pad, g->in_dtype, g->out_dtype, bad);
  CHECK_MSG(diff == 0, "isa %s m=%ld n=%ld k=%ld: chunking changed %d results",
        isa_name(isa), (long)g->m, (long)g->n, (long)g->k, diff);
  free(a.data), free(b.data), free(c.data), free(c2.data), free(cin.data);
}

static void test_shapes(int isa) {
  static const int64_t dims[] = {1, 7, 63, 513};
  for (int mi = 0; mi < 4; ++mi)
    for (int ni = 0; ni < 4; ++ni)
      for (int ki = 0; ki < 4; ++ki) {
        int64_t m = dims[mi], n = dims[ni], k = dims[ki];
        if (m * n * k > 513 * 513 * 63) continue; /* keep the reference quick */
        int t = (mi + ni + ki) % 4;
        gemm_case g = {.b1 = 1, .b2 = 1, .m = m, .n = n, .k = k,
                       .trans_a = t & 1, .trans_b = (t >> 1) & 1, .pad = ki % 2 * 3,
                       .in_dtype = LOOM_FLOAT32, .out_dtype = LOOM_FLOAT32,
                       .alpha = 1.0, .beta = 0.0};
        check_case(&g, isa);
      }
}

static void test_features(int isa) {
  const int32_t dts[] = {LOOM_FLOAT32, LOOM_BFLOAT16, LOOM_FLOAT16};
  for (int t = 0; t < 4; ++t) {
    /* batch-broadcast B (matmul of a batch by one matrix), alpha/beta */
    gemm_case g = {.b1 = 2, .b2 = 3, .m = 37, .n = 45, .k = 70, .trans_a = t & 1,
                   .trans_b = t >> 1, .pad = 2, .bcast_b = 1,
                   .in_dtype = LOOM_FLOAT32, .out_dtype = LOOM_FLOAT32,
                   .alpha = 0.5, .beta = 2.0};
    check_case(&g, isa);
    g.bcast_b = 0, g.bcast_a = 1, g.cin_bias = 1, g.beta = 1.0;
    check_case(&g, isa);
  }
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 3; ++o) {
      gemm_case g = {.b1 = 1, .b2 = 2, .m = 29, .n = 70, .k = 601, .trans_a = o & 1,
                     .trans_b = i == 1, .in_dtype = dts[i], .out_dtype = dts[o],
                     .alpha = 1.0, .beta = o == 2 ? 0.5 : 0.0};
      check_case(&g, isa);
      g.k = 7;
      g.m = 1;
      check_case(&g, isa);
    }
  /* k = 0: C = beta * Cin */
  gemm_case z = {.b1 = 1, .b2 = 1, .m = 5, .n = 9, .k = 0, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 1.0, .beta = 3.0};
  check_case(&z, isa);
  /* large multi-block case: several k blocks, m and n tiles */
  gemm_case big = {.b1 = 1, .b2 = 1, .m = 300, .n = 1100, .k = 700, .pad = 1,
                   .trans_b = 1, .in_dtype = LOOM_BFLOAT16, .out_dtype = LOOM_FLOAT32,
                   .alpha = 1.0, .beta = 0.0};
  check_case(&big, isa);
  big.in_dtype = LOOM_FLOAT32, big.trans_b = 0, big.trans_a = 1;
  check_case(&big, isa);
  /* Cin in tiles several micro-panels wide: a full C, and a bias row */
  big.beta = 0.5;
  check_case(&big, isa);
  big.beta = 1.0, big.cin_bias = 1, big.trans_a = 0;
  check_case(&big, isa);
}

/* Every variant must agree with the generic one to rounding. */
static void test_variants_agree(int isa) {
  int64_t sz[4] = {1, 1, 77, 91}, st[4] = {0, 0, 91, 1};
  int64_t sa[4] = {1, 1, 77, 300}, ta[4] = {0, 0, 300, 1};
  int64_t sb[4] = {1, 1, 300, 91}, tb[4] = {0, 0, 1, 300};
  loom_tensor a = make(LOOM_FLOAT32, 77 * 300, sa, ta);
  loom_tensor b = make(LOOM_FLOAT32, 300 * 91, sb, tb);
  loom_tensor c1 = make(LOOM_FLOAT32, 77 * 91, sz, st);
  loom_tensor c2 = make(LOOM_FLOAT32, 77 * 91, sz, st);
  CHECK_MSG(run(&c1, &a, &b, NULL, LOOM_GEMM_GENERIC, 1, 0, 0) == 0, "generic");
  CHECK_MSG(run(&c2, &a, &b, NULL, isa, 1, 0, 0) == 0, "isa");
  int bad = 0;
  for (int i = 0; i < 77 * 91; ++i) {
    float x = ((float *)c1.data)[i], y = ((float *)c2.data)[i];
    if (!(fabsf(x - y) <= 1e-4f * (1 + fabsf(x)))) ++bad;
  }
  CHECK_MSG(bad == 0, "isa %s differs from generic in %d results", loom_gemm_isa_name(isa), bad);
  free(a.data), free(b.data), free(c1.data), free(c2.data);
}

/* A last row panel of at most 4 or 8 rows runs a smaller register tile
 * (AMX: an edge tile goes through a buffer): its rows must be the bits the
 * full tile gives for them, with alpha or without, over one k block or
 * several (AMX's tiles then start from the sum so far). */
static void test_small_tiles_agree(int isa, int32_t dtype) {
  const int64_t full_rows = isa == LOOM_GEMM_AMX && dtype == LOOM_BFLOAT16 ? 32 : 12, n = 70;
  for (int v = 0; v < 2; ++v) {
    const int64_t k = v ? 1100 : 300;
    const double alpha = v ? 1.0 : 0.5;
    int64_t sa[4] = {1, 1, full_rows, k}, ta[4] = {0, 0, k, 1};
    int64_t sb[4] = {1, 1, k, n}, tb[4] = {0, 0, n, 1};
    loom_tensor a = make(dtype, full_rows * k, sa, ta), b = make(dtype, k * n, sb, tb);
    int64_t sc[4] = {1, 1, full_rows, n}, tc[4] = {0, 0, n, 1};
    loom_tensor full = make(LOOM_FLOAT32, full_rows * n, sc, tc);
    CHECK_MSG(run(&full, &a, &b, NULL, isa, alpha, 0, 0) == 0, "full tile");
    for (int64_t rows = 1; rows < full_rows; ++rows) {
      loom_tensor ar = a, cr = full;
      ar.sizes[2] = cr.sizes[2] = rows;
      cr.data = calloc((size_t)(rows * n), sizeof(float));
      CHECK_MSG(run(&cr, &ar, &b, NULL, isa, alpha, 0, 0) == 0, "rows %ld", (long)rows);
      CHECK_MSG(memcmp(cr.data, full.data, sizeof(float) * rows * n) == 0,
            "%s k=%ld: %ld-row panel differs from the full tile", loom_gemm_isa_name(isa),
            (long)k, (long)rows);
      free(cr.data);
    }
    free(a.data), free(b.data), free(full.data);
  }
}

/* A last column panel of at most 16 live columns runs a half-width tile:
 * its columns have the bits of the same columns of a wider product, for
 * tiles of every row count, A packed or read in place, one k block or two. */
static void test_narrow_panel_agrees(int isa, int32_t dtype) {
  const int64_t wide_n = 64, rows_list[] = {3, 8, 12, 29}, widths[] = {33, 40, 48, 49};
  const int flags[] = {0, LOOM_GEMM_IN_COMPUTE};
  for (int v = 0; v < 2; ++v) {
    const int64_t k = v ? 300 : 100;
    for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ++ri) {
      const int64_t rows = rows_list[ri];
      int64_t sa[4] = {1, 1, rows, k}, ta[4] = {0, 0, k, 1};
      int64_t sb[4] = {1, 1, k, wide_n}, tb[4] = {0, 0, wide_n, 1};
      loom_tensor a = make(dtype, rows * k, sa, ta), b = make(dtype, k * wide_n, sb, tb);
      int64_t sc[4] = {1, 1, rows, wide_n}, tc[4] = {0, 0, wide_n, 1};
      loom_tensor full = make(LOOM_FLOAT32, rows * wide_n, sc, tc);
      for (size_t fi = 0; fi < 2; ++fi) {
        CHECK_MSG(run(&full, &a, &b, NULL, isa | flags[fi], 1.0, 0, 0) == 0, "wide product");
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; ++wi) {
          const int64_t n = widths[wi];
          loom_tensor bn = b, cn = full;
          bn.sizes[3] = cn.sizes[3] = n;
          cn.strides[2] = n;
          cn.data = calloc((size_t)(rows * n), sizeof(float));
          CHECK_MSG(run(&cn, &a, &bn, NULL, isa | flags[fi], 1.0, 0, 0) == 0, "narrow product");
          int diff = 0;
          for (int64_t i = 0; i < rows; ++i)
            diff += memcmp((float *)cn.data + i * n, (float *)full.data + i * wide_n,
                           sizeof(float) * (size_t)n) != 0;
          CHECK_MSG(diff == 0, "%s rows=%ld n=%ld k=%ld flags=%d: %d rows differ from the wide product",
                loom_gemm_isa_name(isa), (long)rows, (long)n, (long)k, flags[fi], diff);
          free(cn.data);
        }
      }
      free(a.data), free(b.data), free(full.data);
    }
  }
}

/* A stored transposed (rows along memory) packs four panels per pass over
 * its rows: the product has the bits of the same A stored by rows, for
 * row counts around the groups of 48, two k blocks, two matrices (groups
 * that do not start at a multiple of four units) and grains that split
 * the groups. (The fp32 plans of the AVX512-BF16 and AMX variants pack
 * as this one does.) */
static void test_transposed_a_groups(int isa) {
  const int64_t ms[] = {11, 47, 48, 49, 100}, ks[] = {7, 300};
  const int64_t n = 40, b1 = 2;
  for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ++ki) {
      const int64_t m = ms[mi], k = ks[ki];
      int64_t sa[4] = {b1, 1, m, k}, ta_rows[4] = {m * k, 0, k, 1}, ta_cols[4] = {m * k, 0, 1, m};
      int64_t sb[4] = {b1, 1, k, n}, tb[4] = {k * n, 0, n, 1};
      int64_t sc[4] = {b1, 1, m, n}, tc[4] = {m * n, 0, n, 1};
      loom_tensor by_rows = make(LOOM_FLOAT32, b1 * m * k, sa, ta_rows);
      loom_tensor by_cols = make(LOOM_FLOAT32, b1 * m * k, sa, ta_cols);
      for (int64_t bb = 0; bb < b1; ++bb)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t kk = 0; kk < k; ++kk)
            ((float *)by_cols.data)[bb * m * k + kk * m + i] =
                ((float *)by_rows.data)[bb * m * k + i * k + kk];
      loom_tensor b = make(LOOM_FLOAT32, b1 * k * n, sb, tb);
      loom_tensor want = make(LOOM_FLOAT32, b1 * m * n, sc, tc);
      CHECK_MSG(run(&want, &by_rows, &b, NULL, isa, 1.0, 0.0, 0) == 0, "rows");
      for (int64_t grain = 0; grain < 4; grain += 1 + (grain == 1)) { /* 0, 1, 3 */
        loom_tensor got = make(LOOM_FLOAT32, b1 * m * n, sc, tc);
        CHECK_MSG(run(&got, &by_cols, &b, NULL, isa, 1.0, 0.0, grain) == 0, "cols");
        CHECK_MSG(memcmp(got.data, want.data, sizeof(float) * b1 * m * n) == 0,
              "%s transposed A m=%ld k=%ld grain %ld differs", loom_gemm_isa_name(isa), (long)m,
              (long)k, (long)grain);
        free(got.data);
      }
      free(by_rows.data), free(by_cols.data), free(b.data), free(want.data);
    }
}

/* g's operands, and two C (for the two-launch and the compute launch's
 * own path) and a Cin, for check_in_compute and check_a_in_compute. */
typedef struct two_paths {
  loom_tensor a, b, packed, direct, cin;
  int64_t elems;
} two_paths;

static two_paths two_paths_make(const gemm_case *g) {
  int64_t sa[4], ta[4], sb[4], tb[4];
  int64_t na = operand(g, g->m, g->k, g->trans_a, g->bcast_a, sa, ta);
  int64_t nb = operand(g, g->k, g->n, g->trans_b, g->bcast_b, sb, tb);
  int64_t csz[4] = {g->b1, g->b2, g->m, g->n};
  int64_t cst[4] = {g->b2 * g->m * g->n, g->m * g->n, g->n, 1};
  two_paths t = {.elems = g->b1 * g->b2 * g->m * g->n};
  t.a = make(g->in_dtype, na, sa, ta), t.b = make(g->in_dtype, nb, sb, tb);
  t.packed = make(g->out_dtype, t.elems, csz, cst);
  t.direct = make(g->out_dtype, t.elems, csz, cst);
  t.cin = make(LOOM_FLOAT32, t.elems, csz, cst);
  return t;
}

static void two_paths_free(two_paths *t) {
  free(t->a.data), free(t->b.data), free(t->packed.data), free(t->direct.data), free(t->cin.data);
}

/* The compute launch's own handling of operands (LOOM_GEMM_IN_COMPUTE)
 * must give the bits of the two-launch path, and the plan must take each
 * part exactly when it applies: full row panels of A read in place (the
 * micro-kernel's format, k contiguous, aligned bf16 pairs, small, rows not
 * 4 KB apart), and B's panels packed per tile (one row tile, B not
 * broadcast). */
static void check_in_compute(const gemm_case *g, int isa, int expect_a, int expect_b) {
  two_paths t = two_paths_make(g);
  loom_tensor a = t.a, b = t.b, packed = t.packed, direct = t.direct;
  const loom_tensor *cinp = g->beta != 0.0 ? &t.cin : NULL;
  const int64_t elems = t.elems;
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&direct, &a, &b, isa | LOOM_GEMM_IN_COMPUTE, &p) == 0, "plan");
  int reads_bf16 = isa == LOOM_GEMM_AVX512BF16 || isa == LOOM_GEMM_AMX;
  int want = expect_a && (g->in_dtype == LOOM_FLOAT32 ? isa != LOOM_GEMM_GENERIC : reads_bf16);
  /* AMX tiles read whole 32-k runs of 32 rows */
  if (isa == LOOM_GEMM_AMX && g->in_dtype == LOOM_BFLOAT16 && (g->k % 32 || g->m < 32)) want = 0;
  CHECK_MSG(p.a_in_place == want, "%s m=%ld k=%ld in=%d pad=%d: a_in_place %d, want %d",
        isa_name(isa), (long)g->m, (long)g->k, g->in_dtype, g->pad, p.a_in_place, want);
  CHECK_MSG(p.b_in_compute == expect_b, "%s m=%ld n=%ld: b_in_compute %d, want %d", isa_name(isa),
        (long)g->m, (long)g->n, p.b_in_compute, expect_b);
  /* an A read in place leaves its partial last panel to the tiles too */
  if (p.a_in_place && p.b_in_compute)
    CHECK_MSG(p.pack_range == 0 && p.a_tail_in_compute == (g->m % p.mr != 0),
          "%s m=%ld: pack range %ld, tail in compute %d", isa_name(isa), (long)g->m,
          (long)p.pack_range, p.a_tail_in_compute);
  CHECK_MSG(run(&packed, &a, &b, cinp, isa, g->alpha, g->beta, 0) == 0, "packed");
  CHECK_MSG(run(&direct, &a, &b, cinp, isa | LOOM_GEMM_IN_COMPUTE, g->alpha, g->beta, 0) == 0, "direct");
  CHECK_MSG(memcmp(packed.data, direct.data, (size_t)(elems * loom_dtype_size(g->out_dtype))) == 0,
        "%s m=%ld k=%ld in=%d tb=%d: the compute launch's own operands changed the bits",
        isa_name(isa), (long)g->m, (long)g->k, g->in_dtype, g->trans_b);
  two_paths_free(&t);
}

static void test_in_compute(int isa) {
  /* 37 rows: three full panels in place and a packed last one, one row
   * tile (600 columns make enough column tiles); k spans several k
   * blocks; sliced rows; a batch-broadcast A; alpha and Cin. */
  gemm_case g = {.b1 = 1, .b2 = 3, .m = 37, .n = 600, .k = 600, .pad = 2, .bcast_a = 1,
                 .in_dtype = LOOM_FLOAT32, .out_dtype = LOOM_FLOAT32, .alpha = 0.5,
                 .beta = 2.0};
  check_in_compute(&g, isa, 1, 1);
  g.m = 36; /* whole panels only: nothing for the pack launch */
  check_in_compute(&g, isa, 1, 1);
  g.m = 37, g.trans_b = 1; /* B's panels from k-contiguous lanes */
  check_in_compute(&g, isa, 1, 1);
  g.trans_b = 0, g.bcast_a = 0, g.bcast_b = 1; /* a broadcast B serves several tiles */
  check_in_compute(&g, isa, 1, 0);
  g.bcast_b = 0, g.in_dtype = LOOM_BFLOAT16, g.out_dtype = LOOM_BFLOAT16, g.k = 1100;
  check_in_compute(&g, isa, 1, 1);
  g.k = 1088; /* whole AMX tile steps */
  check_in_compute(&g, isa, 1, 1);
  g.m = 64; /* two whole AMX row panels */
  check_in_compute(&g, isa, 1, 1);
  g.m = 37, g.k = 71; /* an odd k has no last pair to read */
  check_in_compute(&g, isa, 0, 1);
  g.k = 70, g.pad = 1; /* rows an odd number of bf16 apart are not pairs */
  check_in_compute(&g, isa, 0, 1);
  g.in_dtype = LOOM_FLOAT16, g.pad = 2; /* packed as fp32 */
  check_in_compute(&g, isa, 0, 1);
  g.in_dtype = LOOM_FLOAT32, g.trans_a = 1; /* k not contiguous */
  check_in_compute(&g, isa, 0, 1);
  g.trans_a = 0, g.m = 11; /* no full panel */
  check_in_compute(&g, isa, 0, 1);
  g.m = 20, g.k = 1024, g.pad = 0; /* rows 4 KB apart */
  check_in_compute(&g, isa, 0, 1);
  /* past the size worth reading in place, and an A past 768 KB: row tiles */
  g.m = 300, g.k = 1000, g.b2 = 1;
  check_in_compute(&g, isa, 0, 0);
  g.n = 256; /* as large, but a narrow C: its panels serve few tiles */
  check_in_compute(&g, isa, 1, 0);
  /* 200 rows in one tall tile, when the columns make tiles enough (the
   * generic kernel's 4-row panels are too many for one tile) */
  g.m = 200, g.k = 1400, g.n = 1600, g.b2 = 3;
  check_in_compute(&g, isa, 0, isa != LOOM_GEMM_GENERIC);
  g.n = 300; /* too few column tiles: rows are cut */
  check_in_compute(&g, isa, 1, 0);
  g.k = 40; /* a small A: column tiles, as tall as C */
  check_in_compute(&g, isa, 1, 1);
}

/* A small A (at most 768 KB) cuts C into column tiles as tall as C, at
 * least two per worker (LOOM_GEMM_WORKERS), each packing its own B panels,
 * when they share out evenly and, for an A packed by the pack launch (the
 * generic kernel's), are at least three panels wide; the bits are the
 * two-launch path's whatever the tiling. `tiles`: the column tiles
 * expected, 0 for row tiles. */
static void check_column_tiles(const gemm_case *g, int isa, int workers, int64_t tiles) {
  two_paths t = two_paths_make(g);
  const int flags = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_WORKERS(workers);
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b, isa | flags, &p) == 0, "plan");
  const int column = p.m_tiles == 1 && p.b_in_compute;
  CHECK_MSG(tiles ? column && p.n_tiles == tiles : !column,
        "%s %ldx%ldx%ld, %d workers: %ld x %ld tiles of %ld x %ld, want %ld column tiles",
        isa_name(isa), (long)g->m, (long)g->n, (long)g->k, workers, (long)p.m_tiles,
        (long)p.n_tiles, (long)p.mt, (long)p.nt, (long)tiles);
  CHECK_MSG(run(&t.packed, &t.a, &t.b, NULL, isa, g->alpha, g->beta, 0) == 0, "packed");
  CHECK_MSG(run(&t.direct, &t.a, &t.b, NULL, isa | flags, g->alpha, g->beta, 0) == 0, "direct");
  CHECK_MSG(memcmp(t.packed.data, t.direct.data,
               (size_t)(t.elems * loom_dtype_size(g->out_dtype))) == 0,
        "%s %d workers: the tiling changed the bits", isa_name(isa), workers);
  two_paths_free(&t);
}

static void test_column_tiles(int isa) {
  gemm_case g = {.b1 = 1, .b2 = 1, .m = 256, .n = 256, .k = 256, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 1.0, .beta = 0.0};
  check_column_tiles(&g, isa, 0, 4); /* 0 plans for 2 workers */
  check_column_tiles(&g, isa, 2, 4);
  check_column_tiles(&g, isa, 4, isa == LOOM_GEMM_GENERIC ? 0 : 8);
  check_column_tiles(&g, isa, 64, 0); /* too few columns for so many */
  /* 13 panels of 32 columns over two workers: one would wait for the other */
  g.m = 512, g.n = 392;
  check_column_tiles(&g, isa, 2, 0);
  g.m = 300, g.k = 700; /* A past 768 KB */
  check_column_tiles(&g, isa, 2, 0);
  g.n = 512, g.k = 200, g.in_dtype = g.out_dtype = LOOM_BFLOAT16;
  check_column_tiles(&g, isa, 2, 4);
}

/* fp32 register tiles walk a tile's row panels outermost when B is packed
 * by the pack launch, and its column panels outermost when the tile packs
 * its own B (one row tile): both give the same bits. Partial row and
 * column panels, three k blocks, alpha and Cin; A read in place, packed,
 * and packed by its tile (one column tile). */
static void check_rows_outer(const gemm_case *g, int isa, int flags, const char *what) {
  two_paths t = two_paths_make(g);
  const loom_tensor *cinp = g->beta != 0.0 ? &t.cin : NULL;
  loom_gemm_plan packed, direct;
  CHECK_MSG(loom_gemm_plan_init(&t.packed, &t.a, &t.b, isa, &packed) == 0, "plan");
  CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b, isa | flags, &direct) == 0, "plan");
  const int fp32 =
      isa == LOOM_GEMM_AVX512 || (isa != LOOM_GEMM_GENERIC && g->in_dtype == LOOM_FLOAT32);
  CHECK_MSG(packed.rows_outer == fp32 && !direct.rows_outer && direct.b_in_compute,
        "%s %s: rows outer %d (packed) %d (B packed by its tile), want %d and 0", isa_name(isa),
        what, packed.rows_outer, direct.rows_outer, fp32);
  CHECK_MSG(run(&t.packed, &t.a, &t.b, cinp, isa, g->alpha, g->beta, 0) == 0, "packed");
  CHECK_MSG(run(&t.direct, &t.a, &t.b, cinp, isa | flags, g->alpha, g->beta, 0) == 0, "direct");
  const size_t bytes = (size_t)(t.elems * loom_dtype_size(g->out_dtype));
  CHECK_MSG(memcmp(t.packed.data, t.direct.data, bytes) == 0, "%s %s: the loop orders' bits differ",
        isa_name(isa), what);
  two_paths_free(&t);
}

static void test_rows_outer(int isa) {
  gemm_case g = {.b1 = 1, .b2 = 2, .m = 100, .n = 1000, .k = 600, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 0.5, .beta = 2.0};
  check_rows_outer(&g, isa, LOOM_GEMM_IN_COMPUTE, "A in place");
  g.trans_a = 1;
  check_rows_outer(&g, isa, LOOM_GEMM_IN_COMPUTE, "A packed");
  g.n = 500, g.pad = 2;
  check_rows_outer(&g, isa, LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE, "A packed by its tile");
  g.in_dtype = g.out_dtype = LOOM_BFLOAT16, g.beta = 0.0, g.k = 640;
  check_rows_outer(&g, isa, LOOM_GEMM_IN_COMPUTE, "bf16");
}

/* A packed by the compute launch (LOOM_GEMM_A_IN_COMPUTE): taken when one
 * column tile covers C and A is neither read in place nor shared by several
 * products, and giving the bits of the two-launch path. Without the flag
 * (the convolutions' plans) A is never packed by its tile. */
static void check_a_in_compute(const gemm_case *g, int isa, int expect) {
  two_paths t = two_paths_make(g);
  loom_tensor a = t.a, b = t.b, packed = t.packed, direct = t.direct;
  const loom_tensor *cinp = g->beta != 0.0 ? &t.cin : NULL;
  const int64_t elems = t.elems;
  const int flags = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE;
  loom_gemm_plan p, without;
  CHECK_MSG(loom_gemm_plan_init(&direct, &a, &b, isa | flags, &p) == 0, "plan");
  CHECK_MSG(loom_gemm_plan_init(&direct, &a, &b, isa | LOOM_GEMM_IN_COMPUTE, &without) == 0, "plan");
  CHECK_MSG(p.a_in_compute == expect && !without.a_in_compute,
        "%s m=%ld k=%ld n=%ld ta=%d: a_in_compute %d (%d without the flag), want %d",
        isa_name(isa), (long)g->m, (long)g->k, (long)g->n, g->trans_a, p.a_in_compute,
        without.a_in_compute, expect);
  if (p.a_in_compute)
    CHECK_MSG(p.pack_units_a == 0 && (p.n_tiles == 1 || p.m_tiles == 1), "%s: A units", isa_name(isa));
  CHECK_MSG(run(&packed, &a, &b, cinp, isa, g->alpha, g->beta, 0) == 0, "packed");
  CHECK_MSG(run(&direct, &a, &b, cinp, isa | flags, g->alpha, g->beta, 0) == 0, "direct");
  CHECK_MSG(memcmp(packed.data, direct.data, (size_t)(elems * loom_dtype_size(g->out_dtype))) == 0,
        "%s m=%ld k=%ld n=%ld in=%d ta=%d: A packed by its tile changed the bits",
        isa_name(isa), (long)g->m, (long)g->k, (long)g->n, g->in_dtype, g->trans_a);
  two_paths_free(&t);
}

static void test_a_in_compute(int isa) {
  /* rows 4 KB apart (not read in place), several k blocks, a partial last
   * row panel, 200 columns: one column tile; alpha and Cin */
  gemm_case g = {.b1 = 1, .b2 = 2, .m = 301, .n = 200, .k = 1024, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 0.5, .beta = 2.0};
  check_a_in_compute(&g, isa, 1);
  g.trans_a = 1, g.k = 900; /* a transposed A */
  check_a_in_compute(&g, isa, 1);
  /* bf16 pairs; AMX's 32-row panels need more rows for tiles enough */
  g.in_dtype = LOOM_BFLOAT16, g.out_dtype = LOOM_BFLOAT16, g.beta = 0.0, g.m = 257, g.k = 2100;
  check_a_in_compute(&g, isa, 1);
  g.in_dtype = LOOM_FLOAT32, g.out_dtype = LOOM_FLOAT32, g.m = 301, g.k = 900;
  g.n = 700; /* two column tiles */
  check_a_in_compute(&g, isa, 0);
  g.n = 200, g.bcast_a = 1; /* one A for both products: packed once */
  check_a_in_compute(&g, isa, 0);
  g.bcast_a = 0, g.trans_a = 0, g.pad = 2; /* k contiguous, a narrow C: read in place */
  check_a_in_compute(&g, isa, isa == LOOM_GEMM_GENERIC);
  /* an A under 768 KB read in place: column tiles, each packing its B panels
   * (the generic kernel reads no A in place, and 13 panels over two
   * workers leave one waiting: one column tile) */
  g.m = 101, g.k = 700;
  check_a_in_compute(&g, isa, isa == LOOM_GEMM_GENERIC);
  /* column tiles of a transposed A that each worker packs twice, 64 KB at
   * a time: each tile packs it for itself */
  g.m = g.n = g.k = 128, g.trans_a = 1, g.pad = 0;
  check_a_in_compute(&g, isa, 1);
  /* three tiles of 130 KB each per worker: packed once, by the pack launch
   * (the generic kernel's 16-column panels make two tiles per worker) */
  g.m = g.n = g.k = 180, g.b2 = 1;
  check_a_in_compute(&g, isa, isa == LOOM_GEMM_GENERIC);
}

/* Single-column results through the matrix-vector kernel: row-major and
 * column-major A, slices, batch broadcast, dtypes, alpha/beta, k = 0 and
 * k across the staging chunks, m across several row blocks. */
static void test_gemv(void) {
  const int32_t dts[] = {LOOM_FLOAT32, LOOM_BFLOAT16, LOOM_FLOAT16};
  static const int64_t ms[] = {1, 7, 63, 513}, ks[] = {0, 1, 17, 3000};
  for (int mi = 0; mi < 4; ++mi)
    for (int ki = 0; ki < 4; ++ki)
      for (int t = 0; t < 4; ++t) {
        gemm_case g = {.b1 = 1 + (t == 3), .b2 = 1 + (t >= 2), .m = ms[mi], .n = 1,
                       .k = ks[ki], .trans_a = t & 1, .trans_b = t == 2, .pad = t,
                       .bcast_a = t == 3, .in_dtype = LOOM_FLOAT32,
                       .out_dtype = LOOM_FLOAT32, .alpha = t ? 0.5 : 1.0,
                       .beta = t >= 2 ? 2.0 : 0.0, .cin_bias = t == 3};
        check_case(&g, GEMV);
      }
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 3; ++o) {
      gemm_case g = {.b1 = 1, .b2 = 2, .m = 70, .n = 1, .k = 601, .trans_a = (i + o) & 1,
                     .in_dtype = dts[i], .out_dtype = dts[o], .alpha = 1.0,
                     .beta = o == 2 ? 0.5 : 0.0};
      check_case(&g, GEMV);
    }
}

/* The vector row store rounds every value as the scalar conversions do:
 * ties, NaN payloads, infinities, signed zeros, subnormals, overflow. */
static void test_store_row16(void) {
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
      0x7f800001u, 0xffa12345u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,
      0x00000001u, 0x807fffffu, 0x33000000u, 0x33000001u, 0x387fe000u,
      0x477ff000u, 0x477fefffu, 0x7f7fffffu, 0x3c001000u, 0x3c003000u};
  enum { N = 53 };
  float src[N];
  for (int i = 0; i < N; ++i) {
    uint32_t bits = i < 20 ? special[i] : (uint32_t)(rnd() * 4e9f) ^ (uint32_t)i << 20;
    memcpy(&src[i], &bits, sizeof bits);
  }
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    uint16_t out[N + 1];
    out[N] = 0xabcd;
    loom_gemm_store_row16_avx512(out, src, N, bf16);
    int bad = 0;
    for (int i = 0; i < N; ++i)
      bad += out[i] != (bf16 ? loom_f32_to_bf16(src[i]) : loom_f32_to_f16(src[i]));
    CHECK_MSG(bad == 0 && out[N] == 0xabcd, "%s row store: %d values differ",
          bf16 ? "bf16" : "fp16", bad);
  }
}

static void test_bad_input(void) {
  int64_t s[4] = {1, 1, 4, 5}, st[4] = {0, 0, 5, 1};
  loom_tensor a = {.dtype = LOOM_FLOAT32, .rank = 4}, b = a, c = a;
  for (int d = 0; d < 4; ++d) a.sizes[d] = b.sizes[d] = c.sizes[d] = s[d], a.strides[d] = st[d];
  b.sizes[2] = 6; /* inner dims disagree */
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&c, &a, &b, 0, &p) == LOOM_ERROR_INVALID_ARGUMENT, "mismatch");
  b = a, b.sizes[2] = 5, b.sizes[3] = 4, c.sizes[3] = 4;
  b.dtype = LOOM_INT32;
  CHECK_MSG(loom_gemm_plan_init(&c, &a, &b, 0, &p) == LOOM_ERROR_INVALID_ARGUMENT, "dtype");
  b.dtype = LOOM_FLOAT32, b.rank = 3;
  CHECK_MSG(loom_gemm_plan_init(&c, &a, &b, 0, &p) == LOOM_ERROR_INVALID_ARGUMENT, "rank");
}

/* bf16 math (AMX and AVX512BF16): fp32 operands (either layout, with NaN
 * and infinities in places) multiplied as their bf16 high or low parts
 * give bitwise the GEMM of those parts made beforehand, packed by the pack
 * launch or by the compute launch; and the three passes of high and low
 * parts come within 2^-15 of the fp32 product's magnitude sums. */
static uint16_t split_part(float x, int low) {
  const uint16_t h = loom_f32_to_bf16(x);
  if (!low) return h;
  return x - x == 0.0f ? loom_f32_to_bf16(x - loom_bf16_to_f32(h)) : 0;
}

static void test_bf16_math(int isa) {
  const int64_t m = 45, n = 70, k = 600; /* two k blocks, partial panels */
  for (int trans = 0; trans < 4; ++trans) {
    const int ta = trans & 1, tb = trans >> 1;
    const int64_t as[4] = {1, 1, m, k}, bs[4] = {1, 1, k, n}, cs[4] = {1, 1, m, n};
    const int64_t ast[4] = {0, 0, ta ? 1 : k, ta ? m : 1}, bst[4] = {0, 0, tb ? 1 : n, tb ? k : 1};
    const int64_t cst[4] = {0, 0, n, 1};
    loom_tensor a = make(LOOM_FLOAT32, m * k, as, ast), b = make(LOOM_FLOAT32, k * n, bs, bst);
    float *af = a.data, *bf = b.data;
    for (int64_t i = 0; i < m * k; ++i) af[i] *= 1000.0f; /* low parts matter */
    af[7] = 1.0f / 0.0f, bf[11] = -1.0f / 0.0f, af[k + 3] = 0.0f / 0.0f;
    loom_tensor c = make(LOOM_FLOAT32, m * n, cs, cst), ref = make(LOOM_FLOAT32, m * n, cs, cst);
    loom_tensor a16 = make(LOOM_BFLOAT16, m * k, as, ast), b16 = make(LOOM_BFLOAT16, k * n, bs, bst);
    float *sum3 = calloc((size_t)(m * n), sizeof(float));
    const int parts[3][2] = {{1, 0}, {0, 1}, {0, 0}};
    for (int pass = 0; pass < 3; ++pass) {
      const int al = parts[pass][0], bl = parts[pass][1];
      for (int64_t i = 0; i < m * k; ++i) ((uint16_t *)a16.data)[i] = split_part(af[i], al);
      for (int64_t i = 0; i < k * n; ++i) ((uint16_t *)b16.data)[i] = split_part(bf[i], bl);
      const int flags = LOOM_GEMM_BF16_MATH | (al ? LOOM_GEMM_A_LOW : 0) | (bl ? LOOM_GEMM_B_LOW : 0);
      CHECK_MSG(run(&ref, &a16, &b16, NULL, isa, 1.0, 0.0, 0) == 0, "bf16 parts");
      for (int where = 0; where < 2; ++where) {
        const int in_compute = where ? LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE : 0;
        CHECK_MSG(run(&c, &a, &b, NULL, isa | flags | in_compute, 1.0, 0.0, 0) == 0,
                  "bf16 math");
        CHECK_MSG(memcmp(c.data, ref.data, sizeof(float) * (size_t)(m * n)) == 0,
                  "%s bf16 math (A %s%s, B %s%s, packed in %s) differs from the GEMM of its "
                  "parts",
                  loom_gemm_isa_name((loom_gemm_isa)isa), al ? "low" : "high",
                  ta ? ", transposed" : "", bl ? "low" : "high", tb ? ", transposed" : "",
                  where ? "compute" : "the pack launch");
      }
      for (int64_t i = 0; i < m * n; ++i) sum3[i] += ((float *)c.data)[i];
    }
    /* the three passes against the fp32 product, rows and columns away
     * from the non-finite entries */
    int bad = 0;
    for (int64_t i = 2; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double x = get(&a, 0, 0, i, kk), y = get(&b, 0, 0, kk, j);
          exact += x * y, mag += fabs(x * y);
        }
        if (!isfinite(exact)) continue;
        if (!(fabs(sum3[i * n + j] - exact) <= mag * 0x1p-15)) ++bad;
      }
    CHECK_MSG(bad == 0, "bf16x3 (trans %d): %d results off", trans, bad);
    free(sum3);
    free(a.data), free(b.data), free(c.data), free(ref.data), free(a16.data), free(b16.data);
  }
}

int main(void) {
  test_bad_input();
  test_gemv();
  printf("gemv: %s\n", test_failed ? "FAILED" : "ok");
  for (int isa = 0; isa < LOOM_GEMM_ISA_COUNT; ++isa) {
    if (!loom_gemm_isa_supported((loom_gemm_isa)isa)) {
      test_skip("%s: not supported by this CPU", loom_gemm_isa_name((loom_gemm_isa)isa));
      continue;
    }
    int before = test_failed;
    test_shapes(isa);
    test_features(isa);
    test_variants_agree(isa);
    test_small_tiles_agree(isa, LOOM_FLOAT32);
    test_small_tiles_agree(isa, LOOM_BFLOAT16);
    test_narrow_panel_agrees(isa, LOOM_FLOAT32);
    test_narrow_panel_agrees(isa, LOOM_BFLOAT16);
    test_in_compute(isa);
    test_a_in_compute(isa);
    test_column_tiles(isa);
    test_rows_outer(isa);
    if (isa == LOOM_GEMM_AVX512) test_transposed_a_groups(isa);
    if (isa == LOOM_GEMM_AVX512) test_store_row16();
    if (isa == LOOM_GEMM_AMX || isa == LOOM_GEMM_AVX512BF16) test_bf16_math(isa);
    printf("%s: %s\n", loom_gemm_isa_name((loom_gemm_isa)isa),
           test_failed == before ? "ok" : "FAILED");
  }
  printf("selected: %s\n", loom_gemm_isa_name(loom_gemm_isa_selected()));
  TEST_MAIN_END();
}
