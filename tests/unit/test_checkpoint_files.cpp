// The checkpoint files' building blocks in-process: SHA-256 against the FIPS 180 vectors, the
// safetensors writer against an independent reader written from the format's spec, refusal of
// damaged files, and the interval and duration parser. Checkpoints and resume through the binary:
// tests/binary/test_checkpoints.cpp.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/run/run_config.hpp"
#include "support/cli_runner.hpp"
#include "support/safetensors_spec.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::bytes_of;
using rcl::testing::fresh_dir;
using rcl::testing::spec_read;
using namespace std::chrono_literals;

TEST(Sha256, MatchesFips180Vectors) {
  const auto digest = [](std::string_view s) {
    Sha256 sha;
    sha.update(s);
    return sha.hex_digest();
  };
  EXPECT_EQ(digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;  // one million 'a', fed in pieces of 7 that straddle the 64-byte blocks
  const std::string piece(7, 'a');
  for (int i = 0; i < 142857; ++i) million.update(piece);
  million.update("a");
  EXPECT_EQ(million.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Safetensors, WhatWeWriteTheSpecReaderReadsByteForByte) {
  const fs::path dir = fresh_dir("ckpt", "st");
  fs::create_directories(dir);
  const auto f32 = torch::randn({3, 5});
  const auto bf16 = torch::randn({7}).to(torch::kBFloat16);
  const auto u8 = torch::arange(0, 13, torch::kLong).to(torch::kByte);
  const auto transposed = torch::randn({4, 2}).t();  // not contiguous: written in logical order
  write_safetensors(dir / "t.safetensors", {{"w", f32}, {"b", bf16}, {"r", u8}, {"t", transposed}}, {{"format", "pt"}});
  const auto spec = spec_read(dir / "t.safetensors");
  ASSERT_EQ(spec.size(), 4u);
  EXPECT_EQ(spec.at("w").dtype, "F32");
  EXPECT_EQ(spec.at("w").shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(spec.at("w").bytes, std::string(static_cast<const char*>(f32.data_ptr()), 15 * 4));
  EXPECT_EQ(spec.at("b").dtype, "BF16");
  EXPECT_EQ(spec.at("r").dtype, "U8");
  const auto t = transposed.contiguous();
  EXPECT_EQ(spec.at("t").bytes, std::string(static_cast<const char*>(t.data_ptr()), 8 * 4));
  const auto back = read_safetensors(dir / "t.safetensors");
  EXPECT_TRUE(torch::equal(back.tensors.at("w"), f32));
  EXPECT_TRUE(torch::equal(back.tensors.at("b"), bf16));
  EXPECT_TRUE(torch::equal(back.tensors.at("t"), transposed));
  EXPECT_EQ(back.metadata.at("format"), "pt");
  fs::remove_all(dir);
}

TEST(Safetensors, DamagedFilesAreRefusedNamingTheProblem) {
  const fs::path dir = fresh_dir("ckpt", "st-bad");
  fs::create_directories(dir);
  write_safetensors(dir / "ok.safetensors", {{"a", torch::ones({4})}, {"b", torch::zeros({2, 2})}});
  const std::string good = bytes_of(dir / "ok.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const std::string header = good.substr(8, n);
  const auto with_header = [&](std::string h) {
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    const uint64_t size = h.size();
    std::memcpy(out.data(), &size, 8);
    return out + h + good.substr(8 + n);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "shorter than"},
      {good.substr(0, 5), "shorter than"},
      {good.substr(0, good.size() - 3), "data"},
      {std::string("\xff\xff\xff\xff\xff\xff\x00\x00", 8) + good.substr(8), "header length"},
      {with_header("{not json"), "not JSON"},
      {with_header(
           R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})"),
       "overlap"},
      {with_header(
           R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]}})"),
       "unsupported dtype"},
      {with_header(
           R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]}})"),
       "data_offsets"},
      {with_header(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"), "bad shape"},
      {with_header(R"([1,2])"), "not a JSON object"},
  };
  for (const auto& [content, expected] : cases) {
    std::ofstream(dir / "bad.safetensors", std::ios::binary | std::ios::trunc) << content;
    try {
      read_safetensors(dir / "bad.safetensors");
      ADD_FAILURE() << "accepted a damaged file, expected: " << expected;
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Durations, UnitsAndRefusals) {
  EXPECT_EQ(parse_duration_s("--duration", "90s"), 90);
  EXPECT_EQ(parse_duration_s("--duration", "30m"), 1800);
  EXPECT_EQ(parse_duration_s("--duration", "8h"), 8 * 3600);
  EXPECT_EQ(parse_duration_s("--duration", "1.5h"), 5400);
  EXPECT_EQ(parse_duration_s("--duration", "2d"), 2 * 86400);
  EXPECT_EQ(parse_duration_s("--duration", "45"), 45);
  for (const char* bad : {"", "0", "0s", "-5m", "5x", "m", "inf", "nan", "1e999h", "5 m", "30min"})
    EXPECT_THROW(parse_duration_s("--duration", bad), ConfigError) << bad;
  EXPECT_EQ(parse_checkpoint_policy("25", 2).every_steps, 25);
  EXPECT_EQ(parse_checkpoint_policy("30m", 3).every_s, 1800);
  EXPECT_THROW(parse_checkpoint_policy("0", 2), ConfigError);
  EXPECT_THROW(parse_checkpoint_policy("10", 0), ConfigError);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
