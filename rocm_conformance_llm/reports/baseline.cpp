#include "rocm_conformance_llm/reports/baseline.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// Knobs that change how long or how verbosely a run goes, not what each step computes.
const std::set<std::string> kIgnoredTrainingKeys = {"steps", "max_duration_s", "log_per_rank", "num_threads",
                                                    "phase_timing"};
constexpr size_t kMaxFingerprintDiffs = 20;

std::optional<nlohmann::json> read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("--baseline: cannot parse " + path.string() + ": " + e.what());
  }
}

double number_or_nan(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_number() ? std::numeric_limits<double>::quiet_NaN() : it->get<double>();
}

std::vector<std::string> differing_training_keys(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> keys;
  const auto ta = a.value("training", nlohmann::json::object());
  const auto tb = b.value("training", nlohmann::json::object());
  std::set<std::string> all;
  for (const auto& [k, v] : ta.items()) all.insert(k);
  for (const auto& [k, v] : tb.items()) all.insert(k);
  // A key one record lacks is a field added since it was written: it ran as the field's default.
  const nlohmann::json defaults = TrainingConfig{};
  const auto at = [&](const nlohmann::json& t, const std::string& k) { return t.value(k, defaults.value(k, nlohmann::json())); };
  for (const auto& k : all)
    if (!kIgnoredTrainingKeys.count(k) && at(ta, k) != at(tb, k)) keys.push_back(k);
  return keys;
}

// Every step under deterministic algorithms (determinism "all", or the stable bool): "replay"
// switches them on only around the replay check's steps, so its losses are not bitwise stable.
bool deterministic(const RunRecord& r) {
  const auto training = r.config.value("training", nlohmann::json::object());
  return training.value("deterministic", false) || training.value("determinism", "off") == "all";
}

std::vector<double> steady_times(const std::vector<StepPoint>& steps, int64_t warmup) {
  std::vector<double> t;
  for (const auto& p : steps)
    if (p.step > warmup) t.push_back(p.step_time_s);
  return t;
}

const StepPoint* peak_point(const std::vector<StepPoint>& steps) {
  const StepPoint* best = nullptr;
  for (const auto& p : steps)
    if (p.peak_memory_bytes >= 0 && (!best || p.peak_memory_bytes > best->peak_memory_bytes)) best = &p;
  return best;
}

// Pairs of points at the same step number, in step order.
std::vector<std::pair<const StepPoint*, const StepPoint*>> common_steps(const RunRecord& now, const RunRecord& then) {
  std::map<int64_t, const StepPoint*> by_step;
  for (const auto& p : then.steps) by_step[p.step] = &p;
  std::vector<std::pair<const StepPoint*, const StepPoint*>> out;
  for (const auto& p : now.steps)
    if (const auto it = by_step.find(p.step); it != by_step.end()) out.emplace_back(&p, it->second);
  return out;
}

class Comparer {
 public:
  Comparer(const RunRecord& now, const RunRecord& then, const DiagnosticsConfig& cfg, int rank)
      : now_(now), then_(then), cfg_(cfg), rank_(rank), common_(common_steps(now, then)) {
    summary_["steps_compared"] = common_.size();
  }

  void compare_losses() {
    const bool bitwise = deterministic(now_) && deterministic(then_);
    const double tol = cfg_.baseline_loss_rel_tolerance;
    auto& s = summary_["loss"] = {
        {"mode", bitwise ? "bitwise" : "tolerance"}, {"rel_tolerance", tol}, {"first_differing_step", nullptr}};
    for (const auto& [a, b] : common_) {
      const double rel = std::abs(a->loss - b->loss) / std::max({std::abs(a->loss), std::abs(b->loss), 1e-30});
      const bool both_nan = std::isnan(a->loss) && std::isnan(b->loss);
      if (bitwise ? stats::same_bits(a->loss, b->loss) : (both_nan || rel <= tol)) continue;
      s["first_differing_step"] = a->step;
      add(component::rocblas, "loss_mismatch_vs_baseline", bitwise ? Severity::fail : Severity::warn, a->step,
          fmt::format("loss at step {} is {:.17g}, the baseline had {:.17g} ({})", a->step, a->loss, b->loss,
                      bitwise ? "both runs deterministic: must be bitwise equal"
                              : fmt::format("relative difference {:.3g} > {:.3g}", rel, tol)),
          {{"loss", json_number(a->loss)},
           {"baseline_loss", json_number(b->loss)},
           {"relative_difference", json_number(rel)},
           {"mode", bitwise ? "bitwise" : "tolerance"}});
      return;
    }
  }

  void compare_step_times() {
    const auto a = steady_times(now_.steps, cfg_.warmup_steps), b = steady_times(then_.steps, cfg_.warmup_steps);
    if (a.empty() || b.empty()) return;
    const double ratio = stats::median(a) / stats::median(b);
    summary_["step_time_median_ratio"] = ratio;
    if (ratio < cfg_.slowdown_ratio_warn) return;
    add(component::miopen, "step_time_regression_vs_baseline", Severity::warn, now_.steps.back().step,
        fmt::format("median step time {:.4g} s is {:.2f}x the baseline's {:.4g} s", stats::median(a), ratio,
                    stats::median(b)),
        {{"median_s", stats::median(a)},
         {"baseline_median_s", stats::median(b)},
         {"ratio", ratio},
         {"threshold_ratio", cfg_.slowdown_ratio_warn}});
  }

  void compare_peak_memory() {
    const StepPoint* a = peak_point(now_.steps);
    const StepPoint* b = peak_point(then_.steps);
    if (!a || !b || a->memory_figure != b->memory_figure || b->peak_memory_bytes <= 0) return;
    const double ratio = static_cast<double>(a->peak_memory_bytes) / static_cast<double>(b->peak_memory_bytes);
    summary_["peak_memory_ratio"] = ratio;
    if (ratio <= 1.0 + cfg_.baseline_memory_growth_ratio) return;
    add(component::allocator, "peak_memory_regression_vs_baseline", Severity::warn, a->step,
        fmt::format("peak {} {:.1f} MiB is {:.2f}x the baseline's {:.1f} MiB", a->memory_figure,
                    a->peak_memory_bytes / 1048576.0, ratio, b->peak_memory_bytes / 1048576.0),
        {{"figure", a->memory_figure},
         {"peak_bytes", a->peak_memory_bytes},
         {"baseline_peak_bytes", b->peak_memory_bytes},
         {"ratio", ratio},
         {"threshold_growth_ratio", cfg_.baseline_memory_growth_ratio}});
  }

  void compare_fingerprints() {
    int64_t compared = 0;
    summary_["first_fingerprint_difference_step"] = nullptr;
    for (const auto& [a, b] : common_) {
      if (a->op_counts.empty() || b->op_counts.empty()) continue;
      ++compared;
      if (a->op_counts == b->op_counts) continue;
      nlohmann::json diffs = nlohmann::json::object();
      std::set<std::string> ops;
      for (const auto& [op, n] : a->op_counts) ops.insert(op);
      for (const auto& [op, n] : b->op_counts) ops.insert(op);
      for (const auto& op : ops) {
        const auto na = a->op_counts.count(op) ? a->op_counts.at(op) : 0;
        const auto nb = b->op_counts.count(op) ? b->op_counts.at(op) : 0;
        if (na != nb && diffs.size() < kMaxFingerprintDiffs) diffs[op] = {{"now", na}, {"baseline", nb}};
      }
      summary_["first_fingerprint_difference_step"] = a->step;
      add(component::miopen, "op_fingerprint_changed", Severity::warn, a->step,
          fmt::format("step {} dispatched a different set of ATen ops than the baseline ({} ops differ)", a->step,
                      diffs.size()),
          {{"differences", diffs}, {"ops_now", a->op_counts.size()}, {"ops_baseline", b->op_counts.size()}});
      break;
    }
    summary_["fingerprint_steps_compared"] = compared;
  }

  void compare_findings() {
    std::set<std::pair<std::string, std::string>> before;
    for (const auto& f : then_.findings) before.insert({f.component, f.signature});
    auto& list = summary_["new_findings"] = nlohmann::json::array();
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& f : now_.findings) {
      const std::pair key{f.component, f.signature};
      if (before.count(key) || !seen.insert(key).second) continue;
      list.push_back({{"component", f.component}, {"signature", f.signature}});
      add(f.component, "new_finding_vs_baseline", Severity::warn, f.step,
          fmt::format("{} ({}) is new: the baseline run did not report it", f.signature, to_string(f.severity)),
          {{"signature", f.signature}, {"severity", to_string(f.severity)}, {"message", f.message}});
    }
  }

  BaselineComparison result() && { return {std::move(findings_), std::move(summary_)}; }

 private:
  void add(const std::string& comp, const std::string& signature, Severity severity, int64_t step, std::string message,
           nlohmann::json evidence) {
    findings_.push_back(Finding{.component = comp,
                                .signature = signature,
                                .severity = severity,
                                .step = step,
                                .rank = rank_,
                                .message = std::move(message),
                                .evidence = std::move(evidence)});
  }

  const RunRecord& now_;
  const RunRecord& then_;
  const DiagnosticsConfig& cfg_;
  const int rank_;
  const std::vector<std::pair<const StepPoint*, const StepPoint*>> common_;
  std::vector<Finding> findings_;
  nlohmann::json summary_ = nlohmann::json::object();
};

}  // namespace

StepRecord step_record_from_metrics_json(const nlohmann::json& j) {
  StepRecord r;
  r.step = j.at("step").get<int64_t>();
  r.rank = j.value("rank", 0);
  r.loss = number_or_nan(j, "loss");
  r.grad_norm = number_or_nan(j, "grad_norm");
  r.step_time_s = j.value("step_time_s", 0.0);
  r.tokens = j.value("tokens", int64_t{0});
  r.tokens_per_s = j.value("tokens_per_s", 0.0);
  if (const auto m = j.find("memory"); m != j.end()) {
    r.memory.allocated_bytes = m->value("allocated_bytes", int64_t{-1});
    r.memory.reserved_bytes = m->value("reserved_bytes", int64_t{-1});
    r.memory.peak_allocated_bytes = m->value("peak_allocated_bytes", int64_t{-1});
    r.memory.rss_bytes = m->value("rss_bytes", int64_t{-1});
    r.memory.source = m->value("source", std::string());
  }
  if (const auto ops = j.find("op_counts"); ops != j.end()) r.op_counts = ops->get<std::map<std::string, int64_t>>();
  return r;
}

RunRecord load_run_record(const fs::path& dir) {
  const fs::path metrics = dir / "metrics.jsonl";
  std::ifstream in(metrics);
  if (!in) throw ConfigError("--baseline: cannot read " + metrics.string() + " (not a previous run's output dir?)");
  RunRecord record;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      record.steps.push_back(make_step_point(step_record_from_metrics_json(nlohmann::json::parse(lines[i]))));
    } catch (const nlohmann::json::exception& e) {
      if (i + 1 == lines.size()) break;  // the run crashed while writing its last line
      throw ConfigError(
          fmt::format("--baseline: {} line {} is not a metrics record: {}", metrics.string(), i + 1, e.what()));
    }
  }
  if (record.steps.empty()) throw ConfigError("--baseline: " + metrics.string() + " holds no steps");

  if (const auto report = read_json_file(dir / "report.json")) {
    for (const auto& f : report->value("findings", nlohmann::json::array()))
      record.findings.push_back(finding_from_json(f));
    record.config = report->value("config", nlohmann::json::object());
  }
  if (record.config.empty())
    if (const auto config = read_json_file(dir / "config.json")) record.config = *config;
  return record;
}

BaselineComparison compare_with_baseline(const RunRecord& now, const RunRecord& then, const DiagnosticsConfig& cfg,
                                         int rank) {
  const auto differences = differing_training_keys(now.config, then.config);
  if (!differences.empty()) {
    spdlog::warn("--baseline: the training configs differ ({}); nothing compared", nlohmann::json(differences).dump());
    return {{}, {{"comparable", false}, {"config_differences", differences}}};
  }
  Comparer c(now, then, cfg, rank);
  c.compare_losses();
  c.compare_step_times();
  c.compare_peak_memory();
  c.compare_fingerprints();
  c.compare_findings();
  auto result = std::move(c).result();
  result.summary["comparable"] = true;
  return result;
}

}  // namespace rcl
