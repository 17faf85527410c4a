// Runs the lamina CLI in a subprocess and captures stdout, stderr and the exit status.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace lamina::testing_cli {

struct Result {
  int status;
  std::string out, err;
};

// `prefix` goes before the binary: a shell prefix such as "timeout 20 " or "ulimit -f 8; ".
// `input`: the file standard input reads.
inline Result run(const std::string& args, const std::string& prefix = "", const std::string& input = "/dev/null") {
  static int counter = 0;  // ctest runs tests in parallel processes: unique file per call
  const std::string err_file = ::testing::TempDir() + "/lamina_cli_err_" + std::to_string(getpid()) + "_" +
                               std::to_string(counter++) + ".txt";
  const std::string cmd = prefix + std::string(LAMINA_CLI) + " " + args + " 2>" + err_file + " <'" + input + "'";
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

inline int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace lamina::testing_cli
