#include "rocm_conformance_llm/diagnostics/heartbeat.hpp"

#include <unistd.h>

#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/utils/files.hpp"

namespace rcl {

HeartbeatFile::HeartbeatFile(const std::filesystem::path& output_dir, int rank, const Watchdog& watchdog)
    : path_(output_dir / (rank == 0 ? "heartbeat.json" : fmt::format("heartbeat.rank{}.json", rank))),
      rank_(rank),
      watchdog_(watchdog) {
  write("running");
  thread_ = std::thread([this] { run(); });
}

HeartbeatFile::~HeartbeatFile() { stop(); }

void HeartbeatFile::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatFile::finish(const std::string& status) {
  stop();
  write(status);
}

void HeartbeatFile::write(const std::string& status) {
  const auto s = watchdog_.status();
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char iso[32];
  std::strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const nlohmann::json beat = {
      {"status", status},
      {"time", iso},
      {"unix_time", std::chrono::duration<double>(now.time_since_epoch()).count()},
      {"interval_s", kHeartbeatInterval.count()},
      {"pid", ::getpid()},
      {"rank", rank_},
      {"phase", s.phase},
      {"step", s.phase_step},
      {"last_completed_step", s.last_completed_step},
      {"seconds_in_phase", s.seconds_in_phase},
      {"seconds_since_progress", s.seconds_since_progress}};
  try {
    write_file_atomically(path_, beat.dump(2) + "\n");
  } catch (const std::exception& e) {
    // Liveness is for outside monitors; a full disk is the checkpoint's and report's problem.
    if (!warned_) spdlog::warn("heartbeat: {}", e.what());
    warned_ = true;
  }
}

void HeartbeatFile::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kHeartbeatInterval, [this] { return stopping_; })) {
    lock.unlock();
    write("running");
    lock.lock();
  }
}

}  // namespace rcl
