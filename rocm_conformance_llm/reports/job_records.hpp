// The store side of the job report (reports/job_report.hpp): how every rank's row reaches the one
// rank that writes job_report.json, and how long each rank stays for it. Through the job's own
// c10d store, not the collective transport, so it still works when a rank or a node is lost.
//
// Every rank publishes a pulse (a counter, once a second, from its own thread: it goes on while
// the training thread waits inside a collective, and stops when the process is killed, frozen or
// cut off), a heartbeat row while it trains and, at its end, its final row. Then:
// - rank 0 gathers the rows: it waits for each rank until its row comes or its pulse has stood
//   still for kPulseStale (that rank is lost: its last heartbeat stands in for it), and at most one
//   collective timeout plus kGatherMargin (a live peer still waiting in a collective reports within
//   its timeout). It writes the job files, publishes the job's outcome, and stays until every rank
//   that reported has read it (rank 0 may serve the store).
// - every other rank stays until the job's outcome comes, so that no launcher tears rank 0 down
//   because a node-local peer exited first (torchrun stops a node's other workers when one exits,
//   srun --kill-on-bad-exit the whole step). If rank 0's pulse stands still and its row never
//   comes, a survivor stands in for it: the lowest surviving rank on rank 0's host (its output
//   directory is where a user looks), else the lowest surviving rank. If the store stops answering,
//   each survivor writes its own view (docs/outputs.md).
// - a stop signal (a launcher's, with its grace of about 30 s) cuts every wait to kAfterStop.
// Each node's first local rank ends its console with the job's outcome in one line.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/reports/job_report.hpp"

namespace rcl {

class Communicator;

// A rank whose pulse has not moved for this long is not running (its thread ticks every second:
// five missed ticks, more than a loaded host delays a sleeping thread).
inline constexpr std::chrono::seconds kPulseStale{5};
// How long past one collective timeout the writer waits for a live rank's row.
inline constexpr std::chrono::seconds kGatherMargin{10};
// Every wait after a stop signal: a forced stop comes 10 s after the signal (signals::kStopGrace), and
// the launchers' grace is 30 s by default (torchrun; Slurm's KillWait).
inline constexpr std::chrono::seconds kAfterStop{12};

// Where the job's store is served: MASTER_ADDR:MASTER_PORT (rank 0, or its launcher on rank 0's node).
struct StoreAddress {
  std::string host{};
  int port = 0;
};

// What every rank learns of the job report once it is written: the line each node's console ends with.
struct JobOutcome {
  std::string verdict;
  int exit_code = 0;
  std::vector<Suspect> suspects{};  // evidence left out: the report holds it
  std::string unresolved{};
  int written_by = 0;
  std::string host{};  // where it was written
  std::string path{};  // job_report.json there
};
nlohmann::json to_json(const JobOutcome& o);
JobOutcome job_outcome_from_json(const nlohmann::json& j);
// "job verdict CRASHED (exit 3): drain node2 (world ranks 4,5); job report: /runs/x/job_report.json
// on node0, written by rank 0"
std::string job_outcome_line(const JobOutcome& o);

class JobRecords final : public StepObserver {
 public:
  JobRecords(Communicator& world, RankIdentity id, int64_t warmup_steps, StoreAddress store);
  ~JobRecords() override;
  void on_step(const StepRecord& r) override;
  // Cuts every wait to kAfterStop from the first time `stopped` returns true.
  void set_stop_check(std::function<bool()> stopped) { stopped_ = std::move(stopped); }
  // This rank's final row, then its part of the job report (above). Called once.
  void finish(const std::filesystem::path& output_dir, const std::string& verdict, int exit_code,
              const std::vector<Finding>& findings, const std::string& phase);
  // Blocks while finish() runs, at most `limit`: a process that must exit now (a forced stop, a
  // crash on another thread) lets the job report it is writing reach the disk first.
  void wait_for_finish(std::chrono::milliseconds limit);

 private:
  using Clock = std::chrono::steady_clock;
  // The pulse thread: publishes the counter, and measures how long the process did not run.
  void pulse();
  // Every rank's row as rank 0 would gather it, waiting until `deadline` (cut by a stop signal)
  // for the ranks whose pulse still moves; a lost rank's row from its last heartbeat.
  std::vector<RankRow> gather(const RankRow& mine, Clock::time_point deadline) const;
  // This rank's view alone, the store gone: the others' rows unknown, rank 0 judged by a probe.
  std::vector<RankRow> rows_without_store(const RankRow& mine, JobView& view) const;
  bool rank0_may_be_lost(const RankRow& mine) const;
  // Rank 0 lost, the store answering: the rank that stands in for it.
  int stand_in_for_rank0() const;
  // Waits for `writer`'s job outcome while its pulse moves; nullopt when it never came (or the
  // store stopped answering: `store_gone`).
  std::optional<JobOutcome> await_outcome(Clock::time_point deadline, int writer, bool& store_gone) const;
  void learn_roster(std::chrono::milliseconds limit);
  // Writes the job files, publishes the outcome and waits (bounded) for the ranks that reported to read it.
  void write_and_publish(const std::filesystem::path& output_dir, const std::vector<RankRow>& rows,
                         const JobView& view, int64_t step);
  void announce(const JobOutcome& outcome) const;
  Clock::time_point cut_by_stop(Clock::time_point deadline) const;
  std::optional<double> paused_s() const;

  Communicator& world_;
  const RankIdentity id_;
  const int64_t warmup_steps_;
  const StoreAddress store_;
  std::vector<std::optional<RankIdentity>> roster_;  // every rank's identity, from its heartbeats
  RunSummary steps_;
  Clock::time_point last_beat_{};
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();  // job_ocp.jsonl's
  std::function<bool()> stopped_;
  mutable std::optional<Clock::time_point> stop_seen_;

  std::atomic<bool> finishing_{false};
  std::atomic<double> longest_pause_s_{0.0};
  std::mutex pulse_mutex_;
  std::condition_variable pulse_wake_;
  bool pulse_stop_ = false;
  std::thread pulse_thread_;  // last: started once everything above exists
};

}  // namespace rcl
