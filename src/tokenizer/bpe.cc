// BPE encoding of one word, as HF tokenizers' Word::merge_all does it: the word starts as
// one symbol per character; a min-heap of candidate merges ordered by (rank, position)
// repeatedly merges the best pair on a doubly linked list of symbols. Heap entries made
// stale by an earlier merge are detected by re-checking the pair and skipped.
#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "tokenizer/json_path.h"
#include "tokenizer/utf8.h"

namespace quiver {

using nlohmann::json;
namespace jp = json_path;

Result<std::unique_ptr<BpeModel>> BpeModel::parse(const json& j, const std::string& path) {
  auto m = std::unique_ptr<BpeModel>(new BpeModel());
  QV_ASSIGN_OR_RETURN(const json* vocab, jp::require(j, "vocab", path));
  std::string vocab_path = jp::child(path, "vocab");
  if (!vocab->is_object()) return jp::error(vocab_path, "expected an object of token -> id");
  m->vocab_.reserve(vocab->size());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > jp::kMaxTokenId) {
      return jp::error(jp::child(vocab_path, token),
                       "expected an integer id in [0, " + std::to_string(jp::kMaxTokenId) + "]");
    }
    int32_t i = static_cast<int32_t>(id.get<int64_t>());
    m->vocab_[token] = i;
    max_id = std::max(max_id, i);
  }
  m->id_to_token_.assign(max_id + 1, std::string());
  m->has_token_.assign(max_id + 1, 0);
  for (const auto& [token, id] : m->vocab_) {
    m->id_to_token_[id] = token;
    m->has_token_[id] = 1;
  }

  QV_ASSIGN_OR_RETURN(std::string unk, jp::get_string(j, "unk_token", path, ""));
  if (!unk.empty()) {
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end()) return jp::error(jp::child(path, "unk_token"), "'" + unk + "' is not in the vocab");
    m->unk_id_ = it->second;
  }
  QV_ASSIGN_OR_RETURN(m->fuse_unk_, jp::get_bool(j, "fuse_unk", path, false));
  QV_ASSIGN_OR_RETURN(m->byte_fallback_, jp::get_bool(j, "byte_fallback", path, false));
  QV_ASSIGN_OR_RETURN(m->ignore_merges_, jp::get_bool(j, "ignore_merges", path, false));
  QV_ASSIGN_OR_RETURN(m->continuing_subword_prefix_, jp::get_string(j, "continuing_subword_prefix", path, ""));
  QV_ASSIGN_OR_RETURN(m->end_of_word_suffix_, jp::get_string(j, "end_of_word_suffix", path, ""));
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    return jp::error(jp::child(path, "dropout"), "BPE dropout is not supported");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m->vocab_.find(std::string_view(name));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }

  std::string merges_path = jp::child(path, "merges");
  auto merges = j.find("merges");
  if (merges != j.end() && !merges->is_array()) return jp::error(merges_path, "expected an array");
  if (merges != j.end()) {
    m->merges_.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const json& entry = (*merges)[rank];
      std::string a, b;
      if (entry.is_string()) {  // "a b"
        const std::string& s = entry.get_ref<const std::string&>();
        size_t space = s.find(' ');
        if (space == std::string::npos) return jp::error(jp::index(merges_path, rank), "expected \"a b\"");
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
        a = entry[0].get<std::string>();
        b = entry[1].get<std::string>();
      } else {
        return jp::error(jp::index(merges_path, rank), "expected \"a b\" or [\"a\", \"b\"]");
      }
      auto ia = m->vocab_.find(a), ib = m->vocab_.find(b), ic = m->vocab_.find(a + b);
      if (ia == m->vocab_.end() || ib == m->vocab_.end() || ic == m->vocab_.end()) {
        return jp::error(jp::index(merges_path, rank), "merge '" + a + "' + '" + b + "' uses a token not in the vocab");
      }
      // A repeated pair keeps its last rank, as a hash map built in order would.
      m->merges_[pair_key(ia->second, ib->second)] = {static_cast<uint32_t>(rank), ic->second};
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  // An unknown character becomes a pending unk that is written out before the next known
  // character (so consecutive unks can fuse). As in HF, byte-fallback pieces do not flush it.
  bool pending_unk = false;
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = utf8::char_length(static_cast<unsigned char>(word[pos]));
    std::string_view ch = word.substr(pos, len);
    bool first = pos == 0, last = pos + len >= word.size();
    std::string_view key = ch;
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      piece.clear();
      if (!first) piece += continuing_subword_prefix_;
      piece += ch;
      if (last) piece += end_of_word_suffix_;
      key = piece;
    }
    pos += len;
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      if (pending_unk) ids.push_back(*unk_id_);
      pending_unk = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) ids.push_back(*unk_id_);
      pending_unk = true;
    }
    // Without an unk token an unknown character is dropped, as HF does.
  }
  if (pending_unk) ids.push_back(*unk_id_);
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t pos) {
    int32_t next = sym[pos].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(sym[pos].id, sym[next].id));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace quiver
