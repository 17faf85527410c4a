// lamina serve's HTTP API in-process on the tiny generated model (CPU): the OpenAI shapes of
// chat and text completions, whole and streamed (the streamed deltas add up to the whole
// answer), usage counts, stop strings, tokenize/detokenize, the API key, errors as OpenAI error
// objects with the server staying up, and concurrent requests.
#include "golden_util.h"
#include "server/http_server.h"
#include "server/json_prefix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include <unistd.h>

using namespace lamina;
using namespace lamina::server;
using namespace lamina::test;

namespace {

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = ::testing::TempDir() + "/lamina-server-tiny-" + std::to_string(getpid()) + ".gguf";
    shell(std::string(LAMINA_CLI) + " gen-model --preset tiny --type q8_0 --vocab '" + kVocab + "' --seed 3 -o '" + path_ + "' 2>&1");
    SessionOptions o;
    o.model_path = path_;
    o.device = "cpu";
    o.n_ctx = 512;
    o.n_threads = 2;
    session_ = new Session(o);
    engine_ = new Engine(*session_, EngineOptions{});
    engine_->start();
    ApiContext ctx;
    ctx.tok = &session_->tokenizer();
    ctx.tmpl = ChatTemplate::ChatML;
    ctx.model_id = "tiny";
    ctx.capacity_tokens = engine_->capacity_tokens();
    ctx.default_max_tokens = 16;
    ServerOptions so;
    so.port = 0;
    so.api_key = "sesame";
    so.log = false;
    http_ = new HttpServer(so);
    port_ = http_->bind();
    thread_ = new std::thread([] { http_->serve(); });
    http_->wait_listening();
    // Listening before the model is attached: 503 and "loading".
    httplib::Client c("127.0.0.1", port_);
    const auto h = c.Get("/health");
    loading_status_ = h ? h->status : -1;
    const auto m = c.Post("/v1/completions", "{}", "application/json");
    loading_completion_ = m ? m->status : -1;
    http_->attach(*engine_, ctx);
  }
  static void TearDownTestSuite() {
    http_->stop();
    thread_->join();
    delete thread_;
    delete http_;
    engine_->stop();
    delete engine_;
    delete session_;
    std::filesystem::remove(path_);
  }

  static httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_bearer_token_auth("sesame");
    c.set_read_timeout(120, 0);
    return c;
  }
  static json post(const std::string& route, const json& body, int want_status = 200) {
    auto c = client();
    const auto r = c.Post(route.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << route;
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << route << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  static json chat(const std::string& question, int max_tokens, json extra = json::object()) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", question}}})}, {"max_tokens", max_tokens}, {"temperature", 0}};
    body.update(extra);
    return body;
  }
  // The data lines of an event stream, parsed ("[DONE]" kept as a string).
  static std::vector<json> events(const std::string& body) {
    std::vector<json> out;
    size_t i = 0;
    while ((i = body.find("data: ", i)) != std::string::npos) {
      const size_t end = body.find("\n\n", i);
      const std::string d = body.substr(i + 6, end - i - 6);
      out.push_back(d == "[DONE]" ? json("[DONE]") : json::parse(d));
      i = end;
    }
    return out;
  }

  static inline std::string path_;
  static inline Session* session_ = nullptr;
  static inline Engine* engine_ = nullptr;
  static inline HttpServer* http_ = nullptr;
  static inline std::thread* thread_ = nullptr;
  static inline int port_ = 0;
  static inline int loading_status_ = 0, loading_completion_ = 0;
};

TEST_F(ServerTest, UnavailableWhileLoading) {
  EXPECT_EQ(loading_status_, 503);
  EXPECT_EQ(loading_completion_, 503);
}

TEST_F(ServerTest, ChatCompletionWholeAndStreamed) {
  const json whole = post("/v1/chat/completions", chat("Hello there", 12));
  ASSERT_TRUE(whole.is_object());
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["model"], "tiny");
  const json& choice = whole["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  ASSERT_TRUE(choice["message"]["content"].is_string());
  const std::string prompt = apply_chat_template(ChatTemplate::ChatML, {{"user", "Hello there"}}, true);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], session_->tokenizer().tokenize(prompt, true, true).size());
  const int n = whole["usage"]["completion_tokens"];
  EXPECT_TRUE((choice["finish_reason"] == "length" && n == 12) || (choice["finish_reason"] == "stop" && n <= 12)) << whole.dump();
  EXPECT_EQ(whole["usage"]["total_tokens"], whole["usage"]["prompt_tokens"].get<int>() + n);

  auto c = client();
  const auto r = c.Post("/v1/chat/completions", chat("Hello there", 12, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump(),
                        "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<json> ev = events(r->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    if (i == 0) { EXPECT_EQ(ev[i]["choices"][0]["delta"]["role"], "assistant"); }
    if (ev[i]["choices"][0]["delta"].contains("content")) text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, choice["message"]["content"].get<std::string>());  // greedy: the same answer
  EXPECT_EQ(ev[ev.size() - 3]["choices"][0]["finish_reason"], choice["finish_reason"]);
  EXPECT_EQ(ev[ev.size() - 2]["usage"], whole["usage"]);
}

// n choices: n sequences with seeds seed .. seed + n - 1, so choice i is the answer a request with
// n = 1 and seed + i gets (the engine's draws do not depend on the batch); streamed, each choice's
// deltas carry its index and add up to the same text, with one finish chunk each.
TEST_F(ServerTest, SeveralChoicesAreTheSingleRequestsOfTheirSeeds) {
  const json sampled = {{"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"min_p", 0.0}, {"seed", 7}};
  json body = chat("Tell me a story", 10, sampled);
  body["n"] = 3;
  const json whole = post("/v1/chat/completions", body);
  ASSERT_EQ(whole["choices"].size(), 3u) << whole.dump();
  int tokens = 0;
  for (int i = 0; i < 3; ++i) {
    json one = chat("Tell me a story", 10, sampled);
    one["seed"] = 7 + i;
    const json alone = post("/v1/chat/completions", one);
    const json& c = whole["choices"][size_t(i)];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["message"]["content"], alone["choices"][0]["message"]["content"]) << "choice " << i;
    EXPECT_EQ(c["finish_reason"], alone["choices"][0]["finish_reason"]) << "choice " << i;
    tokens += alone["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(whole["usage"]["completion_tokens"], tokens);
  // (with these seeds the three answers differ, so a choice that kept the request's own seed fails)
  EXPECT_NE(whole["choices"][0]["message"]["content"], whole["choices"][1]["message"]["content"]);
  EXPECT_NE(whole["choices"][1]["message"]["content"], whole["choices"][2]["message"]["content"]);

  body["stream"] = true;
  auto cl = client();
  const auto r = cl.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> text(3);
  std::vector<int> finishes(3, 0), roles(3, 0);
  for (const json& e : events(r->body)) {
    if (e == "[DONE]") continue;
    const json& c = e["choices"][0];
    const int i = c["index"];
    ASSERT_TRUE(i >= 0 && i < 3) << e.dump();
    if (c["delta"].contains("role")) ++roles[size_t(i)];
    if (c["delta"].contains("content")) text[size_t(i)] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      ++finishes[size_t(i)];
      EXPECT_EQ(c["finish_reason"], whole["choices"][size_t(i)]["finish_reason"]);
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[size_t(i)], whole["choices"][size_t(i)]["message"]["content"]) << "choice " << i;
    EXPECT_EQ(finishes[size_t(i)], 1) << "choice " << i;
    EXPECT_EQ(roles[size_t(i)], 1) << "choice " << i;
  }
  post("/v1/chat/completions", chat("x", 2, {{"n", 1.5}}), 400);
  post("/v1/chat/completions", chat("x", 2, {{"n", 17}}), 400);
}

// Log probabilities: greedy, each token is its row's most probable, so it heads its own top list
// with the same value; the alternatives come in order and their probabilities sum to at most 1;
// the tokens spell the answer; streamed, the chunks carry the same entries; a text completion's
// lists line up. (token_logprobs' arithmetic: Engine.TokenLogprobsAreTheLogSoftmax.)
TEST_F(ServerTest, LogprobsOfTheAnswersTokens) {
  json body = chat("Hello there", 8, {{"logprobs", true}, {"top_logprobs", 3}});
  const json whole = post("/v1/chat/completions", body);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << whole.dump();
  EXPECT_EQ(int(content.size()), whole["usage"]["completion_tokens"].get<int>());
  std::string spelled;
  for (const json& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 3u) << t.dump();
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]) << t.dump();
    EXPECT_FLOAT_EQ(t["top_logprobs"][0]["logprob"].get<float>(), t["logprob"].get<float>());
    double p = 0;
    for (size_t k = 0; k < 3; ++k) {
      p += std::exp(t["top_logprobs"][k]["logprob"].get<double>());
      if (k) { EXPECT_LE(t["top_logprobs"][k]["logprob"].get<float>(), t["top_logprobs"][k - 1]["logprob"].get<float>()); }
    }
    EXPECT_LE(p, 1.0 + 1e-5);
    EXPECT_LE(t["logprob"].get<float>(), 0.f);
    std::string b;
    for (const json& x : t["bytes"]) b += char(x.get<int>());
    spelled += b;
  }
  EXPECT_NE(spelled.find(whole["choices"][0]["message"]["content"].get<std::string>()), std::string::npos) << spelled;

  body["stream"] = true;
  auto cl = client();
  const auto r = cl.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  json streamed = json::array();
  for (const json& e : events(r->body))
    if (e != "[DONE]" && e["choices"][0]["logprobs"].is_object())
      for (const json& t : e["choices"][0]["logprobs"]["content"]) streamed.push_back(t);
  EXPECT_EQ(streamed, content);

  const json text = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}});
  const json& lp = text["choices"][0]["logprobs"];
  const size_t n = size_t(text["usage"]["completion_tokens"].get<int>());
  ASSERT_EQ(lp["tokens"].size(), n) << text.dump();
  EXPECT_EQ(lp["token_logprobs"].size(), n);
  EXPECT_EQ(lp["text_offset"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_FLOAT_EQ(lp["top_logprobs"][i][lp["tokens"][i].get<std::string>()].get<float>(), lp["token_logprobs"][i].get<float>());
  }
  EXPECT_TRUE(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})["choices"][0]["logprobs"].is_null());
}

// JSON mode: whatever comes is the start of one JSON object (JsonPrefix), and an answer that stops
// is one. A bias towards '}' closes the object as soon as it opens: the engine ends the request
// there, with "{}" (after any whitespace the model picks first).
TEST_F(ServerTest, JsonModeAnswersWithAnObject) {
  const json mode = {{"type", "json_object"}};
  for (int seed : {1, 2}) {
    const json r = post("/v1/chat/completions", chat("Reply in JSON", 40,
                                                     {{"response_format", mode}, {"temperature", 1.0}, {"seed", seed}}));
    const std::string text = r["choices"][0]["message"]["content"];
    server::JsonPrefix j;
    EXPECT_TRUE(j.push(text)) << text;
    if (r["choices"][0]["finish_reason"] == "stop") { EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text; }
  }
  const Tokenizer& tok = session_->tokenizer();
  json bias = json::object();
  for (int32_t t = 0; t < int32_t(tok.n_vocab()); ++t)
    if (tok.token_to_piece(t) == "}") bias[std::to_string(t)] = 100;
  ASSERT_FALSE(bias.empty());
  const json closed = post("/v1/chat/completions", chat("Reply in JSON", 40, {{"response_format", mode}, {"logit_bias", bias}}));
  EXPECT_EQ(closed["choices"][0]["finish_reason"], "stop") << closed.dump();
  const json o = json::parse(closed["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(o.is_object() && o.empty()) << closed.dump();
}

TEST_F(ServerTest, TextCompletionAndStopStrings) {
  const json whole = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}});
  EXPECT_EQ(whole["object"], "text_completion");
  const std::string text = whole["choices"][0]["text"];
  if (text.size() > 4) {  // a stop string from the middle of the answer ends it just before
    const std::string stop = text.substr(text.size() / 2, 2);
    const json cut = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}, {"stop", stop}});
    EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
    EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  }
  const json toks = post("/tokenize", {{"content", "Once upon a time"}});
  ASSERT_TRUE(toks["tokens"].is_array());
  EXPECT_EQ(post("/detokenize", {{"tokens", toks["tokens"]}})["content"], "Once upon a time");
}

TEST_F(ServerTest, BadRequestsGetErrorObjectsAndTheServerStaysUp) {
  auto c = client();
  auto expect_error = [&](const httplib::Result& r, int status, const std::string& param) {
    SCOPED_TRACE("status " + std::to_string(status) + " param " + param);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    if (!param.empty()) { EXPECT_EQ(e["error"]["param"], param) << r->body; }
  };
  expect_error(c.Post("/v1/chat/completions", "{not json", "application/json"), 400, "");
  expect_error(c.Post("/v1/chat/completions", json{{"max_tokens", 3}}.dump(), "application/json"), 400, "messages");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"temperature", "hot"}}).dump(), "application/json"), 400, "temperature");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"model", "gpt-4"}}).dump(), "application/json"), 404, "model");
  expect_error(c.Post("/v1/chat/completions", chat(std::string(4000, 'a'), 3).dump(), "application/json"), 400, "messages");
  expect_error(c.Post("/v1/completions", json{{"prompt", 5}}.dump(), "application/json"), 400, "prompt");
  // asked for what the engine cannot give yet: refused by name, not answered as if not asked
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"logprobs", 2}}).dump(), "application/json"), 400, "logprobs");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"top_logprobs", 2}}).dump(), "application/json"), 400, "top_logprobs");
  expect_error(c.Post("/v1/completions", json{{"prompt", "x"}, {"logprobs", 6}}.dump(), "application/json"), 400, "logprobs");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"tools", json::array({{{"type", "function"}}})}}).dump(),
                      "application/json"), 400, "tools");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"response_format", {{"type", "json_schema"}}}}).dump(),
                      "application/json"), 400, "response_format");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"presence_penalty", 2.5}}).dump(), "application/json"), 400,
               "presence_penalty");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"logit_bias", {{"cat", 1}}}}).dump(), "application/json"), 400,
               "logit_bias");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"logit_bias", {{"5", 101}}}}).dump(), "application/json"), 400,
               "logit_bias");
  expect_error(c.Post("/v1/chat/completions", chat("x", 3, {{"logit_bias", {{"99999999", 1}}}}).dump(), "application/json"), 400,
               "logit_bias");
  // fields of the wrong type are the client's error (400 naming them), never the server's (500)
  const auto chat_error = [&](const json& extra, const std::string& param, int max_tokens = 3) {
    expect_error(c.Post("/v1/chat/completions", chat("x", max_tokens, extra).dump(), "application/json"), 400, param);
  };
  const auto text_error = [&](const json& body, const std::string& param) {
    expect_error(c.Post("/v1/completions", body.dump(), "application/json"), 400, param);
  };
  const json typed_part = {
      {"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", 5}, {"text", "x"}}})}}})},
      {"max_tokens", 2}};
  expect_error(c.Post("/v1/chat/completions", typed_part.dump(), "application/json"), 400, "messages");
  chat_error({{"stream_options", {{"include_usage", "yes"}}}}, "stream_options");
  chat_error({{"stream_options", 5}}, "stream_options");
  expect_error(c.Post("/tokenize", json{{"content", "x"}, {"add_special", "yes"}}.dump(), "application/json"), 400,
               "add_special");
  expect_error(c.Post("/detokenize", json{{"tokens", {4294967297LL}}}.dump(), "application/json"), 400, "tokens");
  expect_error(c.Post("/detokenize", json{{"tokens", {-4294967295LL}}}.dump(), "application/json"), 400, "tokens");
  // counts are whole numbers, a repetition penalty divides, token ids are digits, a null field is absent
  chat_error({{"max_tokens", 1.5}}, "max_tokens");
  chat_error({{"top_k", 2.5}}, "top_k");
  chat_error({{"repeat_penalty", 0}}, "repeat_penalty");
  chat_error({{"logit_bias", {{" 5", 1}}}}, "logit_bias");
  chat_error({{"max_completion_tokens", nullptr}}, "max_tokens", 0);
  // the completion options the engine cannot give, and a prompt past the context, name themselves
  text_error({{"prompt", "x"}, {"echo", true}}, "echo");
  text_error({{"prompt", "x"}, {"best_of", 2}}, "best_of");
  text_error({{"prompt", "x"}, {"suffix", "y"}}, "suffix");
  text_error({{"prompt", std::string(4000, 'a')}}, "prompt");
  // what httplib answers by itself is an error object too: a route's other method, a form body
  // over its 8 KiB, an unknown method
  const auto wrong_method = c.Get("/v1/chat/completions");
  expect_error(wrong_method, 405, "");
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  expect_error(c.Post("/v1/completions", std::string(10000, 'a'), "application/x-www-form-urlencoded"), 413, "");
  httplib::Request foo;
  foo.method = "FOO";
  foo.path = "/v1/completions";
  expect_error(c.send(foo), 400, "");
  // a byte range is ignored on a completion (it would cut the JSON)
  const auto ranged = c.Post("/v1/completions", httplib::Headers{{"Range", "bytes=0-10"}},
                             json{{"prompt", "x"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->status, 200);
  EXPECT_TRUE(json::parse(ranged->body, nullptr, false).contains("choices")) << ranged->body;
  // the same parameters at their neutral values are accepted
  const json neutral = post("/v1/chat/completions", chat("x", 2, {{"n", 1}, {"logprobs", false}, {"tools", json::array()},
                                                                   {"response_format", {{"type", "text"}}}}));
  EXPECT_EQ(neutral["choices"].size(), 1u) << neutral.dump();
  // OpenAI's penalties are the sampler's: a greedy answer that repeats a token changes under them
  const json plain = post("/v1/completions", {{"prompt", "a a a a a a"}, {"max_tokens", 8}, {"temperature", 0}});
  const json penalised = post("/v1/completions", {{"prompt", "a a a a a a"}, {"max_tokens", 8}, {"temperature", 0},
                                                  {"presence_penalty", 2}, {"frequency_penalty", 2}});
  EXPECT_NE(plain["choices"][0]["text"], penalised["choices"][0]["text"]) << plain.dump();
  // a logit bias of 100 on one token makes every greedy draw that token; the log probabilities
  // stay the model's (so not 0)
  const json ids = post("/tokenize", {{"content", " cat"}})["tokens"];
  ASSERT_FALSE(ids.empty());
  const int32_t cat = ids.back();
  const json biased = post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0},
                                               {"logit_bias", {{std::to_string(cat), 100}}}, {"logprobs", 0}});
  EXPECT_EQ(biased["choices"][0]["text"], post("/detokenize", {{"tokens", {cat, cat, cat, cat}}})["content"]) << biased.dump();
  for (const json& l : biased["choices"][0]["logprobs"]["token_logprobs"]) EXPECT_LT(l.get<float>(), 0.f);
  expect_error(c.Get("/v1/nothing"), 404, "");
  httplib::Client anon("127.0.0.1", port_);
  expect_error(anon.Get("/v1/models"), 401, "");
  const auto h = anon.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "tiny");
  post("/v1/chat/completions", chat("One more", 3));  // ctest runs each test in a process of its own
  expect_error(anon.Get("/metrics"), 401, "");  // (with an API key, the counters are behind it too)
  const auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("lamina_kv_blocks_total 32"), std::string::npos) << metrics->body;
  // that completion is in the latency histograms
  for (const char* name : {"lamina_time_to_first_token_ms_count ", "lamina_inter_token_latency_ms_count "}) {
    const size_t at = metrics->body.find(name);
    ASSERT_NE(at, std::string::npos) << metrics->body;
    EXPECT_GT(std::stod(metrics->body.substr(at + std::strlen(name))), 0) << name;
  }
  EXPECT_NE(metrics->body.find("lamina_sequences_waiting 0"), std::string::npos) << metrics->body;
}

TEST_F(ServerTest, ConcurrentRequestsGetWhatEachGetsAlone) {
  const json alone = post("/v1/chat/completions", chat("Tell me a story", 10));
  std::vector<json> got(8);
  std::vector<std::thread> th;
  for (size_t i = 0; i < got.size(); ++i) th.emplace_back([&, i] { got[i] = post("/v1/chat/completions", chat("Tell me a story", 10)); });
  for (auto& t : th) t.join();
  for (const json& g : got) EXPECT_EQ(g["choices"][0]["message"]["content"], alone["choices"][0]["message"]["content"]);
}

}  // namespace

// Generated text that is not valid UTF-8 (a lead byte followed by ASCII, a stray continuation
// byte) still makes a JSON body: each invalid byte becomes U+FFFD, the valid text stays.
TEST(ServerJson, InvalidUtf8InGeneratedTextBecomesReplacementCharacters) {
  const std::string text = std::string("ok \xE3") + "a" + "\x80" + " \xC3\xA9";
  const std::string body = json_text(completion_chunk("cmpl-1", "m", 0, text, nullptr));
  const json back = json::parse(body);
  EXPECT_EQ(back["choices"][0]["text"].get<std::string>(), "ok \xEF\xBF\xBD" "a\xEF\xBF\xBD \xC3\xA9");
}
