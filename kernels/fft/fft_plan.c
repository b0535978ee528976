/* The FFT's tables: factorisation, layout and the twiddles, chirps and
 * Bluestein kernels, computed in double and stored in the table's dtype. */
#include <math.h>
#include <string.h>

#include "kernels/fft/fft.h"
#include "loom/status.h"

static int64_t align64(int64_t b) { return (b + 63) & ~(int64_t)63; }

/* Radices of n: fours while more than 64 points remain, then eights and
 * fours (the fewest passes over the buffers; the radix-8 stages run where
 * the stride is long), then 2, 3, 5, 7, and other primes up to
 * LOOM_FFT_MAX_RADIX. 0, or 1 when a larger prime remains. */
static int factorize(int64_t n, loom_fft_stockham *st) {
  st->stages = 0;
  while (n % 4 == 0 && n > 64) {
    st->radix[st->stages++] = 4;
    n /= 4;
  }
  while (n % 8 == 0) {
    st->radix[st->stages++] = 8;
    n /= 8;
  }
  while (n % 4 == 0) {
    st->radix[st->stages++] = 4;
    n /= 4;
  }
  for (int64_t p = 2; p <= LOOM_FFT_MAX_RADIX && n > 1; ++p) {
    while (n % p == 0) {
      if (st->stages == LOOM_FFT_MAX_STAGES) return 1;
      st->radix[st->stages++] = (int32_t)p;
      n /= p;
    }
  }
  return n > 1;
}

/* Bytes of the twiddles of st (n and radices set) in a real type of
 * `real` bytes. */
static int64_t stockham_bytes(const loom_fft_stockham *st, int64_t real) {
  int64_t len = st->n, complexes = 0;
  for (int32_t f = 0; f < st->stages; ++f) {
    const int64_t p = st->radix[f], m = len / p;
    complexes += m * (p - 1) + (p == 2 || p == 4 || p == 8 ? 0 : p);
    len = m;
  }
  return complexes * 2 * real;
}

/* The smallest 2^a 3^b 5^c >= n. */
static int64_t smooth_above(int64_t n) {
  int64_t best = INT64_MAX;
  for (int64_t a = 1; a < 2 * n && a > 0; a *= 2)
    for (int64_t b = a; b < 2 * n; b *= 3)
      for (int64_t c = b; c < 2 * n; c *= 5)
        if (c >= n && c < best) best = c;
  return best;
}

int loom_fft_layout(int64_t n, int64_t sign, int32_t dtype, int real_signal,
                    loom_fft_table *t) {
  memset(t, 0, sizeof *t);
  if (n < 1 || n > LOOM_FFT_MAX_N || (sign != 1 && sign != -1) ||
      (dtype != LOOM_FLOAT32 && dtype != LOOM_FLOAT64))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t real = dtype == LOOM_FLOAT32 ? 4 : 8;
  t->real_n = n;
  t->half = real_signal && n % 2 == 0;
  if (t->half) n /= 2;
  t->n = n;
  t->sign = sign;
  t->dtype = dtype;
  t->st.n = n;
  t->bluestein = factorize(n, &t->st);
  if (t->bluestein) {
    t->m = smooth_above(2 * n - 1);
    t->st.n = t->m;
    if (factorize(t->m, &t->st)) return LOOM_ERROR_INTERNAL;
  } else {
    t->m = n;
  }
  t->st.sign = t->bluestein ? -1 : (int32_t)sign;
  int64_t off = align64((int64_t)sizeof *t);
  t->st.tw_off = off;
  off = align64(off + stockham_bytes(&t->st, real));
  if (t->bluestein) {
    t->chirp_off = off;
    off = align64(off + n * 2 * real);
    t->kernel_off = off;
    off = align64(off + t->m * 2 * real);
    t->scratch_off = off;
    off = align64(off + t->m * 4 * real);
  }
  if (t->half) {
    t->rtw_off = off;
    off = align64(off + (n + 1) * 2 * real);
  }
  t->bytes = off;
  return LOOM_OK;
}

int loom_kernel_fft_plan(const loom_kernel_args *args, void *out_plan, uint64_t size) {
  if (size != sizeof(loom_fft_plan) || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_fft_table t;
  const int rc = loom_fft_layout(args->scalars[0].i, args->scalars[1].i,
                                 (int32_t)args->scalars[2].i,
                                 args->num_scalars > 3 && args->scalars[3].i, &t);
  if (rc) return rc;
  loom_fft_plan *p = out_plan;
  p->table_bytes = t.bytes;
  p->work = 2 * (t.m + 1);
  p->bluestein = t.bluestein;
  p->m = t.m;
  return LOOM_OK;
}

/* exp(sign 2 pi i j / n) for 0 <= j < n, with the symmetries exact. */
static void root(int64_t j, int64_t n, int64_t sign, double *re, double *im) {
  const double a = 2.0 * M_PI * (double)j / (double)n;
  *re = cos(a);
  *im = (double)sign * sin(a);
  if (4 * j == n || 4 * j == 3 * n) *re = 0.0;
  if (2 * j == n) *im = 0.0;
}

static void put(char *table, int32_t dtype, int64_t at, double re, double im) {
  if (dtype == LOOM_FLOAT32) {
    float *p = (float *)table + 2 * at;
    p[0] = (float)re;
    p[1] = (float)im;
  } else {
    double *p = (double *)table + 2 * at;
    p[0] = re;
    p[1] = im;
  }
}

/* The twiddles of each stage: w^(q k), w = exp(sign 2 pi i / len), for
 * q < len / p and 1 <= k < p; then the radix's roots for odd radices. */
static void fill_stockham(const loom_fft_stockham *st, int64_t sign, int32_t dtype, char *table) {
  const int64_t real = dtype == LOOM_FLOAT32 ? 4 : 8;
  char *base = table + st->tw_off;
  int64_t at = 0, len = st->n;
  for (int32_t f = 0; f < st->stages; ++f) {
    const int64_t p = st->radix[f], m = len / p;
    for (int64_t q = 0; q < m; ++q)
      for (int64_t k = 1; k < p; ++k) {
        double re, im;
        root(q * k % len, len, sign, &re, &im);
        put(base, dtype, at++, re, im);
      }
    if (p != 2 && p != 4 && p != 8)
      for (int64_t k = 0; k < p; ++k) {
        double re, im;
        root(k, p, sign, &re, &im);
        put(base, dtype, at++, re, im);
      }
    len = m;
  }
  (void)real;
}

int loom_kernel_fft_init(const loom_kernel_args *args, int64_t begin, int64_t end) {
  (void)end;
  if (begin != 0) return LOOM_OK;
  if (args->num_tensors < 1 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_fft_table t;
  const int rc = loom_fft_layout(args->scalars[0].i, args->scalars[1].i,
                                 (int32_t)args->scalars[2].i,
                                 args->num_scalars > 3 && args->scalars[3].i, &t);
  if (rc) return rc;
  const loom_tensor *tab = &args->tensors[0];
  if (tab->dtype != LOOM_UINT8 || loom_tensor_numel(tab) < t.bytes ||
      ((uintptr_t)tab->data & 63))
    return LOOM_ERROR_INVALID_ARGUMENT;
  char *table = tab->data;
  memcpy(table, &t, sizeof t);
  /* Bluestein's inner transforms are forward ones whatever the sign. */
  fill_stockham(&t.st, t.st.sign, t.dtype, table);
  for (int64_t k = 0; t.half && k <= t.n; ++k) {
    double re, im;
    root(k, t.real_n, t.sign, &re, &im);
    put(table + t.rtw_off, t.dtype, k, re, im);
  }
  if (!t.bluestein) return LOOM_OK;
  const int64_t n = t.n, m = t.m;
  for (int64_t j = 0; j < n; ++j) {
    double re, im;
    /* j^2 mod 2n: the chirp exp(sign i pi j^2 / n) without large angles. */
    root((j * j) % (2 * n), 2 * n, t.sign, &re, &im);
    put(table + t.chirp_off, t.dtype, j, re, im);
  }
  /* b[j] = conj(c[j]) for |j| < n (indices mod m), zero elsewhere; its
   * transform, divided by m, is the convolution's kernel. */
  if (t.dtype == LOOM_FLOAT32) {
    float *x = (float *)(table + t.scratch_off), *y = x + 2 * m;
    const float *c = (const float *)(table + t.chirp_off);
    memset(x, 0, (size_t)m * 2 * sizeof *x);
    for (int64_t j = 0; j < n; ++j) {
      x[2 * j] = c[2 * j];
      x[2 * j + 1] = -c[2 * j + 1];
      if (j) {
        x[2 * (m - j)] = c[2 * j];
        x[2 * (m - j) + 1] = -c[2 * j + 1];
      }
    }
    const float *r = loom_fft_stockham_f32(&t.st, table, x, y, 1);
    float *k = (float *)(table + t.kernel_off);
    for (int64_t j = 0; j < 2 * m; ++j) k[j] = (float)((double)r[j] / (double)m);
  } else {
    double *x = (double *)(table + t.scratch_off), *y = x + 2 * m;
    const double *c = (const double *)(table + t.chirp_off);
    memset(x, 0, (size_t)m * 2 * sizeof *x);
    for (int64_t j = 0; j < n; ++j) {
      x[2 * j] = c[2 * j];
      x[2 * j + 1] = -c[2 * j + 1];
      if (j) {
        x[2 * (m - j)] = c[2 * j];
        x[2 * (m - j) + 1] = -c[2 * j + 1];
      }
    }
    const double *r = loom_fft_stockham_f64(&t.st, table, x, y, 1);
    double *k = (double *)(table + t.kernel_off);
    for (int64_t j = 0; j < 2 * m; ++j) k[j] = r[j] / (double)m;
  }
  return LOOM_OK;
}

int loom_kernel_fft_twiddles(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 1 || args->num_scalars < 3) return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t n1 = args->scalars[0].i, n2 = args->scalars[1].i, sign = args->scalars[2].i;
  const loom_tensor *tab = &args->tensors[0];
  if (n1 < 1 || n2 < 1 || n1 > LOOM_FFT_MAX_N / n2 || (sign != 1 && sign != -1) ||
      (tab->dtype != LOOM_FLOAT32 && tab->dtype != LOOM_FLOAT64) || tab->rank != 1 ||
      tab->strides[0] != 1 || tab->sizes[0] < loom_fft_twiddles_numel(n1, n2) || begin < 0 ||
      end > n1)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t total = n1 * n2, G = LOOM_FFT_TWIDDLE_GROUP;
  for (int64_t k = begin; k < end; ++k)
    for (int64_t i = 0; i < n2; ++i) {
      double re, im;
      root(k * i % total, total, sign, &re, &im);
      const int64_t at = ((i / G) * n1 + k) * 2 * G + i % G;
      if (tab->dtype == LOOM_FLOAT32) {
        ((float *)tab->data)[at] = (float)re;
        ((float *)tab->data)[at + G] = (float)im;
      } else {
        ((double *)tab->data)[at] = re;
        ((double *)tab->data)[at + G] = im;
      }
    }
  return LOOM_OK;
}
