// The boxed CPU fallback for ops without a native loom kernel, and the
// record of which ops took it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_loom {

enum class FallbackMode { kWarn, kSilent, kError };

// LOOM_FALLBACK=warn (default: one warning per op), silent, or error.
FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);

// (op name, times it ran on the CPU) for every op that fell back so far.
std::vector<std::pair<std::string, int64_t>> fallback_record();
void clear_fallback_record();

}  // namespace torch_loom
