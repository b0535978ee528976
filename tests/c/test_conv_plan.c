/* tests/c/test_conv_plan.c — the convolution planners (loom/kernels/conv.h)
 * choose each pass's path as the binding did before the choice moved into
 * the family, for every GEMM variant (AMX included: planning runs none of
 * them): Winograd, padded rows or the implicit GEMM for fp32, the
 * channels-last or implicit AMX kernels for bf16 on AMX, the channels-last
 * vdpbf16ps kernels or col on AVX512-BF16, and col elsewhere,
 * the flipped forward or stride phases for input gradients; their
 * geometry agrees with the GEMM plan of the launches they describe; and
 * the registry runs them for the variant this process selected. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/conv.h"
#include "kernels/gemm/gemm.h"
#include "loom/hal.h"
#include "test_util.h"

/* One convolution: N images of C channels, O out, a square window k with
 * stride s, padding p, dilation d over an H x W image (H 1 for 1-d:
 * rank 3), groups g; channels-last x when cl. */
typedef struct conv {
  int32_t dtype;
  int64_t n, c, h, w, o, k, s, p, d, g;
  int cl, rank;
} conv;

typedef struct built {
  loom_tensor t[3];
  loom_scalar sc[19];
  loom_kernel_args args;
} built;

static int64_t grid_of(int64_t in, const conv *v) {
  return (in + 2 * v->p - v->d * (v->k - 1) - 1) / v->s + 1;
}

static void describe(loom_tensor *t, int32_t dtype, int rank, int64_t n, int64_t c, int64_t h,
                     int64_t w, int cl, uintptr_t address) {
  memset(t, 0, sizeof *t);
  t->data = (void *)address, t->dtype = dtype, t->rank = rank;
  t->sizes[0] = n, t->sizes[1] = c, t->sizes[rank - 1] = w;
  if (rank == 4) t->sizes[2] = h;
  t->strides[rank - 1] = cl ? c : 1;
  if (rank == 4) t->strides[2] = cl ? w * c : w;
  t->strides[1] = cl ? 1 : h * w;
  t->strides[0] = c * h * w;
}

/* The planners' arguments for a pass over `v`: [0] the image side (x, or
 * dx), [1] the grid side (y, or dy), [2] the weight; `flags`, `phase`. */
static void build(const conv *v, int64_t workers, int64_t flags, int64_t phase, built *b) {
  const int rank = v->rank ? v->rank : 4;
  const int64_t gh = rank == 4 ? grid_of(v->h, v) : 1, gw = grid_of(v->w, v);
  describe(&b->t[0], v->dtype, rank, v->n, v->c, rank == 4 ? v->h : 1, v->w, v->cl, 0x10000);
  describe(&b->t[1], v->dtype, rank, v->n, v->o, gh, gw, 0, 0x20000);
  describe(&b->t[2], v->dtype, rank, v->o, v->c / v->g, rank == 4 ? v->k : 1, v->k, 0,
           0x30000);
  const int lo = rank == 4 ? 1 : 2; /* the first of the window's dims */
  for (int i = 0; i < 3; ++i) {
    const int on = i >= lo;
    b->sc[i].i = on ? v->k : 1;
    b->sc[3 + i].i = on ? v->s : 1;
    b->sc[6 + i].i = on ? v->p : 0;
    b->sc[9 + i].i = on ? v->d : 1;
  }
  b->sc[12].i = 1, b->sc[13].i = gh, b->sc[14].i = gw;
  b->sc[15].i = v->g, b->sc[16].i = workers, b->sc[17].i = flags, b->sc[18].i = phase;
  b->args = (loom_kernel_args){.abi_version = LOOM_KERNEL_ABI_VERSION, .num_tensors = 3,
                               .tensors = b->t, .num_scalars = phase >= 0 ? 19 : 18,
                               .scalars = b->sc};
}

static const conv c64 = {LOOM_FLOAT32, 2, 64, 14, 14, 64, 3, 1, 1, 1, 1, 0, 4};

static int forward_path(conv v, int32_t isa, int64_t flags) {
  built b;
  build(&v, 2, flags, -1, &b);
  loom_conv_forward_plan p;
  CHECK_EQ_INT(loom_conv_forward_plan_for(&b.args, isa, &p), 0);
  return p.path;
}

static void test_forward_paths(void) {
  for (int32_t isa = LOOM_GEMM_GENERIC; isa <= LOOM_GEMM_AMX; ++isa) {
    conv v = c64;
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_WINOGRAD);
    setenv("LOOM_CONV_WINOGRAD", "0", 1);
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_PADDED);
    unsetenv("LOOM_CONV_WINOGRAD");
    v.n = 8, v.h = v.w = 56, v.o = 128, v.s = 2; /* a strided 3x3: gathered */
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_IMPLICIT);
    v = (conv){LOOM_FLOAT32, 2, 3, 40, 40, 16, 7, 2, 3, 1, 1, 0, 4}; /* the stem */
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_PADDED);
    v = c64, v.k = 1, v.p = 0;
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_GEMM);
    v.cl = 1; /* a 1x1 window over channels-last x gathers */
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_IMPLICIT);
    v = c64, v.g = 64; /* depthwise */
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_COL);
    v = c64, v.dtype = LOOM_FLOAT16;
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_COL);
    v = c64, v.rank = 3, v.h = 1, v.w = 200;
    CHECK_EQ_INT(forward_path(v, isa, 0), LOOM_CONV_PATH_PADDED);
    /* bf16: channels last on AMX when the grid pays, its implicit GEMM
     * else; channels last with vdpbf16ps where the channels fit, col
     * else; col without either */
    const int amx = isa == LOOM_GEMM_AMX, dp = isa == LOOM_GEMM_AVX512BF16;
    v = (conv){LOOM_BFLOAT16, 8, 64, 28, 28, 64, 3, 1, 1, 1, 1, 0, 4};
    CHECK_EQ_INT(forward_path(v, isa, 0),
                 amx || dp ? LOOM_CONV_PATH_NHWC : LOOM_CONV_PATH_COL);
    CHECK_EQ_INT(forward_path(v, isa, LOOM_CONV_FLIPPED), amx || dp ? LOOM_CONV_PATH_NHWC
                                                                  : LOOM_CONV_PATH_IMPLICIT);
    CHECK_EQ_INT(forward_path(v, isa, LOOM_CONV_FLIPPED | LOOM_CONV_PART),
                 LOOM_CONV_PATH_IMPLICIT);
    v.n = 2; /* 1680 grid positions: too few on AMX */
    CHECK_EQ_INT(forward_path(v, isa, 0), amx  ? LOOM_CONV_PATH_IMPLICIT
                                          : dp ? LOOM_CONV_PATH_NHWC
                                               : LOOM_CONV_PATH_COL);
    v.n = 8, v.c = 40; /* 40 channels pad to 64: too many */
    CHECK_EQ_INT(forward_path(v, isa, 0), amx ? LOOM_CONV_PATH_IMPLICIT : LOOM_CONV_PATH_COL);
    /* 7x7 outputs in rows of 9: 78% of the grid, enough for vdpbf16ps */
    v = (conv){LOOM_BFLOAT16, 8, 512, 7, 7, 512, 3, 1, 1, 1, 1, 0, 4};
    CHECK_EQ_INT(forward_path(v, isa, 0), amx  ? LOOM_CONV_PATH_IMPLICIT
                                          : dp ? LOOM_CONV_PATH_NHWC
                                               : LOOM_CONV_PATH_COL);
    v = (conv){LOOM_BFLOAT16, 8, 3, 224, 224, 64, 7, 2, 3, 1, 1, 0, 4}; /* the stem */
    CHECK_EQ_INT(forward_path(v, isa, 0), amx ? LOOM_CONV_PATH_IMPLICIT : LOOM_CONV_PATH_COL);
  }
}

/* The workspace and launch ranges of a plan are those of the GEMM plan of
 * the operands its contract gives. */
static void test_forward_geometry(void) {
  const conv cases[] = {
      {LOOM_FLOAT32, 2, 37, 6, 6, 45, 3, 1, 1, 1, 1, 0, 4},
      {LOOM_FLOAT32, 4, 32, 11, 11, 48, 3, 2, 1, 1, 2, 0, 4},
      {LOOM_BFLOAT16, 2, 64, 14, 14, 64, 3, 1, 1, 1, 1, 0, 4},
      {LOOM_FLOAT32, 2, 16, 30, 60, 32, 3, 1, 2, 2, 2, 0, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i)
    for (int64_t workers = 1; workers <= 16; workers *= 4) {
      const conv *v = &cases[i];
      built b;
      build(v, workers, 0, -1, &b);
      loom_conv_forward_plan p;
      CHECK_EQ_INT(loom_conv_forward_plan_for(&b.args, LOOM_GEMM_AMX, &p), 0);
      CHECK(p.path == LOOM_CONV_PATH_IMPLICIT || p.path == LOOM_CONV_PATH_PADDED);
      const int64_t gh = grid_of(v->h, v), gw = grid_of(v->w, v);
      const int64_t og = v->o / v->g, ck = v->c / v->g * v->k * v->k;
      int64_t bn = 1, cols;
      if (p.path == LOOM_CONV_PATH_PADDED) {
        cols = v->n * p.positions;
        CHECK(p.positions % 32 == 0 && p.positions >= gh * p.wq);
        CHECK_EQ_INT(p.range, v->g * ((cols + p.tile_positions - 1) / p.tile_positions));
      } else {
        bn = p.flat ? 1 : v->n;
        cols = p.flat ? v->n * gh * gw : gh * gw;
        CHECK_EQ_INT(p.range, bn * v->g *
                                  ((cols + p.tile_positions - 1) / p.tile_positions - 1 +
                                   p.pieces));
      }
      CHECK_EQ_INT(p.tile_positions, loom_conv_tile_positions(bn * v->g, cols, workers));
      loom_tensor c = {.dtype = v->dtype, .rank = 4, .sizes = {bn, v->g, og, cols},
                       .strides = {p.path == LOOM_CONV_PATH_PADDED ? 0 : v->o * cols,
                                   og * cols, cols, 1}};
      loom_tensor a = {.data = b.t[2].data, .dtype = v->dtype, .rank = 4,
                       .sizes = {bn, v->g, og, ck}, .strides = {0, og * ck, ck, 1}};
      loom_tensor x = {.dtype = v->dtype, .rank = 4, .sizes = {bn, v->g, ck, cols},
                       .strides = {p.path == LOOM_CONV_PATH_PADDED ? 0 : v->g * ck * cols,
                                   p.path == LOOM_CONV_PATH_PADDED ? 0 : ck * cols, cols, 1}};
      loom_gemm_plan pl;
      CHECK_EQ_INT(loom_gemm_plan_init(&c, &a, &x, p.variant, &pl), 0);
      CHECK_EQ_INT(p.workspace_bytes, pl.b_offset > 1 ? pl.b_offset : 1);
      CHECK_EQ_INT(p.pack_range, pl.pack_units_a);
      CHECK_EQ_INT(p.pack_grain, pl.pack_grain);
    }
}

static void test_input_grad_paths(void) {
  for (int32_t isa = LOOM_GEMM_GENERIC; isa <= LOOM_GEMM_AMX; ++isa) {
    const int amx = isa == LOOM_GEMM_AMX, dp = isa == LOOM_GEMM_AVX512BF16;
    loom_conv_input_grad_plan p;
    built b;
    conv v = c64;
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, LOOM_CONV_PATH_FLIPPED);
    CHECK_EQ_INT(p.geometry[7], 1); /* d (k - 1) - p */
    CHECK_EQ_INT(p.geometry[13], 14);
    v.k = 1, v.p = 0;
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, LOOM_CONV_PATH_GEMM);
    /* bf16, stride 1: the flipped forward on AMX, and with vdpbf16ps
     * where that forward takes the channels-last kernels (not for 40
     * out-channels, which pad to 64), col else */
    v = (conv){LOOM_BFLOAT16, 8, 64, 28, 28, 64, 3, 1, 1, 1, 1, 0, 4};
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, amx || dp ? LOOM_CONV_PATH_FLIPPED : LOOM_CONV_PATH_COL);
    v.o = 40;
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, amx ? LOOM_CONV_PATH_FLIPPED : LOOM_CONV_PATH_COL);
    /* bf16, stride 2: four phases read from one channels-last copy of dy
     * on AMX and AVX512-BF16, col elsewhere */
    v = (conv){LOOM_BFLOAT16, 8, 64, 56, 56, 128, 3, 2, 1, 1, 1, 0, 4};
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, amx || dp ? LOOM_CONV_PATH_PHASES : LOOM_CONV_PATH_COL);
    if (amx || dp) {
      CHECK(p.copy && p.phases[0] == 1 && p.phases[1] == 2 && p.phases[2] == 2);
      CHECK_EQ_INT(p.copy_channels, 128);
      for (int64_t i = 0; i < 4; ++i) {
        build(&v, 2, 0, i, &b);
        loom_conv_phase_plan ph;
        CHECK_EQ_INT(loom_conv_phase_plan_for(&b.args, isa, &ph), 0);
        CHECK(!ph.empty && !ph.zero && ph.in_place);
        CHECK_EQ_INT(ph.offset[1], i / 2);
        CHECK_EQ_INT(ph.offset[2], i % 2);
        /* even positions meet tap 1, odd ones taps 0 and 2 */
        CHECK_EQ_INT(ph.geometry[1], i / 2 ? 2 : 1);
        CHECK_EQ_INT(ph.first_tap[2], i % 2 ? 0 : 1);
        CHECK_EQ_INT(ph.geometry[13], 28);
      }
      build(&v, 2, 0, 4, &b);
      loom_conv_phase_plan ph;
      CHECK(loom_conv_phase_plan_for(&b.args, isa, &ph) == LOOM_ERROR_INVALID_ARGUMENT);
    }
    /* A col past the caches comes an image at a time; a transposed
     * convolution's in one go. */
    v = (conv){LOOM_FLOAT32, 5, 3, 224, 224, 8, 7, 2, 3, 1, 1, 0, 4};
    build(&v, 2, 0, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, LOOM_CONV_PATH_COL);
    CHECK_EQ_INT(p.chunk, 1);
    build(&v, 2, LOOM_CONV_COL_ONLY, -1, &b);
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
    CHECK_EQ_INT(p.path, LOOM_CONV_PATH_COL);
    CHECK_EQ_INT(p.chunk, 5);
  }
}

/* An fp32 col of 4 to 32 MB is made about 2 MB at a time (two images at
 * least) where each GEMM keeps 512 columns (positions of all its images);
 * bf16, smaller cols and fewer columns in one go. */
static void test_input_grad_col_chunks(void) {
  static const struct {
    conv v;
    int64_t chunk;
  } cases[] = {
      {{LOOM_FLOAT32, 32, 32, 32, 32, 64, 3, 2, 1, 1, 1, 0, 4}, 7},     /* 288 KB an image */
      {{LOOM_FLOAT32, 32, 64, 16, 16, 128, 3, 2, 1, 1, 1, 0, 4}, 14},   /* 144 KB */
      {{LOOM_FLOAT32, 8, 64, 56, 56, 128, 3, 2, 1, 1, 1, 0, 4}, 2},     /* 1.8 MB */
      {{LOOM_FLOAT32, 8, 128, 28, 28, 256, 3, 2, 1, 1, 1, 0, 4}, 8},    /* 392 columns */
      {{LOOM_FLOAT32, 32, 128, 28, 28, 256, 3, 2, 1, 1, 1, 0, 4}, 32},  /* as many */
      {{LOOM_FLOAT32, 8, 256, 14, 14, 512, 3, 2, 1, 1, 1, 0, 4}, 8},    /* 3.5 MB in all */
      {{LOOM_FLOAT32, 1, 64, 112, 112, 128, 3, 2, 1, 1, 1, 0, 4}, 1},   /* one image */
      {{LOOM_BFLOAT16, 32, 32, 32, 32, 64, 3, 2, 1, 1, 1, 0, 4}, 32}};
  for (int32_t isa = LOOM_GEMM_GENERIC; isa <= LOOM_GEMM_AMX; ++isa)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
      built b;
      build(&cases[i].v, 2, 0, -1, &b);
      loom_conv_input_grad_plan p;
      CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &p), 0);
      CHECK_EQ_INT(p.path, LOOM_CONV_PATH_COL);
      CHECK_EQ_INT(p.chunk, cases[i].chunk);
    }
}

static void test_weight_grad_paths(void) {
  for (int32_t isa = LOOM_GEMM_GENERIC; isa <= LOOM_GEMM_AMX; ++isa) {
    const int amx = isa == LOOM_GEMM_AMX, dp = isa == LOOM_GEMM_AVX512BF16;
    const conv cases[][1] = {
        {c64},
        {{LOOM_FLOAT32, 2, 16, 30, 30, 32, 5, 1, 2, 1, 1, 0, 4}},
        {{LOOM_FLOAT32, 2, 16, 9, 9, 16, 3, 2, 1, 1, 1, 0, 4}},
        {{LOOM_BFLOAT16, 8, 64, 28, 28, 64, 3, 1, 1, 1, 1, 0, 4}},
        {{LOOM_BFLOAT16, 8, 32, 28, 28, 32, 3, 1, 1, 1, 1, 0, 4}},
        {{LOOM_FLOAT32, 3, 6, 10, 10, 6, 5, 1, 2, 1, 6, 0, 4}},
    };
    const int want[] = {LOOM_CONV_PATH_WINOGRAD,
                        LOOM_CONV_PATH_PADDED,
                        LOOM_CONV_PATH_IMPLICIT,
                        amx || dp ? LOOM_CONV_PATH_NHWC : LOOM_CONV_PATH_COL,
                        amx ? LOOM_CONV_PATH_IMPLICIT : LOOM_CONV_PATH_COL,
                        LOOM_CONV_PATH_COL};
    for (size_t i = 0; i < sizeof want / sizeof *want; ++i) {
      built b;
      build(cases[i], 2, 0, -1, &b);
      loom_conv_weight_grad_plan p;
      CHECK_EQ_INT(loom_conv_weight_grad_plan_for(&b.args, isa, &p), 0);
      CHECK_MSG(p.path == want[i], "case %zu, isa %d: path %d", i, isa, p.path);
    }
  }
}

static void test_registry_plans_with_the_selected_variant(void) {
  CHECK_OK(loom_init());
  const char *names[] = {"conv.pack", "conv.pack_flipped", "conv.pad",
                         "conv.implicit.forward", "conv.implicit.weight_grad",
                         "conv.padded.forward", "conv.padded.weight_grad",
                         "conv.winograd.weight", "conv.winograd.forward",
                         "conv.winograd.weight_grad", "conv.winograd.weight_grad_finish",
                         "conv_nhwc.pad", "conv_nhwc.weight", "conv_nhwc.forward",
                         "conv_nhwc.weight_grad"};
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
    const loom_kernel_t *k = NULL;
    CHECK_OK(loom_kernel_lookup(names[i], &k));
  }
  const loom_kernel_t *fwd = NULL, *igrad = NULL, *wgrad = NULL;
  CHECK_OK(loom_kernel_lookup("conv.forward.plan", &fwd));
  CHECK_OK(loom_kernel_lookup("conv.input_grad.plan", &igrad));
  CHECK_OK(loom_kernel_lookup("conv.weight_grad.plan", &wgrad));
  const int32_t isa = loom_gemm_isa_selected();
  const conv cases[] = {c64, {LOOM_BFLOAT16, 8, 64, 28, 28, 64, 3, 1, 1, 1, 1, 0, 4},
                        {LOOM_FLOAT32, 2, 32, 11, 11, 48, 3, 2, 1, 1, 2, 0, 4}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    built b;
    build(&cases[i], 2, 0, -1, &b);
    loom_conv_forward_plan f1, f2;
    CHECK_OK(loom_kernel_plan(fwd, &b.args, &f1, sizeof f1));
    CHECK_EQ_INT(loom_conv_forward_plan_for(&b.args, isa, &f2), 0);
    CHECK(!memcmp(&f1, &f2, sizeof f1));
    loom_conv_input_grad_plan i1, i2;
    CHECK_OK(loom_kernel_plan(igrad, &b.args, &i1, sizeof i1));
    CHECK_EQ_INT(loom_conv_input_grad_plan_for(&b.args, isa, &i2), 0);
    CHECK(!memcmp(&i1, &i2, sizeof i1));
    loom_conv_weight_grad_plan w1, w2;
    CHECK_OK(loom_kernel_plan(wgrad, &b.args, &w1, sizeof w1));
    CHECK_EQ_INT(loom_conv_weight_grad_plan_for(&b.args, isa, &w2), 0);
    CHECK(!memcmp(&w1, &w2, sizeof w1));
  }
  /* Bad input: a plan of the wrong size, groups that do not divide. */
  built b;
  conv v = c64;
  build(&v, 2, 0, -1, &b);
  loom_conv_forward_plan p;
  CHECK(loom_kernel_plan(fwd, &b.args, &p, sizeof p - 8) == LOOM_ERROR_INVALID_ARGUMENT);
  v.g = 3;
  build(&v, 2, 0, -1, &b);
  CHECK(loom_kernel_plan(fwd, &b.args, &p, sizeof p) == LOOM_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "conv.forward.plan") != NULL);
  loom_shutdown();
}

/* Winograd's grids: the planes' rows one tile wider than the output's,
 * each image's positions rounded up to blocks of 32; the image read in
 * place, a dense grid whose blocks span images (8x8 outputs: 16 tiles
 * per image, 32 images in 16 blocks where the planes' grid takes 32). */
static void test_winograd_grids(void) {
  const conv v = {LOOM_FLOAT32, 32, 128, 8, 8, 128, 3, 1, 1, 1, 1, 0, 4};
  built b;
  build(&v, 2, 0, -1, &b);
  loom_conv_forward_plan f;
  CHECK_EQ_INT(loom_conv_forward_plan_for(&b.args, LOOM_GEMM_AVX512, &f), 0);
  CHECK_EQ_INT(f.path, LOOM_CONV_PATH_WINOGRAD);
  CHECK_EQ_INT(f.wq, 5);
  CHECK_EQ_INT(f.positions, 32);
  CHECK_EQ_INT(f.range, 32 * 2); /* 11 panels of 12 channels: 2 groups */
  CHECK_EQ_INT(f.image_wq, 4);
  CHECK_EQ_INT(f.image_positions, 16);
  CHECK_EQ_INT(f.image_range, 16 * 2);
  loom_conv_weight_grad_plan w;
  CHECK_EQ_INT(loom_conv_weight_grad_plan_for(&b.args, LOOM_GEMM_AVX512, &w), 0);
  CHECK_EQ_INT(w.path, LOOM_CONV_PATH_WINOGRAD);
  CHECK_EQ_INT(w.image_wq, 4);
  CHECK_EQ_INT(w.image_positions, 16);
  /* the dense grid's 512 tiles in whole chunks of blocks, the last one
   * reaching the end */
  CHECK(w.image_chunk % LOOM_CONV_WINOGRAD_TILES == 0);
  CHECK(w.image_chunks * w.image_chunk >= 512 && (w.image_chunks - 1) * w.image_chunk < 512);
  CHECK_EQ_INT(w.image_range, w.image_chunks * 2 * 2); /* 128 channels: 2 groups each way */
  CHECK(w.image_finish_grain >= 1);
}

/* Images read in place take Winograd where the dense grid fits: 3/4 of its
 * tiles' outputs the images' for the forward and the flipped one, 5/6 for
 * the weight gradient, and an output position per 160 channel pairs. The
 * planes' grid takes none of these (rows one tile wider, each image's
 * tiles from a block's start). */
static void test_winograd_dense_selection(void) {
  enum { W = LOOM_CONV_PATH_WINOGRAD };
  const struct {
    conv v;
    int fwd, wgrad;
  } cases[] = {
      /* 7x7, batch 8: 392 of 512 outputs (77%) */
      {{LOOM_FLOAT32, 8, 128, 7, 7, 128, 3, 1, 1, 1, 1, 0, 4}, 1, 0},
      /* 11x11: 968 of 1152 (84%); 4x4: all; 6x6 at batch 6: 216 of 256 */
      {{LOOM_FLOAT32, 8, 128, 11, 11, 128, 3, 1, 1, 1, 1, 0, 4}, 1, 1},
      {{LOOM_FLOAT32, 8, 128, 4, 4, 128, 3, 1, 1, 1, 1, 0, 4}, 1, 1},
      {{LOOM_FLOAT32, 6, 24, 6, 6, 16, 3, 1, 1, 1, 1, 0, 4}, 1, 1},
      /* 256 x 256 channels at 7x7: 392 positions too few, 490 enough */
      {{LOOM_FLOAT32, 8, 256, 7, 7, 256, 3, 1, 1, 1, 1, 0, 4}, 0, 0},
      {{LOOM_FLOAT32, 10, 256, 7, 7, 256, 3, 1, 1, 1, 1, 0, 4}, 1, 0},
      /* 5x5 (52%), 3x3 (56%), 7x7 at batch 7 (67%) */
      {{LOOM_FLOAT32, 8, 128, 5, 5, 128, 3, 1, 1, 1, 1, 0, 4}, 0, 0},
      {{LOOM_FLOAT32, 8, 64, 3, 3, 64, 3, 1, 1, 1, 1, 0, 4}, 0, 0},
      {{LOOM_FLOAT32, 7, 64, 7, 7, 64, 3, 1, 1, 1, 1, 0, 4}, 0, 0},
      /* x channels last beside an NCHW dy: the weight gradient reads
       * planes; 512 x 512 channels stay off */
      {{LOOM_FLOAT32, 8, 128, 11, 11, 128, 3, 1, 1, 1, 1, 1, 4}, 1, 0},
      {{LOOM_FLOAT32, 32, 512, 7, 7, 512, 3, 1, 1, 1, 1, 0, 4}, 0, 0},
  };
  const int32_t isas[] = {LOOM_GEMM_GENERIC, LOOM_GEMM_AVX512};
  for (size_t j = 0; j < 2; ++j)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
      const conv *v = &cases[i].v;
      const int f = forward_path(*v, isas[j], 0), ff = forward_path(*v, isas[j], LOOM_CONV_FLIPPED);
      CHECK_MSG((f == W) == cases[i].fwd, "case %zu, isa %d: forward path %d", i, isas[j], f);
      CHECK_MSG((ff == W) == cases[i].fwd, "case %zu, isa %d: flipped path %d", i, isas[j], ff);
      built b;
      build(v, 2, 0, -1, &b);
      loom_conv_weight_grad_plan w;
      CHECK_EQ_INT(loom_conv_weight_grad_plan_for(&b.args, isas[j], &w), 0);
      CHECK_MSG((w.path == W) == cases[i].wgrad, "case %zu, isa %d: weight grad path %d", i,
                isas[j], w.path);
    }
  /* An image read through a column stride (neither rows nor channels
   * last) takes the planes' grid, where 7x7 stays off. */
  built b;
  build(&cases[0].v, 2, 0, -1, &b);
  for (int d = 0; d < 4; ++d) b.t[0].strides[d] *= 2;
  loom_conv_forward_plan p;
  CHECK_EQ_INT(loom_conv_forward_plan_for(&b.args, LOOM_GEMM_AVX512, &p), 0);
  CHECK(p.path != W);
}

int main(void) {
  unsetenv("LOOM_CONV_WINOGRAD");
  RUN_TEST(test_forward_paths);
  RUN_TEST(test_forward_geometry);
  RUN_TEST(test_input_grad_paths);
  RUN_TEST(test_input_grad_col_chunks);
  RUN_TEST(test_weight_grad_paths);
  RUN_TEST(test_winograd_grids);
  RUN_TEST(test_winograd_dense_selection);
  RUN_TEST(test_registry_plans_with_the_selected_variant);
  TEST_MAIN_END();
}
