#include "server/api.h"

#include "server/json_prefix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace lamina::server {
namespace {

ApiError bad(const std::string& msg, const std::string& param = {}) {
  return ApiError(400, "invalid_request_error", msg, param);
}

double number(const json& body, const char* key, double lo, double hi, double fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number()) throw bad(std::string("'") + key + "' must be a number", key);
  const double v = body[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    throw bad(std::string("'") + key + "' must be from " + json(lo).dump() + " to " + json(hi).dump(), key);
  return v;
}

// number() for a count: a whole number from lo to hi (a fraction is refused, not truncated).
double whole(const json& body, const char* key, double lo, double hi, double fallback) {
  const double v = number(body, key, lo, hi, fallback);
  if (v != std::floor(v))
    throw bad(std::string("'") + key + "' must be a whole number from " + json(lo).dump() + " to " + json(hi).dump(), key);
  return v;
}

// What the engine cannot give yet is refused with the parameter's name, not ignored: a client
// that asks for tools or a JSON response would otherwise take a plain answer for the one it asked
// for.
void refuse_unsupported(const json& body) {
  auto given = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  for (const char* k : {"tools", "functions"})
    if (given(k) && !body[k].empty()) throw bad(std::string("'") + k + "' (tool calls) are not supported yet", k);
  if (given("response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || (f.contains("type") && f["type"] != "text" && f["type"] != "json_object"))
      throw bad("the response format must be 'text' or 'json_object' ('json_schema' is not supported yet)", "response_format");
  }
}

// The options both endpoints share: sampling, max tokens, stop, stream, model.
void common(const json& body, const ApiContext& ctx, ApiRequest& r) {
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw bad("'model' must be a string", "model");
    const std::string m = body["model"].get<std::string>();
    if (!m.empty() && m != ctx.model_id)
      throw ApiError(404, "invalid_request_error", "The model '" + m + "' does not exist (this server has '" + ctx.model_id + "')",
                     "model", "model_not_found");
  }
  SamplerParams& s = r.engine.sampling;
  s.temperature = float(number(body, "temperature", 0, 2, 0.8));
  s.top_p = float(number(body, "top_p", 0, 1, 0.95));
  s.top_k = int(whole(body, "top_k", 0, 1e6, 40));
  s.min_p = float(number(body, "min_p", 0, 1, 0.05));
  s.seed = uint64_t(int64_t(whole(body, "seed", -9.2e18, 9.2e18, 0)));
  // OpenAI's additive penalties and llama.cpp's repetition penalty (llama-server's name), over the
  // last repeat_last_n tokens (64, as llama-server; -1: all).
  s.presence_penalty = float(number(body, "presence_penalty", -2, 2, 0));
  s.frequency_penalty = float(number(body, "frequency_penalty", -2, 2, 0));
  s.repeat_penalty = float(number(body, "repeat_penalty", 0, 10, 1.0));
  if (s.repeat_penalty <= 0) throw bad("'repeat_penalty' must be greater than 0 (1: none)", "repeat_penalty");  // (it divides)
  s.repeat_last_n = int(whole(body, "repeat_last_n", -1, 1 << 20, 64));
  refuse_unsupported(body);
  if (body.contains("response_format") && body["response_format"].is_object() &&
      body["response_format"].value("type", json("text")) == "json_object") {  // JSON mode: the answer is one JSON object
    auto pieces = ctx.pieces ? ctx.pieces : token_pieces(*ctx.tok);
    r.engine.constraint = [pieces] { return std::make_unique<JsonObjectConstraint>(pieces); };
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {  // {"token id": bias in [-100, 100]}
    const json& lb = body["logit_bias"];
    if (!lb.is_object()) throw bad("'logit_bias' must map token ids to numbers", "logit_bias");
    for (const auto& [key, v] : lb.items()) {
      long long id = -1;  // decimal digits only (stoll would take " 5" or "+5")
      if (!key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        id = std::stoll(key);
      if (id < 0 || id > INT32_MAX || !ctx.tok->valid(int32_t(id)))
        throw bad("'logit_bias': '" + key + "' is not a token id of this model", "logit_bias");
      if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
        throw bad("'logit_bias': the bias of " + key + " must be a number from -100 to 100", "logit_bias");
      r.engine.logit_bias.emplace_back(int32_t(id), v.get<float>());
    }
  }
  r.n = int(whole(body, "n", 1, 16, 1));
  const bool mct = body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null();
  r.engine.max_tokens = int(whole(body, mct ? "max_completion_tokens" : "max_tokens", 1, 1 << 20, ctx.default_max_tokens));
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) throw bad("'stream' must be a boolean", "stream");
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object()) throw bad("'stream_options' must be an object", "stream_options");
    r.include_usage = flag(body["stream_options"], "include_usage", false, "stream_options");
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& st = body["stop"];
    if (st.is_string()) r.stop.push_back(st.get<std::string>());
    else if (st.is_array() && st.size() <= 4 && std::all_of(st.begin(), st.end(), [](const json& x) { return x.is_string(); }))
      for (const json& x : st) r.stop.push_back(x.get<std::string>());
    else throw bad("'stop' must be a string or an array of up to 4 strings", "stop");
    r.stop.erase(std::remove(r.stop.begin(), r.stop.end(), std::string()), r.stop.end());
  }
  r.engine.stop = ctx.eog;
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {  // llama-server's extension (benchmarks)
    if (!body["ignore_eos"].is_boolean()) throw bad("'ignore_eos' must be a boolean", "ignore_eos");
    if (body["ignore_eos"].get<bool>()) r.engine.stop.clear();
  }
}

void check_length(const ApiContext& ctx, ApiRequest& r, const char* param) {
  const int n = int(r.engine.prompt.size());
  if (n == 0) throw bad("the prompt is empty", param);
  if (n >= ctx.capacity_tokens)
    throw ApiError(400, "invalid_request_error",
                   "This model's context holds " + std::to_string(ctx.capacity_tokens) + " tokens; the prompt has " +
                       std::to_string(n),
                   param, "context_length_exceeded");
  r.engine.max_tokens = std::min(r.engine.max_tokens, ctx.capacity_tokens - n);  // as much as still fits
}

}  // namespace

bool flag(const json& obj, const char* key, bool fallback, const std::string& param) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean()) throw bad(std::string("'") + key + "' must be a boolean", param);
  return obj[key].get<bool>();
}

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

ApiRequest parse_chat(const json& body, const ApiContext& ctx) {
  if (!body.is_object()) throw bad("the body must be a JSON object");
  if (!body.contains("messages")) throw bad("'messages' is required", "messages");
  const json& msgs = body["messages"];
  if (!msgs.is_array() || msgs.empty()) throw bad("'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> conv;
  for (const json& m : msgs) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad("each message needs a 'role' string", "messages");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer")
      throw bad("unknown role '" + role + "'", "messages");
    std::string content;
    if (m.contains("content") && m["content"].is_string()) {
      content = m["content"].get<std::string>();
    } else if (m.contains("content") && m["content"].is_array()) {  // [{"type": "text", "text": ...}]
      for (const json& part : m["content"])
        if (part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") &&
            part["text"].is_string())
          content += part["text"].get<std::string>();
        else throw bad("only text content parts are supported", "messages");
    } else if (!(m.contains("content") && m["content"].is_null())) {
      throw bad("each message needs 'content' (a string or text parts)", "messages");
    }
    conv.push_back({role == "developer" ? "system" : role, content});
  }
  ApiRequest r;
  common(body, ctx, r);
  r.chat = true;
  // logprobs: true, with top_logprobs alternatives (0..20) a token
  if (body.contains("logprobs") && !body["logprobs"].is_null() && !body["logprobs"].is_boolean())
    throw bad("'logprobs' must be a boolean", "logprobs");
  const double top = whole(body, "top_logprobs", 0, 20, 0);
  if (body.value("logprobs", json(false)) == true) r.engine.logprobs = int(top);
  else if (top > 0) throw bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  r.engine.prompt = ctx.tok->tokenize(apply_chat_template(ctx.tmpl, conv, true), true, true);
  check_length(ctx, r, "messages");
  return r;
}

ApiRequest parse_completion(const json& body, const ApiContext& ctx) {
  if (!body.is_object()) throw bad("the body must be a JSON object");
  if (!body.contains("prompt") || !body["prompt"].is_string()) throw bad("'prompt' must be a string", "prompt");
  // OpenAI's completion options the engine cannot give, refused unless at their neutral values
  if (flag(body, "echo", false, "echo")) throw bad("'echo' is not supported", "echo");
  if (body.contains("suffix") && !body["suffix"].is_null() && body["suffix"] != "")
    throw bad("'suffix' is not supported", "suffix");
  if (whole(body, "best_of", 1, 1e9, 1) != 1) throw bad("'best_of' is not supported (only 1)", "best_of");
  ApiRequest r;
  common(body, ctx, r);
  r.chat = false;
  r.engine.logprobs = int(whole(body, "logprobs", 0, 5, -1));  // a count of alternatives (0..5), as OpenAI's
  r.engine.prompt = ctx.tok->tokenize(body["prompt"].get<std::string>(), true, false);
  check_length(ctx, r, "prompt");
  return r;
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  ids_.push_back(token);
  text_ = tok_.detokenize(ids_, true);
  // A stop string anywhere in the text not yet sent (or straddling it) ends the text there.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t from = sent_ >= s.size() ? sent_ - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    text_.resize(std::max(cut, sent_));
    stopped_ = true;
    return finish();
  }
  // Hold back a tail that could begin a stop string, and an unfinished UTF-8 character.
  size_t ready = text_.size();
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > 0; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        ready = std::min(ready, text_.size() - k);
        break;
      }
  size_t back = 0;  // bytes of a trailing multi-byte character that is not complete yet
  for (size_t i = 1; i <= std::min<size_t>(4, ready); ++i) {
    const unsigned char c = static_cast<unsigned char>(text_[ready - i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (len > i) back = i;
    break;
  }
  ready -= back;
  if (ready <= sent_) return {};
  std::string out = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return out;
}

std::string TextStream::finish() {
  if (text_.size() <= sent_) return {};
  std::string out = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string finish_reason(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
    default: return "";
  }
}

json usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

TokenProb token_prob(const Tokenizer& tok, int32_t token, const TokenLogprobs& lp) {
  TokenProb p{tok.token_to_piece(token), lp.logprob, {}};
  for (const auto& [t, l] : lp.top) p.top.emplace_back(tok.token_to_piece(t), l);
  return p;
}

json chat_logprobs(const std::vector<TokenProb>& probs) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(int(ch));
    return b;
  };
  json content = json::array();
  for (const TokenProb& p : probs) {
    json top = json::array();
    for (const auto& [t, l] : p.top) top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes(t)}});
    content.push_back({{"token", p.token}, {"logprob", p.logprob}, {"bytes", bytes(p.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<TokenProb>& probs, size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenProb& p : probs) {
    tokens.push_back(p.token), lps.push_back(p.logprob), offsets.push_back(offset);
    offset += p.token.size();
    json top = json::object();
    for (const auto& [t, l] : p.top) top[t] = l;
    tops.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_response(const std::string& id, const std::string& model, int64_t created, const std::vector<ChoiceText>& choices,
                   int prompt_tokens, int completion_tokens) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    cs.push_back({{"index", i},
                  {"message", {{"role", "assistant"}, {"content", choices[i].text}}},
                  {"finish_reason", finish_reason(choices[i].finish)},
                  {"logprobs", choices[i].logprobs ? chat_logprobs(*choices[i].logprobs) : json(nullptr)}});
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", cs},
          {"usage", usage(prompt_tokens, completion_tokens)}};
}

json completion_response(const std::string& id, const std::string& model, int64_t created,
                         const std::vector<ChoiceText>& choices, int prompt_tokens, int completion_tokens) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    cs.push_back({{"index", i},
                  {"text", choices[i].text},
                  {"finish_reason", finish_reason(choices[i].finish)},
                  {"logprobs", choices[i].logprobs ? completion_logprobs(*choices[i].logprobs) : json(nullptr)}});
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", cs},
          {"usage", usage(prompt_tokens, completion_tokens)}};
}

json chat_chunk(const std::string& id, const std::string& model, int64_t created, const std::string* text, bool first,
                const Finish* f, int index, json logprobs) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (text) delta["content"] = *text;
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", index},
                                    {"delta", delta},
                                    {"logprobs", std::move(logprobs)},
                                    {"finish_reason", f ? json(finish_reason(*f)) : json(nullptr)}}})}};
}

json completion_chunk(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                      const Finish* f, int index, json logprobs) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", index},
                                    {"text", text},
                                    {"logprobs", std::move(logprobs)},
                                    {"finish_reason", f ? json(finish_reason(*f)) : json(nullptr)}}})}};
}

}  // namespace lamina::server
