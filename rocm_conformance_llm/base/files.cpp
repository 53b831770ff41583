#include "rocm_conformance_llm/base/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rcl {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void throw_write_error(const fs::path& path, int fd, int error) {
  if (fd >= 0) ::close(fd);
  throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(error));
}
}  // namespace

void write_file_synced(const fs::path& path, const std::vector<std::string_view>& chunks) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(path, -1, errno);
  for (std::string_view chunk : chunks) {
    while (!chunk.empty()) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw_write_error(path, fd, n < 0 ? errno : ENOSPC);
      chunk.remove_prefix(static_cast<size_t>(n));
    }
  }
  if (::fsync(fd) != 0) throw_write_error(path, fd, errno);
  if (::close(fd) != 0) throw_write_error(path, -1, errno);
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_write_error(dir, -1, errno);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw_write_error(dir, -1, error);
}

void write_file_atomically(const fs::path& path, const std::string& text) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  try {
    write_file_synced(tmp, {text});
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  fs::rename(tmp, path);
}

}  // namespace rcl
