#include "server/http_server.h"

#include "core/error.h"
#include "server/chat_page.h"
#include "server/completion.h"
#include "server/json_prefix.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace lamina::server {
namespace {

using Clock = std::chrono::steady_clock;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_body(e)); }

// The routes and their one method, for 405 against 404.
constexpr std::pair<const char*, const char*> kRoutes[] = {
    {"/", "GET"},          {"/health", "GET"},         {"/v1/models", "GET"},    {"/metrics", "GET"},
    {"/tokenize", "POST"}, {"/detokenize", "POST"},    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}};

// The error object for a status httplib set without a body.
ApiError http_error(const httplib::Request& req, httplib::Response& res) {
  const auto type = "invalid_request_error";
  switch (res.status) {
    case 404:
      for (const auto& [path, method] : kRoutes)
        if (req.path == path) {
          res.status = 405;
          res.set_header("Allow", method);
          return ApiError(405, type, fmt::format("{} takes {}, not {}", req.path, method, req.method));
        }
      return ApiError(404, type, "Unknown route " + req.method + " " + req.path);
    case 413:
      if (req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded"))
        return ApiError(413, type, "A form-encoded body is limited to 8 KiB; send JSON with Content-Type: application/json");
      return ApiError(413, type, "The request body is larger than 8 MiB, or its length is not valid");
    case 414: return ApiError(414, type, "The request line is too long");
    case 416: return ApiError(416, type, "The requested range is not satisfiable");
    case 400: return ApiError(400, type, "Malformed HTTP request (request line, headers, encoding or body length)");
    default: return ApiError(res.status, res.status >= 500 ? "server_error" : type, fmt::format("HTTP error {}", res.status));
  }
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

void HttpServer::Histogram::add(double ms) {
  std::lock_guard lk(mu_);
  for (size_t i = 0; i < std::size(kBounds); ++i)
    if (ms <= kBounds[i]) ++counts_[i];
  ++count_;
  sum_ += ms;
}

std::string HttpServer::Histogram::text(const char* name, const char* help) const {
  std::lock_guard lk(mu_);
  std::string t = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < std::size(kBounds); ++i) t += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts_[i]);
  t += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return t;
}

HttpServer::HttpServer(ServerOptions o) : opt_(std::move(o)), http_(std::make_unique<httplib::Server>()) {
  const int threads = std::max(1, opt_.threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_->set_payload_max_length(size_t(8) << 20);
  routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::attach(Engine& engine, ApiContext ctx) {
  engine_ = &engine;
  ctx_ = std::move(ctx);
  if (!ctx_.pieces && ctx_.tok) ctx_.pieces = token_pieces(*ctx_.tok);
  ready_.store(true, std::memory_order_release);
}

bool HttpServer::ready(httplib::Response& res) const {
  if (ready_.load(std::memory_order_acquire)) return true;
  send_error(res, ApiError(503, "unavailable_error", "The model is loading; try again shortly"));
  return false;
}

int HttpServer::bind() {
  const int port = opt_.port == 0 ? http_->bind_to_any_port(opt_.host) : (http_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port <= 0) fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", opt_.host, opt_.port);
  return port;
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::wait_listening() const {
  while (!http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::stop() {
  if (http_) http_->stop();
}

bool HttpServer::authorised(const httplib::Request& req, httplib::Response& res) const {
  if (opt_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + opt_.api_key) return true;
  send_error(res, ApiError(401, "invalid_request_error", "Incorrect API key provided", "", "invalid_api_key"));
  return false;
}

void HttpServer::routes() {
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(chat_page_html(), "text/html; charset=utf-8"); });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = ready_.load(std::memory_order_acquire);
    send_json(res, up ? 200 : 503, {{"status", up ? "ok" : "loading"}});
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready(res) || !authorised(req, res)) return;
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", ctx_.model_id}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "lamina"}}})}});
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready(res) || !authorised(req, res)) return;
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
      return send_error(res, ApiError(400, "invalid_request_error", "'content' must be a string", "content"));
    bool special = false;
    try {
      special = flag(body, "add_special", false, "add_special");
    } catch (const ApiError& e) {
      return send_error(res, e);
    }
    send_json(res, 200, {{"tokens", ctx_.tok->tokenize(body["content"].get<std::string>(), special, special)}});
  });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready(res) || !authorised(req, res)) return;
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      return send_error(res, ApiError(400, "invalid_request_error", "'tokens' must be an array of ids", "tokens"));
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
      // (range first: get<int32_t> of a wider integer wraps, either sign; above INT64_MAX get<int64_t> is negative)
      const bool id = t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() <= INT32_MAX;
      if (!id || !ctx_.tok->valid(t.get<int32_t>()))
        return send_error(res, ApiError(400, "invalid_request_error", "token " + t.dump() + " is not in the vocabulary", "tokens"));
      ids.push_back(t.get<int32_t>());
    }
    send_json(res, 200, {{"content", ctx_.tok->detokenize(ids)}});
  });
  http_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ready(res) || !authorised(req, res)) return;
    const EngineStats s = engine_->stats();
    std::string m;
    auto put = [&](const char* name, const char* type, const char* help, double v) {
      m += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
    };
    put("lamina_requests_total", "counter", "Completion requests received", double(metrics_.requests));
    put("lamina_request_errors_total", "counter", "Completion requests answered with an error", double(metrics_.errors));
    put("lamina_requests_running", "gauge", "Completion requests in progress", double(metrics_.running));
    put("lamina_prompt_tokens_total", "counter", "Prompt tokens of the requests", double(metrics_.prompt_tokens));
    put("lamina_generated_tokens_total", "counter", "Tokens generated", double(s.generated));
    put("lamina_prefix_cache_tokens_total", "counter", "Prompt tokens found in the prefix cache", double(s.cached_tokens));
    put("lamina_engine_steps_total", "counter", "Forward passes of the engine", double(s.steps));
    put("lamina_preemptions_total", "counter", "Sequences preempted for KV blocks", double(s.preemptions));
    put("lamina_kv_blocks_used", "gauge", "KV cache blocks held by sequences", double(s.kv_used_blocks));
    put("lamina_kv_blocks_total", "gauge", "KV cache blocks", double(s.kv_blocks));
    put("lamina_sequences_running", "gauge", "Sequences the engine generates for", double(s.running));
    put("lamina_sequences_waiting", "gauge", "Sequences waiting for KV blocks or a slot", double(s.waiting));
    put("lamina_prefix_cache_hit_ratio", "gauge", "Prompt tokens found in the prefix cache, of all admitted",
        s.prompt_tokens ? double(s.cached_tokens) / double(s.prompt_tokens) : 0.0);
    m += metrics_.ttft.text("lamina_time_to_first_token_ms", "Time to first token of completion requests, milliseconds");
    m += metrics_.itl.text("lamina_inter_token_latency_ms", "Time between a request's consecutive tokens, milliseconds");
    res.set_content(m, "text/plain; version=0.0.4");
  });
  // Range is defined for GET only (RFC 9110 lets a server ignore it): on a POST, httplib would cut
  // the completion's JSON or event stream (and an error object) to the range, so it is dropped.
  // (The Request is httplib's own non-const object for this connection; the hook sees it const.)
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    if (req.method == "POST") const_cast<httplib::Request&>(req).ranges.clear();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every error httplib answers by itself (malformed requests, unknown routes and methods, bodies
  // over the limit) gets an OpenAI error object too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a route's own error
    send_error(res, http_error(req, res));
  });
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    ++metrics_.errors;
    send_error(res, ApiError(500, "server_error", what));
  });
}

void HttpServer::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!ready(res) || !authorised(req, res)) return;
  const auto t0 = Clock::now();
  ++metrics_.requests;
  const std::string kind = chat ? "chatcmpl" : "cmpl";
  const std::string rid = fmt::format("{}-{}", kind, next_id_++);
  auto log = [this, rid, t0](int status, int in, int out, double ttft) {
    if (opt_.log)
      fmt::print(stderr, "serve: {} status {} tokens in {} out {} ttft {:.1f} ms total {:.1f} ms\n", rid, status, in, out, ttft,
                 ms_since(t0));
  };
  ApiRequest r;
  try {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "invalid_request_error", "The body is not valid JSON");
    r = chat ? parse_chat(body, ctx_) : parse_completion(body, ctx_);
  } catch (const ApiError& e) {
    ++metrics_.errors;
    send_error(res, e);
    log(e.status, 0, 0, 0);
    return;
  } catch (const json::exception& e) {  // a field of a type the parser did not check for: the client's error
    ++metrics_.errors;
    send_error(res, ApiError(400, "invalid_request_error", std::string("A field has the wrong type: ") + e.what()));
    log(400, 0, 0, 0);
    return;
  }
  const int n_prompt = int(r.engine.prompt.size());
  if (metrics_.running.load() >= opt_.max_requests) {
    ++metrics_.errors;
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(429, "rate_limit_error",
                             fmt::format("{} requests are in progress, the most this server takes; retry shortly", opt_.max_requests)));
    log(429, n_prompt, 0, 0);
    return;
  }
  metrics_.prompt_tokens += n_prompt;
  std::shared_ptr<Completion> run;
  try {
    run = std::make_shared<Completion>(*engine_, r, *ctx_.tok);
  } catch (const Error& e) {
    ++metrics_.errors;
    send_error(res, ApiError(400, "invalid_request_error", e.what()));
    log(400, n_prompt, 0, 0);
    return;
  }
  ++metrics_.running;
  const std::string model = ctx_.model_id;
  const int64_t created = unix_now();
  // The request's latencies: the first token of any choice, then each choice's own gaps.
  auto ttft = std::make_shared<double>(-1);
  auto timing = [this, ttft, t0](const Completion::Event& e) {
    if (!e.token) return;
    if (*ttft < 0) metrics_.ttft.add(*ttft = ms_since(t0));
    else if (e.since_last_ms >= 0) metrics_.itl.add(e.since_last_ms);
  };
  if (!r.stream) {
    std::vector<ChoiceText> out(size_t(run->choices()));
    if (run->logprobs())
      for (ChoiceText& c : out) c.logprobs.emplace();
    std::string error;
    while (!run->done()) {
      const Completion::Event e = run->next();
      timing(e);
      ChoiceText& c = out[size_t(e.choice)];
      c.text += e.text;
      if (c.logprobs) c.logprobs->insert(c.logprobs->end(), e.probs.begin(), e.probs.end());
      if (e.ended) c.finish = e.finish;
      if (e.finish == Finish::Error && error.empty()) error = e.error, run->cancel();
    }
    --metrics_.running;
    const int n = run->tokens();
    if (!error.empty()) {
      ++metrics_.errors;
      send_error(res, ApiError(500, "server_error", error));
      return log(500, n_prompt, n, std::max(*ttft, 0.0));
    }
    send_json(res, 200, chat ? chat_response(rid, model, created, out, n_prompt, n)
                             : completion_response(rid, model, created, out, n_prompt, n));
    return log(200, n_prompt, n, std::max(*ttft, 0.0));
  }
  // Server-sent events: a chunk per piece of a choice's text, each choice's finish reason, usage
  // when asked, then [DONE].
  auto first = std::make_shared<std::vector<bool>>(size_t(run->choices()), true);  // no chunk of the choice yet
  const bool include_usage = r.include_usage;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, run, first, ttft, timing, chat, rid, model, created, n_prompt, include_usage, log](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) {
          const std::string line = "data: " + json_text(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        // (a choice's piece of text, or its finish, with the log probabilities of its tokens when asked)
        auto piece = [&](const Completion::Event& e, const std::string& t, const Finish* f) {
          const int i = e.choice;
          json lp = nullptr;
          if (run->logprobs() && (!e.probs.empty() || !t.empty()))
            lp = chat ? chat_logprobs(e.probs) : completion_logprobs(e.probs, e.probs_offset);
          if (chat) {
            const bool at_first = (*first)[size_t(i)];
            (*first)[size_t(i)] = false;
            return send(chat_chunk(rid, model, created, f && t.empty() ? nullptr : &t, at_first, f, i, std::move(lp)));
          }
          return send(completion_chunk(rid, model, created, t, f, i, std::move(lp)));
        };
        std::string error;
        while (!run->done()) {
          const Completion::Event e = run->next();
          timing(e);
          if (e.finish == Finish::Error) {
            if (error.empty()) error = e.error, run->cancel();
            continue;
          }
          bool ok = e.text.empty() || piece(e, e.text, nullptr);
          if (ok && e.ended && error.empty()) {
            Completion::Event rest = e;  // (its tokens' log probabilities went with its text, if any)
            if (!e.text.empty()) rest.probs.clear();
            ok = piece(rest, "", &e.finish);
          }
          if (!ok) {  // the client went away: Completion's destructor cancels and drains the rest
            run->cancel();
            --metrics_.running;
            log(499, n_prompt, run->tokens(), 0);
            return false;
          }
        }
        --metrics_.running;
        if (!error.empty()) {
          ++metrics_.errors;
          send(error_body(ApiError(500, "server_error", error)));
        } else if (include_usage) {
          json u = chat ? chat_chunk(rid, model, created, nullptr, false, nullptr) : completion_chunk(rid, model, created, "", nullptr);
          u["choices"] = json::array();
          u["usage"] = usage(n_prompt, run->tokens());
          send(u);
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        log(error.empty() ? 200 : 500, n_prompt, run->tokens(), std::max(*ttft, 0.0));
        return true;
      });
}

}  // namespace lamina::server
