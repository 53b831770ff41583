// job_report.html, the job's verdict page, from documents built by job_report_json over generated
// rank rows: 3 hosts x 2 ranks with a lost rank, and 64 hosts x 8 ranks with one slow host. The
// suspect first, rounded figures, every rank's report linked, one plot mark per rank, problem
// rows before the folded healthy ones, everything escaped. RenderedReportJob loads the 64 x 8
// page in headless Chromium (tests/support/browser.hpp) and measures that no text of the plot
// overlaps another; the screenshot goes to test-output/job_report_html/ under the working
// directory (docs/images/job-report.png is one).
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/reports/job_report.hpp"
#include "support/browser.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::count_of;

constexpr int kSlowHost = 17;  // of the 64: world ranks 136-143

// `hosts` x `per_host` clean ranks, as a synchronous job measures them: every rank's step about
// the same (peers wait inside collectives), busy time its own.
std::vector<RankRow> rows_of(int hosts, int per_host) {
  std::vector<RankRow> rows;
  for (int r = 0; r < hosts * per_host; ++r) {
    RankRow row;
    row.id = {.world_rank = r,
              .local_rank = r % per_host,
              .host = "node" + std::to_string(r / per_host),
              .device = "cuda:" + std::to_string(r % per_host)};
    row.verdict = "PASS";
    row.exit_code = 0;
    row.steps = 20;
    row.median_busy_s = 0.1 + 0.004 * ((r * 37) % 7) / 7.0;
    row.median_step_s = 0.15 + 0.002 * ((r * 13) % 5) / 5.0;
    row.tokens_per_s = 4602.410767929676;
    row.peak_memory_bytes = int64_t{66} << 30;
    row.last_step = 20;
    row.last_phase = "after step 20";
    rows.push_back(row);
  }
  return rows;
}

// node0: 0,1; node1: 2,3; node2: 4,5. Rank 3 is lost (nothing of it came); rank 2 timed out
// waiting for it. Rank 0 carries the unrounded figures of a real row.
json three_hosts_one_lost() {
  auto rows = rows_of(3, 2);
  rows[0].median_step_s = 0.111246046;
  RankRow lost;
  lost.id = rows[3].id;
  lost.source = "none";
  lost.verdict = "LOST";
  lost.last_phase = "entering collective #7";
  rows[3] = lost;
  rows[2].verdict = "CRASHED";
  rows[2].exit_code = 3;
  rows[2].fail = 1;
  rows[2].findings.push_back({.rank = 2,
                              .signature = "collective_timeout",
                              .severity = Severity::fail,
                              .message = "rank 3 never entered all_reduce #7",
                              .blames = {3}});
  return job_report_json(rows, {});
}

// 64 hosts x 8 ranks; every rank of node17 spends three times the others' busy time a step, and
// every rank's step waits for it.
json sixty_four_hosts_one_slow() {
  auto rows = rows_of(64, 8);
  for (auto& row : rows) {
    row.median_step_s = *row.median_step_s + 0.21;
    if (row.id.host == "node" + std::to_string(kSlowHost)) row.median_busy_s = *row.median_busy_s + 0.21;
  }
  std::vector<Finding> findings;
  for (const auto& odd : odd_nodes(rows)) findings.push_back(odd_node_finding(odd, 20));
  EXPECT_EQ(findings.size(), 1u);
  return job_report_json(rows, findings);
}

// The world ranks of the rank table's rows, in page order.
std::vector<int> row_ranks(const std::string& html) {
  std::vector<int> ranks;
  const std::regex row("<tr id=\"rank-(\\d+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), row); it != std::sregex_iterator(); ++it)
    ranks.push_back(std::stoi((*it)[1]));
  return ranks;
}

TEST(JobReportHtml, TheSuspectHostComesFirstAndIsMarked) {
  const json doc = three_hosts_one_lost();
  ASSERT_EQ(doc.at("suspect_hosts").size(), 1u);
  const std::string html = job_report_html(doc);
  EXPECT_NE(html.find("id=\"verdict\">CRASHED</span> <span class=\"exit\" id=\"exit-code\">exit 3</span>"),
            std::string::npos);
  // The node to drain, with its decisive rank and evidence, before the roll-up and the plot.
  const size_t drain = html.find("<div class=\"drain\" id=\"suspects\">");
  const size_t suspect = html.find("<b>node1</b> &middot; world ranks 3");
  const size_t hosts = html.find("<table id=\"hosts\">");
  ASSERT_NE(drain, std::string::npos);
  ASSERT_NE(suspect, std::string::npos);
  EXPECT_LT(drain, suspect);
  EXPECT_LT(suspect, hosts);
  EXPECT_LT(hosts, html.find("id=\"plot-ranks\""));
  EXPECT_LT(html.find("<li>rank 3 (host node1, local rank 1, cuda:1) sent no verdict", suspect), hosts);
  // In the roll-up the suspect is the first row, highlighted and tagged.
  const size_t first_host = html.find("<tr id=\"host-", hosts);
  EXPECT_EQ(html.find("<tr id=\"host-1\" class=\"suspect\"><td>node1</td><td class=\"tag\">suspect: drain</td>"),
            first_host)
      << html.substr(first_host, 120);
  EXPECT_NE(html.find("<td>2-3</td><td><span class=\"badge sm LOST\">LOST</span>"), std::string::npos);
}

TEST(JobReportHtml, FiguresAreRoundedToWhatMatters) {
  const std::string html = job_report_html(three_hosts_one_lost());
  EXPECT_EQ(html.find("0.111246046"), std::string::npos);
  EXPECT_EQ(html.find("4602.41"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">0.111 s</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">4,602</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">66 GiB</td>"), std::string::npos);
  // The lost rank has no figure: a dash, not "null".
  EXPECT_EQ(html.find("null"), std::string::npos);
  // World ranks as ranges in the roll-up.
  const std::string big = job_report_html(sixty_four_hosts_one_slow());
  EXPECT_NE(big.find("<td>node1</td><td class=\"tag\"></td><td>8-15</td>"), std::string::npos);
  EXPECT_NE(big.find("<td>node17</td><td class=\"tag\">odd_node_slow</td><td>136-143</td>"), std::string::npos);
}

TEST(JobReportHtml, EveryRankLinksItsOwnReport) {
  const std::string html = job_report_html(sixty_four_hosts_one_slow());
  EXPECT_EQ(count_of(html, "<a href=\"report.html\">report.html</a>"), 1u);
  for (int r = 1; r < 512; ++r) {
    const std::string name = "report.rank" + std::to_string(r) + ".html";
    ASSERT_EQ(count_of(html, "<a href=\"" + name + "\">" + name + "</a>"), 1u) << name;
  }
  EXPECT_EQ(count_of(html, "<a href=\"report."), 512u);
}

TEST(JobReportHtml, ThePlotHasOneMarkPerRankWithAFigureAndMarksTheLostOne) {
  const std::string small = job_report_html(three_hosts_one_lost());
  EXPECT_EQ(count_of(small, "<a class=\"rank-mark\""), 5u);
  EXPECT_EQ(count_of(small, "<rect class=\"busy\""), 6u);  // the legend's too
  EXPECT_EQ(count_of(small, "<a class=\"rank-mark\" href=\"#rank-3\""), 0u);
  EXPECT_EQ(count_of(small, "<g class=\"rank-lost\" data-rank=\"3\">"), 1u);
  EXPECT_NE(small.find(">lost</text>"), std::string::npos);
  // Three hosts: their names level under their ranks, each rank numbered.
  EXPECT_NE(small.find("data-labels=\"level\""), std::string::npos);
  EXPECT_EQ(count_of(small, "<text class=\"rank-no\""), 6u);
  EXPECT_EQ(count_of(small, "<text class=\"host-label suspect\""), 1u);

  const std::string big = job_report_html(sixty_four_hosts_one_slow());
  EXPECT_EQ(count_of(big, "<a class=\"rank-mark\""), 512u);
  EXPECT_EQ(count_of(big, "<g class=\"rank-lost\""), 0u);
  // 64 names upright, every one shown; the slow node's stands out; no rank numbers at that width.
  EXPECT_NE(big.find("data-labels=\"upright\""), std::string::npos);
  EXPECT_EQ(count_of(big, "<text class=\"host-label"), 64u);
  EXPECT_EQ(count_of(big, "<text class=\"host-label flagged\""), 1u);
  EXPECT_EQ(count_of(big, "<text class=\"rank-no\""), 0u);
  // The slow node's busy bars reach higher (a smaller y) than any other host's.
  const std::regex bar("data-host=\"(\\d+)\"><title>[^<]*</title><rect class=\"busy\" x=\"[^\"]+\" y=\"([0-9.]+)\"");
  double slow_lowest = 0, others_highest = 1e9;
  int bars = 0;
  for (auto it = std::sregex_iterator(big.begin(), big.end(), bar); it != std::sregex_iterator(); ++it, ++bars) {
    const double y = std::stod((*it)[2]);
    if (std::stoi((*it)[1]) == kSlowHost) slow_lowest = std::max(slow_lowest, y);
    else others_highest = std::min(others_highest, y);
  }
  EXPECT_EQ(bars, 512);
  EXPECT_LT(slow_lowest + 50, others_highest);
}

TEST(JobReportHtml, ProblemRowsComeFirstAndHealthyRanksFoldAway) {
  const std::string small = job_report_html(three_hosts_one_lost());
  // The decisive lost rank, then its crashed observer; the clean ranks of healthy hosts after,
  // folded but open (few).
  EXPECT_EQ(row_ranks(small), std::vector<int>({3, 2, 0, 1, 4, 5}));
  const size_t folded = small.find("<details id=\"healthy-ranks\" open>");
  ASSERT_NE(folded, std::string::npos);
  EXPECT_LT(small.find("<tr id=\"rank-2\""), folded);
  EXPECT_GT(small.find("<tr id=\"rank-0\""), folded);
  EXPECT_NE(small.find("<tr id=\"rank-3\" class=\"sev-fail decisive\">"), std::string::npos);

  const std::string big = job_report_html(sixty_four_hosts_one_slow());
  const auto ranks = row_ranks(big);
  ASSERT_EQ(ranks.size(), 512u);
  EXPECT_EQ(std::vector<int>(ranks.begin(), ranks.begin() + 8),
            std::vector<int>({136, 137, 138, 139, 140, 141, 142, 143}));
  const size_t details = big.find("<details id=\"healthy-ranks\">");
  ASSERT_NE(details, std::string::npos) << "504 clean ranks open the page folded";
  EXPECT_LT(big.find("<tr id=\"rank-143\""), details);
  EXPECT_GT(big.find("<tr id=\"rank-0\""), details);
  EXPECT_NE(big.find("<summary>504 clean ranks on 63 healthy hosts"), std::string::npos);
  // The roll-up too: the slow node first, the 63 others folded.
  EXPECT_LT(big.find("<tr id=\"host-17\" class=\"flagged-host\">"), big.find("<details id=\"healthy-hosts\">"));
  EXPECT_NE(big.find("The job findings below name <b>node17</b>."), std::string::npos);
}

TEST(JobReportHtml, EveryTextIsEscaped) {
  auto rows = rows_of(2, 2);
  rows[0].id.host = "<b>x</b>";
  rows[1].id.host = "<b>x</b>";
  rows[1].id.device = "cuda:1\"><img src=x>";
  rows[2].last_phase = "a & b";
  rows[3].verdict = "FAIL";
  rows[3].fail = 1;
  rows[3].findings.push_back({.rank = 3,
                              .signature = "nonfinite_loss",
                              .severity = Severity::fail,
                              .message = "<script>alert(1)</script>",
                              .blames = {}});
  const std::string html = job_report_html(job_report_json(rows, {}));
  EXPECT_EQ(html.find("<b>x</b>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("a & b"), std::string::npos);
  EXPECT_NE(html.find("<td>&lt;b&gt;x&lt;/b&gt;</td>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  // Balanced: what the page opens it closes.
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{{"<table", "</table>"},
                                                                                    {"<tr", "</tr>"},
                                                                                    {"<details", "</details>"},
                                                                                    {"<svg", "</svg>"},
                                                                                    {"<a ", "</a>"},
                                                                                    {"<div", "</div>"},
                                                                                    {"<ul", "</ul>"},
                                                                                    {"<text", "</text>"}})
    EXPECT_EQ(count_of(html, open), count_of(html, close)) << open;
}

TEST(JobReportHtml, ASurvivorsViewSaysWhoWroteItWhatItCutAndWhyItNamesNoNode) {
  auto rows = rows_of(2, 2);
  for (auto& row : rows)
    if (row.id.world_rank != 2) {
      RankRow unknown;
      unknown.id = row.id;
      unknown.source = "unknown";
      unknown.verdict = "UNKNOWN";
      row = unknown;
    }
  const std::string unresolved = job_report_html(job_report_json(
      rows, {},
      JobView{
          .written_by = 2, .basis = "rank 2's view alone", .unresolved = "the store did not answer from host node1"}));
  EXPECT_NE(unresolved.find("<div class=\"unresolved\" id=\"unresolved\"><b>No node named:</b> the store did not "
                            "answer from host node1</div>"),
            std::string::npos);
  EXPECT_NE(unresolved.find("Written by world rank 2: rank 2&apos;s view alone."), std::string::npos);
  EXPECT_NE(unresolved.find("3 unknown (this view could not learn their state)"), std::string::npos);
  EXPECT_NE(unresolved.find("No suspect node"), std::string::npos);
  // Three ranks, and both hosts: the roll-up counts an unknown rank as no worse than PASS, the page does not.
  EXPECT_EQ(count_of(unresolved, "<span class=\"badge sm UNKNOWN\">UNKNOWN</span>"), 5u);
  EXPECT_NE(unresolved.find("<td>2-3</td><td><span class=\"badge sm UNKNOWN\">"), std::string::npos);
  EXPECT_EQ(row_ranks(unresolved), std::vector<int>({0, 1, 3, 2}));  // the unknown ones open the table
  EXPECT_EQ(count_of(unresolved, "<a class=\"rank-mark\""), 1u);

  const std::string cut = job_report_html(job_report_json(rows, {}, JobView{.written_by = 2, .cut_links = {"eth0"}}));
  EXPECT_NE(cut.find("<p id=\"cut-links\"><b>Cut links</b>"), std::string::npos);
  EXPECT_NE(cut.find("lost its link): eth0</p>"), std::string::npos);
  EXPECT_NE(cut.find("<b>node1</b> &middot; world ranks 2"), std::string::npos);  // its own host
}

TEST(JobReportHtml, APageOf512RanksStaysSmall) {
  const std::string html = job_report_html(sixty_four_hosts_one_slow());
  EXPECT_LT(html.size(), 1000000u);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // the SVG namespace, nothing fetched
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

// The 64 x 8 page as Chromium lays it out at 1400 px: a probe appended to a copy of it measures
// every text of the plot (none overlaps another or leaves the plot) and the page's opening state.
// Named RenderedReport* like the report.html browser tests: scripts/gpu/run.sh leaves them out
// where there is no chromium.
TEST(RenderedReportJob, SixtyFourHostsShowTheSlowNodeAndNoTextOverlaps) {
  const fs::path out = fs::current_path() / "test-output" / "job_report_html";
  fs::create_directories(out);
  const std::string html = job_report_html(sixty_four_hosts_one_slow());
  std::ofstream(out / "job-report-64x8.html") << html;
  std::string probed = html;
  probed.insert(probed.rfind("</body>"), R"(<script>
const svg = document.getElementById('plot-ranks'), box = svg.getBoundingClientRect();
// Every text and every legend entry (its mark and text) is a box.
const texts = [...svg.querySelectorAll('text')].filter(t => !t.closest('g.legend'))
  .concat([...svg.querySelectorAll('g.legend')]).map(t => {
  const r = t.getBoundingClientRect();
  return {text: t.textContent, left: r.left - box.left, right: r.right - box.left, top: r.top - box.top,
          bottom: r.bottom - box.top};
});
const overlaps = [];
for (let i = 0; i < texts.length; ++i)
  for (let j = i + 1; j < texts.length; ++j) {
    const a = texts[i], b = texts[j];
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) overlaps.push([a.text, b.text]);
  }
const outside = texts.filter(t => t.left < 0 || t.top < 0 || t.right > box.width || t.bottom > box.height);
const slow = svg.querySelector('text.host-label.flagged').parentNode.getAttribute('href').replace('#host-', '');
const bars = of_slow => [...svg.querySelectorAll('a.rank-mark')].filter(a => (a.dataset.host === slow) === of_slow)
  .map(a => a.querySelector('rect.busy').getBoundingClientRect().height);
const out = {width: box.width, texts: texts.length, overlaps, outside, slow_host: slow, slow_lowest_bar: Math.min(...bars(true)),
             others_tallest_bar: Math.max(...bars(false)),
             verdict: document.getElementById('verdict').textContent, folded: !document.getElementById('healthy-ranks').open,
             first_row: document.querySelector('#ranks tr[id]').id, labels: svg.querySelectorAll('text.host-label').length};
const pre = document.createElement('pre');
pre.id = 'probe';
pre.textContent = JSON.stringify(out).replace(/[<>&]/g, c => '\\u00' + c.charCodeAt(0).toString(16));
document.body.appendChild(pre);
</script>)");
  const fs::path browser = rcl::testing::fresh_dir("job-html", "browser");
  fs::create_directories(browser);
  std::ofstream(browser / "probe.html") << probed;
  const std::string dom =
      rcl::testing::chromium("--window-size=1400,2000 --dump-dom", browser / "probe.html", browser / "profile");
  const size_t begin = dom.find("<pre id=\"probe\">"), end = dom.find("</pre>", begin);
  ASSERT_NE(begin, std::string::npos) << "the probe did not run";
  const json probe = json::parse(dom.substr(begin + 16, end - begin - 16));
  EXPECT_EQ(probe["verdict"], "WARN");
  EXPECT_GT(probe["width"].get<double>(), 1000);
  EXPECT_EQ(probe["labels"], 64);
  EXPECT_TRUE(probe["overlaps"].empty()) << probe["overlaps"];
  EXPECT_TRUE(probe["outside"].empty()) << probe["outside"];
  EXPECT_GT(probe["slow_lowest_bar"].get<double>(), 2 * probe["others_tallest_bar"].get<double>()) << probe;
  EXPECT_TRUE(probe["folded"].get<bool>());
  EXPECT_EQ(probe["first_row"], "rank-136");

  const fs::path png = out / "job-report-64x8.png";
  fs::remove(png);
  rcl::testing::screenshot(out / "job-report-64x8.html", png, browser);
  const std::string image = rcl::testing::read_text(png);
  ASSERT_GT(image.size(), 10000u) << png;
  EXPECT_EQ(image.substr(1, 3), "PNG");
  fs::remove_all(browser);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
