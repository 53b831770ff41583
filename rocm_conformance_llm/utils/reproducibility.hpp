// Seed control and RNG state capture: one seed drives init, data order and dropout; each rank
// offsets it so ranks draw different dropout masks unless a check asks for a shared seed.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace rcl {

// The seed a rank uses for dropout and data order.
uint64_t rank_seed(uint64_t seed, int rank);

// Seeds libtorch's CPU generator and the device generator (device-agnostic).
void seed_everything(uint64_t seed, const torch::Device& device);

// Deterministic algorithms on/off (rocBLAS/MIOpen pick deterministic kernels or refuse).
void set_deterministic(bool on);

// The state of the CPU generator and, for a GPU device, the device generator.
struct RngSnapshot {
  torch::Tensor cpu_state;
  torch::Tensor device_state;  // undefined on CPU
};
RngSnapshot capture_rng(const torch::Device& device);
void restore_rng(const RngSnapshot& snapshot, const torch::Device& device);

}  // namespace rcl
