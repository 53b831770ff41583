#include "rocm_conformance_llm/diagnostics/registry.hpp"

#include <algorithm>
#include <limits>
#include <mutex>

#include "rocm_conformance_llm/diagnostics/attention_probe.hpp"
#include "rocm_conformance_llm/diagnostics/collectives.hpp"
#include "rocm_conformance_llm/diagnostics/gemm_canary.hpp"
#include "rocm_conformance_llm/diagnostics/memory.hpp"
#include "rocm_conformance_llm/diagnostics/numerics.hpp"
#include "rocm_conformance_llm/diagnostics/op_counter.hpp"
#include "rocm_conformance_llm/diagnostics/rng_checks.hpp"
#include "rocm_conformance_llm/diagnostics/shadow_check.hpp"
#include "rocm_conformance_llm/diagnostics/step_time.hpp"
#include "rocm_conformance_llm/distributed/comm_monitor.hpp"
#include "rocm_conformance_llm/trainer.hpp"

namespace rcl {
namespace {

using component::allocator;
using component::hip_runtime;
using component::miopen;
using component::rccl;
using component::rocblas;
using component::rocrand;
constexpr Severity warn = Severity::warn, fail = Severity::fail;

// A persisting fault is reported at a few checks, not at every one of a long run.
constexpr int kRepeated = 5;
// One finding per distinct cause (each names another signature): never capped.
constexpr int kEveryOne = std::numeric_limits<int>::max();

template <typename T>
std::unique_ptr<Detector> step_detector(const DetectorContext& c) {
  return std::make_unique<T>(c.diag, c.log);
}

std::vector<DetectorSpec> builtin_detectors() {
  return {
      // --- step detectors: read every finished step's record ---
      {"numerics", "step",
       {{"nonfinite_loss", rocblas, fail, 1, "nan"},
        {"nonfinite_grad_norm", rocblas, fail, 1, "grad-bitflip"},
        {"persistent_overflow_skips", rocblas, warn, 1, "test:NumericsDetector.PersistentOverflowSkipsWarn"},
        {"loss_spike", rocblas, warn, kRepeated, "loss-spike"},
        {"loss_divergence", rocblas, fail, 1, "test:NumericsDetector.SpikeThatNeverRecoversFails"},
        {"grad_norm_spike", rocblas, warn, kRepeated, "loss-spike"}},
       {"diagnostics.loss_spike_zscore", "diagnostics.window_steps", "diagnostics.warmup_steps"},
       step_detector<NumericsDetector>},
      {"step_time", "step",
       {{"step_time_cliff", rocblas, warn, 1, "slow-step"},
        {"late_slowdown", miopen, warn, 1, "test:StepTimeDetector.GradualDriftIsALateSlowdownNotACliff"},
        {"step_time_variance", miopen, warn, 1, "test:StepTimeDetector.JitteryStepTimesWarnAboutVariance"},
        {"slow_first_step", miopen, warn, 1, "test:StepTimeDetector.SlowFirstStepIsInfoThenWarn"}},
       {"diagnostics.slowdown_ratio_warn", "diagnostics.step_time_cv_warn", "diagnostics.first_step_ratio_warn",
        "diagnostics.window_steps", "diagnostics.warmup_steps"},
       step_detector<StepTimeDetector>},
      {"memory", "step",
       {{"memory_growth", allocator, warn, 1, "memory-leak"},
        {"allocator_fragmentation", allocator, warn, 1, "test:MemoryDetector.FragmentationUsesPeakAgainstReserved"}},
       {"diagnostics.memory_slope_bytes_per_step_warn", "diagnostics.fragmentation_ratio_warn",
        "diagnostics.window_steps"},
       step_detector<MemoryDetector>},
      {"collective_latency", "step",
       {{"collective_latency_spike", rccl, warn, kRepeated, "test:CollectiveDetector.LatencySpikeIsAttributedToRccl"}},
       {"diagnostics.collective_latency_zscore", "diagnostics.window_steps"},
       step_detector<CollectiveDetector>},

      // --- loop-side checks: act inside the step through StepHooks ---
      {"nonfinite_localisation", "loop",
       {{"nonfinite_reduced_precision_only", rocblas, warn, kRepeated,
         "test:NonFiniteProbe.OverflowOnlyInReducedPrecisionIsNumerics"},
        {"nonfinite_also_fp32", rocblas, fail, kRepeated, "nan"},
        {"nonfinite_not_reproducible", rocblas, warn, kRepeated,
         "test:NonFiniteProbe.Fp32TrainingRunsOnceAndTransientIsNotReproduced"}},
       {},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer) return nullptr;
         return std::make_unique<NonFiniteLocaliser>(c.diag, c.log, *c.trainer);
       }},
      {"gemm_canary", "loop",
       {{"gemm_nonfinite_output", rocblas, fail, kRepeated, "test:GemmCanary.FiniteInNonFiniteOutFails"},
        {"gemm_wrong_result", rocblas, fail, kRepeated, "gemm-corrupt"}},
       {"diagnostics.gemm_canary_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer || c.diag.gemm_canary_interval <= 0) return nullptr;
         return std::make_unique<GemmCanaryCheck>(c.diag, c.log, *c.trainer, c.faults);
       }},
      {"shadow_check", "loop",
       {{"gemm_shadow_mismatch", rocblas, fail, kRepeated, "test:ShadowCheckRun.ShimCorruptionOfOneShapeIsCaughtWithinTenSteps"}},
       {"diagnostics.shadow_check_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer || c.diag.shadow_check_interval <= 0) return nullptr;
         return std::make_unique<ShadowCheck>(c.diag, c.log, *c.trainer);
       }},
      {"attention_probe", "loop",
       {{"attention_backend_mismatch", component::attention, fail, kRepeated, "attention-mask-corrupt"}},
       {"training.attention_probe_interval", "training.attention_probe_seq_len", "training.attention_pad_fraction"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer || c.trainer->ctx().cfg.attention_probe_interval <= 0) return nullptr;
         return std::make_unique<AttentionProbeCheck>(c.diag, c.log, *c.trainer, c.faults);
       }},
      // Produces op_counts for metrics.jsonl; `--baseline` judges them (op_fingerprint_changed).
      {"op_fingerprint", "loop", {}, {"diagnostics.fingerprint_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer || c.diag.fingerprint_interval <= 0) return nullptr;
         return std::make_unique<OpFingerprint>(c.diag, c.log, *c.trainer);
       }},
      {"replay", "loop",
       {{"replay_mismatch", rocrand, fail, kRepeated, "rng-skew"},
        {"dropout_mask_not_reproducible", rocrand, fail, kRepeated, "rng-skew"},
        {"dropout_mask_rank_mismatch", rocrand, fail, kRepeated, "rng-skew"},
        {"memory_not_recovered_after_reload", allocator, warn, kRepeated, "memory-leak"}},
       {"training.replay_check_interval", "training.replay_steps", "diagnostics.replay_rel_tolerance",
        "diagnostics.reload_memory_growth_warn_bytes"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.trainer || c.trainer->ctx().cfg.replay_check_interval <= 0) return nullptr;
         return std::make_unique<ReplayCheck>(c.diag, c.log, *c.trainer, c.faults);
       }},

      // --- cross-rank checks (RCCL): every rank, after every step ---
      {"comm_monitor", "cross-rank",
       {{"collective_desync", rccl, fail, kRepeated, "test:CommChecksTest.SkippedCollectiveIsNamedBySequenceCheck"},
        {"allreduce_canary_mismatch", rccl, fail, kRepeated,
         "test:CommChecksTest.CanaryPassesAndFailsWhenOneRankPerturbsItsContribution"},
        {"parameter_divergence", rccl, fail, kRepeated, "test:CommChecksTest.ParameterChecksumNamesThePerturbedRank"},
        {"straggler_rank", rccl, warn, kRepeated, "test:CommMonitorTest.SleepingRankIsNamedStragglerAndOthersSeeTheLatency"}},
       {"training.checksum_interval", "diagnostics.warmup_steps"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         auto group = std::dynamic_pointer_cast<ProcessGroupSync>(c.sync);
         if (!group || !c.trainer) return nullptr;
         return std::make_unique<CommMonitor>(c.diag, c.log, std::move(group), c.trainer->model()->parameters(),
                                              CommMonitorOptions::from(c.trainer->ctx().cfg));
       }},

      // --- owned by the runner and the process group ---
      {"collectives", "run",
       {{"collective_timeout", rccl, fail, 1, "test:CommChecksTest.RankThatNeverArrivesGivesOthersANamedTimeout"},
        {"exchange_timeout", rccl, fail, 1, "test:CommChecksTest.VanishedRankZeroIsNamedThroughTheUnreachableStore"},
        {"rendezvous_failed", rccl, fail, 1, "test:CommChecksTest.RendezvousNamesTheRankThatNeverJoined"}},
       {"training.collective_timeout_s"},
       {}},
      // The node under the job (diagnostics/telemetry.hpp): ROCm SMI samples and the amdgpu
      // kernel log, read by the runner's NodeMonitor on its own thread.
      {"telemetry", "run",
       {{"ecc_uncorrectable_increase", hip_runtime, fail, kRepeated, "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings"},
        {"ecc_correctable_increase", hip_runtime, warn, kRepeated, "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings"},
        {"gpu_throttled", hip_runtime, warn, kRepeated, "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings"},
        {"gpu_disappeared", hip_runtime, fail, kRepeated, "test:Telemetry.GpuThatStopsAnsweringOrIsNoLongerListedFails"}},
       {"diagnostics.telemetry_interval_s"},
       {}},
      {"kernel_log", "run",
       {{"kernel_gpu_reset", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures"},
        {"kernel_ring_timeout", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures"},
        {"kernel_page_fault", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures"},
        {"kernel_ras_event", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures"},
        {"kernel_xgmi_error", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures"}},
       {"diagnostics.kernel_log_source"},
       {}},
      {"watchdog", "run",
       {{"hang", hip_runtime, fail, 1, "hang"}, {"collective_hang", rccl, fail, 1, "hang"}},
       {"diagnostics.watchdog_timeout_s"},
       {}},
      {"crash_classifier", "run",
       {{"out_of_memory", allocator, fail, 1, "test:ErrorClassifier.OomFindingCarriesSizesAndTheLastMemorySample"},
        {"collective_error", rccl, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"illegal_memory_access", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"gpu_hang", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"kernel_launch_failure", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"no_device", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"blas_error", rocblas, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"miopen_error", miopen, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"rng_error", rocrand, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"hip_error", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents"},
        {"unclassified_crash", hip_runtime, fail, 1, "test:ReportWriter.CrashReportClassifiesTheExceptionAndExitsThree"}},
       {},
       {}},
      {"baseline", "run",
       {{"loss_mismatch_vs_baseline", rocblas, fail, 1, "test:Baseline.OneUlpLossDifferenceFailsInDeterministicModeOnly"},
        {"step_time_regression_vs_baseline", miopen, warn, 1, "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire"},
        {"peak_memory_regression_vs_baseline", allocator, warn, 1,
         "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire"},
        {"op_fingerprint_changed", miopen, warn, 1, "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire"},
        {"new_finding_vs_baseline", "", warn, kEveryOne, "test:Baseline.FindingsPresentNowButNotThenAreFlagged"}},
       {"diagnostics.baseline_loss_rel_tolerance", "diagnostics.baseline_memory_growth_ratio"},
       {}},
  };
}

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<DetectorSpec>& mutable_registry() {
  static std::vector<DetectorSpec> registry = builtin_detectors();
  return registry;
}

}  // namespace

const std::vector<DetectorSpec>& detector_registry() { return mutable_registry(); }

DetectorRegistration::DetectorRegistration(DetectorSpec spec) : name_(spec.name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  mutable_registry().push_back(std::move(spec));
}

DetectorRegistration::~DetectorRegistration() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& registry = mutable_registry();
  registry.erase(std::remove_if(registry.begin(), registry.end(), [&](const DetectorSpec& d) { return d.name == name_; }),
                 registry.end());
}

const SignatureSpec* find_signature(std::string_view id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& detector : mutable_registry())
    for (const auto& signature : detector.signatures)
      if (signature.id == id) return &signature;
  return nullptr;
}

std::vector<std::unique_ptr<Detector>> make_detectors(const DetectorContext& ctx) {
  std::vector<std::unique_ptr<Detector>> out;
  if (!ctx.diag.enabled) return out;
  for (const auto& spec : detector_registry())
    if (spec.make)
      if (auto detector = spec.make(ctx)) out.push_back(std::move(detector));
  return out;
}

}  // namespace rcl
