// The lamina CLI: usage errors and bad files give one line on stderr and exit status 1.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

struct Result {
  int status;
  std::string out, err;
};

Result run(const std::string& args) {
  static int counter = 0;  // ctest runs tests in parallel processes: unique file per call
  const std::string err_file = ::testing::TempDir() + "/lamina_cli_err_" + std::to_string(getpid()) +
                               "_" + std::to_string(counter++) + ".txt";
  const std::string cmd = std::string(LAMINA_CLI) + " " + args + " 2>" + err_file;
  Result r{};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  FILE* e = fopen(err_file.c_str(), "r");
  while (e && (n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
  if (e) fclose(e);
  std::remove(err_file.c_str());
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const std::string kVocab = std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";
const std::string kBad = std::string(LAMINA_TEST_DATA) + "/gguf_bad";

TEST(Cli, VersionAndHelp) {
  auto r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("lamina"), std::string::npos);
  r = run("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("tokenize"), std::string::npos);
}

TEST(Cli, UsageErrorsAreOneLineExit1) {
  for (const char* args : {"", "nosuchcommand", "tokenize", "tokenize -m", "info --bogus",
                           "tokenize -m x.gguf -p a -f b", "detokenize -m x.gguf"}) {
    SCOPED_TRACE(args);
    const auto r = run(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
}

TEST(Cli, BadFilesAreOneLineExit1) {
  for (const std::string& args : {std::string("info -m /nonexistent.gguf"),
                                  "info -m " + kBad + "/overlap.gguf",
                                  "info -m " + kBad + "/huge_array.gguf",
                                  "tokenize -m " + kBad + "/empty.gguf -p hi",
                                  "tokenize -m " + kVocab + " -f /nonexistent.txt",
                                  "detokenize -m " + kVocab + " 5 99999999",
                                  "detokenize -m " + kVocab + " 5 abc"}) {
    SCOPED_TRACE(args);
    const auto r = run(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("lamina: ", 0), 0u) << r.err;
  }
}

TEST(Cli, TokenizeDetokenize) {
  auto r = run("tokenize -m " + kVocab + " -p 'Hello world'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "1 15043 3186\n");  // BOS, ▁Hello, ▁world (llama-spm vocab)
  r = run("tokenize -m " + kVocab + " --no-bos -p 'Hello world'");
  EXPECT_EQ(r.out, "15043 3186\n");
  r = run("tokenize -m " + kVocab + " --no-bos --pieces -p 'Hello'");
  EXPECT_EQ(r.out, "15043:' Hello'\n");
  r = run("detokenize -m " + kVocab + " 15043 3186");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "Hello world\n");  // the SPM prefix space is stripped from the first piece
  r = run("detokenize -m " + kVocab + " '1 15043 3186'");
  EXPECT_EQ(r.out, " Hello world\n");  // as llama.cpp: not stripped after a leading BOS
  r = run("info -m " + kVocab);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("tokenizer:     llama, 32000 tokens"), std::string::npos) << r.out;
}

}  // namespace
