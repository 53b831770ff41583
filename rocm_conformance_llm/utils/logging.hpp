// Console logging (spdlog, rank-tagged) and the machine-readable per-step metrics file.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/step_record.hpp"

namespace rcl {

// Console logger named "rcl"; non-zero ranks log only warnings unless `all_ranks_verbose`.
void init_logging(int rank, int world_size, bool all_ranks_verbose);

nlohmann::json to_json(const StepRecord& r);
// One human-readable console line for a step.
std::string format_step_line(const StepRecord& r, const std::vector<std::string>& stress_modes);

// metrics.jsonl (rank 0) or metrics.rank<N>.jsonl: one JSON object per step, flushed per line
// so a crash or hang leaves every finished step on disk. With `keep_through_step` (a run resumed
// in its own directory) the file keeps its lines up to that step and continues after them.
class MetricsWriter {
 public:
  MetricsWriter(const std::filesystem::path& output_dir, int rank,
                std::vector<std::string> stress_modes, std::optional<int64_t> keep_through_step = std::nullopt);
  void write(const StepRecord& r);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  std::vector<std::string> stress_modes_;
};

}  // namespace rcl
