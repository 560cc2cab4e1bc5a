#include "kail/status.h"

namespace kail {

const char * error_code_name(error_code code) {
    switch (code) {
        case KAIL_E_BAD_MODEL:   return "KAIL_E_BAD_MODEL";
        case KAIL_E_IO:          return "KAIL_E_IO";
        case KAIL_E_BUDGET:      return "KAIL_E_BUDGET";
        case KAIL_E_INVALID_ARG: return "KAIL_E_INVALID_ARG";
        case KAIL_E_UNSUPPORTED: return "KAIL_E_UNSUPPORTED";
        case KAIL_E_CANCELLED:   return "KAIL_E_CANCELLED";
        case KAIL_E_INTERNAL:    return "KAIL_E_INTERNAL";
    }
    return "KAIL_E_INTERNAL";
}

} // namespace kail
