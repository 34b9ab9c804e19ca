// Error handling for the native core: every failure throws, nothing exits.
#pragma once
#include <stdexcept>
#include <string>

namespace pgp {

// A probe or framework failure. The message names the call site.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const std::string& what, const char* file, int line);

}  // namespace pgp

#define PGP_CHECK(cond, msg)                                              \
  do {                                                                    \
    if (!(cond)) ::pgp::throw_error(std::string("check failed: ") + #cond + \
                                        ": " + (msg), __FILE__, __LINE__); \
  } while (0)
