// Files the user owns: inputs opened without blocking or surprises, outputs that replace the
// target whole or not at all.
//
// Inputs: a model must be a regular file (it is mapped); the check is made on the opened
// descriptor, opened non-blocking so a FIFO given as a model never hangs. Text inputs may be
// streams (a pipe, /dev/stdin) but not directories.
//
// Outputs: OutputFile writes to a temporary with a unique name in the target's directory and
// renames it over the target only when every byte reached the disk (flush, fsync, close all
// succeeded). So a failed write (a full disk, a size limit, an exception while producing the
// data) leaves the previous file exactly as it was, and no temporary behind. Targets that are
// not regular files (devices, FIFOs, directories, sockets) are refused rather than replaced;
// a link is written through (its target replaced, the link kept); a target that is the same
// file as one of the inputs (same device and inode, through links) is refused. SIGINT, SIGTERM
// and SIGHUP (where their action is the default) remove the temporaries before the process ends.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace lamina {

// Opens `path` read-only; throws lamina::Error naming the path and the reason unless it is a
// regular file. `what` names the role in messages ("model", "vocabulary").
int open_regular_file(const std::string& path, const char* what);

// The whole content of a text input (a regular file or a stream; not a directory).
std::string read_text_file(const std::string& path);

// Device and inode of the file `path` names (through links); nullopt if it does not exist.
struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> file_id(const std::string& path);

// "a directory", "a FIFO", "a character device", ... for messages about st_mode.
const char* file_kind(mode_t mode);

class OutputFile {
 public:
  // Checks the target and creates the temporary; throws lamina::Error naming the path when the
  // target is not a regular file, is one of `inputs`, or its directory is not writable.
  explicit OutputFile(const std::string& path, std::span<const std::string> inputs = {});
  ~OutputFile();  // without commit(): the temporary is removed, the target untouched
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Buffered; the first error is kept and reported by commit().
  void write(const void* data, size_t n);
  // Flushes, syncs and renames the temporary over the target. Throws lamina::Error naming the
  // target and the reason (errno) on any failure; the target then is as it was before.
  void commit();
  const std::string& path() const { return path_; }

 private:
  void flush_buffer();
  void write_through(const uint8_t* p, size_t n);
  void discard();
  void forget_temporary();

  std::string path_;    // as the user gave it (messages)
  std::string target_;  // the file to replace (links resolved)
  std::string tmp_;
  int fd_ = -1;
  int err_ = 0;    // errno of the first failed write
  int slot_ = -1;  // where the temporary is registered for removal on SIGINT/SIGTERM/SIGHUP
  std::vector<uint8_t> buf_;
};

}  // namespace lamina
