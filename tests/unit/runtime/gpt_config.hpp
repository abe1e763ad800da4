// gpt_config.hpp — the small gpt the unit tests build: 2 layers over a 37-symbol vocabulary.
#pragma once

#include "loom/rt/nn/gpt.hpp"

namespace loom::rt::test {

inline GptConfig small_gpt(int context, int heads, int embd, float dropout) {
  GptConfig c;
  c.vocab = 37;
  c.context = context;
  c.layers = 2;
  c.heads = heads;
  c.embd = embd;
  c.dropout = dropout;
  return c;
}

}  // namespace loom::rt::test
