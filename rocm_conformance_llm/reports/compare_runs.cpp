// One run directory read into compare's RunRow: its report's verdict, findings and figures, and
// the hashes of its training config, loss trajectory and op counts.
#include "rocm_conformance_llm/reports/compare.hpp"

#include <cstdint>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/baseline.hpp"
#include "rocm_conformance_llm/reports/compare_parts.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using stats::kNaN;

// FNV-1a, 64 bits, as 16 hex digits: equal inputs, equal text, on every machine.
class Fnv {
 public:
  void add(const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ULL;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  template <typename T>
  void add_value(T v) {
    add(&v, sizeof v);
  }
  std::string hex() const { return fmt::format("{:016x}", h_); }

 private:
  uint64_t h_ = 1469598103934665603ULL;
};

double json_double(const json& v) { return v.is_number() ? v.get<double>() : kNaN; }

}  // namespace

RunRow load_run_row(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw ConfigError("compare: '" + dir.string() + "' is not a directory");
  const bool has_report = fs::exists(dir / "report.json");
  if (!has_report && !fs::exists(dir / "config.json"))
    throw ConfigError("compare: '" + dir.string() + "' is not a run directory (no report.json or config.json)");
  RunRow row;
  row.dir = dir.string();
  row.name = dir.lexically_normal().string();
  if (!row.name.empty() && row.name.back() == '/') row.name.pop_back();
  for (const auto& m : compare_parts::kMetrics) row.metrics[m.name] = kNaN;

  json config;
  if (has_report) {
    const json report = compare_parts::read_json(dir / "report.json");
    row.verdict = report.value("verdict", std::string("?"));
    row.outcome = report.value("outcome", std::string("?"));
    row.exit_code = report.value("exit_code", -1);
    for (const auto& f : report.value("findings", json::array())) {
      const std::string severity = f.value("severity", std::string());
      ++(severity == "fail" ? row.fail : severity == "warn" ? row.warn : row.info);
      if (severity == "fail")
        row.fail_findings.push_back(
            fmt::format("{} {}@{}", f.value("component", ""), f.value("signature", ""), f.value("step", int64_t{0})));
    }
    const json& summary = report.value("summary", json::object());
    for (const auto& m : compare_parts::kMetrics)
      if (const json::json_pointer ptr(m.pointer); summary.contains(ptr))
        row.metrics[m.name] = json_double(summary.at(ptr));
    if (row.metrics["peak_memory_bytes"] < 0) row.metrics["peak_memory_bytes"] = kNaN;
    config = report.value("config", json::object());
  } else {
    config = compare_parts::read_json(dir / "config.json");
  }
  Fnv config_hash;
  config_hash.add(config.value("training", json::object()).dump());
  row.config = config_hash.hex();

  if (fs::exists(dir / "metrics.jsonl")) {
    const RunRecord record = load_run_record(dir);
    Fnv loss, ops;
    bool any_ops = false;
    for (const auto& p : record.steps) {
      loss.add_value(p.step);
      loss.add_value(p.loss);  // the bits: NaN payloads and -0 count
      if (p.op_counts.empty()) continue;
      any_ops = true;
      ops.add_value(p.step);
      for (const auto& [op, n] : p.op_counts) {
        ops.add(op);
        ops.add_value(n);
      }
    }
    if (!record.steps.empty()) row.loss_trajectory = loss.hex();
    if (any_ops) row.op_fingerprint = ops.hex();
  }
  return row;
}

}  // namespace rcl
