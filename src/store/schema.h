// What the store knows of its series, shared by the snapshot that reads them
// and the writers that check their appends against them; and the names
// reserved for runstore's own records.
#ifndef RUNSTORE_STORE_SCHEMA_H_
#define RUNSTORE_STORE_SCHEMA_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runstore/types.h"

namespace runstore {

// The type of a series as its first block fixes it (docs/format.md "Schema
// of a series").
struct SeriesSchema {
  DType dtype = DType::kFloat64;
  bool variable_shape = false;
  std::vector<int64_t> shape;
};
using StoreSchema = std::unordered_map<std::string, SeriesSchema>;

// Reserved series holding resume markers (docs/format.md "Resolving keys").
inline constexpr std::string_view kResumeSeries = "~resume";
// The wall-clock times of WriterOptions::record_time (float64 Unix seconds).
inline constexpr std::string_view kTimeSeries = "~time";

}  // namespace runstore

#endif  // RUNSTORE_STORE_SCHEMA_H_
