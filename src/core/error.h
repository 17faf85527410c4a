// lamina::Error — the one exception type the library throws for bad input (files, arguments,
// resources). Its message is a complete sentence a user can act on: it names the thing (file,
// offset, key, tensor) and what is wrong. The CLI prints it as one line and exits with status 1.
// Internal invariants use assert; they never fire on user input.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace lamina {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace lamina
