#include "format/ggml_type.h"

#include <array>
#include <cassert>
#include <cctype>
#include <string>

namespace lamina {
namespace {

constexpr std::array kTypes = {
    TypeTraits{GgmlType::F32, "f32", 1, 4},       TypeTraits{GgmlType::F16, "f16", 1, 2},
    TypeTraits{GgmlType::Q4_0, "q4_0", 32, 18},   TypeTraits{GgmlType::Q4_1, "q4_1", 32, 20},
    TypeTraits{GgmlType::Q5_0, "q5_0", 32, 22},   TypeTraits{GgmlType::Q5_1, "q5_1", 32, 24},
    TypeTraits{GgmlType::Q8_0, "q8_0", 32, 34},   TypeTraits{GgmlType::Q8_1, "q8_1", 32, 36},
    TypeTraits{GgmlType::Q2_K, "q2_K", 256, 84},  TypeTraits{GgmlType::Q3_K, "q3_K", 256, 110},
    TypeTraits{GgmlType::Q4_K, "q4_K", 256, 144}, TypeTraits{GgmlType::Q5_K, "q5_K", 256, 176},
    TypeTraits{GgmlType::Q6_K, "q6_K", 256, 210}, TypeTraits{GgmlType::Q8_K, "q8_K", 256, 292},
    TypeTraits{GgmlType::IQ4_NL, "iq4_nl", 32, 18}, TypeTraits{GgmlType::IQ4_XS, "iq4_xs", 256, 136},
    TypeTraits{GgmlType::BF16, "bf16", 1, 2},
};

// ids ggml defines but lamina does not read (named in error messages).
constexpr std::array<std::pair<uint32_t, std::string_view>, 18> kOtherNames = {{
    {4, "q4_2 (removed)"}, {5, "q4_3 (removed)"}, {16, "iq2_xxs"}, {17, "iq2_xs"},
    {18, "iq3_xxs"}, {19, "iq1_s"}, {21, "iq3_s"}, {22, "iq2_s"}, {24, "i8"}, {25, "i16"}, {26, "i32"}, {27, "i64"}, {28, "f64"},
    {29, "iq1_m"}, {34, "tq1_0"}, {35, "tq2_0"}, {39, "mxfp4"}, {31, "q4_0_4_4 (removed)"},
}};

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t id) {
  for (const auto& t : kTypes)
    if (uint32_t(t.type) == id) return t;
  return std::nullopt;
}

const TypeTraits& traits(GgmlType t) {
  for (const auto& tr : kTypes)
    if (tr.type == t) return tr;
  assert(false && "GgmlType outside the table");
  return kTypes[0];
}

std::string_view type_name(GgmlType t) { return traits(t).name; }

std::string_view known_type_name(uint32_t id) {
  if (auto t = type_traits(id)) return t->name;
  for (const auto& [i, n] : kOtherNames)
    if (i == id) return n;
  return {};
}

std::optional<GgmlType> parse_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTypes) {
    std::string n(t.name);
    for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (n == lower) return t.type;
  }
  return std::nullopt;
}

}  // namespace lamina
