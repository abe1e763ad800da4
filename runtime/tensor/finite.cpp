// finite.cpp — finite.hpp: the exponent bits of every value, or-ed, so that the loop vectorises.
#include "loom/rt/tensor/finite.hpp"

#include <cstring>

namespace loom::rt::cpu {

bool all_finite(const void* data, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes + 4 * i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);  // exponent all ones: NaN or infinity
  }
  return bad == 0;
}

}  // namespace loom::rt::cpu
