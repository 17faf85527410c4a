// lamina serve: the OpenAI-compatible HTTP server (src/server) on the batching engine. Loads the
// model, starts the engine's thread, binds, prints the address on stderr and serves until
// SIGINT/SIGTERM.
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "session_args.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <filesystem>

namespace lamina::cli {
namespace {

struct ServeArgs {
  SessionArgs s;
  server::ServerOptions http;
  std::string tmpl;
  int parallel = 64, max_tokens = 256, queue = 0;
  int max_step_tokens = 0;  // 0: step_tokens_to_run's choice
};

std::atomic<bool> stopping_{false};
extern "C" void on_signal(int) { stopping_.store(true); }

void run_serve(const ServeArgs& args) {
  ServeArgs a = args;
  a.max_step_tokens = step_tokens_to_run(a.max_step_tokens, a.parallel);
  // Requests in flight: those generating plus as many waiting; a worker thread for each, and a
  // few for the quick routes (health, metrics, tokenize) beside them.
  a.http.max_requests = a.queue > 0 ? a.queue : 2 * a.parallel;
  a.http.threads = a.http.max_requests + 8;
  // Listen first: while the model loads, /health answers 503 {"status": "loading"}.
  server::HttpServer http(a.http);
  const int port = http.bind();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread listener([&] { http.serve(); });
  http.wait_listening();
  struct Join {  // the listener ends with the server, whatever happens while loading
    server::HttpServer& h;
    std::thread& t;
    void operator()() {
      h.stop();
      if (t.joinable()) t.join();
    }
    ~Join() { (*this)(); }
  } join{http, listener};
  fmt::print(stderr, "lamina serve: listening on http://{}:{}, loading {}\n", a.http.host, port, a.s.opt.model_path);
  Session sess(a.s.resolve());
  EngineOptions eo;
  eo.schedule.max_running = a.parallel;
  eo.schedule.max_step_tokens = a.max_step_tokens;
  Engine engine(sess, eo);
  server::ApiContext ctx;
  ctx.tok = &sess.tokenizer();
  ctx.tmpl = pick_chat_template(a.tmpl, sess);
  ctx.model_id = std::filesystem::path(sess.file().path()).stem().string();  // as the file is named
  ctx.capacity_tokens = std::min(engine.capacity_tokens(), int(sess.config().n_ctx_train));
  ctx.default_max_tokens = a.max_tokens;
  for (int32_t t = 0; t < int32_t(ctx.tok->n_vocab()); ++t)
    if (ctx.tok->is_eog(t)) ctx.eog.push_back(t);
  engine.start();
  http.attach(engine, ctx);
  fmt::print(stderr, "lamina serve: {} ready on http://{}:{} ({} template, {} KV positions, up to {} sequences)\n", ctx.model_id,
             a.http.host, port, chat_template_name(ctx.tmpl), engine.capacity_tokens(), a.parallel);
  // Serve until SIGINT/SIGTERM; then stop listening and let the requests in flight finish (the
  // engine still runs them) before the engine stops.
  while (!stopping_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  join();
  engine.stop();
}

}  // namespace

Run add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server on the batching engine");
  add_session_options(sub, a->s);
  sub->add_option("--host", a->http.host, "Address to listen on");
  sub->add_option("--port", a->http.port, "Port (0: any free one)")->check(whole_in(0, 65535));
  sub->add_option("--parallel", a->parallel, "Sequences generated at once")->check(whole_in(1, 4096));
  sub->add_option("--api-key", a->http.api_key, "Require 'Authorization: Bearer KEY'");
  sub->add_option("--template,--chat-template", a->tmpl, "Chat template: " + chat_template_names());
  add_step_tokens_option(sub, a->max_step_tokens);
  sub->add_option("--max-tokens", a->max_tokens, "Tokens generated when a request gives no max_tokens")->check(whole_in(1, 1 << 20));
  sub->add_option("--max-requests", a->queue, "Completions in flight before 429 (default: twice --parallel)")
      ->check(whole_in(1, 16384));
  return [a] { run_serve(*a); };
}

}  // namespace lamina::cli
