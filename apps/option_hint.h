// "Did you mean" for the programs' command lines: an unknown option or command close to a known
// one (a typo, an underscore for a dash: --global_batch) gets the known one named after the error.
// Header-only, as apps/ builds each executable from its own files. No collective calls.
#pragma once

#include <algorithm>
#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace lockstep::apps {

// Edits (insert, delete, replace, swap two neighbours) turning a into b, with '_' and '-' taken
// as the same letter.
inline size_t edit_distance(const std::string& a, const std::string& b) {
  auto same = [](char x, char y) {
    return x == y || (x == '_' && y == '-') || (x == '-' && y == '_');
  };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The one name of `known` nearest to `word`, where it is near enough to be a slip (at most 2
// edits, and fewer than a third of the word's letters); "" when none is, or two are as near.
inline std::string nearest_name(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = 3;
  bool tie = false;
  for (const std::string& name : known) {
    const size_t d = edit_distance(word, name);
    if (d > 2 || 3 * d >= word.size()) continue;
    if (d < best_distance) {
      best = name;
      best_distance = d;
      tie = false;
    } else if (d == best_distance && name != best) {
      tie = true;
    }
  }
  return tie ? "" : best;
}

// A Boost.Program_options error's text, with "; did you mean --global-batch?" where it is an
// unknown option near one of `options` (on the command line "--name", in a config file "name").
inline std::string option_error_text(const boost::program_options::error& e,
                                     const boost::program_options::options_description& options) {
  std::string text = e.what();
  const auto* unknown = dynamic_cast<const boost::program_options::unknown_option*>(&e);
  if (unknown == nullptr) return text;
  std::string word = unknown->get_option_name();
  const bool dashed = word.rfind("--", 0) == 0;
  if (dashed) word = word.substr(2);
  std::vector<std::string> names;
  for (const auto& option : options.options()) names.push_back(option->long_name());
  const std::string near = nearest_name(word, names);
  if (!near.empty()) text += "; did you mean " + std::string(dashed ? "--" : "") + near + "?";
  return text;
}

}  // namespace lockstep::apps
