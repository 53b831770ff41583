// Small string and clock helpers shared across modules (one definition each).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace rcl {

// `s` without leading and trailing spaces, tabs and line breaks.
std::string trim(std::string_view s);
// ASCII lower case (error texts, names).
std::string to_lower(std::string_view s);
// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

// A duration as a user writes it: "90s", "30m", "8h", "1.5h", "2d", or bare seconds ("45").
// Returns seconds (> 0); ConfigError "invalid FLAG 'TEXT': ..." naming what is allowed.
double parse_duration_s(std::string_view flag, std::string_view text);

using SteadyClock = std::chrono::steady_clock;
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace rcl
