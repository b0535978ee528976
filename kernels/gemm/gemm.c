/* kernels/gemm/gemm.c — the GEMM driver: plan and blocked compute (the
 * pack launch is in gemm_pack.c).
 * The per-ISA files hold only the register-tile micro-kernels.
 *
 * Layout of the workspace: every distinct A as m_panels panels of
 * [kp][mr] (bf16 operands: [kp/2][mr][2]; on AMX [kp/32][mr][32]), every
 * distinct B as n_panels panels of [kp][nr] (or [kp/2][nr][2]), each
 * split into k blocks of kc stored block-major (loom_gemm_panel_offset).
 * Panels are zero-padded to full tiles, so micro-kernels never branch on
 * edges inside the k loop.
 * With LOOM_GEMM_IN_COMPUTE only A's partial last panel is packed when A
 * is read in place, and B has no space when each tile packs its own
 * panels (a thread-local k block at a time); with LOOM_GEMM_A_IN_COMPUTE
 * too, A has none when each tile packs its own A panels.
 * When C is not fp32 with unit column stride, each compute tile sums in an
 * fp32 buffer of the thread's own, then is stored converted. */
#include "kernels/gemm/gemm.h"

#include <string.h>

#include "kernels/gemm/gemm_internal.h"
#include "loom/status.h"

/* Fewest compute tiles worth keeping a large tile for. */
enum { LOOM_GEMM_MIN_TILES = 16 };

/* Packed operands past this size are fetched into L2 ahead of use. */
#define LOOM_GEMM_FETCH_BYTES ((int64_t)12 << 20)
/* An fp32 C past this size has its micro-tiles fetched into L1 ahead. */
#define LOOM_GEMM_FETCH_C_BYTES ((int64_t)2 << 20)

/* The fp32 tile of a C of another dtype, each thread's own: it stays in
 * the core's cache from tile to tile, where a whole-C accumulator in the
 * workspace would go out to memory and come back. Holds the largest tile
 * of every blocking below (plan_init checks). */
enum { LOOM_GEMM_ACC_TILE = 144 * 512 };
/* Its rows lie a line further apart than the tile is wide: rows 1 KB
 * apart put an AMX tile's 16 rows in 4 of L1's sets, which the A and B
 * panels streaming through the same sets evicted (bf16 2048^3: 2035
 * against 1895 GFLOP/s). Tiles are at least 16 columns wide, so at most
 * LOOM_GEMM_ACC_TILE / 16 rows tall. */
enum { LOOM_GEMM_ACC_PAD = 16 };
static _Thread_local float
    loom_gemm_acc_tile[LOOM_GEMM_ACC_TILE + LOOM_GEMM_ACC_PAD * (LOOM_GEMM_ACC_TILE / LOOM_GEMM_GENERIC_NR)];
/* One k block of one B panel, packed by the compute launch (b_in_compute). */
static _Thread_local _Alignas(64) float loom_gemm_b_block[256 * 32];
/* One k block of a tile's A panels, packed by the compute launch
 * (a_in_compute): the largest tile's rows by a k block of 256 floats. */
static _Thread_local _Alignas(64) float loom_gemm_a_block[288 * 256];

static int64_t loom_gemm_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t loom_gemm_align64(int64_t x) { return (x + 63) & ~(int64_t)63; }

/* Block sizes per variant: kc keeps a B micro-panel in L1 and an A block of
 * mc rows in L2; a compute tile is mc x nc. */
typedef struct loom_gemm_blocking {
  int32_t mr, nr, kc, mc_panels, nc_panels;
} loom_gemm_blocking;

static loom_gemm_blocking loom_gemm_blocking_for(int32_t isa, int bf16) {
  /* AMX: a k block of 256 keeps an A and a B micro-panel (16 KB each) in
   * L1 (2048: 1820 GFLOP/s, against 1550 with 512 and 1580 with 128); a
   * k of at most 512 is one block, whose tiles never reload their sums
   * (512: 1710 against 1320 GFLOP/s); plan_init picks. */
  if (bf16 && isa == LOOM_GEMM_AMX)
    return (loom_gemm_blocking){.mr = LOOM_GEMM_AMX_MR, .nr = LOOM_GEMM_AMX_NR,
                                .kc = 256, .mc_panels = 8, .nc_panels = 8};
  if (bf16)
    return (loom_gemm_blocking){.mr = LOOM_GEMM_BF16_MR, .nr = LOOM_GEMM_BF16_NR,
                                .kc = 512, .mc_panels = 12, .nc_panels = 16};
  if (isa == LOOM_GEMM_AVX512 || isa == LOOM_GEMM_AVX512BF16)
    return (loom_gemm_blocking){.mr = LOOM_GEMM_AVX512_MR,
                                .nr = LOOM_GEMM_AVX512_NR, .kc = 256,
                                .mc_panels = 12, .nc_panels = 16};
  return (loom_gemm_blocking){.mr = LOOM_GEMM_GENERIC_MR,
                              .nr = LOOM_GEMM_GENERIC_NR, .kc = 256,
                              .mc_panels = 24, .nc_panels = 16};
}

/* A pack pays off when its panels serve many column tiles. Reading A in
 * place: 256 x 256: 2-4% faster (fp32), a C 256 columns wide 5-7%; A read
 * over many column tiles ran up to 4% faster packed (128 x 1024 fp32 by
 * 4096 columns), and at 2048 in place was 3-13% slower. */
#define LOOM_GEMM_A_IN_PLACE_BYTES ((int64_t)256 << 10)
#define LOOM_GEMM_A_IN_PLACE_COLS 512

/* Column tiles pay off while A stays in L2 across them (loom_gemm_column_width):
 * 384^3 fp32 (576 KB) ran 5% faster; at 1 MB, 512^3 was level and
 * 1024 x 256 @ 256 x 256 6% slower. */
#define LOOM_GEMM_COLUMN_A_BYTES ((int64_t)768 << 10)
/* Column tiles pack an A that is not read in place each for themselves
 * while a worker's tiles pack at most this much of it in all. */
#define LOOM_GEMM_COLUMN_A_PACK_BYTES ((int64_t)256 << 10)

/* The width in panels of C's column tiles (all of its rows, a few
 * columns; loom_gemm_plan_init), or 0 for row tiles. A stays in each
 * core's L2 from tile to tile, and each tile packs its own B panels just
 * before use (b_in_compute), where row tiles had B packed by a launch of
 * its own, written to memory and read back by the tiles of both cores
 * (fp32 256^3: 98 against 115 us; 384^3: 319 against 362; bf16 128^3: 9.9
 * against 16.7 us; 256^3: 30 against 44). Taken when the plan's launches
 * may pack B in compute, each matrix has a B of its own, A is small, and
 * the tiles share out evenly: the widest of at least two tiles per worker
 * (four of 64 or 96 columns at 256^3 and 384^3: 2-13% faster than eight)
 * that keeps every worker busy to within 5%, counting each tile as wide
 * as the widest (13 panels over 2 workers cannot be: 512 x 392 x 256
 * ran 7% slower in column tiles). An A packed by the pack launch is read
 * by the tiles of the other core from this one's cache: only tiles of at
 * least `narrowest` panels read it often enough to pay (transposed A,
 * 180^3 fp32 in tiles of one panel: 7% slower; 512^3 in tiles of four: 7%
 * faster). */
static int64_t loom_gemm_column_width(const loom_gemm_plan *p, int64_t mats, int64_t esz,
                                      int in_compute, int64_t workers, int64_t widest,
                                      int64_t narrowest) {
  if (!in_compute || p->b_count1 * p->b_count2 != mats ||
      p->m * p->kp * esz > LOOM_GEMM_COLUMN_A_BYTES)
    return 0;
  const int64_t total = mats * p->n_panels;
  int64_t w = total / (2 * workers);
  if (w > widest) w = widest;
  if (w > p->n_panels) w = p->n_panels;
  for (; w >= narrowest; --w) {
    const int64_t tiles = mats * loom_gemm_ceil_div(p->n_panels, w);
    if (p->m_panels * p->mr * w * p->nr <= LOOM_GEMM_ACC_TILE &&
        total * 100 >= 95 * workers * loom_gemm_ceil_div(tiles, workers) * w)
      return w;
  }
  return 0;
}

/* Row tiles as wide as C pay off for a C somewhat wider than the usual
 * tile when each packs its own A panels (a_in_compute) and B, packed once,
 * stays in the last-level cache for all of them: A then never goes out to
 * memory and back through the pack launch. One thread, CPU time, against
 * 144 x 512 tiles: bf16 768^3 4-7% less, 1024^3 3-7%, 4096 x 1024 x 1024
 * 3%; fp32 768^3 5%, 1024^3 2%. A B of 8 MB, which each tile reads whole,
 * ran 2% slower (bf16 1024 x 1024 x 4096); 1536^3 was level. */
#define LOOM_GEMM_WIDE_B_BYTES ((int64_t)4 << 20)
/* Fewest row panels of such a tile, each B panel serving that many calls. */
enum { LOOM_GEMM_WIDE_MIN_PANELS = 4 };

/* The number of full-width row tiles of each product, or 0 when they do not
 * pay (loom_gemm_plan_init splits the row panels evenly among them). At
 * least LOOM_GEMM_MIN_TILES where the panels allow, and a multiple of the
 * workers in all where tiles of LOOM_GEMM_WIDE_MIN_PANELS panels allow, so
 * that tiles of equal work share out evenly. */
static int64_t loom_gemm_wide_tiles(const loom_gemm_plan *p, int32_t isa, int64_t mats,
                                    int64_t esz, int64_t workers, int64_t ncp) {
  if ((isa != LOOM_GEMM_AVX512 && isa != LOOM_GEMM_AVX512BF16) || p->n_panels <= ncp ||
      p->a_count1 * p->a_count2 != mats ||
      p->kp * p->n_panels * p->nr * esz > LOOM_GEMM_WIDE_B_BYTES)
    return 0;
  const int64_t fit = LOOM_GEMM_ACC_TILE / (p->n_panels * p->nr * p->mr); /* row panels */
  if (fit < LOOM_GEMM_WIDE_MIN_PANELS ||
      fit * p->mr * p->kc * esz > (int64_t)sizeof loom_gemm_a_block)
    return 0;
  int64_t tiles = loom_gemm_ceil_div(p->m_panels, fit);
  const int64_t most = p->m_panels / LOOM_GEMM_WIDE_MIN_PANELS; /* of the fewest panels */
  if (tiles < LOOM_GEMM_MIN_TILES) {
    const int64_t want = most < LOOM_GEMM_MIN_TILES ? most : LOOM_GEMM_MIN_TILES;
    if (want > tiles) tiles = want;
  }
  int64_t even = tiles;
  while ((mats * even) % workers != 0 && even < most) ++even;
  return (mats * even) % workers == 0 ? even : tiles;
}

/* Whether the 12-row tiles read A's rows where they lie instead of from a
 * packed panel: A must hold the micro-kernel's own format (fp32, or aligned
 * bf16 pairs) with k contiguous, and be small or multiply a narrow C. */
static int loom_gemm_a_in_place(const loom_tensor *a, int32_t isa, int bf16, int64_t m,
                                int64_t n, int64_t k) {
  if (isa != LOOM_GEMM_AVX512 && isa != LOOM_GEMM_AVX512BF16 && isa != LOOM_GEMM_AMX) return 0;
  /* Rows a multiple of 4 KB apart share L1 sets: twelve of them fill a
   * set's ways (128 x 1024 fp32: 12% slower than rows 1040 apart). */
  const int64_t row_bytes = a->strides[2] * loom_dtype_size(a->dtype);
  const int64_t mr = isa == LOOM_GEMM_AMX ? LOOM_GEMM_AMX_MR : LOOM_GEMM_AVX512_MR;
  if (m < mr || a->strides[3] != 1 || row_bytes % 4096 == 0 ||
      (m * k * loom_dtype_size(a->dtype) > LOOM_GEMM_A_IN_PLACE_BYTES &&
       n > LOOM_GEMM_A_IN_PLACE_COLS))
    return 0;
  if (!bf16) return a->dtype == LOOM_FLOAT32;
  if (a->dtype != LOOM_BFLOAT16) return 0; /* converted as it is packed */
  /* AMX tiles load whole 32-k runs of a row: none may pass its end */
  if (isa == LOOM_GEMM_AMX) return k % LOOM_GEMM_AMX_KB == 0;
  return k % 2 == 0 && a->strides[2] % 2 == 0 && a->strides[1] % 2 == 0 &&
         a->strides[0] % 2 == 0 && ((uintptr_t)a->data & 3) == 0;
}

int loom_gemm_plan_init(const loom_tensor *c, const loom_tensor *a,
                        const loom_tensor *b, int32_t isa,
                        loom_gemm_plan *out) {
  memset(out, 0, sizeof *out);
  if (c->rank != 4 || a->rank != 4 || b->rank != 4)
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (!loom_gemm_operand_dtype(a->dtype) || b->dtype != a->dtype ||
      !loom_gemm_operand_dtype(c->dtype))
    return LOOM_ERROR_INVALID_ARGUMENT;
  int64_t b1 = c->sizes[0], b2 = c->sizes[1], m = c->sizes[2], n = c->sizes[3];
  int64_t k = a->sizes[3];
  if (a->sizes[0] != b1 || a->sizes[1] != b2 || a->sizes[2] != m ||
      b->sizes[0] != b1 || b->sizes[1] != b2 || b->sizes[2] != k ||
      b->sizes[3] != n || b1 < 0 || b2 < 0 || m < 0 || n < 0 || k < 0)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t workers = (isa >> 16 & 0xff) > 2 ? isa >> 16 & 0xff : 2;
  isa &= 0xffff;
  const int in_compute = (isa & LOOM_GEMM_IN_COMPUTE) != 0;
  const int a_in_compute = in_compute && (isa & LOOM_GEMM_A_IN_COMPUTE) != 0;
  int32_t math = isa & (LOOM_GEMM_BF16_MATH | LOOM_GEMM_A_LOW | LOOM_GEMM_B_LOW);
  isa &= ~(LOOM_GEMM_IN_COMPUTE | LOOM_GEMM_A_IN_COMPUTE | LOOM_GEMM_BF16_MATH | LOOM_GEMM_A_LOW |
           LOOM_GEMM_B_LOW);
  if (isa < 0 || isa >= LOOM_GEMM_ISA_COUNT) isa = LOOM_GEMM_GENERIC;
  /* bf16 math needs bf16 products: vdpbf16ps or AMX tiles */
  if (!(math & LOOM_GEMM_BF16_MATH) || (isa != LOOM_GEMM_AMX && isa != LOOM_GEMM_AVX512BF16) ||
      a->dtype != LOOM_FLOAT32)
    math = 0;
  /* AMX multiplies bf16 only; other operands take the AVX-512 kernels */
  if (isa == LOOM_GEMM_AMX && a->dtype != LOOM_BFLOAT16 && !math) isa = LOOM_GEMM_AVX512BF16;
  int bf16 = ((isa == LOOM_GEMM_AVX512BF16 || isa == LOOM_GEMM_AMX) && a->dtype == LOOM_BFLOAT16) ||
             math;
  loom_gemm_blocking blk = loom_gemm_blocking_for(isa, bf16);
  int64_t esz = bf16 ? 2 : 4;

  out->isa = isa;
  out->packed_bf16 = bf16;
  out->bf16_math = math;
  out->mr = blk.mr;
  out->nr = blk.nr;
  out->batch1 = b1;
  out->batch2 = b2;
  out->m = m;
  out->n = n;
  out->k = k;
  out->kp = isa == LOOM_GEMM_AMX ? (k + LOOM_GEMM_AMX_KB - 1) / LOOM_GEMM_AMX_KB * LOOM_GEMM_AMX_KB
            : bf16                ? (k + 1) & ~(int64_t)1
                                  : k;
  out->kc = isa == LOOM_GEMM_AMX && bf16 && out->kp <= 2 * blk.kc ? 2 * blk.kc : blk.kc;
  out->m_panels = loom_gemm_ceil_div(m, blk.mr);
  out->n_panels = loom_gemm_ceil_div(n, blk.nr);
  /* The matmul's launches (LOOM_GEMM_A_IN_COMPUTE: the workspace and the
   * thread buffers are the GEMM's own, where the convolutions size theirs
   * for k blocks of 256) over an fp32 A and B too large for column or
   * wide tiles, in rows of several tiles, sum k blocks of 512: C's
   * micro-tiles are loaded and stored half as often, while the broadcast
   * A panel (24 KB) stays in L1. One thread, CPU time, min of 24, in
   * alternation: 2048^3 166.5 -> 162.8 ms. Decided by the shapes and the
   * flag alone, never by the worker count, so the bits are the same for
   * every thread count (and differ from the plans without the flag). */
  if (!bf16 && a_in_compute && (isa == LOOM_GEMM_AVX512 || isa == LOOM_GEMM_AVX512BF16) &&
      out->kp > blk.kc && out->m_panels > 2 * blk.mc_panels &&
      m * out->kp * esz > LOOM_GEMM_COLUMN_A_BYTES &&
      out->kp * out->n_panels * blk.nr * esz > LOOM_GEMM_WIDE_B_BYTES)
    out->kc = 2 * blk.kc;
  out->a_count1 = (a->strides[0] == 0) ? 1 : b1;
  out->a_count2 = (a->strides[1] == 0) ? 1 : b2;
  out->b_count1 = (b->strides[0] == 0) ? 1 : b1;
  out->b_count2 = (b->strides[1] == 0) ? 1 : b2;
  out->a_bytes = loom_gemm_align64(out->m_panels * blk.mr * out->kp * esz);
  out->b_bytes = loom_gemm_align64(out->n_panels * blk.nr * out->kp * esz);
  out->use_acc = c->dtype != LOOM_FLOAT32 || (n > 1 && c->strides[3] != 1);
  /* AMX tiles load and store their sums at every k block: over several
   * blocks, from the thread's buffer rather than from a C rows apart in
   * memory (bf16 math into an fp32 C, 2048: 14.2 against 16.5 ms). One
   * block stores them once, straight into C (the input gradient of
   * ResNet's 7x7 stem, bf16, whose GEMM writes 59 MB of col from 64
   * channels: 7.1 against 9.4 ms with the buffer's extra pass). */
  if (isa == LOOM_GEMM_AMX && bf16 && out->kp > out->kc) out->use_acc = 1;
  out->a_in_place = in_compute && loom_gemm_a_in_place(a, isa, bf16, m, n, k);
  out->a_offset = 0;
  out->b_offset = out->a_offset + out->a_count1 * out->a_count2 * out->a_bytes;
  out->workspace_bytes = out->b_offset + out->b_count1 * out->b_count2 * out->b_bytes;

  if (b1 == 0 || b2 == 0 || m == 0 || n == 0) return 0; /* nothing to launch */
  out->pack_units_a = out->a_count1 * out->a_count2 * out->m_panels;
  out->pack_range = out->pack_units_a + out->b_count1 * out->b_count2 * out->n_panels;
  int64_t per_unit = (int64_t)blk.nr * (out->kp > 0 ? out->kp : 1);
  out->pack_grain = 65536 / per_unit > 1 ? 65536 / per_unit : 1;
  /* whole groups of four panels for the transposed-A pack */
  if (loom_gemm_a_rows12x4(out, a) || loom_gemm_a_pairs12x4(out, a))
    out->pack_grain = (out->pack_grain + 3) / 4 * 4;
  /* Small C (a weight gradient: long k, few tiles) is cut into smaller
   * tiles so every worker gets some. Each element still sums its k in the
   * same order, so the tiling never changes a result. Rows that fit one
   * tile are cut last: then every B panel serves a single tile. */
  int64_t mcp = blk.mc_panels, ncp = blk.nc_panels;
  /* Column tiles of a very small A that is not read in place pack it each
   * for themselves (a_in_compute, below). */
  int64_t column = loom_gemm_column_width(out, b1 * b2, esz, in_compute, workers,
                                          blk.nc_panels, 1);
  const int a_by_tile =
      column && a_in_compute && !out->a_in_place && out->a_count1 * out->a_count2 == b1 * b2 &&
      loom_gemm_ceil_div(b1 * b2 * loom_gemm_ceil_div(out->n_panels, column), workers) * m *
              out->kp * esz <=
          LOOM_GEMM_COLUMN_A_PACK_BYTES &&
      out->m_panels * blk.mr * out->kc * esz <= (int64_t)sizeof loom_gemm_a_block;
  if (column && !out->a_in_place && !a_by_tile)
    column = loom_gemm_column_width(out, b1 * b2, esz, in_compute, workers, blk.nc_panels, 3);
  const int64_t wide =
      !column && a_in_compute && !out->a_in_place && out->m_panels > 2 * mcp
          ? loom_gemm_wide_tiles(out, isa, b1 * b2, esz, workers, ncp)
          : 0;
  if (column) {
    mcp = out->m_panels;
    ncp = column;
  } else if (wide) {
    mcp = loom_gemm_ceil_div(out->m_panels, wide);
    ncp = out->n_panels;
  } else if (out->m_panels <= 2 * mcp) {
    /* Up to twice the usual rows in one tile, narrower to fit the tile
     * buffer, when the columns still make tiles enough: B is then packed
     * once, by its tile (256 x 1024 @ 1024 x 4096 fp32: 18-20% faster; a
     * 1x1 convolution 64->256 at 56x56: 6-9%). */
    int64_t tall = ncp;
    while (tall > 1 && out->m_panels * blk.mr * tall * blk.nr > LOOM_GEMM_ACC_TILE) tall = (tall + 1) / 2;
    /* The matmul's launches (a_in_compute; not AMX, unmeasured) keep the
     * tall tile also when the loop below must narrow it, to two panels, for
     * tiles enough, where row tiles had B packed by a launch of its own,
     * through memory (fp32, one thread: a 256 x 1024 weight gradient over
     * k = 4096, 74 -> 88% of the peak; 256 x 1024 x 1024, 2-4% faster). */
    const int64_t narrowest = a_in_compute && isa != LOOM_GEMM_AMX && tall > 2 ? 2 : tall;
    if (b1 * b2 * loom_gemm_ceil_div(out->n_panels, narrowest) >= LOOM_GEMM_MIN_TILES)
      mcp = out->m_panels, ncp = tall;
  }
  while (!column && !wide) {
    int64_t tiles = b1 * b2 * loom_gemm_ceil_div(out->m_panels, mcp) *
                    loom_gemm_ceil_div(out->n_panels, ncp);
    if (tiles >= LOOM_GEMM_MIN_TILES || (mcp == 1 && ncp == 1)) break;
    /* Tiles as wide as C, when its A is packed, are cut in rows first:
     * each tile then packs its A panels itself (a_in_compute, below). */
    if (a_in_compute && !out->a_in_place && out->n_panels <= ncp && mcp > 1)
      mcp = (mcp + 1) / 2;
    else if (ncp > 1 && (ncp >= mcp || mcp == 1 || out->m_panels <= mcp))
      ncp = (ncp + 1) / 2;
    else mcp = (mcp + 1) / 2;
  }
  out->mt = mcp * blk.mr;
  out->nt = ncp * blk.nr;
  if (out->mt * out->nt > LOOM_GEMM_ACC_TILE) return LOOM_ERROR_INTERNAL;
  out->m_tiles = loom_gemm_ceil_div(m, out->mt);
  out->m_tiles_tall = out->m_tiles;
  if (wide) {
    /* the row panels shared out evenly, the larger tiles first */
    out->m_tiles = wide;
    out->m_tiles_tall = out->m_panels % wide ? out->m_panels % wide : wide;
  }
  out->n_tiles = loom_gemm_ceil_div(n, out->nt);
  out->compute_range = b1 * b2 * out->m_tiles * out->n_tiles;
  out->compute_grain = 1;
  /* fp32 register tiles walk a tile's row panels outermost when its B is
   * packed already (taken back below when the tile packs its B itself):
   * the broadcast A panel (12 KB) stays in L1 and the B panels stream
   * from L2, where each B panel sat in L1 while A's panels, broadcast a
   * value at a time, came from L2 (paired: 2048^3 +5%, 1536^3 +7%, 512 x
   * 4608 x 392 +7%, 1024^3 +1-4%; bf16 on AMX tiles ran 2-13% slower so). */
  out->rows_outer = !bf16 && (isa == LOOM_GEMM_AVX512 || isa == LOOM_GEMM_AVX512BF16);
  /* One row tile: each B panel serves one compute tile, which packs it
   * just before use, into its own cache. Apart, the pack launch wrote all
   * of B to memory and the compute launch read it back (a 1x1 convolution
   * of 256 channels to 64: the pack took 40% of the forward). */
  if (in_compute && out->m_tiles == 1 && out->b_count1 * out->b_count2 == b1 * b2) {
    if (out->kc * out->nr * esz > (int64_t)sizeof loom_gemm_b_block) return LOOM_ERROR_INTERNAL;
    out->b_in_compute = 1;
    out->rows_outer = 0;
    /* Nothing is left for the pack launch when A is read in place: its
     * partial last panel, if any, is packed by each tile too, which saves
     * the launch (124 x 128 x 128 fp32: 17.0 against 13.8 us for 120 rows
     * before). */
    out->a_tail_in_compute = out->a_in_place && m % blk.mr != 0;
    out->pack_range = out->a_in_place ? 0 : out->pack_units_a;
    /* an A read in place then keeps nothing in the workspace */
    out->workspace_bytes = out->a_in_place ? 0 : out->b_offset;
  }
  /* One column tile: each A panel serves one compute tile, which packs it
   * just before its first use, into its own cache, rather than the pack
   * launch writing all of A to memory for the compute launch to read back
   * (1024 x 1024 @ 1024 x 256 fp32, rows 4 KB apart so not read in place:
   * the pack launch took 9% of the product). Column tiles of a very small
   * A pack it each for itself too: packing it over again costs less than
   * the launch and the trip through the other core's cache, while each
   * worker packs at most 256 KB in all (transposed A, fp32 128^3, two
   * tiles of 64 KB each: 22 against 45 us; bf16 256^3, two of 128 KB: 41
   * against 49; but fp32 256^3, two of 256 KB: 125 against 119, and 180^3,
   * three of 130 KB: 73 against 66). */
  if ((a_in_compute && !out->a_in_place && out->n_tiles == 1 &&
       out->a_count1 * out->a_count2 == b1 * b2 &&
       out->mt * out->kc * esz <= (int64_t)sizeof loom_gemm_a_block) ||
      (column && a_by_tile)) {
    out->a_in_compute = 1;
    out->pack_range = out->b_in_compute ? 0 : out->pack_range - out->pack_units_a;
    out->pack_units_a = 0; /* the pack launch's units are all B's */
    out->b_offset = out->a_offset;
    out->workspace_bytes =
        out->b_in_compute ? 0 : out->b_offset + out->b_count1 * out->b_count2 * out->b_bytes;
  }
  return 0;
}

/* n fp32 values into a row of C (element stride cs), converted. The
 * contiguous bf16 / fp16 loops have no dtype switch inside, so they
 * vectorise. */
static void loom_gemm_store_row(char *dst, int32_t dtype, int64_t cs, const float *src,
                                int64_t n, int vec) {
  if (cs == 1 && dtype == LOOM_FLOAT32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (cs == 1 && dtype != LOOM_FLOAT32 && vec) {
    loom_gemm_store_row16_avx512((uint16_t *)dst, src, n, dtype == LOOM_BFLOAT16);
  } else if (cs == 1 && dtype == LOOM_BFLOAT16) {
    uint16_t *d = (uint16_t *)dst;
    for (int64_t j = 0; j < n; ++j) d[j] = loom_f32_to_bf16(src[j]);
  } else if (cs == 1 && dtype == LOOM_FLOAT16) {
    uint16_t *d = (uint16_t *)dst;
    for (int64_t j = 0; j < n; ++j) d[j] = loom_f32_to_f16(src[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) loom_gemm_store(dst, dtype, j * cs, src[j]);
  }
}

/* Runs of bytes a stride apart (or one byte range, cut in slices) brought
 * into L2, a share of the runs per step. */
typedef struct loom_gemm_fetch {
  const char *run;
  int64_t runs, stride, bytes, per_step;
} loom_gemm_fetch;

static loom_gemm_fetch loom_gemm_fetch_runs(const char *p, int64_t runs, int64_t stride,
                                            int64_t bytes, int64_t steps) {
  return (loom_gemm_fetch){.run = p, .runs = runs, .stride = stride, .bytes = bytes,
                           .per_step = loom_gemm_ceil_div(runs, steps > 0 ? steps : 1)};
}

static loom_gemm_fetch loom_gemm_fetch_init(const char *p, int64_t bytes, int64_t steps) {
  int64_t slice = loom_gemm_align64(loom_gemm_ceil_div(bytes, steps > 0 ? steps : 1));
  int64_t runs = slice > 0 ? loom_gemm_ceil_div(bytes, slice) : 0;
  /* the last slice may reach past the range: prefetches never fault */
  return loom_gemm_fetch_runs(p, runs, slice, slice, steps);
}

static void loom_gemm_fetch_step(loom_gemm_fetch *f) {
  for (int64_t r = 0; r < f->per_step && f->runs > 0; ++r, --f->runs, f->run += f->stride) {
    for (int64_t b = 0; b < f->bytes; b += 64) __builtin_prefetch(f->run + b, 0, 2);
    __builtin_prefetch(f->run + f->bytes - 1, 0, 2);
  }
}

/* The source of B panel `panel`'s k block at pc (a B packed by the compute
 * launch), as runs for loom_gemm_fetch: rows of the panel's lanes, or
 * lanes of the block's k; nothing for other layouts. */
static loom_gemm_fetch loom_gemm_fetch_b_source(const loom_gemm_plan *p, const loom_tensor *b,
                                                int64_t mat, int64_t panel, int64_t pc,
                                                int64_t steps) {
  const int64_t es = loom_dtype_size(b->dtype), l0 = panel * p->nr;
  const int64_t lanes = p->n - l0 < p->nr ? p->n - l0 : p->nr;
  const int64_t kcur = p->kp - pc < p->kc ? p->kp - pc : p->kc;
  const int64_t kreal = p->k - pc < kcur ? p->k - pc : kcur;
  const char *s = loom_gemm_elem(b, mat / p->batch2, mat % p->batch2, pc, l0);
  if (b->strides[3] == 1)
    return loom_gemm_fetch_runs(s, kreal, b->strides[2] * es, lanes * es, steps);
  if (b->strides[2] == 1)
    return loom_gemm_fetch_runs(s, lanes, b->strides[3] * es, kreal * es, steps);
  return (loom_gemm_fetch){0};
}

/* Rows of a micro-tile of C (fp32, unit column stride), each from its
 * first to its last column, into L1 for writing. Prefetches never fault,
 * so rows past C's end cost nothing but the instruction. */
static void loom_gemm_fetch_tile(const float *t, int64_t ldt, int rows, int cols) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; j += 16) __builtin_prefetch(t + i * ldt + j, 1, 3);
    __builtin_prefetch(t + i * ldt + cols - 1, 1, 3);
  }
}

loom_gemm_ukr_fn loom_gemm_ukr_for(const loom_gemm_plan *p) {
  if (p->packed_bf16)
    return p->isa == LOOM_GEMM_AMX ? loom_gemm_ukr_amx_bf16 : loom_gemm_ukr_avx512bf16_bf16;
  if (p->isa == LOOM_GEMM_AVX512 || p->isa == LOOM_GEMM_AVX512BF16)
    return loom_gemm_ukr_avx512_f32;
  return loom_gemm_ukr_generic_f32;
}

/* What every micro-kernel call of one compute tile shares. */
typedef struct loom_gemm_tile_calls {
  const loom_gemm_plan *p;
  loom_gemm_ukr_fn ukr;
  loom_gemm_ukr_rows_fn ukr_rows;
  const loom_tensor *a;
  int64_t i1, i2, m0, kstep, ldt;
  float *tile; /* fp32, or bf16 with bf16_out */
  float alpha;
  int has_cin, bf16_out;
} loom_gemm_tile_calls;

/* The tile's micro-tile (ip, jp) over the k block [pc, pc + kc): A's rows
 * where they lie when the plan reads them in place, else `apanel`. */
static inline void loom_gemm_call(const loom_gemm_tile_calls *t, int64_t ip, int64_t jp,
                                  int64_t pc, int64_t kc, const char *apanel,
                                  const char *bpanel, int mr, int nr) {
  const loom_gemm_plan *p = t->p;
  const int64_t at = ip * p->mr * t->ldt + jp * p->nr;
  float *ct = t->bf16_out ? (float *)((uint16_t *)t->tile + at) : t->tile + at;
  const int accumulate = t->bf16_out ? LOOM_GEMM_UKR_BF16_OUT : t->has_cin || pc > 0;
  if (p->a_in_place && mr == p->mr)
    t->ukr_rows(kc / t->kstep, loom_gemm_elem(t->a, t->i1, t->i2, t->m0 + ip * p->mr, pc),
                t->a->strides[2], bpanel, ct, t->ldt, t->alpha, nr, accumulate);
  else
    t->ukr(kc / t->kstep, apanel, bpanel, ct, t->ldt, t->alpha, mr, nr, accumulate);
}

int loom_gemm_compute_kernel(const loom_kernel_args *args, int64_t begin,
                             int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 3)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *c = &args->tensors[0], *a = &args->tensors[1],
                    *b = &args->tensors[2];
  const loom_tensor *cin = args->num_tensors > 4 ? &args->tensors[4] : NULL;
  loom_gemm_plan p;
  int rc = loom_gemm_plan_init(c, a, b, (int32_t)args->scalars[0].i, &p);
  if (rc) return rc;
  float alpha = (float)args->scalars[1].f, beta = (float)args->scalars[2].f;
  if (beta == 0.0f) cin = NULL;
  char *ws = (char *)args->tensors[3].data;
  loom_gemm_ukr_fn ukr = loom_gemm_ukr_for(&p);
  loom_gemm_ukr_rows_fn ukr_rows = p.isa == LOOM_GEMM_AMX ? loom_gemm_ukr_amx_bf16_rows
                                   : p.packed_bf16        ? loom_gemm_ukr_avx512bf16_bf16_rows
                                                          : loom_gemm_ukr_avx512_f32_rows;
  int64_t esz = p.packed_bf16 ? 2 : 4;
  int64_t kstep = p.packed_bf16 ? 2 : 1; /* k values per micro-kernel step */
  /* Packed operands that the last-level cache holds come back from it in
   * time; fetching them into L2 ahead then only costs instructions (256 to
   * 1024: 3-5% slower with the fetch, 1536 and 2048 fp32: 1-4% faster). */
  const int fetch = p.workspace_bytes > LOOM_GEMM_FETCH_BYTES;
  /* A C too big for L2 has the next micro-tile's rows prefetched (1024 and
   * 2048 fp32: 2-6% faster); a smaller one, or the thread's own tile, is in
   * cache already, and the prefetches only cost (256, 512, bf16: 1-5%). */
  const int fetch_c = !p.use_acc && p.m * p.n * (int64_t)sizeof(float) > LOOM_GEMM_FETCH_C_BYTES;
  /* A bf16 C summed in one k block with nothing to add: the AVX-512
   * micro-kernels round their sums into it from registers, where the
   * thread's fp32 tile had them stored, read back and converted (bf16
   * 512^3, one thread: the conversion pass took 6% of the product). */
  const int bf16_out = p.use_acc && cin == NULL && p.kp > 0 && p.kp <= p.kc &&
                       c->dtype == LOOM_BFLOAT16 && c->strides[3] == 1 &&
                       (p.isa == LOOM_GEMM_AVX512 || p.isa == LOOM_GEMM_AVX512BF16);

  const int amx = p.isa == LOOM_GEMM_AMX && p.packed_bf16;
  const int a_rows12 = loom_gemm_a_rows12x4(&p, a), a_pairs12 = loom_gemm_a_pairs12x4(&p, a);
  if (amx) loom_gemm_amx_begin();
  for (int64_t t = begin; t < end; ++t) {
    int64_t ni = t % p.n_tiles, rest = t / p.n_tiles;
    int64_t mi = rest % p.m_tiles;
    rest /= p.m_tiles;
    int64_t i2 = rest % p.batch2, i1 = rest / p.batch2;
    int64_t m0, mt, n0 = ni * p.nt;
    loom_gemm_tile_rows(&p, mi, &m0, &mt);
    int64_t nt = p.n - n0 < p.nt ? p.n - n0 : p.nt;

    float *tile;
    int64_t ldt;
    if (p.use_acc && !bf16_out) {
      tile = loom_gemm_acc_tile;
      ldt = p.nt + LOOM_GEMM_ACC_PAD;
    } else {
      tile = (float *)loom_gemm_elem(c, i1, i2, m0, n0);
      ldt = c->strides[2];
    }
    for (int64_t i = 0; i < mt; ++i) {
      float *row = tile + i * ldt;
      if (cin == NULL) {
        /* the first k block overwrites the tile */
        if (p.kp == 0) memset(row, 0, (size_t)nt * sizeof(float));
        continue;
      }
      const char *cr = loom_gemm_elem(cin, i1, i2, m0 + i, n0);
      int64_t cs = cin->strides[3];
      if (cin->dtype == LOOM_FLOAT32 && cs == 1) { /* loops without a dtype switch vectorise */
        const float *src = (const float *)cr;
        for (int64_t j = 0; j < nt; ++j) row[j] = beta * src[j];
      } else if (cin->dtype == LOOM_FLOAT32 && cs == 0) { /* a broadcast bias column */
        const float v = beta * *(const float *)cr;
        for (int64_t j = 0; j < nt; ++j) row[j] = v;
      } else {
        for (int64_t j = 0; j < nt; ++j)
          row[j] = beta * loom_gemm_load(cr, cin->dtype, j * cs);
      }
    }

    /* the distinct A of this product */
    const int64_t amat = (p.a_count1 > 1 ? i1 : 0) * p.a_count2 + (p.a_count2 > 1 ? i2 : 0);
    const char *ap = ws + p.a_offset + amat * p.a_bytes;
    /* packed B, unless the tile packs its own panels */
    const char *bp = p.b_in_compute ? NULL
                   : ws + p.b_offset +
                         ((p.b_count1 > 1 ? i1 : 0) * p.b_count2 + (p.b_count2 > 1 ? i2 : 0)) *
                             p.b_bytes;
    int64_t mp0 = m0 / p.mr, np0 = n0 / p.nr;
    int64_t mpn = loom_gemm_ceil_div(mt, p.mr), npn = loom_gemm_ceil_div(nt, p.nr);
    const loom_gemm_tile_calls calls = {.p = &p, .ukr = ukr, .ukr_rows = ukr_rows, .a = a,
                                        .i1 = i1, .i2 = i2, .m0 = m0, .kstep = kstep,
                                        .ldt = ldt, .tile = tile, .alpha = alpha,
                                        .has_cin = cin != NULL, .bf16_out = bf16_out};
    for (int64_t pc = 0; pc < p.kp; pc += p.kc) {
      int64_t kc = p.kp - pc < p.kc ? p.kp - pc : p.kc;
      int64_t pc_next = pc + p.kc;
      int64_t kc_next = p.kp - pc_next < p.kc ? p.kp - pc_next : p.kc;
      if (p.rows_outer) {
        /* Each row panel stays in L1 while the k block's B panels stream
         * from L2 (Goto's order), C's micro-tiles along its rows. */
        for (int64_t ip = 0; ip < mpn; ++ip) {
          const char *apanel =
              ap + loom_gemm_panel_offset(&p, p.m_panels, p.mr, pc, mp0 + ip) * esz;
          int mr = (int)(mt - ip * p.mr < p.mr ? mt - ip * p.mr : p.mr);
          if (p.a_in_compute && a_rows12 && mpn >= 3) {
            /* A stored transposed: four panels per pass over its rows, which
             * lie a row of A^T apart (1024 x 256 x 4096: 7% faster) */
            apanel = (const char *)loom_gemm_a_block + (ip % 4) * p.mr * kc * esz;
            if (ip % 4 == 0)
              loom_gemm_pack_rows12x4_avx512(
                  (uint32_t *)loom_gemm_a_block, p.mr * kc,
                  (const uint32_t *)loom_gemm_elem(a, i1, i2, m0 + ip * p.mr, pc), a->strides[3],
                  mt - ip * p.mr < 4 * p.mr ? mt - ip * p.mr : 4 * p.mr, kc);
          } else if (p.a_in_compute || (p.a_tail_in_compute && mr < p.mr)) {
            apanel = (const char *)loom_gemm_a_block;
            loom_gemm_pack_block(&p, a, 1, amat, mp0 + ip, pc, (char *)apanel);
          }
          /* the next row panel, fetched into L2 a slice per call */
          loom_gemm_fetch a_next = {0};
          if (!p.a_in_place && !p.a_in_compute && ip + 1 < mpn)
            a_next = loom_gemm_fetch_init(apanel + p.mr * kc * esz, p.mr * kc * esz, npn);
          else if (!p.a_in_place && !p.a_in_compute && pc_next < p.kp)
            a_next = loom_gemm_fetch_init(
                ap + loom_gemm_panel_offset(&p, p.m_panels, p.mr, pc_next, mp0) * esz,
                p.mr * kc_next * esz, npn);
          for (int64_t jp = 0; jp < npn; ++jp) {
            loom_gemm_fetch_step(&a_next);
            if (fetch_c)
              loom_gemm_fetch_tile(jp + 1 < npn ? tile + ip * p.mr * ldt + (jp + 1) * p.nr
                                   : ip + 1 < mpn ? tile + (ip + 1) * p.mr * ldt
                                                  : tile,
                                   ldt, p.mr, p.nr);
            loom_gemm_call(&calls, ip, jp, pc, kc, apanel,
                           bp + loom_gemm_panel_offset(&p, p.n_panels, p.nr, pc, np0 + jp) * esz,
                           mr, (int)(nt - jp * p.nr < p.nr ? nt - jp * p.nr : p.nr));
          }
        }
        continue;
      }
      /* The next k block's A panels, fetched into L2 a slice per call (not
       * when A is read in place: its packed panels were never written). */
      loom_gemm_fetch a_next = {0};
      if (fetch && !p.a_in_place && !p.a_in_compute && pc_next < p.kp)
        a_next = loom_gemm_fetch_init(
            ap + loom_gemm_panel_offset(&p, p.m_panels, p.mr, pc_next, mp0) * esz,
            mpn * p.mr * kc_next * esz, npn * mpn);
      for (int64_t jp = 0; jp < npn; ++jp) {
        const char *bpanel = (const char *)loom_gemm_b_block;
        if (p.b_in_compute)
          loom_gemm_pack_block(&p, b, 0, i1 * p.batch2 + i2, np0 + jp, pc,
                               (char *)loom_gemm_b_block);
        else
          bpanel = bp + loom_gemm_panel_offset(&p, p.n_panels, p.nr, pc, np0 + jp) * esz;
        int nr = (int)(nt - jp * p.nr < p.nr ? nt - jp * p.nr : p.nr);
        /* The next B micro-panel, fetched into L2 while this one is in use:
         * otherwise its first pass runs at memory latency. */
        loom_gemm_fetch b_next = {0};
        if (p.b_in_compute) {
          /* the next panel's source, which this tile packs next */
          const int64_t mat = i1 * p.batch2 + i2;
          if (jp + 1 < npn)
            b_next = loom_gemm_fetch_b_source(&p, b, mat, np0 + jp + 1, pc, mpn);
          else if (pc_next < p.kp)
            b_next = loom_gemm_fetch_b_source(&p, b, mat, np0, pc_next, mpn);
        } else if (fetch && jp + 1 < npn)
          b_next = loom_gemm_fetch_init(
              bp + loom_gemm_panel_offset(&p, p.n_panels, p.nr, pc, np0 + jp + 1) * esz,
              p.nr * kc * esz, mpn);
        else if (fetch && pc_next < p.kp)
          b_next = loom_gemm_fetch_init(
              bp + loom_gemm_panel_offset(&p, p.n_panels, p.nr, pc_next, np0) * esz,
              p.nr * kc_next * esz, mpn);
        for (int64_t ip = 0; ip < mpn; ++ip) {
          const char *apanel = ap + loom_gemm_panel_offset(&p, p.m_panels, p.mr, pc, mp0 + ip) * esz;
          int mr = (int)(mt - ip * p.mr < p.mr ? mt - ip * p.mr : p.mr);
          if (p.a_in_compute && a_pairs12) {
            /* bf16 A stored transposed: four panels per pass over its rows
             * (the one-panel pack is scalar), before their first use */
            apanel = (const char *)loom_gemm_a_block + ip * p.mr * kc * esz;
            if (jp == 0 && ip % 4 == 0)
              loom_gemm_pack_pairs12x4_avx512(
                  (uint32_t *)apanel, p.mr * kc / 2,
                  (const uint16_t *)loom_gemm_elem(a, i1, i2, m0 + ip * p.mr, pc), a->strides[3],
                  mt - ip * p.mr < 4 * p.mr ? mt - ip * p.mr : 4 * p.mr, p.k - pc, kc / 2);
          } else if (p.a_in_compute || (p.a_tail_in_compute && mr < p.mr)) {
            apanel = (const char *)loom_gemm_a_block + (p.a_in_compute ? ip : 0) * p.mr * kc * esz;
            if (jp == 0) /* packed before its first use, which finds it in L1 */
              loom_gemm_pack_block(&p, a, 1, amat, mp0 + ip, pc, (char *)apanel);
          }
          loom_gemm_fetch_step(&b_next); /* nothing when not fetching */
          loom_gemm_fetch_step(&a_next);
          /* The next call's C rows, brought into L1 while this one runs:
           * its loads and stores come after its k loop, where out-of-order
           * execution cannot hide an L2 or L3 miss. */
          if (fetch_c)
            loom_gemm_fetch_tile(ip + 1 < mpn ? tile + (ip + 1) * p.mr * ldt + jp * p.nr
                                              : tile + (jp + 1 < npn ? (jp + 1) * p.nr : 0),
                                 ldt, p.mr, p.nr);
          loom_gemm_call(&calls, ip, jp, pc, kc, apanel, bpanel, mr, nr);
        }
      }
    }

    if (p.use_acc && !bf16_out) {
      for (int64_t i = 0; i < mt; ++i) {
        char *cr = (char *)loom_gemm_elem(c, i1, i2, m0 + i, n0);
        loom_gemm_store_row(cr, c->dtype, c->strides[3], tile + i * ldt, nt,
                            p.isa != LOOM_GEMM_GENERIC);
      }
    }
  }
  if (amx) loom_gemm_amx_end();
  return 0;
}
