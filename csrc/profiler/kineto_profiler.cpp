// loom's Kineto plugin: `torch.profiler.profile(activities=[CPU,
// PrivateUse1])` gets the device's kernels, fills and copies through it.
// REGISTER_PRIVATEUSE1_PROFILER hands the factory to PyTorch's registry,
// which forwards it to Kineto when Kineto starts (at the first profile) or
// at once if Kineto already runs.
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include "profiler/kineto_session.h"
#include "profiler/profiler.h"

namespace torch_loom::profiler {
namespace {

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    // No session unless the profile asks for device activities (PyTorch's
    // CPU activity alone includes the PrivateUse1 runtime types).
    for (libkineto::ActivityType t : {libkineto::ActivityType::CONCURRENT_KERNEL,
                                      libkineto::ActivityType::GPU_MEMCPY,
                                      libkineto::ActivityType::GPU_MEMSET})
      if (activity_types.count(t)) return std::make_unique<ActivityProfilerSession>();
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  const std::string name_ = "loom";
  const std::set<libkineto::ActivityType> activities_ = {
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_MEMSET, libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
      libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};

REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

}  // namespace

PluginState plugin_state() {
  const auto& registry = torch::profiler::impl::PrivateUse1ProfilerRegistry::instance();
  return {registry.hasFactory(), registry.isRegisteredWithKineto()};
}

}  // namespace torch_loom::profiler
