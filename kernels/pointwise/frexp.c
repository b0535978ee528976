/* frexp: each element split into a mantissa in [0.5, 1) and a power of two.
 * Every supported dtype widens to double exactly, and double's frexp of the
 * widened value gives the same parts as the dtype's own; the mantissa
 * narrows back exactly. Contract in loom/kernels/frexp.h. */
#include "kernels/pointwise/frexp.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/kernels/pointwise.h"
#include "loom/status.h"

static int frexp_float_dtype(int32_t dt) {
  return dt == LOOM_FLOAT32 || dt == LOOM_FLOAT64 || dt == LOOM_FLOAT16 || dt == LOOM_BFLOAT16;
}

int loom_pointwise_frexp(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *m = &args->tensors[0], *e = &args->tensors[1], *x = &args->tensors[2];
  if (!frexp_float_dtype(m->dtype) || e->dtype != LOOM_INT32 ||
      (x->data && x->dtype != m->dtype) || m->rank != e->rank ||
      (x->data && x->rank != m->rank && x->rank != 0))
    return LOOM_ERROR_INVALID_ARGUMENT;
  if (!x->data && args->num_scalars < LOOM_PW_CONST + 2) return LOOM_ERROR_INVALID_ARGUMENT;
  const int contiguous = loom_nn_dense_from(m, 0) && loom_nn_dense_from(e, 0) &&
                         (!x->data || (x->rank == m->rank && loom_nn_dense_from(x, 0)));
  int32_t *ed = (int32_t *)e->data;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t mo = contiguous ? i : loom_nn_offset(m, i, -1);
    const int64_t eo = contiguous ? i : loom_nn_offset(e, i, -1);
    double v;
    if (!x->data) v = args->scalars[LOOM_PW_CONST + 1].f;
    else v = loom_nn_load(x->data, x->dtype, contiguous ? i : loom_nn_offset(x, i, -1));
    int ex = 0;
    const double mant = isfinite(v) ? frexp(v, &ex) : v;
    /* a bfloat16 NaN becomes the canonical quiet NaN, as the CPU's
     * conversion from float makes it */
    if (m->dtype == LOOM_BFLOAT16 && mant != mant) ((uint16_t *)m->data)[mo] = 0x7FC0;
    else loom_nn_store(m->data, m->dtype, mo, mant);
    ed[eo] = ex;
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_frexp_kernels[] = {
    {"pointwise.frexp", loom_pointwise_frexp, NULL},
    {NULL, NULL, NULL},
};
