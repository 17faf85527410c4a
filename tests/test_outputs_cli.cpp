// What the commands do with the user's files and values (issue: nothing the user owns is ever
// destroyed, no bad value runs silently): outputs never replace devices, FIFOs, directories or
// the input itself, a failed write keeps the previous file, hyper-parameters and sampling flags
// are range-checked, a FIFO model does not hang, thread counts beyond the CPUs still finish, and
// the default context of a file declaring a huge context_length fits in a quarter of free memory.
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "engine/session.h"

#include "cli_runner.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace lamina;
namespace fs = std::filesystem;

namespace {

using lamina::testing_cli::lines;
using lamina::testing_cli::Result;
using lamina::testing_cli::run;

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Outputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/lamina-outputs-" + std::to_string(getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string vocab = std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";
    ASSERT_EQ(std::system((std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + vocab +
                           "' -o " + dir_ + "/tiny.gguf 2>/dev/null").c_str()), 0);
    // Variants: one layer fewer declared than the file holds, a NaN epsilon, a huge context.
    const GgufFile f = GgufFile::open(dir_ + "/tiny.gguf");
    auto variant = [&](const std::string& name, auto&& edit) {
      GgufWriter w;
      for (const auto& kv : f.kvs()) w.set(kv.key, kv.value);
      edit(w);
      for (const auto& t : f.tensors())
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), std::span<const uint8_t>(t.data, t.nbytes));
      w.write(dir_ + "/" + name);
    };
    variant("fewer-layers.gguf", [](GgufWriter& w) { w.set_u32("llama.block_count", 1); });
    variant("nan-eps.gguf", [](GgufWriter& w) { w.set_f32("llama.attention.layer_norm_rms_epsilon", NAN); });
    variant("huge-ctx.gguf", [](GgufWriter& w) { w.set_u32("llama.context_length", 2147483647u); });
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A fresh work folder per test with a copy of the tiny model as in.gguf.
  void SetUp() override {
    work_ = dir_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(work_);
    fs::copy_file(dir_ + "/tiny.gguf", work_ + "/in.gguf");
  }
  std::string w(const std::string& name) const { return work_ + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(work_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  static void expect_error(const Result& r, const std::string& needle) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
  static std::string dir_;
  std::string work_;
};
std::string Outputs::dir_;

TEST_F(Outputs, QuantizeNeverOverwritesItsInput) {
  const std::string before = slurp(w("in.gguf"));
  fs::create_symlink("in.gguf", w("alias.gguf"));
  fs::create_hard_link(w("in.gguf"), w("hard.gguf"));
  for (const std::string& out : std::vector<std::string>{w("in.gguf"), work_ + "/./in.gguf", w("alias.gguf"), w("hard.gguf")}) {
    SCOPED_TRACE(out);
    expect_error(run("quantize " + w("in.gguf") + " " + out + " q4_0"), "is the same file as the input");
  }
  expect_error(run("gen-model --preset tiny --vocab " + w("in.gguf") + " -o " + w("alias.gguf")),
               "is the same file as the input");
  expect_error(run("logits -m " + w("in.gguf") + " -p hi --all " + w("hard.gguf")), "is the same file as the input");
  EXPECT_EQ(slurp(w("in.gguf")), before);
  EXPECT_EQ(entries(), (std::vector<std::string>{"alias.gguf", "hard.gguf", "in.gguf"}));
}

TEST_F(Outputs, DevicesFifosAndDirectoriesAreNeverReplaced) {
  ASSERT_EQ(mkfifo(w("fifo").c_str(), 0600), 0);
  fs::create_directories(w("adir"));
  std::vector<std::pair<std::string, std::string>> targets = {{"fifo", "is a FIFO"}, {"adir", "is a directory"}};
  // A device node the test makes itself with /dev/full's numbers; needs root (CI runs as root).
  const bool node = mknod(w("full").c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0;
  if (node) targets.emplace_back("full", "is a character device");
  for (const auto& [name, kind] : targets) {
    SCOPED_TRACE(name);
    // `timeout`: a FIFO opened for writing would block forever.
    expect_error(run("quantize " + w("in.gguf") + " " + w(name) + " q4_0", "timeout 60 "), kind);
    expect_error(run("gen-model --preset tiny -o " + w(name), "timeout 60 "), kind);
    expect_error(run("logits -m " + w("in.gguf") + " -p hi --all " + w(name), "timeout 60 "), kind);
  }
  struct stat st{};
  ASSERT_EQ(lstat(w("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(fs::is_directory(w("adir")));
  EXPECT_TRUE(fs::is_empty(w("adir")));
  if (node) {
    ASSERT_EQ(lstat(w("full").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  EXPECT_EQ(entries().size(), node ? 4u : 3u);  // no temporaries left behind
  if (!node) GTEST_SKIP() << "the device-node case needs root (mknod); FIFO and directory cases passed";
}

TEST_F(Outputs, TheUsersTmpFileSurvivesAndOutputsReplaceWhole) {
  std::ofstream(w("out.gguf.tmp")) << "mine";
  std::ofstream(w("out.gguf")) << "an older file";
  const Result r = run("quantize " + w("in.gguf") + " " + w("out.gguf") + " q4_0");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(w("out.gguf.tmp")), "mine");
  EXPECT_EQ(GgufFile::open(w("out.gguf")).tensor("blk.0.attn_q.weight").type, GgmlType::Q4_0);
  EXPECT_EQ(entries(), (std::vector<std::string>{"in.gguf", "out.gguf", "out.gguf.tmp"}));
}

TEST_F(Outputs, AFailedLogitsWriteKeepsThePreviousFile) {
  const std::string previous(1000, 'p');
  std::ofstream(w("prev.bin"), std::ios::binary) << previous;
  // A file-size limit of 8 blocks makes the write fail part-way, as a full disk would (SIGXFSZ
  // ignored so that write() reports EFBIG).
  Result r = run("logits -m " + w("in.gguf") + " --tokens '1 450 4996' --all " + w("prev.bin"), "trap '' XFSZ; ulimit -f 8; ");
  expect_error(r, w("prev.bin") + ": cannot write: File too large");
  EXPECT_EQ(slurp(w("prev.bin")), previous);
  EXPECT_EQ(entries(), (std::vector<std::string>{"in.gguf", "prev.bin"}));
  r = run("logits -m " + w("in.gguf") + " --tokens '1 450 4996' --all " + w("prev.bin"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(fs::file_size(w("prev.bin")), 3u * 32000u * sizeof(float));
}

TEST_F(Outputs, AnInterruptedWriteLeavesNoTemporary) {
  std::ofstream(w("big.gguf")) << "previous";
  // SIGTERM as soon as the temporary exists (the write has just begun).
  const std::string script = std::string(LAMINA_CLI) + " gen-model --preset smollm2-135m --type f16 -o " + w("big.gguf") +
                             " 2>/dev/null & pid=$!; n=0; while ! ls -a " + work_ +
                             " | grep -q lamina- && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; kill -TERM $pid; wait $pid";
  const int st = std::system(("sh -c '" + script + "'").c_str());
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGTERM);
  EXPECT_EQ(slurp(w("big.gguf")), "previous");
  EXPECT_EQ(entries(), (std::vector<std::string>{"big.gguf", "in.gguf"}));
}

TEST_F(Outputs, HyperParametersAreRangeChecked) {
  expect_error(run("run -m " + dir_ + "/fewer-layers.gguf -p hi -n 1"),
               "tensor 'blk.1.attn_norm.weight' is not used by a 1-layer llama model");
  expect_error(run("logits -m " + dir_ + "/nan-eps.gguf -p hi"), "layer_norm_rms_epsilon' = nan is out of range");
}

TEST_F(Outputs, SamplingFlagsRefuseNanAndSeedsOutOfRange) {
  for (const char* flags : {"--temp nan", "--temp inf", "--top-p nan", "--min-p nan", "--min-p -nan",
                            "--repeat-penalty nan", "--seed -1", "--seed 18446744073709551616",
                            "--seed 99999999999999999999999", "--seed 1e3", "--seed ''", "--top-k -3", "--ctx -5",
                            "--threads -1"}) {
    SCOPED_TRACE(flags);
    const Result r = run("run -m " + w("in.gguf") + " -p hi -n 1 " + flags);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_LT(r.err.size(), 300u) << r.err;  // bounds printed short (was DBL_MAX in 309 digits)
  }
  const Result r = run("run -m " + w("in.gguf") + " -p hi -n 2 --temp 0.7 --seed 18446744073709551615");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(Outputs, InputsAndCommandsAreNamed) {
  expect_error(run("tokenize -m " + w("in.gguf") + " -f " + work_), "is a directory");
  expect_error(run("frob"), "unknown command 'frob'");
  ASSERT_EQ(mkfifo(w("model-fifo").c_str(), 0600), 0);
  const Result r = run("info -m " + w("model-fifo"), "timeout 60 ");  // 124 if it hung
  expect_error(r, "is a FIFO; the GGUF file must be a regular file");
}

// chat past its context: the oldest messages leave the conversation (a note each time) and the
// chat goes on; a message that alone does not fit is refused, and the exit status says so at the end.
TEST_F(Outputs, ChatDropsTheOldestMessagesAndRefusesOneThatCannotFit) {
  { std::ofstream(w("turns.txt")) << "hi there\nsecond one\nthird\nfourth and more\n"; }
  Result r = run("chat -m " + w("in.gguf") + " -d cpu -c 48 -n 8 --temp 0 --template chatml", "timeout 120 ", w("turns.txt"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("outgrew the context of 48"), std::string::npos) << r.err;
  r = run("chat -m " + w("in.gguf") + " -d cpu -c 8 -n 4 --temp 0 --template chatml", "timeout 120 ", w("turns.txt"));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("does not fit the context of 8"), std::string::npos) << r.err;
}

TEST_F(Outputs, ThreadsBeyondTheCpusFinish) {
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run("run -m " + w("in.gguf") + " -p 'Hello there' -n 16 --temp 0 -d cpu -t 1000", "timeout 120 ");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("note: --threads 1000: this process may use"), std::string::npos) << r.err;
  EXPECT_LT(secs, 30.0);
}

// Memory is read in-process: the KV cache of the default context is at most a quarter of the
// free memory, and only the positions used are touched.
size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

TEST_F(Outputs, ADefaultContextFitsInAQuarterOfFreeMemory) {
  SessionOptions o;
  o.model_path = dir_ + "/huge-ctx.gguf";
  o.device = "cpu";
  o.n_threads = 2;
  const size_t rss0 = rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  Session s(o);
  const size_t free_after = s.backend().memory_available();
  const size_t kv = s.backend().kv_cache_bytes();
  EXPECT_GT(s.n_ctx(), 512);
  EXPECT_LT(s.n_ctx(), 2147483647);
  EXPECT_LE(double(kv), 0.3 * double(free_after)) << "KV " << kv << " bytes, free " << free_after;
  const std::vector<int32_t> toks = {1, 450, 4996, 310};
  s.eval(toks);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(rss_bytes() - std::min(rss_bytes(), rss0), size_t(256) << 20) << "the KV cache was touched beyond its use";
  EXPECT_LT(secs, 10.0);
}

}  // namespace
