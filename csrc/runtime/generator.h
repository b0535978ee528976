// The loom random generator: Philox-4x32-10 keyed by the seed, with a
// counter offset that each random op advances by the elements it draws.
// get_state() is 16 bytes: seed then offset (uint64 each), CUDA's layout,
// so code that reads the last 16 bytes (DTensor's RNG tracker) works.
//
// Graph capture (CUDA's scheme): a graph registers the generator before its
// capture, which gives the generator a state cell in device memory (int64
// seed, offset). While the current stream captures, a random op's launch
// reads its seed and base offset from that cell when it runs, plus its own
// offset within the graph (`reserve_captured`); the capture advances only
// that intra-graph counter, whose total the graph keeps. Each replay first
// writes the generator's seed and offset into the cell on the replaying
// stream, then advances the offset by the total: replays draw what the same
// ops would draw run eagerly in their place.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
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

  // Graphs. register_graph() makes the state cell (call it outside any
  // capture); capture_prologue()/capture_epilogue() bracket a capture, the
  // latter returning the counters the graph's ops use; replay_prologue()
  // is called before each replay, on the stream that replays. All take
  // mutex_ themselves.
  void register_graph();
  void capture_prologue();
  uint64_t capture_epilogue();
  void replay_prologue(uint64_t wholegraph_increment);
  // During a capture that registered this generator: the state cell and
  // the offset of the first of `count` draws within the graph. Throws,
  // naming `op`, when no graph capture registered the generator. Caller
  // holds mutex_.
  const at::Tensor& reserve_captured(uint64_t count, uint64_t* intragraph, const char* op);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  LoomGenerator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
  at::Tensor graph_cell_;  // int64 [seed, offset] on the device, once a graph registers
  int capturing_ = 0;      // captures in progress that registered this generator
  uint64_t offset_intragraph_ = 0;
};

// The default generator of `device` (-1: current device).
const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace torch_loom
