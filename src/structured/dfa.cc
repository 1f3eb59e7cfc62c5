#include "structured/dfa.h"

#include <algorithm>
#include <map>
#include <string_view>

namespace quiver::structured {

namespace {

struct Edge {
  uint8_t lo, hi;
  int to;
};

struct NfaState {
  std::vector<Edge> edges;
  std::vector<int> eps;
};

// UTF-8 bytes of a code point.
int encode(char32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] until its UTF-8 encodings form a product of per-byte ranges: first at the
// encoding-length boundaries, then wherever the continuation bytes do not span 80..BF.
void utf8_sequences(char32_t lo, char32_t hi, std::vector<ByteSeq>* out) {
  if (lo > hi) return;
  static constexpr char32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t b : kBounds) {
    if (lo <= b && hi > b) {
      utf8_sequences(lo, b, out);
      utf8_sequences(b + 1, hi, out);
      return;
    }
  }
  uint8_t a[4], z[4];
  const int n = encode(lo, a);
  encode(hi, z);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSeq seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], z[i]);
  out->push_back(std::move(seq));
}

class NfaBuilder {
 public:
  explicit NfaBuilder(size_t max_states) : max_(max_states) {}
  std::vector<NfaState> states;

  int add() {
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  bool overflow() const { return states.size() > max_; }

  // Adds `n` starting at `from`; returns the state reached after it. Edges added to `from`
  // later by what follows keep the same meaning ("after everything so far").
  int build(const RegexNode& n, int from) {
    if (overflow()) return from;
    switch (n.kind) {
      case RegexNode::Kind::kEmpty:
        return from;
      case RegexNode::Kind::kClass: {
        const int end = add();
        std::vector<ByteSeq> seqs;
        for (auto [lo, hi] : n.ranges) utf8_sequences(lo, hi, &seqs);
        for (const ByteSeq& s : seqs) {
          int cur = from;
          for (size_t i = 0; i < s.size(); ++i) {
            const int to = i + 1 == s.size() ? end : add();
            states[static_cast<size_t>(cur)].edges.push_back({s[i].first, s[i].second, to});
            cur = to;
          }
        }
        return end;
      }
      case RegexNode::Kind::kConcat: {
        int cur = from;
        for (const auto& k : n.kids) cur = build(*k, cur);
        return cur;
      }
      case RegexNode::Kind::kAlt: {
        const int end = add();
        for (const auto& k : n.kids) {
          const int s = add();
          states[static_cast<size_t>(from)].eps.push_back(s);
          const int e = build(*k, s);
          states[static_cast<size_t>(e)].eps.push_back(end);
        }
        return end;
      }
      case RegexNode::Kind::kRepeat: {
        const RegexNode& k = *n.kids[0];
        // A fresh entry state keeps the copies from sharing `from` with earlier loops.
        int cur = add();
        states[static_cast<size_t>(from)].eps.push_back(cur);
        for (int i = 0; i < n.min && !overflow(); ++i) cur = build(k, cur);
        if (n.max < 0) {
          const int s = add();
          states[static_cast<size_t>(cur)].eps.push_back(s);
          const int e = build(k, s);
          states[static_cast<size_t>(e)].eps.push_back(s);
          return s;
        }
        // Each optional copy may skip straight to the end, so a closure never runs along
        // the chain of remaining copies.
        const int end = add();
        for (int i = n.min; i < n.max && !overflow(); ++i) {
          const int s = add();
          states[static_cast<size_t>(cur)].eps.push_back(end);
          states[static_cast<size_t>(cur)].eps.push_back(s);
          cur = build(k, s);
        }
        states[static_cast<size_t>(cur)].eps.push_back(end);
        return end;
      }
    }
    return from;
  }

 private:
  size_t max_;
};

}  // namespace

int32_t Dfa::walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = step(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool Dfa::matches(std::string_view text) const {
  const int32_t s = walk(start(), text);
  return s != kDead && accepting(s);
}

Result<Dfa> Dfa::compile(const RegexNode& root, int max_states) {
  NfaBuilder nfa(static_cast<size_t>(max_states) * 64);
  const int start = nfa.add();
  const int final_state = nfa.build(root, start);
  auto too_big = [&] {
    return Status::error("the constraint is too complex: its automaton exceeds " + std::to_string(max_states) +
                         " states (simplify the schema or regex, e.g. smaller repetition counts)");
  };
  if (nfa.overflow()) return too_big();
  const auto& ns = nfa.states;
  // The subset construction's work: NFA states visited and kept by closures, byte edges
  // followed, each DFA state's byte loop and the sets interned. The state bound alone does
  // not bound it, since one DFA state may be a set of thousands of NFA states:
  // (\w{0,1000}\d{0,1000}){10} took 38 s to reach its refusal and (.*a){1000} 12 s to
  // 19,001 states, on the engine's thread that every request waits on. With the budget a
  // refusal takes 0.1-0.4 s (Release, 2 cores of an EPYC); within it, a 23-property JSON
  // schema with nested arrays of objects takes 2.6 M steps, any JSON value 3 deep 1.8 M,
  // .{0,1000} (19,001 states) 6.2 M.
  const int64_t max_work = static_cast<int64_t>(max_states) * kWorkPerState;
  int64_t work = 0;
  auto too_slow = [&] {
    return Status::error("the constraint is too complex: building its automaton takes more than " +
                         std::to_string(max_work) +
                         " steps (simplify the schema or regex, e.g. fewer or smaller repetitions of wide classes)");
  };

  // Epsilon closure, kept to the states that matter for identity: those with byte edges
  // and the final state.
  std::vector<int> mark(ns.size(), -1);
  int stamp = 0;
  auto closure = [&](std::vector<int> seeds) {
    ++stamp;
    std::vector<int> stack = std::move(seeds), out;
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      ++work;
      if (mark[static_cast<size_t>(s)] == stamp) continue;
      mark[static_cast<size_t>(s)] = stamp;
      const NfaState& st = ns[static_cast<size_t>(s)];
      if (!st.edges.empty() || s == final_state) out.push_back(s);
      for (int e : st.eps) stack.push_back(e);
    }
    std::sort(out.begin(), out.end());
    work += static_cast<int64_t>(out.size());
    return out;
  };

  std::map<std::vector<int>, int32_t> ids;
  std::vector<std::vector<int>> sets;
  Dfa d;
  auto intern = [&](std::vector<int> set) -> int32_t {
    if (set.empty()) return kDead;
    work += static_cast<int64_t>(set.size());
    auto [it, fresh] = ids.emplace(set, static_cast<int32_t>(sets.size()));
    if (fresh) sets.push_back(std::move(set));
    return it->second;
  };
  intern(closure({start}));
  for (size_t i = 0; i < sets.size(); ++i) {
    if (static_cast<int>(sets.size()) > max_states) return too_big();
    work += 256;  // the byte loop below
    std::vector<std::vector<int>> targets(256);
    for (int s : sets[i])
      for (const Edge& e : ns[static_cast<size_t>(s)].edges) {
        work += e.hi - e.lo + 1;
        for (int b = e.lo; b <= e.hi; ++b) targets[static_cast<size_t>(b)].push_back(e.to);
      }
    std::map<std::vector<int>, int32_t> local;  // many bytes share one target set
    d.next_.resize((i + 1) * 256, kDead);
    for (int b = 0; b < 256; ++b) {
      auto& t = targets[static_cast<size_t>(b)];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      auto it = local.find(t);
      const int32_t id = it != local.end() ? it->second : (local[t] = intern(closure(t)));
      d.next_[i * 256 + static_cast<size_t>(b)] = id;
      if (work > max_work) return too_slow();
    }
    d.accepting_.push_back(std::binary_search(sets[i].begin(), sets[i].end(), final_state) ? 1 : 0);
  }

  // Keep only states that can still reach acceptance.
  const size_t n = sets.size();
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b)
      if (int32_t t = d.next_[s * 256 + static_cast<size_t>(b)]; t != kDead) preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> stack;
  for (size_t s = 0; s < n; ++s)
    if (d.accepting_[s]) {
      live[s] = 1;
      stack.push_back(static_cast<int32_t>(s));
    }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : preds[static_cast<size_t>(s)])
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        stack.push_back(p);
      }
  }
  if (!live[0]) return Status::error("the constraint matches no text at all");
  d.has_exit_.assign(n, 0);
  for (size_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b) {
      int32_t& t = d.next_[s * 256 + static_cast<size_t>(b)];
      if (t != kDead && !live[static_cast<size_t>(t)]) t = kDead;
      if (t != kDead) d.has_exit_[s] = 1;
    }
  return d;
}

}  // namespace quiver::structured
