// `lamina serve` in a build without cpp-httplib: one line saying how to get it.
#include "commands.h"
#include "core/error.h"

namespace lamina::cli {

Run add_serve(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (needs cpp-httplib at build time)");
  sub->allow_extras();
  return [] { fail("this lamina was built without cpp-httplib: install libcpp-httplib-dev (scripts/deps.sh) and rebuild"); };
}

}  // namespace lamina::cli
