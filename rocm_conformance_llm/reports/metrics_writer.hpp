// The machine-readable per-step record: metrics.jsonl, and the console's line per step.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

nlohmann::json to_json(const StepRecord& r);
// One human-readable console line for a step.
std::string format_step_line(const StepRecord& r, const std::vector<std::string>& stress_modes);
// metrics.jsonl (rank 0) or metrics.rank<N>.jsonl: one JSON object per step, flushed per line
// so a crash or hang leaves every finished step on disk. With `keep_through_step` (a run resumed
// in its own directory) the file keeps its lines up to that step and continues after them.
class MetricsWriter {
 public:
  MetricsWriter(const std::filesystem::path& output_dir, int rank, std::vector<std::string> stress_modes,
                std::optional<int64_t> keep_through_step = std::nullopt);
  // Who writes it, on every line from now on: "world_rank", "local_rank" and "hostname" ("host"
  // is the host-contention object).
  void set_identity(int world_rank, int local_rank, const std::string& host);
  // `telemetry`: the node monitor's latest sample (NodeMonitor::latest_sample), when not null.
  void write(const StepRecord& r, const nlohmann::json& telemetry = nullptr);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  std::vector<std::string> stress_modes_;
  nlohmann::json identity_ = nlohmann::json::object();
};

}  // namespace rcl
