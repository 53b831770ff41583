// job_report.html's top: the verdict banner, the node(s) to drain first with the job's own
// findings, and the roll-up per host; what a person reads before any single rank.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/job_page.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl::job_page {

std::string banner(const Page& p) {
  const json& doc = p.doc;
  const std::string verdict = esc(doc, "verdict");
  int lost = 0, unknown = 0, failing = 0;
  for (const auto& [rank, row] : p.rows) {
    lost += is_lost(*row) ? 1 : 0;
    unknown += str(*row, "source") == "unknown" ? 1 : 0;
    failing += concern(*row) <= 2 && !is_lost(*row) ? 1 : 0;
  }
  std::string facts = fmt::format("{} rank{} on {} host{}", p.rows.size(), p.rows.size() == 1 ? "" : "s",
                                  p.hosts.size(), p.hosts.size() == 1 ? "" : "s");
  if (lost) facts += fmt::format(" &middot; <b>{} lost</b>", lost);
  if (failing) facts += fmt::format(" &middot; {} crashed, hung or failed", failing);
  if (unknown) facts += fmt::format(" &middot; {} unknown (this view could not learn their state)", unknown);
  if (const size_t n = list(doc, "findings").size())
    facts += fmt::format(" &middot; {} job finding{}", n, n == 1 ? "" : "s");
  std::string b = fmt::format(
      "<div class=\"banner {0}\" id=\"banner\">\n<h1>rocm-conformance-llm job <span class=\"badge {0}\" "
      "id=\"verdict\">{0}</span> <span class=\"exit\" id=\"exit-code\">exit {1}</span></h1>\n<p>{2}</p>\n"
      "<p>Written by world rank {3}: {4}.</p>\n",
      verdict, integer(doc, "exit_code"), facts, integer(doc, "written_by"), esc(doc, "basis"));
  const json& cut = list(doc, "cut_links");
  if (!cut.empty()) {
    std::vector<std::string> names;
    for (const auto& c : cut) names.push_back(c.is_string() ? c.get<std::string>() : c.dump());
    b += fmt::format(
        "<p id=\"cut-links\"><b>Cut links</b> (every interface of the writer's host lost its link): "
        "{}</p>\n",
        xml_escape(join(names)));
  }
  return b + "</div>\n";
}

std::string drain_section(const Page& p) {
  const json& doc = p.doc;
  std::string s;
  if (const std::string unresolved = str(doc, "unresolved"); !unresolved.empty())
    s += fmt::format("<div class=\"unresolved\" id=\"unresolved\"><b>No node named:</b> {}</div>\n",
                     xml_escape(unresolved));
  const json& suspects = list(doc, "suspect_hosts");
  if (suspects.empty()) {
    std::string named;
    for (const auto& h : p.hosts)
      if (!h.flags.empty()) named += (named.empty() ? "" : ", ") + ("<b>" + host_name_html(h.name) + "</b>");
    s += fmt::format(
        "<div class=\"nodrain\" id=\"suspects\"><h2>Drain first</h2><p>No suspect node: no rank was lost, named "
        "absent or failed on its own.{}</p></div>\n",
        named.empty() ? "" : " The job findings below name " + named + ".");
  } else {
    s += fmt::format("<div class=\"drain\" id=\"suspects\">\n<h2>Drain first: {} node{}</h2>\n", suspects.size(),
                     suspects.size() == 1 ? "" : "s");
    for (size_t i = 0; i < suspects.size(); ++i) {
      const json& sh = suspects[i];
      s += fmt::format("<div class=\"suspect\" id=\"suspect-{}\"><b>{}</b> &middot; world ranks {}\n<ul>\n", i,
                       host_name_html(str(sh, "host")), xml_escape(rank_ranges(ranks_of(sh))));
      for (const auto& e : list(sh, "evidence"))
        s += fmt::format("<li>{}</li>\n", xml_escape(e.is_string() ? e.get<std::string>() : e.dump()));
      s += "</ul></div>\n";
    }
    s += "</div>\n";
  }
  const json& findings = list(doc, "findings");
  s += fmt::format("<h2>Job findings ({})</h2>\n", findings.size());
  if (findings.empty()) return s + "<p>none</p>\n";
  s += "<table id=\"job-findings\"><tr><th>severity</th><th>signature</th><th>host</th><th>message</th>"
       "<th>action</th></tr>\n";
  for (const auto& f : findings) {
    const std::string host =
        f.contains("evidence") && f.at("evidence").is_object() ? str(f.at("evidence"), "host") : "";
    s += fmt::format("<tr class=\"sev-{0}\"><td>{0}</td><td>{1}</td><td>{2}</td><td>{3}</td><td>{4}</td></tr>\n",
                     esc(f, "severity"), esc(f, "signature"), xml_escape(host), esc(f, "message"), esc(f, "action"));
  }
  return s + "</table>\n";
}

namespace {

constexpr size_t kHealthyHostsInline = 8;  // more healthy hosts than this fold away in the roll-up

// `job_busy`: the median busy time of every rank (NaN: none had one).
std::string host_row(const Page& p, const HostView& h, double job_busy) {
  const json& e = *h.entry;
  // The roll-up counts a rank this view could not learn as no worse than PASS; the page says so.
  std::string verdict = str(e, "verdict");
  if (verdict == "PASS" && std::any_of(h.ranks.begin(), h.ranks.end(), [&](int r) {
        const auto it = p.rows.find(r);
        return it != p.rows.end() && str(*it->second, "source") == "unknown";
      }))
    verdict = "UNKNOWN";
  std::string tag;
  if (h.suspect) tag = "suspect: drain";
  for (const json* f : h.flags) tag += (tag.empty() ? "" : ", ") + str(*f, "signature");
  const auto busy = figure(e, "median_busy_s");
  std::string ratio = kNone;
  if (busy && job_busy > 0) ratio = rounded(*busy / job_busy) + "&times;";
  return fmt::format(
      "<tr id=\"host-{0}\" class=\"{1}\"><td>{2}</td><td class=\"tag\">{3}</td><td>{4}</td>"
      "<td><span class=\"badge sm {5}\">{5}</span></td><td class=\"num\">{6}</td><td class=\"num\">{7}</td>"
      "<td class=\"num\">{8}</td><td class=\"num\">{9}</td><td class=\"num\">{10}</td><td "
      "class=\"num\">{11}</td></tr>\n",
      h.index,
      h.suspect          ? "suspect"
      : !h.flags.empty() ? "flagged-host"
                         : "",
      host_name_html(h.name), xml_escape(tag), rank_ranges(h.ranks), xml_escape(verdict), count(e, "fail"),
      count(e, "warn"), integer(e, "lost_ranks"), seconds(figure(e, "median_step_s")), seconds(busy), ratio);
}

}  // namespace

std::string hosts_section(const Page& p) {
  std::vector<double> busy;
  for (const auto& [rank, row] : p.rows)
    if (const auto b = figure(*row, "median_busy_s")) busy.push_back(*b);
  const double job_busy = stats::median(std::move(busy));  // NaN when no rank has one
  const std::string head =
      "<tr><th>host</th><th>note</th><th>world ranks</th><th>verdict</th><th>fail</th><th>warn</th><th>lost ranks</th>"
      "<th>median step</th><th>median busy</th><th>busy vs job</th></tr>\n";
  std::string s = fmt::format(
      "<h2>Hosts ({})</h2>\n<p>Suspects first, then the hosts a job finding names, then any other with a problem. "
      "Busy: the step outside its collectives (a slow node's peers wait inside them); busy vs job: the host's median "
      "over the median of every rank{}.</p>\n<table id=\"hosts\">\n",
      p.hosts.size(), std::isfinite(job_busy) ? fmt::format(" ({})", seconds(job_busy)) : "");
  s += head;
  std::string folded;
  size_t healthy = 0;
  for (const auto& h : p.hosts) healthy += h.healthy() ? 1 : 0;
  const bool fold = healthy > kHealthyHostsInline;
  for (const HostView* h : p.by_concern()) (fold && h->healthy() ? folded : s) += host_row(p, *h, job_busy);
  s += "</table>\n";
  if (fold)
    s += fmt::format(
        "<details id=\"healthy-hosts\"><summary>{} healthy hosts (PASS, no finding)</summary>\n<table>\n{}{}"
        "</table></details>\n",
        healthy, head, folded);
  return s;
}

}  // namespace rcl::job_page
