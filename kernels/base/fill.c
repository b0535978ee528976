#include "kernels/base/fill.h"

#include <string.h>

#include "kernels/base/convert.h"
#include "kernels/base/iter.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* Writes the pattern of one element (`size` bytes) n times at stride `ds`;
 * a contiguous run as memset or a typed loop, which the compiler
 * vectorizes. */
static void fill_run(char *dst, int64_t ds, const unsigned char *elem,
                     int64_t size, int64_t n) {
  /* A contiguous run of one repeated byte (zeros above all) is the C
   * library's memset, which uses the CPU's widest stores. */
  int one_byte = ds == size;
  for (int64_t b = 1; b < size && one_byte; ++b) one_byte = elem[b] == elem[0];
  if (one_byte) {
    memset(dst, elem[0], (size_t)(n * size));
    return;
  }
  switch (size) {
#define FILL(T)                                                   \
  {                                                               \
    T v;                                                          \
    memcpy(&v, elem, sizeof v);                                   \
    if (ds == (int64_t)sizeof v) {                                \
      T *d = (T *)dst;                                            \
      for (int64_t i = 0; i < n; ++i) d[i] = v;                   \
    } else {                                                      \
      for (int64_t i = 0; i < n; ++i) *(T *)(dst + i * ds) = v;   \
    }                                                             \
    return;                                                       \
  }
    case 1: FILL(uint8_t)
    case 2: FILL(uint16_t)
    case 4: FILL(uint32_t)
    case 8: FILL(uint64_t)
#undef FILL
    default:
      for (int64_t i = 0; i < n; ++i) memcpy(dst + i * ds, elem, (size_t)size);
  }
}

int loom_kernel_fill(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 1 || args->num_scalars < 1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *dst = &args->tensors[0];
  const int64_t size = loom_dtype_size(dst->dtype);
  if (size == 0) return LOOM_ERROR_NOT_SUPPORTED;

  /* Convert the value once into one element of dst's dtype. */
  unsigned char elem[16];
  if (loom_dtype_is_integral(dst->dtype)) {
    int64_t v = args->scalars[0].i;
    if (loom_convert_run((char *)elem, dst->dtype, size, (const char *)&v,
                         LOOM_INT64, 8, 1))
      return LOOM_ERROR_NOT_SUPPORTED;
  } else {
    double v[2] = {args->scalars[0].f,
                   args->num_scalars > 1 ? args->scalars[1].f : 0.0};
    if (loom_convert_run((char *)elem, dst->dtype, size, (const char *)v,
                         LOOM_COMPLEX128, 16, 1))
      return LOOM_ERROR_NOT_SUPPORTED;
  }

  const loom_tensor *ops[1] = {dst};
  loom_iter it;
  if (loom_iter_init(&it, 1, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  const int64_t ds = it.strides[0][it.rank - 1];
  char *p[1];
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) fill_run(p[0], ds, elem, size, n);
  return LOOM_OK;
}

const loom_kernel_entry loom_fill_kernels[] = {
    {"fill.strided", loom_kernel_fill, NULL},
    {NULL, NULL, NULL},
};
