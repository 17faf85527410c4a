// lamina quantize IN.gguf OUT.gguf TYPE: re-encodes every weight matrix to TYPE (norms and
// biases stay f32), keeping all metadata.
#include "core/thread_pool.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "model/model_io.h"

#include <fmt/format.h>

#include <array>
#include <chrono>

namespace lamina::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
};

void run_quantize(const QuantizeArgs& a) {
  const auto target = parse_type(a.type);
  if (!target || !can_quantize_target(*target))
    fail("unsupported type '{}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)", a.type);
  const auto t0 = std::chrono::steady_clock::now();
  OutputFile output(a.out, std::array{a.in});  // refuses the input itself (through links) before any work
  const GgufFile in = GgufFile::open(a.in);
  GgufWriter w;
  for (const auto& kv : in.kvs()) w.set(kv.key, kv.value);
  w.set_u32("general.file_type", llama_file_type(*target));
  w.set_u32("general.quantization_version", 2);
  auto pool = std::make_shared<ThreadPool>(threads_to_run(a.threads));
  for (const auto& t : in.tensors()) {
    const GgmlType dst_type = tensor_type_for(t.name, t.ne[0], t.n_dims, *target);
    std::vector<int64_t> ne(t.ne, t.ne + std::max(1, t.n_dims));
    if (dst_type == t.type) {
      w.add_tensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes));
      continue;
    }
    const GgufTensor* src = &t;
    w.add_tensor(t.name, dst_type, ne, [pool, src, dst_type](uint8_t* dst, size_t) {
      const size_t rb = row_bytes(src->type, src->ne[0]);
      quantize_tensor(*pool, dst_type, src->ne[0], src->nrows(), [&](int64_t r, float* out) {
        dequantize_row(src->type, src->data + size_t(r) * rb, out, src->ne[0]);
      }, dst);
    });
  }
  w.write(output);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "quantize: wrote {} ({}) in {:.1f} s\n", a.out, a.type, secs);
}

}  // namespace

Run add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* sub = app.add_subcommand("quantize", "Re-encode a GGUF model's weights to another type");
  sub->add_option("input", a->in, "Input GGUF")->required();
  sub->add_option("output", a->out, "Output GGUF")->required();
  sub->add_option("type", a->type, "f16, q8_0, q4_0, q4_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs (also f32, bf16, q5_0, q5_1)")->required();
  add_threads_option(sub, a->threads);
  return [a] { run_quantize(*a); };
}

}  // namespace lamina::cli
