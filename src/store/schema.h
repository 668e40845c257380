// What the store knows of its series, shared by the snapshot that reads them
// and the writers that check their appends against them; and the names
// reserved for runstore's own records.
#ifndef RUNSTORE_STORE_SCHEMA_H_
#define RUNSTORE_STORE_SCHEMA_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runstore/status.h"
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

// The store's schema as of a refresh made now, asked for by a writer the
// first time it defines a series its store's snapshot did not know
// (docs/design.md#writer-ids); nullopt once the store that opened the writer
// is closed.
using SchemaRefresher = std::function<Result<std::optional<StoreSchema>>()>;

// Reserved series holding resume markers (docs/format.md "Resolving keys").
inline constexpr std::string_view kResumeSeries = "~resume";
// The wall-clock times of WriterOptions::record_time (float64 Unix seconds).
inline constexpr std::string_view kTimeSeries = "~time";

}  // namespace runstore

#endif  // RUNSTORE_STORE_SCHEMA_H_
