#include "format/unicode.h"

#include <gtest/gtest.h>

using namespace lamina;

TEST(Unicode, DecodeReplacesInvalidBytesOneEach) {
  EXPECT_EQ(utf8_decode("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(utf8_decode("\xF0\x9F\x99\x82"), (std::vector<uint32_t>{0x1F642}));
  EXPECT_EQ(utf8_decode("\xFF" "a"), (std::vector<uint32_t>{0xFFFD, 'a'}));
  EXPECT_EQ(utf8_decode("\xE6\x97"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));  // truncated
  EXPECT_EQ(utf8_decode("\x80"), (std::vector<uint32_t>{0xFFFD}));
}

TEST(Unicode, EncodeRoundTrip) {
  for (uint32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u}) {
    std::string s;
    utf8_append(s, cp);
    EXPECT_EQ(utf8_decode(s), std::vector<uint32_t>{cp});
  }
}

TEST(Unicode, Gpt2ByteMap) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), "A");
  for (int b = 0; b < 256; ++b) {
    const auto cps = utf8_decode(byte_to_unicode(uint8_t(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(unicode_to_byte(cps[0]), b);
  }
  EXPECT_EQ(unicode_to_byte(0x4E00), -1);
}

TEST(Unicode, StreamHoldsBackPartialCharacters) {
  Utf8Stream s;
  EXPECT_EQ(s.push("ab\xE6"), "ab");
  EXPECT_EQ(s.push("\x97"), "");
  EXPECT_EQ(s.push("\xA5" "c"), "\xE6\x97\xA5" "c");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.flush(), "\xF0\x9F");
  EXPECT_EQ(s.push("x"), "x");
}
