// lamina serve's HTTP side (issue #31): the OpenAI-compatible routes over the batching engine,
// on cpp-httplib. Each request becomes an engine request; its tokens come back through a
// per-request channel to the HTTP thread, which writes them whole (JSON) or as server-sent
// events. A client that goes away cancels its request. One log line per request on stderr.
#pragma once

#include "engine/engine.h"
#include "server/api.h"

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

namespace lamina::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port (bind() returns it)
  std::string api_key;       // when set: "Authorization: Bearer <key>" on every /v1 route
  int threads = 16;          // HTTP worker threads
  bool log = true;
};

class HttpServer {
 public:
  // The engine must be started (its own thread drives it).
  HttpServer(Session& session, Engine& engine, ApiContext ctx, ServerOptions o);
  ~HttpServer();
  // Binds the socket; returns the port. Throws lamina::Error when it cannot.
  int bind();
  // Serves until stop() (blocks).
  void serve();
  void stop();

 private:
  struct Metrics {
    std::atomic<int64_t> requests{0}, errors{0}, prompt_tokens{0}, generated{0}, running{0};
  };
  void routes();
  bool authorised(const httplib::Request& req, httplib::Response& res) const;
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);

  Session& session_;
  Engine& engine_;
  ApiContext ctx_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  std::atomic<int64_t> next_id_{1};
};

}  // namespace lamina::server
