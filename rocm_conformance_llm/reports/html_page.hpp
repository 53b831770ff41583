// The page shell every HTML report is built in (report.html, compare.html, job_report.html): the
// document head and the shared inline stylesheet, so each page opens offline on its own.
#pragma once

#include <string>

namespace rcl {

// A complete page: `title`, the shared inline stylesheet, `body`. Text goes in through
// report.hpp's xml_escape, which is also right for HTML content and attributes.
std::string html_page(const std::string& title, const std::string& body);

}  // namespace rcl
