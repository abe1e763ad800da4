// rows_index.cpp — the row-independence pass (rows.cpp) over the rows' own numbers: Hugging Face's
// masks as PyTorch 2 exports them index the padding mask with arange(N) beside the positions
// (Range(0, N, 1) -> Unsqueeze -> Expand -> Unsqueeze -> Concat on the last axis -> GatherND).
// Row i of such an index holds i, and reads row i of the data alone: joined requests renumber
// both alike. Only the operators below carry the numbers (anything computed from them is a value
// like any other), and only GatherND, with them as its first index, reads them.
#include "rows_pass.hpp"

namespace loom::rt::graph::rows_pass {

// Range(0, N, 1): the rows' numbers, one a row.
bool Pass::row_numbers(const Node& n) {
  if (n.op != "Range" || n.in.size() != 3 || !single(in(n, 0), 0) || !single(in(n, 2), 1) || in(n, 1).kind != Fact::kSize ||
      !single(in(n, 1), sz_.n()))
    return false;
  set(n, 0, rows({kRowsDim}, 0));
  numbers_[n.out[0]] = kEveryElement;
  return true;
}

// After Unsqueeze, Expand or Concat has set the output's fact: where the numbers went.
void Pass::carry_numbers(const Node& n) {
  const auto x = numbers_.find(n.in[0]);
  if ((n.op == "Unsqueeze" || n.op == "Expand") && x != numbers_.end() && x->second == kEveryElement && fact(n.out[0]).at == 0)
    numbers_[n.out[0]] = kEveryElement;  // the same numbers, repeated along other dimensions
  if (n.op != "Concat") return;
  const Fact& y = fact(n.out[0]);
  if (y.rank() < 2 || norm(attr_i(n, "axis", 0), y.rank()) != y.rank() - 1) return;
  int64_t offset = 0;  // along the last axis: the input of all numbers, one wide, becomes that column
  for (int v : n.in) {
    const Fact& f = fact(v);
    const auto it = numbers_.find(v);
    if (it != numbers_.end() && it->second == kEveryElement && f.dims.back() == 1) {
      numbers_[n.out[0]] = offset;
      return;
    }
    if (f.dims.back() < 0) return;
    offset += f.dims.back();
  }
}

// GatherND(data, indices): its rows are the indices' when their first column holds the rows'
// numbers and the data's rows are its first dimension (or every element along them is the same).
void Pass::gather_nd(const Node& n) {
  const Fact &d = need_ranked(in(n, 0)), &i = need_ranked(in(n, 1));
  const auto col = n.in.size() > 1 ? numbers_.find(n.in[1]) : numbers_.end();
  const bool plain = d.any_layout || (d.outer == 1 && d.inner == 1);
  if (attr_i(n, "batch_dims", 0) != 0 || d.kind != Fact::kRows || d.at != 0 || !plain || i.kind != Fact::kRows || i.at != 0 ||
      i.outer != 1 || i.inner != 1 || col == numbers_.end() || col->second != 0)
    throw Refused{"its indices are not the rows' own numbers into the rows"};
  const int64_t k = i.dims.back();
  if (k < 1 || k > d.rank()) throw Refused{"the length of its indices is not known"};
  std::vector<int64_t> dims(i.dims.begin(), i.dims.end() - 1);
  dims.insert(dims.end(), d.dims.begin() + k, d.dims.end());
  set(n, 0, rows(dims, 0));
}

}  // namespace loom::rt::graph::rows_pass
