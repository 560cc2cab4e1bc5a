// Expected failures: an error with a stable code that the Node glue maps to a JS error's `code`.
#pragma once

#include <stdexcept>
#include <string>

namespace kail {

// Stable codes; the TS side documents them in packages/core-native/lib/errors.ts.
enum error_code {
    KAIL_E_BAD_MODEL,     // malformed or unsupported model file
    KAIL_E_IO,            // read/open failure
    KAIL_E_BUDGET,        // a memory budget cannot hold what is asked
    KAIL_E_INVALID_ARG,   // bad argument from the caller
    KAIL_E_UNSUPPORTED,   // valid input this build cannot handle
    KAIL_E_CANCELLED,     // the caller cancelled
    KAIL_E_INTERNAL,      // should not happen; still reported, never a crash
};

const char * error_code_name(error_code code);

class error : public std::runtime_error {
  public:
    error(error_code code, const std::string & message) : std::runtime_error(message), code_(code) {}
    error_code code() const { return code_; }
  private:
    error_code code_;
};

} // namespace kail
