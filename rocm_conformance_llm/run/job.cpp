#include "rocm_conformance_llm/run/job.hpp"

#include <iostream>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/run/explain_step.hpp"
#include "rocm_conformance_llm/run/job_class.hpp"
#include "rocm_conformance_llm/run/signals.hpp"

namespace rcl {

Job::Job(const RunConfig& run, RunSetup setup) : run_(run), s_(std::move(setup)), records_(run_, s_) {
  report().add_section("faults", s_.faults.to_json());
  report().set_training_collectives(records_.training_collectives);
  report().add_section("identity", to_json(identity()));
  if (run.ocp_stdout && s_.launch.rank == 0) report().print_ocp_to_stdout();
}

int Job::run() {
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

std::string Job::explain() {
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
      "rocm-conformance-llm --explain-step: preset {} | stress {} | micro-batches a step: {} | world {} | device {}",
      run_.preset, run_.stress_modes.empty() ? "none" : fmt::format("{}", fmt::join(run_.stress_modes, ",")),
      trainer().model_config().grad_accum_steps, s_.launch.world_size, s_.device.str());
  return s_.launch.rank == 0 ? explain_step_text(heading, wiring.in_order()) : "";
}

void Job::preflight() {
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

std::optional<int> Job::train() {
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

int Job::finish() {
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

}  // namespace rcl
