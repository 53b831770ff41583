// One collective as a rank ran it: what the gradient synchroniser, the canaries and the
// cross-rank checks report, and what a step's record lists.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace rcl {

// One collective as the gradient synchroniser (or a canary) ran it.
struct CollectiveSample {
  std::string op;  // "allreduce", "allreduce_canary", "checksum", ...
  int64_t bytes = 0;
  double seconds = 0.0;
  double bus_bandwidth_gbps = 0.0;  // nccl-tests busbw: algbw * 2(n-1)/n for all-reduce
  int64_t sequence = 0;             // per-rank collective sequence number
  // What ran, set by the Communicator that ran it (never parsed from `op`): report.json's
  // training collectives table groups by these (reports/training_collectives.hpp).
  std::string kind;       // to_string(CollectiveKind): "all_reduce", "all_gather", ...
  std::string reduce_op;  // to_string(ReduceOp) for all-reduce and reduce-scatter; "" otherwise
  std::string dtype;      // the caller's tensor, c10::toString: "Float", "BFloat16", "Long", ...
  std::string group;      // "world", or the subgroup's name given to Communicator::split ("dp", "tp", "ep")
  // Set where the collective was timed on the device's stream (RCCL on 2.x): when the step is
  // published it replaces the host's measurement in `seconds` by the device's, keeping what was
  // added since, so the step never waits for the device to time it.
  std::function<void(CollectiveSample&)> settle = nullptr;
};

}  // namespace rcl
