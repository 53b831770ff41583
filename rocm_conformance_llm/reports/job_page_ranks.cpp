// job_report.html's rank table: problem rows first, the clean ranks of healthy hosts folded
// away, each row's figures and findings and a link to that rank's own report.html.
#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "rocm_conformance_llm/reports/job_page.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl::job_page {

namespace {

constexpr size_t kHealthyRanksOpen = 16;  // up to this many clean ranks show unfolded

std::string plain(std::optional<double> v) { return v ? rounded(*v) : kNone; }
std::string memory(std::optional<double> bytes) {
  if (!bytes) return kNone;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  return *bytes >= kGiB ? rounded(*bytes / kGiB) + " GiB" : rounded(*bytes / (1024.0 * 1024)) + " MiB";
}

// Each rank's own page, as ReportWriter names it (reports/report.cpp), beside job_report.html
// when the ranks share the output directory.
std::string rank_report_name(int rank) { return rank == 0 ? "report.html" : fmt::format("report.rank{}.html", rank); }

const char* row_class(int c) { return c <= 2 ? "sev-fail" : c <= 4 ? "sev-warn" : c < kClean ? "sev-info" : ""; }

// A host name that may wrap after its dots in a narrow column.
std::string breakable(const std::string& host) {
  std::string out;
  for (const char ch : host_name_html(host)) out += ch == '.' ? std::string(".<wbr>") : std::string(1, ch);
  return out;
}

std::string rank_row(const Page& p, const json& row) {
  const int rank = integer(row, "world_rank");
  const int c = concern(row);
  std::string device = esc(row, "device");
  if (!str(row, "pci_bus_id").empty()) device += "<br><small>" + esc(row, "pci_bus_id") + "</small>";
  std::string verdict = fmt::format("<span class=\"badge sm {0}\">{0}</span>", xml_escape(shown_verdict(row)));
  if (str(row, "source") != "report") verdict += "<br><small>source: " + esc(row, "source") + "</small>";
  std::string findings;
  for (const auto& f : list(row, "findings")) {
    const auto blames = f.value("missing_world_ranks", std::vector<int>{});
    findings +=
        fmt::format("<li class=\"sev-{}\"><b>{}</b>: {}{}</li>", esc(f, "severity"), esc(f, "signature"),
                    esc(f, "message"), blames.empty() ? "" : " (absent: " + xml_escape(rank_ranges(blames)) + ")");
  }
  std::string last = fmt::format("{}", integer(row, "last_step"));
  if (!str(row, "last_phase").empty()) last += ", " + esc(row, "last_phase");
  const std::string report = rank_report_name(rank);
  std::string cls = row_class(c);
  if (p.decisive.count(rank)) cls += std::string(cls.empty() ? "" : " ") + "decisive";
  return fmt::format(
      "<tr id=\"rank-{0}\" class=\"{1}\"><td class=\"num\">{0}{2}</td><td class=\"host\">{3}</td>"
      "<td class=\"num\">{4}</td><td>{5}</td><td>{6}</td><td class=\"num\">{7} / {8}</td><td class=\"num\">{9}</td><td "
      "class=\"num\">{10}</td>"
      "<td class=\"num\">{11}</td><td class=\"num\">{12}</td><td class=\"num\">{13}</td><td class=\"wrap\">{14}</td>"
      "<td class=\"wrap\">{15}</td><td><a href=\"{16}\">{16}</a></td></tr>\n",
      rank, xml_escape(cls), p.decisive.count(rank) ? " &#9873;" : "", breakable(str(row, "host")),
      integer(row, "local_rank"), device, verdict, count(row, "fail"), count(row, "warn"), integer(row, "steps"),
      seconds(figure(row, "median_step_s")), seconds(figure(row, "median_busy_s")), plain(figure(row, "tokens_per_s")),
      memory(figure(row, "peak_memory_bytes")), last, findings.empty() ? "" : "<ul>" + findings + "</ul>",
      xml_escape(report));
}

}  // namespace

std::string ranks_section(const Page& p) {
  const std::string head =
      "<tr><th>rank</th><th>host</th><th>local</th><th>device</th><th>verdict</th><th>fail / warn</th><th>steps</th>"
      "<th>median step</th><th>median busy</th><th>tokens/s</th><th>peak memory</th><th>last step, phase</th>"
      "<th>findings (warn, fail)</th><th>its report</th></tr>\n";
  std::vector<const json*> open, folded;
  for (const auto& [rank, row] : p.rows)
    (concern(*row) == kClean && p.on_healthy_host(rank) ? folded : open).push_back(row);
  // The decisive ranks first, then by concern, the hosts' order, the rank.
  const auto host_group = [&](const json& r) {
    const auto it = p.host_of.find(integer(r, "world_rank"));
    return it == p.host_of.end() ? 2 : p.hosts[it->second].group();
  };
  std::stable_sort(open.begin(), open.end(), [&](const json* a, const json* b) {
    const int ra = integer(*a, "world_rank"), rb = integer(*b, "world_rank");
    return std::tuple(p.decisive.count(ra) ? 0 : 1, concern(*a), host_group(*a), ra) <
           std::tuple(p.decisive.count(rb) ? 0 : 1, concern(*b), host_group(*b), rb);
  });
  std::string s = fmt::format(
      "<h2>Ranks ({})</h2>\n<p>Problem rows first (&#9873;: a decisive rank of a suspect node), then the other ranks "
      "of "
      "the hosts above that need a look{}. <i>its report</i> links each rank's own page, beside this one where the "
      "ranks share the output directory; else it is in that rank's output directory on its host.</p>\n",
      p.rows.size(), folded.empty() ? "" : "; the clean ranks of healthy hosts are folded below");
  if (open.empty()) s += "<p id=\"no-problem-rows\">No rank needs a look.</p>\n";
  else {
    s += "<table class=\"ranks\" id=\"ranks\">\n" + head;
    for (const json* r : open) s += rank_row(p, *r);
    s += "</table>\n";
  }
  if (!folded.empty()) {
    std::set<size_t> hosts;
    for (const json* r : folded) hosts.insert(p.host_of.at(integer(*r, "world_rank")));
    s += fmt::format(
        "<details id=\"healthy-ranks\"{}><summary>{} clean ranks on {} healthy host{} (PASS, no finding; in rank "
        "order)</summary>\n<table class=\"ranks\">\n{}",
        open.empty() || folded.size() <= kHealthyRanksOpen ? " open" : "", folded.size(), hosts.size(),
        hosts.size() == 1 ? "" : "s", head);
    for (const json* r : folded) s += rank_row(p, *r);
    s += "</table></details>\n";
  }
  return s;
}

}  // namespace rcl::job_page
