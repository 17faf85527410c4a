// lamina serve's HTTP side (issue #31): the OpenAI-compatible routes over the batching engine,
// on cpp-httplib. Each request becomes an engine request; its tokens come back through a
// per-request channel to the HTTP thread, which writes them whole (JSON) or as server-sent
// events. A client that goes away cancels its request. One log line per request on stderr. The
// server listens before the model is loaded, and says so (503) until attach().
#pragma once

#include "engine/engine.h"
#include "server/api.h"

#include <httplib.h>

#include <atomic>
#include <iterator>
#include <mutex>
#include <memory>
#include <string>

namespace lamina::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port (bind() returns it)
  std::string api_key;       // when set: "Authorization: Bearer <key>" on every /v1 route
  // HTTP worker threads: a request holds one while it runs (a stream until its last token), so
  // there must be more than max_requests of them.
  int threads = 80;
  int max_requests = 64;     // completions in flight; beyond that 429 with Retry-After
  bool log = true;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions o);
  ~HttpServer();
  // The model is loaded: requests go to the engine from here on (until then every route but the
  // page answers 503, /health with {"status": "loading"}). The engine must be started (its own
  // thread drives it) and outlive the server.
  void attach(Engine& engine, ApiContext ctx);
  // Binds the socket; returns the port. Throws lamina::Error when it cannot.
  int bind();
  // Serves until stop() (blocks).
  void serve();
  // Waits until serve() (on another thread) is accepting connections, so that a stop() after it
  // cannot come too early to end it.
  void wait_listening() const;
  void stop();

 private:
  // A Prometheus histogram of milliseconds (fixed buckets), filled from the HTTP threads.
  class Histogram {
   public:
    void add(double ms);
    std::string text(const char* name, const char* help) const;

   private:
    static constexpr double kBounds[] = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};
    mutable std::mutex mu_;
    int64_t counts_[std::size(kBounds)] = {};
    int64_t count_ = 0;
    double sum_ = 0;
  };
  struct Metrics {
    std::atomic<int64_t> requests{0}, errors{0}, prompt_tokens{0}, running{0};
    Histogram ttft, itl;  // time to first token; between a request's tokens
  };
  void routes();
  bool ready(httplib::Response& res) const;  // else a 503 error object
  bool authorised(const httplib::Request& req, httplib::Response& res) const;
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);

  std::atomic<bool> ready_{false};
  Engine* engine_ = nullptr;  // set once by attach(), before ready_
  ApiContext ctx_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  std::atomic<int64_t> next_id_{1};
};

}  // namespace lamina::server
