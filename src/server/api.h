// The OpenAI-compatible API's requests and responses as data (issue #31), apart from HTTP: a
// JSON body becomes an engine Request (its prompt rendered with the chat template and
// tokenised), and the engine's tokens become text, with stop strings and UTF-8 held back until
// they are whole. Bad input is an ApiError with the HTTP status and OpenAI's error object.
#pragma once

#include "engine/engine.h"
#include "format/tokenizer.h"
#include "model/chat.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lamina::server {

using json = nlohmann::json;

struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, std::string type_, std::string message, std::string param_ = {}, std::string code_ = {})
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
};
// {"error": {"message", "type", "param", "code"}}
json error_body(const ApiError& e);
// obj[key] as an optional boolean (absent or null: fallback); another type throws a 400 naming param.
bool flag(const json& obj, const char* key, bool fallback, const std::string& param);

// What the server knows when it reads a request.
struct ApiContext {
  const Tokenizer* tok = nullptr;
  ChatTemplate tmpl = ChatTemplate::ChatML;
  std::string model_id;           // the name /v1/models lists and requests may give
  int capacity_tokens = 0;        // the engine's cache
  int default_max_tokens = 256;
  std::vector<int32_t> eog;       // end-of-generation ids (always stops)
  // Every token's text, for JSON mode's constraint (HttpServer::attach makes it; made per request
  // when missing).
  std::shared_ptr<const std::vector<std::string>> pieces;
};

// A parsed request: the engine's part and the API's.
struct ApiRequest {
  Request engine;
  bool chat = true;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  std::vector<std::string> stop;   // stop strings
  int n = 1;                       // choices: n sequences of the prompt (seeds seed .. seed + n - 1)
};

// POST /v1/chat/completions and /v1/completions bodies. Throws ApiError.
ApiRequest parse_chat(const json& body, const ApiContext& ctx);
ApiRequest parse_completion(const json& body, const ApiContext& ctx);

// Text from tokens as they come: the new text of each token once it is whole UTF-8 and can no
// longer be the start of a stop string; stopped() when a stop string was found (the text ends
// before it).
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop) : tok_(tok), stop_(std::move(stop)) {}
  std::string push(int32_t token);  // the text that is final now
  std::string finish();             // the rest, at the end of generation
  bool stopped() const { return stopped_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stop_;
  std::vector<int32_t> ids_;
  std::string text_;       // the whole decoded text so far (up to a stop string)
  size_t sent_ = 0;        // bytes of text_ already returned
  bool stopped_ = false;
};

// Response objects.
// A response body as text. Generated text need not be valid UTF-8 (a byte token, a character
// the model never finishes): each invalid byte becomes U+FFFD instead of failing the response.
std::string json_text(const json& j);
std::string finish_reason(Finish f);  // "stop", "length" (or "cancelled"/"error")
json usage(int prompt_tokens, int completion_tokens);
// One generated token's log probabilities as the API gives them: its text (the token's bytes,
// which need not be whole UTF-8), its log probability and the most probable alternatives'.
struct TokenProb {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};
TokenProb token_prob(const Tokenizer& tok, int32_t token, const TokenLogprobs& lp);
// The "logprobs" object of a chat choice ({"content": [...]}) or of a text completion's
// ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets from `offset`, in bytes).
json chat_logprobs(const std::vector<TokenProb>& probs);
json completion_logprobs(const std::vector<TokenProb>& probs, size_t offset = 0);

struct ChoiceText {  // a choice's whole text, how it ended, its tokens' log probabilities if asked
  std::string text;
  Finish finish = Finish::None;
  std::optional<std::vector<TokenProb>> logprobs;
};
json chat_response(const std::string& id, const std::string& model, int64_t created, const std::vector<ChoiceText>& choices,
                   int prompt_tokens, int completion_tokens);
json completion_response(const std::string& id, const std::string& model, int64_t created,
                         const std::vector<ChoiceText>& choices, int prompt_tokens, int completion_tokens);
// One streamed chunk of choice `index`: delta text (role on the first), or the finish reason with an
// empty delta.
json chat_chunk(const std::string& id, const std::string& model, int64_t created, const std::string* text,
                bool first, const Finish* f, int index = 0, json logprobs = nullptr);
json completion_chunk(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                      const Finish* f, int index = 0, json logprobs = nullptr);

}  // namespace lamina::server
