// The checks of what a writer is given: values by themselves and against
// their series' schema, run ids, writer ids; and the default writer id.
#ifndef RUNSTORE_STORE_WRITER_VALUE_CHECKS_H_
#define RUNSTORE_STORE_WRITER_VALUE_CHECKS_H_

#include <span>
#include <string>
#include <string_view>

#include "runstore/env.h"
#include "runstore/status.h"
#include "runstore/types.h"
#include "store/schema.h"

namespace runstore::writer {

// Checks a value by itself: valid dtype, rank, dimensions, byte count, and
// UTF-8 for a string.
Status CheckValue(std::string_view name, const ValueRef& value);
// The values of a batch of `n` records given at once (AppendBatch,
// AppendColumns, named `what` in the message): numbers whose first dimension
// is `n`, then CheckValue.
Status CheckBatchValues(std::string_view what, std::string_view name, size_t n,
                        const ValueRef& values);
// Describes a mismatch of `value` against `schema`, or returns OK.
Status CheckValueAgainst(std::string_view name, const SeriesSchema& schema, const ValueRef& value);
// ValidateRunId of each run, once per run of equal consecutive ids: a batch
// of one run's records (log_many with one run id, a Python writer's step
// tape) repeats the same view of the same bytes.
Status ValidateRunIds(std::span<const RunRef> runs);
// "[2, 3]".
std::string ShapeString(std::span<const int64_t> shape);
// 1 to 64 characters of letters, digits, '.', '_' and '-'.
Status ValidateWriterId(const std::string& id);
// The host name, the pid and 64 random bits (util/random.h): two writers
// never share one.
std::string DefaultWriterId();

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_VALUE_CHECKS_H_
