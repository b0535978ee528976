/* loom/features.h — instruction-set feature bits.
 *
 * Shared by the device properties (loom_device_props.features), the CPU
 * detection in base/ and the kernels' ISA choices; a header of its own so
 * that base/ and kernels/ need not see the runtime's API to name them. */
#ifndef LOOM_FEATURES_H
#define LOOM_FEATURES_H

enum {
  LOOM_FEATURE_AVX2 = 1u << 0,
  LOOM_FEATURE_AVX512F = 1u << 1,
  LOOM_FEATURE_AVX512BF16 = 1u << 2,
  LOOM_FEATURE_AMX_BF16 = 1u << 3,
  LOOM_FEATURE_AVX512FP16 = 1u << 4,
  LOOM_FEATURE_FMA = 1u << 5,
};

#endif /* LOOM_FEATURES_H */
