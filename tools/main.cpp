// lamina — command-line entry point.
#include "commands.h"
#include "core/error.h"

#if defined(LAMINA_HAVE_CUDA)
#include "kernels/autotune/autotune.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace {

// The environment the CLI honours, read here and nowhere in the library: LAMINA_TUNE_CACHE_DIR
// (else ~/.cache/lamina) for the tune cache. LAMINA_DEVICE is read where the session options
// are resolved (session_args.cpp).
void apply_environment() {
#if defined(LAMINA_HAVE_CUDA)
  if (const char* d = std::getenv("LAMINA_TUNE_CACHE_DIR"); d && *d) {
    lamina::kernels::set_tune_cache_dir(d);
  } else {
    const char* home = std::getenv("HOME");
    lamina::kernels::set_tune_cache_dir(std::string(home ? home : ".") + "/.cache/lamina");
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lamina: a fast, hackable LLM inference engine for GGUF models", "lamina"};
  app.set_version_flag("--version", std::string("lamina ") + LAMINA_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, lamina::cli::Run> runs;
  auto reg = [&](lamina::cli::Run (*add)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    lamina::cli::Run r = add(app);
    runs[app.get_subcommands({})[before]] = std::move(r);
  };
  reg(lamina::cli::add_info);
  reg(lamina::cli::add_tokenize);
  reg(lamina::cli::add_detokenize);
  reg(lamina::cli::add_run);
  reg(lamina::cli::add_chat);
  reg(lamina::cli::add_logits);
  reg(lamina::cli::add_perplexity);
  reg(lamina::cli::add_gen_model);
  reg(lamina::cli::add_quantize);
  reg(lamina::cli::add_bench);
  reg(lamina::cli::add_kbench);
  reg(lamina::cli::add_tune);
  reg(lamina::cli::add_serve);
  // CLI11 would only say "A subcommand is required" for a mistyped command: name it.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "lamina: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return 1;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "lamina: %s (see lamina --help)\n", e.what());
    return 1;
  }
  try {
    apply_environment();
    for (auto* sub : app.get_subcommands())
      if (auto it = runs.find(sub); it != runs.end()) it->second();
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "lamina: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lamina: out of memory (an allocation failed: a smaller model, context, batch or shape needs less)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lamina: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
