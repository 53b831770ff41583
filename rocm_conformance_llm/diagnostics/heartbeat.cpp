#include "rocm_conformance_llm/diagnostics/heartbeat.hpp"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/utils/files.hpp"

namespace rcl {

std::filesystem::path heartbeat_path(const std::filesystem::path& output_dir, int rank) {
  return output_dir / (rank == 0 ? "heartbeat.json" : fmt::format("heartbeat.rank{}.json", rank));
}

namespace {
// The file's write time as it says; nullopt when absent or unreadable.
std::optional<double> written_at(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const auto beat = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!beat.is_object() || !beat.contains("unix_time") || !beat["unix_time"].is_number()) return std::nullopt;
  return beat["unix_time"].get<double>();
}
}  // namespace

std::vector<int> stalled_peers(const std::filesystem::path& output_dir, int rank, int world_size,
                               std::chrono::milliseconds window) {
  std::map<int, double> first;  // peer -> unix_time at the start, for peers with a file
  for (int r = 0; r < world_size; ++r)
    if (const auto t = r == rank ? std::nullopt : written_at(heartbeat_path(output_dir, r))) first[r] = *t;
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::vector<int> stalled;
  while (true) {
    stalled.clear();
    for (const auto& [r, t] : first)
      if (written_at(heartbeat_path(output_dir, r)).value_or(t) == t) stalled.push_back(r);
    if (stalled.empty() || std::chrono::steady_clock::now() >= deadline) return stalled;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

HeartbeatFile::HeartbeatFile(const std::filesystem::path& output_dir, int rank, const Watchdog& watchdog)
    : path_(heartbeat_path(output_dir, rank)),
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
