// The cross-rank RCCL checks as a step observer. Every rank runs it after every optimizer step
// (all ranks finish step N before any starts N+1, so its collectives line up), and every rank
// records the same verdicts.
//   every step:            per-rank step times gathered; a persistent straggler is named
//   every check_interval:  collective sequence numbers compared through the store (first: a
//                          desynchronised transport would mis-pair the other checks), the
//                          exact all-reduce canary, and the parameter fingerprint
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/detectors/comm_checks.hpp"
#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

struct CommMonitorOptions {
  int64_t check_interval = 10;  // steps between sequence/canary/parameter checks (0 = off)
  StragglerOptions straggler;
  bool log_step_time_spread = false;  // rank 0 logs min/median/max step time at each check

  // check_interval from cfg.checksum_interval; spread logged when cfg.log_per_rank (comm mode).
  static CommMonitorOptions from(const TrainingConfig& cfg);
};

class CommMonitor final : public Detector {
 public:
  // Over `sync`'s world of several ranks. `params` are the model's parameters (shared storage: the
  // monitor sees every update). `loop` hears the checksum phase before the monitor's collectives
  // (nullptr: no loop to tell).
  CommMonitor(const DiagnosticsConfig& diag, FindingLog& log, std::shared_ptr<GradientSync> sync,
              std::vector<torch::Tensor> params, CommMonitorOptions options, LoopAccess* loop = nullptr);

  // Before step 1: every rank takes rank 0's parameters (as DDP does), then the canary and the
  // parameter fingerprint prove the broadcast and the transport right.
  void preflight() override;
  // A collective sequence mismatch throws CollectiveError (after recording it): every later
  // collective would pair the wrong data, so the run cannot continue. Other checks record
  // findings and let the run go on.
  void on_step(const StepRecord& record) override;

 private:
  void report_all(std::vector<Finding> findings);
  // The parameter checksum across ranks. Under FSDP a rank holds only its shards between steps:
  // every rank gathers the whole model from them for it (a wrong all-gather leaves one rank's copy
  // different), and frees it after.
  std::vector<Finding> compare_parameters();
  FsdpModel* fsdp() const;  // the trainer's model's FSDP units; null unless data_parallel=fsdp

  std::shared_ptr<GradientSync> sync_;  // the start-up broadcast
  CrossRankChecks checks_;
  std::vector<torch::Tensor> params_;
  CommMonitorOptions options_;
  LoopAccess* loop_;
  StragglerTracker stragglers_;
};

}  // namespace rcl
