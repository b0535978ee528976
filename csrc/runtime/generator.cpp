#include "runtime/generator.h"

#include <ATen/Functions.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <mutex>

#include "runtime/device.h"

namespace torch_loom {

namespace {
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);
}  // namespace

LoomGenerator::LoomGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(loom_device(device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void LoomGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t LoomGenerator::current_seed() const { return seed_; }

uint64_t LoomGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(false);
  set_current_seed(s);
  return s;
}

void LoomGenerator::set_offset(uint64_t offset) { offset_ = offset; }

uint64_t LoomGenerator::get_offset() const { return offset_; }

void LoomGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor");
  TORCH_CHECK(new_state.device().is_cpu(),
              "RNG state must be a CPU tensor");
  TORCH_CHECK(static_cast<size_t>(new_state.numel()) >= kStateBytes,
              "RNG state is wrong size: expected at least ", kStateBytes,
              " bytes, got ", new_state.numel());
  // The seed and offset are the last 16 bytes, whatever precedes them.
  const auto* bytes = static_cast<const uint8_t*>(new_state.data()) +
                      new_state.numel() - kStateBytes;
  std::memcpy(&seed_, bytes, sizeof(uint64_t));
  std::memcpy(&offset_, bytes + sizeof(uint64_t), sizeof(uint64_t));
}

c10::intrusive_ptr<c10::TensorImpl> LoomGenerator::get_state() const {
  at::Tensor state =
      at::empty({static_cast<int64_t>(kStateBytes)}, at::TensorOptions().dtype(at::kByte));
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

uint64_t LoomGenerator::reserve(uint64_t count) {
  uint64_t first = offset_;
  offset_ += count;
  return first;
}

void LoomGenerator::register_graph() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!graph_cell_.defined())
    graph_cell_ = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(device()));
}

void LoomGenerator::capture_prologue() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(graph_cell_.defined(), "capture_prologue: the generator has no graph registered");
  TORCH_CHECK(capturing_ == 0, "a loom generator can take part in one graph capture at a time");
  capturing_ = 1;
  offset_intragraph_ = 0;
}

uint64_t LoomGenerator::capture_epilogue() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = 0;
  return offset_intragraph_;
}

void LoomGenerator::replay_prologue(uint64_t wholegraph_increment) {
  if (wholegraph_increment == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Two fills on the current stream, ordered before the replay that reads
  // them (and after any earlier replay that read the cell).
  graph_cell_.select(0, 0).fill_(static_cast<int64_t>(seed_));
  graph_cell_.select(0, 1).fill_(static_cast<int64_t>(offset_));
  offset_ += wholegraph_increment;
}

const at::Tensor& LoomGenerator::reserve_captured(uint64_t count, uint64_t* intragraph,
                                                  const char* op) {
  TORCH_CHECK(capturing_ != 0 && graph_cell_.defined(), op,
              ": a random op in a graph capture must draw from the default loom generator "
              "(the one the capture registers); this generator is not part of the capture");
  *intragraph = offset_intragraph_;
  offset_intragraph_ += count;
  return graph_cell_;
}

LoomGenerator* LoomGenerator::clone_impl() const {
  auto* gen = new LoomGenerator(device().index(), seed_);
  gen->offset_ = offset_;
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static auto* generators = new std::array<at::Generator, kMaxDevices>();
  if (device < 0) device = current_device();
  check_device_index(device, "default_generator");
  std::call_once(once[device], [device] {
    (*generators)[device] = at::make_generator<LoomGenerator>(device);
  });
  return (*generators)[device];
}

}  // namespace torch_loom
