#include "rocm_conformance_llm/reports/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iterator>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/monitors/error_classifier.hpp"
#include "rocm_conformance_llm/reports/html_report.hpp"
#include "rocm_conformance_llm/reports/ocp_output.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

std::string to_string(RunOutcome o) {
  static constexpr const char* kNames[] = {"completed", "crashed", "hung", "interrupted"};  // enum order
  return kNames[static_cast<size_t>(o)];
}

std::vector<ComponentStatus> component_statuses(const std::vector<Finding>& findings,
                                                const std::vector<ComponentCoverage>& coverage) {
  std::vector<ComponentStatus> out;
  for (const char* name : component::all) {
    ComponentStatus s;
    s.component = name;
    s.reason = "not recorded: the run ended before its checks were built";
    for (const auto& c : coverage)
      if (c.component == name) {
        s.exercised = c.exercised;
        s.reason = c.reason;
        s.checks = c.checks;
      }
    for (const auto& f : findings) {
      if (f.component != name) continue;
      ++(f.severity == Severity::fail ? s.fail : f.severity == Severity::warn ? s.warn : s.info);
    }
    s.status = s.fail > 0 ? "FAIL" : s.warn > 0 ? "WARN" : s.exercised ? "PASS" : "NOT_RUN";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> exercised_components(const std::vector<ComponentStatus>& statuses) {
  std::vector<std::string> out;
  for (const auto& s : statuses)
    if (s.exercised) out.push_back(s.component);
  return out;
}

std::string coverage_sentence(const std::vector<ComponentStatus>& statuses) {
  const auto exercised = exercised_components(statuses);
  if (exercised.empty())
    return "No ROCm component was exercised: this verdict is about the training job and the tool, not the ROCm stack.";
  if (exercised.size() == statuses.size()) return "Every ROCm component was exercised.";
  return fmt::format("Exercised {} of {} ROCm components: {}.", exercised.size(), statuses.size(),
                     fmt::join(exercised, ", "));
}

Verdict verdict_for(const std::vector<Finding>& findings, RunOutcome outcome) {
  if (outcome == RunOutcome::crashed) return {"CRASHED", kExitCrashOrHang};
  if (outcome == RunOutcome::hung) return {"HUNG", kExitCrashOrHang};
  if (outcome == RunOutcome::interrupted) return {"INTERRUPTED", kExitInterrupted};
  bool warn = false;
  for (const auto& f : findings) {
    if (f.severity == Severity::fail) return {"FAIL", kExitFailFinding};
    warn = warn || f.severity == Severity::warn;
  }
  return {warn ? "WARN" : "PASS", kExitClean};
}

std::string format_component_table(const std::vector<ComponentStatus>& statuses, const Verdict& v) {
  std::string t = fmt::format("{:<21} {:<7} {:>5} {:>5} {:>5}  {}\n", "component", "status", "info", "warn", "fail",
                              "not exercised because");
  for (const auto& s : statuses)
    t += fmt::format("{:<21} {:<7} {:>5} {:>5} {:>5}  {}\n", s.component, s.status, s.info, s.warn, s.fail,
                     s.exercised ? "" : s.reason);
  t += fmt::format("verdict: {} (exit code {}). {}", v.status, v.exit_code, coverage_sentence(statuses));
  return t;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default: out += c < 0x20 ? '?' : ch;  // other control characters are not allowed in XML 1.0
    }
  }
  return out;
}

namespace {
// "action rerun (transient)": what to do, and the re-run's classification when there was one.
std::string action_text(const Finding& f) {
  return "action " + to_string(action_of(f)) + (f.classification ? " (" + to_string(*f.classification) + ")" : "");
}

std::string finding_line(const Finding& f) {
  return fmt::format("[{}] {} at step {} (rank {}): {} | {} | evidence {}", to_string(f.severity), f.signature, f.step,
                     f.rank, f.message, action_text(f), f.evidence.dump());
}
}  // namespace

namespace {
// One <testcase>: `findings` are its own; a <failure> for the fail ones, the rest in <system-out>,
// else `skipped` (a reason) when not empty.
std::string junit_case(const std::string& classname, const std::string& name, const std::vector<Finding>& findings,
                       const std::string& failure_type, const std::string& skipped) {
  std::string fail_text, other_text, first_fail;
  int fails = 0;
  for (const auto& f : findings) {
    std::string& dest = f.severity == Severity::fail ? fail_text : other_text;
    dest += finding_line(f) + "\n";
    if (f.severity != Severity::fail) continue;
    if (fails++ == 0)
      first_fail = fmt::format("{} at step {}: {} | {}", f.signature, f.step, f.message, action_text(f));
  }
  std::string x = fmt::format("  <testcase classname=\"{}\" name=\"{}\" time=\"0\"", classname, xml_escape(name));
  if (fail_text.empty() && other_text.empty() && skipped.empty()) return x + "/>\n";
  x += ">\n";
  if (!fail_text.empty()) {
    if (fails > 1) first_fail += fmt::format(" (+{} more)", fails - 1);
    x += fmt::format("    <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml_escape(first_fail),
                     xml_escape(failure_type), xml_escape(fail_text));
  } else if (!skipped.empty()) {
    x += fmt::format("    <skipped message=\"{}\"/>\n", xml_escape(skipped));
  }
  if (!other_text.empty()) x += fmt::format("    <system-out>{}</system-out>\n", xml_escape(other_text));
  return x + "  </testcase>\n";
}
}  // namespace

std::string junit_xml(const std::vector<Finding>& findings, const std::vector<ComponentStatus>& statuses,
                      const std::vector<std::string>& checks_ran, const Verdict& v, const JunitRun& run) {
  int failures = 0, skipped = 0;
  std::string cases;
  for (const auto& s : statuses) {
    std::vector<Finding> own;
    std::copy_if(findings.begin(), findings.end(), std::back_inserter(own),
                 [&](const Finding& f) { return f.component == s.component; });
    failures += s.fail > 0;
    skipped += s.status == "NOT_RUN";
    cases += junit_case("rocm-conformance-llm", s.component, own, s.status, s.status == "NOT_RUN" ? s.reason : "");
  }
  for (const auto& check : checks_ran) {
    std::vector<Finding> own;
    std::copy_if(findings.begin(), findings.end(), std::back_inserter(own),
                 [&](const Finding& f) { return detector_of_signature(f.signature) == check; });
    failures += std::any_of(own.begin(), own.end(), [](const Finding& f) { return f.severity == Severity::fail; });
    cases += junit_case("rocm-conformance-llm.check", check, own, "FAIL", "");
  }
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format(
      "<testsuite name=\"rocm-conformance-llm\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
      "skipped=\"{}\" time=\"{:.3f}\" timestamp=\"{}\" hostname=\"{}\">\n",
      statuses.size() + checks_ran.size(), failures, skipped, run.duration_s, xml_escape(run.timestamp),
      xml_escape(run.hostname));
  x += fmt::format(
      "  <properties>\n    <property name=\"verdict\" value=\"{}\"/>\n"
      "    <property name=\"exit_code\" value=\"{}\"/>\n"
      "    <property name=\"exercised_rocm_components\" value=\"{}\"/>\n",
      v.status, v.exit_code, xml_escape(fmt::format("{}", fmt::join(exercised_components(statuses), ","))));
  if (run.identity.is_object())
    for (const auto& [key, value] : run.identity.items())
      x += fmt::format("    <property name=\"{}\" value=\"{}\"/>\n", xml_escape(key),
                       xml_escape(value.is_string() ? value.get<std::string>() : value.dump()));
  x += "  </properties>\n";
  return x + cases + "</testsuite>\n";
}

namespace {
std::filesystem::path per_rank(const std::filesystem::path& dir, const std::string& stem, const std::string& ext,
                               int rank) {
  return dir / (rank == 0 ? stem + ext : fmt::format("{}.rank{}{}", stem, rank, ext));
}
}  // namespace

ReportWriter::ReportWriter(std::filesystem::path output_dir, int rank, nlohmann::json config_snapshot,
                           nlohmann::json environment, FindingLog& findings, const RunSummary& summary,
                           int64_t warmup_steps)
    : report_path_(per_rank(output_dir, "report", ".json", rank)),
      junit_path_(per_rank(output_dir, "junit", ".xml", rank)),
      html_path_(per_rank(output_dir, "report", ".html", rank)),
      metrics_path_(per_rank(output_dir, "metrics", ".jsonl", rank)),
      prom_path_(prom_path(output_dir, rank)),
      ocp_path_(ocp_path(output_dir, rank)),
      run_name_(prom_run_name(output_dir)),
      rank_(rank),
      config_(std::move(config_snapshot)),
      environment_(std::move(environment)),
      findings_(findings),
      summary_(summary),
      warmup_steps_(warmup_steps),
      started_(std::chrono::steady_clock::now()),
      started_at_(std::chrono::system_clock::now()) {}

void ReportWriter::add_section(const std::string& key, nlohmann::json value) {
  std::lock_guard<std::mutex> lock(mutex_);
  sections_[key] = std::move(value);
}

void ReportWriter::set_training_collectives(const TrainingCollectives& table) {
  std::lock_guard<std::mutex> lock(mutex_);
  training_collectives_ = &table;
}

void ReportWriter::set_coverage(RunCoverage coverage) {
  std::lock_guard<std::mutex> lock(mutex_);
  coverage_ = std::move(coverage);
}

namespace {
std::string utc_iso8601(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return text;
}

}  // namespace

int ReportWriter::write(RunOutcome outcome, const std::string& note) {
  std::vector<Finding> findings;
  Verdict verdict;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (written_exit_code_) return *written_exit_code_;
    findings = findings_.snapshot();
    verdict = verdict_for(findings, outcome);
    if (const int code = write_locked(outcome, note, findings, verdict); code != verdict.exit_code) return code;
  }
  if (after_write_) after_write_(verdict, findings);
  return verdict.exit_code;
}

int ReportWriter::write_locked(RunOutcome outcome, const std::string& note, const std::vector<Finding>& findings,
                               const Verdict& verdict) {
  const auto steps_run = static_cast<int64_t>(summary_.steps().size());
  const auto coverage = component_coverage(coverage_, steps_run);
  const auto statuses = component_statuses(findings, coverage);
  const double duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::vector<std::string> checks_ran;
  for (const auto& c : coverage_.checks)
    if (c.ran && steps_run > 0) checks_ran.push_back(c.check);

  nlohmann::json report = {{"tool", "rocm-conformance-llm"},
                           {"verdict", verdict.status},
                           {"exit_code", verdict.exit_code},
                           {"outcome", to_string(outcome)},
                           {"rank", rank_},
                           {"duration_s", duration_s},
                           {"components", nlohmann::json::array()},
                           {"exercised_rocm_components", exercised_components(statuses)},
                           {"coverage_note", coverage_sentence(statuses)},
                           {"coverage", to_json(coverage_, coverage, steps_run)},
                           {"findings", nlohmann::json::array()},
                           {"summary", summarize_steps(summary_.steps(), warmup_steps_)},
                           {"config", config_},
                           {"environment", environment_}};
  if (!note.empty()) report["note"] = note;
  for (const auto& s : statuses)
    report["components"].push_back({{"component", s.component},
                                    {"status", s.status},
                                    {"info", s.info},
                                    {"warn", s.warn},
                                    {"fail", s.fail},
                                    {"exercised", s.exercised},
                                    {"reason", s.reason},
                                    {"checks", s.checks}});
  for (const auto& f : findings) report["findings"].push_back(to_json(f));
  for (const auto& [key, value] : sections_.items()) report[key] = value;
  if (training_collectives_) {
    if (auto rows = training_collectives_->rows(); !rows.empty()) report["collectives"]["training"] = std::move(rows);
  }

  try {
    write_file_atomically(report_path_, report.dump(2) + "\n");
    write_file_atomically(junit_path_, junit_xml(findings, statuses, checks_ran, verdict,
                                                 {duration_s, utc_iso8601(started_at_), host_name(),
                                                  sections_.value("identity", nlohmann::json())}));
  } catch (const std::exception& e) {
    // The verdict cannot reach its files (directory removed, disk full, permissions): say so on
    // the console and exit as a crash, never with the code of a verdict nobody can read.
    spdlog::error("cannot write the report ({}): {}; verdict was {}", report_path_.string(), e.what(), verdict.status);
    written_exit_code_ = kExitCrashOrHang;
    return kExitCrashOrHang;
  }
  write_views(report, findings, verdict, statuses);
  const auto level = verdict.exit_code == kExitClean ? spdlog::level::info : spdlog::level::err;
  spdlog::log(level, "ROCm component summary ({}):\n{}", report_path_.string(),
              format_component_table(statuses, verdict));
  written_exit_code_ = verdict.exit_code;
  return verdict.exit_code;
}

void ReportWriter::write_views(const nlohmann::json& report, const std::vector<Finding>& findings,
                               const Verdict& verdict, const std::vector<ComponentStatus>& statuses) {
  const auto steps = summary_.steps();
  PromState prom{run_name_, rank_, std::nullopt, findings, verdict, statuses};
  if (!steps.empty()) prom.last_step = steps.back();
  const auto write_view = [](const std::filesystem::path& path, const std::function<std::string()>& render) {
    try {
      write_file_atomically(path, render());
    } catch (const std::exception& e) {
      spdlog::error("cannot write {}: {}", path.string(), e.what());
    }
  };
  write_view(html_path_, [&] { return report_html(report, metrics_path_); });
  write_view(prom_path_, [&] { return prometheus_text(prom); });
  std::string ocp;
  write_view(ocp_path_, [&] {
    ocp = ocp_jsonl(ocp_artifacts(report, metrics_path_,
                                  {this_command_line(), host_name(), started_at_, std::chrono::system_clock::now()}));
    return ocp;
  });
  if (ocp_to_stdout_ && !ocp.empty()) {
    std::fputs(ocp.c_str(), stdout);
    std::fflush(stdout);
  }
}

int ReportWriter::write_crash(std::string_view what, const std::string& phase) {
  // The device the run trained on, as the environment report names it (absent: an accelerator).
  const bool cpu_run = environment_.is_object() && environment_.value("device_kind", "") == "cpu";
  findings_.add(crash_finding(what, summary_.last_step() + 1, rank_, phase, summary_.last_memory(), cpu_run));
  return write(RunOutcome::crashed, std::string(what.substr(0, what.find('\n'))));
}

}  // namespace rcl
