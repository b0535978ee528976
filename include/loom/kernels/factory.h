/* loom/kernels/factory.h — the factory kernel's name and argument contract:
 * tensors made from a formula of their indices (arange, linspace,
 * logspace, eye) and tril/triu masking. Every driver provides this name.
 *
 * "factory.generate": scalars[0].i op (loom_factory_op); range numel(out),
 * grain LOOM_FACTORY_GRAIN.
 *   ARANGE:   tensors out (1-d); [1] start, [2] step (.f floating out, .i
 *             integral out); out[i] = start + i * step
 *   LINSPACE: tensors out (1-d); [1].f start, [2].f end; filled from both
 *             ends towards the middle, as the CPU backend does
 *   LOGSPACE: as LINSPACE, then [3].f base raised to each value
 *   EYE:      tensors out (2-d); out[i][j] = i == j
 *   TRIL / TRIU: tensors out, self (same sizes, rank >= 2); [1].i diagonal;
 *             keeps self where j - i <= diagonal (tril) / >= (triu), else 0 */
#ifndef LOOM_KERNELS_FACTORY_CONTRACT_H
#define LOOM_KERNELS_FACTORY_CONTRACT_H

typedef enum loom_factory_op {
  LOOM_FACTORY_ARANGE, LOOM_FACTORY_LINSPACE, LOOM_FACTORY_LOGSPACE,
  LOOM_FACTORY_EYE, LOOM_FACTORY_TRIL, LOOM_FACTORY_TRIU,
} loom_factory_op;

#define LOOM_FACTORY_GRAIN 32768

#endif /* LOOM_KERNELS_FACTORY_CONTRACT_H */
