/* kernels/fft/fft.h — the FFT family inside the library: the table's
 * layout, the planner and the per-ISA row transforms. The contract is
 * loom/kernels/fft.h. */
#ifndef LOOM_KERNELS_FFT_H
#define LOOM_KERNELS_FFT_H

#include <stdint.h>

#include "loom/kernel_abi.h"
#include "loom/kernels/fft.h"

#define LOOM_FFT_MAX_STAGES 64

/* The loops a pragma may declare free of dependences between iterations
 * (the compiler cannot tell the planar buffers' halves apart). */
#if defined(__GNUC__) && !defined(__clang__)
#define FFT_IVDEP _Pragma("GCC ivdep")
#else
#define FFT_IVDEP
#endif

/* A Stockham transform of length n, forward or backward as its twiddles
 * were made: stage f has radix radix[f]; its twiddles (and, for a radix
 * other than 2 and 4, the radix's own roots of unity) follow one another
 * from byte tw_off of the table. */
typedef struct loom_fft_stockham {
  int64_t n;
  int64_t tw_off;
  int32_t sign; /* of its twiddles */
  int32_t stages;
  int32_t radix[LOOM_FFT_MAX_STAGES];
} loom_fft_stockham;

/* The table's head, at byte 0: a complex transform of length n. For
 * Bluestein: the chirp c[j] = exp(sign i pi j^2 / n) (n complex at
 * chirp_off), the transform of the convolution's kernel divided by m (m
 * complex at kernel_off) and a forward Stockham plan `st` of length m;
 * otherwise `st` is the transform itself. A table for real signals of even
 * length real_n (`half`) is that of n = real_n / 2, the pairs of reals as
 * complex numbers, with the real_n / 2 + 1 roots exp(sign 2 pi i k / real_n)
 * that split and join the half spectra at rtw_off. */
typedef struct loom_fft_table {
  int64_t n, sign, dtype, bluestein, m;
  int64_t chirp_off, kernel_off, scratch_off, bytes;
  int64_t half, real_n, rtw_off;
  loom_fft_stockham st;
} loom_fft_table;

/* The layout of the table of (n, sign, dtype, real) in *t (offsets and
 * sizes, no data); 0 or a loom_status. */
int loom_fft_layout(int64_t n, int64_t sign, int32_t dtype, int real, loom_fft_table *t);

/* Row transforms of one ISA: `t` is the table, `row` and `out` as the
 * kernels' descriptors, rows [begin, end), `work` the chunk's workspace. */
typedef struct loom_fft_rows {
  int kind; /* 0 c2c, 1 r2c, 2 c2r */
  const loom_fft_table *t;
  const loom_tensor *out, *in;
  double scale;
  void *work;    /* block * 4 (m + 1) reals: two buffers of block rows */
  int64_t block; /* rows transformed together, at most */
  /* c2c: the four-step twiddles (NULL: none, else as "fft.twiddles" fills
   * them for (n, run)): output k of the row at index i of the innermost
   * batch dim (of size run) is multiplied by exp(sign 2 pi i k i / (n run)). */
  const void *twiddle;
  /* Panels ("fft.r2c_panels" writes them, "fft.c2c_panels" reads them):
   * NULL, or the buffer of panels of width pw and capacity cap; h the
   * outputs per row that r2c keeps. */
  void *panels;
  int64_t pw, cap, h;
} loom_fft_rows;

int loom_fft_rows_f32(const loom_fft_rows *r, int64_t begin, int64_t end);
/* The column transforms of panels [begin, end) ("fft.c2c_panels"). */
int loom_fft_panels_f32(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_panels_f64(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_panels_f32_avx512(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_panels_f64_avx512(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_rows_f64(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_rows_f32_avx512(const loom_fft_rows *r, int64_t begin, int64_t end);
int loom_fft_rows_f64_avx512(const loom_fft_rows *r, int64_t begin, int64_t end);

/* The Stockham transforms of `batch` signals side by side in `x` (element
 * j of signal q at x[2 batch j + q], its imaginary part batch reals on;
 * batch 1: interleaved complex numbers) using `y` as the other buffer;
 * returns which of the two holds the result. Table init uses it for
 * Bluestein's kernel. */
double *loom_fft_stockham_f64(const loom_fft_stockham *st, const char *table, double *x,
                              double *y, int64_t batch);
float *loom_fft_stockham_f32(const loom_fft_stockham *st, const char *table, float *x,
                             float *y, int64_t batch);
double *loom_fft_stockham_f64_avx512(const loom_fft_stockham *st, const char *table, double *x,
                                     double *y, int64_t batch);
float *loom_fft_stockham_f32_avx512(const loom_fft_stockham *st, const char *table, float *x,
                                    float *y, int64_t batch);

int loom_kernel_fft_plan(const loom_kernel_args *args, void *out_plan, uint64_t size);
int loom_kernel_fft_init(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_c2c(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_r2c(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_c2r(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_twiddles(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_r2c_panels(const loom_kernel_args *args, int64_t begin, int64_t end);
int loom_kernel_fft_c2c_panels(const loom_kernel_args *args, int64_t begin, int64_t end);

#endif /* LOOM_KERNELS_FFT_H */
