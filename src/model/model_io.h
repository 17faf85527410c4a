// Writing model files: the quantisation type each tensor gets for a target file type, and
// parallel (de)quantisation of whole tensors. Used by `lamina gen-model` and `lamina quantize`.
#pragma once

#include "format/ggml_type.h"

#include <cstdint>
#include <functional>
#include <string>

namespace lamina {

class ThreadPool;

// The type tensor `name` (row length ne0, n_dims dims) gets in a file of `target` type:
// 1-D tensors (norms, biases) stay f32; output.weight gets q6_K in 4-bit files (llama.cpp's
// choice); a row length the target's block does not divide falls back to q8_0 (or f16).
GgmlType tensor_type_for(const std::string& name, int64_t ne0, int n_dims, GgmlType target);

// llama.cpp's general.file_type value for a target type ("mostly q4_0", ...).
uint32_t llama_file_type(GgmlType target);

// Fills dst (nrows rows of `type`) from f32 rows produced by `row(r, float* out)`, in parallel.
void quantize_tensor(ThreadPool& pool, GgmlType type, int64_t ne0, int64_t nrows,
                     const std::function<void(int64_t, float*)>& row, uint8_t* dst);

}  // namespace lamina
