// heartbeat.json: the run's liveness for monitors outside the process (a cluster's health
// checker, a person with `watch cat`). A thread rewrites it atomically every kHeartbeatInterval
// from the watchdog's view (phase, step, seconds in phase, seconds since the last finished step).
// A fresh `time` with a growing `step` is a slow run; a fresh `time` with the same step and a
// growing `seconds_since_progress` is a stuck one (the watchdog declares it hung at its
// timeout); a stale `time` is a process that is gone or stopped (SIGKILL, SIGSTOP, a lost node).
// Fields: docs/outputs.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "rocm_conformance_llm/diagnostics/watchdog.hpp"

namespace rcl {

inline constexpr std::chrono::seconds kHeartbeatInterval{2};

class HeartbeatFile {
 public:
  // heartbeat.json (rank 0) or heartbeat.rank<N>.json; written now, then every interval.
  HeartbeatFile(const std::filesystem::path& output_dir, int rank, const Watchdog& watchdog);
  ~HeartbeatFile();  // stops the thread; the file stays with its last content
  HeartbeatFile(const HeartbeatFile&) = delete;
  HeartbeatFile& operator=(const HeartbeatFile&) = delete;

  // The last write: `status` is the run's outcome ("completed", "interrupted", ...); stops the thread.
  void finish(const std::string& status);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write(const std::string& status);
  void run();
  void stop();

  std::filesystem::path path_;
  int rank_;
  const Watchdog& watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace rcl
