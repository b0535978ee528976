/* kernels/pointwise/igamma.h — the regularized incomplete gamma functions
 * P(a, x) (igamma, torch.special.gammainc) and Q(a, x) = 1 - P (igammac,
 * gammaincc), in double for every floating dtype.
 *
 * Which expansion computes a value follows the regions PyTorch's CPU uses
 * (after Cephes and SciPy), so that both lose precision in the same few
 * places if anywhere:
 *  - P by its power series (DLMF 8.11.4) where x < a or x <= 1;
 *  - Q by the Legendre continued fraction (DLMF 8.9.2, modified Lentz)
 *    where x > 1.1 and x >= a;
 *  - Q for x <= 1.1 by DLMF 8.7.3 (no cancellation for small a);
 *  - for a > 1e6 both by the leading term of Temme's uniform expansion
 *    (DLMF 8.12.3/8.12.4): erfc(±eta sqrt(a/2)) / 2 and its first
 *    correction, whose error O(1/a) of the prefactor is below double's
 *    rounding there.
 * The prefactor x^a e^-x / Gamma(a) is taken through Stirling's series for
 * a > 10, so that a log x - x - lgamma(a) never cancels. */
#ifndef LOOM_KERNELS_POINTWISE_IGAMMA_H
#define LOOM_KERNELS_POINTWISE_IGAMMA_H

#include <math.h>

#define IGAM_EPS 1.11022302462515654042e-16
#define IGAM_MAXITER 100000
#define IGAM_TINY 1e-300
#define IGAM_LARGE_A 1e6

/* log(x^a e^-x / Gamma(a)), x > 0, a > 0. */
static inline double igam_log_prefactor(double a, double x) {
  if (a <= 10.0) return a * log(x) - x - lgamma(a);
  /* lgamma(a) = (a - 1/2) log a - a + log(2 pi)/2 + s(a), s Stirling's
   * series; with t = (x - a)/a: a log x - x = a log a - a + a (log1p(t) - t). */
  const double t = (x - a) / a, r = 1.0 / a, r2 = r * r;
  const double s =
      r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680 -
                                                                 r2 * (1.0 / 1188 - r2 * 691.0 / 360360)))));
  return a * (log1p(t) - t) + 0.5 * log(a / (2.0 * 3.14159265358979323846)) - s;
}

static inline double igam_prefactor(double a, double x) {
  const double l = igam_log_prefactor(a, x);
  return l < -745.2 ? 0.0 : exp(l);
}

/* P by its power series: x^a e^-x / Gamma(a+1) * sum x^n / ((a+1)..(a+n)). */
static inline double igam_series(double a, double x) {
  const double fac = igam_prefactor(a, x);
  if (fac == 0.0) return 0.0;
  double r = a, term = 1.0, sum = 1.0;
  for (int i = 0; i < IGAM_MAXITER; ++i) {
    r += 1.0;
    term *= x / r;
    sum += term;
    if (term <= IGAM_EPS * sum) break;
  }
  return sum * fac / a;
}

/* Q by the continued fraction x^a e^-x / Gamma(a) * 1/(x+1-a- 1(1-a)/(x+3-a- ...)). */
static inline double igamc_fraction(double a, double x) {
  const double fac = igam_prefactor(a, x);
  if (fac == 0.0) return 0.0;
  double b = x + 1.0 - a, c = 1.0 / IGAM_TINY, d = 1.0 / b, h = d;
  for (int i = 1; i < IGAM_MAXITER; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (fabs(d) < IGAM_TINY) d = IGAM_TINY;
    c = b + an / c;
    if (fabs(c) < IGAM_TINY) c = IGAM_TINY;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (fabs(del - 1.0) <= IGAM_EPS) break;
  }
  return fac * h;
}

/* Q for small x: 1 - x^a/Gamma(a+1) - x^a/Gamma(a) sum_{n>=1} (-x)^n / (n! (a+n)). */
static inline double igamc_small_x(double a, double x) {
  double fac = 1.0, sum = 0.0;
  for (int n = 1; n < 2000; ++n) {
    fac *= -x / n;
    const double term = fac / (a + n);
    sum += term;
    if (fabs(term) <= IGAM_EPS * fabs(sum)) break;
  }
  const double logx = log(x);
  return -expm1(a * logx - lgamma(1.0 + a)) - exp(a * logx - lgamma(a)) * sum;
}

/* Temme's expansion to its first correction: returns P (or Q when `upper`). */
static inline double igam_uniform(double a, double x, int upper) {
  const double lam = x / a, dl = lam - 1.0;
  const double mu = dl - log1p(dl); /* lambda - 1 - log(lambda) >= 0 */
  const double eta = copysign(sqrt(2.0 * mu), dl);
  double c0; /* 1/(lambda - 1) - 1/eta, by its series where that cancels */
  if (fabs(eta) < 1e-3)
    c0 = -1.0 / 3 + eta * (1.0 / 12 + eta * (-2.0 / 135 + eta * (1.0 / 864)));
  else
    c0 = 1.0 / dl - 1.0 / eta;
  const double r = exp(-a * mu) / sqrt(2.0 * 3.14159265358979323846 * a) * c0;
  const double z = eta * sqrt(a / 2.0);
  return upper ? 0.5 * erfc(z) + r : 0.5 * erfc(-z) - r;
}

static inline double loom_igammac(double a, double x);

static inline double loom_igamma(double a, double x) {
  if (isnan(a) || isnan(x)) return NAN;
  if (a < 0.0 || x < 0.0) return NAN;
  if (a == 0.0) return x > 0.0 ? 1.0 : NAN;
  if (x == 0.0) return 0.0;
  if (isinf(a)) return isinf(x) ? NAN : 0.0;
  if (isinf(x)) return 1.0;
  if (a > IGAM_LARGE_A) return igam_uniform(a, x, 0);
  if (x > 1.0 && x > a) return 1.0 - loom_igammac(a, x);
  return igam_series(a, x);
}

static inline double loom_igammac(double a, double x) {
  if (isnan(a) || isnan(x)) return NAN;
  if (a < 0.0 || x < 0.0) return NAN;
  if (a == 0.0) return x > 0.0 ? 0.0 : NAN;
  if (x == 0.0) return 1.0;
  if (isinf(a)) return isinf(x) ? NAN : 1.0;
  if (isinf(x)) return 0.0;
  if (a > IGAM_LARGE_A) return igam_uniform(a, x, 1);
  if (x > 1.1) return x < a ? 1.0 - igam_series(a, x) : igamc_fraction(a, x);
  if (x <= 0.5) return -0.4 / log(x) < a ? 1.0 - igam_series(a, x) : igamc_small_x(a, x);
  return x * 1.1 < a ? 1.0 - igam_series(a, x) : igamc_small_x(a, x);
}

#endif /* LOOM_KERNELS_POINTWISE_IGAMMA_H */
