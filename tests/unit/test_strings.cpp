// The one number parser (base/strings.hpp): the whole text as a value of the asked type, within
// its range, or nothing; and the flag form's one-line ConfigError that names the flag and range.
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "support/config_error.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TEST(ParseNumber, WholeDecimalIntegersInRange) {
  EXPECT_EQ(parse_number<int>("42"), 42);
  EXPECT_EQ(parse_number<int>("-7"), -7);
  EXPECT_EQ(parse_number<int>("2147483647"), 2147483647);
  EXPECT_EQ(parse_number<int>("2147483648"), std::nullopt);  // one past int's range
  EXPECT_EQ(parse_number<int64_t>("2147483648"), int64_t{2147483648});
  EXPECT_EQ(parse_number<uint64_t>("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_number<uint64_t>("-1"), std::nullopt);  // never wrapped into a huge seed
  EXPECT_EQ(parse_number<int64_t>("00120"), 120);         // a checkpoint directory's step-00000120
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x10", "1.0", "1e3", "-", "one"})
    EXPECT_EQ(parse_number<int64_t>(bad), std::nullopt) << "'" << bad << "'";
}

TEST(ParseNumber, WholeFloatingPointText) {
  EXPECT_EQ(parse_number<double>("1.5"), 1.5);
  EXPECT_EQ(parse_number<double>("-2"), -2.0);
  EXPECT_EQ(parse_number<double>("1e3"), 1000.0);
  for (const char* bad : {"", "1.5s", " 1", "+1", "1e999", "x"})
    EXPECT_EQ(parse_number<double>(bad), std::nullopt) << "'" << bad << "'";
}

using testing::config_error_of;

TEST(ParseInteger, AFlagsValueOrOneLineNamingTheFlagAndTheRange) {
  EXPECT_EQ(parse_integer<int64_t>("--steps", "120"), 120);
  EXPECT_EQ(parse_integer<uint64_t>("--seed", "1234"), 1234u);
  EXPECT_EQ(config_error_of([] { return parse_integer<int>("--level", "two"); }),
            "invalid --level 'two': must be a decimal integer in [-2147483648, 2147483647]");
  EXPECT_EQ(config_error_of([] { return parse_integer<uint64_t>("--seed", "-1"); }),
            "invalid --seed '-1': must be a decimal integer in [0, 18446744073709551615]");
  EXPECT_EQ(config_error_of([] { return parse_integer<int64_t>("--steps", "99999999999999999999"); }),
            "invalid --steps '99999999999999999999': must be a decimal integer in "
            "[-9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(config_error_of([] { return parse_integer<int64_t>("--steps", ""); }),
            "invalid --steps '': must be a decimal integer in [-9223372036854775808, 9223372036854775807]");
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
