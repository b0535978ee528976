// The profiler's entry points for the rest of the binding (no Kineto
// types: only csrc/profiler/kineto_*.cpp are built with USE_KINETO).
#pragma once

namespace torch_loom::profiler {

// Whether PyTorch's PrivateUse1 profiler registry holds loom's Kineto
// plugin, and whether it has handed it to Kineto yet (it does when Kineto
// starts, at the first profile that asks for PrivateUse1 activities).
struct PluginState {
  bool registered;
  bool forwarded_to_kineto;
};
PluginState plugin_state();

}  // namespace torch_loom::profiler
