// Options shared by the commands that run a model (run, chat, logits, bench).
#pragma once

#include "model/chat.h"
#include "model/sampler.h"
#include "engine/session.h"

#include <CLI/CLI.hpp>

namespace lamina::cli {

struct SessionArgs {
  SessionOptions opt;
  std::string kv_type = "f16";
  std::string tp_all_reduce = "fused";
  SessionOptions resolve() const;  // validates kv_type
};
void add_session_options(CLI::App* sub, SessionArgs& a);
// The device a --device value names: "auto" means LAMINA_DEVICE when that is set.
std::string device_choice(const std::string& device);
// "memory: weights X, KV cache Y (n positions), activations Z | GPU: used/total" on stderr.
void print_memory_summary(Session& s);

struct SamplingArgs {
  SamplerParams p;
  bool seed_given = false;
  SamplerParams resolve() const;  // a random seed unless --seed was given
};
void add_sampling_options(CLI::App* sub, SamplingArgs& a);

// The chat template `name` names (--template), or else the one the model file's
// tokenizer.chat_template is recognised as; throws lamina::Error naming the choices.
ChatTemplate pick_chat_template(const std::string& name, const Session& sess);

// Token ids from "1 2 3" (validated against the vocabulary).
std::vector<int32_t> parse_token_list(const std::string& s, size_t n_vocab);

}  // namespace lamina::cli
