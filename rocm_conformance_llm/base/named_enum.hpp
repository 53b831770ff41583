// Enums with names: one table of {value, "name"} pairs per enum, which parsing, printing and the
// list of allowed values all read, so each vocabulary is written once.
#pragma once

#include <concepts>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rcl {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// An enum has names where `enum_names(E)` (found beside it) returns its table, in the order the
// allowed values are listed (for an ordered vocabulary, weakest first).
template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { enum_names(e) } -> std::convertible_to<std::span<const EnumName<E>>>;
};

// Declares the table of `Enum`: RCL_ENUM_NAMES(Precision, {Precision::fp32, "fp32"}, ...).
#define RCL_ENUM_NAMES(Enum, ...)                                          \
  inline constexpr ::rcl::EnumName<Enum> k##Enum##Names[] = {__VA_ARGS__}; \
  constexpr std::span<const ::rcl::EnumName<Enum>> enum_names(Enum) { return k##Enum##Names; }

template <NamedEnum E>
const char* name_of(E value) {
  for (const auto& entry : enum_names(E{}))
    if (entry.value == value) return entry.name;
  return "?";  // a value outside the table: only a cast can make one
}

template <NamedEnum E>
std::optional<E> parse_name(std::string_view text) {
  for (const auto& entry : enum_names(E{}))
    if (text == entry.name) return entry.value;
  return std::nullopt;
}

template <NamedEnum E>
std::vector<std::string> names_of() {
  std::vector<std::string> names;
  for (const auto& entry : enum_names(E{})) names.emplace_back(entry.name);
  return names;
}

}  // namespace rcl
