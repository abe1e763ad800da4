// tensorboard.cpp — EventWriter: TFRecord framing and the Event/Summary protobuf wire format for
// scalars (tensorboard.hpp).
#include "loom/rt/io/tensorboard.hpp"

#include <unistd.h>

#include <atomic>
#include <boost/crc.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "loom/rt/error.hpp"

namespace loom::rt {
namespace {

// Protobuf's wire format: a field's key is (number << 3) | type; 0 varint, 1 fixed 64 bits,
// 2 length-delimited, 5 fixed 32 bits; numbers little endian.
void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

template <class T>
void fixed(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof b);  // little-endian hosts (x86-64, aarch64)
  out->append(b, sizeof b);
}

void bytes_field(std::string* out, int number, const std::string& data) {
  varint(out, static_cast<uint64_t>(number) << 3 | 2);
  varint(out, data.size());
  out->append(data);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string event(int64_t step, int field, const std::string& payload) {
  std::string e;
  varint(&e, 1 << 3 | 1);
  fixed(&e, now_s());
  varint(&e, 2 << 3 | 0);
  varint(&e, static_cast<uint64_t>(step));
  bytes_field(&e, field, payload);
  return e;
}

// A Summary of one value with the HParams plugin's metadata (SummaryMetadata.plugin_data:
// plugin_name "hparams", content an HParamsPluginData) and the empty float tensor TensorBoard's
// own hparams summaries carry.
std::string hparams_summary(const std::string& tag, const std::string& plugin_data) {
  std::string plugin, metadata, tensor, value, summary;
  bytes_field(&plugin, 1, "hparams");
  bytes_field(&plugin, 2, plugin_data);
  bytes_field(&metadata, 1, plugin);
  varint(&tensor, 1 << 3 | 0);  // TensorProto.dtype = DT_FLOAT
  varint(&tensor, 1);
  bytes_field(&tensor, 2, "");  // tensor_shape: a scalar
  bytes_field(&value, 1, tag);
  bytes_field(&value, 9, metadata);
  bytes_field(&value, 8, tensor);
  bytes_field(&summary, 1, value);
  return summary;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create the TensorBoard folder: " + ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  static std::atomic<int> made{0};  // several runs of one process (loom-compress) in one second
  const int n = made.fetch_add(1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_s())) + "." + host +
                                          "." + std::to_string(getpid()) + (n ? "." + std::to_string(n) : "") + ".loom"))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error(path_ + ": cannot open for writing");
  record(event(0, 3, "brain.Event:2"));
  flush();
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {  // Summary { repeated Value value = 1; }
    std::string v;                           // Value { string tag = 1; float simple_value = 2; }
    bytes_field(&v, 1, tag);
    varint(&v, 2 << 3 | 5);
    fixed(&v, static_cast<float>(value));
    bytes_field(&summary, 1, v);
  }
  record(event(step, 5, summary));
}

void EventWriter::session_start(const std::vector<HParam>& hparams, double start_s) {
  std::string info;  // SessionStartInfo { map<string, google.protobuf.Value> hparams = 1; double start_time_secs = 5; }
  for (const auto& h : hparams) {
    std::string v, entry;  // Value { double number_value = 2; string string_value = 3; }
    if (h.is_number) {
      varint(&v, 2 << 3 | 1);
      fixed(&v, h.number);
    } else {
      bytes_field(&v, 3, h.text);
    }
    bytes_field(&entry, 1, h.name);
    bytes_field(&entry, 2, v);
    bytes_field(&info, 1, entry);
  }
  varint(&info, 5 << 3 | 1);
  fixed(&info, start_s);
  std::string data;  // HParamsPluginData { int32 version = 1; SessionStartInfo session_start_info = 3; }
  varint(&data, 1 << 3 | 0);
  varint(&data, 0);
  bytes_field(&data, 3, info);
  record(event(0, 5, hparams_summary("_hparams_/session_start_info", data)));
}

void EventWriter::session_end(bool success, double end_s) {
  std::string info;  // SessionEndInfo { Status status = 1 (1 success, 2 failure); double end_time_secs = 2; }
  varint(&info, 1 << 3 | 0);
  varint(&info, success ? 1 : 2);
  varint(&info, 2 << 3 | 1);
  fixed(&info, end_s);
  std::string data;
  varint(&data, 1 << 3 | 0);
  varint(&data, 0);
  bytes_field(&data, 4, info);
  record(event(0, 5, hparams_summary("_hparams_/session_end_info", data)));
}

void EventWriter::flush() {
  out_.flush();
  if (!out_) throw Error(path_ + ": writing failed");
}

void EventWriter::record(const std::string& data) {
  std::string r;
  fixed(&r, static_cast<uint64_t>(data.size()));
  fixed(&r, masked_crc32c(r.data(), 8));
  r += data;
  fixed(&r, masked_crc32c(data.data(), data.size()));
  out_.write(r.data(), static_cast<std::streamsize>(r.size()));
}

}  // namespace loom::rt
