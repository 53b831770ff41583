#include "rocm_conformance_llm/runner.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/diagnostics/attention_probe.hpp"
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
#include "rocm_conformance_llm/signals.hpp"
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

// The output directory must be one this process can create files in; checked before anything
// runs, so every later failure has somewhere to put its report.
void check_output_dir(const std::string& dir) {
  fs::path existing = fs::absolute(dir);
  while (!fs::exists(existing) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (!fs::is_directory(existing))
    throw ConfigError("--output-dir '" + dir + "': " + existing.string() + " exists and is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw ConfigError("--output-dir '" + dir + "': " + existing.string() + " is not writable");
}

// What the run is, decided before anything is written: every ConfigError (exit 2) comes from
// here, so a rejected run leaves no file behind. Anything that throws later gets a report.
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
  check_output_dir(run.output_dir);
  if (!run.training.data_path.empty() && !(fs::is_regular_file(run.training.data_path) &&
                                           std::ifstream(run.training.data_path).good()))
    throw ConfigError("invalid data_path '" + run.training.data_path + "': not a readable regular file");
  // A run never writes into a directory holding another run's results unless asked to: those
  // reports may be someone's baseline.
  if (s.launch.rank == 0 && fs::exists(fs::path(run.output_dir) / "config.json") && !overwrite)
    throw ConfigError("--output-dir '" + run.output_dir +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
  if (!run.baseline_dir.empty()) s.baseline = load_run_record(run.baseline_dir);
  s.device = resolve_device(run.training.device, s.launch.local_rank);
  check_attention_backend(run.training, s.device.type());
  // On a GPU the host threads only feed the device; on CPU the ranks of one host share its cores
  // (world size is the upper bound of ranks per host).
  configure_cpu_threads(run.training.num_threads, s.device.is_cuda() ? 1 : s.launch.world_size, !s.device.is_cuda());
  tune_host_allocator();
  s.environment = environment_report(s.device);
  return s;
}

// Where the job is; a crash or a stop before the training loop names it as its phase (in the
// loop, the watchdog's phase is the precise one).
namespace stage {
inline constexpr const char* rendezvous = "setup_rendezvous";
inline constexpr const char* model = "setup_model";  // data, model, optimizer, memory ballast
inline constexpr const char* detectors = "setup_detectors";
inline constexpr const char* training = "training";
inline constexpr const char* final_checks = "final_checks";
}  // namespace stage

// One run's parts, built in order; the watchdog is destroyed first.
// The error boundary: from run() on, every exception ends in a "crashed" report (exit 3) and
// every stop signal in an "interrupted" one (exit 4).
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
  ~Job() { signals::set_force_stop({}); }

  int run() {
    // The main thread may be stuck (a collective, a wedged kernel): the signal watcher writes
    // the verdict then.
    signals::set_force_stop([this](int sig) {
      const int code = interrupted(sig, current_phase(), in_loop() ? watchdog_->current_step() : 0);
      spdlog::default_logger()->flush();
      std::_Exit(code);
    });
    try {
      fs::create_directories(run_.output_dir);
      preflight();
      if (auto stopped = train()) return *stopped;
      stage_ = stage::final_checks;
      return finish();
    } catch (const CollectiveError& e) {
      return crashed(e);
    } catch (const std::exception& e) {
      return crashed(e.what());
    } catch (...) {
      return crashed("unknown exception");
    }
  }

 private:
  nlohmann::json config_doc() const {
    nlohmann::json doc = to_json(run_);
    doc["world_size"] = s_.launch.world_size;
    doc["launcher"] = s_.launch.launcher;
    return doc;
  }

  // The watchdog exists, and knows the loop's phase, from the training stage on.
  bool in_loop() const { return stage_.load() == stage::training; }
  std::string current_phase() const { return in_loop() ? watchdog_->current_phase() : stage_.load(); }

  // A CollectiveError carries its own finding (a rank missing from the rendezvous names it).
  int crashed(const CollectiveError& e) {
    if (watchdog_) watchdog_->stop();
    findings_.add(e.finding());
    return report_.write(RunOutcome::crashed, e.what());
  }

  int crashed(std::string_view what) {
    if (watchdog_) watchdog_->stop();
    spdlog::error("run crashed: {}", what);
    return report_.write_crash(what, current_phase());
  }

  // `phase` and `step`: where the run was when the signal stopped it.
  int interrupted(int sig, const std::string& phase, int64_t step) {
    report_.add_section("interruption", {{"signal", signals::name(sig)}, {"phase", phase}, {"step", step}});
    return report_.write(RunOutcome::interrupted,
                         fmt::format("stopped by {} in '{}' of step {}", signals::name(sig), phase, step));
  }

  // Rendezvous, trainer, files, observers, detectors, watchdog; the cross-rank preflight.
  void preflight() {
    const TrainingConfig& cfg = run_.training;
    stage_ = stage::rendezvous;
    sync_ = make_gradient_sync(s_.launch, cfg, s_.device);
    stage_ = stage::model;
    trainer_ = std::make_unique<Trainer>(RunContext{cfg, run_.diagnostics, run_.stress_modes, s_.device, run_.output_dir},
                                         sync_);
    trainer_->set_stop_check([] { return signals::received() != 0; });
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
    stage_ = stage::detectors;
    detectors_ = make_detectors(DetectorContext{.diag = run_.diagnostics, .log = findings_, .trainer = trainer_.get(),
                                                .faults = &s_.faults, .sync = sync_});
    for (auto& d : detectors_) d->preflight();
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
    stage_ = stage::training;
  }

  void write_run_header() {
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

  // Returns an exit code when a stop signal ended the loop (no whole-run checks on a cut run).
  std::optional<int> train() {
    const TrainSummary result = trainer_->run();
    watchdog_->stop();
    if (result.stopped_by_request) return interrupted(signals::received(), "step_boundary", result.steps_done);
    spdlog::info("done: {} steps, final loss {:.4f}, {:.0f} tok/s{}", result.steps_done,
                 result.losses.empty() ? 0.0 : result.losses.back(), result.mean_tokens_per_s,
                 result.loss_floor ? fmt::format(" (corpus loss floor {:.4f})", *result.loss_floor) : "");
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
  std::atomic<const char*> stage_{stage::rendezvous};  // read by the signal watcher
};

}  // namespace

int run_job(const RunConfig& run, bool overwrite) {
  signals::install();
  return Job(run, setup(run, overwrite)).run();
}

int run_attention_probe(const RunConfig& run) {
  const FaultPlan faults = FaultPlan::parse(run.inject);
  const torch::Device device = resolve_device(run.training.device, 0);
  check_attention_backend(run.training, device.type());
  configure_cpu_threads(run.training.num_threads, 1, !device.is_cuda());
  spdlog::set_level(spdlog::level::warn);  // stdout is the probe's JSON only
  Trainer trainer(RunContext{.cfg = run.training, .diag = run.diagnostics, .device = device});
  // As at the first step: a fault meant for later steps does not strike a one-shot probe.
  const auto results = probe_trainer_attention(trainer, faults.fires(FaultKind::attention_mask_corrupt, 1, 0));
  const nlohmann::json report = attention_probe_report(trainer, results);
  std::cout << report.dump(2) << "\n";
  return report.at("passed").get<bool>() ? kExitClean : kExitFailFinding;
}

}  // namespace rcl
