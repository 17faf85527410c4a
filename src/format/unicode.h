// Small UTF-8 helpers and the GPT-2 byte <-> unicode map used by byte-level BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lamina {

// Length of the UTF-8 sequence that starts with `lead` judged by its high nibble, as
// llama.cpp's SPM tokenizer does (0-B: 1, C-D: 2, E: 3, F: 4).
int utf8_len(unsigned char lead);

// Decodes text into code points; each byte that does not start a well-formed sequence becomes
// U+FFFD (one per byte), as llama.cpp's unicode_cpts_from_utf8 does.
std::vector<uint32_t> utf8_decode(std::string_view text);
void utf8_append(std::string& out, uint32_t cp);

// GPT-2 byte-level map: printable bytes map to themselves, the other 68 to U+0100...
const std::string& byte_to_unicode(uint8_t b);       // UTF-8 of the mapped code point
int unicode_to_byte(uint32_t cp);                     // inverse, -1 when cp is not in the map

// Splits a byte stream into complete UTF-8 characters, holding back an incomplete tail so
// that streamed token pieces print whole characters.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is left (possibly an invalid tail), emptied

 private:
  std::string pending_;
};

}  // namespace lamina
