/* The special functions' elementwise kernel (loom/kernels/special.h):
 * each run of the strided iteration is staged into blocks of the compute
 * type (loom_pw_load), the function applied, and the block stored
 * (loom_pw_store). float32 runs in float and float64 in double, with the
 * CPU kernels' formulas term for term (the Cephes-derived series of the
 * special_*.inc files), so results agree with the CPU's. Where the CPU has
 * FMA the element loops are the special_avx2.c build, whose contracted
 * multiply-adds round as the CPU's own vector-ISA build of the same
 * formulas does (the recurrences of the polynomials differ in their last
 * digits otherwise); the generic build rounds each operation. */
#pragma GCC optimize("fp-contract=off")

#include "kernels/pointwise/special_types.inc"

#include "base/cpu.h"
#include "kernels/base/dtype.h"
#include "kernels/base/iter.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"

#define SP_BLOCK 512

int loom_kernel_special(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_scalars < LOOM_PW_CONST) return LOOM_ERROR_INVALID_ARGUMENT;
  const int op = (int)args->scalars[0].i, kind = (int)args->scalars[1].i;
  if (op < 0 || op >= LOOM_SPECIAL_OP_COUNT) return LOOM_ERROR_INVALID_ARGUMENT;
  if (kind != LOOM_PW_F32 && kind != LOOM_PW_F64) return LOOM_ERROR_INVALID_ARGUMENT;
  const int nops = op >= LOOM_SPECIAL_FIRST_BINARY ? 3 : 2;
  if ((int)args->num_tensors < nops || (int)args->num_scalars < LOOM_PW_CONST + nops - 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int32_t kdtype = kind == LOOM_PW_F32 ? LOOM_FLOAT32 : LOOM_FLOAT64;
  loom_tensor constant = {.data = NULL, .dtype = kdtype, .rank = 0};
  const loom_tensor *ops[3];
  int is_const[3] = {0, 0, 0};
  for (int k = 0; k < nops; ++k) {
    const loom_tensor *t = &args->tensors[k];
    is_const[k] = k > 0 && t->data == NULL;
    ops[k] = is_const[k] ? &constant : t;
    if (!is_const[k] && loom_dtype_size(t->dtype) == 0) return LOOM_ERROR_NOT_SUPPORTED;
  }
  loom_iter it;
  if (loom_iter_init(&it, nops, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  union {
    _Alignas(64) float f[SP_BLOCK];
    double d[SP_BLOCK];
  } stage[3];
  for (int k = 1; k < nops; ++k) {
    if (!is_const[k]) continue;
    const double v = args->scalars[LOOM_PW_CONST + k - 1].f;
    for (int64_t i = 0; i < SP_BLOCK; ++i) {
      if (kind == LOOM_PW_F32) stage[k].f[i] = (float)v;
      else stage[k].d[i] = v;
    }
  }
  const int fma = (loom_cpu_features() & (LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA)) ==
                  (LOOM_FEATURE_AVX2 | LOOM_FEATURE_FMA);
  const double p0 = args->scalars[LOOM_PW_PARAM].f;
  const int64_t last = it.rank - 1;
  char *p[3];
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) {
    for (int64_t off = 0; off < n; off += SP_BLOCK) {
      const int64_t m = n - off < SP_BLOCK ? n - off : SP_BLOCK;
      for (int k = 1; k < nops; ++k) {
        if (is_const[k]) continue;
        const int64_t s = last >= 0 ? it.strides[k][last] : 0;
        if (!loom_pw_load(kind, stage[k].f, p[k] + off * s, ops[k]->dtype, s, m))
          return LOOM_ERROR_NOT_SUPPORTED;
      }
      if (kind == LOOM_PW_F32)
        (fma ? loom_special_apply_f32_avx2 : loom_special_apply_f32)(op, m, stage[0].f,
                                                                    stage[1].f, stage[2].f, p0);
      else
        (fma ? loom_special_apply_f64_avx2 : loom_special_apply_f64)(op, m, stage[0].d,
                                                                    stage[1].d, stage[2].d, p0);
      const int64_t os = last >= 0 ? it.strides[0][last] : 0;
      if (!loom_pw_store(kind, p[0] + off * os, ops[0]->dtype, os, stage[0].f, m))
        return LOOM_ERROR_NOT_SUPPORTED;
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_special_kernels[] = {
    {"pointwise.special", loom_kernel_special, NULL},
    {NULL, NULL, NULL},
};
