// The loom random generator: Philox-4x32-10 keyed by the seed, with a
// counter offset that each random op advances by the elements it draws.
// get_state() is 16 bytes: seed then offset (uint64 each), CUDA's layout,
// so code that reads the last 16 bytes (DTensor's RNG tracker) works.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_loom {

struct LoomGenerator final : public c10::GeneratorImpl {
  explicit LoomGenerator(c10::DeviceIndex device,
                         uint64_t seed = c10::default_rng_seed_val);
  ~LoomGenerator() override = default;

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Returns the counter of the first of `count` draws and advances the
  // offset past them. Caller holds mutex_.
  uint64_t reserve(uint64_t count);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  LoomGenerator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of `device` (-1: current device).
const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace torch_loom
