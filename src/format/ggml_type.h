// ggml tensor type ids as stored in GGUF files, and their block geometry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lamina {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;   // llama.cpp's lower-case name ("q4_K")
  int block_elems;         // elements per block
  int block_bytes;         // bytes per block
};

// Traits of a supported type; nullopt for ids that are unknown or unsupported (IQ*, I8, ...).
std::optional<TypeTraits> type_traits(uint32_t id);
const TypeTraits& traits(GgmlType t);
std::string_view type_name(GgmlType t);
// Human name of any id (also unsupported ones, e.g. "iq2_xxs"), or "" for ids ggml never had.
std::string_view known_type_name(uint32_t id);
// Parses a name such as "q4_k", "Q8_0", "f16" (case-insensitive).
std::optional<GgmlType> parse_type(std::string_view name);

// Bytes of one row of n elements (n must be a multiple of the block size).
inline size_t row_bytes(GgmlType t, int64_t n) {
  const TypeTraits& tr = traits(t);
  return size_t(n / tr.block_elems) * size_t(tr.block_bytes);
}

}  // namespace lamina
