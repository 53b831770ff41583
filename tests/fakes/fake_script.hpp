// The scripted values both fake SMI libraries serve: the file named by an environment variable
// holds one sampling round per line, `key=value` words that apply to every device; the fake moves
// to the next line at each device count after the first (the last line repeats).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fake_smi {

class Script {
 public:
  void load(const char* env_var) {
    rounds_.clear();
    const char* path = std::getenv(env_var);
    std::ifstream in(path ? path : "");
    for (std::string line; std::getline(in, line);) {
      Round round;
      std::stringstream words(line);
      for (std::string word; words >> word;)
        if (const auto eq = word.find('='); eq != std::string::npos)
          round[word.substr(0, eq)] = std::stod(word.substr(eq + 1));
      if (!round.empty()) rounds_.push_back(round);
    }
    if (rounds_.empty()) rounds_.push_back({{"devices", 1}});
  }
  // A device count: the next round, except for the very first count.
  void next_round() {
    if (!first_ && current_ + 1 < rounds_.size()) ++current_;
    first_ = false;
  }
  // The round's value, else the board both fakes describe by default (0 for counters and flags).
  double value(const std::string& key) const {
    static const std::map<std::string, double> defaults = {{"devices", 1},
                                                           {"temp_edge", 40},
                                                           {"temp_junction", 40},
                                                           {"temp_memory", 40},
                                                           {"power_w", 300},
                                                           {"power_cap_w", 750},
                                                           {"gfxclk", 2100},
                                                           {"uclk", 1300},
                                                           {"busy", 90},
                                                           {"vram_used", 1 << 30},
                                                           {"vram_total", 64.0 * (1 << 30)},
                                                           {"lib_major", 26}};
    const Round& now = rounds_[current_ < rounds_.size() ? current_ : rounds_.size() - 1];
    if (const auto it = now.find(key); it != now.end()) return it->second;
    const auto it = defaults.find(key);
    return it == defaults.end() ? 0 : it->second;
  }
  // Whether a query about device `index` answers (`fail=1`: none does).
  bool answers(uint32_t index) const { return index < value("devices") && value("fail") == 0; }

 private:
  using Round = std::map<std::string, double>;
  std::vector<Round> rounds_;
  size_t current_ = 0;
  bool first_ = true;
};

}  // namespace fake_smi
