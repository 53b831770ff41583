// Every collective kind real training issues, verified with exact integers (rccl-tests' `-c`):
// each rank's input is drawn from (seed, rank, element index); the expected output is computed
// from every rank's drawn input, and the integers are small enough that bf16 holds every sum
// exactly, so any difference is a wrong collective, never rounding. Each case is timed and its
// bus bandwidth computed with nccl-tests' factors (communicator.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/transport/communicator.hpp"

namespace rcl {

struct BatteryCase {
  CollectiveKind kind = CollectiveKind::all_reduce;
  ReduceOp reduce = ReduceOp::sum;  // all-reduce and reduce-scatter only
  torch::ScalarType dtype = torch::kFloat;
  int64_t bytes = 0;         // nccl-tests' message size: the gathered output, the scattered input
  std::string name() const;  // e.g. "reduce_scatter/avg/bf16/4 MiB"
};

// Message sizes either side of RCCL's protocol thresholds (LL below ~2 MB, LL128/Simple above;
// bf16 MSCCL capped at 8 MB, rccl PR #1888): 32 KiB, 1 MiB, 3 MiB, 12 MiB, those <= max_bytes.
std::vector<int64_t> battery_sizes(int64_t max_bytes);
// Every (kind, reduce op, dtype) the battery runs, at each size.
std::vector<BatteryCase> battery_cases(const std::vector<int64_t>& sizes);

// Faults a self-test plants in this rank's part of the battery (faults/: collective-corrupt,
// collective-hang, slow-all-to-all).
struct BatteryFaults {
  bool wrong_shard = false;  // one element of this rank's all-gather shard / reduce-scatter input is off by one
  double stall_before_reduce_scatter_s = 0.0;  // sleeps before entering the first reduce-scatter
  double slow_all_to_all_s = 0.0;              // sleeps before entering each data all-to-all
};

// One case as this rank saw it.
struct BatteryOutcome {
  BatteryCase c;
  std::string route;     // route_collective's `how`
  double seconds = 0.0;  // this rank's time in the collective (the all-to-all: its counts' all-to-all included)
  int64_t wrong_elements = 0;
  int64_t first_index = -1;  // of the output
  double got = 0.0, expected = 0.0;
  int source_rank = -1;  // whose data the first wrong element came from, where the kind tells (all-gather, all-to-all)
};

// The values rank `rank` draws for elements [start, start + count): integers in [0, range),
// range = max(2, 256 / world_size), so a sum over every rank stays below 256 (exact in bf16).
torch::Tensor battery_values(uint64_t seed, int rank, int world_size, int64_t start, int64_t count);

// Rows that rank `from` sends to rank `to` in the uneven all-to-all of `numel` elements per rank.
int64_t all_to_all_split(int from, int to, int world_size, int64_t numel);

// Runs every case on `comm` (all ranks must call it with the same cases and seed) and checks
// this rank's outputs against the expected values.
std::vector<BatteryOutcome> run_battery(Communicator& comm, const std::vector<BatteryCase>& cases, uint64_t seed,
                                        const BatteryFaults& faults = {});

}  // namespace rcl
