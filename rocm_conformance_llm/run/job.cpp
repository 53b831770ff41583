#include "rocm_conformance_llm/run/job.hpp"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/memory.hpp"
#include "rocm_conformance_llm/checks/monitors/host_read_count.hpp"
#include "rocm_conformance_llm/checks/monitors/telemetry.hpp"
#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"
#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/reports/console_observer.hpp"
#include "rocm_conformance_llm/reports/heartbeat.hpp"
#include "rocm_conformance_llm/reports/job_records.hpp"
#include "rocm_conformance_llm/reports/metrics_observer.hpp"
#include "rocm_conformance_llm/reports/progress.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"
#include "rocm_conformance_llm/reports/throughput.hpp"
#include "rocm_conformance_llm/reports/training_collectives.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/run/explain_step.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"
#include "rocm_conformance_llm/run/run_setup.hpp"
#include "rocm_conformance_llm/run/signals.hpp"
#include "rocm_conformance_llm/run/wiring.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"
#include "rocm_conformance_llm/workload/memory_ballast.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

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

// config.json as the run starts; the job adds what it learns on the way (the attention kernel,
// the environment, the collectives' backend, the parallel layout, the sizing as trained).
nlohmann::json config_doc_of(const RunConfig& run, const RunSetup& s) {
  nlohmann::json doc = to_json(run);
  doc["world_size"] = s.launch.world_size;
  doc["launcher"] = s.launch.launcher;
  doc["rocm_knobs"] = s.rocm_knobs;
  doc["doctor"] = s.doctor;
  doc["network"] = s.network;
  // Where the run met the host, like the environment: the free memory it was checked against.
  if (run.host_memory) doc["host_memory"] = run.host_memory->to_json();
  return doc;
}

// What the run records: its findings and steps, config.json, and the writer of report.json.
struct RunRecords {
  RunRecords(const RunConfig& run, const RunSetup& s)
      : config_doc(config_doc_of(run, s)),
        training_collectives(run.diagnostics.warmup_steps),
        report(run.output_dir, s.launch.rank, config_doc, s.environment, findings, summary,
               run.diagnostics.warmup_steps) {}
  FindingLog findings{find_signature};
  RunSummary summary;
  nlohmann::json config_doc;
  TrainingCollectives training_collectives;
  ReportWriter report;
};

// The training itself: the gradient sync, the trainer, the memory ballast, the fault injector.
struct TrainingParts {
  std::shared_ptr<GradientSync> sync;
  std::unique_ptr<Trainer> trainer;
  std::optional<MemoryBallast> ballast;
  std::optional<FaultInjector> injector;
};

// What every step is written to and shown on.
struct StepOutputs {
  std::optional<MetricsObserver> metrics;
  std::optional<PrometheusObserver> prometheus;
  std::optional<ConsoleObserver> console;
};

// The checks and monitors. The heartbeat reads the watchdog: destroyed before it.
struct RunChecks {
  std::optional<HostReadCount> host_reads;
  std::vector<std::unique_ptr<Detector>> detectors;
  std::optional<MemoryProfile> memory_profile;
  std::unique_ptr<NodeMonitor> node;
  std::unique_ptr<Watchdog> watchdog;
  std::optional<HeartbeatFile> heartbeat;
};

// One run's parts, built in order by preflight and attached through the wiring table.
// The error boundary: from run() on, every exception ends in a "crashed" report (exit 3) and
// every stop signal in an "interrupted" one (exit 4).
class Job {
 public:
  Job(const RunConfig& run, RunSetup setup) : run_(run), s_(std::move(setup)), records_(run_, s_) {
    report().add_section("faults", s_.faults.to_json());
    report().set_training_collectives(records_.training_collectives);
    report().add_section("identity", to_json(identity()));
    if (run.ocp_stdout && s_.launch.rank == 0) report().print_ocp_to_stdout();
  }
  ~Job() { signals::set_force_stop({}); }

  int run() {
    // The main thread may be stuck (a collective, a wedged kernel): the signal watcher writes
    // the verdict then.
    signals::set_force_stop([this](int sig) {
      // A verdict written before the signal stands (interrupted() returns its code).
      exit_now(interrupted(sig, current_phase(), in_loop() ? checks_.watchdog->current_step() : 0));
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

  // --explain-step: the trainer and what acts inside its step, built as preflight builds them (the
  // detectors without their cross-rank preflight); the parts that write the run's files or start
  // a thread are listed by their type. Nothing is written and no step runs. Rank 0's text ("" on
  // the others).
  std::string explain() {
    build_training();
    checks_.detectors = make_detectors(detector_context(), nullptr);
    RunWiring wiring;
    wiring.describe<RunSummary>(part::run_summary);
    wiring.describe<MetricsObserver>(part::metrics);
    wiring.describe<PrometheusObserver>(part::prometheus);
    wiring.describe<ConsoleObserver>(part::console);
    wiring.describe<TrainingCollectives>(part::training_collectives);
    if (several_ranks()) wiring.describe<JobRecords>(part::job_records);
    add_step_checks(wiring);
    if (run_.diagnostics.memory_profile) wiring.describe<MemoryProfile>(part::memory_profile);
    if (monitors_node()) wiring.describe<NodeMonitor>(part::node_monitor);
    wiring.describe<Watchdog>(part::watchdog);
    if (checkpoints()) wiring.describe<Checkpointer>(part::checkpointer);
    const std::string heading = fmt::format(
        "rocm-conformance-llm --explain-step: preset {} | stress {} | {} micro-batch(es) a step | world {} | device {}",
        run_.preset, run_.stress_modes.empty() ? "none" : fmt::format("{}", fmt::join(run_.stress_modes, ",")),
        trainer().model_config().grad_accum_steps, s_.launch.world_size, s_.device.str());
    return s_.launch.rank == 0 ? explain_step_text(heading, wiring.in_order()) : "";
  }

 private:
  ReportWriter& report() { return records_.report; }

  RankIdentity identity() const {
    return {.world_rank = s_.launch.rank,
            .local_rank = s_.launch.local_rank,
            .host = host_name(),
            .device = s_.device.str(),
            .pci_bus_id = s_.device.is_cuda() && s_.device.has_index() ? gpu_pci_bus_id(s_.device.index()) : ""};
  }

  // Several ranks: once its own verdict is written, each rank takes its part in the job report
  // (reports/job_records.hpp: rank 0 gathers and writes it, the others stay until it is written);
  // a stop signal cuts those waits to the launcher's grace.
  void open_job_records(RunWiring& wiring) {
    if (!several_ranks()) return;
    job_records_.emplace(*training_.sync->world().communicator, identity(), run_.diagnostics.warmup_steps,
                         StoreAddress{s_.launch.master_addr, s_.launch.master_port});
    job_records_->set_stop_check([] { return signals::received() != 0; });
    wiring.add(part::job_records, &*job_records_);
    report().set_after_write([this](const Verdict& v, const std::vector<Finding>& findings) {
      try {
        job_records_->finish(run_.output_dir, v.status, v.exit_code, findings, current_phase());
      } catch (const std::exception& e) {
        spdlog::error("no job report: {}", e.what());  // this rank's own verdict stands
      }
    });
  }

  // Ends the process now (a wedged main thread, a lost peer the teardown would wait on forever),
  // once the job report another thread may be writing is on disk (within the launcher's grace).
  [[noreturn]] void exit_now(int code) {
    if (job_records_) job_records_->wait_for_finish(kAfterStop);
    spdlog::default_logger()->flush();
    std::_Exit(code);
  }
  Trainer& trainer() { return *training_.trainer; }

  // The watchdog exists, and knows the loop's phase, from the training stage on.
  bool in_loop() const { return stage_.load() == stage::training; }
  std::string current_phase() const { return in_loop() ? checks_.watchdog->current_phase() : stage_.load(); }

  // A CollectiveError carries its own finding (a rank missing from the rendezvous names it).
  // When the store could not name the lost peer, the peers' heartbeat files may. Then the process
  // exits at once: tearing down the process group can wait forever on the lost peer (Gloo's
  // worker, and libtorch 1.13's store server blocked on a request the peer left half-sent).
  int crashed(const CollectiveError& e) {
    if (checks_.watchdog) checks_.watchdog->stop();
    stop_node_monitor();
    Finding finding = e.finding();
    if (finding.evidence.value("missing_ranks", nlohmann::json::array()).empty() && s_.launch.world_size > 1) {
      const auto stalled = stalled_peers(run_.output_dir, s_.launch.rank, s_.launch.world_size, kStalledPeerWindow);
      if (!stalled.empty()) {
        finding.evidence["missing_ranks"] = stalled;
        finding.evidence["missing_world_ranks"] = stalled;
        finding.evidence["named_by"] = "heartbeat files";
        finding.message +=
            fmt::format("; rank{} {} stopped updating {} (stopped or gone)", stalled.size() > 1 ? "s" : "",
                        fmt::join(stalled, ","), stalled.size() > 1 ? "their heartbeats" : "its heartbeat");
      }
    }
    records_.findings.add(finding);
    const int code = report().write(RunOutcome::crashed, finding.message);
    if (checks_.heartbeat) checks_.heartbeat->finish("crashed");
    exit_now(code);
  }

  int crashed(std::string_view what) {
    if (checks_.watchdog) checks_.watchdog->stop();
    stop_node_monitor();
    spdlog::error("run crashed: {}", what);
    const int code = report().write_crash(what, current_phase());
    if (checks_.heartbeat) checks_.heartbeat->finish("crashed");
    return code;
  }

  // `phase` and `step`: where the run was when the signal stopped it. Under torchrun the signal
  // often follows a peer's death (torchrun stops the survivors): the peers whose heartbeats tell
  // at once that they are gone or frozen are named.
  int interrupted(int sig, const std::string& phase, int64_t step) {
    node_sections_as_of_now();
    const auto lost = s_.launch.world_size > 1 ? lost_peers_now(run_.output_dir, s_.launch.rank, s_.launch.world_size)
                                               : std::vector<int>{};
    report().add_section("interruption", {{"signal", signals::name(sig)},
                                          {"phase", phase},
                                          {"step", step},
                                          {"missing_ranks", lost},
                                          {"missing_world_ranks", lost}});
    std::string message = fmt::format("stopped by {} in '{}' of step {}", signals::name(sig), phase, step);
    if (!lost.empty())
      message +=
          fmt::format("; rank{} {} gone or stopped (heartbeat)", lost.size() > 1 ? "s" : "", fmt::join(lost, ","));
    return report().write(RunOutcome::interrupted, message);
  }

  // Everything that may still refuse the run (a checkpoint that does not fit this model: exit 2)
  // comes before its first file: rendezvous, trainer, fault injector, detectors and their
  // cross-rank preflight, the checkpoint load. Then the run's files, observers and monitors;
  // every part is attached to the trainer in run_wiring()'s order.
  void preflight() {
    build_training();
    RunCoverage coverage = build_detectors();
    if (s_.resume_from) resume();
    write_run_header();
    RunWiring wiring;
    open_step_outputs(wiring);
    add_step_checks(wiring);
    start_monitors(wiring, coverage);
    if (checkpoints()) {
      checkpointer_.emplace(trainer(), records_.findings, run_.checkpoint, run_.output_dir,
                            identity_of(run_, s_.launch.world_size));
      wiring.add(part::checkpointer, &*checkpointer_);
    }
    wiring.attach_to(trainer());
    stage_ = stage::training;
  }

  // The rendezvous, then the trainer (data, model, optimizer), the ballast and the injector.
  void build_training() {
    const TrainingConfig& cfg = run_.training;
    stage_ = stage::rendezvous;
    s_.faults.stop_rank_if_planned(phase::rendezvous, 0, s_.launch.rank);
    training_.sync = make_gradient_sync(s_.launch, cfg, s_.device);
    stage_ = stage::model;
    training_.trainer = std::make_unique<Trainer>(
        RunContext{model_config(cfg, s_.parallel), run_.diagnostics, s_.device, run_.output_dir}, training_.sync);
    // As it ran (a world of one has nothing to shard); with DDP, where experts are split over ranks.
    if (cfg.data_parallel != DataParallel::ddp || trainer().model()->parallel().expert)
      report().add_section("data_parallel", data_parallel_section(cfg.data_parallel, trainer().optimizer_shard(),
                                                                  training_.sync->world_size(), trainer().model()));
    // SDPA's kernel (a backend libtorch 1.13 cannot serve was refused before here).
    if (cfg.attention_backend != AttentionBackend::math) record_attention_kernel();
    training_.ballast.emplace(cfg.memory_pressure_bytes, s_.device);
    trainer().set_stop_check([] { return signals::received() != 0; });
    if (const auto floor = trainer().data().loss_floor()) report().add_section("loss_floor", *floor);
    training_.injector.emplace(s_.faults, s_.launch.rank, trainer().model(), s_.device);
  }

  // The detectors and their cross-rank preflight; the coverage they and the device give.
  RunCoverage build_detectors() {
    stage_ = stage::detectors;
    RunCoverage coverage = run_coverage();
    checks_.detectors = make_detectors(detector_context(), &coverage);
    report().set_coverage(coverage);
    s_.faults.stop_rank_if_planned(phase::preflight, 0, s_.launch.rank);
    for (auto& d : checks_.detectors) d->preflight();
    return coverage;
  }

  DetectorContext detector_context() {
    return {.diag = run_.diagnostics,
            .log = records_.findings,
            .loop = training_.trainer.get(),
            .faults = &s_.faults,
            .sync = training_.sync};
  }

  // What acts inside the step: the host-read count, the fault injector, the detectors.
  void add_step_checks(RunWiring& wiring) {
    if (run_.diagnostics.count_host_reads) {
      checks_.host_reads.emplace(trainer());
      wiring.add(part::host_read_count, &*checks_.host_reads);
    }
    wiring.add(part::fault_injector, &*training_.injector);
    for (auto& d : checks_.detectors) wiring.add(part::detectors, d.get());
  }

  bool several_ranks() const { return training_.sync->world().communicator != nullptr; }
  bool monitors_node() const { return run_.diagnostics.enabled && s_.launch.local_rank == 0; }
  bool checkpoints() const { return !run_.checkpoint_interval.empty(); }

  // metrics.jsonl, metrics.prom, the console, and the records every step feeds.
  void open_step_outputs(RunWiring& wiring) {
    if (run_.resume == kResumeAuto)
      report().add_section("restarts", record_attempt(run_.output_dir, s_.launch.rank, s_.resume_from));
    // Resumed in place, metrics.jsonl keeps the steps up to the checkpoint and continues.
    outputs_.metrics.emplace(run_.output_dir, s_.launch.rank, s_.launch.local_rank, host_name(), run_.stress_modes,
                             s_.resume_in_place && s_.resume_from ? std::optional(s_.resume_from->step) : std::nullopt);
    outputs_.prometheus.emplace(run_.output_dir, s_.launch.rank, run_.diagnostics.prom_interval, records_.findings);
    outputs_.console.emplace(run_.stress_modes, run_.training, run_.diagnostics.summary_interval_s, records_.findings,
                             s_.launch.rank == 0 && stderr_is_terminal() ? install_status_line() : nullptr);
    wiring.add(part::run_summary, &records_.summary);
    wiring.add(part::metrics, &*outputs_.metrics);
    wiring.add(part::prometheus, &*outputs_.prometheus);
    wiring.add(part::console, &*outputs_.console);
    wiring.add(part::training_collectives, &records_.training_collectives);
    open_job_records(wiring);
  }

  // The memory profile, the node monitor (its "before" sample now), the watchdog and the
  // heartbeat file, from here to the end.
  void start_monitors(RunWiring& wiring, RunCoverage& coverage) {
    const DiagnosticsConfig& diag = run_.diagnostics;
    if (diag.memory_profile) {
      checks_.memory_profile.emplace(trainer().setup_memory());
      wiring.add(part::memory_profile, &*checks_.memory_profile);
    }
    // One monitor per node (its first local rank).
    if (monitors_node()) {
      checks_.node = std::make_unique<NodeMonitor>(diag, records_.findings, run_.output_dir, s_.launch.rank);
      checks_.node->start();
      checks_.node->record_coverage(coverage);
      wiring.add(part::node_monitor, checks_.node.get());
      outputs_.metrics->read_telemetry_from([node = checks_.node.get()] { return node->latest_sample(); });
    }
    // A hang never returns control to the training thread: the watchdog writes the verdict and exits.
    checks_.watchdog = std::make_unique<Watchdog>(diag.watchdog_timeout_s, s_.launch.rank, records_.findings,
                                                  [this](const Finding& hang) {
                                                    node_sections_as_of_now();
                                                    exit_now(report().write(RunOutcome::hung, hang.message));
                                                  });
    wiring.add(part::watchdog, checks_.watchdog.get());
    coverage.record(registered_detector("watchdog"), diag.watchdog_timeout_s > 0,
                    "off (diagnostics.watchdog_timeout_s=0)");
    coverage.record(registered_detector("baseline"), s_.baseline.has_value(), "no --baseline");
    report().set_coverage(coverage);
    checks_.heartbeat.emplace(run_.output_dir, s_.launch.rank, *checks_.watchdog);
  }

  // Which kernel SDPA's dispatcher gives the training call, in config.json and report.json from
  // the start (an out-of-memory's report needs it most). No fused kernel taking it means the math
  // path's B x H x T x T scores, which the sizing and the fit do not count: on an H200 a Q/K/V
  // layout the fused kernels refused took 24 GiB more than predicted and ran out of memory.
  void record_attention_kernel() {
    const AttentionBackend backend = run_.training.attention_backend;
    const std::string kernel = training_attention_kernel(trainer());
    const nlohmann::json section = {{"attention_backend", backend}, {"training_kernel", kernel}};
    records_.config_doc["attention_kernel"] = section;
    report().add_section("attention_kernel", section);
    if (kernel == "math" && backend == AttentionBackend::sdpa && !s_.device.is_cpu())
      spdlog::warn(
          "no fused SDPA kernel takes the training attention call (attention_backend=sdpa): it runs on the "
          "math path, whose B x H x T x T scores the sizing and the fit do not count");
    else spdlog::info("training attention runs on the {} kernel (attention_backend={})", kernel, name_of(backend));
  }

  // The device and transport the checks run on, the process group's collectives, the stress
  // modes skipped; make_detectors and the runner's own checks add themselves.
  RunCoverage run_coverage() const {
    RunCoverage c;
    c.device = c10::DeviceTypeName(s_.device.type(), /*lower_case=*/true);
    c.gpu = !s_.device.is_cpu();
    c.world_size = training_.sync->world_size();
    if (c.world_size > 1) c.collective_backend = collective_backend(s_.device);
    c.record(registered_detector("collectives"), c.world_size > 1, "one rank: no process group");
    for (const auto& [mode, reason] : run_.stress_skipped)
      for (const auto& spec : stress_mode_registry())
        if (spec.name == mode) c.skipped_modes.push_back({mode, spec.components, reason});
    return c;
  }

  // After every detector's preflight: the load restores the RNG states the next step draws from.
  void resume() {
    load_training_state(trainer(), s_.resume_from->dir);
    const auto earlier = checkpoint_findings(s_.resume_from->dir, s_.launch.rank);
    spdlog::info("resumed from {} at step {}", s_.resume_from->dir.string(), trainer().steps_done());
    for (const auto& f : earlier) records_.findings.add(f);
    report().add_section("resume", {{"checkpoint", s_.resume_from->dir.string()},
                                    {"step", s_.resume_from->step},
                                    {"findings_restored", earlier.size()}});
  }

  // The run is on: its directory, config.json and the header lines of its log.
  void write_run_header() {
    nlohmann::json& doc = records_.config_doc;
    doc["environment"] = s_.environment;
    doc["collective_backend"] = training_.sync->backend();  // which c10d group this run's collectives used
    doc["parallel_layout"] = to_json(s_.parallel);
    // Which GEMMs ran in their own dtype and which in float32 (a CPU without a native kernel).
    doc["reduced_precision_gemm"] = s_.reduced_gemm.to_json();
    report().add_section("reduced_precision_gemm", doc["reduced_precision_gemm"]);
    // Sized as it trains: the comm mode's experts are in the model only where the world shards them.
    doc["sizing"] = sizing_json(run_, model_config(run_.training, s_.parallel));
    fs::create_directories(run_.output_dir);
    if (s_.launch.rank == 0) write_file_atomically(fs::path(run_.output_dir) / "config.json", doc.dump(2) + "\n");
    spdlog::info(
        "rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
        "world {} ({}, collectives: {})",
        run_.preset, run_.stress_modes.empty() ? "none" : nlohmann::json(run_.stress_modes).dump(), s_.device.str(),
        TORCH_VERSION, RCL_TORCH_BUILD, s_.environment.at("blas").get<std::string>(), s_.launch.world_size,
        s_.launch.launcher, training_.sync->backend());
    spdlog::info("resolved config: {}", nlohmann::json(run_.training).dump());
    for (const auto& note : s_.parallel.notes) spdlog::info("parallel layout: {}", note);
    const TrainingConfig& model = trainer().model_config();
    spdlog::info("model: {} parameters, {:.3g} training FLOPs/token; data: {}", parameter_count(model),
                 flops_per_token(model), trainer().data().describe());
    if (s_.reduced_gemm.dtype != c10::kFloat) spdlog::info("{}", s_.reduced_gemm.describe());
    spdlog::info("ROCm environment: {}", s_.environment.at("env").dump());
    if (!s_.faults.empty()) spdlog::warn("fault injection on: {}", s_.faults.to_string());
  }

  // Returns an exit code when a stop signal ended the loop (no whole-run checks on a cut run).
  std::optional<int> train() {
    const TrainSummary result = trainer().run();
    checks_.watchdog->stop();
    // Within the signal's grace (signals::kStopGrace) from the signal: a checkpoint that does
    // not fit is cut short by the forced report, and the previous one stays (docs/checkpoints.md).
    if (checkpointer_) checkpointer_->save(result.stopped_by_request ? "signal" : "final");
    if (result.stopped_by_request) {
      const int code = interrupted(signals::received(), "step_boundary", result.steps_done);
      checks_.heartbeat->finish("interrupted");
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
    if (checks_.node) checks_.node->stop();
    node_sections_as_of_now();
  }

  // What the node monitor knows now (the kernel log read once more: a GPU reset line is a hang's
  // best evidence), and the memory profile so far.
  void node_sections_as_of_now() {
    if (checks_.node) {
      checks_.node->drain_kernel_log();
      add_sections(checks_.node->report_sections());
    }
    if (checks_.memory_profile) report().add_section("memory_profile", checks_.memory_profile->to_json());
  }

  // How much of the device the steady steps used (docs/performance.md).
  nlohmann::json throughput() const {
    const auto steps = summarize_steps(records_.summary.steps(), run_.diagnostics.warmup_steps);
    return throughput_section(
        run_.training, {.tokens_per_s = steps.value("tokens_per_s", nlohmann::json::object()).value("overall", 0.0),
                        .measured_peak_tflops = run_.measured_peak_tflops,
                        .ranks_per_token = s_.parallel.tensor_degree,
                        .device_model = s_.device.is_cpu() ? std::nullopt : gpu_model_name()});
  }

  void add_sections(const nlohmann::json& sections) {
    for (const auto& [key, value] : sections.items()) report().add_section(key, value);
  }

  // Whole-run checks, the --baseline comparison, the verdict.
  int finish() {
    stop_node_monitor();
    for (auto& d : checks_.detectors) {
      d->finish();
      add_sections(d->report_sections());
    }
    report().add_section("throughput", throughput());
    if (s_.baseline) {
      const RunRecord now{records_.summary.steps(), records_.findings.snapshot(), records_.config_doc};
      auto comparison = compare_with_baseline(now, *s_.baseline, run_.diagnostics, s_.launch.rank);
      for (auto& f : comparison.findings) records_.findings.add(std::move(f));
      report().add_section("baseline", comparison.summary);
    }
    const int code = report().write(RunOutcome::completed);
    checks_.heartbeat->finish("completed");
    return code;
  }

  const RunConfig& run_;
  RunSetup s_;
  RunRecords records_;
  TrainingParts training_;
  StepOutputs outputs_;
  RunChecks checks_;
  std::optional<JobRecords> job_records_;
  std::optional<Checkpointer> checkpointer_;           // last: it holds the trainer's state between steps
  std::atomic<const char*> stage_{stage::rendezvous};  // read by the signal watcher
};

}  // namespace

int run_job(const RunConfig& run, bool overwrite) {
  signals::install();
  return Job(run, setup_run(run, overwrite)).run();
}

int explain_step(const RunConfig& run) {
  // Nothing is written: a previous run in the output directory is no reason to refuse.
  Job job(run, setup_run(run, /*overwrite=*/true));
  std::cout << job.explain();
  return kExitClean;
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
