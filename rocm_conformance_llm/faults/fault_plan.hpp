// Fault plans: what `--inject SPEC[,SPEC...]` asks for, parsed and validated (no libtorch here:
// scripts/fuzz.sh fuzzes it). Synthetic faults show every detector firing on a real run.
// Composable like stress modes: specs combine, identical ones collapse, order does not matter.
// FaultInjector (faults/faults.hpp) strikes each at the point of the loop where
// the real failure strikes (StepHooks); gemm-corrupt, attention-mask-corrupt and rng-skew strike inside the check that
// catches them. scripts/fault_matrix.sh runs them all.
//
// Syntax:   NAME[=VALUE][@step=N][@rank=R]      (selectors in any order; `@step=N=VALUE` also
//                                                 gives the value, e.g. slow-step@step=15=0.5)
//   nan@step=N             one weight of block 0's FFN reads NaN in the first micro-batch's
//                          forward: block 0 writes NaN from finite inputs, the loss is NaN
//   grad-bitflip@step=N    after the gradient all-reduce, one element of the first parameter's
//                          gradient gets its top exponent bit flipped (x 2^128)
//   loss-spike@step=N      the loss jumps at step N (logits scaled x20 for that step)
//   slow-step[=SECONDS][@step=N]   every step from N (default 1) sleeps SECONDS more; without
//                          SECONDS it sleeps twice the step's own time (3x slower whatever the
//                          hardware): a performance cliff
//   memory-leak[=SIZE[/step]][@step=N]  every step from N (default 1) keeps SIZE more device
//                          memory alive (default 8MiB; units B, KiB, MiB, GiB)
//   rng-skew[@step=N]      from step N, the RNG state a replay or mask check restores is skewed
//                          by a rank-dependent offset: replays and cross-rank masks disagree
//                          (seen where replay checks run: replay_check_interval > 0, rng mode);
//                          every reload of the check meets it, re-runs included: persistent
//   rng-skew-once@step=N   the replay check of step N reloads a skewed generator once (its
//                          re-run's reload is clean): a transient replay_mismatch
//   hang@step=N            the rank stops in the forward of step N (the watchdog must fire)
//   gemm-corrupt[@step=N]  from step N, one GEMM canary shape's result is corrupted (seen at
//                          canary steps: every diagnostics.gemm_canary_interval), re-runs included:
//                          a persistent fault
//   gemm-corrupt-once@step=N  the same at the canary of step N, its re-run spared: a transient fault
//   attention-mask-corrupt[@step=N]  from step N, the attention parity probe's masked outputs of
//                          one backend (the last that serves a mask here) come out wrong (seen at
//                          probe steps: every training.attention_probe_interval)
//   rank-stop@phase=P[@step=N]  the rank freezes itself (SIGSTOP, as a hung process or a node
//                          that stopped answering) on entering phase P (of step N; default: the
//                          first time): its peers must name it within the collective timeout.
//                          P: a loop/step_hooks.hpp phase, or rendezvous / preflight before the loop
//   logits-nan-once@step=N one NaN in the logits the first time step N runs: a transient fault
//                          (a re-run of the step is clean)
//   logits-nan[@step=N]    one NaN in the logits of every forward from step N on, re-runs
//                          included: a persistent fault
//   slow-collective[=SECONDS]@step=N  the step's last gradient all-reduce completes SECONDS
//                          late (default: ten times the step's own time), as behind a stalled
//                          RCCL proxy thread: the rank waits and the collective's time includes it
//   collective-corrupt[@step=N]  from step N, in every collective battery (seen at battery steps:
//                          every training.collective_check_interval), one element of the rank's
//                          all-gather shard and of each reduce-scatter chunk it sends is off by one:
//                          a wrong shard from one rank
//   collective-hang@step=N the rank stalls before the battery's first reduce-scatter at step N for
//                          2.5x the collective timeout: its peers wait inside it and time out
//   slow-all-to-all[=SECONDS][@step=N]  from step N, the rank enters each battery all-to-all
//                          SECONDS late (default 0.5): every rank's all-to-all takes that much longer
//   @rank=R                only rank R injects (default: every rank)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

enum class FaultKind : uint8_t {
  nan,
  grad_bitflip,
  loss_spike,
  slow_step,
  memory_leak,
  rng_skew,
  hang,
  gemm_corrupt,
  attention_mask_corrupt,
  rank_stop,
  logits_nan_once,
  logits_nan,
  slow_collective,
  gemm_corrupt_once,
  rng_skew_once,
  collective_corrupt,
  collective_hang,
  slow_all_to_all,
  gemm_output_corrupt,
  count,  // not a fault: the number of kinds (faults/fault_plan.cpp checks its table against it)
};

struct FaultSpec {
  FaultKind kind = FaultKind::nan;
  std::optional<int64_t> step;  // exact step (one-shot kinds) or first step (persistent kinds)
  std::optional<int> rank;      // nullopt: every rank
  double seconds = 0.0;         // slow-step, slow-collective; 0: relative to the step's own time
  int64_t bytes_per_step = 0;   // memory-leak
  std::string phase;            // rank-stop: the phase it strikes in

  bool operator==(const FaultSpec&) const = default;
  std::string to_string() const;  // canonical spec text
};

std::string fault_name(FaultKind kind);
// Known faults and the syntax, for --help and error messages.
std::string fault_syntax_help();

class FaultPlan {
 public:
  FaultPlan() = default;  // no faults
  // Parses the --inject value; throws ConfigError naming the bad spec, the known faults and
  // the syntax. An empty string is an empty plan.
  static FaultPlan parse(std::string_view text);

  bool empty() const { return kinds_mask_ == 0; }
  bool requested(FaultKind kind) const { return (kinds_mask_ >> static_cast<unsigned>(kind)) & 1u; }
  // Hot path: a single branch when the kind was not requested.
  bool fires(FaultKind kind, int64_t step, int rank) const {
    return requested(kind) && active(kind, step, rank) != nullptr;
  }
  // The spec that applies at (step, rank), for its value; nullptr when none does.
  const FaultSpec* active(FaultKind kind, int64_t step, int rank) const;

  const std::vector<FaultSpec>& specs() const { return specs_; }
  // rank-stop: this rank freezes (SIGSTOP) if a spec names `phase` (and `step`, when it gives one).
  void stop_rank_if_planned(std::string_view phase, int64_t step, int rank) const;

  std::string to_string() const;   // canonical, sorted, comma-separated
  nlohmann::json to_json() const;  // list of canonical spec strings

 private:
  std::vector<FaultSpec> specs_;  // sorted, unique
  uint32_t kinds_mask_ = 0;
};

}  // namespace rcl
