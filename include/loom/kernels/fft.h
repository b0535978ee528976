/* loom/kernels/fft.h — the FFT kernels' names and argument contract:
 * one-dimensional discrete Fourier transforms of every row of a strided
 * tensor (the last dim of the descriptors; the other dims are the batch),
 * complex-to-complex, real-to-complex (the half spectrum) and
 * complex-to-real, in float32 / complex64 and float64 / complex128. A
 * transform of several dims is one launch per dim.
 *
 * X[k] = scale * sum_j x[j] exp(sign * 2 pi i j k / n), sign -1 forward,
 * +1 backward (unnormalised unless scale says so).
 *
 * A transform of length n runs from a table that depends only on
 * (n, sign, dtype): its twiddles (mixed radix 4, 2, 3, 5, 7 and other small
 * factors, Stockham order, so no bit reversal) or, when n has a prime factor
 * above LOOM_FFT_MAX_RADIX, Bluestein's chirp with its convolution length
 * m >= 2n - 1 (a product of 2, 3, 5). The caller caches tables.
 *
 * "fft.plan" (planner): scalars[0].i n >= 1, [1].i sign (-1 or +1),
 *   [2].i the real dtype (LOOM_FLOAT32 or LOOM_FLOAT64), [3].i (optional)
 *   1 for a table of real signals (r2c, c2r: an even n then runs as a
 *   complex transform of n / 2), else 0 (c2c, which needs such a table);
 *   no tensors. Fills a loom_fft_plan.
 * "fft.init": tensors[0] the table: uint8, contiguous, table_bytes long,
 *   64-byte aligned; scalars as "fft.plan". Range 1 (one call fills it).
 * "fft.c2c", "fft.r2c", "fft.c2r": tensors[0] out, [1] in, [2] the table of
 *   (n, sign, dtype), [3] workspace: the complex dtype, contiguous,
 *   ceil(range / grain) * work elements. out and in have the same rank and
 *   the same batch sizes (all dims but the last), any strides (in may be
 *   out itself: each row is read whole before it is written).
 *   c2c: in and out complex, last dims n.
 *   r2c: in real with last dim n; out complex, its last dim h <= n/2 + 1
 *        (the first h outputs; sign as given).
 *   c2r: in complex, last dim h (n/2 + 1: the half spectrum of a Hermitian
 *        signal, of which the imaginary parts at 0 and n/2 are ignored); out
 *        real, last dim n.
 *   scalars[0].i n, [1].i sign, [2].f scale, [3].i block (optional, 1 to
 *   LOOM_FFT_MAX_BLOCK): up to `block` neighbouring rows of the innermost
 *   batch dim of one chunk are transformed together (interleaved, so the
 *   stages vectorize across them; a row's roundings may differ between a
 *   block and a row alone). The range is the number of rows (the product
 *   of the batch sizes); the chunk k uses the workspace's elements
 *   [k * block * work, (k + 1) * block * work). Blocks depend only on the
 *   shapes, grain and block, so results never depend on the thread
 *   count.
 *   c2c only: tensors[4] (optional; absent or NULL data: none) the
 *   four-step twiddles of (n, r), r the size of the innermost batch dim:
 *   output k of a row at index i of that dim is multiplied by
 *   exp(sign 2 pi i k i / (n r)) before the scale.
 *
 * A long transform of length n = n1 n2 is the four-step decomposition of
 * two such launches: with j = n2 j1 + j2 and k = k1 + n1 k2, the first
 * transforms the n2 columns (length n1 over j1, innermost batch dim j2)
 * with the twiddles of (n1, n2) into a buffer t[k1][j2], the second the n1
 * rows of t (length n2 over j2, innermost batch dim k1) into X[k1 + n1 k2].
 * Both split their rows over the range as any launch, so the result never
 * depends on the thread count.
 *
 * A 2-d r2c transform of the last two dims (n2 rows of n reals; h <= n/2 + 1
 * outputs kept) runs as two launches through panels, so that the column
 * pass reads no strided columns: a panel holds the columns [c P, c P + w)
 * (w = min(P, h - c P), P <= LOOM_FFT_MAX_BLOCK) of one 2-d signal laid
 * out as the column transforms' buffer: element i of column c P + l has
 * its real part 2 w i + l reals from the panel's start and its imaginary
 * part w further on. Panel p = u ceil(h / P) + c (u the index of the 2-d
 * signal) starts 2 p P cap reals into the buffer; cap >= n2 and >= the
 * column table's m.
 * "fft.r2c_panels": tensors[0] the panels (the complex dtype, rank 1, unit
 *   stride), [1] in (real, rank >= 2, last dim n, dim -2 of size n2, the
 *   dims before: the 2-d signals), [2] the table of (n, sign, dtype) for
 *   real signals, [3] workspace as "fft.r2c". scalars[0].i n, [1].i sign,
 *   [2].f scale, [3].i block (as "fft.r2c"), [4].i h, [5].i P, [6].i cap.
 *   Range: the rows of in, as "fft.r2c"; fills every panel.
 * "fft.c2c_panels": tensors[0] out (complex, rank >= 2, last dim n2: the
 *   columns' view of the result, dim -2 of size h), [1] the panels, [2] the
 *   table of (n2, sign, dtype), [3] workspace: the complex dtype,
 *   ceil(range / grain) * P * (m + 1) elements. scalars[0].i n2, [1].i sign,
 *   [2].f scale, [3].i P, [4].i cap. Range: the number of panels; the
 *   column transforms of each panel (computed in the panel itself, which
 *   it overwrites) are written to out. A panel's columns are transformed
 *   together as a block of "fft.c2c" is, whatever the chunking.
 *
 * "fft.twiddles": tensors[0] the four-step twiddles' table of (n1, n2):
 *   the real dtype, contiguous, loom_fft_twiddles_numel(n1, n2) elements;
 *   scalars[0].i n1, [1].i n2, [2].i sign. exp(sign 2 pi i k i / (n1 n2))
 *   for k < n1, i < n2 has its real part at [(g n1 + k) 2G + i % G] with
 *   g = i / G (G = LOOM_FFT_TWIDDLE_GROUP) and its imaginary part G
 *   further on. Range n1: the call for [begin, end) fills k in it. */
#ifndef LOOM_KERNELS_FFT_CONTRACT_H
#define LOOM_KERNELS_FFT_CONTRACT_H

#include <stdint.h>

/* Prime factors up to this run as radix stages; a larger one makes the
 * transform a Bluestein convolution. */
#define LOOM_FFT_MAX_RADIX 31

/* Rows one call transforms together, at most. */
#define LOOM_FFT_MAX_BLOCK 16

/* Lengths up to this are supported (the chirp's index squares fit int64). */
#define LOOM_FFT_MAX_N ((int64_t)1 << 30)

/* Indices of the four-step twiddles' table stored together (see
 * "fft.twiddles"). */
#define LOOM_FFT_TWIDDLE_GROUP 16

/* Reals in the four-step twiddles' table of (n1, n2). */
static inline int64_t loom_fft_twiddles_numel(int64_t n1, int64_t n2) {
  return (n2 + LOOM_FFT_TWIDDLE_GROUP - 1) / LOOM_FFT_TWIDDLE_GROUP * n1 * 2 *
         LOOM_FFT_TWIDDLE_GROUP;
}

typedef struct loom_fft_plan {
  int64_t table_bytes; /* size of the table "fft.init" fills */
  int64_t work;        /* workspace per chunk and row of a block, in complex elements */
  int64_t bluestein;   /* 1 when n runs as a Bluestein convolution */
  int64_t m;           /* the convolution length (bluestein), else n */
} loom_fft_plan;

#endif /* LOOM_KERNELS_FFT_CONTRACT_H */
