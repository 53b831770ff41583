// Building a run's parts in order and wiring them to the trainer (Job, run/job_class.hpp).
#include <filesystem>

#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"
#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/reports/progress.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/run/job_class.hpp"
#include "rocm_conformance_llm/run/signals.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"

namespace rcl {
namespace fs = std::filesystem;

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

RankIdentity Job::identity() const {
  return {.world_rank = s_.launch.rank,
          .local_rank = s_.launch.local_rank,
          .host = host_name(),
          .device = s_.device.str(),
          .pci_bus_id = s_.device.is_cuda() && s_.device.has_index() ? gpu_pci_bus_id(s_.device.index()) : ""};
}

void Job::open_job_records(RunWiring& wiring) {
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

void Job::build_training() {
  const TrainingConfig& cfg = run_.training;
  stage_ = stage::rendezvous;
  s_.faults.stop_rank_if_planned(phase::rendezvous, 0, s_.launch.rank);
  training_.sync = make_gradient_sync(s_.launch, s_.group, cfg, s_.device);
  stage_ = stage::model;
  training_.trainer = std::make_unique<Trainer>(
      RunContext{s_.group.model, run_.diagnostics, s_.device, run_.output_dir, s_.data, s_.hf_tokenizer},
      training_.sync);
  // As it ran (a world of one has nothing to shard); with DDP, where experts are split over ranks.
  if (cfg.data_parallel != DataParallel::ddp || trainer().model()->parallel().expert)
    report().add_section("data_parallel", data_parallel_section(cfg.data_parallel, trainer().optimizer_shard(),
                                                                training_.sync->world_size(), trainer().model()));
  // SDPA's kernel (a backend libtorch 1.13 cannot serve was refused before here).
  if (cfg.attention_backend != AttentionBackend::math) record_attention_kernel();
  training_.ballast.emplace(cfg.memory_pressure_bytes, s_.device);
  trainer().set_stop_check([] { return signals::received() != 0; });
  if (const auto floor = trainer().data().loss_floor()) report().add_section("loss_floor", *floor);
  report().add_section("data", trainer().data().record());
  training_.injector.emplace(s_.faults, s_.launch.rank, trainer().model(), s_.device);
}

RunCoverage Job::build_detectors() {
  stage_ = stage::detectors;
  RunCoverage coverage = run_coverage();
  checks_.detectors = make_detectors(detector_context(), &coverage);
  report().set_coverage(coverage);
  s_.faults.stop_rank_if_planned(phase::preflight, 0, s_.launch.rank);
  for (auto& d : checks_.detectors) d->preflight();
  return coverage;
}

DetectorContext Job::detector_context() {
  return {.diag = run_.diagnostics,
          .log = records_.findings,
          .loop = training_.trainer.get(),
          .faults = &s_.faults,
          .sync = training_.sync};
}

void Job::add_step_checks(RunWiring& wiring) {
  if (run_.diagnostics.count_host_reads) {
    checks_.host_reads.emplace(trainer());
    wiring.add(part::host_read_count, &*checks_.host_reads);
  }
  wiring.add(part::fault_injector, &*training_.injector,
             s_.faults.empty() ? "fault_injector (idle: no --inject)" : "fault_injector");
  for (auto& d : checks_.detectors) wiring.add(part::detectors, d.get());
}

void Job::open_step_outputs(RunWiring& wiring) {
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

void Job::start_monitors(RunWiring& wiring, RunCoverage& coverage) {
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

void Job::record_attention_kernel() {
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

RunCoverage Job::run_coverage() const {
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

void Job::resume() {
  load_training_state(trainer(), s_.resume_from->dir);
  const auto earlier = checkpoint_findings(s_.resume_from->dir, s_.launch.rank);
  spdlog::info("resumed from {} at step {}", s_.resume_from->dir.string(), trainer().steps_done());
  for (const auto& f : earlier) records_.findings.add(f);
  report().add_section("resume", {{"checkpoint", s_.resume_from->dir.string()},
                                  {"step", s_.resume_from->step},
                                  {"findings_restored", earlier.size()}});
}

void Job::write_run_header() {
  nlohmann::json& doc = records_.config_doc;
  doc["environment"] = s_.environment;
  doc["collective_backend"] = training_.sync->backend();  // which c10d group this run's collectives used
  doc["parallel_layout"] = to_json(s_.group.layout);
  // Which GEMMs ran in their own dtype and which in float32 (a CPU without a native kernel).
  doc["reduced_precision_gemm"] = s_.reduced_gemm.to_json();
  report().add_section("reduced_precision_gemm", doc["reduced_precision_gemm"]);
  // Sized as it trains: the comm mode's experts are in the model only where the world shards them.
  doc["sizing"] = sizing_json(run_, s_.group.model);
  fs::create_directories(run_.output_dir);
  if (s_.launch.rank == 0) write_file_atomically(fs::path(run_.output_dir) / "config.json", doc.dump(2) + "\n");
  spdlog::info(
      "rocm-conformance-llm: preset {} | stress {} | device {} | libtorch {} ({} build) | BLAS {} | "
      "world {} ({}, collectives: {})",
      run_.preset, run_.stress_modes.empty() ? "none" : nlohmann::json(run_.stress_modes).dump(), s_.device.str(),
      TORCH_VERSION, RCL_TORCH_BUILD, s_.environment.at("blas").get<std::string>(), s_.launch.world_size,
      s_.launch.launcher, training_.sync->backend());
  spdlog::info("resolved config: {}", nlohmann::json(run_.training).dump());
  for (const auto& note : s_.group.layout.notes) spdlog::info("parallel layout: {}", note);
  const TrainingConfig& model = trainer().model_config();
  spdlog::info("model: {} parameters, {:.3g} training FLOPs/token; data: {}", parameter_count(model),
               flops_per_token(model), trainer().data().describe());
  if (s_.reduced_gemm.dtype != c10::kFloat) spdlog::info("{}", s_.reduced_gemm.describe());
  spdlog::info("ROCm environment: {}", s_.environment.at("env").dump());
  if (!s_.faults.empty()) spdlog::warn("fault injection on: {}", s_.faults.to_string());
}

}  // namespace rcl
