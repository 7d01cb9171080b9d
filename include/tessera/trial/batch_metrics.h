// What a trial's train_batch and evaluate_batch return (Determined's Union[Tensor, Dict]):
// the loss alone, reported as "loss", or named scalar metrics.
//   return loss;                                  // {"loss": loss.item()}
//   return {{"loss", loss}, {"accuracy", acc}};   // tensors or numbers
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

#include "tessera/tensor.h"
#include "tessera/trial/reducer.h"

namespace tessera::trial {

// A scalar metric: a number, or a one-element tensor (read with item()).
class MetricValue {
 public:
  MetricValue(double v) : value_(v) {}  // NOLINT: implicit, as the metrics map's values
  MetricValue(int64_t v) : value_(static_cast<double>(v)) {}  // NOLINT
  MetricValue(int v) : value_(v) {}                           // NOLINT
  MetricValue(const Tensor& t);                               // NOLINT
  double value() const { return value_; }

 private:
  double value_;
};

struct BatchMetrics {
  BatchMetrics(const Tensor& loss) : values{{"loss", MetricValue(loss).value()}} {}  // NOLINT
  BatchMetrics(double loss) : values{{"loss", loss}} {}                              // NOLINT
  BatchMetrics(std::initializer_list<std::pair<const std::string, MetricValue>> metrics) {
    for (const auto& [name, v] : metrics) values[name] = v.value();
  }
  BatchMetrics(Metrics metrics) : values(std::move(metrics)) {}  // NOLINT
  Metrics values;
};

}  // namespace tessera::trial
