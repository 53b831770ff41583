#include "rocm_conformance_llm/runner.hpp"

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/diagnostics/baseline.hpp"
#include "rocm_conformance_llm/diagnostics/detector.hpp"
#include "rocm_conformance_llm/diagnostics/report.hpp"
#include "rocm_conformance_llm/diagnostics/run_summary.hpp"
#include "rocm_conformance_llm/diagnostics/watchdog.hpp"
#include "rocm_conformance_llm/distributed/comm_monitor.hpp"
#include "rocm_conformance_llm/distributed/communicator.hpp"
#include "rocm_conformance_llm/distributed/launch.hpp"
#include "rocm_conformance_llm/distributed/process_group_sync.hpp"
#include "rocm_conformance_llm/faults.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/trainer.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// A run never writes into a directory holding another run's results unless asked to: those
// reports may be someone's baseline.
void refuse_previous_run(const fs::path& dir, bool overwrite) {
  if (fs::exists(dir / "config.json") && !overwrite)
    throw ConfigError("--output-dir '" + dir.string() +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
}

class ConsoleObserver final : public StepObserver {
 public:
  explicit ConsoleObserver(std::vector<std::string> modes) : modes_(std::move(modes)) {}
  void on_step(const StepRecord& r) override { spdlog::info("{}", format_step_line(r, modes_)); }

 private:
  std::vector<std::string> modes_;
};

class MetricsObserver final : public StepObserver {
 public:
  explicit MetricsObserver(MetricsWriter& writer) : writer_(writer) {}
  void on_step(const StepRecord& r) override { writer_.write(r); }

 private:
  MetricsWriter& writer_;
};

class HeartbeatObserver final : public StepObserver {
 public:
  explicit HeartbeatObserver(Watchdog& watchdog) : watchdog_(watchdog) {}
  void on_step(const StepRecord& r) override { watchdog_.heartbeat(r.step); }

 private:
  Watchdog& watchdog_;
};

}  // namespace

int run_job(const RunConfig& run, bool overwrite) {
  const TrainingConfig& cfg = run.training;
  const LaunchInfo launch = detect_launch();
  init_logging(launch.rank, launch.world_size, cfg.log_per_rank);

  // Everything that can reject user input happens before the first file is written.
  const FaultPlan faults = FaultPlan::parse(run.inject);
  const fs::path out_dir = run.output_dir;
  if (launch.rank == 0) refuse_previous_run(out_dir, overwrite);
  std::optional<RunRecord> baseline;
  if (!run.baseline_dir.empty()) baseline = load_run_record(run.baseline_dir);
  const torch::Device device = resolve_device(cfg.device, launch.local_rank);
  // On a GPU the host threads only feed the device; on CPU the ranks of one host share its cores
  // (world size is the upper bound of ranks per host).
  configure_cpu_threads(cfg.num_threads, device.is_cuda() ? 1 : launch.world_size, !device.is_cuda());
  tune_host_allocator();
  set_deterministic(cfg.deterministic);
  const nlohmann::json environment = environment_report(device);

  FindingLog findings;
  RunSummary summary;
  nlohmann::json config_doc = to_json(run);
  config_doc["world_size"] = launch.world_size;
  config_doc["launcher"] = launch.launcher;
  ReportWriter report(out_dir, launch.rank, config_doc, environment, findings, summary,
                      run.diagnostics.warmup_steps);
  report.add_section("faults", faults.to_json());

  // Rendezvous (a rank that never arrives is a CollectiveError naming it), then the trainer,
  // which rejects a bad data file or an attention backend this libtorch lacks.
  std::shared_ptr<GradientSync> sync;
  try {
    sync = make_gradient_sync(launch, cfg, device);
  } catch (const CollectiveError& e) {
    findings.add(e.finding());
    fs::create_directories(out_dir);
    return report.write(RunOutcome::crashed, e.what());
  }
  RunContext ctx{cfg, run.diagnostics, run.stress_modes, device, out_dir};
  Trainer trainer(ctx, sync);

  fs::create_directories(out_dir);
  config_doc["environment"] = environment;
  if (launch.rank == 0) write_file_atomically(out_dir / "config.json", config_doc.dump(2) + "\n");
  spdlog::info("rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
               "world {} ({})",
               run.preset, run.stress_modes.empty() ? "none" : nlohmann::json(run.stress_modes).dump(),
               device.str(), TORCH_VERSION, RCL_TORCH_BUILD, environment.at("blas").get<std::string>(),
               launch.world_size, launch.launcher);
  spdlog::info("resolved config: {}", nlohmann::json(cfg).dump());
  spdlog::info("ROCm environment: {}", environment.at("env").dump());
  if (!faults.empty()) spdlog::warn("fault injection on: {}", faults.to_string());

  // Observers, in order: the summary first so a crash report has every finished step.
  MetricsWriter metrics(out_dir, launch.rank, run.stress_modes);
  MetricsObserver metrics_observer(metrics);
  ConsoleObserver console(run.stress_modes);
  trainer.add_observer(&summary);
  trainer.add_observer(&metrics_observer);
  trainer.add_observer(&console);

  std::optional<StepDetectors> detectors;
  if (run.diagnostics.enabled) {
    detectors.emplace(run.diagnostics, findings);
    trainer.add_observer(&*detectors);
  }
  auto comm_monitor = make_comm_monitor(sync, trainer.model()->parameters(), cfg, run.diagnostics, findings);
  if (comm_monitor) {
    try {
      comm_monitor->preflight();
    } catch (const CollectiveError& e) {
      findings.add(e.finding());
      return report.write(RunOutcome::crashed, e.what());
    }
    trainer.add_observer(comm_monitor.get());
  }

  // A hang never returns control to this thread: the watchdog writes the verdict and exits.
  Watchdog watchdog(run.diagnostics.watchdog_timeout_s, launch.rank, findings, [&](const Finding& hang) {
    const int code = report.write(RunOutcome::hung, hang.message);
    spdlog::default_logger()->flush();
    std::_Exit(code);
  });
  HeartbeatObserver heartbeat(watchdog);
  trainer.add_observer(&heartbeat);

  TrainerDiagnostics trainer_diagnostics{&findings, &watchdog, &faults, {}};
  if (auto group = std::dynamic_pointer_cast<ProcessGroupSync>(sync))
    trainer_diagnostics.all_gather = [group](const std::vector<double>& values) {
      return group->all_gather_values(values, "rng_mask_hash");
    };
  trainer.attach_diagnostics(std::move(trainer_diagnostics));

  try {
    const TrainSummary result = trainer.run();
    spdlog::info("done: {} steps, final loss {:.4f}, {:.0f} tok/s{}", result.steps_done,
                 result.losses.empty() ? 0.0 : result.losses.back(), result.mean_tokens_per_s,
                 result.loss_floor ? fmt::format(" (corpus loss floor {:.4f})", *result.loss_floor) : "");
  } catch (const CollectiveError& e) {
    watchdog.stop();
    findings.add(e.finding());
    return report.write(RunOutcome::crashed, e.what());
  } catch (const std::exception& e) {
    watchdog.stop();
    spdlog::error("run crashed: {}", e.what());
    return report.write_crash(e.what(), watchdog.current_phase());
  }
  watchdog.stop();

  if (detectors) detectors->finish();
  if (baseline) {
    const RunRecord now{summary.steps(), findings.snapshot(), config_doc};
    auto comparison = compare_with_baseline(now, *baseline, run.diagnostics, launch.rank);
    for (auto& f : comparison.findings) findings.add(std::move(f));
    report.add_section("baseline", comparison.summary);
  }
  return report.write(RunOutcome::completed);
}

}  // namespace rcl
