#include "core/files.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace lamina {

namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The file an output path finally names: links are followed so that writing replaces the
// link's target and keeps the link.
// Temporaries in flight, removed by a handler for SIGINT, SIGTERM and SIGHUP (installed where
// the signal's action is still the default) before the signal takes its default course: an
// interrupted write leaves no hidden file behind. Slots hold pointers to the OutputFiles' own
// strings; unlink is async-signal-safe.
constexpr int kTmpSlots = 16;
std::atomic<const char*> g_tmp_slots[kTmpSlots];

void remove_temporaries_and_reraise(int sig) {
  for (auto& slot : g_tmp_slots)
    if (const char* p = slot.load()) ::unlink(p);
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_signal_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old{};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa{};
        sa.sa_handler = remove_temporaries_and_reraise;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, nullptr);
      }
    }
  });
}

int register_temporary(const char* path) {
  for (int i = 0; i < kTmpSlots; ++i) {
    const char* expected = nullptr;
    if (g_tmp_slots[i].compare_exchange_strong(expected, path)) return i;
  }
  return -1;  // more outputs in flight than slots: still correct, only not cleaned on a signal
}

std::string resolve_target(const std::string& path) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) fail("{}: cannot write here: {}", path, std::strerror(errno));
    return path;
  }
  if (!S_ISLNK(st.st_mode)) return path;
  char resolved[PATH_MAX];
  if (!realpath(path.c_str(), resolved))
    fail("{}: is a link to a missing file ({}); give the file's own path", path, std::strerror(errno));
  return resolved;
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int open_regular_file(const std::string& path, const char* what) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open the {}: {}", path, what, std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot read the {}: {}", path, what, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: is {}; the {} must be a regular file", path, file_kind(st.st_mode), what);
  }
  return fd;
}

std::string read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{}: is a directory, not a text file", path);
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      fail("{}: cannot read: {}", path, std::strerror(e));
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

std::optional<FileId> file_id(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

OutputFile::OutputFile(const std::string& path, std::span<const std::string> inputs) : path_(path) {
  if (path.empty()) fail("an output path is empty");
  target_ = resolve_target(path);
  struct stat st{};
  const bool exists = stat(target_.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode))
    fail("{}: is {}; refusing to replace it (outputs go to regular files)", path, file_kind(st.st_mode));
  if (exists)
    for (const std::string& in : inputs)
      if (file_id(in) == FileId{st.st_dev, st.st_ino})
        fail("{}: is the same file as the input {}; write to another path", path, in);
  // A unique temporary beside the target (same file system, so the rename is atomic); O_EXCL
  // never touches a file that is already there.
  static std::atomic<unsigned> counter{0};
  const std::string dir = dir_of(target_), base = base_of(target_);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    tmp_ = dir + "/." + base + ".lamina-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".tmp";
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100))
      fail("{}: cannot create a file in {}: {}", path, dir, std::strerror(errno));
  }
  install_signal_cleanup();
  slot_ = register_temporary(tmp_.c_str());
  if (exists) fchmod(fd_, st.st_mode & 07777);  // a replaced file keeps its permissions
  buf_.reserve(kBufferBytes);
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::forget_temporary() {
  if (slot_ >= 0) g_tmp_slots[slot_].store(nullptr);
  slot_ = -1;
  tmp_.clear();
}

void OutputFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  forget_temporary();
}

void OutputFile::write_through(const uint8_t* p, size_t n) {
  while (n > 0 && err_ == 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno != EINTR) err_ = errno;
      continue;
    }
    if (w == 0) err_ = EIO;
    p += w;
    n -= size_t(w);
  }
}

void OutputFile::flush_buffer() {
  write_through(buf_.data(), buf_.size());
  buf_.clear();
}

void OutputFile::write(const void* data, size_t n) {
  if (err_ != 0 || fd_ < 0) return;
  const auto* p = static_cast<const uint8_t*>(data);
  if (buf_.size() + n > kBufferBytes) flush_buffer();
  if (n >= kBufferBytes) write_through(p, n);
  else buf_.insert(buf_.end(), p, p + n);
}

void OutputFile::commit() {
  if (fd_ < 0) fail("{}: already written", path_);
  flush_buffer();
  if (err_ == 0 && fsync(fd_) != 0) err_ = errno;
  if (::close(fd_) != 0 && err_ == 0) err_ = errno;
  fd_ = -1;
  if (err_ == 0 && std::rename(tmp_.c_str(), target_.c_str()) != 0) err_ = errno;
  if (err_ != 0) {
    discard();
    fail("{}: cannot write: {} (nothing was replaced)", path_, std::strerror(err_));
  }
  forget_temporary();
}

}  // namespace lamina
