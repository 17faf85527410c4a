// libFuzzer entry: any byte string either parses (and then every tensor lies inside the input
// and every accessor works) or throws lamina::Error. A crash, an out-of-bounds read seen by
// ASan, undefined behaviour, or any other exception is a bug.
#include "core/error.h"
#include "format/gguf.h"
#include "format/tokenizer.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> copy(data, data + size);  // exact-size heap buffer: ASan catches overreads
  try {
    const lamina::GgufFile f = lamina::GgufFile::parse(copy.data(), copy.size(), "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& t : f.tensors()) {
      if (t.data < copy.data() || t.data + t.nbytes > copy.data() + copy.size()) std::abort();
      if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];
    }
    for (const auto& kv : f.kvs()) sink = sink + kv.value.to_string().size();
    try {
      (void)lamina::Tokenizer::from_gguf(f);
    } catch (const lamina::Error&) {
    }
  } catch (const lamina::Error&) {
  }
  return 0;
}
