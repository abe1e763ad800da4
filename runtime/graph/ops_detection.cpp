// ops_detection.cpp — NonMaxSuppression as detectors export it: per image and class, the boxes
// above the score threshold in order of score (ties by index), each kept unless it overlaps one
// kept before it by more than the IoU threshold, at most max_output_boxes_per_class of them.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

struct Box {
  float y1, x1, y2, x2;
};

Box box_at(const float* b, bool center) {
  if (center) return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

float iou(const Box& a, const Box& b) {
  const float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0;
  const float inter = ih * iw, area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  const float uni = area_a + area_b - inter;
  return uni > 0 ? inter / uni : 0;
}

float scalar_f(const Node& n, const std::vector<const Tensor*>& in, size_t i, float def) {
  if (i >= in.size() || !in[i] || in[i]->numel() == 0) return def;
  if (in[i]->dtype() != DType::kF32 || in[i]->numel() != 1) op_error(n, "input " + std::to_string(i) + " must be one float32");
  return in[i]->f32()[0];
}

}  // namespace

void op_nms(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &boxes = need(n, in, 0), &scores = need(n, in, 1);
  if (boxes.dtype() != DType::kF32 || scores.dtype() != DType::kF32 || boxes.ndim() != 3 || scores.ndim() != 3 || boxes.dim(2) != 4 ||
      boxes.dim(0) != scores.dim(0) || boxes.dim(1) != scores.dim(2))
    op_error(n, "boxes must be float32 [batches, boxes, 4] and scores [batches, classes, boxes]");
  int64_t limit = 0;
  if (in.size() > 2 && in[2] && in[2]->numel()) {
    const auto v = ints_of(n, *in[2]);
    if (v.size() != 1) op_error(n, "max_output_boxes_per_class must be one value");
    limit = std::max<int64_t>(0, v[0]);
  }
  const float iou_max = scalar_f(n, in, 3, 0), score_min = scalar_f(n, in, 4, -INFINITY);
  const bool center = attr_i(n, "center_point_box", 0) != 0;
  const bool has_min = in.size() > 4 && in[4] && in[4]->numel();
  const int64_t B = boxes.dim(0), C = scores.dim(1), S = boxes.dim(1);
  std::vector<int64_t> picked;  // triples
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < B && limit > 0; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float* sc = scores.f32() + (b * C + c) * S;
      order.clear();
      for (int64_t i = 0; i < S; ++i)
        if (!has_min || sc[i] > score_min) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return compare_total(sc[p], sc[q]) > 0; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= limit) break;
        const Box bx = box_at(boxes.f32() + (b * S + i) * 4, center);
        if (std::any_of(kept.begin(), kept.end(), [&](const Box& k) { return iou(k, bx) > iou_max; })) continue;
        kept.push_back(bx);
        picked.insert(picked.end(), {b, c, i});
      }
    }
  out[0] = make_i64(picked, {static_cast<int64_t>(picked.size() / 3), 3});
}

}  // namespace loom::rt::graph
