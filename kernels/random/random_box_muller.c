/* The Box-Muller transform of uniform pairs for the normal draws
 * (random.c): radius sqrt(-2 ln u) and the angle's sine and cosine, in
 * double arithmetic that needs no library call and vectorizes (within
 * 1e-11). Built as is for the baseline ISA and included by
 * random_box_muller_avx512.c with LOOM_BM_ISA defined; both builds round
 * alike. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "kernels/pointwise/pointwise_dexp.h"
#include "kernels/pointwise/pointwise_trig.h"
#include "kernels/random/random.h"

#ifdef LOOM_BM_ISA
#define BM_CAT2(a, b) a##b
#define BM_CAT(a, b) BM_CAT2(a, b)
#define BM_NAME(base) BM_CAT(base, LOOM_BM_ISA)
#else
#define BM_NAME(base) base
#endif

void BM_NAME(loom_box_muller)(const double *u, const double *angle, int64_t n, double *radius,
                              double *sine, double *cosine) {
  for (int64_t j = 0; j < n; ++j) {
    double s, c;
    const int64_t q = loom_trig_reduce(angle[j], 0, &s, &c);
    radius[j] = sqrt(-2.0 * loom_dlog_d(u[j]));
    /* sin x and cos x of x = k pi/2 + r by k mod 4 */
    const double sv = (q & 1) ? c : s, cv = (q & 1) ? s : c;
    sine[j] = (q & 2) ? -sv : sv;
    cosine[j] = ((q + 1) & 2) ? -cv : cv;
  }
}
