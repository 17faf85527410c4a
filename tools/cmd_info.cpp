// lamina info -m FILE.gguf: architecture, hyper-parameters, tokenizer, tensor table,
// parameter count and bytes per type.
#include "commands.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "model/config.h"
#include "engine/session.h"
#include "session_args.h"

#include <fmt/format.h>

#include <map>

namespace lamina::cli {
namespace {

struct InfoArgs {
  std::string model;
  bool all_kv = false;
  bool no_tensors = false;
  std::string device;  // when set: the memory this model needs there, and what is free
};

void run_info(const InfoArgs& a) {
  const GgufFile f = GgufFile::open(a.model);
  fmt::print("file:          {}\n", a.model);
  fmt::print("gguf:          version {}, {} metadata keys, {} tensors, alignment {}, {}\n",
             f.version(), f.kvs().size(), f.tensors().size(), f.alignment(), format_bytes(f.file_size()));
  const std::string arch = f.get_string("general.architecture").value_or("(none)");
  fmt::print("architecture:  {}\n", arch);
  if (auto name = f.get_string("general.name")) fmt::print("name:          {}\n", *name);

  const bool known = arch == "llama" || arch == "qwen2" || arch == "qwen2moe" || arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3" ||
                     arch == "phi3";
  if (known) {
    const ModelConfig c = ModelConfig::from_gguf(f);
    fmt::print("hyper-parameters:\n");
    fmt::print("  n_layer       {}\n  n_embd        {}\n  n_ff          {}\n", c.n_layer, c.n_embd, c.n_ff);
    fmt::print("  n_head        {}\n  n_head_kv     {}\n  head_dim      {}\n", c.n_head, c.n_head_kv, c.head_dim);
    fmt::print("  n_vocab       {}\n  n_ctx_train   {}\n  rms_eps       {:g}\n", c.n_vocab, c.n_ctx_train, c.rms_eps);
    fmt::print("  rope          {} dims, base {:g}, {}, scaling {} (freq_scale {:g})\n", c.n_rot, c.rope_base,
               c.rope_neox ? "neox" : "normal", c.rope_scaling, c.rope_freq_scale);
    if (f.find_tensor("rope_factors_long.weight"))
      fmt::print("  LongRoPE      long factors past {} positions of context, cos/sin x {:g}\n", c.n_ctx_orig,
                 c.rope_attn_factor);
    if (c.n_expert) fmt::print("  experts       {}, {} per token\n", c.n_expert, c.n_expert_used);
    if (c.sliding_window)
      fmt::print("  local layers  window {}, rope base {:g}; every {}th layer global\n", c.sliding_window,
                 c.rope_base_local, c.swa_pattern);
  }
  if (f.find("tokenizer.ggml.model")) {
    const Tokenizer tok = Tokenizer::from_gguf(f);
    auto tok_str = [&](Token t) {
      return t < 0 ? std::string("none") : fmt::format("{} '{}'", t, tok.text(t));
    };
    fmt::print("tokenizer:     {}{}, {} tokens, bos {}, eos {}, add_bos {}, add_eos {}\n", tok.model_name(),
               tok.pre().empty() ? "" : " (pre " + tok.pre() + ")", tok.n_vocab(), tok_str(tok.bos()),
               tok_str(tok.eos()), tok.add_bos(), tok.add_eos());
    if (auto tmpl = f.get_string("tokenizer.chat_template"))
      fmt::print("chat template: {} bytes\n", tmpl->size());
  }
  if (a.all_kv) {
    fmt::print("metadata:\n");
    for (const auto& kv : f.kvs()) fmt::print("  {:<44} {}\n", kv.key, kv.value.to_string());
  }

  std::map<std::string, std::pair<int64_t, uint64_t>> per_type;  // name -> (params, bytes)
  int64_t params = 0;
  if (!a.no_tensors && !f.tensors().empty()) fmt::print("tensors:\n  {:<32} {:<6} {:<22} {:>12}\n", "name", "type", "shape", "bytes");
  for (const auto& t : f.tensors()) {
    if (!a.no_tensors)
      fmt::print("  {:<32} {:<6} {:<22} {:>12}\n", t.name, type_name(t.type), t.shape_string(), t.nbytes);
    auto& e = per_type[std::string(type_name(t.type))];
    e.first += t.nelements();
    e.second += t.nbytes;
    params += t.nelements();
  }
  fmt::print("parameters:    {} ({:.1f} M)\n", params, double(params) / 1e6);
  for (const auto& [name, e] : per_type)
    fmt::print("  {:<6} {:>12} params  {:>12}\n", name, e.first, format_bytes(e.second));
  if (!a.device.empty()) {
    BackendOptions o;
    o.device = device_choice(a.device);
    const std::unique_ptr<Backend> be = make_backend(o);
    uint64_t weights = 0;
    for (const auto& t : f.tensors()) weights += t.nbytes;
    fmt::print("device:        {}\n  available     {}\n  weights       {}\n", be->name(), format_bytes(be->memory_available()),
               format_bytes(weights));
    if (known) {
      const ModelConfig c = ModelConfig::from_gguf(f);
      const size_t per_pos = kv_bytes_per_position(c, GgmlType::F16);
      fmt::print("  KV cache      {} per 1k positions (f16); {} for the training context of {}\n",
                 format_bytes(per_pos * 1024), format_bytes(per_pos * c.n_ctx_train), c.n_ctx_train);
    }
  }
}

}  // namespace

Run add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  auto* sub = app.add_subcommand("info", "Show a GGUF model's architecture, tokenizer and tensors");
  sub->add_option("-m,--model", a->model, "GGUF file")->required();
  sub->add_flag("--kv", a->all_kv, "Print every metadata key");
  sub->add_flag("--no-tensors", a->no_tensors, "Omit the tensor table");
  sub->add_option("-d,--device", a->device, "Also report the memory the model needs on cuda or cpu, and what is free")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  return [a] { run_info(*a); };
}

}  // namespace lamina::cli
