// Helpers shared by the CPU golden tests and the GPU end-to-end tests: the golden manifest
// (tests/golden, written by scripts/reference/make_golden.py), logits files, relative L2 error.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace lamina::test {

using json = nlohmann::json;

inline const std::string kGolden = std::string(LAMINA_TEST_DATA) + "/../golden";
inline const std::string kVocab = std::string(LAMINA_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";

// A case name as a gtest parameter name ('-' is not allowed there): "tiny-q8_0" -> "tiny_q8_0".
inline std::string case_param_name(const std::string& name) {
  std::string n = name;
  for (char& ch : n) if (ch == '-') ch = '_';
  return n;
}

inline json manifest() {
  std::ifstream in(kGolden + "/golden.json");
  return json::parse(in);
}

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(size_t(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

inline std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

inline std::string sha256(const std::string& path) {
  const std::string out = shell("sha256sum '" + path + "'");
  return out.substr(0, out.find(' '));
}

inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / n);
}

// The manifest's case `name` (null when there is none).
inline json golden_case(const std::string& name) {
  const json m = manifest();
  for (const auto& c : m["cases"])
    if (c["name"] == name) return c;
  return nullptr;
}

// `lamina gen-model --preset P --type T --seed S -o path` with the test vocabulary; its output.
inline std::string gen_model(const std::string& preset, const std::string& type, int seed, const std::string& path) {
  return shell(std::string(LAMINA_CLI) + " gen-model --preset " + preset + " --type " + type + " --vocab '" + kVocab +
               "' --seed " + std::to_string(seed) + " -o '" + path + "' 2>&1");
}

inline std::string default_model() {
  if (const char* p = std::getenv("LAMINA_MODEL")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/lamina/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The real Gemma 3 270M Q4_K_M (scripts/fetch-model.sh gemma3).
inline std::string gemma3_model() {
  if (const char* p = std::getenv("LAMINA_GEMMA3")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/lamina/models/gemma-3-270m-q4_k_m.gguf";
}

}  // namespace lamina::test
