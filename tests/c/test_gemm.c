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

#include "gemm_test_util.h"

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

/* The matmul's launches (LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE)
 * sum k blocks of 512 for fp32 register tiles over a large A and B (rows
 * of several tiles), where the plans without LOOM_GEMM_A_IN_COMPUTE keep
 * 256: the convolutions make those and pack into buffers sized for them.
 * The matmul's result matches the reference and every chunking, and its
 * block and bits are the same for every worker count. */
static void test_long_k_blocks(int isa) {
  const int32_t mm = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE;
  gemm_case g = {.b1 = 1, .b2 = 1, .m = 300, .n = 1504, .k = 700, .pad = 1,
                 .in_dtype = LOOM_FLOAT32, .out_dtype = LOOM_FLOAT32, .alpha = 1.0, .beta = 0.0};
  check_case(&g, isa | mm);
  int64_t sa[4], ta[4], sb[4], tb[4];
  const int64_t na = operand(&g, g.m, g.k, 0, 0, sa, ta), nb = operand(&g, g.k, g.n, 0, 0, sb, tb);
  loom_tensor a = make(LOOM_FLOAT32, na, sa, ta), b = make(LOOM_FLOAT32, nb, sb, tb);
  int64_t csz[4] = {1, 1, g.m, g.n}, cst[4] = {g.m * g.n, g.m * g.n, g.n, 1};
  loom_tensor c = make(LOOM_FLOAT32, g.m * g.n, csz, cst);
  loom_tensor c1 = make(LOOM_FLOAT32, g.m * g.n, csz, cst);
  const int64_t want = isa == LOOM_GEMM_AVX512 || isa == LOOM_GEMM_AVX512BF16 || isa == LOOM_GEMM_AMX
                           ? 512 : 256;
  const int32_t others[] = {0, LOOM_GEMM_IN_COMPUTE}; /* the convolutions' plans */
  CHECK(run(&c1, &a, &b, NULL, isa | mm | LOOM_GEMM_WORKERS(1), 1.0, 0.0, 0) == 0);
  for (int32_t w = 1; w <= 16; w *= 2) {
    loom_gemm_plan p;
    CHECK(loom_gemm_plan_init(&c, &a, &b, isa | mm | LOOM_GEMM_WORKERS(w), &p) == 0);
    CHECK_MSG(p.kc == want, "isa %s, %d workers: k block %ld, want %ld", isa_name(isa), w,
              (long)p.kc, (long)want);
    for (int f = 0; f < 2; ++f) {
      CHECK(loom_gemm_plan_init(&c, &a, &b, isa | others[f] | LOOM_GEMM_WORKERS(w), &p) == 0);
      CHECK_MSG(p.kc == 256, "isa %s, flags %#x, %d workers: k block %ld, want 256",
                isa_name(isa), others[f], w, (long)p.kc);
    }
    if (w == 1) continue;
    CHECK(run(&c, &a, &b, NULL, isa | mm | LOOM_GEMM_WORKERS(w), 1.0, 0.0, w - 1) == 0);
    CHECK_MSG(memcmp(c.data, c1.data, sizeof(float) * (size_t)(g.m * g.n)) == 0,
              "isa %s: %d workers changed the bits", isa_name(isa), w);
  }
  free(a.data), free(b.data), free(c.data), free(c1.data);
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

/* A bf16 C holds the bits of the same product into an fp32 C, each
 * rounded as loom_f32_to_bf16: over one k block (the micro-kernels round
 * their sums straight into C) and several (through the fp32 tile), row
 * panels of 4, 8 and 12 rows, narrow column panels, A packed or read in
 * place, alpha, and values that round to infinity, NaN and subnormals. */
static void test_bf16_out_rounds_fp32(int isa) {
  static const int64_t ms[] = {4, 29, 45}, ks[] = {6, 100, 512, 600};
  const int32_t dts[] = {LOOM_FLOAT32, LOOM_BFLOAT16};
  const int flags[] = {0, LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE};
  const int64_t n = 70;
  for (int di = 0; di < 2; ++di)
    for (int mi = 0; mi < 3; ++mi)
      for (int ki = 0; ki < 4; ++ki) {
        const int64_t m = ms[mi], k = ks[ki];
        const int ta = (mi + ki) % 2;
        const int64_t as[4] = {1, 1, m, k}, bs[4] = {1, 1, k, n}, cs[4] = {1, 1, m, n};
        const int64_t ast[4] = {0, 0, ta ? 1 : k, ta ? m : 1}, bst[4] = {0, 0, n, 1};
        const int64_t cst[4] = {0, 0, n, 1};
        loom_tensor a = make(dts[di], m * k, as, ast), b = make(dts[di], k * n, bs, bst);
        /* rows scaled by 2^-126 to 2^126: sums from subnormal to beyond the
         * largest bf16 and fp32; a NaN and an infinity in A's rows 1 and 2 */
        for (int64_t i = 0; i < m * k; ++i) {
          const float x = get(&a, 0, 0, i / k, i % k) * ldexpf(1.0f, (int)(i / k % 15) * 18 - 126);
          put(&a, ta ? (i % k) * m + i / k : i, x);
        }
        put(&a, ta ? 1 : k, 0.0f / 0.0f);
        put(&a, ta ? 2 + 3 * m : 2 * k + 3, 1.0f / 0.0f);
        loom_tensor c32 = make(LOOM_FLOAT32, m * n, cs, cst), c16 = make(LOOM_BFLOAT16, m * n, cs, cst);
        for (int fi = 0; fi < 2; ++fi)
          for (int al = 0; al < 2; ++al) {
            const double alpha = al ? 0.75 : 1.0;
            CHECK_MSG(run(&c32, &a, &b, NULL, isa | flags[fi], alpha, 0.0, 0) == 0, "fp32 C");
            CHECK_MSG(run(&c16, &a, &b, NULL, isa | flags[fi], alpha, 0.0, 0) == 0, "bf16 C");
            int bad = 0;
            for (int64_t i = 0; i < m * n; ++i)
              bad += ((uint16_t *)c16.data)[i] != loom_f32_to_bf16(((float *)c32.data)[i]);
            CHECK_MSG(bad == 0, "%s %s operands m=%ld k=%ld ta=%d flags=%x alpha=%g: %d bf16 "
                      "results are not the fp32 ones rounded", loom_gemm_isa_name((loom_gemm_isa)isa),
                      di ? "bf16" : "fp32", (long)m, (long)k, ta, flags[fi], alpha, bad);
          }
        free(a.data), free(b.data), free(c32.data), free(c16.data);
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
    test_long_k_blocks(isa);
    test_variants_agree(isa);
    test_small_tiles_agree(isa, LOOM_FLOAT32);
    test_small_tiles_agree(isa, LOOM_BFLOAT16);
    test_narrow_panel_agrees(isa, LOOM_FLOAT32);
    test_narrow_panel_agrees(isa, LOOM_BFLOAT16);
    test_bf16_out_rounds_fp32(isa);
    if (isa == LOOM_GEMM_AVX512) test_store_row16();
    if (isa == LOOM_GEMM_AMX || isa == LOOM_GEMM_AVX512BF16) test_bf16_math(isa);
    printf("%s: %s\n", loom_gemm_isa_name((loom_gemm_isa)isa),
           test_failed == before ? "ok" : "FAILED");
  }
  printf("selected: %s\n", loom_gemm_isa_name(loom_gemm_isa_selected()));
  TEST_MAIN_END();
}
