#include "rocm_conformance_llm/checks/detectors/catalog.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/detectors/anomaly_rerun.hpp"
#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/checks/detectors/collective_check.hpp"
#include "rocm_conformance_llm/checks/detectors/collectives.hpp"
#include "rocm_conformance_llm/checks/detectors/comm_monitor.hpp"
#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"
#include "rocm_conformance_llm/checks/detectors/gemm_checksums.hpp"
#include "rocm_conformance_llm/checks/detectors/loss_sanity.hpp"
#include "rocm_conformance_llm/checks/detectors/memory.hpp"
#include "rocm_conformance_llm/checks/detectors/numerics.hpp"
#include "rocm_conformance_llm/checks/detectors/op_counter.hpp"
#include "rocm_conformance_llm/checks/detectors/rng_checks.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_check.hpp"
#include "rocm_conformance_llm/checks/detectors/step_time.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {
namespace {

using component::allocator;
using component::hip_runtime;
using component::miopen;
using component::rccl;
using component::rocblas;
using component::rocrand;
constexpr Severity warn = Severity::warn, fail = Severity::fail;
// The default actions (README "Actions"): a re-run classification overrides them.
constexpr Action rerun = Action::rerun, isolate_node = Action::isolate_node, report_upstream = Action::report_upstream,
                 check_config = Action::check_config;

// A persisting fault is reported at a few checks, not at every one of a long run.
constexpr int kRepeated = 5;
// One finding per distinct cause (each names another signature): never capped.
constexpr int kEveryOne = std::numeric_limits<int>::max();

// The run the step detectors calibrate to; defaults when a test builds them without a loop.
RunProfile run_profile(const DetectorContext& c) {
  RunProfile run;
  if (!c.loop) return run;
  const RunContext& ctx = c.loop->ctx();
  run.steps = ctx.cfg.steps;
  run.shared_cores = ctx.device.is_cpu();
  run.vocab_size = ctx.cfg.vocab_size;
  return run;
}

// The cross-rank checks need a group: a world of several ranks.
bool several_ranks(const DetectorContext& c) { return c.sync && c.sync->world().communicator; }

template <typename T>
std::unique_ptr<Detector> step_detector(const DetectorContext& c) {
  return Detector::build<T>(c.diag, c.log, run_profile(c));
}

std::vector<DetectorSpec> builtin_detectors() {
  return {
      // --- step detectors: read every finished step's record ---
      {"numerics",
       "step",
       {{"nonfinite_loss", rocblas, fail, 1, "logits-nan", rerun},
        {"nonfinite_grad_norm", rocblas, fail, 1, "grad-bitflip", rerun},
        {"persistent_overflow_skips", rocblas, warn, 1, "test:NumericsDetector.PersistentOverflowSkipsWarn",
         check_config},
        {"loss_spike", rocblas, warn, kRepeated, "loss-spike", rerun},
        {"loss_divergence", rocblas, fail, 1, "test:NumericsDetector.SpikeThatNeverRecoversFails", check_config},
        {"grad_norm_spike", rocblas, warn, kRepeated, "loss-spike", rerun}},
       {"diagnostics.loss_spike_zscore", "diagnostics.loss_spike_min_jump", "diagnostics.false_alarm_budget",
        "diagnostics.window_steps", "diagnostics.warmup_steps"},
       step_detector<NumericsDetector>},
      {"loss_sanity",
       "step",
       {{"early_loss_divergence", component::training, warn, 1,
         "test:LossSanityDetector.RecordedH200DivergenceFiresAtStep2", check_config}},
       {"diagnostics.loss_sanity_first_step_margin", "diagnostics.loss_sanity_vocab_margin", "diagnostics.warmup_steps",
        "diagnostics.window_steps"},
       step_detector<LossSanityDetector>},
      {"step_time",
       "step",
       {{"step_time_cliff", rocblas, warn, 1, "slow-step", isolate_node},
        {"late_slowdown", miopen, warn, 1, "test:StepTimeDetector.GradualDriftIsALateSlowdownNotACliff", isolate_node},
        {"step_time_variance", miopen, warn, 1, "test:StepTimeDetector.JitteryStepTimesWarnAboutVariance",
         isolate_node},
        {"slow_first_step", miopen, warn, 1, "test:StepTimeDetector.SlowFirstStepIsInfoThenWarn", check_config},
        {"host_contention", component::host, Severity::info, 1,
         "test:StepTimeDetector.SlowdownWhileTheHostIsBusyIsTheHosts", rerun}},
       {"diagnostics.slowdown_ratio_warn", "diagnostics.step_time_cv_warn", "diagnostics.first_step_ratio_warn",
        "diagnostics.window_steps", "diagnostics.warmup_steps"},
       step_detector<StepTimeDetector>},
      {"memory",
       "step",
       {{"memory_growth", allocator, warn, 1, "memory-leak", report_upstream},
        {"allocator_fragmentation", allocator, warn, 1, "test:MemoryDetector.FragmentationUsesPeakAgainstReserved",
         check_config}},
       {"diagnostics.memory_slope_bytes_per_step_warn", "diagnostics.fragmentation_ratio_warn",
        "diagnostics.window_steps"},
       step_detector<MemoryDetector>},
      {"collective_latency",
       "step",
       {{"collective_latency_spike", rccl, warn, kRepeated, "slow-collective", isolate_node}},
       {"diagnostics.collective_latency_zscore", "diagnostics.collective_latency_min_step_fraction",
        "diagnostics.false_alarm_budget", "diagnostics.window_steps"},
       step_detector<CollectiveDetector>},

      // --- loop-side checks: act inside the step through StepHooks ---
      {"nonfinite_localisation",
       "loop",
       {{"nonfinite_reduced_precision_only", rocblas, warn, kRepeated,
         "test:NonFiniteProbe.OverflowOnlyInReducedPrecisionIsNumerics", check_config},
        {"nonfinite_also_fp32", rocblas, fail, kRepeated, "nan", isolate_node},
        {"nonfinite_not_reproducible", rocblas, warn, kRepeated, "logits-nan-once", rerun}},
       {},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop) return nullptr;
         return Detector::build<NonFiniteLocaliser>(c.diag, c.log, *c.loop);
       }},
      {"gemm_canary",
       "loop",
       {{"gemm_nonfinite_output", rocblas, fail, kRepeated, "test:GemmCanary.FiniteInNonFiniteOutFails", isolate_node},
        {"gemm_wrong_result", rocblas, fail, kRepeated, "gemm-corrupt|gemm-corrupt-once", isolate_node}},
       {"diagnostics.gemm_canary_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.diag.gemm_canary_interval <= 0) return nullptr;
         return Detector::build<GemmCanaryCheck>(c.diag, c.log, *c.loop, c.faults);
       }},
      {"shadow_check",
       "loop",
       {{"gemm_shadow_mismatch", rocblas, fail, kRepeated,
         "test:ShadowCheckRun.ShimCorruptionOfOneShapeIsCaughtWithinTenSteps", report_upstream}},
       {"diagnostics.shadow_check_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.diag.shadow_check_interval <= 0) return nullptr;
         return Detector::build<ShadowCheck>(c.diag, c.log, *c.loop);
       }},
      {"gemm_checksums",
       "loop",
       {{"gemm_checksum_mismatch", rocblas, fail, kRepeated, "gemm-output-corrupt", isolate_node}},
       {"diagnostics.gemm_checksums", "diagnostics.gemm_checksums_per_step"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.diag.gemm_checksums == GemmChecksums::off) return nullptr;
         return Detector::build<GemmChecksumCheck>(c.diag, c.log, *c.loop);
       }},
      {"attention_probe",
       "loop",
       {{"attention_backend_mismatch", component::attention, fail, kRepeated, "attention-mask-corrupt",
         report_upstream}},
       {"training.attention_probe_interval", "training.attention_probe_seq_len", "training.attention_pad_fraction"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.loop->ctx().cfg.attention_probe_interval <= 0) return nullptr;
         return Detector::build<AttentionProbeCheck>(c.diag, c.log, *c.loop, c.faults);
       }},
      // Classifies the numeric anomalies above (anomaly_rerun.hpp): it only amends their findings.
      {"anomaly_rerun",
       "loop",
       {},
       {},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || !AnomalyRerun::applies(c.loop->ctx().cfg)) return nullptr;
         return Detector::build<AnomalyRerun>(c.diag, c.log, *c.loop);
       }},
      // Produces op_counts for metrics.jsonl; `--baseline` judges them (op_fingerprint_changed).
      {"op_fingerprint",
       "loop",
       {},
       {"diagnostics.fingerprint_interval"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.diag.fingerprint_interval <= 0) return nullptr;
         return Detector::build<OpFingerprint>(c.diag, c.log, *c.loop);
       }},
      {"replay",
       "loop",
       {{"replay_mismatch", rocrand, fail, kRepeated, "rng-skew|rng-skew-once", rerun},
        {"dropout_mask_not_reproducible", rocrand, fail, kRepeated, "rng-skew", report_upstream},
        {"dropout_mask_rank_mismatch", rocrand, fail, kRepeated, "rng-skew", report_upstream},
        {"memory_not_recovered_after_reload", allocator, warn, kRepeated, "memory-leak", report_upstream}},
       {"training.replay_check_interval", "training.replay_steps", "diagnostics.replay_rel_tolerance",
        "diagnostics.reload_memory_growth_warn_bytes"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!c.loop || c.loop->ctx().cfg.replay_check_interval <= 0) return nullptr;
         GatherValues all_gather;  // several ranks: the shared-seed masks are compared across them
         if (several_ranks(c))
           all_gather = [checks = std::make_shared<CrossRankChecks>(c.sync)](const std::vector<double>& values) {
             return checks->all_gather_values(values, "rng_mask_hash");
           };
         return Detector::build<ReplayCheck>(c.diag, c.log, *c.loop, c.faults, std::move(all_gather));
       }},

      // --- cross-rank checks (RCCL): every rank, after every step ---
      {"comm_monitor",
       "cross-rank",
       {{"collective_desync", rccl, fail, kRepeated, "test:CommChecksTest.SkippedCollectiveIsNamedBySequenceCheck",
         report_upstream},
        {"allreduce_canary_mismatch", rccl, fail, kRepeated,
         "test:CommChecksTest.CanaryPassesAndFailsWhenOneRankPerturbsItsContribution", isolate_node},
        {"parameter_divergence", rccl, fail, kRepeated, "test:CommChecksTest.ParameterChecksumNamesThePerturbedRank",
         isolate_node},
        {"straggler_rank", rccl, warn, kRepeated,
         "test:CommMonitorTest.SleepingRankIsNamedStragglerAndOthersSeeTheLatency", isolate_node}},
       {"training.checksum_interval", "diagnostics.warmup_steps"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!several_ranks(c) || !c.loop) return nullptr;
         auto options = CommMonitorOptions::from(c.loop->ctx().cfg);
         // CPU ranks share the host's cores: under load one runs 2-3x slower for ~10 steps at a
         // time (bench/false-alarms.md); only a rank 4x slower is a straggler.
         if (run_profile(c).shared_cores) options.straggler.ratio = std::max(options.straggler.ratio, 4.0);
         return Detector::build<CommMonitor>(c.diag, c.log, c.sync, c.loop->model()->parameters(), options, c.loop);
       }},

      // Every collective kind (all-reduce, all-gather, reduce-scatter, uneven all-to-all,
      // broadcast) in fp32/bf16/int64, exact and timed, at sizes either side of RCCL's protocols.
      {"collective_check",
       "cross-rank",
       {{"collective_result_mismatch", rccl, fail, kRepeated, "collective-corrupt", isolate_node},
        {"collective_slow", rccl, warn, kRepeated, "slow-all-to-all", isolate_node}},
       {"training.collective_check_interval", "training.collective_check_max_mb", "diagnostics.collective_slow_ratio",
        "diagnostics.collective_slow_min_extra_s"},
       [](const DetectorContext& c) -> std::unique_ptr<Detector> {
         if (!several_ranks(c) || !c.loop || c.loop->ctx().cfg.collective_check_interval <= 0) return nullptr;
         return Detector::build<CollectiveCheck>(
             c.diag, c.log, c.sync,
             CollectiveCheckOptions::from(c.loop->ctx().cfg, c.diag, run_profile(c).shared_cores), c.faults, c.loop);
       }},

      // --- owned by the runner and the process group ---
      {"collectives",
       "run",
       {{"collective_timeout", rccl, fail, 1, "rank-stop|collective-hang", isolate_node},
        {"exchange_timeout", rccl, fail, 1, "test:CommChecksTest.VanishedRankZeroIsNamedThroughTheUnreachableStore",
         isolate_node},
        {"rendezvous_failed", rccl, fail, 1, "test:CommChecksTest.RendezvousNamesTheRankThatNeverJoined",
         check_config}},
       {"training.collective_timeout_s"},
       {}},
      // Rank 0's job report (reports/job_report.hpp), from every rank's row through the store.
      {"job_report", "run", {{"odd_node_slow", component::host, warn, 1, "slow-step", isolate_node}}, {}, {}},
      // The node under the job (checks/monitors/telemetry.hpp): ROCm SMI samples and the amdgpu
      // kernel log, read by the runner's NodeMonitor on its own thread.
      {"telemetry",
       "run",
       {{"ecc_uncorrectable_increase", hip_runtime, fail, kRepeated,
         "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings", isolate_node},
        {"ecc_correctable_increase", hip_runtime, warn, kRepeated,
         "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings", isolate_node},
        {"gpu_throttled", hip_runtime, warn, kRepeated, "test:Telemetry.FakeSmiEccIncreaseAndThrottleBecomeFindings",
         isolate_node},
        {"gpu_disappeared", hip_runtime, fail, kRepeated, "test:Telemetry.GpuThatStopsAnsweringOrIsNoLongerListedFails",
         isolate_node}},
       {"diagnostics.telemetry_interval_s"},
       {}},
      {"kernel_log",
       "run",
       {{"kernel_gpu_reset", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures",
         isolate_node},
        {"kernel_ring_timeout", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures",
         isolate_node},
        {"kernel_page_fault", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures",
         isolate_node},
        {"kernel_ras_event", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures",
         isolate_node},
        {"kernel_xgmi_error", hip_runtime, fail, kRepeated, "test:KernelLog.RecordedAmdgpuLinesMapToSignatures",
         isolate_node}},
       {"diagnostics.kernel_log_source"},
       {}},
      {"watchdog",
       "run",
       {{"hang", hip_runtime, fail, 1, "hang", isolate_node}, {"collective_hang", rccl, fail, 1, "hang", isolate_node}},
       {"diagnostics.watchdog_timeout_s"},
       {}},
      {"crash_classifier",
       "run",
       {{"out_of_memory", allocator, fail, 1, "test:ErrorClassifier.OomFindingCarriesSizesAndTheLastMemorySample",
         check_config},
        {"host_out_of_memory", component::host, fail, 1,
         "test:ErrorClassifier.CpuOutOfMemoryIsTheHostsNotTheAllocators", check_config},
        {"collective_error", rccl, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", isolate_node},
        {"illegal_memory_access", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents",
         report_upstream},
        {"gpu_hang", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", isolate_node},
        {"kernel_launch_failure", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents",
         check_config},
        {"no_device", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", check_config},
        {"blas_error", rocblas, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", report_upstream},
        {"miopen_error", miopen, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", report_upstream},
        {"rng_error", rocrand, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", report_upstream},
        {"hip_error", hip_runtime, fail, 1, "test:ErrorClassifier.RealMessagesMapToComponents", isolate_node},
        {"unclassified_crash", hip_runtime, fail, 1, "test:ReportWriter.CrashReportClassifiesTheExceptionAndExitsThree",
         rerun}},
       {},
       {}},
      {"baseline",
       "run",
       {{"loss_mismatch_vs_baseline", rocblas, fail, 1,
         "test:Baseline.OneUlpLossDifferenceFailsInDeterministicModeOnly", report_upstream},
        {"step_time_regression_vs_baseline", miopen, warn, 1,
         "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire", report_upstream},
        {"peak_memory_regression_vs_baseline", allocator, warn, 1,
         "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire", report_upstream},
        {"op_fingerprint_changed", miopen, warn, 1, "test:Baseline.SlowerStepsMoreMemoryAndChangedOpCountsFire",
         check_config},
        {"new_finding_vs_baseline", "", warn, kEveryOne, "test:Baseline.FindingsPresentNowButNotThenAreFlagged",
         report_upstream}},
       {"diagnostics.baseline_loss_rel_tolerance", "diagnostics.baseline_memory_growth_ratio"},
       {}},
  };
}

Registry<DetectorSpec>& detector_table() {
  static Registry<DetectorSpec> detectors(builtin_detectors());
  return detectors;
}

}  // namespace

const std::vector<DetectorSpec>& detector_registry() { return detector_table().entries(); }

DetectorRegistration register_detector(DetectorSpec spec) {
  return DetectorRegistration(detector_table(), std::move(spec));
}

const SignatureSpec* find_signature(std::string_view id) {
  const auto held = detector_table().lock();
  for (const auto& detector : detector_table().entries())
    for (const auto& signature : detector.signatures)
      if (signature.id == id) return &signature;
  return nullptr;
}

std::string detector_of_signature(std::string_view id) {
  const auto held = detector_table().lock();
  for (const auto& detector : detector_table().entries())
    for (const auto& signature : detector.signatures)
      if (signature.id == id) return detector.name;
  return {};
}

const DetectorSpec& registered_detector(std::string_view name) {
  const auto held = detector_table().lock();
  for (const auto& detector : detector_table().entries())
    if (detector.name == name) return detector;
  throw std::out_of_range(fmt::format("no detector '{}' is registered", name));
}

Action action_of(const Finding& f) { return action_of(f, find_signature(f.signature)); }

nlohmann::json to_json(const Finding& f) { return to_json(f, action_of(f)); }

namespace {
// Why `spec.make` built nothing: the setting that switches it on, or the ranks it needs.
std::string why_not_built(const DetectorSpec& spec) {
  if (spec.kind == "cross-rank") return "needs a process group of several ranks";
  if (spec.thresholds.empty()) return "off for this run";
  return "off for this run, see " + spec.thresholds.front();
}
}  // namespace

std::vector<std::unique_ptr<Detector>> make_detectors(const DetectorContext& ctx, RunCoverage* coverage) {
  std::vector<std::unique_ptr<Detector>> out;
  if (coverage) coverage->diagnostics_enabled = ctx.diag.enabled;
  if (!ctx.diag.enabled) return out;
  for (const auto& spec : detector_registry()) {
    if (!spec.make) continue;
    auto detector = spec.make(ctx);
    if (coverage) coverage->record(spec, detector != nullptr, why_not_built(spec));
    if (!detector) continue;
    detector->set_name(spec.name);
    out.push_back(std::move(detector));
  }
  return out;
}

}  // namespace rcl
