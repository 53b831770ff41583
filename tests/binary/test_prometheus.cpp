// metrics.prom read back with a parser written here from the Prometheus text
// exposition format's spec (https://prometheus.io/docs/instrumenting/exposition_formats/):
// "# HELP name text" / "# TYPE name type" once per family, before its samples; samples
// `name{label="value",...} value [timestamp]`, a family's samples together, no repeated label set;
// label values escape \\, \" and \n; values are Go floats (NaN, +Inf, -Inf included).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "support/cli_runner.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"

namespace rcl {
namespace {

namespace fs = std::filesystem;
using rcl::testing::read_text;
using rcl::testing::run_cli;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

bool valid_metric_name(const std::string& s) { return std::regex_match(s, std::regex("[a-zA-Z_:][a-zA-Z0-9_:]*")); }
bool valid_label_name(const std::string& s) { return std::regex_match(s, std::regex("[a-zA-Z_][a-zA-Z0-9_]*")); }

double parse_value(const std::string& s) {
  if (s == "NaN") return NAN;
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  size_t used = 0;
  const double v = std::stod(s, &used);
  if (used != s.size()) throw std::runtime_error("bad value '" + s + "'");
  return v;
}

// The parser: throws std::runtime_error naming the line on anything the spec does not allow.
std::vector<Sample> parse_exposition(const std::string& text) {
  if (!text.empty() && text.back() != '\n') throw std::runtime_error("the last line must end with a newline");
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;
  std::set<std::string> helped, finished_families;
  std::set<std::string> seen_series;
  std::string current_family;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const std::string where = "line " + std::to_string(number) + " '" + line + "': ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::smatch m;
      if (std::regex_match(line, m, std::regex("# (HELP|TYPE) (\\S+) (.*)"))) {
        const std::string name = m[2];
        if (!valid_metric_name(name)) throw std::runtime_error(where + "bad metric name");
        if (m[1] == "HELP" && !helped.insert(name).second) throw std::runtime_error(where + "second HELP");
        if (m[1] == "TYPE") {
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
          if (!kTypes.count(m[3])) throw std::runtime_error(where + "unknown type");
          if (types.count(name)) throw std::runtime_error(where + "second TYPE");
          if (finished_families.count(name) || current_family == name)
            throw std::runtime_error(where + "TYPE after the family's samples");
          types[name] = m[3];
        }
      }
      continue;  // other comments are allowed
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!valid_metric_name(s.name)) throw std::runtime_error(where + "bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos) throw std::runtime_error(where + "label without '='");
        const std::string label = line.substr(i, eq - i);
        if (!valid_label_name(label)) throw std::runtime_error(where + "bad label name '" + label + "'");
        if (eq + 1 >= line.size() || line[eq + 1] != '"') throw std::runtime_error(where + "label value not quoted");
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] != '\\') {
            value += line[j];
            continue;
          }
          if (++j >= line.size()) throw std::runtime_error(where + "dangling escape");
          if (line[j] == 'n') value += '\n';
          else if (line[j] == '\\' || line[j] == '"') value += line[j];
          else throw std::runtime_error(where + "unknown escape");
        }
        if (j >= line.size()) throw std::runtime_error(where + "unterminated label value");
        if (!s.labels.emplace(label, value).second) throw std::runtime_error(where + "repeated label");
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) throw std::runtime_error(where + "unterminated label set");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') throw std::runtime_error(where + "no value");
    std::istringstream rest(line.substr(i + 1));
    std::string value, timestamp, extra;
    rest >> value >> timestamp >> extra;
    if (!extra.empty()) throw std::runtime_error(where + "trailing text");
    if (!timestamp.empty() && !std::regex_match(timestamp, std::regex("-?[0-9]+")))
      throw std::runtime_error(where + "bad timestamp");
    s.value = parse_value(value);
    if (s.name != current_family) {
      if (finished_families.count(s.name)) throw std::runtime_error(where + "family's samples not together");
      if (!current_family.empty()) finished_families.insert(current_family);
      current_family = s.name;
    }
    std::string series = s.name;
    for (const auto& [k, v] : s.labels) series += "|" + k + "=" + v;
    if (!seen_series.insert(series).second) throw std::runtime_error(where + "repeated series");
    samples.push_back(std::move(s));
  }
  return samples;
}

// The samples of `name` whose labels include `labels`.
std::vector<Sample> find(const std::vector<Sample>& samples, const std::string& name,
                         const std::map<std::string, std::string>& labels = {}) {
  std::vector<Sample> out;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all = all && s.labels.count(k) && s.labels.at(k) == v;
    if (all) out.push_back(s);
  }
  return out;
}

TEST(PrometheusParser, RejectsWhatTheFormatForbids) {
  EXPECT_THROW(parse_exposition("a{x=\"1\"} 1"), std::runtime_error);                    // no final newline
  EXPECT_THROW(parse_exposition("a{x=1} 1\n"), std::runtime_error);                      // unquoted
  EXPECT_THROW(parse_exposition("a 1\nb 1\na 2\n"), std::runtime_error);                 // family split
  EXPECT_THROW(parse_exposition("a{x=\"1\"} 1\na{x=\"1\"} 2\n"), std::runtime_error);    // same series twice
  EXPECT_THROW(parse_exposition("a{x=\"\\q\"} 1\n"), std::runtime_error);                // bad escape
  EXPECT_THROW(parse_exposition("a 1\n# TYPE a gauge\n"), std::runtime_error);           // TYPE after samples
  EXPECT_THROW(parse_exposition("a one\n"), std::invalid_argument);                      // not a float
  EXPECT_EQ(parse_exposition("# TYPE a gauge\na{x=\"q\\\"\\n\\\\\"} NaN\n")[0].labels.at("x"), "q\"\n\\");
}

TEST(MetricsProm, LabelValuesWithQuotesBackslashesAndNewlinesRoundTrip) {
  PromState state{"node \"7\"\\a\nb", 3, StepPoint{.step = 9, .loss = NAN, .step_time_s = 0.5, .tokens = 100}, {},
                  Verdict{"HUNG", 3}};
  const auto samples = parse_exposition(prometheus_text(state));
  const auto loss = find(samples, "rcl_loss");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].labels.at("run"), "node \"7\"\\a\nb");
  EXPECT_EQ(loss[0].labels.at("rank"), "3");
  EXPECT_TRUE(std::isnan(loss[0].value));
  EXPECT_EQ(find(samples, "rcl_tokens_per_second")[0].value, 200.0);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "HUNG"}})[0].value, 1.0);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "PASS"}})[0].value, 0.0);
}

TEST(MetricsProm, RewrittenEveryIntervalStepsWithTheFindingsSoFar) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-prom-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FindingLog log;
  PrometheusObserver observer(dir, 0, 2, log);
  StepRecord r;
  r.step = 1;
  observer.on_step(r);
  EXPECT_FALSE(fs::exists(dir / "metrics.prom")) << "step 1 is not a multiple of 2";
  log.add(Finding{component::rccl, "collective_latency_outlier", Severity::warn, 2, 0, "slow"});
  r.step = 2;
  r.loss = 3.5;
  observer.on_step(r);
  auto samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_step")[0].value, 2);
  EXPECT_EQ(find(samples, "rcl_loss")[0].value, 3.5);
  EXPECT_EQ(find(samples, "rcl_run_finished")[0].value, 0);
  EXPECT_TRUE(find(samples, "rcl_verdict").empty());
  EXPECT_EQ(find(samples, "rcl_findings", {{"component", "RCCL"}, {"severity", "warn"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_findings", {{"component", "RCCL"}, {"severity", "fail"}})[0].value, 0);
  EXPECT_EQ(find(samples, "rcl_findings").size(), std::size(component::all) * 3);
  r.step = 3;
  observer.on_step(r);
  samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_step")[0].value, 2) << "step 3 is not rewritten";
  EXPECT_FALSE(fs::exists(dir / "metrics.prom.tmp"));
  fs::remove_all(dir);
}

TEST(MetricsProm, ARunEndsWithItsVerdictAndFindingsByComponent) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-prom-run-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = run_cli(rcl::testing::kSmokeCpu + "--steps 6 "
                         "--set diagnostics.prom_interval=2 --inject nan@step=4 --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_run_finished")[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "FAIL"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_exit_code")[0].value, 1);
  EXPECT_GE(find(samples, "rcl_findings", {{"component", "rocBLAS/hipBLASLt"}, {"severity", "fail"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_step")[0].labels.at("run"), dir.filename().string());
  EXPECT_GT(find(samples, "rcl_step")[0].value, 3);
  EXPECT_FALSE(find(samples, "rcl_memory_bytes").empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rcl
