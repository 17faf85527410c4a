#include "server/json_prefix.h"

namespace lamina::server {
namespace {

bool space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Number states: after '-' (a digit must come), after a leading '0', in the integer digits,
// after '.' (a digit must come), in the fraction, after 'e' (a sign or digit), after its sign (a
// digit), in the exponent. A number may end in the states marked final.
enum : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
bool final_state(uint8_t s) { return s == kZero || s == kInt || s == kFrac || s == kExp; }

}  // namespace

bool JsonPrefix::push(unsigned char c) {
  const JsonPrefix keep = *this;
  if (step(c)) return true;
  *this = keep;
  return false;
}

bool JsonPrefix::push(std::string_view s) {
  const JsonPrefix keep = *this;
  for (unsigned char c : s)
    if (!step(c)) {
      *this = keep;
      return false;
    }
  return true;
}

bool JsonPrefix::end_value() {
  mode_ = stack_.empty() ? Mode::Done : Mode::After;
  return true;
}

bool JsonPrefix::close(char bracket) {
  if (stack_.empty() || stack_.back() != (bracket == '}' ? '{' : '[')) return false;
  stack_.pop_back();
  return end_value();
}

bool JsonPrefix::value_start(unsigned char c) {
  if (c == '{') return stack_.push_back('{'), mode_ = Mode::KeyOrClose, true;
  if (c == '[') return stack_.push_back('['), mode_ = Mode::ValueOrClose, true;
  if (c == '"') return key_ = false, escape_ = 0, mode_ = Mode::String, true;
  if (c == '-') return num_ = kMinus, mode_ = Mode::Number, true;
  if (digit(c)) return num_ = c == '0' ? kZero : kInt, mode_ = Mode::Number, true;
  if (c == 't') return lit_ = "rue", mode_ = Mode::Literal, true;
  if (c == 'f') return lit_ = "alse", mode_ = Mode::Literal, true;
  if (c == 'n') return lit_ = "ull", mode_ = Mode::Literal, true;
  return false;
}

bool JsonPrefix::step(unsigned char c) {
  switch (mode_) {
    case Mode::Top:
      if (space(c)) return true;
      return c == '{' && value_start(c);
    case Mode::Value:
      return space(c) || value_start(c);
    case Mode::ValueOrClose:
      if (c == ']') return close(']');
      return space(c) || value_start(c);
    case Mode::KeyOrClose:
      if (c == '}') return close('}');
      [[fallthrough]];
    case Mode::Key:
      if (space(c)) return true;
      if (c != '"') return false;
      return key_ = true, escape_ = 0, mode_ = Mode::String, true;
    case Mode::Colon:
      if (space(c)) return true;
      return c == ':' && (mode_ = Mode::Value, true);
    case Mode::After:
      if (space(c)) return true;
      if (c == ',') return mode_ = stack_.back() == '{' ? Mode::Key : Mode::Value, true;
      return (c == '}' || c == ']') && close(char(c));
    case Mode::String:
      if (escape_ == 1) {  // after '\'
        if (c == 'u') return escape_ = 2, true;
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
          return escape_ = 0, true;
        return false;
      }
      if (escape_ >= 2) {  // \u: four hex digits
        if (!hex(c)) return false;
        escape_ = escape_ == 5 ? 0 : escape_ + 1;
        return true;
      }
      if (c == '\\') return escape_ = 1, true;
      if (c == '"') {
        if (key_) return mode_ = Mode::Colon, true;
        return end_value();
      }
      return c >= 0x20;  // (control characters must be escaped; bytes of UTF-8 pass)
    case Mode::Number:
      switch (num_) {
        case kMinus: return digit(c) && (num_ = c == '0' ? kZero : kInt, true);
        case kInt:
          if (digit(c)) return true;
          [[fallthrough]];
        case kZero:
          if (c == '.') return num_ = kDot, true;
          if (c == 'e' || c == 'E') return num_ = kE, true;
          break;
        case kDot: return digit(c) && (num_ = kFrac, true);
        case kFrac:
          if (digit(c)) return true;
          if (c == 'e' || c == 'E') return num_ = kE, true;
          break;
        case kE:
          if (c == '+' || c == '-') return num_ = kESign, true;
          return digit(c) && (num_ = kExp, true);
        case kESign: return digit(c) && (num_ = kExp, true);
        case kExp:
          if (digit(c)) return true;
          break;
      }
      // The number ends before c, which the container then takes.
      if (!final_state(num_)) return false;
      end_value();
      return step(c);
    case Mode::Literal:
      if (lit_.empty() || c != static_cast<unsigned char>(lit_.front())) return false;
      lit_.remove_prefix(1);
      if (lit_.empty()) return end_value();
      return true;
    case Mode::Done:
      return false;  // (the request ends with the object)
  }
  return false;
}

std::shared_ptr<const TokenPieces> token_pieces(const Tokenizer& tok) {
  auto p = std::make_shared<TokenPieces>(tok.n_vocab());
  for (size_t t = 0; t < p->size(); ++t) (*p)[t] = tok.token_to_piece(int32_t(t));
  return p;
}

bool JsonObjectConstraint::allows(int32_t token) const {
  const std::string_view p = piece(token);
  if (p.empty()) return false;
  JsonPrefix j = json_;
  return j.push(p);
}

}  // namespace lamina::server
