// The unpickler is a small stack machine over a closed value model (io/torch_pickle_value.h:
// None, bool, int, str, tuple, dict, an allowed global, a storage reference, a tensor view).
// Globals are only names matched against an allowlist; REDUCE on an allowed global is
// interpreted here, so no code named by the file ever runs. Hostile files are bounded: the
// number of values, their nesting depth, and dict mutation (a dict already placed inside
// another value is frozen, which rules out reference cycles) are all limited.
#include "io/torch_pickle.h"

#include <map>
#include <memory>
#include <unordered_map>

#include "io/torch_pickle_value.h"

namespace quiver {

namespace {

using namespace torch_pickle;

// A real adapter's pickle holds a few thousand values; full-model state dicts tens of
// thousands. These bounds keep a hostile pickle to a few hundred MB of values at worst.
constexpr size_t kMaxValues = 1 << 18;
constexpr int kMaxDepth = 32;
// Memo references (BINGET) and MARKs grow the stacks without making values, and strings
// reached through the memo are copied into names and keys: both are bounded separately.
constexpr size_t kMaxStack = 1 << 18;
constexpr size_t kMaxNameBytes = 1024;

struct StorageType {
  const char* name;
  DType dtype;
  const char* dtype_name;
};
constexpr StorageType kStorageTypes[] = {{"torch.FloatStorage", DType::kF32, "F32"},
                                         {"torch.HalfStorage", DType::kF16, "F16"},
                                         {"torch.BFloat16Storage", DType::kBF16, "BF16"}};
constexpr const char* kCallables[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                      "torch._utils._rebuild_tensor", "torch._utils._rebuild_parameter"};

class Unpickler {
 public:
  explicit Unpickler(std::string_view p) : p_(p) {}
  Result<std::vector<PickledTensor>> run();

 private:
  Status fail(const std::string& what) const {
    return Status::error("offset " + std::to_string(op_at_) + ": " + what);
  }
  Result<std::string_view> take(uint64_t n) {
    if (n > p_.size() - pos_) return fail("truncated (needs " + std::to_string(n) + " more bytes)");
    std::string_view v = p_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  Result<uint64_t> take_le(int n) {
    QV_ASSIGN_OR_RETURN(std::string_view b, take(n));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(b[k]);
    return v;
  }
  Result<std::string_view> take_line() {
    size_t nl = p_.find('\n', pos_);
    if (nl == std::string_view::npos) return fail("truncated GLOBAL name");
    std::string_view v = p_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return v;
  }
  Result<Ref> make(Value::Kind kind) {
    if (++num_values_ > kMaxValues) return fail("more than " + std::to_string(kMaxValues) + " values");
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  // A new scalar (or empty dict) on the stack: `i` for kInt / kBool, `s` for kStr.
  Status push(Value::Kind kind, int64_t i = 0, std::string_view s = {}) {
    QV_ASSIGN_OR_RETURN(Ref v, make(kind));
    v->i = i;
    v->s = s;
    stack_.push_back(std::move(v));
    return Status::ok();
  }
  Result<Ref> pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return fail("stack underflow");
    Ref v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Result<std::vector<Ref>> pop_to_mark() {
    if (marks_.empty()) return fail("no MARK to pop to");
    std::vector<Ref> out(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  Status push_tuple(std::vector<Ref> items);
  Status push_global(std::string_view module, std::string_view name);
  Status set_items(const Ref& dict, const std::vector<Ref>& kv);
  Status persistent_load();
  Status reduce();
  Result<Ref> rebuild_tensor(const std::vector<Ref>& args, bool v2);
  Status step(uint8_t op);

  std::string_view p_;
  size_t pos_ = 0, op_at_ = 0, num_values_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
};

Status Unpickler::push_tuple(std::vector<Ref> items) {
  // Container slots count as values: memo references would otherwise fill them for free.
  num_values_ += items.size();
  QV_ASSIGN_OR_RETURN(Ref t, make(Value::Kind::kTuple));
  for (const Ref& v : items) {
    freeze(v);
    t->depth = std::max(t->depth, v->depth + 1);
  }
  if (t->depth > kMaxDepth) return fail("values nested deeper than " + std::to_string(kMaxDepth));
  t->items = std::move(items);
  stack_.push_back(std::move(t));
  return Status::ok();
}

Status Unpickler::push_global(std::string_view module, std::string_view name) {
  if (module.size() > kMaxNameBytes || name.size() > kMaxNameBytes) return fail("GLOBAL name longer than 1024 bytes");
  const std::string full = std::string(module) + "." + std::string(name);
  QV_ASSIGN_OR_RETURN(Ref g, make(Value::Kind::kGlobal));
  g->s = full;
  bool allowed = false;
  for (const StorageType& st : kStorageTypes) allowed = allowed || full == st.name;
  for (const char* c : kCallables) allowed = allowed || full == c;
  if (allowed) {
    stack_.push_back(std::move(g));
    return Status::ok();
  }
  if (module == "torch" && name.size() > 7 && name.substr(name.size() - 7) == "Storage")
    return fail("storage type " + printable(full) +
                " is not supported (only torch.FloatStorage, torch.HalfStorage and torch.BFloat16Storage)");
  return fail("global '" + printable(full) + "' is not allowed (a state dict of tensors does not need it; "
              "the file is refused rather than run)");
}

Status Unpickler::set_items(const Ref& dict, const std::vector<Ref>& kv) {
  if (kv.size() % 2) return fail("SETITEMS with an odd number of values");
  num_values_ += kv.size();
  if (num_values_ > kMaxValues) return fail("more than " + std::to_string(kMaxValues) + " values");
  for (const Ref& v : kv) freeze(v);
  if (dict->kind != Value::Kind::kDict) return fail("SETITEM on a " + std::string(kind_name(dict->kind)));
  if (dict->frozen) return fail("SETITEM on a dict that is already part of another value");
  for (size_t i = 0; i < kv.size(); i += 2) {
    const Ref& k = kv[i];
    std::string key;
    switch (k->kind) {
      case Value::Kind::kStr:
        if (k->s.size() > kMaxNameBytes) return fail("dict key longer than 1024 bytes");
        key = "s" + k->s;
        break;
      case Value::Kind::kInt:
      case Value::Kind::kBool: key = "i" + std::to_string(k->i); break;
      case Value::Kind::kNone: key = "n"; break;
      default: return fail(std::string("dict key of type ") + kind_name(k->kind));
    }
    dict->depth = std::max(dict->depth, kv[i + 1]->depth + 1);
    if (dict->depth > kMaxDepth) return fail("values nested deeper than " + std::to_string(kMaxDepth));
    auto [it, fresh] = dict->index.emplace(key, dict->dict.size());
    if (fresh) dict->dict.emplace_back(k, kv[i + 1]);
    else dict->dict[it->second].second = kv[i + 1];  // as Python: a repeated key replaces the value
  }
  return Status::ok();
}

// torch.save's persistent id for a storage: ('storage', <storage type>, key, location, numel).
Status Unpickler::persistent_load() {
  QV_ASSIGN_OR_RETURN(Ref pid, pop());
  const auto& it = pid->items;
  if (pid->kind != Value::Kind::kTuple || it.size() != 5 || it[0]->kind != Value::Kind::kStr ||
      it[0]->s != "storage" || it[1]->kind != Value::Kind::kGlobal || it[2]->kind != Value::Kind::kStr ||
      it[3]->kind != Value::Kind::kStr || it[4]->kind != Value::Kind::kInt || it[4]->i < 0)
    return fail("persistent id is not ('storage', <storage type>, key, location, numel)");
  if (it[2]->s.size() > kMaxNameBytes || it[3]->s.size() > kMaxNameBytes)
    return fail("storage key or location longer than 1024 bytes");
  const StorageType* type = nullptr;
  for (const StorageType& st : kStorageTypes)
    if (it[1]->s == st.name) type = &st;
  if (!type) return fail("persistent id names " + printable(it[1]->s) + ", not a storage type");
  QV_ASSIGN_OR_RETURN(Ref s, make(Value::Kind::kStorage));
  s->tensor = std::make_shared<PickledTensor>();
  s->tensor->storage_key = it[2]->s;
  s->tensor->dtype = type->dtype;
  s->tensor->dtype_name = type->dtype_name;
  s->tensor->location = it[3]->s;
  s->tensor->storage_numel = static_cast<uint64_t>(it[4]->i);
  stack_.push_back(std::move(s));
  return Status::ok();
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
// and the older _rebuild_tensor(storage, offset, size, stride).
Result<Ref> Unpickler::rebuild_tensor(const std::vector<Ref>& a, bool v2) {
  const char* fn = v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor";
  if (v2 ? (a.size() != 6 && a.size() != 7) : a.size() != 4)
    return fail(std::string(fn) + " with " + std::to_string(a.size()) + " arguments");
  if (a[0]->kind != Value::Kind::kStorage) return fail(std::string(fn) + ": first argument is not a storage");
  if (a[1]->kind != Value::Kind::kInt || a[1]->i < 0) return fail(std::string(fn) + ": bad storage offset");
  if (v2 && a[4]->kind != Value::Kind::kBool) return fail(std::string(fn) + ": requires_grad is not a bool");
  // Backward hooks and tensor metadata (conj/neg bits and the like) would change the tensor.
  if (v2 && !is_empty_dict_or_none(a[5])) return fail(std::string(fn) + ": tensor has backward hooks");
  if (v2 && a.size() == 7 && !is_empty_dict_or_none(a[6])) return fail(std::string(fn) + ": tensor has metadata");
  Result<std::vector<int64_t>> shape = int_tuple(a[2], "size");
  if (!shape) return fail(std::string(fn) + ": " + shape.message());
  Result<std::vector<int64_t>> stride = int_tuple(a[3], "stride");
  if (!stride) return fail(std::string(fn) + ": " + stride.message());
  if (shape->size() != stride->size()) return fail(std::string(fn) + ": size and stride differ in length");
  QV_ASSIGN_OR_RETURN(Ref t, make(Value::Kind::kTensor));
  t->tensor = std::make_shared<PickledTensor>(*a[0]->tensor);
  t->tensor->storage_offset = static_cast<uint64_t>(a[1]->i);
  t->tensor->shape = std::move(shape.value());
  t->tensor->stride = std::move(stride.value());
  return t;
}

Status Unpickler::reduce() {
  QV_ASSIGN_OR_RETURN(Ref args, pop());
  QV_ASSIGN_OR_RETURN(Ref fn, pop());
  if (fn->kind != Value::Kind::kGlobal) return fail("REDUCE on a " + std::string(kind_name(fn->kind)));
  if (args->kind != Value::Kind::kTuple) return fail("REDUCE arguments are not a tuple");
  const std::vector<Ref>& a = args->items;
  if (fn->s == "collections.OrderedDict") {
    if (!a.empty()) return fail("OrderedDict called with arguments");
    return push(Value::Kind::kDict);
  }
  if (fn->s == "torch._utils._rebuild_tensor_v2" || fn->s == "torch._utils._rebuild_tensor") {
    QV_ASSIGN_OR_RETURN(Ref t, rebuild_tensor(a, fn->s == "torch._utils._rebuild_tensor_v2"));
    stack_.push_back(std::move(t));
    return Status::ok();
  }
  if (fn->s == "torch._utils._rebuild_parameter") {  // (tensor, requires_grad, backward_hooks)
    if (a.size() != 3 || a[0]->kind != Value::Kind::kTensor || a[1]->kind != Value::Kind::kBool ||
        !is_empty_dict_or_none(a[2]))
      return fail("_rebuild_parameter arguments are not (tensor, bool, no hooks)");
    stack_.push_back(a[0]);
    return Status::ok();
  }
  return fail("REDUCE on " + printable(fn->s) + ", which is not callable here");
}

Status Unpickler::step(uint8_t op) {
  switch (op) {
    case 0x80: {  // PROTO
      QV_ASSIGN_OR_RETURN(uint64_t v, take_le(1));
      if (v < 2 || v > 5) return fail("pickle protocol " + std::to_string(v) + " (torch.save writes 2)");
      return Status::ok();
    }
    case 0x95: return take(8).status();  // FRAME: framing is advisory, the data follows inline
    case '}': return push(Value::Kind::kDict);  // EMPTY_DICT
    case ')': return push_tuple({});  // EMPTY_TUPLE
    case '(':  // MARK
      if (marks_.size() >= kMaxStack) return fail("more than " + std::to_string(kMaxStack) + " open MARKs");
      marks_.push_back(stack_.size());
      return Status::ok();
    case 't': {  // TUPLE
      QV_ASSIGN_OR_RETURN(std::vector<Ref> items, pop_to_mark());
      return push_tuple(std::move(items));
    }
    case 0x85: case 0x86: case 0x87: {  // TUPLE1-3
      std::vector<Ref> items(op - 0x84);
      for (size_t k = items.size(); k-- > 0;) {
        QV_ASSIGN_OR_RETURN(items[k], pop());
      }
      return push_tuple(std::move(items));
    }
    case 'X': case 0x8c: case 0x8d: case 'U': {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, SHORT_BINSTRING
      QV_ASSIGN_OR_RETURN(uint64_t n, take_le(op == 'X' ? 4 : op == 0x8d ? 8 : 1));
      QV_ASSIGN_OR_RETURN(std::string_view s, take(n));
      return push(Value::Kind::kStr, 0, s);
    }
    case 'q': case 'r': case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
      uint64_t idx = memo_.size();
      if (op != 0x94) {
        QV_ASSIGN_OR_RETURN(idx, take_le(op == 'q' ? 1 : 4));
      }
      if (stack_.empty()) return fail("memoize with an empty stack");
      memo_[idx] = stack_.back();
      return Status::ok();
    }
    case 'h': case 'j': {  // BINGET, LONG_BINGET
      QV_ASSIGN_OR_RETURN(uint64_t idx, take_le(op == 'h' ? 1 : 4));
      auto it = memo_.find(idx);
      if (it == memo_.end()) return fail("memo entry " + std::to_string(idx) + " was never stored");
      if (stack_.size() >= kMaxStack) return fail("more than " + std::to_string(kMaxStack) + " values on the stack");
      stack_.push_back(it->second);
      return Status::ok();
    }
    case 'c': {  // GLOBAL
      QV_ASSIGN_OR_RETURN(std::string_view module, take_line());
      QV_ASSIGN_OR_RETURN(std::string_view name, take_line());
      return push_global(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      QV_ASSIGN_OR_RETURN(Ref name, pop());
      QV_ASSIGN_OR_RETURN(Ref module, pop());
      if (name->kind != Value::Kind::kStr || module->kind != Value::Kind::kStr)
        return fail("STACK_GLOBAL needs two strings");
      return push_global(module->s, name->s);
    }
    case 'J': {  // BININT
      QV_ASSIGN_OR_RETURN(uint64_t v, take_le(4));
      return push(Value::Kind::kInt, static_cast<int32_t>(static_cast<uint32_t>(v)));
    }
    case 'K': case 'M': {  // BININT1, BININT2
      QV_ASSIGN_OR_RETURN(uint64_t v, take_le(op == 'K' ? 1 : 2));
      return push(Value::Kind::kInt, static_cast<int64_t>(v));
    }
    case 0x8a: {  // LONG1: little-endian two's complement of n bytes
      QV_ASSIGN_OR_RETURN(uint64_t n, take_le(1));
      if (n > 8) return fail("integer of " + std::to_string(n) + " bytes");
      QV_ASSIGN_OR_RETURN(uint64_t v, take_le(static_cast<int>(n)));
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
      return push(Value::Kind::kInt, static_cast<int64_t>(v));
    }
    case 0x88: case 0x89: return push(Value::Kind::kBool, op == 0x88);  // NEWTRUE, NEWFALSE
    case 'N': return push(Value::Kind::kNone);
    case 'Q': return persistent_load();  // BINPERSID
    case 'R': return reduce();
    case 's': {  // SETITEM
      QV_ASSIGN_OR_RETURN(Ref v, pop());
      QV_ASSIGN_OR_RETURN(Ref k, pop());
      QV_ASSIGN_OR_RETURN(Ref d, pop());
      QV_RETURN_IF_ERROR(set_items(d, {k, v}));
      stack_.push_back(std::move(d));
      return Status::ok();
    }
    case 'u': {  // SETITEMS
      QV_ASSIGN_OR_RETURN(std::vector<Ref> kv, pop_to_mark());
      QV_ASSIGN_OR_RETURN(Ref d, pop());
      QV_RETURN_IF_ERROR(set_items(d, kv));
      stack_.push_back(std::move(d));
      return Status::ok();
    }
    case 'b': {  // BUILD: only the instance dict of an OrderedDict (state_dict()'s _metadata), dropped
      QV_ASSIGN_OR_RETURN(Ref state, pop());
      if (stack_.empty() || stack_.back()->kind != Value::Kind::kDict || state->kind != Value::Kind::kDict)
        return fail("BUILD on something other than a dict");
      return Status::ok();
    }
  }
  return fail("opcode 0x" + std::string(1, "0123456789abcdef"[op >> 4]) + "0123456789abcdef"[op & 15] +
              " is not supported (not used by torch.save of a state dict)");
}

Result<std::vector<PickledTensor>> Unpickler::run() {
  while (true) {
    op_at_ = pos_;
    if (pos_ >= p_.size()) return fail("ends without STOP");
    const uint8_t op = static_cast<uint8_t>(p_[pos_++]);
    if (op == '.') break;
    QV_RETURN_IF_ERROR(step(op));
  }
  if (stack_.size() != 1 || !marks_.empty()) return fail("STOP with " + std::to_string(stack_.size()) + " values");
  const Ref& top = stack_.back();
  if (top->kind != Value::Kind::kDict)
    return Status::error("data.pkl holds a " + std::string(kind_name(top->kind)) + ", not a state dict");
  std::vector<PickledTensor> out;
  for (const auto& [k, v] : top->dict) {
    if (k->kind != Value::Kind::kStr) return Status::error("state dict key of type " + std::string(kind_name(k->kind)));
    if (v->kind != Value::Kind::kTensor)
      return Status::error("state dict entry '" + printable(k->s) + "' is a " + kind_name(v->kind) +
                           ", not a tensor (only flat dicts of tensors are supported)");
    out.push_back(*v->tensor);
    out.back().name = k->s;
  }
  return out;
}

}  // namespace

Result<std::vector<PickledTensor>> unpickle_state_dict(std::string_view pickle) { return Unpickler(pickle).run(); }

}  // namespace quiver
