#include "core/errors.h"

#include <cstring>

namespace pgp {

[[noreturn]] void throw_error(const std::string& what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(what + " (at " + (base ? base + 1 : file) + ":" + std::to_string(line) + ")");
}

}  // namespace pgp
