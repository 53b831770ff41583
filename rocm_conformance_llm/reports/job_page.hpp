// The model job_report.html is drawn from (job_report_html.cpp assembles it from the sections
// below): the document's rows and hosts in the page's order, and the readers and formats every
// section uses. Internal to reports/; a namespace of its own, as the library compiles in unity
// batches and these names must not meet html_report.cpp's or job_report.cpp's.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl::job_page {

using json = nlohmann::json;

// Readers of job_report.json's values, each forgiving a missing or mistyped key: "", an empty
// list, 0, nullopt.
std::string str(const json& j, const char* key);
// j[key] where it is an array, else an empty one: a reference (the page keeps pointers into it).
const json& list(const json& j, const char* key);
std::string esc(const json& j, const char* key);  // str, escaped for the page
int integer(const json& j, const char* key);
int count(const json& j, const char* severity);  // of j's findings_by_severity
std::optional<double> figure(const json& j, const char* key);
std::vector<int> ranks_of(const json& j);  // its world_ranks

// What matters of a figure: three significant digits ("0.111", "12.3"), a whole number with
// thousands separators from 100 on ("4,602").
std::string rounded(double v);
inline constexpr const char* kNone = "&mdash;";
std::string seconds(std::optional<double> v);
// [8, 9, 10, 11, 13] -> "8-11, 13"
std::string rank_ranges(std::vector<int> ranks);
std::string host_name_html(const std::string& host);

bool is_lost(const json& row);
std::string shown_verdict(const json& row);
// How much a rank row asks for a look, most first; kClean: not at all.
inline constexpr int kClean = 9;
int concern(const json& row);

// A host as the page orders it: suspects, then hosts a job finding names (the odd node), then
// any other with a problem, then the healthy ones.
struct HostView {
  const json* entry = nullptr;
  size_t index = 0;  // in the document's order (its first rank): the plot's order, id host-<index>
  std::string name;
  std::vector<int> ranks;
  const json* suspect = nullptr;     // its suspect_hosts entry
  std::vector<const json*> flags{};  // the job findings naming it
  int worst = kClean;                // the worst concern of its ranks
  int group() const;
  bool healthy() const { return group() == 3; }
};

struct Page {
  const json& doc;
  std::map<int, const json*> rows;  // world rank -> its row
  std::vector<HostView> hosts;      // the document's order
  std::map<int, size_t> host_of;    // world rank -> index into hosts
  std::set<int> decisive;           // the suspects' decisive ranks

  explicit Page(const json& d);
  std::vector<const HostView*> by_concern() const;
  bool on_healthy_host(int rank) const;
};

// The page's sections, top to bottom.
std::string banner(const Page& p);         // the verdict, exit code and what the job came to
std::string drain_section(const Page& p);  // the node(s) to drain first, and the job's findings
std::string hosts_section(const Page& p);  // the roll-up per host
std::string ranks_plot(const Page& p);     // every rank's step and busy time, grouped by host
std::string ranks_section(const Page& p);  // the rank table

}  // namespace rcl::job_page
