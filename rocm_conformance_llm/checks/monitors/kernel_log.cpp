#include "rocm_conformance_llm/checks/monitors/kernel_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <regex>

#include <fmt/format.h>

namespace rcl {
namespace {

// First match wins: an XGMI RAS error is an XGMI error, a reset caused by a ring timeout is
// reported as both because the driver logs two lines. Patterns follow amdgpu's own messages
// (drivers/gpu/drm/amd/amdgpu: amdgpu_job_timedout, gmc_v9_0_process_interrupt, amdgpu_ras.c).
struct SignatureRule {
  const char* signature;
  const char* pattern;  // ECMAScript, case-insensitive
  const char* what;
};
const SignatureRule kKernelLogRules[] = {
    {"kernel_ring_timeout", R"(ring \S+ timeout|amdgpu_job_timedout)", "a ring (queue) timed out"},
    {"kernel_gpu_reset", R"(gpu reset|gpu_recover|gpu recovery|mode[12] reset|asic reset)", "the GPU was reset"},
    {"kernel_page_fault", R"(page fault|protection_fault|vm_l2_protection)", "a GPU VM page fault"},
    {"kernel_xgmi_error", R"(xgmi.*(error|fail|timeout))", "an XGMI link error"},
    {"kernel_ras_event", R"(\bras\b|\becc\b|correctable|poison|hardware error)", "a RAS/ECC event"},
};

const std::vector<std::regex>& compiled_rules() {
  static const std::vector<std::regex> compiled = [] {
    std::vector<std::regex> out;
    for (const auto& rule : kKernelLogRules) out.emplace_back(rule.pattern, std::regex::ECMAScript | std::regex::icase);
    return out;
  }();
  return compiled;
}

bool contains_nocase(std::string_view text, std::string_view word) {
  return std::search(text.begin(), text.end(), word.begin(), word.end(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         }) != text.end();
}

// /dev/kmsg records read "PRI,SEQ,TIME,FLAGS;message" (continuation lines start with a space).
std::string_view strip_kmsg_prefix(std::string_view line) {
  const auto semicolon = line.find(';');
  const auto comma = line.find(',');
  if (semicolon != std::string_view::npos && comma != std::string_view::npos && comma < semicolon &&
      std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(comma), ::isdigit))
    line.remove_prefix(semicolon + 1);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

class KmsgSource final : public KernelLogSource {
 public:
  explicit KmsgSource(int fd) : fd_(fd) {}
  ~KmsgSource() override { ::close(fd_); }
  std::vector<std::string> read_new_lines() override {
    std::vector<std::string> lines;
    char record[8192];
    for (;;) {
      const ssize_t n = ::read(fd_, record, sizeof(record));
      if (n > 0) {
        const std::string_view text(record, static_cast<size_t>(n));
        lines.emplace_back(text.substr(0, text.find('\n')));
        continue;
      }
      if (n < 0 && errno == EPIPE) continue;  // records overwritten before we read them: go on
      break;                                  // EAGAIN: nothing new
    }
    return lines;
  }

 private:
  int fd_;
};

// `dmesg` output since the first call: the lines after those it printed then. A wrapped ring
// buffer (fewer lines than before) is read whole.
class DmesgSource final : public KernelLogSource {
 public:
  static std::optional<std::vector<std::string>> run() {
    FILE* pipe = ::popen("dmesg 2>/dev/null", "r");
    if (!pipe) return std::nullopt;
    std::vector<std::string> lines;
    char buf[4096];
    while (std::fgets(buf, sizeof(buf), pipe)) lines.emplace_back(buf);
    if (::pclose(pipe) != 0 || lines.empty()) return std::nullopt;
    return lines;
  }
  explicit DmesgSource(size_t seen) : seen_(seen) {}
  std::vector<std::string> read_new_lines() override {
    auto lines = run();
    if (!lines) return {};
    const size_t from = lines->size() >= seen_ ? seen_ : 0;
    seen_ = lines->size();
    return {lines->begin() + static_cast<std::ptrdiff_t>(from), lines->end()};
  }

 private:
  size_t seen_;
};

// A recorded log: read whole, then whatever is appended.
class FileSource final : public KernelLogSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> read_new_lines() override {
    std::ifstream in(path_);
    in.seekg(offset_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    in.clear();
    if (const auto end = in.tellg(); end >= 0) offset_ = end;
    return lines;
  }

 private:
  std::string path_;
  std::streamoff offset_ = 0;
};

}  // namespace

std::optional<KernelLogMatch> classify_kernel_line(std::string_view raw) {
  const std::string_view line = strip_kmsg_prefix(raw);
  // Only the amdgpu driver's lines: "page fault" or "hardware error" alone name other drivers too.
  if (!contains_nocase(line, "amdgpu")) return std::nullopt;
  const std::string text(line);
  const auto& rules = compiled_rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    if (!std::regex_search(text, rules[i])) continue;
    KernelLogMatch match{.signature = kKernelLogRules[i].signature, .severity = Severity::fail, .line = text};
    // A corrected error is the RAS machinery working; an uncorrectable one or poison is data lost.
    if (match.signature == "kernel_ras_event" && !contains_nocase(line, "uncorrect") &&
        !contains_nocase(line, "poison"))
      match.severity = Severity::warn;
    return match;
  }
  return std::nullopt;
}

OpenedKernelLog open_kernel_log(const std::string& setting) {
  if (setting == "off") return {nullptr, "skipped: diagnostics.kernel_log_source=off"};
  if (setting != "auto") {
    if (!std::ifstream(setting).good()) return {nullptr, "skipped: cannot read " + setting};
    return {std::make_unique<FileSource>(setting), "file " + setting};
  }
  // /dev/kmsg from its end: only what the kernel logs during the run.
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    if (::lseek(fd, 0, SEEK_END) >= 0) return {std::make_unique<KmsgSource>(fd), "/dev/kmsg"};
    ::close(fd);
  }
  if (const auto lines = DmesgSource::run()) return {std::make_unique<DmesgSource>(lines->size()), "dmesg"};
  return {nullptr, "skipped: neither /dev/kmsg nor dmesg is readable (kernel.dmesg_restrict, or not root)"};
}

Finding kernel_log_finding(const KernelLogMatch& match, const std::string& source, int64_t step, int rank) {
  std::string what = "an amdgpu event";
  for (const auto& rule : kKernelLogRules)
    if (match.signature == rule.signature) what = rule.what;
  return Finding{.component = component::hip_runtime,
                 .signature = match.signature,
                 .severity = match.severity,
                 .step = step,
                 .rank = rank,
                 .message = fmt::format("kernel log (amdgpu driver): {} around step {}", what, step),
                 .evidence = {{"line", match.line}, {"source", source}}};
}

}  // namespace rcl
