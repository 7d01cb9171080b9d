// How PipelineModule splits its layers among pipeline stages, DeepSpeed's methods: the stages'
// layer bounds (parts + 1 indices, stage s owning layers [bounds[s], bounds[s + 1])).
//   "uniform"       as many layers per stage as can be, the first stages one more
//                   (deepspeed.runtime.utils.partition_uniform)
//   "parameters"    balanced by each layer's trainable parameter count
//   "type:REGEX"    balanced by the layers whose type name matches REGEX (case-insensitive,
//                   searched anywhere in the name): "type:transformer" splits the blocks evenly
// Balanced: DeepSpeed's partition_balanced, a dynamic programme over the linear partition
// problem minimising the spread (largest part minus smallest), ties to the later cut, so the
// bounds equal DeepSpeed's. Explicit bounds may be given instead.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel {

std::vector<int64_t> partition_uniform(int64_t items, int64_t parts);
std::vector<int64_t> partition_balanced(const std::vector<double>& weights, int64_t parts);

struct LayerInfo {
  std::string type_name;   // what "type:" matches
  int64_t parameters = 0;  // trainable parameters, for "parameters"
};

// The bounds by `method` for `stages` stages; an unknown method, a type regex that matches no
// layer, or bad explicit bounds is an error naming it.
std::vector<int64_t> partition_layers(const std::string& method,
                                      const std::vector<LayerInfo>& layers, int64_t stages);
// Explicit bounds, checked: stages + 1 non-decreasing indices from 0 to the layer count.
std::vector<int64_t> check_partition(const std::vector<int64_t>& bounds, int64_t layers,
                                     int64_t stages);

}  // namespace tessera::parallel
