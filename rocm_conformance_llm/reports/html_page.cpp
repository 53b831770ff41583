// The page shell and its stylesheet, apart from any one page: report.html, compare.html and
// job_report.html all open with it (job_report.html adds its own rules after it).
#include "rocm_conformance_llm/reports/html_page.hpp"

#include <fmt/format.h>

#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl {

namespace {
constexpr const char* kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.9em;margin:.4em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:.1em .6em;border-radius:.3em;color:#fff;font-weight:bold}
.PASS{background:#2e7d32}.WARN{background:#ef8f00}.FAIL,.CRASHED,.HUNG{background:#c62828}.INTERRUPTED{background:#6a1b9a}.NOT_RUN{background:#757575}
tr.sev-fail td:first-child{border-left:4px solid #c62828}tr.sev-warn td:first-child{border-left:4px solid #ef8f00}
tr.sev-info td:first-child{border-left:4px solid #1565c0}tr.flagged{background:#fdecea}tr:target{background:#fff59d}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:.85em}
svg.plot{width:100%;max-width:960px;height:auto;display:block;margin:.3em 0 1em}
svg .axis{stroke:#888;stroke-width:1}svg .grid{stroke:#eee;stroke-width:1}svg text{font-size:11px;fill:#444}
svg .title{font-size:13px;font-weight:bold;fill:#222}svg .curve{fill:none;stroke-width:1.4}
svg .marker line.mline{stroke-width:1.5;stroke-dasharray:4 2}svg .marker line.mhit{stroke:transparent;stroke-width:9}
svg .marker:hover line.mline{stroke-width:3}svg .sev-fail line.mline{stroke:#c62828}svg .sev-warn line.mline{stroke:#ef8f00}
svg .sev-info line.mline{stroke:#1565c0}svg .reference{stroke:#555;stroke-dasharray:6 3}svg .nonfinite{fill:#c62828}
)";
}  // namespace

std::string html_page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n"
      "<style>{}</style></head>\n<body>\n{}\n</body></html>\n",
      xml_escape(title), kStyle, body);
}

}  // namespace rcl
