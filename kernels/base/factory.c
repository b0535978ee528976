/* Index formulas: each element depends only on its own position. */
#include "kernels/base/factory.h"

#include <math.h>
#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise.h"
#include "kernels/registry.h"
#include "loom/status.h"

static void fa_store(const loom_tensor *t, int64_t off, int integral, double f,
                     int64_t i) {
  char *dst = (char *)t->data + off * loom_dtype_size(t->dtype);
  if (t->dtype == LOOM_COMPLEX64) { /* a real value: the imaginary part 0 */
    const float v[2] = {(float)f, 0.0f};
    memcpy(dst, v, sizeof v);
  } else if (t->dtype == LOOM_COMPLEX128) {
    const double v[2] = {f, 0.0};
    memcpy(dst, v, sizeof v);
  } else if (integral) {
    loom_pw_store(LOOM_PW_I64, dst, t->dtype, 0, &i, 1);
  } else {
    loom_pw_store(LOOM_PW_F64, dst, t->dtype, 0, &f, 1);
  }
}

int loom_kernel_factory(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 1 || args->num_scalars < 4) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0];
  const int op = (int)args->scalars[0].i;
  const int integral = loom_dtype_is_integral(out->dtype);
  const loom_scalar *s = args->scalars;
  switch (op) {
    case LOOM_FACTORY_ARANGE: {
      const int64_t st = out->rank ? out->strides[0] : 0;
      if (st == 1 && out->dtype == LOOM_FLOAT32) { /* the values fa_store gives */
        float *o = (float *)out->data;
        for (int64_t i = begin; i < end; ++i) o[i] = (float)(s[1].f + (double)i * s[2].f);
        return LOOM_OK;
      }
      if (st == 1 && out->dtype == LOOM_INT64) {
        int64_t *o = (int64_t *)out->data;
        for (int64_t i = begin; i < end; ++i)
          o[i] = (int64_t)((uint64_t)s[1].i + (uint64_t)i * (uint64_t)s[2].i);
        return LOOM_OK;
      }
      for (int64_t i = begin; i < end; ++i) {
        if (integral) fa_store(out, i * st, 1, 0.0, (int64_t)((uint64_t)s[1].i + (uint64_t)i * (uint64_t)s[2].i));
        else fa_store(out, i * st, 0, s[1].f + (double)i * s[2].f, 0);
      }
      return LOOM_OK;
    }
    case LOOM_FACTORY_LINSPACE:
    case LOOM_FACTORY_LOGSPACE: {
      const int64_t n = out->rank ? out->sizes[0] : 1;
      const int64_t st = out->rank ? out->strides[0] : 0;
      const double start = s[1].f, stop = s[2].f;
      const double step = n > 1 ? (stop - start) / (double)(n - 1) : 0.0;
      const int64_t half = n / 2;
#define LINSPACE_VALUE(i)                                                                   \
  (n == 1 ? start : ((i) < half ? start + step * (double)(i) : stop - step * (double)(n - (i) - 1)))
      if (op == LOOM_FACTORY_LINSPACE && st == 1 && out->dtype == LOOM_FLOAT32) {
        float *o = (float *)out->data; /* the values fa_store gives */
        for (int64_t i = begin; i < end; ++i) o[i] = (float)LINSPACE_VALUE(i);
        return LOOM_OK;
      }
      for (int64_t i = begin; i < end; ++i) {
        double v = LINSPACE_VALUE(i);
        if (op == LOOM_FACTORY_LOGSPACE) v = pow(s[3].f, v);
        fa_store(out, i * st, integral, v, (int64_t)v);
      }
#undef LINSPACE_VALUE
      return LOOM_OK;
    }
    case LOOM_FACTORY_EYE: {
      if (out->rank != 2) return LOOM_ERROR_INVALID_ARGUMENT;
      const int64_t cols = out->sizes[1];
      for (int64_t e = begin; e < end; ++e) {
        const int64_t i = e / cols, j = e % cols;
        fa_store(out, i * out->strides[0] + j * out->strides[1], integral,
                 i == j ? 1.0 : 0.0, i == j);
      }
      return LOOM_OK;
    }
    case LOOM_FACTORY_TRIL:
    case LOOM_FACTORY_TRIU: {
      if (args->num_tensors < 2 || out->rank < 2) return LOOM_ERROR_INVALID_ARGUMENT;
      const loom_tensor *in = &args->tensors[1];
      const int32_t r = out->rank;
      const int64_t rows = out->sizes[r - 2], cols = out->sizes[r - 1];
      const int64_t diag = s[1].i;
      if (in->dtype == out->dtype && out->strides[r - 1] == 1 && in->strides[r - 1] == 1) {
        /* Rows contiguous in both: each run of a row is a copy of the kept
         * columns and zeros (all-zero bytes in every dtype) elsewhere. */
        const int64_t es = loom_dtype_size(out->dtype);
        for (int64_t e = begin; e < end;) {
          const int64_t j0 = e % cols, i = (e / cols) % rows;
          const int64_t len = cols - j0 < end - e ? cols - j0 : end - e;
          /* kept columns [klo, khi) of row i */
          int64_t klo = 0, khi = cols;
          if (op == LOOM_FACTORY_TRIL) khi = i + diag + 1;
          else klo = i + diag;
          klo = klo < j0 ? j0 : (klo > j0 + len ? j0 + len : klo);
          khi = khi < klo ? klo : (khi > j0 + len ? j0 + len : khi);
          char *o = (char *)out->data + loom_nn_offset(out, e, -1) * es;
          const char *x = (const char *)in->data + loom_nn_offset(in, e, -1) * es;
          memset(o, 0, (size_t)((klo - j0) * es));
          memmove(o + (klo - j0) * es, x + (klo - j0) * es, (size_t)((khi - klo) * es)); /* tril_ */
          memset(o + (khi - j0) * es, 0, (size_t)((j0 + len - khi) * es));
          e += len;
        }
        return LOOM_OK;
      }
      if (in->dtype == out->dtype) { /* any layout: each element's bytes, or zeros */
        const int64_t es = loom_dtype_size(out->dtype);
        for (int64_t e = begin; e < end; ++e) {
          const int64_t j = e % cols, i = (e / cols) % rows;
          const int keep = op == LOOM_FACTORY_TRIL ? j - i <= diag : j - i >= diag;
          char *o = (char *)out->data + loom_nn_offset(out, e, -1) * es;
          if (keep) memmove(o, (const char *)in->data + loom_nn_offset(in, e, -1) * es, (size_t)es);
          else memset(o, 0, (size_t)es);
        }
        return LOOM_OK;
      }
      if (out->dtype == LOOM_COMPLEX64 || out->dtype == LOOM_COMPLEX128 ||
          in->dtype == LOOM_COMPLEX64 || in->dtype == LOOM_COMPLEX128)
        return LOOM_ERROR_INVALID_ARGUMENT; /* a complex value is not one real */
      for (int64_t e = begin; e < end; ++e) {
        const int64_t j = e % cols, i = (e / cols) % rows;
        const int keep = op == LOOM_FACTORY_TRIL ? j - i <= diag : j - i >= diag;
        const int64_t oo = loom_nn_offset(out, e, -1), io = loom_nn_offset(in, e, -1);
        if (integral) fa_store(out, oo, 1, 0.0, keep ? loom_nn_load_index(in->data, in->dtype, io) : 0);
        else fa_store(out, oo, 0, keep ? loom_nn_load(in->data, in->dtype, io) : 0.0, 0);
      }
      return LOOM_OK;
    }
    default: return LOOM_ERROR_INVALID_ARGUMENT;
  }
}

const loom_kernel_entry loom_factory_kernels[] = {
    {"factory.generate", loom_kernel_factory, NULL},
    {NULL, NULL, NULL},
};
