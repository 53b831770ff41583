#include "rocm_conformance_llm/runner.hpp"

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/diagnostics/baseline.hpp"
#include "rocm_conformance_llm/diagnostics/registry.hpp"
#include "rocm_conformance_llm/diagnostics/report.hpp"
#include "rocm_conformance_llm/diagnostics/run_summary.hpp"
#include "rocm_conformance_llm/diagnostics/watchdog.hpp"
#include "rocm_conformance_llm/distributed/communicator.hpp"
#include "rocm_conformance_llm/distributed/launch.hpp"
#include "rocm_conformance_llm/distributed/process_group_sync.hpp"
#include "rocm_conformance_llm/faults.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/trainer.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

class ConsoleObserver final : public StepObserver {
 public:
  explicit ConsoleObserver(std::vector<std::string> modes) : modes_(std::move(modes)) {}
  void on_step(const StepRecord& r) override { spdlog::info("{}", format_step_line(r, modes_)); }

 private:
  std::vector<std::string> modes_;
};

class MetricsObserver final : public StepObserver {
 public:
  MetricsObserver(const fs::path& dir, int rank, std::vector<std::string> modes) : writer_(dir, rank, std::move(modes)) {}
  void on_step(const StepRecord& r) override { writer_.write(r); }

 private:
  MetricsWriter writer_;
};

// What the run is, decided before anything is written: every ConfigError (exit 2) comes from
// here, so a rejected run leaves no file behind.
struct RunSetup {
  LaunchInfo launch;
  FaultPlan faults;
  std::optional<RunRecord> baseline;
  torch::Device device{torch::kCPU};
  nlohmann::json environment;
};

RunSetup setup(const RunConfig& run, bool overwrite) {
  RunSetup s;
  s.launch = detect_launch();
  init_logging(s.launch.rank, s.launch.world_size, run.training.log_per_rank);
  s.faults = FaultPlan::parse(run.inject);
  // A run never writes into a directory holding another run's results unless asked to: those
  // reports may be someone's baseline.
  if (s.launch.rank == 0 && fs::exists(fs::path(run.output_dir) / "config.json") && !overwrite)
    throw ConfigError("--output-dir '" + run.output_dir +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
  if (!run.baseline_dir.empty()) s.baseline = load_run_record(run.baseline_dir);
  s.device = resolve_device(run.training.device, s.launch.local_rank);
  // On a GPU the host threads only feed the device; on CPU the ranks of one host share its cores
  // (world size is the upper bound of ranks per host).
  configure_cpu_threads(run.training.num_threads, s.device.is_cuda() ? 1 : s.launch.world_size, !s.device.is_cuda());
  tune_host_allocator();
  s.environment = environment_report(s.device);
  return s;
}

// One run's parts, built in order; the watchdog is destroyed first.
class Job {
 public:
  Job(const RunConfig& run, RunSetup setup)
      : run_(run),
        s_(std::move(setup)),
        config_doc_(config_doc()),
        report_(run.output_dir, s_.launch.rank, config_doc_, s_.environment, findings_, summary_,
                run.diagnostics.warmup_steps) {
    report_.add_section("faults", s_.faults.to_json());
  }

  int run() {
    if (auto early_exit = preflight()) return *early_exit;
    if (auto crashed = train()) return *crashed;
    return finish();
  }

 private:
  nlohmann::json config_doc() const {
    nlohmann::json doc = to_json(run_);
    doc["world_size"] = s_.launch.world_size;
    doc["launcher"] = s_.launch.launcher;
    return doc;
  }

  int crashed(const CollectiveError& e) {
    if (watchdog_) watchdog_->stop();
    findings_.add(e.finding());
    fs::create_directories(run_.output_dir);
    return report_.write(RunOutcome::crashed, e.what());
  }

  // Rendezvous, trainer, files, observers, detectors, watchdog; the cross-rank preflight.
  // Returns an exit code when the run cannot start (a rank missing from the rendezvous).
  std::optional<int> preflight() {
    const TrainingConfig& cfg = run_.training;
    // A rank that never arrives is a CollectiveError naming it. The trainer rejects a bad data
    // file or an attention backend this libtorch lacks (ConfigError: nothing written yet).
    try {
      sync_ = make_gradient_sync(s_.launch, cfg, s_.device);
    } catch (const CollectiveError& e) {
      return crashed(e);
    }
    trainer_ = std::make_unique<Trainer>(RunContext{cfg, run_.diagnostics, run_.stress_modes, s_.device, run_.output_dir},
                                         sync_);
    write_run_header();

    // Observers, in order: the summary first so a crash report has every finished step.
    metrics_.emplace(run_.output_dir, s_.launch.rank, run_.stress_modes);
    console_.emplace(run_.stress_modes);
    trainer_->add_observer(&summary_);
    trainer_->add_observer(&*metrics_);
    trainer_->add_observer(&*console_);
    // Faults strike before the checks look.
    injector_.emplace(s_.faults, s_.launch.rank, trainer_->model(), s_.device);
    trainer_->add_hooks(&*injector_);
    detectors_ = make_detectors(DetectorContext{.diag = run_.diagnostics, .log = findings_, .trainer = trainer_.get(),
                                                .faults = &s_.faults, .sync = sync_});
    try {
      for (auto& d : detectors_) d->preflight();
    } catch (const CollectiveError& e) {
      return crashed(e);
    }
    for (auto& d : detectors_) {
      trainer_->add_observer(d.get());
      trainer_->add_hooks(d.get());
    }
    // A hang never returns control to the training thread: the watchdog writes the verdict and exits.
    watchdog_ = std::make_unique<Watchdog>(run_.diagnostics.watchdog_timeout_s, s_.launch.rank, findings_,
                                           [this](const Finding& hang) {
                                             const int code = report_.write(RunOutcome::hung, hang.message);
                                             spdlog::default_logger()->flush();
                                             std::_Exit(code);
                                           });
    trainer_->add_observer(watchdog_.get());
    trainer_->add_hooks(watchdog_.get());
    return std::nullopt;
  }

  void write_run_header() {
    fs::create_directories(run_.output_dir);
    config_doc_["environment"] = s_.environment;
    if (s_.launch.rank == 0) write_file_atomically(fs::path(run_.output_dir) / "config.json", config_doc_.dump(2) + "\n");
    spdlog::info("rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
                 "world {} ({})",
                 run_.preset, run_.stress_modes.empty() ? "none" : nlohmann::json(run_.stress_modes).dump(),
                 s_.device.str(), TORCH_VERSION, RCL_TORCH_BUILD, s_.environment.at("blas").get<std::string>(),
                 s_.launch.world_size, s_.launch.launcher);
    spdlog::info("resolved config: {}", nlohmann::json(run_.training).dump());
    spdlog::info("ROCm environment: {}", s_.environment.at("env").dump());
    if (!s_.faults.empty()) spdlog::warn("fault injection on: {}", s_.faults.to_string());
  }

  // Returns an exit code when the loop crashed.
  std::optional<int> train() {
    try {
      const TrainSummary result = trainer_->run();
      spdlog::info("done: {} steps, final loss {:.4f}, {:.0f} tok/s{}", result.steps_done,
                   result.losses.empty() ? 0.0 : result.losses.back(), result.mean_tokens_per_s,
                   result.loss_floor ? fmt::format(" (corpus loss floor {:.4f})", *result.loss_floor) : "");
    } catch (const CollectiveError& e) {
      return crashed(e);
    } catch (const std::exception& e) {
      watchdog_->stop();
      spdlog::error("run crashed: {}", e.what());
      return report_.write_crash(e.what(), watchdog_->current_phase());
    }
    watchdog_->stop();
    return std::nullopt;
  }

  // Whole-run checks, the --baseline comparison, the verdict.
  int finish() {
    for (auto& d : detectors_) d->finish();
    if (s_.baseline) {
      const RunRecord now{summary_.steps(), findings_.snapshot(), config_doc_};
      auto comparison = compare_with_baseline(now, *s_.baseline, run_.diagnostics, s_.launch.rank);
      for (auto& f : comparison.findings) findings_.add(std::move(f));
      report_.add_section("baseline", comparison.summary);
    }
    return report_.write(RunOutcome::completed);
  }

  const RunConfig& run_;
  RunSetup s_;
  FindingLog findings_;
  RunSummary summary_;
  nlohmann::json config_doc_;
  ReportWriter report_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<Trainer> trainer_;
  std::optional<MetricsObserver> metrics_;
  std::optional<ConsoleObserver> console_;
  std::optional<FaultInjector> injector_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

int run_job(const RunConfig& run, bool overwrite) { return Job(run, setup(run, overwrite)).run(); }

}  // namespace rcl
