// What compare's files share (compare.cpp, compare_rules.cpp, compare_runs.cpp, compare_judge.cpp,
// compare_output.cpp): the figures read from a run's summary, and reading a JSON input. Internal
// to reports/; a namespace of its own, as the library compiles in unity batches.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/compare.hpp"

namespace rcl::compare_parts {

// The figures compare reads from a run's report.json summary (outputs.md), and their columns.
struct MetricDef {
  const char* name;
  const char* pointer;  // into report.json's "summary"
  const char* column;
  double scale;  // for the console table
};
inline constexpr MetricDef kMetrics[] = {
    {"tokens_per_s", "/tokens_per_s/overall", "tok/s", 1},
    {"step_time_p50_s", "/step_time_s/median", "p50 ms", 1e3},
    {"step_time_p95_s", "/step_time_s/p95", "p95 ms", 1e3},
    {"peak_memory_bytes", "/peak_memory/bytes", "peak MiB", 1.0 / (1 << 20)},
    {"final_loss", "/loss/last", "final loss", 1},
};

// A run's figure `name`; NaN when it has none.
inline double metric_of(const RunRow& r, const std::string& name) {
  const auto it = r.metrics.find(name);
  return it == r.metrics.end() ? stats::kNaN : it->second;
}

// The JSON document in `path`; ConfigError naming it when it cannot be read or parsed.
nlohmann::json read_json(const std::filesystem::path& path);

}  // namespace rcl::compare_parts
