// Hang watchdog: a thread that expects a heartbeat every finished step. When none arrives
// within the timeout it records a fail finding saying what the run was doing (phase, step,
// last collective) and calls back so the owner can write the report and exit with code 3.
// GPU hangs (a lost completion signal, a wedged queue) and RCCL deadlocks never return control
// to the training thread: only another thread can report them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

// A StepObserver (each published step is a heartbeat) and StepHooks (each phase the loop enters).
class Watchdog final : public StepObserver, public StepHooks {
 public:
  // Called once, on the watchdog thread, with the finding it just added to `log`.
  using OnHang = std::function<void(const Finding&)>;

  // Starts the thread; the clock starts now (the first step gets the same timeout).
  Watchdog(double timeout_s, int rank, FindingLog& log, OnHang on_hang);
  ~Watchdog();  // stops and joins
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A step finished: restarts the timeout.
  void heartbeat(int64_t completed_step);
  // What the run is doing now; does not restart the timeout.
  void set_phase(std::string phase, int64_t step, std::string last_collective = {});
  void on_step(const StepRecord& r) override { heartbeat(r.step); }
  // The last of `collectives` (the step's gradient all-reduces, at its optimizer phase) is
  // named in a hang until a later phase brings others.
  void on_phase(const char* phase, int64_t step, const std::vector<CollectiveSample>& collectives) override;
  bool fired() const;
  // Everything above at one instant (heartbeat.json's content).
  struct Status {
    std::string phase;
    int64_t phase_step = 0;
    int64_t last_completed_step = 0;
    double seconds_in_phase = 0;
    double seconds_since_progress = 0;
  };
  Status status() const;
  std::string current_phase() const;  // for a crash report's "phase"
  int64_t current_step() const;       // the step of that phase
  void stop();

 private:
  void run();
  Finding hang_finding(std::chrono::steady_clock::time_point now) const;  // mutex held

  const std::chrono::duration<double> timeout_;
  const int rank_;
  FindingLog& log_;
  OnHang on_hang_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point last_progress_;
  std::chrono::steady_clock::time_point phase_since_;
  int64_t last_completed_step_ = 0;
  std::string phase_ = "startup";
  int64_t phase_step_ = 0;
  std::string last_collective_;
  bool stopping_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace rcl
