// Reads the scalars of a TensorBoard event file (as EventFileWriter writes them, or any
// TFRecord file of Event records): every record's length and CRC-32C are checked, and a bad one
// is an error naming the file and byte offset. A truncated last record (a writer killed
// mid-record) ends the file, as in TensorBoard.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::io {

// tag -> (step, value) in file order.
using ScalarSeries = std::map<std::string, std::vector<std::pair<int64_t, double>>>;

ScalarSeries read_event_scalars(const std::string& path);

}  // namespace tessera::io
