// choice.hpp — an option whose value is one of a few words, held as an enum: the words live in one
// table per enum (ChoiceWords<E>, in the enum's order), read strictly (a word not in it refused
// with the list) and printed back where a log, a checkpoint or --help names the value.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/error.hpp"

namespace loom {

// Specialise for each choice enum: `static constexpr const char* option` (its flag, for
// messages) and `static constexpr std::array<const char*, N> words` (the enum's values in order).
template <class E>
struct ChoiceWords;

// Gives enum E its words, at global scope: LOOM_CHOICE(loom::rt::Balance, "--balance", "off",
// "static", "dynamic").
#define LOOM_CHOICE(E, OPTION, ...)                                        \
  template <>                                                              \
  struct loom::ChoiceWords<E> {                                            \
    static constexpr const char* option = OPTION;                          \
    static constexpr std::array words{__VA_ARGS__};                         \
  }

template <class E, class = void>
struct is_choice : std::false_type {};
template <class E>
struct is_choice<E, std::void_t<decltype(ChoiceWords<E>::words)>> : std::true_type {};

template <class E>
const char* word_of(E e) {
  return ChoiceWords<E>::words.at(static_cast<size_t>(e));
}

// "a, b or c": the words as a message lists them.
template <class E>
std::string choice_list() {
  const auto& w = ChoiceWords<E>::words;
  std::string list = w[0];
  for (size_t i = 1; i < w.size(); ++i) list += std::string(i + 1 == w.size() ? " or " : ", ") + w[i];
  return list;
}

// The enum value named `word`; throws UsageError "--opt must be a, b or c, not 'x'" otherwise.
template <class E>
E parse_choice(const std::string& word) {
  const auto& w = ChoiceWords<E>::words;
  for (size_t i = 0; i < w.size(); ++i)
    if (word == w[i]) return static_cast<E>(i);
  throw UsageError(std::string(ChoiceWords<E>::option) + " must be " + choice_list<E>() + ", not '" + word.substr(0, 40) + "'");
}

}  // namespace loom
