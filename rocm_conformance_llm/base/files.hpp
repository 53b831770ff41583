// Durable file writes: every byte checked (a full disk, EFBIG under RLIMIT_FSIZE or a quota is
// an exception naming the file and errno, never a silently short file) and fsynced, so a file
// or directory renamed into place is complete on disk before anyone can see it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace rcl {

// Creates or truncates `path`, writes the chunks back to back, fsyncs and closes it.
// std::runtime_error "cannot write PATH: REASON" on any failure.
void write_file_synced(const std::filesystem::path& path, const std::vector<std::string_view>& chunks);

// fsync of a directory: makes the renames and creations inside it durable.
void sync_directory(const std::filesystem::path& dir);

// Writes `text` to `path` via a temporary file in the same directory, fsync and rename, so a
// reader never sees half a file and an existing file is never left corrupted (on failure the
// temporary is removed and the old file stays as it was).
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace rcl
