// tensorboard.hpp — TensorBoard event files: scalars as TensorFlow's Event and Summary protobufs
// (the few fields scalars need, encoded here) in TFRecord framing, the format TensorBoard,
// torch.utils.tensorboard and tf.summary read and write. A record is its length (8 bytes, little
// endian), the masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loom::rt {

class EventWriter {
 public:
  // Creates `dir` (and its parents) and in it events.out.tfevents.<seconds>.<host>.<pid>[.<n>].loom
  // (n: the process's n-th writer after its first),
  // starting with the file-version record TensorBoard expects first.
  explicit EventWriter(const std::string& dir);
  // One Event at `step` holding each (tag, value) as a simple_value Summary.Value.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // TensorBoard's HParams plugin: this run is one session with these hyperparameters (a number, or
  // text for a choice), begun at `start_s` (Unix seconds); then how it ended.
  struct HParam {
    std::string name;
    bool is_number = true;
    double number = 0;
    std::string text;
  };
  void session_start(const std::vector<HParam>& hparams, double start_s);
  void session_end(bool success, double end_s);
  // To the file now, so that a running job shows in TensorBoard.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& data);
  std::string path_;
  std::ofstream out_;
};

// CRC-32C (Castagnoli) of `n` bytes, masked as TFRecord stores it: rotated right by 15 bits,
// plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace loom::rt
