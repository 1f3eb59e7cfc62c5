// The closed value model of the restricted unpickler (io/torch_pickle.cc): the only things a
// pickle can build there, with the helpers that inspect them. Private to that file.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/torch_pickle.h"

namespace quiver::torch_pickle {

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
  enum class Kind { kNone, kBool, kInt, kStr, kTuple, kDict, kGlobal, kStorage, kTensor } kind = Kind::kNone;
  int64_t i = 0;                           // kBool, kInt
  std::string s;                           // kStr; kGlobal: "module.name"
  std::vector<Ref> items;                  // kTuple
  std::vector<std::pair<Ref, Ref>> dict;   // kDict, in insertion order
  std::map<std::string, size_t> index;     // kDict: key -> position in `dict`
  std::shared_ptr<PickledTensor> tensor;   // kStorage (storage fields only), kTensor
  int depth = 1;
  bool frozen = false;  // kDict: placed inside another value, no longer mutable
};

inline const char* kind_name(Value::Kind k) {
  static constexpr const char* kNames[] = {"None",  "bool",   "int",           "str",   "tuple",
                                           "dict",  "global", "storage",       "tensor"};
  return kNames[static_cast<int>(k)];
}

// File text quoted in messages: printable ASCII only, at most 80 characters.
inline std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 80 ? out + "..." : out;
}

// Placing a value inside another freezes it if it is a dict: io/torch_pickle.cc says why.
inline void freeze(const Ref& v) {
  if (v->kind == Value::Kind::kDict) v->frozen = true;
}

inline Result<std::vector<int64_t>> int_tuple(const Ref& v, const char* what) {
  if (v->kind != Value::Kind::kTuple) return Status::error(std::string(what) + " is not a tuple");
  std::vector<int64_t> out;
  for (const Ref& e : v->items) {
    if (e->kind != Value::Kind::kInt || e->i < 0)
      return Status::error(std::string(what) + " holds something other than a non-negative int");
    out.push_back(e->i);
  }
  return out;
}

inline bool is_empty_dict_or_none(const Ref& v) {
  return v->kind == Value::Kind::kNone || (v->kind == Value::Kind::kDict && v->dict.empty());
}

}  // namespace quiver::torch_pickle
