// job_report.html's model: reading the document's values, the figure formats, how much each
// rank asks for a look, and the hosts in the page's order; shared by every section's file.
#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "rocm_conformance_llm/reports/job_page.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl::job_page {

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
const json& list(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}
std::string esc(const json& j, const char* key) { return xml_escape(str(j, key)); }
int integer(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int>() : 0;
}
int count(const json& j, const char* severity) {
  return j.contains("findings_by_severity") ? integer(j.at("findings_by_severity"), severity) : 0;
}
std::optional<double> figure(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
std::vector<int> ranks_of(const json& j) { return j.value("world_ranks", std::vector<int>{}); }

namespace {

// 1234567 -> "1,234,567"
std::string thousands(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

}  // namespace

std::string rounded(double v) {
  if (!std::isfinite(v)) return "?";
  if (std::abs(v) >= 100) return thousands(std::llround(v));
  return fmt::format("{:.3g}", v);
}
std::string seconds(std::optional<double> v) { return v ? rounded(*v) + " s" : kNone; }

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return out;
}
std::string host_name_html(const std::string& host) { return host.empty() ? "?" : xml_escape(host); }

bool is_lost(const json& row) {
  const std::string source = str(row, "source");
  return source == "heartbeat" || source == "none";
}
std::string shown_verdict(const json& row) {
  if (is_lost(row)) return "LOST";
  const std::string v = str(row, "verdict");
  return v.empty() ? "?" : v;
}

int concern(const json& row) {
  if (is_lost(row)) return 0;
  const std::string v = shown_verdict(row);
  if (v == "CRASHED" || v == "HUNG") return 1;
  if (v == "FAIL" || count(row, "fail") > 0) return 2;
  if (v == "INTERRUPTED") return 3;
  if (v == "WARN" || count(row, "warn") > 0) return 4;
  if (v != "PASS" || str(row, "source") != "report") return 5;  // UNKNOWN: a survivor's view
  return kClean;
}

int HostView::group() const {
  if (suspect) return 0;
  if (!flags.empty()) return 1;
  const json& h = *entry;
  if (worst < kClean || str(h, "verdict") != "PASS" ||
      count(h, "fail") + count(h, "warn") + integer(h, "lost_ranks") > 0)
    return 2;
  return 3;
}

Page::Page(const json& d) : doc(d) {
  for (const auto& r : list(doc, "ranks")) rows[integer(r, "world_rank")] = &r;
  const json& hs = list(doc, "hosts");
  for (size_t k = 0; k < hs.size(); ++k) {
    HostView h{.entry = &hs[k], .index = k, .name = str(hs[k], "host"), .ranks = ranks_of(hs[k])};
    for (const auto& s : list(doc, "suspect_hosts"))
      if (str(s, "host") == h.name) h.suspect = &s;
    for (const auto& f : list(doc, "findings"))
      if (f.contains("evidence") && f.at("evidence").is_object() && str(f.at("evidence"), "host") == h.name)
        h.flags.push_back(&f);
    for (const int r : h.ranks) {
      host_of[r] = k;
      if (const auto it = rows.find(r); it != rows.end()) h.worst = std::min(h.worst, concern(*it->second));
    }
    hosts.push_back(std::move(h));
  }
  for (const auto& s : list(doc, "suspect_hosts"))
    for (const int r : ranks_of(s)) decisive.insert(r);
}

std::vector<const HostView*> Page::by_concern() const {
  std::vector<const HostView*> out;
  for (const auto& h : hosts) out.push_back(&h);
  std::stable_sort(out.begin(), out.end(), [](const HostView* a, const HostView* b) {
    return std::pair(a->group(), a->worst) < std::pair(b->group(), b->worst);
  });
  return out;
}

bool Page::on_healthy_host(int rank) const {
  const auto it = host_of.find(rank);
  return it != host_of.end() && hosts[it->second].healthy();
}

}  // namespace rcl::job_page
