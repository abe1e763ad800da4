// timestamp.hpp — the one timestamp format of Loom's JSON logs (loom-train, loom-serve):
// ISO 8601 in UTC with milliseconds, "2026-12-01T13:05:17.123Z".
#pragma once

#include <string>

namespace loom::rt {

std::string utc_timestamp();

}  // namespace loom::rt
