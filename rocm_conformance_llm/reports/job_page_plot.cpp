// job_report.html's plot: every rank's median step and busy time in one inline SVG, ranks
// grouped and banded by host so an odd node stands out; its own geometry, labels and legend.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/reports/html_parts.hpp"
#include "rocm_conformance_llm/reports/job_page.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl::job_page {

namespace {

using html_parts::px;

// Plot geometry in SVG user units (the page scales them to its width).
constexpr double kPlotWidth = 1160, kPlotLeft = 64, kPlotRight = 1150, kPlotTop = 48, kPlotBottom = 268;
constexpr double kLabelCharPx = 6.6;       // an 11 px label's glyph width, generously
constexpr double kRankNoCharPx = 5.6;      // a 9 px rank number's
constexpr double kLegendCharPx = 6.0;      // an 11 px legend text's, on average
constexpr double kRotatedLabelPitch = 13;  // rotated labels this far apart never touch
constexpr size_t kLabelChars = 18;         // longer host names are cut on the plot (the tooltip has them whole)

// Round tick spacing for about `n` ticks over [0, hi].
double tick_spacing(double hi, int n) {
  const double raw = hi / n;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0})
    if (m * decade >= raw) return m * decade;
  return 10 * decade;
}

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
    // push_back, not = "?": GCC 12 warns falsely here on the assignment (-Wstringop-overflow).
    if (name.empty()) name.push_back('?');
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

}  // namespace

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

}  // namespace rcl::job_page
