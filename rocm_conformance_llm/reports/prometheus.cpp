#include "rocm_conformance_llm/reports/prometheus.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

namespace {
constexpr const char* kVerdicts[] = {"PASS", "WARN", "FAIL", "CRASHED", "HUNG", "INTERRUPTED"};
constexpr const char* kComponentStatuses[] = {"PASS", "WARN", "FAIL", "NOT_RUN"};

// The format's float text: NaN, +Inf and -Inf spelled its way.
std::string prom_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{:.17g}", v);
}

class PromWriter {
 public:
  PromWriter(const PromState& s) : labels_(fmt::format("run=\"{}\",rank=\"{}\"", prom_label_value(s.run), s.rank)) {}
  void gauge(const char* name, const char* help) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
  }
  void sample(const char* name, double value, const std::string& extra_labels = {}) {
    text_ += fmt::format("{}{{{}{}}} {}\n", name, labels_, extra_labels.empty() ? "" : "," + extra_labels,
                         prom_value(value));
  }
  std::string take() { return std::move(text_); }

 private:
  const std::string labels_;
  std::string text_;
};
}  // namespace

std::string prom_label_value(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string prometheus_text(const PromState& s) {
  PromWriter w(s);
  if (const auto& p = s.last_step) {
    w.gauge("rcl_step", "Last finished optimizer step.");
    w.sample("rcl_step", static_cast<double>(p->step));
    w.gauge("rcl_loss", "Training loss of the last finished step.");
    w.sample("rcl_loss", p->loss);
    w.gauge("rcl_tokens_per_second", "Tokens per second of this rank in the last finished step.");
    w.sample("rcl_tokens_per_second", p->step_time_s > 0 ? static_cast<double>(p->tokens) / p->step_time_s : 0.0);
    w.gauge("rcl_step_time_seconds", "Wall time of the last finished step.");
    w.sample("rcl_step_time_seconds", p->step_time_s);
    if (p->peak_memory_bytes >= 0) {
      w.gauge("rcl_memory_bytes",
              "Memory of the last finished step; figure names which one (report.json's peak_memory).");
      w.sample("rcl_memory_bytes", static_cast<double>(p->peak_memory_bytes),
               fmt::format("figure=\"{}\"", prom_label_value(p->memory_figure)));
    }
  }
  w.gauge("rcl_findings", "Findings so far, per ROCm component and severity.");
  // Counts only: a component's status is known at the end (rcl_component_status).
  for (const auto& c : component_statuses(s.findings, {})) {
    const std::string component = prom_label_value(c.component);
    using Count = std::pair<const char*, int>;
    for (const auto& [severity, count] : {Count{"info", c.info}, Count{"warn", c.warn}, Count{"fail", c.fail}})
      w.sample("rcl_findings", count, fmt::format("component=\"{}\",severity=\"{}\"", component, severity));
  }
  w.gauge("rcl_run_finished", "1 once the run has ended and rcl_verdict is set.");
  w.sample("rcl_run_finished", s.verdict ? 1 : 0);
  if (s.verdict) {
    w.gauge("rcl_verdict", "1 for the run's verdict, 0 for the others.");
    for (const char* v : kVerdicts)
      w.sample("rcl_verdict", s.verdict->status == v ? 1 : 0, fmt::format("verdict=\"{}\"", v));
    w.gauge("rcl_exit_code", "The run's exit code (0 clean, 1 fail finding, 3 crash or hang, 4 interrupted).");
    w.sample("rcl_exit_code", s.verdict->exit_code);
  }
  if (!s.components.empty()) {
    w.gauge("rcl_component_status",
            "1 for each ROCm component's status (NOT_RUN: no check exercised it), 0 for the others.");
    for (const auto& c : s.components)
      for (const char* status : kComponentStatuses)
        w.sample("rcl_component_status", c.status == status ? 1 : 0,
                 fmt::format("component=\"{}\",status=\"{}\"", prom_label_value(c.component), status));
  }
  w.gauge("rcl_last_update_timestamp_seconds", "Unix time this file was written: a stale run stops advancing it.");
  w.sample("rcl_last_update_timestamp_seconds",
           std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  return w.take();
}

std::string prom_run_name(const std::filesystem::path& output_dir) {
  auto dir = std::filesystem::absolute(output_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir.filename().string();
}

std::filesystem::path prom_path(const std::filesystem::path& output_dir, int rank) {
  return output_dir / (rank == 0 ? std::string("metrics.prom") : fmt::format("metrics.rank{}.prom", rank));
}

PrometheusObserver::PrometheusObserver(const std::filesystem::path& output_dir, int rank, int64_t interval,
                                       const FindingLog& findings)
    : path_(prom_path(output_dir, rank)),
      run_(prom_run_name(output_dir)),
      rank_(rank),
      interval_(interval),
      findings_(findings) {}

void PrometheusObserver::on_step(const StepRecord& r) {
  if (interval_ <= 0 || r.step % interval_ != 0) return;
  write_file_atomically(path_, prometheus_text({run_, rank_, make_step_point(r), findings_.snapshot(), std::nullopt}));
}

}  // namespace rcl
