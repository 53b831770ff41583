#include "rocm_conformance_llm/base/strings.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace rcl {

std::string trim(std::string_view s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const auto end = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(begin, end - begin + 1));
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

double parse_duration_s(std::string_view flag, std::string_view text) {
  double unit = 1;
  std::string_view number = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 's': unit = 1, number.remove_suffix(1); break;
      case 'm': unit = 60, number.remove_suffix(1); break;
      case 'h': unit = 3600, number.remove_suffix(1); break;
      case 'd': unit = 86400, number.remove_suffix(1); break;
      default: break;
    }
  }
  const auto value = parse_number<double>(number);
  const double seconds = value.value_or(0.0) * unit;
  if (!value || !std::isfinite(seconds) || seconds <= 0)
    throw ConfigError(fmt::format("invalid {} '{}': expected a positive duration such as 90s, 30m, 8h, 1.5h, 2d "
                                  "(a bare number is seconds)",
                                  flag, text));
  return seconds;
}

}  // namespace rcl
