#include "rocm_conformance_llm/runner.hpp"

#include <filesystem>

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/diagnostics/detector.hpp"
#include "rocm_conformance_llm/distributed/launch.hpp"
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
void prepare_output_dir(const fs::path& dir, bool overwrite) {
  if (fs::exists(dir / "config.json") && !overwrite)
    throw ConfigError("--output-dir '" + dir.string() +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
  fs::create_directories(dir);
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

}  // namespace

int run_job(const RunConfig& run, bool overwrite) {
  const TrainingConfig& cfg = run.training;
  const LaunchInfo launch = detect_launch();
  init_logging(launch.rank, launch.world_size, cfg.log_per_rank);

  // Everything that can reject user input happens before the first file is written.
  const FaultPlan faults = FaultPlan::parse(run.inject);
  if (!run.baseline_dir.empty() && !fs::exists(fs::path(run.baseline_dir) / "metrics.jsonl"))
    throw ConfigError("--baseline '" + run.baseline_dir + "' holds no previous run (no metrics.jsonl)");
  const torch::Device device = resolve_device(cfg.device, launch.local_rank);
  const fs::path out_dir = run.output_dir;
  if (launch.rank == 0) prepare_output_dir(out_dir, overwrite);

  configure_cpu_threads(cfg.num_threads);
  set_deterministic(cfg.deterministic);
  const nlohmann::json environment = environment_report(device);

  nlohmann::json config_doc = to_json(run);
  config_doc["world_size"] = launch.world_size;
  config_doc["launcher"] = launch.launcher;
  config_doc["environment"] = environment;
  if (launch.rank == 0) write_file_atomically(out_dir / "config.json", config_doc.dump(2) + "\n");

  spdlog::info("rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
               "world {}",
               run.preset, run.stress_modes.empty() ? "none" : nlohmann::json(run.stress_modes).dump(),
               device.str(), TORCH_VERSION, RCL_TORCH_BUILD, environment.at("blas").get<std::string>(),
               launch.world_size);
  spdlog::info("resolved config: {}", nlohmann::json(cfg).dump());
  spdlog::info("ROCm environment: {}", environment.at("env").dump());

  RunContext ctx{cfg, run.diagnostics, run.stress_modes, device, out_dir};
  Trainer trainer(ctx);
  MetricsWriter metrics(out_dir, launch.rank, run.stress_modes);
  MetricsObserver metrics_observer(metrics);
  ConsoleObserver console(run.stress_modes);
  trainer.add_observer(&metrics_observer);
  trainer.add_observer(&console);

  const TrainSummary summary = trainer.run();
  spdlog::info("done: {} steps, final loss {:.4f}, {:.0f} tok/s", summary.steps_done,
               summary.losses.empty() ? 0.0 : summary.losses.back(), summary.mean_tokens_per_s);
  return kExitClean;
}

}  // namespace rcl
