#include "rocm_conformance_llm/utils/reproducibility.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace rcl {

uint64_t rank_seed(uint64_t seed, int rank) {
  // A large odd multiplier keeps rank streams far apart while rank 0 keeps the user's seed.
  return seed + static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ULL;
}

void seed_everything(uint64_t seed, const torch::Device& device) {
  torch::manual_seed(seed);  // CPU generator, and every device generator that is initialised
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
}

void set_deterministic(bool on) {
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  // cuDNN-named switches are MIOpen's on ROCm: pick deterministic, non-benchmarked solvers.
  at::globalContext().setDeterministicCuDNN(on);
  at::globalContext().setBenchmarkCuDNN(!on && at::globalContext().benchmarkCuDNN());
}

namespace {
at::Generator generator_for(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}
torch::Tensor state_of(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void set_state_of(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}
}  // namespace

RngSnapshot capture_rng(const torch::Device& device) {
  RngSnapshot snap;
  snap.cpu_state = state_of(at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) snap.device_state = state_of(generator_for(device));
  return snap;
}

void restore_rng(const RngSnapshot& snapshot, const torch::Device& device) {
  set_state_of(at::detail::getDefaultCPUGenerator(), snapshot.cpu_state);
  if (device.is_cuda() && snapshot.device_state.defined()) set_state_of(generator_for(device), snapshot.device_state);
}

}  // namespace rcl
