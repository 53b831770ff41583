// The cross-rank RCCL checks whose verdicts every rank learns: the exact all-reduce canary, the
// collective battery, the parameter fingerprint, the collective sequence numbers and every rank's
// step times. They work over the world a layout describes (transport/grad_sync.hpp: World, its
// group and its model split) and never change a parameter or a gradient; the detectors that run
// them are comm_monitor.hpp and collective_check.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/transport/collective_battery.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"

namespace rcl {

// Every rank's step time and busy time (step time minus time inside collectives).
struct RankStepTimes {
  std::vector<double> step_s;
  std::vector<double> busy_s;
};

// One collective battery case as every rank agrees on it.
struct CollectiveCheckRow {
  BatteryCase c;
  std::string route;                // how this backend carried it (route_collective)
  double seconds = 0.0;             // the slowest rank's: a collective ends when its last rank does
  double bus_bandwidth_gbps = 0.0;  // from `seconds`
  std::vector<int> wrong_ranks;     // ranks whose output was not the exact expected one
};

struct CollectiveBatteryResult {
  std::vector<CollectiveCheckRow> rows;
  std::vector<Finding> findings;  // collective_result_mismatch, at most one per battery
};

class CrossRankChecks {
 public:
  // Over `sync`'s world, which must be a group of several ranks (kept alive while the checks are).
  explicit CrossRankChecks(std::shared_ptr<const GradientSync> sync);

  // Each rank's `values` (same length everywhere), indexed [rank][i], exact in float64.
  std::vector<std::vector<double>> all_gather_values(const std::vector<double>& values, const std::string& op);

  // --- each returns the findings (component RCCL) every rank agrees on ----------------------
  // All-reduce of exact integers at sizes that take RCCL's different protocols (LL for small
  // messages, LL128, Simple for large); every rank's mismatch count is gathered so a wrong
  // result on any rank is reported by all of them.
  std::vector<Finding> run_canary();
  // Every collective kind, op and dtype of the battery (collective_battery.hpp), then every
  // rank's verdict and time gathered, so all ranks report the same rows and findings: the
  // ranks whose output was wrong and, where the kind tells, the rank whose data came back wrong.
  CollectiveBatteryResult run_collective_battery(const std::vector<BatteryCase>& cases, uint64_t seed,
                                                 const BatteryFaults& faults = {});
  // Names each rank whose parameters are not bitwise identical to the majority's (a split
  // model: of the ranks that must hold the same values, per kind of parameter).
  std::vector<Finding> compare_parameters(const std::vector<torch::Tensor>& params);
  // Compares, through the store (not the transport, which is what desynchronises), how many
  // collectives each rank has entered; names a rank that skipped or added one.
  std::vector<Finding> compare_collective_sequences();
  // This rank's step time and the part of it spent inside collectives (waiting for peers
  // included) in; every rank's step and busy times out.
  RankStepTimes gather_step_times(double step_time_s, double collective_s);

  // Self-test of the canary: this rank adds `offset` to its contribution (0 = healthy).
  void inject_canary_fault(double offset) { canary_fault_offset_ = offset; }

  const World& world() const { return sync_->world(); }

 private:
  Communicator& comm() const { return *world().communicator; }
  Finding finding(const std::string& signature, Severity severity, std::string message, nlohmann::json evidence) const;

  std::shared_ptr<const GradientSync> sync_;
  double canary_fault_offset_ = 0.0;
  int64_t sequence_checks_ = 0;  // names each store exchange uniquely
};

}  // namespace rcl
