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

#include "rocm_conformance_llm/diagnostics/finding.hpp"

namespace rcl {

// Phase names the training loop reports through set_phase.
namespace phase {
inline constexpr const char* data = "data";
inline constexpr const char* forward = "forward";
inline constexpr const char* backward = "backward";
inline constexpr const char* grad_sync = "grad_sync";  // gradient all-reduce (RCCL)
inline constexpr const char* checksum = "checksum";    // cross-rank parameter checksum (RCCL)
inline constexpr const char* optimizer = "optimizer";
inline constexpr const char* eval = "eval";
inline constexpr const char* checkpoint = "checkpoint";
inline constexpr const char* canary = "canary";
inline constexpr const char* replay = "replay";        // rewind-and-replay check (rng mode)
inline constexpr const char* loss_allreduce = "allreduce_loss";  // the step's mean loss (RCCL)
}  // namespace phase

// grad_sync, checksum, and anything named "collective..." / "allreduce..." / "barrier...":
// a hang there is attributed to RCCL, anywhere else to the HIP runtime.
bool is_collective_phase(std::string_view phase);

class Watchdog {
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
  bool fired() const;
  std::string current_phase() const;  // for a crash report's "phase"
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
