#include "format/unicode.h"

#include <array>

namespace lamina {

int utf8_len(unsigned char lead) {
  static constexpr int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[lead >> 4];
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  auto cont = [&](size_t k) { return k < s.size() && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80; };
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { out.push_back(c); i += 1; continue; }
    if ((c & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(uint32_t(c & 0x1F) << 6 | (s[i + 1] & 0x3F));
      i += 2;
      continue;
    }
    if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(uint32_t(c & 0x0F) << 12 | uint32_t(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F));
      i += 3;
      continue;
    }
    if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      out.push_back(uint32_t(c & 0x07) << 18 | uint32_t(s[i + 1] & 0x3F) << 12 |
                    uint32_t(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F));
      i += 4;
      continue;
    }
    out.push_back(0xFFFD);
    i += 1;
  }
  return out;
}

namespace {

struct ByteMap {
  std::array<std::string, 256> to_utf8;
  std::array<int, 512> from_cp;  // all mapped code points are < 0x144
  ByteMap() {
    from_cp.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(0x100 + extra++);
      utf8_append(to_utf8[b], cp);
      from_cp[cp] = b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_utf8[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last (possibly incomplete) character.
  size_t cut = pending_.size();
  size_t k = pending_.size();
  int back = 0;
  while (k > 0 && back < 4) {
    --k;
    ++back;
    const unsigned char c = static_cast<unsigned char>(pending_[k]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII)
      if (c >= 0xC0 && utf8_len(c) > back) cut = k;  // sequence not complete yet
      break;
    }
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace lamina
