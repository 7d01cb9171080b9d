// A PipeLayer with parameters for the pipeline tests: tanh of a Linear; and their loss.
#pragma once
#include <string>

#include "tessera/ops.h"
#include "tessera/parallel/pipeline_module.h"

namespace pipe_test {

class Dense : public tessera::parallel::PipeLayer {
 public:
  Dense(tessera::nn::Module* parent, const std::string& name, int64_t in, int64_t out)
      : PipeLayer(parent, name), fc(this, "fc", in, out) {}
  tessera::parallel::PipeValue forward(const tessera::parallel::PipeValue& x) override {
    return {tessera::tanh(fc(x.at(0)))};
  }
  std::string type_name() const override { return "Dense"; }
  tessera::nn::Linear fc;
};

// The mean squared difference of the value's first tensor and the labels' first.
inline tessera::Tensor mse(const tessera::parallel::PipeValue& y,
                           const tessera::parallel::PipeValue& labels) {
  const tessera::Tensor d = y.at(0) - labels.at(0);
  return tessera::mean(d * d);
}

}  // namespace pipe_test
