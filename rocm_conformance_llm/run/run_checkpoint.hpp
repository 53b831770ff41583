// Training checkpoints for soak runs that get preempted (activation checkpointing is
// workload/checkpointing.hpp, a different thing). Layout, atomicity and resume guarantees:
// docs/checkpoints.md.
//
//   OUT/checkpoints/step-00000120/
//     model.safetensors      weights; Hugging Face GPT-2 tensor names when the layout is GPT-2's
//     config.json            Hugging Face style model config
//     optimizer.safetensors  AdamW moments (flat, in the optimizer's buffer order)
//     rank-<R>.safetensors   each rank's RNG states (CPU generator, device generator)
//     findings-rank-<R>.json each rank's findings so far
//     state.json             step, data cursor, optimizer steps, loss scaler, what the run was
//     manifest.json          SHA-256 of every file above; written last
//
// The training state's files and their reader: loop/training_state.hpp; here the policy, the
// findings, the manifest and resume.
//
// A checkpoint is written under checkpoints/.tmp-step-N, every file fsynced, then renamed:
// an interrupted or failed write (signal, full disk) leaves the earlier checkpoints as they were.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/run/run_config.hpp"

namespace rcl {

class LoopAccess;

// What a checkpoint must agree with to be resumed: the resolved training config (apart from
// kResumeMayDiffer), the stress modes and the world size.
struct RunIdentity {
  nlohmann::json training;
  std::vector<std::string> stress_modes;
  int world_size = 1;
};
// Training keys a resumed run may change: they do not touch the arithmetic of a step.
inline constexpr const char* kResumeMayDiffer[] = {"max_duration_s", "num_threads", "log_per_rank", "phase_timing"};

// `--resume` text to a checkpoint directory: "latest" (the newest complete checkpoint under
// OUTPUT_DIR/checkpoints), a checkpoint directory, or a run directory (its newest one).
// Then the checkpoint is verified (every file against the manifest's SHA-256) and compared with
// `now`; CheckpointError naming the first difference.
struct ResumePoint {
  std::filesystem::path dir;
  int64_t step = 0;
};
ResumePoint resolve_resume(const std::string& spec, const std::filesystem::path& output_dir, const RunIdentity& now);

// `--resume auto`, the one command that starts a job and restarts it (torchrun --max-restarts,
// Slurm --requeue): the newest complete checkpoint under OUTPUT_DIR/checkpoints, verified as
// "latest" is; nullopt when there is none (start fresh). An OUTPUT_DIR that already holds a run
// (config.json) without a checkpoint is this job's earlier attempt only when its configuration
// is this run's: otherwise CheckpointError, never another run's results overwritten.
std::optional<ResumePoint> resolve_resume_auto(const std::filesystem::path& output_dir, const RunIdentity& now);

// The attempts of a `--resume auto` job in OUTPUT_DIR, one line each in attempts.jsonl
// (attempts.rank<N>.jsonl off rank 0): appended, fsynced, at each start. Returns report.json's
// "restarts" section: {"count": attempts before this one, "attempts": [{"attempt", "from_step",
// "checkpoint", "unix_time"}...]} (from_step 0: started fresh).
nlohmann::json record_attempt(const std::filesystem::path& output_dir, int rank,
                              const std::optional<ResumePoint>& from);
// The findings `rank` had made in the checkpoint's training steps (step >= 1), for the resumed
// run's report; its own preflight finds the step-0 ones again. Empty for a checkpoint written
// before findings were kept. CheckpointError when the file is malformed.
std::vector<Finding> checkpoint_findings(const std::filesystem::path& dir, int rank);

// Writes the run's checkpoints: at the policy's interval (a step hook, between steps), and on
// request at the end or on a stop signal. Every rank calls it at the same steps.
class Checkpointer final : public StepHooks {
 public:
  Checkpointer(LoopAccess& loop, const FindingLog& findings, CheckpointPolicy policy, std::filesystem::path output_dir,
               RunIdentity identity);

  void between_steps(int64_t step) override;
  // Writes one for the loop's current step unless that step already has one. `reason`:
  // "interval", "final", "signal". Returns the checkpoint directory.
  std::filesystem::path save(const std::string& reason);

 private:
  LoopAccess& loop_;
  const FindingLog& findings_;
  CheckpointPolicy policy_;
  std::filesystem::path root_;
  RunIdentity identity_;
  int64_t last_saved_step_ = -1;
  SteadyClock::time_point started_;  // of the run, then of the last checkpoint
};

}  // namespace rcl
