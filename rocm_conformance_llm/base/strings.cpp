#include "rocm_conformance_llm/base/strings.hpp"

#include <unistd.h>

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
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
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
    throw ConfigError(
        fmt::format("invalid {} '{}': expected a positive duration such as 90s, 30m, 8h, 1.5h, 2d "
                    "(a bare number is seconds)",
                    flag, text));
  return seconds;
}

int64_t parse_byte_size(std::string_view flag, std::string_view text) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {{"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30},
                                                                   {"TiB", 0x1p40}, {"KB", 1e3},     {"MB", 1e6},
                                                                   {"GB", 1e9},     {"TB", 1e12},    {"B", 1.0}};
  double unit = 1.0;
  std::string_view number = text;
  for (const auto& [suffix, factor] : kUnits) {
    if (number.ends_with(suffix)) {
      number.remove_suffix(suffix.size());
      unit = factor;
      break;
    }
  }
  const auto value = parse_number<double>(number);
  const double bytes = value.value_or(0.0) * unit;
  if (!value || !std::isfinite(bytes) || bytes < 1.0 || bytes > 0x1p62)
    throw ConfigError(
        fmt::format("invalid {} '{}': expected a memory size such as 80GB, 192GB, 79.2GiB or 512MiB "
                    "(KB/MB/GB/TB are powers of 10, KiB/MiB/GiB/TiB powers of 2; a bare number is bytes)",
                    flag, text));
  return static_cast<int64_t>(bytes);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string binary_size_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:g} MiB", bytes / 1048576.0);
  return fmt::format("{:g} KiB", bytes / 1024.0);
}

const std::string& host_name() {
  static const std::string name = [] {
    char buffer[256] = {};
    return ::gethostname(buffer, sizeof(buffer) - 1) == 0 ? std::string(buffer) : std::string("unknown");
  }();
  return name;
}

}  // namespace rcl
