// Each `lamina` subcommand registers its options on the CLI11 app and returns the function
// that runs it. Subcommands throw lamina::Error for user-facing failures; main() prints the
// message as one line on stderr and exits with status 1.
#pragma once

#include <CLI/CLI.hpp>

#include "format/ggml_type.h"

#include <functional>

namespace lamina::cli {

using Run = std::function<void()>;

Run add_info(CLI::App& app);
Run add_tokenize(CLI::App& app);
Run add_detokenize(CLI::App& app);
Run add_run(CLI::App& app);
Run add_logits(CLI::App& app);
Run add_perplexity(CLI::App& app);
Run add_gen_model(CLI::App& app);
Run add_quantize(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_chat(CLI::App& app);
Run add_kbench(CLI::App& app);
Run add_tune(CLI::App& app);
Run add_serve(CLI::App& app);

// Types `gen-model` and `quantize` can write.
bool can_quantize_target(GgmlType t);

}  // namespace lamina::cli
