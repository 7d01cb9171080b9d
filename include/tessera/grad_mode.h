// Grad mode: whether ops record autograd history (per thread, like torch.no_grad).
#pragma once

namespace tessera {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// RAII scope: `NoGradGuard g;` stops recording until the scope ends.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace tessera
