// job_report.html: the multi-node job's verdict page for a person, from job_report.json's document
// (keys: docs/outputs.md). Top to bottom: the verdict and exit code; the node(s) to drain first
// with their evidence, and the job's own findings; a roll-up per host, the suspect and flagged
// hosts first; one plot of every rank's step and busy time grouped by host, so an odd node stands
// out; the rank table, problem rows first and the clean ranks of healthy hosts folded away, each
// row linking that rank's own report.html. Self-contained like report.html (html_report.hpp's page
// shell and stylesheet): inline SVG, no script, nothing loaded from anywhere.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/html_report.hpp"
#include "rocm_conformance_llm/reports/job_report.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl {
// A namespace of its own: the library compiles in unity batches, so file-local names must not
// meet html_report.cpp's or job_report.cpp's.
namespace job_page {
namespace {

using json = nlohmann::json;

// What this page adds to html_page's stylesheet.
constexpr const char* kJobStyle = R"(
.banner{border-left:10px solid #757575;background:#f6f6f6;padding:.4em 1em;margin-bottom:1em}
.banner.PASS{border-color:#2e7d32}.banner.WARN{border-color:#ef8f00}.banner.FAIL,.banner.CRASHED,.banner.HUNG,.banner.LOST{border-color:#c62828}
.banner.INTERRUPTED{border-color:#6a1b9a}.banner p{margin:.3em 0}.exit{font-size:.8em;color:#555;font-weight:normal}
.LOST{background:#4e342e}.UNKNOWN{background:#757575}.badge.sm{font-size:.8em;padding:0 .4em}
.drain{border:2px solid #c62828;background:#fdecea;border-radius:.3em;padding:.2em 1em;margin:.6em 0}
.drain h2,.nodrain h2{border:none;margin:.3em 0}.drain h2{color:#b71c1c}.drain ul{margin:.2em 0 .6em}.suspect{margin:.4em 0}
.suspect b{font-size:1.1em}.nodrain{border:2px solid #ccc;border-radius:.3em;padding:.2em 1em;margin:.6em 0}
.unresolved{border:2px solid #ef8f00;background:#fff3e0;border-radius:.3em;padding:.4em 1em;margin:.6em 0}
tr.suspect td{background:#fdecea}tr.flagged-host td{background:#fff3e0}td.tag{font-weight:bold;color:#b71c1c}
tr.flagged-host td.tag{color:#b25e00}tr.decisive td{background:#fdecea}
table.ranks{font-size:.82em;width:100%}td.wrap{overflow-wrap:break-word}td.host{min-width:7.5em}
table.ranks td.num,table.ranks td a{white-space:nowrap}table.ranks ul{margin:0;padding-left:1.1em}li.sev-fail{color:#b71c1c}
details{margin:.5em 0}details>summary{cursor:pointer;font-weight:bold;padding:.2em 0}
svg.ranks{width:100%;max-width:1200px;height:auto;display:block;margin:.3em 0 1em}
svg .busy{fill:#1f77b4}svg .step{fill:#222}svg .band-odd{fill:#f4f4f4}svg .band-suspect{fill:#fdecea}
svg .band-flagged{fill:#fff3e0}svg .sep{stroke:#bbb;stroke-width:.6}svg .lost-col{fill:#c62828;fill-opacity:.13}
svg .lost-x{stroke:#c62828;stroke-width:1.6;fill:none}svg text.lost{fill:#c62828;font-size:10px}
svg text.rank-no{font-size:9px;fill:#777}svg text.host-label.suspect{fill:#c62828;font-weight:bold}
svg text.host-label.flagged{fill:#b25e00;font-weight:bold}svg text.unknown{fill:#757575;font-weight:bold}
svg .unknown-tick{fill:#9e9e9e}svg a.rank-mark:hover rect{fill-opacity:.6}
)";

// Plot geometry in SVG user units (the page scales them to its width).
constexpr double kPlotWidth = 1160, kPlotLeft = 64, kPlotRight = 1150, kPlotTop = 48, kPlotBottom = 268;
constexpr double kLabelCharPx = 6.6;       // an 11 px label's glyph width, generously
constexpr double kRankNoCharPx = 5.6;      // a 9 px rank number's
constexpr double kLegendCharPx = 6.0;      // an 11 px legend text's, on average
constexpr double kRotatedLabelPitch = 13;  // rotated labels this far apart never touch
constexpr size_t kLabelChars = 18;         // longer host names are cut on the plot (the tooltip has them whole)
constexpr size_t kHealthyHostsInline = 8;  // more healthy hosts than this fold away in the roll-up
constexpr size_t kHealthyRanksOpen = 16;   // up to this many clean ranks show unfolded

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
// j[key] where it is an array, else an empty one: a reference (the page keeps pointers into it).
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

// 1234567 -> "1,234,567"
std::string thousands(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

// What matters of a figure: three significant digits ("0.111", "12.3"), a whole number with
// thousands separators from 100 on ("4,602").
std::string rounded(double v) {
  if (!std::isfinite(v)) return "?";
  if (std::abs(v) >= 100) return thousands(std::llround(v));
  return fmt::format("{:.3g}", v);
}
constexpr const char* kNone = "&mdash;";
std::string seconds(std::optional<double> v) { return v ? rounded(*v) + " s" : kNone; }
std::string plain(std::optional<double> v) { return v ? rounded(*v) : kNone; }
std::string memory(std::optional<double> bytes) {
  if (!bytes) return kNone;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  return *bytes >= kGiB ? rounded(*bytes / kGiB) + " GiB" : rounded(*bytes / (1024.0 * 1024)) + " MiB";
}

// [8, 9, 10, 11, 13] -> "8-11, 13"
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
std::vector<int> ranks_of(const json& j) { return j.value("world_ranks", std::vector<int>{}); }

// Each rank's own page, as ReportWriter names it (reports/report.cpp), beside job_report.html
// when the ranks share the output directory.
std::string rank_report_name(int rank) { return rank == 0 ? "report.html" : fmt::format("report.rank{}.html", rank); }

bool is_lost(const json& row) {
  const std::string source = str(row, "source");
  return source == "heartbeat" || source == "none";
}
std::string shown_verdict(const json& row) {
  if (is_lost(row)) return "LOST";
  const std::string v = str(row, "verdict");
  return v.empty() ? "?" : v;
}

// How much a rank row asks for a look, most first; kClean: not at all.
constexpr int kClean = 9;
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
const char* row_class(int c) { return c <= 2 ? "sev-fail" : c <= 4 ? "sev-warn" : c < kClean ? "sev-info" : ""; }

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
  int group() const {
    if (suspect) return 0;
    if (!flags.empty()) return 1;
    const json& h = *entry;
    if (worst < kClean || str(h, "verdict") != "PASS" ||
        count(h, "fail") + count(h, "warn") + integer(h, "lost_ranks") > 0)
      return 2;
    return 3;
  }
  bool healthy() const { return group() == 3; }
};

struct Page {
  const json& doc;
  std::map<int, const json*> rows;  // world rank -> its row
  std::vector<HostView> hosts;      // the document's order
  std::map<int, size_t> host_of;    // world rank -> index into hosts
  std::set<int> decisive;           // the suspects' decisive ranks

  explicit Page(const json& d) : doc(d) {
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
  std::vector<const HostView*> by_concern() const {
    std::vector<const HostView*> out;
    for (const auto& h : hosts) out.push_back(&h);
    std::stable_sort(out.begin(), out.end(), [](const HostView* a, const HostView* b) {
      return std::pair(a->group(), a->worst) < std::pair(b->group(), b->worst);
    });
    return out;
  }
  bool on_healthy_host(int rank) const {
    const auto it = host_of.find(rank);
    return it != host_of.end() && hosts[it->second].healthy();
  }
};

std::string host_name_html(const std::string& host) { return host.empty() ? "?" : xml_escape(host); }

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

// Round tick spacing for about `n` ticks over [0, hi].
double tick_spacing(double hi, int n) {
  const double raw = hi / n;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0})
    if (m * decade >= raw) return m * decade;
  return 10 * decade;
}

std::string px(double v) { return fmt::format("{:.1f}", v); }

// The hosts' names on the plot: without the domain they all share ("gpu-017.cluster.example" ->
// "gpu-017"), and a name still longer than kLabelChars cut in its middle, where names of one
// cluster differ least ("rack12-gpu-node-017" -> "rack1~gpu-node-017"). Tooltips have them whole.
std::vector<std::string> plot_labels(const std::vector<HostView>& hosts) {
  std::string shared = hosts.empty() ? "" : hosts[0].name;
  for (const auto& h : hosts) {
    size_t n = 0;
    while (n < shared.size() && n < h.name.size() && shared[shared.size() - 1 - n] == h.name[h.name.size() - 1 - n])
      ++n;
    shared = shared.substr(shared.size() - n);
  }
  const size_t dot = shared.find('.');
  const size_t cut = dot == std::string::npos ? 0 : shared.size() - dot;
  std::vector<std::string> labels;
  for (const auto& h : hosts) {
    std::string name = h.name.size() > cut ? h.name.substr(0, h.name.size() - cut) : h.name;
    if (name.empty()) name = "?";
    if (name.size() > kLabelChars) name = name.substr(0, 5) + "~" + name.substr(name.size() - (kLabelChars - 6));
    labels.push_back(name);
  }
  return labels;
}

// Where the plot puts things, in SVG user units: each host's ranks side by side in a slot each,
// hosts apart by a gap; seconds up to `top`.
struct PlotLayout {
  double slot = 0, gap = 0, bar = 0, top = 1, spacing = 1;
  std::vector<double> x0{}, x1{};  // each host's first slot's left edge and last slot's right edge
  double y(double seconds) const { return kPlotBottom - seconds / top * (kPlotBottom - kPlotTop); }
  double centre(size_t host) const { return (x0[host] + x1[host]) / 2; }
};

PlotLayout plot_layout(const Page& p, size_t ranks) {
  PlotLayout l;
  const size_t hosts = p.hosts.size();
  const double width = kPlotRight - kPlotLeft;
  l.gap = hosts > 1 ? std::clamp(0.2 * width / static_cast<double>(hosts), 1.0, 10.0) : 0;
  l.slot = (width - l.gap * static_cast<double>(hosts - 1)) / static_cast<double>(ranks);
  l.bar = std::clamp(0.75 * l.slot, 0.8, 22.0);
  double hi = 0;
  for (const auto& [rank, row] : p.rows)
    for (const char* key : {"median_step_s", "median_busy_s"})
      if (const auto v = figure(*row, key)) hi = std::max(hi, *v);
  l.spacing = tick_spacing(hi > 0 ? hi : 1, 4);
  l.top = hi > 0 ? std::ceil(hi / l.spacing * (1 + 1e-9)) * l.spacing : 4 * l.spacing;
  double x = kPlotLeft;
  for (const auto& h : p.hosts) {
    l.x0.push_back(x);
    x += l.slot * static_cast<double>(h.ranks.size());
    l.x1.push_back(x);
    x += l.gap;
  }
  return l;
}

// The legend, each entry as wide as its text; the lost and unknown entries only where some are.
std::string plot_legend(const Page& p) {
  bool any_lost = false, any_unknown = false;
  for (const auto& [rank, row] : p.rows) {
    any_lost = any_lost || is_lost(*row);
    any_unknown = any_unknown || str(*row, "source") == "unknown";
  }
  std::vector<std::pair<std::string, std::string>> entries = {
      {"<rect class=\"step\" x=\"0\" y=\"-5\" width=\"14\" height=\"3\"/>", "step time"},
      {"<rect class=\"busy\" x=\"2\" y=\"-9\" width=\"10\" height=\"10\"/>",
       "busy time (the step outside its collectives)"}};
  if (any_lost)
    entries.emplace_back("<path class=\"lost-x\" d=\"M3 -8l8 8m-8 0l8 -8\"/>", "lost rank (no figure: a gap)");
  if (any_unknown)
    entries.emplace_back("<text class=\"unknown\" x=\"3\" y=\"0\">?</text>", "unknown (this view could not learn it)");
  std::string svg;
  double x = kPlotLeft;
  for (const auto& [mark, label] : entries) {
    svg += fmt::format("<g class=\"legend\" transform=\"translate({} 34)\">{}<text x=\"18\" y=\"0\">{}</text></g>",
                       px(x), mark, label);
    x += 18 + kLegendCharPx * static_cast<double>(label.size()) + 14;
  }
  return svg + "\n";
}

// One rank at slot centre `c`: its figures (a busy bar, a step tick) as one link to its row; a
// lost rank's column and cross; an unknown rank's question mark.
std::string rank_marks(const json& row, size_t host, const std::string& host_name, double c, const PlotLayout& l) {
  const int rank = integer(row, "world_rank");
  const auto step = figure(row, "median_step_s"), busy = figure(row, "median_busy_s");
  const std::string who =
      fmt::format("rank {} ({}, local rank {})", rank, host_name.empty() ? "?" : host_name, integer(row, "local_rank"));
  std::string svg;
  if (step || busy) {
    svg += fmt::format(
        "<a class=\"rank-mark\" href=\"#rank-{0}\" data-rank=\"{0}\" data-host=\"{1}\"><title>{2}{3}"
        "</title>",
        rank, host, xml_escape(who + ": step " + seconds(step) + ", busy " + seconds(busy)),
        is_lost(row) ? " (lost: its last heartbeat's figures)" : "");
    if (busy)
      svg += fmt::format("<rect class=\"busy\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", px(c - l.bar / 2),
                         px(l.y(*busy)), px(l.bar), px(std::max(0.5, kPlotBottom - l.y(*busy))));
    if (step) {
      const double w = std::min(l.slot, l.bar + 4);
      svg += fmt::format("<rect class=\"step\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"2.5\"/>", px(c - w / 2),
                         px(l.y(*step) - 1.25), px(w));
    }
    svg += "</a>\n";
  }
  if (is_lost(row)) {
    const double s = std::clamp(l.slot, 3.0, 8.0), column = std::max(l.slot, 1.5);
    svg += fmt::format(
        "<g class=\"rank-lost\" data-rank=\"{0}\"><title>{1}: lost ({2}), last step {3}{4}</title>"
        "<rect class=\"lost-col\" x=\"{5}\" y=\"{6}\" width=\"{7}\" height=\"{8}\"/><path class=\"lost-x\" "
        "d=\"M{9} {10}l{11} {11}m-{11} 0l{11} -{11}\"/>{12}</g>\n",
        rank, xml_escape(who), esc(row, "source"), integer(row, "last_step"),
        str(row, "last_phase").empty() ? "" : ", " + esc(row, "last_phase"), px(c - column / 2), kPlotTop, px(column),
        kPlotBottom - kPlotTop, px(c - s / 2), px(kPlotBottom - 4 - s), px(s),
        l.slot >= 26 && !step && !busy
            ? fmt::format("<text class=\"lost\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">lost</text>", px(c),
                          px(kPlotBottom - 18))
            : "");
  }
  if (!step && !busy && str(row, "source") == "unknown")
    svg += fmt::format(
        "<g class=\"rank-unknown\" data-rank=\"{}\"><title>{}: unknown (this view could not learn its state)</title>{}"
        "</g>\n",
        rank, xml_escape(who),
        l.slot >= 10 ? fmt::format("<text class=\"unknown\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">?</text>", px(c),
                                   kPlotBottom - 6)
                     : fmt::format("<rect class=\"unknown-tick\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"6\"/>",
                                   px(c - l.bar / 2), kPlotBottom - 6, px(l.bar)));
  return svg;
}

// The hosts' names under their ranks: level where every one fits its host's width, else turned
// upright and thinned to a pitch, the suspect and flagged hosts' first.
struct HostLabels {
  std::string svg{};
  bool level = true;
  double height = 0;  // below `y`
  size_t shown = 0;
};
HostLabels host_labels(const Page& p, const PlotLayout& l, double y) {
  const size_t hosts = p.hosts.size();
  const auto labels = plot_labels(p.hosts);
  double label_px = 0, narrowest = kPlotRight - kPlotLeft;
  for (size_t k = 0; k < hosts; ++k) {
    label_px = std::max(label_px, kLabelCharPx * static_cast<double>(labels[k].size()));
    narrowest = std::min(narrowest, l.x1[k] - l.x0[k] + l.gap);
  }
  HostLabels out{.level = label_px + 6 <= narrowest};
  out.height = out.level ? 8 : label_px - 4;
  std::vector<size_t> order(hosts), shown;
  for (size_t k = 0; k < hosts; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.hosts[a].group() < 2 && p.hosts[b].group() >= 2; });
  for (const size_t k : order)
    if (out.level || std::all_of(shown.begin(), shown.end(),
                                 [&](size_t o) { return std::abs(l.centre(o) - l.centre(k)) >= kRotatedLabelPitch; }))
      shown.push_back(k);
  std::sort(shown.begin(), shown.end());
  out.shown = shown.size();
  for (const size_t k : shown) {
    const auto& h = p.hosts[k];
    const char* cls = h.suspect ? " suspect" : !h.flags.empty() ? " flagged" : "";
    const std::string tip = fmt::format("{}: world ranks {}", h.name.empty() ? "?" : h.name, rank_ranges(h.ranks));
    const std::string at =
        out.level ? fmt::format("x=\"{}\" y=\"{}\" text-anchor=\"middle\"", px(l.centre(k)), px(y))
                  : fmt::format("x=\"{0}\" y=\"{1}\" text-anchor=\"end\" transform=\"rotate(-90 {0} {1})\"",
                                px(l.centre(k) + 4), px(y - 8));
    out.svg += fmt::format("<a href=\"#host-{}\"><title>{}</title><text class=\"host-label{}\" {}>{}</text></a>\n", k,
                           xml_escape(tip), cls, at, xml_escape(labels[k]));
  }
  return out;
}

// Every rank's median step and busy time, ranks in host order, hosts banded and labelled.
std::string ranks_plot(const Page& p) {
  size_t n = 0;
  for (const auto& h : p.hosts) n += h.ranks.size();
  if (n == 0) return "";
  const size_t hosts = p.hosts.size();
  const PlotLayout l = plot_layout(p, n);
  int max_rank = 0;
  for (const auto& [rank, row] : p.rows) max_rank = std::max(max_rank, rank);
  const bool rank_numbers = l.slot >= kRankNoCharPx * static_cast<double>(std::to_string(max_rank).size()) + 4;
  const HostLabels labels = host_labels(p, l, kPlotBottom + (rank_numbers ? 26 : 15));
  const double height = kPlotBottom + (rank_numbers ? 26 : 15) + labels.height + 8;

  std::string svg = fmt::format(
      "<svg class=\"plot ranks\" id=\"plot-ranks\" viewBox=\"0 0 {} {}\" xmlns=\"http://www.w3.org/2000/svg\" "
      "data-ranks=\"{}\" data-hosts=\"{}\" data-labels=\"{}\">\n"
      "<text class=\"title\" x=\"{}\" y=\"16\">Median step time and busy time per rank, ranks grouped by host</text>\n",
      kPlotWidth, px(height), n, hosts, labels.level ? "level" : "upright", kPlotLeft);
  if (labels.shown < hosts)
    svg += fmt::format(
        "<text x=\"{}\" y=\"16\" text-anchor=\"end\">{} of {} host names shown (hover a mark: its rank and "
        "host)</text>\n",
        kPlotRight, labels.shown, hosts);
  svg += plot_legend(p);
  // Host bands and separators under the marks.
  for (size_t k = 0; k < hosts; ++k) {
    const auto& h = p.hosts[k];
    const char* band = h.suspect ? "band-suspect" : !h.flags.empty() ? "band-flagged" : k % 2 ? "band-odd" : "";
    if (*band)
      svg += fmt::format("<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", band,
                         px(l.x0[k] - l.gap / 2), kPlotTop, px(l.x1[k] - l.x0[k] + l.gap), kPlotBottom - kPlotTop);
    if (k > 0)
      svg += fmt::format("<line class=\"sep\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>", px(l.x0[k] - l.gap / 2),
                         kPlotTop, kPlotBottom);
  }
  svg += "\n";
  for (int t = 0; t * l.spacing <= l.top * (1 + 1e-9); ++t)
    svg += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\"/><text x=\"{3}\" y=\"{4}\" "
        "text-anchor=\"end\">{5} s</text>\n",
        kPlotLeft, kPlotRight, px(l.y(t * l.spacing)), kPlotLeft - 5, px(l.y(t * l.spacing) + 4),
        rounded(t * l.spacing));
  for (size_t k = 0; k < hosts; ++k) {
    double left = l.x0[k];
    for (const int rank : p.hosts[k].ranks) {
      const double c = left + l.slot / 2;
      left += l.slot;
      if (const auto it = p.rows.find(rank); it != p.rows.end())
        svg += rank_marks(*it->second, k, p.hosts[k].name, c, l);
      if (rank_numbers)
        svg += fmt::format("<text class=\"rank-no\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", px(c),
                           kPlotBottom + 12, rank);
    }
  }
  svg += fmt::format(
      "\n<line class=\"axis\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\"/><line class=\"axis\" x1=\"{0}\" x2=\"{0}\" "
      "y1=\"{3}\" y2=\"{2}\"/>\n",
      kPlotLeft, kPlotRight, kPlotBottom, kPlotTop);
  return svg + labels.svg + "</svg>\n";
}

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

}  // namespace
}  // namespace job_page

std::string job_report_html(const nlohmann::json& doc) {
  const job_page::Page page(doc);
  std::string body = job_page::banner(page);
  body += job_page::drain_section(page);
  body += job_page::hosts_section(page);
  body += "<h2>Step and busy time per rank</h2>\n" + job_page::ranks_plot(page);
  body += job_page::ranks_section(page);
  std::string html = html_page(fmt::format("rocm-conformance-llm job {} ({} ranks)", doc.value("verdict", "?"),
                                           job_page::list(doc, "ranks").size()),
                               body);
  // This page's own rules after the shared stylesheet, still in the head.
  html.insert(html.find("</head>"), fmt::format("<style>{}</style>\n", job_page::kJobStyle));
  return html;
}

}  // namespace rcl
