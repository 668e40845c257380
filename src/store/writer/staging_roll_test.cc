// StagingRoll on its own: when a staging writer seals its open segment for
// shipping, against the rules of docs/design.md#staging.
#include "store/writer/staging_roll.h"

#include <gtest/gtest.h>

#include <chrono>

namespace runstore::writer {
namespace {

using Clock = StagingRoll::Clock;
using std::chrono::seconds;

// A caller waiting for a shipment: the idle writer seals; if the segment had
// uncommitted frames it is put off to the next commit, which seals; a caller
// still waiting asks the idle writer again; after the seal nothing is wanted.
TEST(StagingRollTest, AWaitedShipmentSealsWhenIdleOrAtTheNextCommit) {
  StagingRoll roll(/*ship_every_s=*/0);
  EXPECT_FALSE(roll.requested());
  EXPECT_FALSE(roll.IdleRollDue());
  EXPECT_FALSE(roll.RetryDeferred()) << "nothing to retry before a request";

  roll.Request();
  EXPECT_TRUE(roll.IdleRollDue());
  roll.AfterIdleRoll(/*sealed=*/false);  // uncommitted frames: put off
  EXPECT_TRUE(roll.requested()) << "still wanted";
  EXPECT_FALSE(roll.IdleRollDue()) << "the idle writer does not spin on a put-off seal";
  EXPECT_TRUE(roll.RetryDeferred()) << "a caller still waiting asks again";
  EXPECT_TRUE(roll.IdleRollDue());
  EXPECT_FALSE(roll.RetryDeferred()) << "asked once";

  roll.AfterIdleRoll(false);
  roll.AfterTask(/*sealed=*/false, /*was_commit=*/false);  // a block: nothing changes
  EXPECT_TRUE(roll.requested());
  EXPECT_FALSE(roll.IdleRollDue());
  roll.AfterTask(/*sealed=*/false, /*was_commit=*/true);  // a commit that could not seal
  EXPECT_TRUE(roll.requested());
  EXPECT_FALSE(roll.IdleRollDue()) << "left to the next commit";
  roll.AfterTask(/*sealed=*/true, /*was_commit=*/true);
  EXPECT_FALSE(roll.requested()) << "the seal made the shipment";
  EXPECT_FALSE(roll.IdleRollDue());
  EXPECT_FALSE(roll.RetryDeferred());

  roll.Request();
  roll.AfterIdleRoll(/*sealed=*/true);
  EXPECT_FALSE(roll.requested());
}

// ship_every_s bounds how long a commit stays in an open segment: counted
// from the first commit the segment holds (not later ones), no deadline
// while a seal is already wanted or nothing is unshipped, and a seal starts
// the count again.
TEST(StagingRollTest, ShipEveryCountsFromTheFirstUnshippedCommit) {
  StagingRoll roll(/*ship_every_s=*/10);
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(roll.ShipDeadline()) << "nothing unshipped";
  roll.Committed(t0);
  roll.Committed(t0 + seconds(5));  // a later commit does not move the deadline
  ASSERT_TRUE(roll.ShipDeadline());
  EXPECT_EQ(*roll.ShipDeadline(), t0 + seconds(10));

  roll.Tick(roll.ShipDeadline(), t0 + seconds(9));
  EXPECT_FALSE(roll.requested()) << "before the deadline";
  roll.Tick(roll.ShipDeadline(), t0 + seconds(10));
  EXPECT_TRUE(roll.requested()) << "at the deadline";
  EXPECT_FALSE(roll.ShipDeadline()) << "no deadline while a seal is wanted";

  roll.Sealed();
  roll.AfterTask(/*sealed=*/true, /*was_commit=*/true);
  EXPECT_FALSE(roll.ShipDeadline()) << "the seal shipped every commit";
  roll.Tick(t0 + seconds(10), t0 + seconds(20));
  EXPECT_FALSE(roll.requested()) << "a deadline of the sealed segment asks nothing";
  roll.Committed(t0 + seconds(30));
  EXPECT_EQ(*roll.ShipDeadline(), t0 + seconds(40)) << "counted again from the next commit";

  StagingRoll unbounded(/*ship_every_s=*/0);
  unbounded.Committed(t0);
  EXPECT_FALSE(unbounded.ShipDeadline()) << "ship_every_s 0: only the size target seals";
  unbounded.Tick(std::nullopt, t0 + seconds(1000000));
  EXPECT_FALSE(unbounded.requested());
}

}  // namespace
}  // namespace runstore::writer
