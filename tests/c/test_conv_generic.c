/* tests/c/test_conv_generic.c — the generic twins of the AVX-512 implicit-
 * GEMM convolutions (kernels/conv/conv_variants.h), forward and weight
 * gradient, called directly:
 * - with an AVX-512 plan a twin gives its AVX-512 variant's bits: the
 *   gathers, tiles and k order are the same, and so is the micro-kernel;
 * - with the generic plan it gives the bits of im2col + the generic GEMM
 *   (the same products in the same order), within 1e-5 of the sum of the
 *   products' magnitudes of a double reference, as the AVX-512 variant is:
 *   the two differ only by the micro-kernel's fused multiply-adds;
 * - tile widths and pieces never change a twin's bits;
 * - the public kernels run the AVX-512 variants for AVX-512 plans and the
 *   twins for others, and under LOOM_CPU_FEATURES=generic (a child
 *   process) every ISA selector this test reaches picks generic.
 * The padded-row and Winograd twins have tests of their own. */
#include "kernels/nn/nn_rows.h"
#include "base/cpu.h"
#include "tests/c/conv_twin_util.h"

extern const loom_nn_rows_ops loom_nn_rows_table;

static int hw_avx512; /* the AVX-512 variants may run here */

/* The implicit-GEMM twins: bits against the AVX-512 variant and against
 * im2col + GEMM, the reference, and tilings. */
static void check_implicit(geom g0) {
  conv_case k = make_case(g0);
  const geom *g = &k.g;
  const int64_t ny = g->n * g->o * k.len, nw = g->o * k.ck;
  float *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
  float *y2 = malloc(sizeof(float) * ny);
  float *w0 = malloc(sizeof(float) * nw), *w1 = malloc(sizeof(float) * nw);
  gemm_forward(&k, GEN, y0);
  implicit_forward(&k, GEN, loom_conv_gemm_generic, 128, 1, y1);
  CHECK_MSG(same(y0, y1, ny), "generic implicit forward (c %ld o %ld g %ld) is not im2col + GEMM's bits",
        (long)g->c, (long)g->o, (long)g->groups);
  CHECK_MSG(misses(y1, k.y, k.ymag, ny) == 0, "generic implicit forward misses the reference");
  for (int64_t tpos = 32; tpos <= 64; tpos *= 2)
    for (int64_t pieces = 1; pieces <= 3; pieces += 2) {
      implicit_forward(&k, GEN, loom_conv_gemm_generic, tpos, pieces, y2);
      CHECK_MSG(same(y1, y2, ny), "tile %ld in %ld pieces changed bits", (long)tpos, (long)pieces);
    }
  implicit_forward(&k, GEN, loom_conv_gemm_kernel, 64, 1, y2);
  CHECK_MSG(same(y1, y2, ny), "the selector did not run the twin for a generic plan");
  wgrad(&k, GEN, NULL, w0);
  wgrad(&k, GEN, loom_conv_wgrad_generic, w1);
  CHECK_MSG(same(w0, w1, nw), "generic implicit weight grad is not the GEMM's bits");
  CHECK_MSG(misses(w1, k.gw, k.gwmag, nw) == 0, "generic implicit weight grad misses the reference");
  if (hw_avx512) {
    const int isas[2] = {AVX, AVX | LOOM_GEMM_IN_COMPUTE}; /* packed, and read in place */
    for (int i = 0; i < 2; ++i) {
      implicit_forward(&k, isas[i], loom_conv_gemm_avx512, 64, 3, y1);
      implicit_forward(&k, isas[i], loom_conv_gemm_generic, 64, 3, y2);
      CHECK_MSG(same(y1, y2, ny), "twin with an AVX-512 plan (%d) differs from the AVX-512 forward",
            isas[i]);
      CHECK_MSG(misses(y1, k.y, k.ymag, ny) == 0, "AVX-512 forward misses the reference");
      implicit_forward(&k, isas[i], loom_conv_gemm_kernel, 64, 3, y2);
      CHECK_MSG(same(y1, y2, ny), "the selector did not run AVX-512 for an AVX-512 plan");
    }
    wgrad(&k, AVX, loom_conv_wgrad_avx512, w0);
    wgrad(&k, AVX, loom_conv_wgrad_generic, w1);
    CHECK_MSG(same(w0, w1, nw), "twin with an AVX-512 plan differs from the AVX-512 weight grad");
  }
  free(y0), free(y1), free(y2), free(w0), free(w1);
  free_case(&k);
}

/* Under LOOM_CPU_FEATURES=generic: the features every ISA choice reads
 * are gone, the GEMM (whose variant the convolutions follow) and the
 * table-driven row kernels are generic, and a generic plan runs the twin. */
static int capped_child(void) {
  CHECK_MSG(loom_cpu_features() == 0, "features %#x under the cap", loom_cpu_features());
  CHECK_MSG(loom_gemm_isa_selected() == LOOM_GEMM_GENERIC, "GEMM %d under the cap",
        (int)loom_gemm_isa_selected());
  for (int isa = LOOM_GEMM_AVX512; isa < LOOM_GEMM_ISA_COUNT; ++isa)
    CHECK_MSG(!loom_gemm_isa_supported((loom_gemm_isa)isa), "GEMM %d allowed under the cap", isa);
  CHECK_MSG(loom_nn_rows() == &loom_nn_rows_table, "row kernels not generic under the cap");
  check_implicit((geom){.n = 2, .c = 3, .o = 13, .groups = 1, .in = {1, 9, 11},
                        .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  TEST_MAIN_END();
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "capped") == 0) return capped_child();
  hw_avx512 = loom_gemm_isa_supported(LOOM_GEMM_AVX512);
  /* 2-d 3x3; groups, strides, dilation; 1-d; 3-d; a same-padded image (the
   * AVX-512 gather's flat runs); several k blocks; partial last panels of
   * either register tile */
  check_implicit((geom){.n = 2, .c = 3, .o = 13, .groups = 1, .in = {1, 9, 11},
                        .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  check_implicit((geom){.n = 3, .c = 4, .o = 18, .groups = 2, .in = {1, 13, 8},
                        .k = {1, 3, 2}, .s = {1, 2, 3}, .p = {0, 2, 1}, .d = {1, 2, 2}});
  check_implicit((geom){.n = 2, .c = 2, .o = 9, .groups = 1, .in = {1, 1, 63},
                        .k = {1, 1, 7}, .s = {1, 1, 2}, .p = {0, 0, 3}, .d = {1, 1, 1}});
  check_implicit((geom){.n = 2, .c = 3, .o = 8, .groups = 1, .in = {5, 6, 7},
                        .k = {3, 2, 3}, .s = {2, 1, 2}, .p = {1, 0, 1}, .d = {1, 2, 1}});
  check_implicit((geom){.n = 3, .c = 5, .o = 7, .groups = 1, .in = {1, 7, 7},
                        .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 2, 2}, .d = {1, 2, 2}});
  check_implicit((geom){.n = 2, .c = 40, .o = 30, .groups = 1, .in = {1, 9, 12},
                        .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}});
  CHECK_MSG(rerun_capped(argv, hw_avx512), "the run under LOOM_CPU_FEATURES=generic failed");
  TEST_MAIN_END();
}
