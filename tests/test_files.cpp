// OutputFile and the input checks (core/files.h): a target is replaced whole or left as it was;
// devices, FIFOs and directories are never replaced; links are written through; a target that
// is one of the inputs is refused; temporaries never collide with the user's files.
#include "core/error.h"
#include "core/files.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

using namespace lamina;
namespace fs = std::filesystem;

namespace {

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/lamina-files-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static void put(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  static std::string get(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Entries of the directory other than `keep` (leftover temporaries).
  std::vector<std::string> others(std::initializer_list<std::string> keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (std::find(keep.begin(), keep.end(), n) == keep.end()) out.push_back(n);
    }
    return out;
  }
  static void write_and_commit(const std::string& p, const std::string& text) {
    OutputFile out(p);
    out.write(text.data(), text.size());
    out.commit();
  }
  std::string dir_;
};

TEST_F(Files, ReplacesARegularFileWholeAndKeepsItsMode) {
  put(path("out"), "old contents");
  chmod(path("out").c_str(), 0640);
  write_and_commit(path("out"), "new");
  EXPECT_EQ(get(path("out")), "new");
  struct stat st{};
  ASSERT_EQ(stat(path("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_TRUE(others({"out"}).empty());
}

TEST_F(Files, LargeWritesArriveInOrder) {
  std::string big(3 << 20, '\0');  // larger than the buffer: written through
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 131 % 251);
  OutputFile out(path("big"));
  out.write("head", 4);
  out.write(big.data(), big.size());
  out.write("tail", 4);
  out.commit();
  EXPECT_EQ(get(path("big")), "head" + big + "tail");
}

TEST_F(Files, AnExceptionBeforeCommitLeavesThePreviousFile) {
  put(path("out"), "precious");
  try {
    OutputFile out(path("out"));
    out.write("partial", 7);
    throw std::runtime_error("producer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(get(path("out")), "precious");
  EXPECT_TRUE(others({"out"}).empty());
}

TEST_F(Files, TheUsersTmpFileIsNeverTouched) {
  put(path("model.gguf.tmp"), "mine");
  write_and_commit(path("model.gguf"), "model");
  EXPECT_EQ(get(path("model.gguf.tmp")), "mine");
  EXPECT_EQ(get(path("model.gguf")), "model");
}

TEST_F(Files, DirectoriesAndFifosAreRefusedNotReplaced) {
  fs::create_directories(path("adir"));
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  for (const auto& [name, kind] : {std::pair{"adir", "a directory"}, std::pair{"fifo", "a FIFO"}}) {
    SCOPED_TRACE(name);
    try {
      OutputFile out(path(name));
      ADD_FAILURE() << "accepted " << kind;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kind), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path(name)), std::string::npos) << e.what();
    }
  }
  struct stat st{};
  ASSERT_EQ(lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(fs::is_directory(path("adir")));
  EXPECT_EQ(others({"adir", "fifo"}).size(), 0u);
}

TEST_F(Files, ADeviceNodeIsRefusedNotReplaced) {
  // A node this test makes itself, with /dev/full's numbers (1, 7); never a system one.
  if (mknod(path("full").c_str(), S_IFCHR | 0600, makedev(1, 7)) != 0)
    GTEST_SKIP() << "cannot create a device node here (needs root): " << std::strerror(errno);
  EXPECT_THROW(OutputFile out(path("full")), Error);
  struct stat st{};
  ASSERT_EQ(lstat(path("full").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(others({"full"}).size(), 0u);
}

TEST_F(Files, LinksAreWrittenThrough) {
  put(path("real"), "old");
  fs::create_symlink("real", path("link"));
  write_and_commit(path("link"), "new");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(get(path("real")), "new");
  fs::create_symlink("missing", path("dangling"));
  EXPECT_THROW(OutputFile out(path("dangling")), Error);
}

TEST_F(Files, AnInputIsNeverTheOutput) {
  put(path("in.gguf"), "model");
  fs::create_symlink("in.gguf", path("alias.gguf"));
  fs::create_hard_link(path("in.gguf"), path("hard.gguf"));
  const std::array inputs{path("in.gguf")};
  for (const std::string& out : std::vector<std::string>{path("in.gguf"), dir_ + "/./in.gguf", path("alias.gguf"), path("hard.gguf")}) {
    SCOPED_TRACE(out);
    try {
      OutputFile f(out, inputs);
      ADD_FAILURE() << "accepted the input as output";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is the same file as the input"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(get(path("in.gguf")), "model");
  EXPECT_NO_THROW(OutputFile(path("other.gguf"), inputs));
}

TEST_F(Files, InputsAreCheckedBeforeTheyBlock) {
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  // Opened non-blocking: no writer exists, so a blocking open would hang here.
  try {
    open_regular_file(path("fifo"), "model");
    ADD_FAILURE() << "accepted a FIFO";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a FIFO; the model must be a regular file"), std::string::npos) << e.what();
  }
  fs::create_directories(path("adir"));
  EXPECT_THROW(open_regular_file(path("adir"), "model"), Error);
  try {
    read_text_file(path("adir"));
    ADD_FAILURE() << "read a directory as text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  put(path("text"), "hello\nworld");
  EXPECT_EQ(read_text_file(path("text")), "hello\nworld");
}

}  // namespace
