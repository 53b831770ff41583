// job_report.html: the multi-node job's verdict page for a person, from job_report.json's document
// (keys: docs/outputs.md). Top to bottom: the verdict and exit code; the node(s) to drain first
// with their evidence, and the job's own findings; a roll-up per host, the suspect and flagged
// hosts first; one plot of every rank's step and busy time grouped by host, so an odd node stands
// out; the rank table, problem rows first and the clean ranks of healthy hosts folded away, each
// row linking that rank's own report.html. Self-contained like report.html (html_page.hpp's page
// shell and stylesheet): inline SVG, no script, nothing loaded from anywhere. Here: the page put
// together and its own stylesheet; each section is a job_page_*.cpp over job_page.hpp's model.
#include <fmt/format.h>

#include "rocm_conformance_llm/reports/html_page.hpp"
#include "rocm_conformance_llm/reports/job_page.hpp"
#include "rocm_conformance_llm/reports/job_report.hpp"

namespace rcl {

namespace {

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

}  // namespace

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
  html.insert(html.find("</head>"), fmt::format("<style>{}</style>\n", kJobStyle));
  return html;
}

}  // namespace rcl
