#include "model/model_io.h"

#include "core/thread_pool.h"
#include "core/error.h"
#include "format/quant.h"

#include <vector>

namespace lamina {

GgmlType tensor_type_for(const std::string& name, int64_t ne0, int n_dims, GgmlType target) {
  if (n_dims < 2 || !name.ends_with(".weight")) return GgmlType::F32;
  GgmlType t = target;
  const bool low_bit = target == GgmlType::Q4_0 || target == GgmlType::Q4_1 || target == GgmlType::Q4_K ||
                       target == GgmlType::Q5_0 || target == GgmlType::Q5_1 || target == GgmlType::Q2_K ||
                       target == GgmlType::Q3_K || target == GgmlType::Q5_K || target == GgmlType::IQ4_NL ||
                       target == GgmlType::IQ4_XS;
  if (name == "output.weight" && low_bit) t = GgmlType::Q6_K;  // as llama.cpp's _M mixes
  const int block = traits(t).block_elems;
  if (ne0 % block != 0) t = ne0 % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
  return t;
}

uint32_t llama_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;  // Q2_K
    case GgmlType::Q3_K: return 12;  // Q3_K_M
    case GgmlType::Q4_K: return 15;  // Q4_K_M
    case GgmlType::Q5_K: return 17;  // Q5_K_M
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::BF16: return 32;
    default: fail("no llama.cpp file type for {}", type_name(t));
  }
}

void quantize_tensor(ThreadPool& pool, GgmlType type, int64_t ne0, int64_t nrows,
                     const std::function<void(int64_t, float*)>& row, uint8_t* dst) {
  const size_t rb = row_bytes(type, ne0);
  pool.parallel_for(nrows, [&](int64_t b, int64_t e) {
    std::vector<float> buf(static_cast<size_t>(ne0));
    for (int64_t r = b; r < e; ++r) {
      row(r, buf.data());
      quantize_row(type, buf.data(), dst + size_t(r) * rb, ne0);
    }
  });
}

}  // namespace lamina
