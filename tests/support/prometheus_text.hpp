// A parser of the Prometheus text exposition format written here from its spec
// (https://prometheus.io/docs/instrumenting/exposition_formats/), so metrics.prom is read back
// by something that is not its writer: "# HELP name text" / "# TYPE name type" once per family,
// before its samples; samples `name{label="value",...} value [timestamp]`, a family's samples
// together, no repeated label set; label values escape \\, \" and \n; values are Go floats
// (NaN, +Inf, -Inf included). Malformed text throws.
#pragma once

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace rcl::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

inline bool valid_metric_name(const std::string& s) {
  return std::regex_match(s, std::regex("[a-zA-Z_:][a-zA-Z0-9_:]*"));
}
inline bool valid_label_name(const std::string& s) { return std::regex_match(s, std::regex("[a-zA-Z_][a-zA-Z0-9_]*")); }

inline double parse_value(const std::string& s) {
  if (s == "NaN") return NAN;
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  size_t used = 0;
  const double v = std::stod(s, &used);
  if (used != s.size()) throw std::runtime_error("bad value '" + s + "'");
  return v;
}

// The parser: throws std::runtime_error naming the line on anything the spec does not allow.
inline std::vector<Sample> parse_exposition(const std::string& text) {
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
inline std::vector<Sample> find(const std::vector<Sample>& samples, const std::string& name,
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

}  // namespace rcl::testing
