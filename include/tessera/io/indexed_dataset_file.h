// DeepSpeed's (and Megatron's) MMapIndexedDataset files, the format of its data analyzer's
// index_to_sample and index_to_metric outputs: PREFIX.bin holds the rows' values back to back,
// PREFIX.idx a header ("MMIDIDX\0\0", version 1, a dtype code), the row count, the document
// count, each row's length (int32) and byte offset (int64), and the document boundaries.
// Tessera reads the files DeepSpeed's analyzer wrote and writes its own metric caches in the
// same format (so either side can read the other's).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io {

using IndexedRows = std::vector<std::vector<int64_t>>;

// Every row of PREFIX.idx/.bin as int64. Errors name the file, the byte offset and what does
// not fit (a bad magic or version, an unknown dtype code, counts or offsets past the file's
// end, a uint64 value past int64); `what` names the config key that gave the prefix.
IndexedRows read_indexed_dataset(const std::string& prefix, const std::string& what);

// Writes `rows` as PREFIX.bin and PREFIX.idx (one document), each atomically, in the smallest
// integer dtype that holds every value (DeepSpeed's find_fit_int_dtype).
void write_indexed_dataset(const std::string& prefix, const IndexedRows& rows);

}  // namespace tessera::io
