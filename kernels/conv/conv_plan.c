/* kernels/conv/conv_plan.c — the convolution planners (loom/kernels/conv.h):
 * which path a pass takes on this CPU, and its geometry.
 *
 * The fp32 paths run everywhere (their AVX-512 variants have generic
 * twins); bf16 takes the implicit and channels-last paths on AMX tiles,
 * the channels-last ones with vdpbf16ps on AVX512-BF16 CPUs without AMX,
 * and the col path elsewhere (and where those do not fit). The thresholds below were measured on
 * the host driver's kernels (the timings quoted are ResNet layers, batch 8
 * unless said otherwise). */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/conv/conv_nhwc.h"
#include "kernels/gemm/gemm.h"
#include "loom/status.h"

typedef struct conv_geom {
  int64_t k[3], s[3], p[3], d[3], grid[3];
} conv_geom;

/* One pass's arguments: x the image the window slides over, y the tensor
 * on its grid. */
typedef struct conv_pass {
  const loom_tensor *x, *y;
  int nsp;             /* spatial dims */
  int64_t n, c, o;     /* images, x's and y's channels */
  int32_t dtype;
  conv_geom g;
  int64_t groups, workers, flags;
  int32_t isa;         /* loom_gemm_isa */
} conv_pass;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static int64_t taps(const conv_geom *g) { return g->k[0] * g->k[1] * g->k[2]; }
static int64_t positions(const conv_geom *g) { return g->grid[0] * g->grid[1] * g->grid[2]; }
static int pointwise(const conv_geom *g) {
  for (int i = 0; i < 3; ++i)
    if (g->k[i] != 1 || g->s[i] != 1 || g->p[i] != 0) return 0;
  return 1;
}

static int read_pass(const loom_kernel_args *args, int32_t isa, uint32_t num_scalars,
                     conv_pass *a) {
  if (args->num_tensors < 2 || args->num_scalars < num_scalars)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: too few arguments");
  const loom_tensor *x = &args->tensors[0], *y = &args->tensors[1];
  const loom_scalar *sc = args->scalars;
  if (x->rank < 3 || x->rank > 5 || y->rank != x->rank || x->dtype != y->dtype ||
      x->sizes[0] != y->sizes[0])
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: bad image or grid");
  memset(a, 0, sizeof *a);
  a->x = x, a->y = y, a->nsp = x->rank - 2;
  a->n = x->sizes[0], a->c = x->sizes[1], a->o = y->sizes[1], a->dtype = x->dtype;
  for (int i = 0; i < 3; ++i) {
    a->g.k[i] = sc[i].i, a->g.s[i] = sc[3 + i].i, a->g.p[i] = sc[6 + i].i;
    a->g.d[i] = sc[9 + i].i, a->g.grid[i] = sc[12 + i].i;
    if (a->g.k[i] < 1 || a->g.s[i] < 1 || a->g.d[i] < 1 || a->g.p[i] < 0 || a->g.grid[i] < 0)
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: bad geometry");
  }
  a->groups = sc[15].i, a->workers = sc[16].i, a->flags = sc[17].i, a->isa = isa;
  if (a->groups < 1 || a->c % a->groups != 0 || a->o % a->groups != 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: bad groups");
  if (a->workers < 1) a->workers = 1;
  return 0;
}

/* As at::Tensor::is_contiguous(): size-1 dims may have any stride. */
static int contiguous(const loom_tensor *t) {
  for (int d = 0; d < t->rank; ++d)
    if (t->sizes[d] == 0) return 1;
  int64_t expected = 1;
  for (int d = t->rank - 1; d >= 0; --d) {
    if (t->sizes[d] == 1) continue;
    if (t->strides[d] != expected) return 0;
    expected *= t->sizes[d];
  }
  return 1;
}

static loom_tensor view4(const void *data, int32_t dtype, int64_t s0, int64_t s1, int64_t s2,
                         int64_t s3, int64_t t0, int64_t t1, int64_t t2, int64_t t3) {
  loom_tensor v;
  memset(&v, 0, sizeof v);
  v.data = (void *)data, v.dtype = dtype, v.rank = 4;
  v.sizes[0] = s0, v.sizes[1] = s1, v.sizes[2] = s2, v.sizes[3] = s3;
  v.strides[0] = t0, v.strides[1] = t1, v.strides[2] = t2, v.strides[3] = t3;
  return v;
}

/* ---- the paths' rules ------------------------------------------------------- */

/* The implicit kernels run fp32 on every CPU (AVX-512 or the generic
 * twins), bf16 on AMX tiles. */
static int implicit_dtype(const conv_pass *a) {
  return a->dtype == LOOM_FLOAT32 || (a->dtype == LOOM_BFLOAT16 && a->isa == LOOM_GEMM_AMX);
}

/* bf16 on an AVX512-BF16 CPU without AMX: the channels-last kernels where
 * they fit, col otherwise (the implicit kernels take fp32, and bf16 on AMX
 * only). */
static int dp_bf16(const conv_pass *a) {
  return a->dtype == LOOM_BFLOAT16 && a->isa == LOOM_GEMM_AVX512BF16;
}

/* The implicit GEMMs keep the weight's rows in 12-row register tiles: with
 * few output channels per group (depthwise) they would multiply padding,
 * and the col path's matrix-vector products do better. */
static int implicit_fits(int64_t rows_per_group) { return rows_per_group >= 8; }

/* Small images would leave much of each image's last 32-column panel of a
 * GEMM over (O, L) empty: then all images' positions form one row of
 * columns, (O, N * L). (The image count is the caller's part.) */
static int flat_len(int64_t len) { return (round_up(len, 32) - len) * 20 > len; }

/* 2-d geometry over zero-padded rows split into stride phases: the GEMMs
 * run over ho rows of wq phase columns per image, rounded up to whole
 * 32-position panels, so they apply where the thrown-away columns and the
 * rounding waste little. */
typedef struct conv_padded {
  int64_t hp, wp, ho, wo, sh, sw;
} conv_padded;

static int64_t pd_wq(const conv_padded *pd) { return ceil_div(pd->wp, pd->sw); }
static int64_t pd_positions(const conv_padded *pd) { return round_up(pd->ho * pd_wq(pd), 32); }
static int64_t pd_halo(const conv_padded *pd, const conv_geom *g) {
  return g->d[1] * (g->k[1] - 1) / pd->sh * pd_wq(pd) + g->d[2] * (g->k[2] - 1) / pd->sw;
}
/* A phase plane with room for `needed` elements and every padded row,
 * rounded up as "conv.pad"'s planes are allocated. */
static int64_t pd_plane(const conv_padded *pd, int64_t needed) {
  return round_up(max64(needed, ceil_div(pd->hp, pd->sh) * pd_wq(pd)), 16);
}

static int64_t height(const loom_tensor *t) { return t->rank >= 4 ? t->sizes[t->rank - 2] : 1; }
static int64_t width(const loom_tensor *t) { return t->sizes[t->rank - 1]; }

/* Images Winograd reads in place (as conv_padded.cpp): rows, channels last */
static int winograd_rows(const loom_tensor *t) {
  return t->rank == 4 && t->strides[3] == 1 && t->strides[0] >= 0 && t->strides[1] >= 0 &&
         t->strides[2] >= 0;
}
static int winograd_channels_last(const loom_tensor *t) {
  return t->rank == 4 && t->sizes[1] > 1 && t->strides[1] == 1 && t->strides[0] >= 0 &&
         t->strides[2] >= 0 && t->strides[3] >= 0;
}

/* The dense grid (images read in place, blocks of 32 tiles spanning them)
 * has empty tiles in the batch's last block only. There at least `twelfths`
 * of the tiles' outputs must be the images' (the forward 3/4, the weight
 * gradient 5/6), and the transformed weight read per block must serve an
 * output position per 160 channel pairs. Winograd against the path it
 * replaces, one thread, forward / input / weight gradient, ms: 5x5, 128
 * channels, batch 8 (52%): 0.92 / 0.97 / 1.24 against 0.80 / 0.92 / 0.85;
 * batch 32 (69%): 2.28 / 2.41 / 4.31 against 2.81 / 3.03 / 3.44. 7x7, 256
 * channels, batch 8 (392 positions): 5.35 / 5.58 / 6.25 against 5.28 /
 * 5.89 / 5.53; batch 10 (490): 4.88 / 5.80 / 5.68 against 5.86 / 6.43 /
 * 6.09. 128 channels, batch 8, 3x3 (72): 0.41 / 0.43 / 0.43 against 0.35 /
 * 0.46 / 0.37. The weight gradient at 7x7 (77%) gained little or lost (128
 * channels, batch 8, channels last: 1.57 against 1.24), at 11x11 (84%)
 * gained (2.63 against 3.24). */
static int winograd_dense_fits(const conv_pass *a, const conv_padded *pd, int64_t outputs,
                               int twelfths) {
  const int64_t tiles = round_up(a->n * pd->ho * pd->wo, LOOM_CONV_WINOGRAD_TILES);
  return a->n * outputs * 12 >= twelfths * 4 * tiles && a->n * outputs * 160 >= a->c * a->o;
}

/* Winograd: 2-d 3x3 windows of stride and dilation 1, no groups, 16 to
 * 4096 channels in, 16 or more out, at most 128K channel pairs; tiles at
 * least half output, or images read in place (`dense` twelfths, padding up
 * to 2) that fit the dense grid. Fills *pd with the planes' tile grid (ho,
 * wo in tiles, stride-2 phases). LOOM_CONV_WINOGRAD=0: off. */
static int winograd_fits(const conv_pass *a, conv_padded *pd, int dense) {
  const char *env = getenv("LOOM_CONV_WINOGRAD");
  if (env && strcmp(env, "0") == 0) return 0;
  const conv_geom *g = &a->g;
  if (a->groups != 1 || g->k[0] != 1 || g->p[0] != 0 || g->grid[0] != 1 || a->x->rank < 4)
    return 0;
  for (int i = 1; i < 3; ++i)
    if (g->k[i] != 3 || g->s[i] != 1 || g->d[i] != 1) return 0;
  /* Few channels leave the transforms the bulk of the work; the weight
   * gradient's last step holds 16 sums per input channel. */
  if (a->c < 16 || a->o < 16 || a->c > LOOM_CONV_WINOGRAD_MAX_K) return 0;
  *pd = (conv_padded){height(a->x) + 2 * g->p[1], width(a->x) + 2 * g->p[2],
                      (g->grid[1] + 1) / 2, (g->grid[2] + 1) / 2, 2, 2};
  /* Every block of 32 tiles streams the transformed weight, 16 M K floats,
   * through the GEMMs: past 8 MB (512 x 512 channels make 16) that outpaces
   * the cache (14x14: 22.1 against 24.7 ms on the GEMM path, where 256 x
   * 256 channels run 3.5 against 5.6). And at least half of the tiles'
   * outputs must be the image's. On the planes' grid (rows one tile wider
   * than the output's, each image's tiles from a block of 32) 8x8 images
   * are half (128 channels, batch 32: 1.87 against 2.36 ms), 7x7 ones 38%
   * (16 of 32 tiles, 49 of their 64 outputs; 512 channels: 9.9 against
   * 6.4 ms). */
  if (a->c * a->o > 128 * 1024) return 0;
  const int64_t outputs = g->grid[1] * g->grid[2];
  if (dense && g->p[1] <= 2 && g->p[2] <= 2 && winograd_dense_fits(a, pd, outputs, dense))
    return 1;
  return outputs * 2 >= 4 * pd_positions(pd);
}

/* The padded-row kernels: 2-d (or 1-d) windows of more than one tap. */
static int padded_fits(const conv_pass *a, conv_padded *pd) {
  const conv_geom *g = &a->g;
  if (g->k[0] != 1 || g->p[0] != 0 || g->s[0] != 1 || g->grid[0] != 1) return 0;
  /* A 1x1 window reads the image as it is. With a stride, copying the image
   * into phases paid off for the 7x7 stem (33.0 against 36.2 ms forward and
   * backward) but not for 3x3 windows, whose strided gather is already
   * cheap, nor for 1x1 ones. */
  const int strided = g->s[1] * g->s[2] > 1;
  if (taps(g) == 1 || (strided && taps(g) < 25)) return 0;
  *pd = (conv_padded){height(a->x) + 2 * g->p[1], width(a->x) + 2 * g->p[2], g->grid[1],
                      g->grid[2], g->s[1], g->s[2]};
  /* At least 80% of the grid must be output. A 7x7 image padded by 1 is
   * 77% (49 of 64 positions): there the gather path is faster in the
   * forward and both gradients (512 channels: 5.9 against 6.3 ms forward);
   * 14x14 (87.5%) is even. */
  return pd->ho * pd->wo * 5 >= pd_positions(pd) * 4;
}

/* The channels-last kernels take `image`'s channels: bf16 on AMX or
 * AVX512-BF16, 2-d, no groups, 32 or more channels in and out of which at
 * most a quarter is padding to blocks of 32. */
static int nhwc_channels_fit(const conv_pass *a, const loom_tensor *image, int64_t in_channels,
                             int64_t out_channels) {
  if (image->dtype != LOOM_BFLOAT16 ||
      (a->isa != LOOM_GEMM_AMX && a->isa != LOOM_GEMM_AVX512BF16) || a->groups != 1 ||
      image->rank != 4)
    return 0;
  const int64_t cs[2] = {in_channels, out_channels};
  for (int i = 0; i < 2; ++i)
    if (cs[i] < 32 || cs[i] * 4 < round_up(cs[i], 32) * 3) return 0;
  return 1;
}

/* Whether they pay on a grid of n images of ho x wo outputs in rows wq
 * wide: on AMX at least 80% of the grid must be output, and the grid (all
 * images') must be large enough to pay for repacking the weight per call:
 * 3x3 windows at 14x14 (1792 positions) ran 3-9% slower than the implicit
 * GEMM, those at 28x28 (6720) 1-19% faster. With vdpbf16ps the products
 * cost far more than the repacking, and the alternative is col. */
static int nhwc_grid_fits(const conv_pass *a, int64_t n, int64_t ho, int64_t wo, int64_t wq) {
  if (a->isa == LOOM_GEMM_AVX512BF16) return wo * 3 >= wq * 2;
  return wo * 5 >= wq * 4 && n * ho * wq >= 4096;
}

/* The channels-last forward over x; fills *pd with the padded extent the
 * grid reads. A 1x1 window gathers nothing on the implicit path: 7-9%
 * slower here. */
static int nhwc_fits(const conv_pass *a, conv_padded *pd) {
  const conv_geom *g = &a->g;
  if (!nhwc_channels_fit(a, a->x, a->c, a->o) || g->k[0] != 1 || g->p[0] != 0 ||
      g->s[0] != 1 || g->grid[0] != 1 || taps(g) > 64)
    return 0;
  const int64_t ho = g->grid[1], wo = g->grid[2];
  *pd = (conv_padded){(ho - 1) * g->s[1] + g->d[1] * (g->k[1] - 1) + 1,
                      (wo - 1) * g->s[2] + g->d[2] * (g->k[2] - 1) + 1, ho, wo, g->s[1],
                      g->s[2]};
  /* With vdpbf16ps and stride 1, a row's columns of padding on the right
   * may be the next row's on the left (zeros either way): rows need only
   * hold the image and what the window reaches past the left padding (7x7
   * images padded by 1: rows of 8, where 9 left the weight gradient
   * summing 10 positions a row for 7). */
  if (dp_bf16(a) && g->s[2] == 1) {
    const int64_t left = g->p[2];
    pd->wp = min64(pd->wp, max64(left + width(a->x), wo + g->d[2] * (g->k[2] - 1) - left));
  }
  return taps(g) > 1 && nhwc_grid_fits(a, a->n, ho, wo, pd_wq(pd));
}

/* The channels-last weight gradient of a folded image (LOOM_CONV_FOLDED):
 * nhwc_fits but for the channel count. */
static int nhwc_folded_fits(const conv_pass *a, conv_padded *pd) {
  const conv_geom *g = &a->g;
  if (g->k[0] != 1 || g->p[0] != 0 || g->s[0] != 1 || g->grid[0] != 1 || taps(g) > 64 ||
      taps(g) < 2)
    return 0;
  const int64_t ho = g->grid[1], wo = g->grid[2];
  *pd = (conv_padded){(ho - 1) * g->s[1] + g->d[1] * (g->k[1] - 1) + 1,
                      (wo - 1) * g->s[2] + g->d[2] * (g->k[2] - 1) + 1, ho, wo, g->s[1],
                      g->s[2]};
  return nhwc_grid_fits(a, a->n, ho, wo, pd_wq(pd));
}

/* The channels-last copy's channels (blocks of 32) and the distance of its
 * positions: an odd number of cache lines, since a power-of-two stride
 * would put a tile's 16 rows, and the taps' rows, in a few of L1's sets. */
static void nhwc_copy_layout(int64_t channels, int64_t *cp, int64_t *ps) {
  *cp = round_up(channels, LOOM_CONV_NHWC_CB);
  *ps = *cp / LOOM_CONV_NHWC_CB % 2 == 0 ? *cp + LOOM_CONV_NHWC_CB : *cp;
}

/* The channels-last forward's plan over the extent nhwc_fits gave. */
static void nhwc_forward_plan(const conv_pass *a, const conv_padded *pd,
                              loom_conv_forward_plan *out) {
  out->path = LOOM_CONV_PATH_NHWC;
  out->sh = (int32_t)pd->sh, out->sw = (int32_t)pd->sw;
  out->top = a->g.p[1], out->left = a->g.p[2], out->wq = pd_wq(pd);
  out->plane = pd_positions(pd) + pd_halo(pd, &a->g);
  nhwc_copy_layout(a->c, &out->copy_channels, &out->copy_stride);
}

/* The GEMM plan of (c, a, b) under `variant`, and the pack of A it needs:
 * "conv.pack" or, for a flipped weight, "conv.pack_flipped". */
static int plan_pack(const loom_tensor *c, const loom_tensor *a, const loom_tensor *b,
                     int32_t variant, int flipped, loom_gemm_plan *pl, int64_t *workspace,
                     int64_t *range, int64_t *grain) {
  if (loom_gemm_plan_init(c, a, b, variant, pl) != 0)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT,
                      "convolution: unsupported operands for the loom GEMM");
  /* Only the packed A lives in the workspace. */
  *workspace = max64(pl->b_offset, 1);
  if (flipped) {
    *range = pl->a_count2 * ceil_div(pl->m_panels, LOOM_CONV_FLIP_PANELS);
    *grain = 1;
  } else {
    *range = pl->pack_units_a;
    *grain = pl->pack_grain;
  }
  return 0;
}

/* ---- "conv.forward.plan" --------------------------------------------------- */

int loom_conv_forward_plan_for(const loom_kernel_args *args, int32_t isa,
                               loom_conv_forward_plan *out) {
  memset(out, 0, sizeof *out);
  conv_pass a;
  int rc = read_pass(args, isa, 18, &a);
  if (rc) return rc;
  const conv_geom *g = &a.g;
  const int flipped = (a.flags & LOOM_CONV_FLIPPED) != 0, part = (a.flags & LOOM_CONV_PART) != 0;
  const void *w = args->num_tensors > 2 ? args->tensors[2].data : NULL;
  const int64_t og = a.o / a.groups, ck = a.c / a.groups * taps(g), len = positions(g);
  conv_padded pd;
  loom_gemm_plan pl;
  if (dp_bf16(&a) && !part && implicit_fits(og) && nhwc_fits(&a, &pd)) {
    nhwc_forward_plan(&a, &pd, out);
    return 0;
  }
  if (!flipped) {
    const int direct = pointwise(g) && contiguous(a.x);
    if (!implicit_dtype(&a) || !implicit_fits(og) || direct) {
      out->path = direct ? LOOM_CONV_PATH_GEMM : LOOM_CONV_PATH_COL;
      return 0;
    }
  }
  const int amx = a.dtype == LOOM_BFLOAT16;
  const int in_place = winograd_rows(a.x) || winograd_channels_last(a.x);
  if (!amx && winograd_fits(&a, &pd, in_place ? 9 : 0)) {
    out->path = LOOM_CONV_PATH_WINOGRAD;
    out->sh = out->sw = 2;
    out->top = g->p[1], out->left = g->p[2], out->wq = pd_wq(&pd);
    out->positions = pd_positions(&pd);
    out->plane = pd_plane(&pd, out->positions + out->wq + 1);
    out->panels = ceil_div(a.o, LOOM_CONV_WINOGRAD_MR);
    const int64_t groups = ceil_div(out->panels, LOOM_CONV_WINOGRAD_PANELS);
    out->range = a.n * (out->positions / LOOM_CONV_WINOGRAD_TILES) * groups;
    /* The image read in place takes a dense grid, its tiles in blocks that
     * span images: at 8x8 (16 tiles per image) every block of 32 is full,
     * where on the planes' grid (rows of 5, 32 positions per image) each
     * held 16 tiles of output. */
    out->image_wq = pd.wo, out->image_positions = pd.ho * pd.wo;
    out->image_range = ceil_div(a.n * out->image_positions, LOOM_CONV_WINOGRAD_TILES) * groups;
    return 0;
  }
  /* A phase of an input gradient takes the channels-last kernels only from
   * a copy of dy all phases share (the input gradient's plan), since each
   * copying dy for its few taps cost more than it saved (64->128 3x3/2 at
   * 56: 2.4 against 2.1 ms). */
  if (amx && !part && nhwc_fits(&a, &pd)) {
    nhwc_forward_plan(&a, &pd, out);
    return 0;
  }
  if (!amx && padded_fits(&a, &pd)) {
    out->path = LOOM_CONV_PATH_PADDED;
    out->sh = (int32_t)pd.sh, out->sw = (int32_t)pd.sw;
    out->top = g->p[1], out->left = g->p[2], out->wq = pd_wq(&pd);
    out->positions = pd_positions(&pd);
    out->plane = pd_plane(&pd, out->positions + pd_halo(&pd, g));
    const int64_t cols = a.n * out->positions;
    const loom_tensor cc = view4(NULL, a.dtype, 1, a.groups, og, cols, 0, og * cols, cols, 1);
    const loom_tensor wa = view4(w, a.dtype, 1, a.groups, og, ck, 0, og * ck, ck, 1);
    const loom_tensor xb = view4(NULL, a.dtype, 1, a.groups, ck, cols, 0, 0, cols, 1);
    out->variant = isa;
    rc = plan_pack(&cc, &wa, &xb, out->variant, flipped, &pl, &out->workspace_bytes,
                   &out->pack_range, &out->pack_grain);
    if (rc) return rc;
    out->tile_positions = loom_conv_tile_positions(a.groups, cols, a.workers);
    out->range = a.groups * ceil_div(cols, out->tile_positions);
    return 0;
  }
  out->path = LOOM_CONV_PATH_IMPLICIT;
  out->flat = a.n > 1 && flat_len(len);
  const int64_t bn = out->flat ? 1 : a.n, cols = out->flat ? a.n * len : len;
  const loom_tensor cc =
      view4(NULL, a.dtype, bn, a.groups, og, cols, a.o * cols, og * cols, cols, 1);
  const loom_tensor wa = view4(w, a.dtype, bn, a.groups, og, ck, 0, og * ck, ck, 1);
  const loom_tensor xb =
      view4(NULL, a.dtype, bn, a.groups, ck, cols, a.groups * ck * cols, ck * cols, cols, 1);
  /* The kernel reads full panels of a weight used as it is in place when
   * the GEMM's rule says so (deep layers: 512 channels at 7x7, 8% faster;
   * at 14x14 by stride 2, 4%); a flipped one is always packed. */
  out->variant = flipped ? isa : (isa | LOOM_GEMM_IN_COMPUTE);
  rc = plan_pack(&cc, &wa, &xb, out->variant, flipped, &pl, &out->workspace_bytes,
                 &out->pack_range, &out->pack_grain);
  if (rc) return rc;
  out->tile_positions = loom_conv_tile_positions(bn * a.groups, cols, a.workers);
  out->pieces = loom_conv_tail_split(bn * a.groups, cols, out->tile_positions, a.workers);
  out->range = bn * a.groups * (ceil_div(cols, out->tile_positions) - 1 + out->pieces);
  return 0;
}

/* ---- "conv.input_grad.plan" and "conv.input_grad.phase" -------------------- */

/* With a stride s > 1 (and dilation 1), input position s i + a meets only
 * the taps t = a + p (mod s), at dy position i + (a + p - t) / s. So each
 * phase a of the input gradient (positions a, a + s, ...) is a stride-1
 * convolution of dy with the taps t0, t0 + s, ... of w, reversed. `pad`:
 * the dy rows before the first one the phase reads, its padding. */
typedef struct conv_phase {
  int64_t t0, taps, pad, size;
} conv_phase;

/* Phase `at` of dim j (0..2; dims before the convolution's are one phase). */
static conv_phase phase_of(const conv_pass *a, int j, int64_t at) {
  conv_phase ph = {0, 1, 0, 1};
  if (j < 3 - a->nsp) return ph;
  const int64_t s = a->g.s[j], size = a->x->sizes[2 + j - (3 - a->nsp)];
  ph.taps = 0;
  ph.size = (size - at + s - 1) / s;
  for (int64_t t = a->g.k[j] - 1; t >= 0; --t)
    if ((at + a->g.p[j] - t) % s == 0) ph.t0 = t, ++ph.taps;
  ph.pad = (ph.t0 + (ph.taps - 1) * s - at - a->g.p[j]) / s;
  return ph;
}

static int64_t phase_count(const conv_pass *a, int j) {
  return j < 3 - a->nsp ? 1 : a->g.s[j];
}

/* Whether the input gradient goes by phases: bf16 (AMX) only, since a
 * phase's grid may reach past the standard output's bottom and right edges
 * (dy reads 0 there), which the gathers allow and fp32's padded-row
 * kernels do not. Outputs under 512 positions per image are left to
 * col2im, whose col is small then: each phase pays launches and copies
 * (forward + backward, 3x3 windows of stride 2: 64->128 at 56, 6.1
 * against 6.7 ms; 128->256 at 28, 5.4 against 3.9; 256->512 at 14, 5.9
 * against 4.0). */
static int phases_fit(const conv_pass *a) {
  if (a->dtype != LOOM_BFLOAT16 || !(implicit_dtype(a) || dp_bf16(a)) ||
      !implicit_fits(a->c / a->groups) || positions(&a->g) < 512)
    return 0;
  int64_t most[3] = {0, 0, 0};
  for (int j = 0; j < 3; ++j) {
    if (a->g.d[j] != 1) return 0;
    for (int64_t at = 0; at < phase_count(a, j); ++at) {
      const conv_phase ph = phase_of(a, j, at);
      if (ph.taps > 0 && ph.pad < 0) return 0;
      most[j] = max64(most[j], ph.taps);
    }
  }
  return most[0] * most[1] * most[2] <= 32; /* the flipped AMX pack's limit */
}

/* The channels-last kernels take every phase of a 2-d gradient from one
 * copy of dy, padded for the phase that reaches furthest, when each
 * phase's grid pays for them, each phase writing its positions of dx in
 * place (64->128 3x3/2 at 56: 2.0 -> 1.78 ms). */
static void phases_copy(const conv_pass *a, loom_conv_input_grad_plan *out) {
  if (a->nsp != 2 || !nhwc_channels_fit(a, a->y, a->o, a->c)) return;
  int64_t top = 0, left = 0, wq = 0, plane = 0;
  const int64_t nh = phase_count(a, 1), nw = phase_count(a, 2);
  for (int64_t ah = 0; ah < nh; ++ah) {
    const conv_phase ph = phase_of(a, 1, ah);
    top = max64(top, ph.taps > 0 ? ph.pad : 0);
  }
  for (int64_t aw = 0; aw < nw; ++aw) {
    const conv_phase pw = phase_of(a, 2, aw);
    left = max64(left, pw.taps > 0 ? pw.pad : 0);
  }
  for (int64_t aw = 0; aw < nw; ++aw) {
    const conv_phase pw = phase_of(a, 2, aw);
    if (pw.taps > 0) wq = max64(wq, pw.size + pw.taps - 1 + left - pw.pad);
  }
  int fit = 1;
  for (int64_t ah = 0; ah < nh; ++ah)
    for (int64_t aw = 0; aw < nw; ++aw) {
      const conv_phase ph = phase_of(a, 1, ah), pw = phase_of(a, 2, aw);
      if (ph.taps == 0 || pw.taps == 0) continue;
      fit = fit && nhwc_grid_fits(a, a->n, ph.size, pw.size, wq);
      const int64_t reach = (ph.taps - 1 + top - ph.pad) * wq + pw.taps - 1 + left - pw.pad;
      plane = max64(plane, round_up(ph.size * wq, 32) + reach);
    }
  if (!fit) return;
  out->copy = 1;
  out->top = top, out->left = left, out->wq = wq, out->plane = plane;
  nhwc_copy_layout(a->o, &out->copy_channels, &out->copy_stride);
}

/* Whether the flipped forward of the input gradient (dx's grid from dy, over
 * `geometry`: the plan's) takes the channels-last kernels. */
static int flipped_nhwc_fits(const conv_pass *a, const int64_t *geometry) {
  conv_pass f = *a;
  f.x = a->y, f.y = a->x, f.c = a->o, f.o = a->c;
  for (int i = 0; i < 3; ++i) {
    f.g.k[i] = geometry[i], f.g.s[i] = geometry[3 + i], f.g.p[i] = geometry[6 + i];
    f.g.d[i] = geometry[9 + i], f.g.grid[i] = geometry[12 + i];
  }
  conv_padded pd;
  return implicit_fits(f.o / f.groups) && nhwc_fits(&f, &pd);
}

int loom_conv_input_grad_plan_for(const loom_kernel_args *args, int32_t isa,
                                  loom_conv_input_grad_plan *out) {
  memset(out, 0, sizeof *out);
  conv_pass a;
  int rc = read_pass(args, isa, 18, &a);
  if (rc) return rc;
  const conv_geom *g = &a.g;
  if (!(a.flags & LOOM_CONV_COL_ONLY)) {
    if (pointwise(g)) {
      out->path = LOOM_CONV_PATH_GEMM;
      return 0;
    }
    /* With stride 1 the input gradient is itself a convolution: of dy with
     * the weight's in/out channels swapped and taps reversed, padded
     * d*(k-1) - p, over dx's grid. */
    int flipped = (implicit_dtype(&a) || dp_bf16(&a)) && implicit_fits(a.c / a.groups) &&
                  !(a.dtype == LOOM_BFLOAT16 && taps(g) > 32);
    for (int i = 0; i < 3; ++i)
      if (g->s[i] != 1 || g->p[i] > g->d[i] * (g->k[i] - 1)) flipped = 0;
    if (flipped) {
      for (int i = 0; i < 3; ++i) {
        const int spatial = i >= 3 - a.nsp;
        out->geometry[i] = g->k[i];
        out->geometry[3 + i] = g->s[i];
        out->geometry[6 + i] = g->d[i] * (g->k[i] - 1) - g->p[i];
        out->geometry[9 + i] = g->d[i];
        out->geometry[12 + i] = spatial ? a.x->sizes[2 + i - (3 - a.nsp)] : 1;
      }
      /* with vdpbf16ps only when that forward takes the channels-last
       * kernels (it has no implicit one) */
      if (!dp_bf16(&a) || flipped_nhwc_fits(&a, out->geometry)) {
        out->path = LOOM_CONV_PATH_FLIPPED;
        return 0;
      }
      memset(out->geometry, 0, sizeof out->geometry);
    }
    if (phases_fit(&a)) {
      out->path = LOOM_CONV_PATH_PHASES;
      for (int j = 0; j < 3; ++j) out->phases[j] = (int32_t)phase_count(&a, j);
      phases_copy(&a, out);
      /* with vdpbf16ps only from the channels-last copy all phases share */
      if (!dp_bf16(&a) || out->copy) return 0;
      memset(out, 0, sizeof *out);
    }
  }
  out->path = LOOM_CONV_PATH_COL;
  out->flat = flat_len(positions(g));
  out->chunk = a.n;
  if (a.flags & LOOM_CONV_COL_ONLY) return 0;
  /* A col past 32 MB is made by 8 MB (or one image), which col2im reads back
   * from the last-level cache (the 7x7 stem, 224 x 224, bf16: 7.1 -> 6.1 ms);
   * fp32 from 4 MB by 2 MB (two images at least) where a GEMM keeps 512
   * columns to repay packing W^T (one thread: 32->64 3x3/2 at 32, 32 images,
   * 5.9 -> 5.0 ms; 128->256 at 28 by twos lost 3%, 256->512 at 14, 26%). */
  const int64_t per_image = a.c * taps(g) * positions(g) * 4, all = per_image * a.n;
  const int64_t by2 = all < ((int64_t)4 << 20) ? a.n : clamp64((2 << 20) / per_image, 2, a.n);
  if (all > ((int64_t)32 << 20)) out->chunk = clamp64(((int64_t)8 << 20) / per_image, 1, a.n);
  else if (a.dtype == LOOM_FLOAT32 && a.n > 1 && by2 * positions(g) >= 512) out->chunk = by2;
  return 0;
}

int loom_conv_phase_plan_for(const loom_kernel_args *args, int32_t isa,
                             loom_conv_phase_plan *out) {
  memset(out, 0, sizeof *out);
  loom_conv_input_grad_plan pass;
  int rc = loom_conv_input_grad_plan_for(args, isa, &pass);
  if (rc) return rc;
  conv_pass a;
  rc = read_pass(args, isa, 19, &a);
  if (rc) return rc;
  const int64_t total = (int64_t)pass.phases[0] * pass.phases[1] * pass.phases[2];
  const int64_t index = args->scalars[18].i;
  if (pass.path != LOOM_CONV_PATH_PHASES || index < 0 || index >= total)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: no such phase");
  const int64_t at[3] = {index / (pass.phases[1] * pass.phases[2]),
                         index / pass.phases[2] % pass.phases[1], index % pass.phases[2]};
  for (int j = 0; j < 3; ++j) {
    const conv_phase ph = phase_of(&a, j, at[j]);
    out->offset[j] = at[j];
    out->first_tap[j] = ph.t0;
    out->geometry[j] = ph.taps, out->geometry[3 + j] = 1, out->geometry[6 + j] = ph.pad;
    out->geometry[9 + j] = 1, out->geometry[12 + j] = ph.size;
    out->empty = out->empty || ph.size == 0;
    out->zero = out->zero || ph.taps == 0;
  }
  out->origin = (pass.top - out->geometry[7]) * pass.wq + pass.left - out->geometry[8];
  /* the kernel writes rows whose elements are 1 or 2 apart */
  out->in_place = pass.copy && a.x->strides[3] * a.g.s[2] <= 2;
  return 0;
}

/* ---- "conv.weight_grad.plan" ----------------------------------------------- */

/* The channels-last weight gradient: as the forward, with 64 or more
 * channels in and out (items are blocks of 32 by 32 channels: at least
 * four of them). */
static void nhwc_wgrad_plan(const conv_pass *a, const conv_padded *pd,
                            loom_conv_weight_grad_plan *out) {
  const conv_geom *g = &a->g;
  const int64_t t = taps(g);
  out->path = LOOM_CONV_PATH_NHWC;
  out->sh = (int32_t)pd->sh, out->sw = (int32_t)pd->sw;
  out->top = g->p[1], out->left = g->p[2];
  /* Rows of an even width start whole pairs of positions. */
  out->wq = round_up(pd_wq(pd), 2);
  const int64_t grid = pd->ho * out->wq;
  const int64_t halo =
      g->d[1] * (g->k[1] - 1) / pd->sh * out->wq + g->d[2] * (g->k[2] - 1) / pd->sw;
  out->plane = round_up(round_up(grid, 32) + halo, 32);
  /* The image in pairs of positions, each pair an odd number of cache
   * lines from the next (as for the forward's copy). */
  out->copy_channels = round_up(a->c, LOOM_CONV_NHWC_CB);
  out->copy_stride = 2 * out->copy_channels + 32;
  /* dy on the grid, zero past wo, past O and as far around the grid as the
   * taps reach. */
  out->lead = halo;
  out->span = out->lead + out->plane;
  out->out_channels = round_up(a->o, 32);
  /* Items of several out-channel blocks, which each chunk of the copy
   * serves from the core's cache: where one block an item read the copy
   * from the last-level cache once per block (64->128 3x3/2 at 56: bound by
   * those reads). As many blocks as the sums buffer holds, shared evenly,
   * while each worker still gets an item. */
  const int64_t obs = out->out_channels / 32, cbs = out->copy_channels / LOOM_CONV_NHWC_CB;
  const int64_t most = max64(1, LOOM_CONV_NHWC_WG_BLOCKS / t);
  const int64_t want = ceil_div(a->workers, cbs); /* groups for a worker each */
  const int64_t shares = max64(ceil_div(obs, most), min64(want, obs));
  out->per_item = ceil_div(obs, shares);
  out->range = ceil_div(obs, out->per_item) * cbs;
}

/* The Winograd weight gradient's split of `tiles` grid positions (every
 * image's): into chunks, each summing into its own 16 M K floats, up to
 * 16 of them as long as their sums stay within 4 MB. Items also split the
 * channels, so the chunks need not be many. The split follows the shape
 * only. */
static void winograd_wgrad_chunks(const conv_pass *a, int64_t tiles, int64_t *chunk,
                                  int64_t *chunks, int64_t *range, int64_t *finish_grain) {
  const int64_t want = clamp64(((int64_t)4 << 20) / (64 * a->o * a->c), 1, 16);
  *chunk = round_up(ceil_div(tiles, want), LOOM_CONV_WINOGRAD_TILES);
  *chunks = ceil_div(tiles, *chunk);
  *range = *chunks * ceil_div(a->o, LOOM_CONV_WINOGRAD_WG_M) *
           ceil_div(a->c, LOOM_CONV_WINOGRAD_WG_K);
  *finish_grain = max64(1, 4096 / (a->c * *chunks));
}

static void winograd_wgrad_plan(const conv_pass *a, const conv_padded *pd,
                                loom_conv_weight_grad_plan *out) {
  const conv_geom *g = &a->g;
  out->path = LOOM_CONV_PATH_WINOGRAD;
  out->sh = out->sw = 2;
  out->top = g->p[1], out->left = g->p[2], out->wq = pd_wq(pd);
  out->positions = pd_positions(pd);
  out->plane = pd_plane(pd, out->positions + out->wq + 1);
  /* dy's tiles start at its first row and column, unpadded */
  const conv_padded dyp = {height(a->y), 2 * out->wq, pd->ho, pd->wo, 2, 2};
  out->dy_plane = pd_plane(&dyp, out->positions);
  winograd_wgrad_chunks(a, a->n * out->positions, &out->chunk, &out->chunks, &out->range,
                        &out->finish_grain);
  /* x and dy read in place: the dense grid, as the forward's */
  out->image_wq = pd->wo, out->image_positions = pd->ho * pd->wo;
  winograd_wgrad_chunks(a, a->n * out->image_positions, &out->image_chunk, &out->image_chunks,
                        &out->image_range, &out->image_finish_grain);
}

static int padded_wgrad_plan(const conv_pass *a, const conv_padded *pd,
                             loom_conv_weight_grad_plan *out) {
  const conv_geom *g = &a->g;
  const int64_t og = a->o / a->groups, ck = a->c / a->groups * taps(g);
  out->path = LOOM_CONV_PATH_PADDED;
  out->sh = (int32_t)pd->sh, out->sw = (int32_t)pd->sw;
  out->top = g->p[1], out->left = g->p[2], out->wq = pd_wq(pd);
  /* Each image's k run is padded to whole 32-position panels. */
  out->positions = pd_positions(pd);
  out->plane = pd_plane(pd, out->positions + pd_halo(pd, g));
  const int64_t k = a->n * out->positions;
  const loom_tensor cc = view4(NULL, a->dtype, 1, a->groups, og, ck, 0, og * ck, ck, 1);
  const int64_t ld = loom_conv_padded_dy_row(a->n, out->positions);
  const loom_tensor dya = view4(NULL, a->dtype, 1, a->groups, og, k, 0, og * ld, ld, 1);
  const loom_tensor xb = view4(NULL, a->dtype, 1, a->groups, k, ck, 0, 0, ck, 1);
  /* dy's full row panels are read where they lie, k running along its rows
   * (the 7x7 stem, fp32: 14.3 -> 12.5 ms): packing them cost a pass over
   * all of dy. */
  out->variant = a->isa | LOOM_GEMM_IN_COMPUTE;
  loom_gemm_plan pl;
  const int rc = plan_pack(&cc, &dya, &xb, out->variant, 0, &pl, &out->workspace_bytes,
                           &out->pack_range, &out->pack_grain);
  if (rc) return rc;
  /* Each item is one or more of dW's 32-column panels over one k chunk, and
   * reads the chunk's dy once for all of them. A dy too big to stay in
   * cache (a long k: the early layers) is split into k chunks first, whose
   * partial sums are added afterwards, in order, and each chunk serves a
   * group of panels. Otherwise every panel is an item (dy comes from cache,
   * and a group's dW tiles would crowd it out) and k is split only when
   * the panels are too few. The split depends on the shape only, never on
   * the thread count. */
  const int big_dy = og * pl.kp * (int64_t)4 > ((int64_t)4 << 20);
  const int64_t blocks = big_dy ? a->groups : a->groups * pl.n_panels;
  const int64_t want = max64(1, min64(ceil_div(16, blocks), pl.kp / (2 * pl.kc)));
  out->chunk = round_up(ceil_div(pl.kp, want), pl.kc);
  out->chunks = ceil_div(pl.kp, out->chunk);
  const int64_t chunk_items = out->chunks * a->groups;
  const int64_t sets = min64(pl.n_panels, ceil_div(16, chunk_items));
  out->per_item =
      big_dy ? min64(ceil_div(pl.n_panels, sets), LOOM_CONV_WGRAD_MAX_PANELS) : 1;
  out->range = chunk_items * ceil_div(pl.n_panels, out->per_item);
  return 0;
}

static int implicit_wgrad_plan(const conv_pass *a, loom_conv_weight_grad_plan *out) {
  const int64_t og = a->o / a->groups, ck = a->c / a->groups * taps(&a->g);
  const int64_t nl = a->n * positions(&a->g);
  out->path = LOOM_CONV_PATH_IMPLICIT;
  const loom_tensor cc = view4(NULL, a->dtype, 1, a->groups, og, ck, 0, og * ck, ck, 1);
  const loom_tensor dya = view4(NULL, a->dtype, 1, a->groups, og, nl, 0, og * nl, nl, 1);
  const loom_tensor xb = view4(NULL, a->dtype, 1, a->groups, nl, ck, 0, nl * ck, ck, 1);
  out->variant = a->isa;
  loom_gemm_plan pl;
  const int rc = plan_pack(&cc, &dya, &xb, out->variant, 0, &pl, &out->workspace_bytes,
                           &out->pack_range, &out->pack_grain);
  if (rc) return rc;
  if (a->dtype == LOOM_FLOAT32) {
    out->range = a->groups * pl.n_panels;
    return 0;
  }
  /* An AMX item reads each k block of dy once for up to 4 panels of dW, as
   * long as that leaves every worker 2 items or more. */
  const int64_t want = a->groups * pl.n_panels / (2 * a->workers);
  out->per_item = clamp64(want, 1, 4);
  out->range = a->groups * ceil_div(pl.n_panels, out->per_item);
  return 0;
}

int loom_conv_weight_grad_plan_for(const loom_kernel_args *args, int32_t isa,
                                   loom_conv_weight_grad_plan *out) {
  memset(out, 0, sizeof *out);
  conv_pass a;
  int rc = read_pass(args, isa, 18, &a);
  if (rc) return rc;
  const int implicit = implicit_dtype(&a) && implicit_fits(a.o / a.groups);
  const int fp32 = a.dtype == LOOM_FLOAT32;
  conv_padded pd;
  if ((implicit || (dp_bf16(&a) && implicit_fits(a.o / a.groups))) && !fp32 && a.c >= 64 &&
      a.o >= 64 && nhwc_fits(&a, &pd)) {
    nhwc_wgrad_plan(&a, &pd, out);
    return 0;
  }
  /* A folded stem (3 channels by 7 columns: 21 of the copy's 32 channels)
   * on vdpbf16ps: col's GEMM packed and transposed the whole batch's col
   * (the 7x7 stem's weight gradient: 25 against 19 ms here). */
  if ((a.flags & LOOM_CONV_FOLDED) && dp_bf16(&a) && a.groups == 1 && a.c <= 32 && a.o >= 64 &&
      a.g.k[2] == 1 && nhwc_folded_fits(&a, &pd)) {
    nhwc_wgrad_plan(&a, &pd, out);
    return 0;
  }
  const int in_place = (winograd_rows(a.x) && winograd_rows(a.y)) ||
                       (winograd_channels_last(a.x) && winograd_channels_last(a.y));
  if (implicit && fp32 && winograd_fits(&a, &pd, in_place ? 10 : 0)) {
    winograd_wgrad_plan(&a, &pd, out);
    return 0;
  }
  if (implicit && fp32 && padded_fits(&a, &pd)) return padded_wgrad_plan(&a, &pd, out);
  if (implicit) return implicit_wgrad_plan(&a, out);
  out->path = LOOM_CONV_PATH_COL;
  return 0;
}

/* ---- the planners ------------------------------------------------------------ */

#define CONV_PLANNER(name, type, plan_for)                                         \
  int name(const loom_kernel_args *args, void *out_plan, uint64_t size) {          \
    if (size != sizeof(type))                                                      \
      return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "convolution plan: bad size"); \
    return plan_for(args, (int32_t)loom_gemm_isa_selected(), (type *)out_plan);    \
  }

CONV_PLANNER(loom_conv_forward_planner, loom_conv_forward_plan, loom_conv_forward_plan_for)
CONV_PLANNER(loom_conv_input_grad_planner, loom_conv_input_grad_plan,
             loom_conv_input_grad_plan_for)
CONV_PLANNER(loom_conv_phase_planner, loom_conv_phase_plan, loom_conv_phase_plan_for)
CONV_PLANNER(loom_conv_weight_grad_planner, loom_conv_weight_grad_plan,
             loom_conv_weight_grad_plan_for)
