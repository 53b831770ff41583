// The Job behind run_job and explain_step (run/job.hpp): the parts one run holds and the class
// that builds them in order, trains, and always ends with a verdict. Internal to run/; its
// methods live by role: job.cpp (the run from start to verdict), job_setup.cpp (building and
// wiring the parts), job_ending.cpp (crashes, stop signals, hangs and the closing sections).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/memory.hpp"
#include "rocm_conformance_llm/checks/monitors/host_read_count.hpp"
#include "rocm_conformance_llm/checks/monitors/telemetry.hpp"
#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/reports/console_observer.hpp"
#include "rocm_conformance_llm/reports/heartbeat.hpp"
#include "rocm_conformance_llm/reports/job_records.hpp"
#include "rocm_conformance_llm/reports/metrics_observer.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"
#include "rocm_conformance_llm/reports/training_collectives.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"
#include "rocm_conformance_llm/run/run_config.hpp"
#include "rocm_conformance_llm/run/run_setup.hpp"
#include "rocm_conformance_llm/run/signals.hpp"
#include "rocm_conformance_llm/run/wiring.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/workload/memory_ballast.hpp"

namespace rcl {

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
nlohmann::json config_doc_of(const RunConfig& run, const RunSetup& s);

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
  Job(const RunConfig& run, RunSetup setup);
  ~Job() { signals::set_force_stop({}); }

  int run();

  // --explain-step: the trainer and what acts inside its step, built as preflight builds them (the
  // detectors without their cross-rank preflight); the parts that write the run's files or start
  // a thread are listed by their type. Nothing is written and no step runs. Rank 0's text ("" on
  // the others).
  std::string explain();

 private:
  // --- the run from start to verdict (job.cpp) ---
  ReportWriter& report() { return records_.report; }
  Trainer& trainer() { return *training_.trainer; }

  // The watchdog exists, and knows the loop's phase, from the training stage on.
  bool in_loop() const { return stage_.load() == stage::training; }
  std::string current_phase() const { return in_loop() ? checks_.watchdog->current_phase() : stage_.load(); }

  // Everything that may still refuse the run (a checkpoint that does not fit this model: exit 2)
  // comes before its first file: rendezvous, trainer, fault injector, detectors and their
  // cross-rank preflight, the checkpoint load. Then the run's files, observers and monitors;
  // every part is attached to the trainer in run_wiring()'s order.
  void preflight();

  // Returns an exit code when a stop signal ended the loop (no whole-run checks on a cut run).
  std::optional<int> train();

  // Whole-run checks, the --baseline comparison, the verdict.
  int finish();

  // --- building the parts and wiring them (job_setup.cpp) ---
  RankIdentity identity() const;

  // Several ranks: once its own verdict is written, each rank takes its part in the job report
  // (reports/job_records.hpp: rank 0 gathers and writes it, the others stay until it is written);
  // a stop signal cuts those waits to the launcher's grace.
  void open_job_records(RunWiring& wiring);

  // The rendezvous, then the trainer (data, model, optimizer), the ballast and the injector.
  void build_training();

  // The detectors and their cross-rank preflight; the coverage they and the device give.
  RunCoverage build_detectors();

  DetectorContext detector_context();

  // What acts inside the step: the host-read count, the fault injector, the detectors.
  void add_step_checks(RunWiring& wiring);

  bool several_ranks() const { return training_.sync->world().communicator != nullptr; }
  bool monitors_node() const { return run_.diagnostics.enabled && s_.launch.local_rank == 0; }
  bool checkpoints() const { return !run_.checkpoint_interval.empty(); }

  // metrics.jsonl, metrics.prom, the console, and the records every step feeds.
  void open_step_outputs(RunWiring& wiring);

  // The memory profile, the node monitor (its "before" sample now), the watchdog and the
  // heartbeat file, from here to the end.
  void start_monitors(RunWiring& wiring, RunCoverage& coverage);

  // Which kernel SDPA's dispatcher gives the training call, in config.json and report.json from
  // the start (an out-of-memory's report needs it most). No fused kernel taking it means the math
  // path's B x H x T x T scores, which the sizing and the fit do not count: on an H200 a Q/K/V
  // layout the fused kernels refused took 24 GiB more than predicted and ran out of memory.
  void record_attention_kernel();

  // The device and transport the checks run on, the process group's collectives, the stress
  // modes skipped; make_detectors and the runner's own checks add themselves.
  RunCoverage run_coverage() const;

  // After every detector's preflight: the load restores the RNG states the next step draws from.
  void resume();

  // The run is on: its directory, config.json and the header lines of its log.
  void write_run_header();

  // --- endings other than completion, and the sections every ending adds (job_ending.cpp) ---
  // Ends the process now (a wedged main thread, a lost peer the teardown would wait on forever),
  // once the job report another thread may be writing is on disk (within the launcher's grace).
  [[noreturn]] void exit_now(int code);

  // A CollectiveError carries its own finding (a rank missing from the rendezvous names it).
  // When the store could not name the lost peer, the peers' heartbeat files may. Then the process
  // exits at once: tearing down the process group can wait forever on the lost peer (Gloo's
  // worker, and libtorch 1.13's store server blocked on a request the peer left half-sent).
  int crashed(const CollectiveError& e);

  int crashed(std::string_view what);

  // `phase` and `step`: where the run was when the signal stopped it. Under torchrun the signal
  // often follows a peer's death (torchrun stops the survivors): the peers whose heartbeats tell
  // at once that they are gone or frozen are named.
  int interrupted(int sig, const std::string& phase, int64_t step);

  // The "after" sample and the throttle findings, then the sections. Not for a hang: a sampler
  // stuck in a driver call would hold the verdict back.
  void stop_node_monitor();

  // What the node monitor knows now (the kernel log read once more: a GPU reset line is a hang's
  // best evidence), and the memory profile so far.
  void node_sections_as_of_now();

  // How much of the device the steady steps used (docs/performance.md).
  nlohmann::json throughput() const;

  void add_sections(const nlohmann::json& sections);

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

}  // namespace rcl
