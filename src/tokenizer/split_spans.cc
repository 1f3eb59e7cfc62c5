// split_spans: the delimiter behaviors of HF's NormalizedString::split, on byte spans.
// Matches and the gaps between them alternate; each behavior decides where a match goes.
#include <algorithm>

#include "tokenizer/pre_tokenizers.h"

namespace quiver {
namespace {

struct Piece {
  Span span;
  bool is_match;
};

std::vector<Piece> alternate(size_t length, const std::vector<Span>& matches, bool invert) {
  std::vector<Piece> pieces;
  if (length == 0) {
    pieces.push_back({{0, 0}, invert});
    return pieces;
  }
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.start) pieces.push_back({{prev, m.start}, invert});
    pieces.push_back({m, !invert});
    prev = m.end;
  }
  if (prev != length) pieces.push_back({{prev, length}, invert});
  return pieces;
}

}  // namespace

std::vector<Span> split_spans(size_t length, const std::vector<Span>& matches, SplitBehavior behavior,
                              bool invert) {
  std::vector<Piece> pieces = alternate(length, matches, invert);
  std::vector<Span> out;
  out.reserve(pieces.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Piece& p : pieces) out.push_back(p.span);
      break;
    case SplitBehavior::kRemoved:
      for (const Piece& p : pieces)
        if (!p.is_match) out.push_back(p.span);
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().end = p.span.end;
        } else {
          out.push_back(p.span);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().end = p.span.end;
        } else {
          out.push_back(p.span);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().start = it->span.start;
        } else {
          out.push_back(it->span);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

}  // namespace quiver
