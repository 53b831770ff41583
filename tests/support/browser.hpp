// Headless Chromium for the tests of the HTML pages: load a page offline, run a probe script
// over its rendered DOM, take a screenshot. A missing browser fails the test (CI installs
// Debian's `chromium` through scripts/setup.sh --with-tests): a skipped check proves nothing.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"

namespace rcl::testing {

inline std::filesystem::path find_chromium() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    for (const char* name : {"chromium", "chromium-browser"})
      if (const auto candidate = std::filesystem::path(dir) / name; ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
  return {};
}

// Runs chromium headless on `url` with `flags`; no network is needed or used (file:// only).
inline std::string chromium(const std::string& flags, const std::filesystem::path& page,
                            const std::filesystem::path& profile) {
  const auto browser = find_chromium();
  if (browser.empty()) ADD_FAILURE() << "chromium not found on PATH: install it (scripts/setup.sh --with-tests)";
  if (browser.empty()) return {};
  const auto out = profile.string() + ".out";
  const std::string cmd = browser.string() +
                          " --headless --no-sandbox --disable-gpu --no-first-run "
                          "--allow-file-access-from-files --user-data-dir=" +
                          profile.string() + " " + flags + " file://" + std::filesystem::absolute(page).string() +
                          " >" + out + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return read_text(out);
}

// Loads `page` in an iframe of a probe page whose script measures what the browser rendered:
// returns {"verdict", "plots": [{id, width, height, x_min, x_max, px_left, px_right, view_width}],
// "markers": [{plot, x, signature, severity, frac (centre of the line / width of its svg), title}],
// "finding_rows"}.
inline nlohmann::json probe_rendered_report(const std::filesystem::path& page, const std::filesystem::path& work) {
  std::filesystem::create_directories(work);
  const auto probe = work / "probe.html";
  std::ofstream(probe) << R"(<!DOCTYPE html><html><body>
<iframe id="f" src="file://)"
                       << std::filesystem::absolute(page).string() << R"(" style="width:1200px;height:900px"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => {
  const d = document.getElementById('f').contentDocument;
  const out = {verdict: (d.getElementById('verdict') || {}).textContent, plots: [], markers: [],
               finding_rows: d.querySelectorAll('tr[id^="finding-"]').length};
  for (const svg of d.querySelectorAll('svg.plot')) {
    const r = svg.getBoundingClientRect();
    out.plots.push({id: svg.id, width: r.width, height: r.height, x_min: +svg.dataset.xMin, x_max: +svg.dataset.xMax,
                    px_left: +svg.dataset.pxLeft, px_right: +svg.dataset.pxRight, view_width: svg.viewBox.baseVal.width});
  }
  for (const a of d.querySelectorAll('svg.plot a.marker')) {
    const svg = a.closest('svg'), l = a.querySelector('line.mline').getBoundingClientRect(), s = svg.getBoundingClientRect();
    out.markers.push({plot: svg.id, x: +a.dataset.x, signature: a.dataset.signature,
                      severity: a.getAttribute('class').replace('marker sev-', ''),
                      frac: (l.left + l.width / 2 - s.left) / s.width, title: a.querySelector('title').textContent,
                      href: a.getAttribute('href')});
  }
  const pre = document.createElement('pre');
  pre.id = 'probe-result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body></html>)";
  const std::string dom = chromium("--dump-dom", probe, work / "profile");
  const auto begin = dom.find("<pre id=\"probe-result\">");
  const auto end = dom.find("</pre>", begin);
  if (begin == std::string::npos || end == std::string::npos) {
    ADD_FAILURE() << "the probe found nothing in the rendered page " << page;
    return {};
  }
  std::string text = dom.substr(begin + 23, end - begin - 23);
  // The DOM serializer escaped the text node.
  using Entity = std::pair<std::string, std::string>;
  for (const auto& [from, to] : {Entity{"&lt;", "<"}, Entity{"&gt;", ">"}, Entity{"&nbsp;", " "}, Entity{"&amp;", "&"}})
    for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
      text.replace(at, from.size(), to);
  return nlohmann::json::parse(text);
}

// A PNG of the page as Chromium draws it.
inline void screenshot(const std::filesystem::path& page, const std::filesystem::path& png,
                       const std::filesystem::path& work) {
  std::filesystem::create_directories(png.parent_path());
  chromium("--hide-scrollbars --window-size=1200,2600 --screenshot=" + std::filesystem::absolute(png).string(), page,
           work / "profile-shot");
}

}  // namespace rcl::testing
