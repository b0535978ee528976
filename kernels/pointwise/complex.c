/* The complex elementwise kernel (loom/kernels/complex.h): element
 * functions on (re, im) pairs of float or double, over a strided
 * iteration. */
#include <complex.h>
#include <math.h>
#include <stddef.h>

#include "kernels/base/iter.h"
#include "kernels/registry.h"
#include "loom/kernels/complex.h"
#include "loom/status.h"

/* PyTorch's complex division (c10/util/complex.h): scaled by the larger
 * part of the divisor, so neither overflows early; the parts' magnitudes
 * as std::abs gives them (+0 for -0: 1 / (-0 + 0i) is inf + nan i). */
#define CX_DIV(T, ar, ai, br, bi, yr, yi)                           \
  do {                                                              \
    const T abr = (br < 0 ? -br : br) + (T)0, abi = (bi < 0 ? -bi : bi) + (T)0; \
    if (abr >= abi) {                                               \
      if (abr == 0 && abi == 0) {                                   \
        yr = ar / abr;                                              \
        yi = ai / abi;                                              \
      } else {                                                      \
        const T rat = bi / br, scl = (T)1.0 / (br + bi * rat);      \
        yr = (ar + ai * rat) * scl;                                 \
        yi = (ai - ar * rat) * scl;                                 \
      }                                                             \
    } else {                                                        \
      const T rat = br / bi, scl = (T)1.0 / (bi + br * rat);        \
      yr = (ar * rat + ai) * scl;                                   \
      yi = (ai * rat - ar) * scl;                                   \
    }                                                               \
  } while (0)

/* One run of n elements; strides in bytes; b NULL: the constant (cr, ci). */
/* The elementary functions of one element, as std::complex computes them
 * (libstdc++ calls C99's cexp, clog, ... for float and double). */
#define CX_MATH(NAME, T, CT, MAKE, CEXP, CLOG, CSQRT, CSIN, CCOS, CTANH, CREAL, CIMAG, CSINH, \
                CCOSH, CTAN, CASIN, CACOS, CATAN, CASINH, CACOSH, CATANH)                  \
  static void NAME(int op, T ar, T ai, T *py) {                                       \
    T yr, yi;                                                                         \
    if (op == LOOM_COMPLEX_RECIPROCAL) {                                              \
      CX_DIV(T, (T)1, (T)0, ar, ai, yr, yi);                                          \
    } else if (op == LOOM_COMPLEX_SIGMOID) {                                          \
      const CT e = CEXP(MAKE(-ar, -ai));                                              \
      const T dr = (T)1 + CREAL(e), di = CIMAG(e);                                    \
      CX_DIV(T, (T)1, (T)0, dr, di, yr, yi);                                          \
    } else if (op == LOOM_COMPLEX_RSQRT) {                                            \
      const CT r = CSQRT(MAKE(ar, ai));                                               \
      const T dr = CREAL(r), di = CIMAG(r);                                           \
      CX_DIV(T, (T)1, (T)0, dr, di, yr, yi);                                          \
    } else {                                                                          \
      const CT z = MAKE(ar, ai);                                                      \
      CT w;                                                                           \
      switch (op) {                                                                   \
        case LOOM_COMPLEX_EXP: w = CEXP(z); break;                                    \
        case LOOM_COMPLEX_LOG: w = CLOG(z); break;                                    \
        case LOOM_COMPLEX_SQRT: w = CSQRT(z); break;                                  \
        case LOOM_COMPLEX_SIN: w = CSIN(z); break;                                    \
        case LOOM_COMPLEX_COS: w = CCOS(z); break;                                    \
        case LOOM_COMPLEX_SINH: w = CSINH(z); break;                                  \
        case LOOM_COMPLEX_COSH: w = CCOSH(z); break;                                  \
        case LOOM_COMPLEX_TAN: w = CTAN(z); break;                                    \
        case LOOM_COMPLEX_ASIN: w = CASIN(z); break;                                  \
        case LOOM_COMPLEX_ACOS: w = CACOS(z); break;                                  \
        case LOOM_COMPLEX_ATAN: w = CATAN(z); break;                                  \
        case LOOM_COMPLEX_ASINH: w = CASINH(z); break;                                \
        case LOOM_COMPLEX_ACOSH: w = CACOSH(z); break;                                \
        case LOOM_COMPLEX_ATANH: w = CATANH(z); break;                                \
        default: w = CTANH(z); break;                                                 \
      }                                                                               \
      yr = CREAL(w);                                                                  \
      yi = CIMAG(w);                                                                  \
    }                                                                                 \
    py[0] = yr;                                                                       \
    py[1] = yi;                                                                       \
  }

CX_MATH(math_f32, float, float complex, CMPLXF, cexpf, clogf, csqrtf, csinf, ccosf, ctanhf,
        crealf, cimagf, csinhf, ccoshf, ctanf, casinf, cacosf, catanf, casinhf, cacoshf, catanhf)
CX_MATH(math_f64, double, double complex, CMPLX, cexp, clog, csqrt, csin, ccos, ctanh, creal,
        cimag, csinh, ccosh, ctan, casin, cacos, catan, casinh, cacosh, catanh)

#define CX_RUN(NAME, T, HYPOT, ATAN2, COS, SIN, MATH, POW)                                    \
  static void NAME(int op, char *y, int64_t ys, const char *a, int64_t as, const char *b, \
                   int64_t bs, int64_t n, T cr, T ci, T alr, T ali) {                   \
    for (int64_t i = 0; i < n; ++i, y += ys, a += as, b = b ? b + bs : b) {              \
      const T *pa = (const T *)a, *pb = b ? (const T *)b : NULL;                         \
      T *py = (T *)y;                                                                    \
      switch (op) {                                                                      \
        case LOOM_COMPLEX_ADD:                                                           \
        case LOOM_COMPLEX_SUB:                                                           \
        case LOOM_COMPLEX_MUL:                                                           \
        case LOOM_COMPLEX_DIV: {                                                         \
          const T ar = pa[0], ai = pa[1];                                                \
          T br = pb ? pb[0] : cr, bi = pb ? pb[1] : ci;                                  \
          if (op == LOOM_COMPLEX_ADD || op == LOOM_COMPLEX_SUB) {                        \
            const T sr = br * alr - bi * ali, si = br * ali + bi * alr;                  \
            py[0] = op == LOOM_COMPLEX_ADD ? ar + sr : ar - sr;                          \
            py[1] = op == LOOM_COMPLEX_ADD ? ai + si : ai - si;                          \
          } else if (op == LOOM_COMPLEX_MUL) {                                           \
            const T yr = ar * br - ai * bi, yi = ar * bi + ai * br;                      \
            py[0] = yr;                                                                  \
            py[1] = yi;                                                                  \
          } else {                                                                       \
            T yr, yi;                                                                    \
            CX_DIV(T, ar, ai, br, bi, yr, yi);                                           \
            py[0] = yr;                                                                  \
            py[1] = yi;                                                                  \
          }                                                                              \
          break;                                                                         \
        }                                                                                \
        case LOOM_COMPLEX_NEG: {                                                         \
          const T ar = pa[0], ai = pa[1];                                                \
          py[0] = -ar;                                                                   \
          py[1] = -ai;                                                                   \
          break;                                                                         \
        }                                                                                \
        case LOOM_COMPLEX_CONJ: {                                                        \
          const T ar = pa[0], ai = pa[1];                                                \
          py[0] = ar;                                                                    \
          py[1] = -ai;                                                                   \
          break;                                                                         \
        }                                                                                \
        case LOOM_COMPLEX_ABS: py[0] = HYPOT(pa[0], pa[1]); break;                       \
        case LOOM_COMPLEX_ANGLE: py[0] = ATAN2(pa[1], pa[0]); break;                     \
        case LOOM_COMPLEX_POLAR: {                                                       \
          const T r = pa[0], t = pb[0];                                                  \
          py[0] = r * COS(t);                                                            \
          py[1] = r * SIN(t);                                                            \
          break;                                                                         \
        }                                                                                \
        case LOOM_COMPLEX_EXP:                                                           \
        case LOOM_COMPLEX_LOG:                                                           \
        case LOOM_COMPLEX_SQRT:                                                          \
        case LOOM_COMPLEX_RECIPROCAL:                                                    \
        case LOOM_COMPLEX_SIN:                                                           \
        case LOOM_COMPLEX_COS:                                                           \
        case LOOM_COMPLEX_TANH:                                                          \
        case LOOM_COMPLEX_SIGMOID:                                                       \
        case LOOM_COMPLEX_SINH:                                                          \
        case LOOM_COMPLEX_COSH:                                                          \
        case LOOM_COMPLEX_TAN:                                                           \
        case LOOM_COMPLEX_ASIN:                                                          \
        case LOOM_COMPLEX_ACOS:                                                          \
        case LOOM_COMPLEX_ATAN:                                                          \
        case LOOM_COMPLEX_ASINH:                                                         \
        case LOOM_COMPLEX_ACOSH:                                                         \
        case LOOM_COMPLEX_ATANH:                                                         \
        case LOOM_COMPLEX_RSQRT: MATH(op, pa[0], pa[1], py); break;                      \
        case LOOM_COMPLEX_POW:                                                           \
          POW(pa[0], pa[1], pb ? pb[0] : cr, pb ? pb[1] : ci, py);                       \
          break;                                                                         \
        case LOOM_COMPLEX_SGN: {                                                         \
          const T ar = pa[0], ai = pa[1], m = HYPOT(ar, ai);                             \
          const int zero = ar == 0 && ai == 0;                                           \
          py[0] = zero ? (T)0 : ar / m;                                                  \
          py[1] = zero ? (T)0 : ai / m;                                                  \
          break;                                                                         \
        }                                                                                \
        default: {                                                                       \
          const T re = pa[0], im = pb[0];                                                \
          py[0] = re;                                                                    \
          py[1] = im;                                                                    \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  }

/* a ** b of one element as std::pow of two std::complex (libstdc++ calls
 * C99's cpow for float and double). */
static void pow_f32(float ar, float ai, float br, float bi, float *py) {
  const float complex w = cpowf(CMPLXF(ar, ai), CMPLXF(br, bi));
  py[0] = crealf(w);
  py[1] = cimagf(w);
}

static void pow_f64(double ar, double ai, double br, double bi, double *py) {
  const double complex w = cpow(CMPLX(ar, ai), CMPLX(br, bi));
  py[0] = creal(w);
  py[1] = cimag(w);
}

CX_RUN(run_f32, float, hypotf, atan2f, cosf, sinf, math_f32, pow_f32)
CX_RUN(run_f64, double, hypot, atan2, cos, sin, math_f64, pow_f64)

/* The real type of the op's complex side. */
static int complex_side(int op, const loom_tensor *out, const loom_tensor *a) {
  return op == LOOM_COMPLEX_ABS || op == LOOM_COMPLEX_ANGLE ? a->dtype : out->dtype;
}

int loom_kernel_complex_apply(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors < 3 || args->num_scalars < 5) return LOOM_ERROR_INVALID_ARGUMENT;
  const int op = (int)args->scalars[0].i;
  if (op < 0 || op >= LOOM_COMPLEX_OP_COUNT) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *out = &args->tensors[0], *a = &args->tensors[1], *b = &args->tensors[2];
  const int cd = complex_side(op, out, a);
  if (cd != LOOM_COMPLEX64 && cd != LOOM_COMPLEX128) return LOOM_ERROR_NOT_SUPPORTED;
  const int real = cd == LOOM_COMPLEX64 ? LOOM_FLOAT32 : LOOM_FLOAT64;
  const int two = op == LOOM_COMPLEX_POLAR || op == LOOM_COMPLEX_MAKE;
  const int binary = op <= LOOM_COMPLEX_DIV || op == LOOM_COMPLEX_POW;
  /* The operands' dtypes as the contract states them. */
  const int want_out = op == LOOM_COMPLEX_ABS || op == LOOM_COMPLEX_ANGLE ? real : cd;
  const int want_a = two ? real : cd;
  if (out->dtype != want_out || a->dtype != want_a) return LOOM_ERROR_INVALID_ARGUMENT;
  if (two && (!b->data || b->dtype != real)) return LOOM_ERROR_INVALID_ARGUMENT;
  if (binary && b->data && b->dtype != cd) return LOOM_ERROR_INVALID_ARGUMENT;
  const int with_b = (binary || two) && b->data;
  const loom_tensor *ops[3] = {out, a, b};
  loom_iter it;
  if (loom_iter_init(&it, with_b ? 3 : 2, ops)) return LOOM_ERROR_INVALID_ARGUMENT;
  loom_iter_seek(&it, begin, end - begin);
  const int r = it.rank - 1;
  const int64_t ys = r >= 0 ? it.strides[0][r] : 0, as = r >= 0 ? it.strides[1][r] : 0;
  const int64_t bs = with_b && r >= 0 ? it.strides[2][r] : 0;
  const double cr = args->scalars[1].f, ci = args->scalars[2].f;
  const double alr = args->scalars[3].f, ali = args->scalars[4].f;
  char *p[3];
  int64_t n;
  while ((n = loom_iter_next(&it, p)) > 0) {
    const char *pb = with_b ? p[2] : NULL;
    if (real == LOOM_FLOAT32)
      run_f32(op, p[0], ys, p[1], as, pb, bs, n, (float)cr, (float)ci, (float)alr, (float)ali);
    else
      run_f64(op, p[0], ys, p[1], as, pb, bs, n, cr, ci, alr, ali);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_complex_kernels[] = {
    {"complex.apply", loom_kernel_complex_apply, NULL},
    {NULL, NULL, NULL},
};
