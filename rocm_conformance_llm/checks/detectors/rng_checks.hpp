// rocRAND checks: replays that must reproduce the original losses, dropout masks that must be
// identical across ranks when drawn from a shared seed, and masks that must regenerate
// identically once the RNG state is restored (gradient-accumulation and activation-checkpoint
// recomputation boundaries depend on exactly that).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

class FaultPlan;

// FNV-1a over the tensor's bytes (copied to the host, contiguous). Equal tensors of the same
// dtype and shape hash equal; any flipped bit changes the hash.
uint64_t tensor_hash(const torch::Tensor& t);

// Hash of a dropout keep-mask of `numel` elements with drop probability `p`, drawn on `device`
// from its current default generator (advances it like a real dropout call would).
uint64_t dropout_mask_hash(const torch::Device& device, int64_t numel, double p);

// The rng-skew fault: consumes 1 + rank draws from the device's generator, as a rank whose
// generator drifted (or whose state restore went stale) would have.
void skew_rng(const torch::Device& device, int rank);

// The hash of a dropout mask drawn from `shared_seed` + `step`: identical on every healthy rank.
// The RNG state is saved and restored around it, so training is unaffected. `skew` (the
// rng-skew fault) consumes 1 + rank extra draws first, as a rank whose generator drifted would.
// Gather the hashes of all ranks and pass them to check_mask_hashes_across_ranks.
uint64_t shared_seed_mask_hash(const torch::Device& device, uint64_t shared_seed, int64_t step, int rank,
                               bool skew = false);

// replay_mismatch (rocRAND, fail): the replayed losses of steps first_step.. must equal the
// original ones bitwise when `deterministic`, else within relative tolerance `rel_tol`.
// Reported at the first differing step. Throws std::invalid_argument if the lengths differ.
std::optional<Finding> compare_replay(const std::vector<double>& original, const std::vector<double>& replayed,
                                      int64_t first_step, bool deterministic, double rel_tol, int rank);

// dropout_mask_rank_mismatch (rocRAND, fail): masks drawn from one shared seed, hashed per rank
// (index = rank), must all agree. Lists the ranks that differ from the majority hash.
std::optional<Finding> check_mask_hashes_across_ranks(const std::vector<uint64_t>& hash_per_rank, int64_t step);

// Every rank's `values` ([rank][i], exact in float64): an all-gather over the process group.
using GatherValues = std::function<std::vector<std::vector<double>>(const std::vector<double>&)>;

// The whole cross-rank check: this rank's shared-seed mask hash, gathered from every rank (as
// two 32-bit halves: a double holds 53 bits exactly), then check_mask_hashes_across_ranks.
// Every rank must call it at the same step; every rank gets the same verdict.
std::optional<Finding> check_shared_seed_masks(const torch::Device& device, uint64_t shared_seed, int64_t step,
                                               int rank, bool skew, const GatherValues& gather);

// dropout_mask_not_reproducible (rocRAND, fail): a mask drawn twice from the same restored RNG
// state (`context`: "grad_accumulation", "activation_checkpoint", "checkpoint_reload", ...)
// must hash the same.
std::optional<Finding> compare_mask_generations(uint64_t first, uint64_t regenerated, const std::string& context,
                                                int64_t step, int rank);

// Active check: captures the RNG state, draws a dropout mask, restores the state, draws again
// and compares; the RNG state is left exactly as it was, so training is unaffected. `skew`
// (the rng-skew fault) offsets the restored state the way a lost or stale restore would.
std::optional<Finding> check_rng_restore(const torch::Device& device, int64_t step, int rank, bool skew = false);

// Loop-side (rng mode): rewind-and-replay. After step S the state is saved (a private
// checkpoint), steps S+1..S+k run unpublished, the state is reloaded (the resume loader) and the
// same steps run again, for real: the two loss sequences must match (bitwise under
// deterministic algorithms: pytorch/pytorch#196164, ROCm/rocBLAS#1459; determinism "replay"
// switches them on for these steps only). Training continues from
// the second run, so a healthy run logs the losses it would have logged without the check. At
// the same point: the RNG-restore check, the cross-rank dropout-mask check (several ranks) and
// memory back to its level after the reload.
//
// A mismatch is re-run before it is reported (rerun_outcome.hpp's classification): at the next step
// boundary the state is set aside, the saved state reloaded once more and the k steps replayed
// again. Still unlike the first run: reproducible (then, under bf16/fp16, both runs once more in
// float32: also_in_fp32); like it: transient, the second run went astray once. Every rank takes
// part when any rank saw a mismatch (the replayed steps all-reduce gradients).
class ReplayCheck final : public Detector {
 public:
  // `faults`: rng-skew skews the restored generator on every reload from its step on (a broken
  // restore), rng-skew-once on the check's first reload only (nullptr: no faults). The saved state
  // goes to host memory (training.replay_snapshot host) or to a private checkpoint in the run's
  // output directory (disk; without one, the temporary directory), dropped once the replay is judged.
  // `all_gather`: every rank's values (the shared-seed mask check); empty with one process.
  ReplayCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop, const FaultPlan* faults,
              GatherValues all_gather = {});
  ~ReplayCheck() override;
  void between_steps(int64_t step) override;
  void on_loss(int64_t step, double local_loss) override;
  void finish() override;

 private:
  // The judged replay, re-run when any rank saw a mismatch, reported; the saved state removed.
  void settle(int64_t step);
  // Reloads the saved state (skewed when a persistent rng-skew fires), replays k steps, puts the
  // run back where it was; returns the losses. `fp32`: autocast off.
  std::vector<double> replay_from_saved(bool fp32, bool skew);
  // Re-runs a mismatch (see the top) and reports it, classified.
  void classify_and_report(Finding mismatch);
  bool skewed(FaultKind kind) const;
  bool any_rank(bool mine);  // a vote every rank casts (one all-reduce with several ranks)
  // Deterministic algorithms (determinism "replay" or "all"): the runs must be bitwise equal.
  bool compares_bitwise() const;
  // Under determinism "replay": deterministic algorithms on from the save to the judged replay
  // (settle), off for every other step. Under "off" and "all" the run's setting stays.
  void deterministic_around_replay(bool on);

  LoopAccess& loop_;
  const FaultPlan* faults_;
  std::filesystem::path scratch_dir_;
  GatherValues all_gather_;  // empty with one process
  // The two runs of the same steps: the first from the saved state (unpublished), the second
  // after reloading it (the run that continues and is logged).
  // The state a replay rewinds to, where training.replay_snapshot keeps it.
  struct SavedState {
    std::optional<LoopAccess::Snapshot> in_memory{};
    std::optional<LoopAccess::PrivateCheckpoint> on_disk{};
  };
  SavedState save_state(const std::filesystem::path& dir);
  void load_state(const SavedState& saved);
  struct Pending {
    int64_t saved_step = 0;  // S: the state saved after it
    int64_t first_step = 0;
    SavedState saved{};  // the state after step S
    std::vector<double> first_run{};
    std::vector<double> second_run{};
    std::optional<Finding> mismatch{};  // judged this rank's runs unequal; re-run at the next boundary
    bool judged = false;
  };
  std::optional<Pending> pending_;
  TransientHistory transients_;
};

}  // namespace rcl
