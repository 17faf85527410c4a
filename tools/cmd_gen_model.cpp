// lamina gen-model: writes a Llama GGUF with seeded random weights in a real model's shape, for
// tests and benchmarks where real weights cannot travel. Deterministic: the value of weight i of
// tensor j depends only on (seed, j, i), not on the thread count or the machine.
#include "core/thread_pool.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/tokenizer.h"
#include "model/model_io.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <thread>

namespace lamina::cli {
namespace {

struct Preset {
  const char* name;
  uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, n_vocab;
  float rope_base;
  bool tied;
  const char* arch = "llama";   // "qwen2": QKV biases; "qwen3": q/k norms; "gemma3" (model/config.h)
  bool llama3_rope = false;     // rope_freqs.weight from Llama 3.1's scaling (factor 8)
  uint32_t head_dim = 0;        // attention.key_length when it is not n_embd / n_head
  uint32_t sliding_window = 0;  // gemma3: its local layers' window
  uint32_t n_expert = 0, n_expert_used = 0;  // a mixture of experts (Mixtral-style llama)
  bool longrope = false;  // phi3: LongRoPE factors for 4x the original context (Phi-3 128k files)
};

// n_vocab is used only when no --vocab file is given (a synthetic vocabulary is written then).
constexpr Preset kPresets[] = {
    {"tiny", 256, 2, 4, 2, 512, 512, 32000, 10000.f, false},
    {"tiny-qwen2", 256, 2, 4, 2, 512, 512, 32000, 1000000.f, true, "qwen2"},
    {"tiny-llama3", 256, 2, 4, 2, 512, 512, 32000, 500000.f, false, "llama", true},
    // An FFN of three 256-element blocks: in a K-quant file it splits over 2 ranks only unevenly
    // (tensor parallelism on the down projection's blocks, as Llama-2-7B's 43 blocks do); heads of
    // 128, so that a rank's two heads are a whole block of Wo's columns.
    {"tiny-ff768", 512, 2, 4, 2, 768, 512, 32000, 10000.f, false},
    {"tiny-qwen3", 256, 2, 4, 2, 512, 512, 32000, 1000000.f, true, "qwen3"},
    // Six layers, so that the last is gemma3's global one; a window of 4 tokens that the golden
    // prompt (11 tokens) exceeds.
    {"tiny-gemma3", 256, 6, 4, 1, 512, 512, 32000, 1000000.f, true, "gemma3", false, 0, 4},
    // Qwen 3's shapes (q/k norms; 0.6B: 16 heads of 128 > n_embd, tied).
    {"qwen3-0.6b", 1024, 28, 16, 8, 3072, 40960, 151936, 1000000.f, true, "qwen3", false, 128},
    {"qwen3-8b", 4096, 36, 32, 8, 12288, 40960, 151936, 1000000.f, false, "qwen3", false, 128},
    // Mixtral-style experts: 4 of which 2 per token; Mixtral-8x7B's shape (8, 2).
    {"tiny-moe", 256, 2, 4, 2, 512, 512, 32000, 10000.f, false, "llama", false, 0, 0, 4, 2},
    {"mixtral-8x7b", 4096, 32, 32, 8, 14336, 32768, 32000, 1000000.f, false, "llama", false, 0, 0, 8, 2},
    // Qwen 3's experts (q/k norms; 8 of which 2 here; Qwen3-30B-A3B has 128 of width 768, 8 per token).
    {"tiny-qwen3moe", 256, 2, 4, 2, 128, 512, 32000, 1000000.f, false, "qwen3moe", false, 0, 0, 8, 2},
    // Qwen 2's experts: QKV biases, the routed experts' weights not renormalised, a shared expert.
    {"tiny-qwen2moe", 256, 2, 4, 2, 128, 512, 32000, 1000000.f, false, "qwen2moe", false, 0, 0, 8, 2},
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 768, 40960, 151936, 1000000.f, false, "qwen3moe", false, 128, 0, 128, 8},
    // Phi-3's fused Q/K/V and gate/up tensors; Phi-3-mini-4k's shape.
    {"tiny-phi3", 256, 2, 4, 4, 512, 512, 32000, 10000.f, false, "phi3"},
    // Phi-3 128k's LongRoPE: the short factors below 128 positions of context, the long ones past.
    {"tiny-phi3-longrope", 256, 2, 4, 4, 512, 512, 32000, 10000.f, false, "phi3", false, 0, 0, 0, 0, true},
    {"phi3-mini", 3072, 32, 32, 32, 8192, 4096, 32064, 10000.f, false, "phi3"},
    // Gemma 3 270M's shape (the real file: scripts/fetch-model.sh gemma3).
    {"gemma3-270m", 640, 18, 4, 1, 2048, 32768, 262144, 1000000.f, true, "gemma3", false, 256, 512},
    // Gemma 3 12B's shape: 40 local layers of 1,024 positions and 8 global ones, 128k context (the
    // local layers' cache on rings of chunks: issue #34).
    {"gemma3-12b", 3840, 48, 16, 8, 15360, 131072, 262144, 1000000.f, true, "gemma3", false, 256, 1024},
    // SmolLM2 itself ties output and embedding; the preset keeps output.weight separate, as the
    // llama.cpp benchmark files in ../shared/docs/anchors.md do (273 MiB in f16), to compare alike.
    {"smollm2-135m", 576, 30, 9, 3, 1536, 8192, 49152, 100000.f, false},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 4096, 32000, 10000.f, false},
    {"llama3-8b", 4096, 32, 32, 8, 14336, 8192, 32000, 500000.f, false},
    // The 70B shapes, for tensor parallelism over several GPUs (issue #35): 39 GB in q4_0.
    {"llama2-70b", 8192, 80, 64, 8, 28672, 4096, 32000, 10000.f, false},
    {"llama3-70b", 8192, 80, 64, 8, 28672, 8192, 32000, 500000.f, false},
};

std::string preset_names() {
  std::string s;
  for (const auto& p : kPresets) s += std::string(s.empty() ? "" : ", ") + p.name;
  return s;
}

struct GenArgs {
  std::string preset, type = "f16", vocab, out;
  uint64_t seed = 42;
  int threads = 0;
};

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Standard normal values 2p and 2p+1 of stream `stream`: Box-Muller on two hashed uniforms,
// both outputs used.
void normal_pair(uint64_t stream, uint64_t p, float& a, float& b) {
  const uint64_t h1 = mix(stream ^ mix(2 * p)), h2 = mix(stream ^ mix(2 * p + 1));
  const float u1 = (float(h1 >> 40) + 0.5f) * 0x1.0p-24f, u2 = float(h2 >> 40) * 0x1.0p-24f;
  const float r = std::sqrt(-2.f * std::log(u1)), t = 6.2831853f * u2;
  a = r * std::cos(t);
  b = r * std::sin(t);
}
float normal(uint64_t stream, uint64_t i) {
  float a, b;
  normal_pair(stream, i / 2, a, b);
  return i % 2 ? b : a;
}

void copy_vocab(const std::string& path, GgufWriter& w, uint32_t& n_vocab) {
  const GgufFile v = GgufFile::open(path);
  const auto* toks = v.get_string_array("tokenizer.ggml.tokens");
  if (!toks) fail("{}: no tokenizer.ggml.tokens (not a vocabulary file)", path);
  try {  // a file whose tokenizer cannot load would make a model no command can run
    (void)Tokenizer::from_gguf(v);
  } catch (const Error& e) {
    fail("{}: not a usable vocabulary: {}", path, e.what());
  }
  for (const auto& kv : v.kvs())
    if (kv.key.starts_with("tokenizer.")) w.set(kv.key, kv.value);
  n_vocab = uint32_t(toks->size());
}

void synthetic_vocab(GgufWriter& w, uint32_t n_vocab) {
  // An SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then filler pieces.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) { toks.push_back(fmt::format("<0x{:02X}>", b)); types.push_back(6); }
  for (uint32_t i = uint32_t(toks.size()); i < n_vocab; ++i) { toks.push_back(fmt::format("\xE2\x96\x81t{}", i)); types.push_back(1); }
  std::vector<float> scores(toks.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
  w.set_str("tokenizer.ggml.model", "llama");
  w.set_str_array("tokenizer.ggml.tokens", std::move(toks));
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
}

void run_gen(const GenArgs& a) {
  const Preset* p = nullptr;
  for (const auto& pr : kPresets)
    if (a.preset == pr.name) p = &pr;
  if (!p) fail("unknown preset '{}' ({})", a.preset, preset_names());
  const auto target = parse_type(a.type);
  if (!target || !can_quantize_target(*target)) fail("unsupported --type '{}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)", a.type);
  const auto t0 = std::chrono::steady_clock::now();
  OutputFile output(a.out, std::array{a.vocab});  // checked before any work; never the vocabulary itself

  GgufWriter w;
  const std::string arch = p->arch;
  w.set_str("general.architecture", arch);
  w.set_str("general.name", fmt::format("lamina-gen {} {} seed {}", p->name, a.type, a.seed));
  w.set_u32("general.file_type", llama_file_type(*target));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(arch + ".context_length", p->n_ctx);
  w.set_u32(arch + ".embedding_length", p->n_embd);
  w.set_u32(arch + ".block_count", p->n_layer);
  w.set_u32(arch + ".feed_forward_length", p->n_ff);
  w.set_u32(arch + ".attention.head_count", p->n_head);
  w.set_u32(arch + ".attention.head_count_kv", p->n_head_kv);
  const uint32_t head_dim = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
  if (p->head_dim) w.set_u32(arch + ".attention.key_length", head_dim), w.set_u32(arch + ".attention.value_length", head_dim);
  w.set_u32(arch + ".rope.dimension_count", head_dim);
  if (p->sliding_window) w.set_u32(arch + ".attention.sliding_window", p->sliding_window);
  if (p->n_expert) w.set_u32(arch + ".expert_count", p->n_expert), w.set_u32(arch + ".expert_used_count", p->n_expert_used);
  if (arch == "qwen3moe" || arch == "qwen2moe") w.set_u32(arch + ".expert_feed_forward_length", p->n_ff);
  if (arch == "qwen2moe") w.set_u32(arch + ".expert_shared_feed_forward_length", 2 * p->n_ff);
  w.set_f32(arch + ".rope.freq_base", p->rope_base);
  if (p->longrope) {  // as llama.cpp's converter writes them: attn_factor = sqrt(1 + ln(s) / ln(orig))
    const uint32_t orig = p->n_ctx / 4;
    w.set_u32(arch + ".rope.scaling.original_context_length", orig);
    w.set_f32(arch + ".rope.scaling.attn_factor", float(std::sqrt(1.0 + std::log(4.0) / std::log(double(orig)))));
  }
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  uint32_t n_vocab = p->n_vocab;
  if (!a.vocab.empty()) copy_vocab(a.vocab, w, n_vocab);
  else synthetic_vocab(w, n_vocab);
  w.set_u32(arch + ".vocab_size", n_vocab);

  auto pool = std::make_shared<ThreadPool>(threads_to_run(a.threads));
  uint64_t stream = 0;
  // Matrices ~ N(0, 1/sqrt(fan_in)) keep activations O(1); norms ~ 1 + N(0, 0.1).
  // ne1 x ne0 values, or n_exp such matrices stacked as one [ne0, ne1, n_exp] tensor (experts').
  auto matrix = [&](const std::string& name, int64_t ne0, int64_t ne1, int64_t n_exp = 1) {
    const GgmlType t = tensor_type_for(name, ne0, 2, *target);
    const uint64_t s = mix(a.seed ^ mix(++stream));
    const float scale = 1.f / std::sqrt(float(ne0));
    const int64_t rows = ne1 * n_exp;
    std::vector<int64_t> shape = {ne0, ne1};
    if (n_exp > 1) shape.push_back(n_exp);
    w.add_tensor(name, t, shape, [pool, t, ne0, rows, s, scale](uint8_t* dst, size_t) {
      quantize_tensor(*pool, t, ne0, rows, [&](int64_t r, float* out) {
        for (int64_t i = 0; i < ne0; i += 2) {  // ne0 is even (a multiple of the block size)
          normal_pair(s, uint64_t(r * ne0 + i) / 2, out[i], out[i + 1]);
          out[i] *= scale;
          out[i + 1] *= scale;
        }
      }, dst);
    });
  };


  auto norm = [&](const std::string& name, int64_t n) {
    const uint64_t s = mix(a.seed ^ mix(++stream));
    w.add_tensor(name, GgmlType::F32, {n}, [s, n](uint8_t* dst, size_t) {
      float* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = 1.f + 0.1f * normal(s, uint64_t(i));
    });
  };
  const int64_t E = p->n_embd, hd = head_dim, QD = int64_t(p->n_head) * hd, KV = int64_t(p->n_head_kv) * hd;
  auto bias = [&](const std::string& name, int64_t n) {
    const uint64_t s = mix(a.seed ^ mix(++stream));
    w.add_tensor(name, GgmlType::F32, {n}, [s, n](uint8_t* dst, size_t) {
      float* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = 0.5f * normal(s, uint64_t(i));
    });
  };
  if (p->llama3_rope) {  // Llama 3.1's frequency factors (formats.md section 3.4)
    std::vector<float> f(size_t(hd / 2));
    const double factor = 8, lo = 1, hi = 4, orig = 8192;
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double freq = std::pow(double(p->rope_base), -2.0 * double(i) / double(hd)), lambda = 2 * M_PI / freq;
      if (lambda < orig / hi) f[size_t(i)] = 1;
      else if (lambda > orig / lo) f[size_t(i)] = float(factor);
      else {
        const double sm = (orig / lambda - lo) / (hi - lo);
        f[size_t(i)] = float(1.0 / ((1 - sm) / factor + sm));
      }
    }
    w.add_tensor("rope_freqs.weight", GgmlType::F32, {hd / 2},
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4));
  }
  if (p->longrope) {  // factors growing with the pair index (long: up to 8, short: up to 1.5)
    for (const auto& [name, top] : {std::pair{"rope_factors_long.weight", 8.0}, std::pair{"rope_factors_short.weight", 1.5}}) {
      std::vector<float> f(size_t(hd / 2));
      for (int64_t i = 0; i < hd / 2; ++i) f[size_t(i)] = float(1.0 + (top - 1.0) * double(i) / double(hd / 2 - 1));
      w.add_tensor(name, GgmlType::F32, {hd / 2},
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4));
    }
  }
  matrix("token_embd.weight", E, n_vocab);
  norm("output_norm.weight", E);
  if (!p->tied) matrix("output.weight", E, n_vocab);
  for (uint32_t l = 0; l < p->n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    const bool gemma = arch == "gemma3";
    const bool fused = arch == "phi3";
    norm(b + "attn_norm.weight", E);
    if (fused) {
      matrix(b + "attn_qkv.weight", E, QD + 2 * KV);
    } else {
      matrix(b + "attn_q.weight", E, QD);
      matrix(b + "attn_k.weight", E, KV);
      matrix(b + "attn_v.weight", E, KV);
    }
    if (arch == "qwen2" || arch == "qwen2moe") {
      bias(b + "attn_q.bias", QD);
      bias(b + "attn_k.bias", KV);
      bias(b + "attn_v.bias", KV);
    }
    if (arch == "qwen3" || arch == "qwen3moe" || gemma) {
      norm(b + "attn_q_norm.weight", hd);
      norm(b + "attn_k_norm.weight", hd);
    }
    matrix(b + "attn_output.weight", QD, E);
    if (gemma) norm(b + "post_attention_norm.weight", E);
    norm(b + "ffn_norm.weight", E);
    if (p->n_expert) {  // the router stays f32 (as llama.cpp's quantiser keeps it)
      const uint64_t sr = mix(a.seed ^ mix(++stream));
      const int64_t ne = p->n_expert;
      w.add_tensor(b + "ffn_gate_inp.weight", GgmlType::F32, {E, ne}, [sr, E, ne](uint8_t* dst, size_t) {
        float* f = reinterpret_cast<float*>(dst);
        for (int64_t i = 0; i < E * ne; ++i) f[i] = normal(sr, uint64_t(i)) / std::sqrt(float(E));
      });
      matrix(b + "ffn_gate_exps.weight", E, p->n_ff, ne);
      matrix(b + "ffn_up_exps.weight", E, p->n_ff, ne);
      matrix(b + "ffn_down_exps.weight", p->n_ff, E, ne);
      if (arch == "qwen2moe") {  // the shared expert (twice the routed width) and its gate
        bias(b + "ffn_gate_inp_shexp.weight", E);
        matrix(b + "ffn_gate_shexp.weight", E, 2 * p->n_ff);
        matrix(b + "ffn_up_shexp.weight", E, 2 * p->n_ff);
        matrix(b + "ffn_down_shexp.weight", 2 * p->n_ff, E);
      }
    } else if (fused) {
      matrix(b + "ffn_up.weight", E, 2 * int64_t(p->n_ff));  // gate rows, then up rows
    } else {
      matrix(b + "ffn_gate.weight", E, p->n_ff);
      matrix(b + "ffn_up.weight", E, p->n_ff);
    }
    if (!p->n_expert) matrix(b + "ffn_down.weight", p->n_ff, E);
    if (gemma) norm(b + "post_ffw_norm.weight", E);
  }
  w.write(output);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "gen-model: wrote {} ({} {}, vocab {}) in {:.1f} s\n", a.out, p->name, a.type, n_vocab, secs);
}

}  // namespace

bool can_quantize_target(GgmlType t) { return can_quantize(t) && t != GgmlType::Q8_1; }  // (q8_1: activations only)

Run add_gen_model(CLI::App& app) {
  auto a = std::make_shared<GenArgs>();
  auto* sub = app.add_subcommand("gen-model", "Write a Llama GGUF with seeded random weights");
  sub->add_option("--preset", a->preset, preset_names())->required();
  sub->add_option("--type", a->type, "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs");
  sub->add_option("--vocab", a->vocab, "Vocabulary GGUF to copy the tokenizer from (default: synthetic)");
  add_seed_option(sub, "--seed", a->seed, nullptr, "Random seed (0 to 2^64-1)");
  add_threads_option(sub, a->threads);
  sub->add_option("-o,--output", a->out, "Output file")->required();
  return [a] { run_gen(*a); };
}

}  // namespace lamina::cli
