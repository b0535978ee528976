/* loom/kernels/scan.h — the scan kernel's name and argument contract:
 * cumulative ops along one dim (cumsum, cumprod, cummax, cummin,
 * logcumsumexp: acc = log(exp(x) + exp(acc)) from acc = -inf, the CPU's
 * log-add-exp of the smaller minus the larger). Every
 * driver provides this name.
 *
 * "scan.rows": tensors[0] = out, tensors[1] = in (same sizes),
 * tensors[2] = int64 indices (cummax/cummin; data NULL otherwise).
 * scalars[0].i op (loom_scan_op), scalars[1].i dim. The range is the number
 * of rows (numel / size(dim)); each row is scanned in order by one call.
 * Floating inputs accumulate in double and integral ones in int64, as the
 * CPU backend does, so results are independent of the chunking. */
#ifndef LOOM_KERNELS_SCAN_CONTRACT_H
#define LOOM_KERNELS_SCAN_CONTRACT_H

typedef enum loom_scan_op {
  LOOM_SCAN_CUMSUM, LOOM_SCAN_CUMPROD, LOOM_SCAN_CUMMAX, LOOM_SCAN_CUMMIN,
  LOOM_SCAN_LOGCUMSUMEXP /* floating dtypes only */,
} loom_scan_op;

#endif /* LOOM_KERNELS_SCAN_CONTRACT_H */
