// LRU, until the policies of include/kail/expert_cache.h land.
#include "stream/victim_policy.h"

#include <list>
#include <unordered_map>

namespace kail {

namespace {

uint64_t key_of(int layer, int32_t expert) { return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert); }

class lru_policy final : public victim_policy {
  public:
    void insert(int layer, int32_t expert) override { access(layer, expert); }
    void access(int layer, int32_t expert) override {
        const uint64_t k = key_of(layer, expert);
        auto it = pos_.find(k);
        if (it != pos_.end()) order_.erase(it->second);
        order_.push_front(k);
        pos_[k] = order_.begin();
    }
    void erase(int layer, int32_t expert) override {
        auto it = pos_.find(key_of(layer, expert));
        if (it == pos_.end()) return;
        order_.erase(it->second);
        pos_.erase(it);
    }
    bool victim(const std::function<bool(int, int32_t)> & evictable, int & layer, int32_t & expert) override {
        for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
            const int l = static_cast<int>(*it >> 32);
            const int32_t e = static_cast<int32_t>(*it & 0xffffffffu);
            if (evictable(l, e)) {
                layer = l;
                expert = e;
                return true;
            }
        }
        return false;
    }

  private:
    std::list<uint64_t> order_;  // most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos_;
};

} // namespace

std::unique_ptr<victim_policy> make_victim_policy() { return std::unique_ptr<victim_policy>(new lru_policy()); }

} // namespace kail
