#include "rocm_conformance_llm/run/job.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/checks/attention_probe.hpp"
#include "rocm_conformance_llm/checks/host_read_count.hpp"
#include "rocm_conformance_llm/checks/memory.hpp"
#include "rocm_conformance_llm/checks/registry.hpp"
#include "rocm_conformance_llm/checks/telemetry.hpp"
#include "rocm_conformance_llm/checks/watchdog.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/platform/doctor.hpp"
#include "rocm_conformance_llm/platform/rocm_knobs.hpp"
#include "rocm_conformance_llm/reports/baseline.hpp"
#include "rocm_conformance_llm/reports/heartbeat.hpp"
#include "rocm_conformance_llm/reports/metrics_writer.hpp"
#include "rocm_conformance_llm/reports/progress.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"
#include "rocm_conformance_llm/reports/training_collectives.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"
#include "rocm_conformance_llm/run/signals.hpp"
#include "rocm_conformance_llm/run/wiring.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"
#include "rocm_conformance_llm/workload/memory_ballast.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// On a terminal (rank 0) one updating status line; elsewhere a plain line per step, so CI logs
// hold no control characters.
class ConsoleObserver final : public StepObserver {
 public:
  ConsoleObserver(std::vector<std::string> modes, const TrainingConfig& cfg, double summary_interval_s,
                  const FindingLog& findings, std::shared_ptr<StatusLineSink> status)
      : modes_(std::move(modes)), total_steps_(cfg.steps), max_duration_s_(cfg.max_duration_s),
        summary_interval_s_(summary_interval_s), findings_(findings), status_(std::move(status)) {}
  void on_step(const StepRecord& r) override {
    busy_s_ += r.step_time_s;
    if (status_) status_->show(format_progress(progress_at(r)));
    else spdlog::info("{}", format_step_line(r, modes_));
    summarize(r);
  }

 private:
  Progress progress_at(const StepRecord& r) const {
    Progress p{.step = r.step, .total_steps = total_steps_, .elapsed_s = seconds_since(started_),
               .max_duration_s = max_duration_s_, .tokens_per_s = r.tokens_per_s,
               .mean_step_time_s = busy_s_ / static_cast<double>(r.step)};
    for (const auto& f : findings_.snapshot())
      ++(f.severity == Severity::fail ? p.fail : f.severity == Severity::warn ? p.warn : p.info);
    return p;
  }

  // A soak's log is read hours later: every summary_interval_s one line with the throughput
  // over the interval (not one step's), the findings so far, the memory trend and the ETA.
  void summarize(const StepRecord& r) {
    window_tokens_ += r.tokens;
    window_busy_s_ += r.step_time_s;
    const int64_t memory = r.memory.allocated_bytes >= 0 ? r.memory.allocated_bytes : r.memory.rss_bytes;
    if (first_memory_ < 0) first_memory_ = last_memory_ = memory;
    const double since = seconds_since(last_summary_);
    if (summary_interval_s_ <= 0 || since < summary_interval_s_) return;
    Progress p = progress_at(r);
    p.tokens_per_s = window_busy_s_ > 0 ? static_cast<double>(window_tokens_) / window_busy_s_ : 0.0;
    spdlog::info("{}", format_soak_summary(format_progress(p), memory, last_memory_, first_memory_, since));
    window_tokens_ = 0;
    window_busy_s_ = 0;
    last_memory_ = memory;
    last_summary_ = SteadyClock::now();
  }

  std::vector<std::string> modes_;
  const int64_t total_steps_;
  const double max_duration_s_;
  const double summary_interval_s_;
  const FindingLog& findings_;
  std::shared_ptr<StatusLineSink> status_;  // null: plain lines
  const SteadyClock::time_point started_ = SteadyClock::now();
  double busy_s_ = 0;
  SteadyClock::time_point last_summary_ = started_;
  int64_t window_tokens_ = 0;
  double window_busy_s_ = 0;
  int64_t first_memory_ = -1, last_memory_ = -1;
};

class MetricsObserver final : public StepObserver {
 public:
  MetricsObserver(const fs::path& dir, int rank, std::vector<std::string> modes, std::optional<int64_t> keep_through)
      : writer_(dir, rank, std::move(modes), keep_through) {}
  // The node monitor's latest sample goes into each step line (it starts after the observers).
  void read_telemetry_from(const NodeMonitor* node) { node_ = node; }
  void on_step(const StepRecord& r) override { writer_.write(r, node_ ? node_->latest_sample() : nullptr); }

 private:
  MetricsWriter writer_;
  const NodeMonitor* node_ = nullptr;
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
// here, but for a checkpoint that does not fit the model, which only the model can tell
// (preflight, still before the first file): a rejected run leaves no file behind. Anything else
// that throws later gets a report.
struct RunSetup {
  LaunchInfo launch;
  FaultPlan faults;
  std::optional<RunRecord> baseline;
  torch::Device device{torch::kCPU};
  nlohmann::json environment;
  std::optional<ResumePoint> resume_from;  // a verified checkpoint that fits this run
  bool resume_in_place = false;         // it is one of --output-dir's own checkpoints
  nlohmann::json rocm_knobs;  // the variables the rocm.* keys set (platform/rocm_knobs.hpp)
  nlohmann::json doctor;      // the doctor's checks (platform/doctor.hpp)
  ParallelLayout parallel;    // tensor / data / expert parallel degrees this world allows
};

// The model-parallel degrees, fitted to the world (fallbacks recorded, never a crash). FSDP's
// units are whole dense blocks: the layout fits it by keeping the model whole (recorded), but
// experts the user asked for cannot be dropped silently: refused before anything is written.
ParallelLayout resolve_parallel_layout(const TrainingConfig& cfg, int world_size) {
  if (cfg.data_parallel == DataParallel::fsdp && world_size > 1 && cfg.moe_experts > 0)
    throw ConfigError(fmt::format("invalid training.data_parallel 'fsdp' with moe_experts={}: fsdp shards dense "
                                  "blocks only; allowed: fsdp with moe_experts=0, or data_parallel ddp, zero",
                                  cfg.moe_experts));
  return plan_parallel_layout(cfg, world_size);
}

RunIdentity identity_of(const RunConfig& run, int world_size) {
  return {nlohmann::json(run.training), run.stress_modes, world_size};
}

RunSetup setup(const RunConfig& run, bool overwrite) {
  RunSetup s;
  s.launch = detect_launch();
  init_logging(s.launch.rank, s.launch.world_size, run.training.log_per_rank);
  s.faults = FaultPlan::parse(run.inject);
  check_output_dir(run.output_dir);
  // The nan fault writes into block 0's gathered weight, which under FSDP exists only inside the
  // block's own forward.
  if (run.training.data_parallel == DataParallel::fsdp && s.launch.world_size > 1 && s.faults.requested(FaultKind::nan))
    throw ConfigError("invalid --inject nan with training.data_parallel 'fsdp' on several ranks: the weight it "
                      "strikes is not resident between blocks; allowed there: the other faults, or data_parallel "
                      "ddp, zero");
  if (run.resume == kResumeAuto) {
    s.resume_from = resolve_resume_auto(run.output_dir, identity_of(run, s.launch.world_size));
    s.resume_in_place = true;  // its own directory: a checkpoint of it, or an earlier attempt without one
  } else if (!run.resume.empty()) {
    s.resume_from = resolve_resume(run.resume, run.output_dir, identity_of(run, s.launch.world_size));
    std::error_code ec;
    s.resume_in_place = fs::equivalent(s.resume_from->dir.parent_path().parent_path(), run.output_dir, ec);
  }
  if (!run.training.data_path.empty() && !(fs::is_regular_file(run.training.data_path) &&
                                           std::ifstream(run.training.data_path).good()))
    throw ConfigError("invalid data_path '" + run.training.data_path + "': not a readable regular file");
  // A run never writes into a directory holding another run's results unless asked to: those
  // reports may be someone's baseline.
  if (s.launch.rank == 0 && fs::exists(fs::path(run.output_dir) / "config.json") && !overwrite && !s.resume_in_place)
    throw ConfigError("--output-dir '" + run.output_dir +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
  if (!run.baseline_dir.empty()) s.baseline = load_run_record(run.baseline_dir);
  const std::string gemm_env = prepare_gemm_environment(determinism_of(run.training) != Determinism::off);
  s.device = resolve_device(run.training.device, s.launch.local_rank);
  if (!gemm_env.empty()) spdlog::info("deterministic mode: set {} before the first GEMM", gemm_env);
  check_attention_backend(run.training, s.device.type());
  s.parallel = resolve_parallel_layout(run.training, s.launch.world_size);
  // On a GPU the host threads only feed the device; on CPU the ranks of one host share its cores
  // (world size is the upper bound of ranks per host).
  configure_cpu_threads(run.training.num_threads, s.device.is_cuda() ? 1 : s.launch.world_size, !s.device.is_cuda());
  tune_host_allocator();
  // Again now that the output directory is known (rocm.miopen_user_db=per-run); main applied
  // the rest before the first HIP call.
  s.rocm_knobs = apply_rocm_knobs(run.rocm, run.output_dir);
  for (const auto& [variable, knob] : s.rocm_knobs.items())
    if (knob.contains("replaced"))
      spdlog::warn("rocm config replaces {}={} from the environment with {}", variable,
                   knob.at("replaced").get<std::string>(), knob.at("value").get<std::string>());
  s.environment = environment_report(s.device);
  DoctorInputs doctor = doctor_inputs_of_this_process();
  doctor.device = s.device;
  s.doctor = doctor_to_json(run_doctor(doctor));
  return s;
}

// How long a rank whose collective failed watches its peers' heartbeat files for a sign of life
// (kHeartbeatInterval is 1 s: a live peer, even on a loaded host, rewrites its file within it).
inline constexpr std::chrono::milliseconds kStalledPeerWindow{3000};

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
        training_collectives_(run.diagnostics.warmup_steps),
        report_(run.output_dir, s_.launch.rank, config_doc_, s_.environment, findings_, summary_,
                run.diagnostics.warmup_steps) {
    report_.add_section("faults", s_.faults.to_json());
    report_.set_training_collectives(training_collectives_);
    if (run.ocp_stdout && s_.launch.rank == 0) report_.print_ocp_to_stdout();
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
      preflight();
      if (auto stopped = train()) return *stopped;
      stage_ = stage::final_checks;
      return finish();
    } catch (const CheckpointError&) {
      throw;  // a checkpoint that does not fit: exit 2 with one line, like any bad input
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
    doc["rocm_knobs"] = s_.rocm_knobs;
    doc["doctor"] = s_.doctor;
    return doc;
  }

  // The watchdog exists, and knows the loop's phase, from the training stage on.
  bool in_loop() const { return stage_.load() == stage::training; }
  std::string current_phase() const { return in_loop() ? watchdog_->current_phase() : stage_.load(); }

  // A CollectiveError carries its own finding (a rank missing from the rendezvous names it).
  // When the store could not name the lost peer, the peers' heartbeat files may. Then the process
  // exits at once: tearing down the process group can wait forever on the lost peer (Gloo's
  // worker, and libtorch 1.13's store server blocked on a request the peer left half-sent).
  int crashed(const CollectiveError& e) {
    if (watchdog_) watchdog_->stop();
    stop_node_monitor();
    Finding finding = e.finding();
    if (finding.evidence.value("missing_ranks", nlohmann::json::array()).empty() && s_.launch.world_size > 1) {
      const auto stalled = stalled_peers(run_.output_dir, s_.launch.rank, s_.launch.world_size,
                                         kStalledPeerWindow);
      if (!stalled.empty()) {
        finding.evidence["missing_ranks"] = stalled;
        finding.evidence["named_by"] = "heartbeat files";
        finding.message += fmt::format("; rank{} {} stopped updating {} (stopped or gone)", stalled.size() > 1 ? "s" : "",
                                       fmt::join(stalled, ","), stalled.size() > 1 ? "their heartbeats" : "its heartbeat");
      }
    }
    findings_.add(finding);
    const int code = report_.write(RunOutcome::crashed, finding.message);
    if (heartbeat_) heartbeat_->finish("crashed");
    spdlog::default_logger()->flush();
    std::_Exit(code);
  }

  int crashed(std::string_view what) {
    if (watchdog_) watchdog_->stop();
    stop_node_monitor();
    spdlog::error("run crashed: {}", what);
    const int code = report_.write_crash(what, current_phase());
    if (heartbeat_) heartbeat_->finish("crashed");
    return code;
  }

  // `phase` and `step`: where the run was when the signal stopped it. Under torchrun the signal
  // often follows a peer's death (torchrun stops the survivors): the peers whose heartbeats tell
  // at once that they are gone or frozen are named.
  int interrupted(int sig, const std::string& phase, int64_t step) {
    node_sections_as_of_now();
    const auto lost = s_.launch.world_size > 1 ? lost_peers_now(run_.output_dir, s_.launch.rank, s_.launch.world_size)
                                               : std::vector<int>{};
    report_.add_section("interruption", {{"signal", signals::name(sig)}, {"phase", phase}, {"step", step},
                                         {"missing_ranks", lost}});
    std::string message = fmt::format("stopped by {} in '{}' of step {}", signals::name(sig), phase, step);
    if (!lost.empty())
      message += fmt::format("; rank{} {} gone or stopped (heartbeat)", lost.size() > 1 ? "s" : "", fmt::join(lost, ","));
    return report_.write(RunOutcome::interrupted, message);
  }

  // Rendezvous, trainer, fault injector, detectors and their cross-rank preflight, the checkpoint
  // load: everything that may still refuse the run (a checkpoint that does not fit this model:
  // exit 2) comes before its first file. Then the run's files, observers and watchdog; every part
  // is attached to the trainer in run_wiring()'s order.
  void preflight() {
    const TrainingConfig& cfg = run_.training;
    stage_ = stage::rendezvous;
    s_.faults.stop_rank_if_planned(phase::rendezvous, 0, s_.launch.rank);
    sync_ = make_gradient_sync(s_.launch, cfg, s_.device);
    stage_ = stage::model;
    trainer_ = std::make_unique<Trainer>(
        RunContext{model_config(cfg, s_.parallel), run_.diagnostics, s_.device, run_.output_dir}, sync_);
    // As it ran (a world of one has nothing to shard); with DDP, where experts are split over ranks.
    if (cfg.data_parallel != DataParallel::ddp || trainer_->model()->parallel().expert)
      report_.add_section("data_parallel", data_parallel_section(cfg.data_parallel, *sync_, trainer_->model()));
    if (cfg.attention_backend != AttentionBackend::math) record_attention_kernel();  // SDPA's (refused on 1.13 before here)
    ballast_.emplace(cfg.memory_pressure_bytes, s_.device);
    trainer_->set_stop_check([] { return signals::received() != 0; });
    if (const auto floor = trainer_->data().loss_floor()) report_.add_section("loss_floor", *floor);
    injector_.emplace(s_.faults, s_.launch.rank, trainer_->model(), s_.device);
    stage_ = stage::detectors;
    RunCoverage coverage = run_coverage();
    detectors_ = make_detectors(DetectorContext{.diag = run_.diagnostics, .log = findings_, .loop = trainer_.get(),
                                                .faults = &s_.faults, .sync = sync_},
                                &coverage);
    report_.set_coverage(coverage);
    s_.faults.stop_rank_if_planned(phase::preflight, 0, s_.launch.rank);
    for (auto& d : detectors_) d->preflight();
    if (s_.resume_from) resume();

    write_run_header();
    if (run_.resume == kResumeAuto) report_.add_section("restarts", record_attempt(run_.output_dir, s_.launch.rank, s_.resume_from));
    // Resumed in place, metrics.jsonl keeps the steps up to the checkpoint and continues.
    metrics_.emplace(run_.output_dir, s_.launch.rank, run_.stress_modes,
                     s_.resume_in_place && s_.resume_from ? std::optional(s_.resume_from->step) : std::nullopt);
    prometheus_.emplace(run_.output_dir, s_.launch.rank, run_.diagnostics.prom_interval, findings_);
    console_.emplace(run_.stress_modes, cfg, run_.diagnostics.summary_interval_s, findings_,
                     s_.launch.rank == 0 && stderr_is_terminal() ? install_status_line() : nullptr);
    RunWiring wiring;
    wiring.add(part::run_summary, &summary_);
    wiring.add(part::metrics, &*metrics_);
    wiring.add(part::prometheus, &*prometheus_);
    wiring.add(part::console, &*console_);
    wiring.add(part::training_collectives, &training_collectives_);
    if (run_.diagnostics.count_host_reads) {
      host_reads_.emplace(*trainer_);
      wiring.add(part::host_read_count, &*host_reads_);
    }
    wiring.add(part::fault_injector, &*injector_);
    for (auto& d : detectors_) wiring.add(part::detectors, d.get());
    if (run_.diagnostics.memory_profile) {
      memory_profile_.emplace(trainer_->setup_memory());
      wiring.add(part::memory_profile, &*memory_profile_);
    }
    // One monitor per node (its first local rank), from here to the end: the "before" sample.
    if (run_.diagnostics.enabled && s_.launch.local_rank == 0) {
      node_ = std::make_unique<NodeMonitor>(run_.diagnostics, findings_, run_.output_dir, s_.launch.rank);
      node_->start();
      node_->record_coverage(coverage);
      wiring.add(part::node_monitor, node_.get());
      metrics_->read_telemetry_from(node_.get());
    }
    // A hang never returns control to the training thread: the watchdog writes the verdict and exits.
    watchdog_ = std::make_unique<Watchdog>(run_.diagnostics.watchdog_timeout_s, s_.launch.rank, findings_,
                                           [this](const Finding& hang) {
                                             node_sections_as_of_now();
                                             const int code = report_.write(RunOutcome::hung, hang.message);
                                             spdlog::default_logger()->flush();
                                             std::_Exit(code);
                                           });
    wiring.add(part::watchdog, watchdog_.get());
    coverage.record("watchdog", run_.diagnostics.watchdog_timeout_s > 0, "off (diagnostics.watchdog_timeout_s=0)");
    coverage.record("baseline", s_.baseline.has_value(), "no --baseline");
    report_.set_coverage(coverage);
    heartbeat_.emplace(run_.output_dir, s_.launch.rank, *watchdog_);
    if (!run_.checkpoint_interval.empty()) {
      checkpointer_.emplace(*trainer_, findings_, run_.checkpoint, run_.output_dir, identity_of(run_, s_.launch.world_size));
      wiring.add(part::checkpointer, &*checkpointer_);
    }
    wiring.attach_to(*trainer_);
    stage_ = stage::training;
  }

  // Which kernel SDPA's dispatcher gives the training call, in config.json and report.json from
  // the start (an out-of-memory's report needs it most). No fused kernel taking it means the math
  // path's B x H x T x T scores, which the sizing and the fit do not count: on an H200 a Q/K/V
  // layout the fused kernels refused took 24 GiB more than predicted and ran out of memory.
  void record_attention_kernel() {
    const TrainingConfig& cfg = run_.training;
    const std::string kernel = training_attention_kernel(*trainer_);
    const nlohmann::json section = {{"attention_backend", cfg.attention_backend}, {"training_kernel", kernel}};
    config_doc_["attention_kernel"] = section;
    report_.add_section("attention_kernel", section);
    if (kernel == "math" && cfg.attention_backend == AttentionBackend::sdpa && !s_.device.is_cpu())
      spdlog::warn("no fused SDPA kernel takes the training attention call (attention_backend=sdpa): it runs on the "
                   "math path, whose B x H x T x T scores the sizing and the fit do not count");
    else
      spdlog::info("training attention runs on the {} kernel (attention_backend={})", kernel,
                   name_of(cfg.attention_backend));
  }

  // The device and transport the checks run on, the process group's collectives, the stress
  // modes skipped; make_detectors and the runner's own checks add themselves.
  RunCoverage run_coverage() const {
    RunCoverage c;
    c.device = c10::DeviceTypeName(s_.device.type(), /*lower_case=*/true);
    c.gpu = !s_.device.is_cpu();
    c.world_size = sync_->world_size();
    if (c.world_size > 1) c.collective_backend = collective_backend(s_.device);
    c.record("collectives", c.world_size > 1, "one rank: no process group");
    for (const auto& [mode, reason] : run_.stress_skipped)
      for (const auto& spec : stress_mode_registry())
        if (spec.name == mode) c.skipped_modes.push_back({mode, spec.components, reason});
    return c;
  }

  // After every detector's preflight: the load restores the RNG states the next step draws from.
  void resume() {
    load_training_state(*trainer_, s_.resume_from->dir);
    const auto earlier = checkpoint_findings(s_.resume_from->dir, s_.launch.rank);
    spdlog::info("resumed from {} at step {}", s_.resume_from->dir.string(), trainer_->steps_done());
    for (const auto& f : earlier) findings_.add(f);
    report_.add_section("resume", {{"checkpoint", s_.resume_from->dir.string()},
                                   {"step", s_.resume_from->step},
                                   {"findings_restored", earlier.size()}});
  }

  // The run is on: its directory, config.json and the header lines of its log.
  void write_run_header() {
    config_doc_["environment"] = s_.environment;
    config_doc_["collective_backend"] = sync_->backend();  // which c10d group this run's collectives used
    config_doc_["parallel_layout"] = to_json(s_.parallel);
    // Sized as it trains: the comm mode's experts are in the model only where the world shards them.
    config_doc_["sizing"] = sizing_json(run_, model_config(run_.training, s_.parallel));
    fs::create_directories(run_.output_dir);
    if (s_.launch.rank == 0) write_file_atomically(fs::path(run_.output_dir) / "config.json", config_doc_.dump(2) + "\n");
    spdlog::info("rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
                 "world {} ({}, collectives: {})",
                 run_.preset, run_.stress_modes.empty() ? "none" : nlohmann::json(run_.stress_modes).dump(),
                 s_.device.str(), TORCH_VERSION, RCL_TORCH_BUILD, s_.environment.at("blas").get<std::string>(),
                 s_.launch.world_size, s_.launch.launcher, sync_->backend());
    spdlog::info("resolved config: {}", nlohmann::json(run_.training).dump());
    for (const auto& note : s_.parallel.notes) spdlog::info("parallel layout: {}", note);
    const TrainingConfig& model = trainer_->model_config();
    spdlog::info("model: {} parameters, {:.3g} training FLOPs/token; data: {}", parameter_count(model),
                 flops_per_token(model), trainer_->data().describe());
    spdlog::info("ROCm environment: {}", s_.environment.at("env").dump());
    if (!s_.faults.empty()) spdlog::warn("fault injection on: {}", s_.faults.to_string());
  }

  // Returns an exit code when a stop signal ended the loop (no whole-run checks on a cut run).
  std::optional<int> train() {
    const TrainSummary result = trainer_->run();
    watchdog_->stop();
    // Within the signal's grace (signals::kStopGrace) from the signal: a checkpoint that does
    // not fit is cut short by the forced report, and the previous one stays (docs/checkpoints.md).
    if (checkpointer_) checkpointer_->save(result.stopped_by_request ? "signal" : "final");
    if (result.stopped_by_request) {
      const int code = interrupted(signals::received(), "step_boundary", result.steps_done);
      heartbeat_->finish("interrupted");
      return code;
    }
    spdlog::info("done: {} steps, final loss {:.4f}, {:.0f} tok/s{}", result.steps_done,
                 result.losses.empty() ? 0.0 : result.losses.back(), result.mean_tokens_per_s,
                 result.loss_floor ? fmt::format(" (corpus loss floor {:.4f})", *result.loss_floor) : "");
    return std::nullopt;
  }

  // The "after" sample and the throttle findings, then the sections. Not for a hang: a sampler
  // stuck in a driver call would hold the verdict back.
  void stop_node_monitor() {
    if (node_) node_->stop();
    node_sections_as_of_now();
  }

  // What the node monitor knows now (the kernel log read once more: a GPU reset line is a hang's
  // best evidence), and the memory profile so far.
  void node_sections_as_of_now() {
    if (node_) {
      node_->drain_kernel_log();
      const nlohmann::json sections = node_->report_sections();
      for (const auto& [key, value] : sections.items()) report_.add_section(key, value);
    }
    if (memory_profile_) report_.add_section("memory_profile", memory_profile_->to_json());
  }

  // Whole-run checks, the --baseline comparison, the verdict.
  int finish() {
    stop_node_monitor();
    for (auto& d : detectors_) {
      d->finish();
      const nlohmann::json sections = d->report_sections();
      for (const auto& [key, value] : sections.items()) report_.add_section(key, value);
    }
    if (s_.baseline) {
      const RunRecord now{summary_.steps(), findings_.snapshot(), config_doc_};
      auto comparison = compare_with_baseline(now, *s_.baseline, run_.diagnostics, s_.launch.rank);
      for (auto& f : comparison.findings) findings_.add(std::move(f));
      report_.add_section("baseline", comparison.summary);
    }
    const int code = report_.write(RunOutcome::completed);
    heartbeat_->finish("completed");
    return code;
  }

  const RunConfig& run_;
  RunSetup s_;
  FindingLog findings_;
  RunSummary summary_;
  nlohmann::json config_doc_;
  TrainingCollectives training_collectives_;
  ReportWriter report_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<Trainer> trainer_;
  std::optional<MemoryBallast> ballast_;
  std::optional<HostReadCount> host_reads_;
  std::optional<MetricsObserver> metrics_;
  std::optional<PrometheusObserver> prometheus_;
  std::optional<ConsoleObserver> console_;
  std::optional<FaultInjector> injector_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  std::optional<MemoryProfile> memory_profile_;
  std::unique_ptr<NodeMonitor> node_;
  std::unique_ptr<Watchdog> watchdog_;
  std::optional<HeartbeatFile> heartbeat_;  // reads the watchdog: destroyed before it
  std::optional<Checkpointer> checkpointer_;
  std::atomic<const char*> stage_{stage::rendezvous};  // read by the signal watcher
};

}  // namespace

int run_job(const RunConfig& run, bool overwrite) {
  signals::install();
  return Job(run, setup(run, overwrite)).run();
}

int run_attention_probe(const RunConfig& run) {
  // stdout is the probe's JSON only: warnings (e.g. the reference BLAS, found on the GPU
  // machine's wheel) go to the console logger on stderr, before anything can warn.
  init_logging(0, 1, false);
  spdlog::set_level(spdlog::level::warn);
  const FaultPlan faults = FaultPlan::parse(run.inject);
  const torch::Device device = resolve_device(run.training.device, 0);
  check_attention_backend(run.training, device.type());
  configure_cpu_threads(run.training.num_threads, 1, !device.is_cuda());
  Trainer trainer(RunContext{.cfg = run.training, .diag = run.diagnostics, .device = device});
  const MemoryBallast ballast(run.training.memory_pressure_bytes, device);  // the run's memory pressure
  // As at the first step: a fault meant for later steps does not strike a one-shot probe.
  const auto probe = probe_trainer_attention(trainer, faults.fires(FaultKind::attention_mask_corrupt, 1, 0));
  const nlohmann::json report = attention_probe_report(trainer, probe);
  std::cout << report.dump(2) << "\n";
  return report.at("passed").get<bool>() ? kExitClean : kExitFailFinding;
}

}  // namespace rcl
