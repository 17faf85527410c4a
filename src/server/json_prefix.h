// Whether text so far can still become one JSON object (RFC 8259), a byte at a time: the
// recogniser behind `response_format: {"type": "json_object"}`. push() refuses a byte that no
// JSON object continues with; complete() once the top-level object is closed. A copy is cheap
// (a few bytes and the nesting), so a token's bytes are tried on a copy first.
#pragma once

#include "engine/engine.h"
#include "format/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lamina::server {

class JsonPrefix {
 public:
  bool push(unsigned char c);  // false (and unchanged) when no JSON object continues with c
  bool push(std::string_view s);  // every byte, all or nothing
  bool complete() const { return mode_ == Mode::Done; }

 private:
  enum class Mode : uint8_t {
    Top,         // before the top-level object
    Value,       // a value is expected (after ':' or ',' in an array)
    KeyOrClose,  // after '{': a key or '}'
    Key,         // after ',' in an object: a key
    Colon,       // after a key
    ValueOrClose,  // after '[': a value or ']'
    After,       // after a value: ',' or the container's close
    String,      // inside a string (key_ says which kind)
    Number,      // inside a number (num_ its state)
    Literal,     // inside true / false / null (lit_ the rest to come)
    Done,        // the top-level object is closed
  };
  bool step(unsigned char c);
  bool value_start(unsigned char c);
  bool close(char bracket);  // '}' or ']' ends the innermost container
  bool end_value();          // a value just ended: After, or Done at the top

  Mode mode_ = Mode::Top;
  std::string stack_;    // the open containers, '{' or '['
  bool key_ = false;     // the string being read is an object key
  int escape_ = 0;       // in a string: 1 after '\', 2..5: hex digits of \u still to come
  uint8_t num_ = 0;      // number state (json_prefix.cpp)
  std::string_view lit_; // the rest of the literal being read
};

// Every token's text (Tokenizer::token_to_piece), made once per model: a constraint may test
// the whole vocabulary in one draw.
using TokenPieces = std::vector<std::string>;
std::shared_ptr<const TokenPieces> token_pieces(const Tokenizer& tok);

// The engine's constraint for JSON mode: a token is allowed when its text continues the object
// (a token without text, such as the end of generation, is not: the request ends when the object
// closes).
class JsonObjectConstraint final : public TokenConstraint {
 public:
  explicit JsonObjectConstraint(std::shared_ptr<const TokenPieces> pieces) : pieces_(std::move(pieces)) {}
  bool allows(int32_t token) const override;
  void take(int32_t token) override { json_.push(piece(token)); }
  bool complete() const override { return json_.complete(); }

 private:
  std::string_view piece(int32_t token) const {
    return token >= 0 && size_t(token) < pieces_->size() ? std::string_view((*pieces_)[size_t(token)]) : std::string_view();
  }
  std::shared_ptr<const TokenPieces> pieces_;
  JsonPrefix json_;
};

}  // namespace lamina::server
