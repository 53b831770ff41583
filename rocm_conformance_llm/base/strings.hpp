// Small string and clock helpers shared across modules (one definition each).
#pragma once

#include <charconv>
#include <chrono>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl {

// `s` without leading and trailing spaces, tabs and line breaks.
std::string trim(std::string_view s);
// ASCII lower case (error texts, names).
std::string to_lower(std::string_view s);
// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");
// Up to the first line break: an exception's message without the backtrace libtorch appends.
std::string first_line(const std::string& text);
// "1.5 MiB" from 1 MiB up, "32 KiB" below (collective and bucket sizes in messages).
std::string binary_size_text(int64_t bytes);
// This machine's name (gethostname), read once; "unknown" if it cannot be read.
const std::string& host_name();

// The one number parser: the whole of `text` as a T (an integer, or a floating type), within T's
// range. nullopt for empty text, a leading '+' or space, anything after the number, or a value
// T cannot hold; every caller then says in its own words what it wanted.
template <typename T>
requires std::integral<T> || std::floating_point<T> std::optional<T> parse_number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A flag's integer value: parse_number, or ConfigError
// "invalid FLAG 'TEXT': must be a decimal integer in [MIN, MAX]" (T's range).
template <std::integral T>
T parse_integer(std::string_view flag, std::string_view text) {
  if (const auto value = parse_number<T>(text)) return *value;
  throw ConfigError(fmt::format("invalid {} '{}': must be a decimal integer in [{}, {}]", flag, text,
                                std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

// A duration as a user writes it: "90s", "30m", "8h", "1.5h", "2d", or bare seconds ("45").
// Returns seconds (> 0); ConfigError "invalid FLAG 'TEXT': ..." naming what is allowed.
double parse_duration_s(std::string_view flag, std::string_view text);

// A memory size as a vendor writes it: "80GB", "192GB", "79.2GiB", "512MiB", bare bytes ("1000").
// Decimal units (KB, MB, GB, TB = 10^3..10^12, as datasheets quote device memory) and binary ones
// (KiB..TiB). Returns bytes (>= 1); ConfigError "invalid FLAG 'TEXT': ..." naming what is allowed.
int64_t parse_byte_size(std::string_view flag, std::string_view text);

using SteadyClock = std::chrono::steady_clock;
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace rcl
