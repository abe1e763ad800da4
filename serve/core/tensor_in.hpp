// tensor_in.hpp — a request's input tensors as the front ends decode them (name, datatype,
// shape, raw bytes), checked against what a model takes and turned into its FP32 rows. Pure
// functions: the front ends, the unit tests and the fuzzers call them alike.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom::serve {

// What a model takes as input: FP32 rows of `features` values, or UINT8 pixels preprocessed
// as (v * scale - mean) / std.
struct InputSpec {
  int features = 0;
  float scale = 1, mean = 0, std = 1;
};

// A Loom model name or version as found in a URL or a folder: letters, digits, '-', '_', '.'
// (not starting with '.'), at most 128 characters.
bool valid_name(const std::string& s);

// Decodes one input tensor's bytes to the model's FP32 rows: checks name, datatype, shape and
// size against the model, and rows against `max_rows` (--max-batch-size), all before anything
// is allocated. `data` holds datatype-sized little-endian elements. Throws ServeError
// kInput naming what is wrong.
struct TensorIn {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes
};
std::vector<float> decode_input(const InputSpec& m, const std::vector<TensorIn>& inputs, int max_rows, int* rows);
// The same into `out` (rows x features floats, which `alloc(rows, features)` gives once the
// inputs are checked): the server's path, without a copy through a vector.
void decode_input(const InputSpec& m, const std::vector<TensorIn>& inputs, int max_rows, int* rows,
                  const std::function<float*(int64_t rows, int64_t features)>& alloc);

// A tensor a graph model (ONNX) takes or gives: its KServe datatype and shape (-1 dynamic).
struct TensorDesc {
  std::string name, datatype;
  std::vector<int64_t> shape;
};

// Bytes per element of a KServe datatype this server decodes (FP32, INT64, INT32, UINT8, INT8,
// BOOL); 0 for any other.
size_t datatype_width(const std::string& datatype);

// What refuses a request of more rows than a model takes (its max_batch_size).
std::string too_many_rows(int64_t rows, int64_t max_rows);

// Bytes per element of any fixed-size KServe datatype (BOOL, UINT8..UINT64, INT8..INT64, FP16,
// BF16, FP32, FP64); 0 for BYTES and names KServe does not define.
size_t kserve_type_width(const std::string& datatype);

// A tensor another server answered (a pipeline's hop) against what its model's metadata says:
// the same datatype and rank, no negative dimension, the fixed ones equal, at most 2^31 elements
// counted without overflow, and (for fixed-size types) exactly the bytes the shape needs. Throws
// ServeError kInternal naming `what` and the fault, before the tensor is used or passed on.
void check_answer(const TensorDesc& want, const TensorIn& got, const std::string& what);
// The indices in `outputs` of the names a request asks for (every output when none). Throws
// ServeError kInput for a name that is not there, listing the ones that are.
std::vector<size_t> output_indices(const std::vector<TensorDesc>& outputs, const std::vector<std::string>& names);

// Checks a request's tensors against a graph model's inputs: each input once by name, of its
// datatype and rank, fixed dimensions equal, at most 2^31 elements, data of the size the shape
// says (before anything is allocated), BOOL bytes 0 or 1, FP32 finite; with `batched`, dimension
// 0 is the request's rows, equal across inputs and at most `max_rows`. Returns the tensors in the
// model's order. Throws ServeError kInput naming the input.
std::vector<const TensorIn*> check_named(const std::vector<TensorDesc>& want, const std::vector<TensorIn>& inputs,
                                         int max_rows, bool batched, int* rows);

}  // namespace loom::serve
