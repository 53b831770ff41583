// The compare command itself: the run directories (quoted globs expanded), then rules, rows,
// reference, judging and the three outputs in order, and the exit code for CI.
#include "rocm_conformance_llm/reports/compare.hpp"

#include <glob.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/reports/compare_parts.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

json compare_parts::read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("compare: cannot read '" + path.string() + "'");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw ConfigError("compare: '" + path.string() + "' is not valid JSON (" + e.what() + ")");
  }
}

namespace {

// Quoted globs ("runs/node*") are expanded here; anything else is taken as written.
std::vector<std::string> expand(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& arg : args) {
    if (arg.find_first_of("*?[") == std::string::npos) {
      out.push_back(arg);
      continue;
    }
    glob_t g{};
    if (::glob(arg.c_str(), GLOB_ONLYDIR, nullptr, &g) != 0) {
      ::globfree(&g);
      throw ConfigError("compare: '" + arg + "' matches no directory");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return out;
}

}  // namespace

int run_compare(const CompareOptions& o) {
  const auto dirs = expand(o.run_dirs);
  if (dirs.empty()) throw ConfigError("compare: no run directory given (rocm-conformance-llm compare RUN_DIR...)");
  if (!o.baseline_in.empty() && !o.baseline_out.empty())
    throw ConfigError("compare: --baseline and --baseline-out together: judge against a baseline, or write one");
  const CompareRules rules = o.rules_file.empty() ? default_compare_rules() : load_compare_rules(o.rules_file);
  std::vector<RunRow> rows;
  for (const auto& d : dirs) rows.push_back(load_run_row(d));
  const CompareReference ref = o.baseline_in.empty()
                                   ? group_reference(rows)
                                   : reference_from_baseline(compare_parts::read_json(o.baseline_in), o.baseline_in);
  judge_runs(rows, rules, ref);

  std::cout << compare_table(rows);
  const fs::path out(o.output_dir);
  write_file_atomically(out / "compare.json", compare_json(rows, rules, ref).dump(2) + "\n");
  write_file_atomically(out / "compare.html", compare_html(rows, rules, ref));
  std::cout << "wrote " << (out / "compare.json").string() << " and " << (out / "compare.html").string() << "\n";

  const bool any_flagged = std::any_of(rows.begin(), rows.end(), [](const RunRow& r) { return !r.flags.empty(); });
  if (!o.baseline_out.empty()) {
    if (any_flagged) {
      std::cerr << "error: not writing the baseline " << o.baseline_out << ": a baseline comes from good runs only\n";
      return kExitFailFinding;
    }
    write_file_atomically(o.baseline_out, baseline_json(ref, rules, rows).dump(2) + "\n");
    std::cout << "wrote baseline " << o.baseline_out << " from " << rows.size() << " run(s)\n";
  }
  return any_flagged ? kExitFailFinding : kExitClean;
}

}  // namespace rcl
