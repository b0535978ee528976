/* The FFT kernels (loom/kernels/fft.h): argument checks, the row
 * transforms for the baseline ISA, and the choice of the AVX-512 build of
 * the same source. */
#include "kernels/fft/fft.h"

#include <stddef.h>

#include "base/cpu.h"
#include "kernels/registry.h"
#include "loom/status.h"

#define T float
#define SFX _f32
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX
#define T double
#define SFX _f64
#include "kernels/fft/fft_body.inc"
#undef T
#undef SFX

static int dtype_ok(const loom_tensor *x, int32_t real, int complex) {
  const int32_t want = complex ? (real == LOOM_FLOAT32 ? LOOM_COMPLEX64 : LOOM_COMPLEX128) : real;
  return x->dtype == want;
}

/* The row transforms (the column transforms of panels) of the ISA that
 * the CPU has. */
static int rows(const loom_fft_rows *r, int64_t begin, int64_t end) {
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  if (r->t->dtype == LOOM_FLOAT32)
    return avx512 ? loom_fft_rows_f32_avx512(r, begin, end) : loom_fft_rows_f32(r, begin, end);
  return avx512 ? loom_fft_rows_f64_avx512(r, begin, end) : loom_fft_rows_f64(r, begin, end);
}

static int panels(const loom_fft_rows *r, int64_t begin, int64_t end) {
  const int avx512 = (loom_cpu_features() & LOOM_FEATURE_AVX512F) != 0;
  if (r->t->dtype == LOOM_FLOAT32)
    return avx512 ? loom_fft_panels_f32_avx512(r, begin, end) : loom_fft_panels_f32(r, begin, end);
  return avx512 ? loom_fft_panels_f64_avx512(r, begin, end) : loom_fft_panels_f64(r, begin, end);
}

static int run(const loom_kernel_args *args, int64_t begin, int64_t end, int kind) {
  if (args->num_tensors < 4 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *in = &args->tensors[1];
  const loom_tensor *tab = &args->tensors[2], *ws = &args->tensors[3];
  const loom_fft_table *t = tab->data;
  const int64_t n = args->scalars[0].i;
  if (!t || t->real_n != n || t->sign != args->scalars[1].i || out->rank < 1 ||
      out->rank != in->rank || (kind == 0 && t->half))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int32_t last = out->rank - 1;
  for (int32_t d = 0; d < last; ++d)
    if (out->sizes[d] != in->sizes[d]) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t h_in = in->sizes[last], h_out = out->sizes[last];
  const int ok = kind == 0   ? dtype_ok(in, (int32_t)t->dtype, 1) && dtype_ok(out, (int32_t)t->dtype, 1) &&
                                 h_in == n && h_out == n
                 : kind == 1 ? dtype_ok(in, (int32_t)t->dtype, 0) && dtype_ok(out, (int32_t)t->dtype, 1) &&
                                 h_in == n && h_out <= n / 2 + 1
                             : dtype_ok(in, (int32_t)t->dtype, 1) && dtype_ok(out, (int32_t)t->dtype, 0) &&
                                 h_out == n && h_in <= n / 2 + 1;
  if (!ok) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t block = args->num_scalars > 3 ? args->scalars[3].i : 1;
  if (block < 1 || block > LOOM_FFT_MAX_BLOCK) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t chunk = begin / args->grain, work = 2 * (t->m + 1) * block;
  if (loom_tensor_numel(ws) < (chunk + 1) * work) return LOOM_ERROR_INVALID_ARGUMENT;
  /* The four-step twiddles of (n, run) (c2c only). */
  const void *twiddle = NULL;
  if (args->num_tensors > 4 && args->tensors[4].data) {
    const loom_tensor *tw = &args->tensors[4];
    const int64_t run = last > 0 ? out->sizes[last - 1] : 1;
    if (kind != 0 || tw->dtype != (int32_t)t->dtype || tw->rank != 1 || tw->strides[0] != 1 ||
        tw->sizes[0] < loom_fft_twiddles_numel(n, run))
      return LOOM_ERROR_INVALID_ARGUMENT;
    twiddle = tw->data;
  }
  const int64_t csize = t->dtype == LOOM_FLOAT32 ? 8 : 16;
  const loom_fft_rows r = {.kind = kind, .t = t, .out = out, .in = in,
                           .scale = args->scalars[2].f,
                           .work = (char *)ws->data + chunk * work * csize,
                           .block = block, .twiddle = twiddle};
  return rows(&r, begin, end);
}

static int panels_ok(const loom_tensor *p, int32_t real, int64_t need) {
  return dtype_ok(p, real, 1) && p->rank == 1 && p->strides[0] == 1 && p->sizes[0] >= need;
}

/* "fft.r2c_panels": the r2c row pass of a 2-d transform into the column
 * pass's panels. */
int loom_kernel_fft_r2c_panels(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 7) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *pan = &args->tensors[0], *in = &args->tensors[1];
  const loom_tensor *tab = &args->tensors[2], *ws = &args->tensors[3];
  const loom_fft_table *t = tab->data;
  const int64_t n = args->scalars[0].i, block = args->scalars[3].i, h = args->scalars[4].i;
  const int64_t P = args->scalars[5].i, cap = args->scalars[6].i;
  if (!t || t->real_n != n || t->sign != args->scalars[1].i || in->rank < 2 ||
      !dtype_ok(in, (int32_t)t->dtype, 0) || in->sizes[in->rank - 1] != n || h < 1 ||
      h > n / 2 + 1 || P < 1 || P > LOOM_FFT_MAX_BLOCK || block < 1 ||
      block > LOOM_FFT_MAX_BLOCK || cap < in->sizes[in->rank - 2])
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t outer = loom_tensor_numel(in) / (n * in->sizes[in->rank - 2]);
  if (!panels_ok(pan, (int32_t)t->dtype, outer * ((h + P - 1) / P) * P * cap))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t chunk = begin / args->grain, work = 2 * (t->m + 1) * block;
  if (loom_tensor_numel(ws) < (chunk + 1) * work) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t csize = t->dtype == LOOM_FLOAT32 ? 8 : 16;
  /* in stands for out: the rows' batch sizes are in's */
  const loom_fft_rows r = {.kind = 1, .t = t, .out = in, .in = in,
                           .scale = args->scalars[2].f,
                           .work = (char *)ws->data + chunk * work * csize, .block = block,
                           .panels = pan->data, .pw = P, .cap = cap, .h = h};
  return rows(&r, begin, end);
}

/* "fft.c2c_panels": the column pass of a 2-d transform from its panels. */
int loom_kernel_fft_c2c_panels(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 4 || args->num_scalars < 5) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *pan = &args->tensors[1];
  const loom_tensor *tab = &args->tensors[2], *ws = &args->tensors[3];
  const loom_fft_table *t = tab->data;
  const int64_t n = args->scalars[0].i, P = args->scalars[3].i, cap = args->scalars[4].i;
  if (!t || t->half || t->real_n != n || t->sign != args->scalars[1].i || out->rank < 2 ||
      !dtype_ok(out, (int32_t)t->dtype, 1) || out->sizes[out->rank - 1] != n || P < 1 ||
      P > LOOM_FFT_MAX_BLOCK || cap < t->m)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t h = out->sizes[out->rank - 2];
  const int64_t count = h ? loom_tensor_numel(out) / (n * h) * ((h + P - 1) / P) : 0;
  if (begin < 0 || end > count || !panels_ok(pan, (int32_t)t->dtype, count * P * cap))
    return LOOM_ERROR_INVALID_ARGUMENT;
  /* one buffer of P (m + 1) complex a chunk: the panel is the other */
  const int64_t chunk = begin / args->grain, work = (t->m + 1) * P;
  if (loom_tensor_numel(ws) < (chunk + 1) * work) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t csize = t->dtype == LOOM_FLOAT32 ? 8 : 16;
  const loom_fft_rows r = {.kind = 0, .t = t, .out = out, .in = out,
                           .scale = args->scalars[2].f,
                           .work = (char *)ws->data + chunk * work * csize, .block = P,
                           .panels = pan->data, .pw = P, .cap = cap};
  return panels(&r, begin, end);
}

int loom_kernel_fft_c2c(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return run(args, begin, end, 0);
}
int loom_kernel_fft_r2c(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return run(args, begin, end, 1);
}
int loom_kernel_fft_c2r(const loom_kernel_args *args, int64_t begin, int64_t end) {
  return run(args, begin, end, 2);
}

const loom_kernel_entry loom_fft_kernels[] = {
    {"fft.plan", NULL, loom_kernel_fft_plan},
    {"fft.init", loom_kernel_fft_init, NULL},
    {"fft.c2c", loom_kernel_fft_c2c, NULL},
    {"fft.r2c", loom_kernel_fft_r2c, NULL},
    {"fft.c2r", loom_kernel_fft_c2r, NULL},
    {"fft.twiddles", loom_kernel_fft_twiddles, NULL},
    {"fft.r2c_panels", loom_kernel_fft_r2c_panels, NULL},
    {"fft.c2c_panels", loom_kernel_fft_c2c_panels, NULL},
    {NULL, NULL, NULL},
};
