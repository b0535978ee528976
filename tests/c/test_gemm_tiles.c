/* tests/c/test_gemm_tiles.c — the GEMM's tilings and the compute launch's
 * own handling of operands (LOOM_GEMM_IN_COMPUTE, LOOM_GEMM_A_IN_COMPUTE):
 * which plan takes each path, and that every path gives the bits of the
 * two-launch path, whatever the tiling, the grain and the chunks' order.
 * Calls the kernels directly, without the runtime. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "loom/status.h"
#include "test_util.h"

#include "gemm_test_util.h"

/* A stored transposed (rows along memory) packs four panels per pass over
 * its rows, fp32 words or bf16 k-pairs, in the pack launch or in a tile
 * that packs its own (`flags`): the product has the bits of the same A
 * stored by rows, for row counts around the groups of 48, odd k, several
 * k blocks, two matrices (groups that do not start at a multiple of four
 * units) and grains that split the groups. (The fp32 plans of the
 * AVX512-BF16 and AMX variants pack as this one does.) */
static void check_transposed_a_groups(int isa, int32_t dtype, int flags) {
  const int64_t ms[] = {11, 47, 48, 49, 100}, ks[] = {7, 300, 1100};
  const int64_t n = 40, b1 = 2, es = loom_dtype_size(dtype);
  for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ++ki) {
      const int64_t m = ms[mi], k = ks[ki];
      /* a row of NaN after each transposed matrix: a pack that reads past
       * k multiplies it into the result */
      int64_t sa[4] = {b1, 1, m, k}, ta_rows[4] = {m * k, 0, k, 1},
              ta_cols[4] = {(k + 1) * m, 0, 1, m};
      int64_t sb[4] = {b1, 1, k, n}, tb[4] = {k * n, 0, n, 1};
      int64_t sc[4] = {b1, 1, m, n}, tc[4] = {m * n, 0, n, 1};
      loom_tensor by_rows = make(dtype, b1 * m * k, sa, ta_rows);
      loom_tensor by_cols = make(dtype, b1 * (k + 1) * m, sa, ta_cols);
      for (int64_t bb = 0; bb < b1; ++bb)
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t kk = 0; kk < k; ++kk)
            memcpy((char *)by_cols.data + (bb * (k + 1) * m + kk * m + i) * es,
                   (char *)by_rows.data + (bb * m * k + i * k + kk) * es, (size_t)es);
          put(&by_cols, bb * (k + 1) * m + k * m + i, NAN);
        }
      loom_tensor b = make(dtype, b1 * k * n, sb, tb);
      loom_tensor want = make(LOOM_FLOAT32, b1 * m * n, sc, tc);
      CHECK_MSG(run(&want, &by_rows, &b, NULL, isa, 1.0, 0.0, 0) == 0, "rows");
      for (int64_t grain = 0; grain < 4; grain += 1 + (grain == 1)) { /* 0, 1, 3 */
        loom_tensor got = make(LOOM_FLOAT32, b1 * m * n, sc, tc);
        CHECK_MSG(run(&got, &by_cols, &b, NULL, isa | flags, 1.0, 0.0, grain) == 0, "cols");
        CHECK_MSG(memcmp(got.data, want.data, sizeof(float) * b1 * m * n) == 0,
              "%s transposed A dtype %d flags %#x m=%ld k=%ld grain %ld differs",
              loom_gemm_isa_name(isa), dtype, flags, (long)m, (long)k, (long)grain);
        free(got.data);
      }
      free(by_rows.data), free(by_cols.data), free(b.data), free(want.data);
    }
}

static void test_transposed_a_groups(int isa) {
  const int by_tile = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE;
  if (isa == LOOM_GEMM_AVX512) {
    check_transposed_a_groups(isa, LOOM_FLOAT32, 0);
    check_transposed_a_groups(isa, LOOM_FLOAT32, by_tile);
  }
  if (isa == LOOM_GEMM_AVX512BF16) { /* bf16 k-pairs */
    check_transposed_a_groups(isa, LOOM_BFLOAT16, 0);
    check_transposed_a_groups(isa, LOOM_BFLOAT16, by_tile);
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

/* Whether the direct path (the matmul's flags) agrees with the two-launch
 * path: the same bits where both plans sum the same k blocks; where the
 * direct plan sums blocks of 512 (a large fp32 product: test_gemm.c,
 * test_long_k_blocks), the same sums in another order, within 1e-6 per
 * unit of k of each element (operands in [-1, 1]: a block lost or summed
 * twice is off by about one). */
static int paths_agree(const two_paths *t, int isa, int flags) {
  loom_gemm_plan two, direct;
  if (loom_gemm_plan_init(&t->packed, &t->a, &t->b, isa, &two) != 0 ||
      loom_gemm_plan_init(&t->direct, &t->a, &t->b, isa | flags, &direct) != 0)
    return 0;
  if (two.kc == direct.kc)
    return memcmp(t->packed.data, t->direct.data,
                  (size_t)(t->elems * loom_dtype_size(t->packed.dtype))) == 0;
  const loom_tensor *c = &t->packed;
  for (int64_t i1 = 0; i1 < c->sizes[0]; ++i1)
    for (int64_t i2 = 0; i2 < c->sizes[1]; ++i2)
      for (int64_t i = 0; i < c->sizes[2]; ++i)
        for (int64_t j = 0; j < c->sizes[3]; ++j) {
          const double x = get(&t->packed, i1, i2, i, j), y = get(&t->direct, i1, i2, i, j);
          const double tol = 1e-6 * (double)t->a.sizes[3] +
                             (c->dtype == LOOM_FLOAT32 ? 0.0 : fabs(x) / 128);
          if (!(fabs(x - y) <= tol)) return 0;
        }
  return 1;
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
  /* an A read in place leaves its partial last panel to the tiles too,
   * and no workspace (run() allocates just what the plan asks) */
  if (p.a_in_place && p.b_in_compute)
    CHECK_MSG(p.pack_range == 0 && p.a_tail_in_compute == (g->m % p.mr != 0) &&
                  p.workspace_bytes == 0,
          "%s m=%ld: pack range %ld, tail in compute %d, workspace %ld", isa_name(isa),
          (long)g->m, (long)p.pack_range, p.a_tail_in_compute, (long)p.workspace_bytes);
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
  CHECK_MSG(paths_agree(&t, isa, flags),
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
  g.n = 1200; /* several column tiles (B past 4 MB: no tiles as wide as C) */
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

/* Tiles as tall as C for the matmul's launches (LOOM_GEMM_A_IN_COMPUTE)
 * when at most twice the usual rows fit one, narrowed down to two panels
 * for tiles enough, each tile packing its own B panels; the bits are the
 * two-launch path's. `tiles`: the column tiles expected, 0 for another
 * tiling. */
static void check_tall(const gemm_case *g, int isa, int64_t tiles) {
  two_paths t = two_paths_make(g);
  const loom_tensor *cinp = g->beta != 0.0 ? &t.cin : NULL;
  const int flags = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE;
  loom_gemm_plan p;
  CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b, isa | flags, &p) == 0, "plan");
  const int tall = p.m_tiles == 1 && p.b_in_compute;
  CHECK_MSG(tiles ? tall && p.n_tiles == tiles : !tall,
        "%s %ldx%ldx%ld ta=%d: %ld x %ld tiles of %ld x %ld (B by its tile %d), want %ld tall",
        isa_name(isa), (long)g->m, (long)g->n, (long)g->k, g->trans_a, (long)p.m_tiles,
        (long)p.n_tiles, (long)p.mt, (long)p.nt, p.b_in_compute, (long)tiles);
  CHECK_MSG(run(&t.packed, &t.a, &t.b, cinp, isa, g->alpha, g->beta, 0) == 0, "packed");
  for (int64_t grain = 0; grain < 4; grain += 3) { /* the plan's, and 3 */
    CHECK_MSG(run(&t.direct, &t.a, &t.b, cinp, isa | flags, g->alpha, g->beta, grain) == 0,
          "direct");
    CHECK_MSG(memcmp(t.packed.data, t.direct.data,
                 (size_t)(t.elems * loom_dtype_size(g->out_dtype))) == 0,
          "%s %ldx%ldx%ld ta=%d grain %ld: the tall tiles changed the bits", isa_name(isa),
          (long)g->m, (long)g->n, (long)g->k, g->trans_a, (long)grain);
  }
  two_paths_free(&t);
}

static void test_tall_tiles(int isa) {
  /* an A past 768 KB (no column tiles) and not read in place; a partial
   * last row and column panel, four k blocks (the last of 32), alpha, Cin.
   * The generic kernel's 4-row panels are too many for one tile. */
  const int64_t fit = isa != LOOM_GEMM_GENERIC;
  gemm_case g = {.b1 = 1, .b2 = 1, .m = 263, .n = 993, .k = 800, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 0.5, .beta = 2.0};
  check_tall(&g, isa, fit * 16); /* 32 column panels: 16 tiles of two */
  g.m = 288, g.n = 961; /* 24 row panels, 31 column panels */
  check_tall(&g, isa, fit * 16);
  g.trans_a = 1; /* A packed from rows along memory */
  check_tall(&g, isa, fit * 16);
  g.trans_a = 0, g.m = 289; /* 25 row panels: row tiles */
  check_tall(&g, isa, 0);
  g.m = 263, g.n = 929; /* 30 column panels: 15 tiles of two are too few */
  check_tall(&g, isa, 0);
}

/* A stored transposed and packed by its tile (one column tile), at least
 * three row panels per tile: four panels per pass over A's rows. Tiles of
 * 36, 72 and 144 rows, groups of four panels and a partial last group, a
 * partial last tile, a last k block of 9, two matrices, alpha and Cin: the
 * bits of the two-launch path (check_a_in_compute). */
static void test_transposed_a_by_tile(int isa) {
  gemm_case g = {.b1 = 1, .b2 = 2, .m = 1000, .n = 250, .k = 777, .trans_a = 1,
                 .in_dtype = LOOM_FLOAT32, .out_dtype = LOOM_FLOAT32, .alpha = 0.5, .beta = 2.0};
  const int64_t ms[] = {1000, 1500, 2500}, ns[] = {250, 100, 40}, ks[] = {777, 300, 300};
  for (int i = 0; i < 3; ++i) {
    g.m = ms[i], g.n = ns[i], g.k = ks[i], g.b2 = i == 0 ? 2 : 1;
    loom_gemm_plan p;
    two_paths t = two_paths_make(&g);
    CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b,
                                  isa | LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE, &p) == 0,
          "plan");
    two_paths_free(&t);
    CHECK_MSG(isa == LOOM_GEMM_GENERIC || (p.mt >= 3 * p.mr && p.m % p.mt != 0),
          "%s m=%ld: tiles of %ld rows", isa_name(isa), (long)g.m, (long)p.mt);
    check_a_in_compute(&g, isa, 1);
  }
}

/* Row tiles as wide as C for the matmul's launches when C is wider than
 * the usual tile (more than 16 column panels) and at least four row panels
 * of all its columns fit the tile buffer, A is its product's own, not read
 * in place, and B packs into at most 4 MB: each tile packs its own A
 * panels, the row panels shared out evenly (the larger tiles first) over
 * tiles that are a multiple of the workers. `wide`: whether to expect them.
 * The bits are the two-launch path's for every worker count, grain and
 * chunk order. */
static void check_wide(const gemm_case *g, int isa, int wide) {
  two_paths t = two_paths_make(g);
  const loom_tensor *cinp = g->beta != 0.0 ? &t.cin : NULL;
  const size_t bytes = (size_t)(t.elems * loom_dtype_size(g->out_dtype));
  CHECK_MSG(run(&t.packed, &t.a, &t.b, cinp, isa, g->alpha, g->beta, 0) == 0, "packed");
  /* tile counts of several worker counts, where the tiling depends on them */
  for (int workers = 2; workers <= (wide ? 5 : 2); ++workers) {
    const int flags =
        LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE | LOOM_GEMM_WORKERS(workers);
    loom_gemm_plan p;
    CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b, isa | flags, &p) == 0, "plan");
    const int got = p.n_tiles == 1 && p.m_tiles > 1 && p.a_in_compute && !p.b_in_compute &&
                    p.n > 16 * p.nr;
    CHECK_MSG(got == wide, "%s %ldx%ldx%ld in=%d, %d workers: %ld x %ld tiles of %ld x %ld "
              "(%ld tall), A by its tile %d, want wide %d", isa_name(isa), (long)g->m,
              (long)g->n, (long)g->k, g->in_dtype, workers, (long)p.m_tiles, (long)p.n_tiles,
              (long)p.mt, (long)p.nt, (long)p.m_tiles_tall, p.a_in_compute, wide);
    if (got) {
      /* every row once, in tiles of mt or mt - mr rows, the tall ones first */
      const int64_t mats = g->b1 * g->b2;
      int64_t next = 0, panels = 0;
      /* a multiple of the workers, unless none is, up to tiles of 4 panels */
      int shared = 1;
      if ((mats * p.m_tiles) % workers != 0)
        for (int64_t more = p.m_tiles + 1; more <= p.m_panels / 4; ++more)
          if ((mats * more) % workers == 0) shared = 0;
      int even = shared && p.m_tiles_tall >= 1 && p.m_tiles_tall <= p.m_tiles &&
                 p.mt * p.nt <= 144 * 512;
      for (int64_t mi = 0; mi < p.m_tiles; ++mi) {
        int64_t m0, rows;
        loom_gemm_tile_rows(&p, mi, &m0, &rows);
        const int64_t want = mi < p.m_tiles_tall ? p.mt : p.mt - p.mr;
        even = even && m0 == next && m0 % p.mr == 0 &&
               (mi + 1 < p.m_tiles ? rows == want : rows > want - p.mr && rows <= want);
        next = m0 + rows, panels += (rows + p.mr - 1) / p.mr;
      }
      CHECK_MSG(even && next == g->m && panels == p.m_panels,
                "%s %ldx%ld, %d workers: %ld row tiles of %ld rows (%ld tall) cover %ld rows",
                isa_name(isa), (long)g->m, (long)g->n, workers, (long)p.m_tiles, (long)p.mt,
                (long)p.m_tiles_tall, (long)next);
    }
    for (int64_t grain = 0; grain < 4; grain += 3) { /* the plan's, and 3 */
      memset(t.direct.data, 0, bytes);
      CHECK_MSG(run(&t.direct, &t.a, &t.b, cinp, isa | flags, g->alpha, g->beta, grain) == 0,
                "direct");
      CHECK_MSG(paths_agree(&t, isa, flags),
                "%s %ldx%ldx%ld in=%d, %d workers, grain %ld: the tiling changed the bits",
                isa_name(isa), (long)g->m, (long)g->n, (long)g->k, g->in_dtype, workers,
                (long)grain);
    }
  }
  two_paths_free(&t);
}

static void test_wide_tiles(int isa) {
  const int fit = isa == LOOM_GEMM_AVX512 || isa == LOOM_GEMM_AVX512BF16;
  /* 26 row panels, the last of 1 row, 17 column panels, the last of 1
   * column: tiles of a few panels, more for more workers; two k blocks
   * and a partial third; alpha, Cin; two products */
  gemm_case g = {.b1 = 1, .b2 = 2, .m = 301, .n = 513, .k = 600, .in_dtype = LOOM_FLOAT32,
                 .out_dtype = LOOM_FLOAT32, .alpha = 0.5, .beta = 2.0};
  check_wide(&g, isa, fit);
  g.b2 = 1, g.k = 300; /* 26 row panels, 7 workers: no multiple of 7 up to 6 tiles */
  {
    two_paths t = two_paths_make(&g);
    loom_gemm_plan p;
    const int flags = LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE | LOOM_GEMM_WORKERS(7);
    CHECK_MSG(loom_gemm_plan_init(&t.direct, &t.a, &t.b, isa | flags, &p) == 0, "plan");
    CHECK_MSG(!fit || (p.n_tiles == 1 && p.m_tiles == 6 && p.mt == 60),
              "%s 301x513, 7 workers: %ld row tiles of %ld rows, want 6 of 60", isa_name(isa),
              (long)p.m_tiles, (long)p.mt);
    two_paths_free(&t);
  }
  g.b2 = 2, g.k = 600;
  g.n = 512; /* 16 column panels: the usual tiles are as wide */
  check_wide(&g, isa, 0);
  g.m = 288, g.n = 700; /* 24 row panels: the tall tiles */
  check_wide(&g, isa, 0);
  g.m = 400, g.b2 = 1, g.n = 1536; /* 48 column panels: four row panels fit */
  check_wide(&g, isa, fit);
  g.n = 1537; /* 49: only three */
  check_wide(&g, isa, 0);
  g.m = 301, g.n = 1000, g.k = 1024; /* B packed 1024 x 1024 columns: 4 MB (fp32) */
  check_wide(&g, isa, fit);
  g.k = 1025; /* a row more */
  check_wide(&g, isa, 0);
  g.m = 1000, g.k = 300, g.trans_a = 1; /* A stored transposed, four panels a pass */
  check_wide(&g, isa, fit);
  g.trans_a = 0, g.bcast_a = 1, g.b2 = 2; /* one A for both products */
  check_wide(&g, isa, 0);
  g.bcast_a = 0, g.m = 330, g.k = 150; /* A of 200 KB read in place */
  check_wide(&g, isa, 0);
  /* bf16 k-pairs, odd k, a bf16 C through the tile buffer */
  g.in_dtype = g.out_dtype = LOOM_BFLOAT16, g.beta = 0.0, g.b2 = 1, g.m = 1025, g.n = 1024,
  g.k = 777;
  check_wide(&g, isa, fit);
  g.trans_a = 1, g.k = 301;
  check_wide(&g, isa, fit);
}

int main(void) {
  for (int isa = 0; isa < LOOM_GEMM_ISA_COUNT; ++isa) {
    if (!loom_gemm_isa_supported((loom_gemm_isa)isa)) {
      test_skip("%s: not supported by this CPU", loom_gemm_isa_name((loom_gemm_isa)isa));
      continue;
    }
    int before = test_failed;
    test_in_compute(isa);
    test_a_in_compute(isa);
    test_column_tiles(isa);
    test_rows_outer(isa);
    test_tall_tiles(isa);
    test_transposed_a_by_tile(isa);
    test_transposed_a_groups(isa);
    test_wide_tiles(isa);
    printf("%s: %s\n", loom_gemm_isa_name((loom_gemm_isa)isa),
           test_failed == before ? "ok" : "FAILED");
  }
  TEST_MAIN_END();
}
