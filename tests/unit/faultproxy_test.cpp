// The fault proxy's pure parts: the control grammar and its bounds, the mode and its
// expiry, and when the shaper releases bytes (latency, bandwidth, blackhole). Time is a
// parameter everywhere: no sockets, no sleeps.
#include <gtest/gtest.h>

#include <chrono>

#include "tools/faultproxy/control.hpp"
#include "tools/faultproxy/mode.hpp"
#include "tools/faultproxy/shaper.hpp"

namespace agentfleet::faultproxy {
namespace {

using namespace std::chrono_literals;

template <typename T>
T command_of(std::string_view line) {
  ParsedCommand parsed = parse_control_command(line);
  EXPECT_TRUE(parsed.command) << line << ": " << parsed.error;
  EXPECT_TRUE(parsed.command && std::holds_alternative<T>(*parsed.command)) << line;
  return parsed.command && std::holds_alternative<T>(*parsed.command) ? std::get<T>(*parsed.command)
                                                                      : T{};
}

std::string error_of(std::string_view line) {
  ParsedCommand parsed = parse_control_command(line);
  EXPECT_FALSE(parsed.command) << line;
  return parsed.error;
}

// A steady-clock reading far from the epoch, moved by hand.
const TimePoint kT0 = TimePoint(24h);

TEST(FaultProxyControl, EveryCommandParsesWithItsArguments) {
  command_of<PassCommand>("pass");
  command_of<ResetCommand>("reset");
  command_of<StatusCommand>(" status \r");
  command_of<HelpCommand>("help");
  EXPECT_FALSE(command_of<BlackholeCommand>("blackhole").seconds);
  EXPECT_EQ(command_of<BlackholeCommand>("blackhole 2").seconds, 2);
  EXPECT_FALSE(command_of<RefuseCommand>("refuse").seconds);
  EXPECT_EQ(command_of<RefuseCommand>("refuse\t3600").seconds, 3600);
  LatencyCommand latency = command_of<LatencyCommand>("latency 300");
  EXPECT_EQ(latency.us, 300'000);
  EXPECT_FALSE(latency.seconds);
  latency = command_of<LatencyCommand>("latency 0 1");
  EXPECT_EQ(latency.us, 0);
  // Up to 3 decimals: a round trip of 1 ms is `latency 0.5` each way.
  EXPECT_EQ(command_of<LatencyCommand>("latency 0.5").us, 500);
  EXPECT_EQ(command_of<LatencyCommand>("latency 2.25").us, 2250);
  EXPECT_EQ(command_of<LatencyCommand>("latency 60000.000").us, 60'000'000);
  EXPECT_EQ(latency.seconds, 1);
  BandwidthCommand bandwidth = command_of<BandwidthCommand>("bandwidth 1000000000 10");
  EXPECT_EQ(bandwidth.bytes_per_s, 1'000'000'000);
  EXPECT_EQ(bandwidth.seconds, 10);
  EXPECT_EQ(command_of<BandwidthCommand>("bandwidth 1").bytes_per_s, 1);
}

TEST(FaultProxyControl, EveryNumberIsBounded) {
  EXPECT_EQ(error_of("blackhole 0"), "SECONDS must be 1..3600");
  EXPECT_EQ(error_of("blackhole 3601"), "SECONDS must be 1..3600");
  EXPECT_EQ(error_of("refuse -1"), "SECONDS must be 1..3600");
  EXPECT_EQ(error_of("latency 60001"), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency -1"), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency 0.1234"), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency 1."), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency 1.x"), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency 60000.5"), "MS must be 0..60000");
  EXPECT_EQ(error_of("latency 10 0"), "SECONDS must be 1..3600");
  EXPECT_EQ(error_of("bandwidth 0"), "BYTES_PER_S must be 1..1000000000");
  EXPECT_EQ(error_of("bandwidth 1000000001"), "BYTES_PER_S must be 1..1000000000");
  EXPECT_EQ(error_of("bandwidth 99999999999999999999999"), "BYTES_PER_S must be 1..1000000000");
  EXPECT_EQ(error_of("bandwidth 1e9"), "BYTES_PER_S must be 1..1000000000");
  EXPECT_EQ(error_of("bandwidth 100 2x"), "SECONDS must be 1..3600");
  EXPECT_NE(error_of(std::string(kMaxControlLine + 1, 'a')).find("longer than 256 bytes"),
            std::string::npos);
}

TEST(FaultProxyControl, AnythingElseIsRefusedWithTheCommandList) {
  for (std::string_view line : {"", "   ", "shutdown", "pass now", "reset 3", "status all",
                                "latency", "bandwidth", "blackhole 1 2", "latency 1 2 3", "PASS"}) {
    EXPECT_NE(error_of(line).find(kControlHelp), std::string::npos) << line;
  }
}

TEST(FaultProxyControl, OnlyFaultsReplaceTheMode) {
  EXPECT_TRUE(sets_mode(PassCommand{}));
  EXPECT_TRUE(sets_mode(BlackholeCommand{}));
  EXPECT_TRUE(sets_mode(LatencyCommand{}));
  EXPECT_TRUE(sets_mode(BandwidthCommand{}));
  EXPECT_TRUE(sets_mode(RefuseCommand{}));
  EXPECT_FALSE(sets_mode(ResetCommand{}));
  EXPECT_FALSE(sets_mode(StatusCommand{}));
  EXPECT_FALSE(sets_mode(HelpCommand{}));
}

TEST(FaultProxyMode, ALaterCommandReplacesAnEarlierOneAndATimedOneRevertsToPass) {
  FaultState state;
  EXPECT_EQ(state.mode().kind, ModeKind::kPass);
  EXPECT_EQ(state.apply(LatencyCommand{300'000, std::nullopt}, kT0),
            "mode=latency:300ms until pass");
  EXPECT_EQ(state.mode().latency_us, 300'000);
  EXPECT_EQ(state.apply(LatencyCommand{2'500, std::nullopt}, kT0), "mode=latency:2.5ms until pass");
  EXPECT_FALSE(state.expire(kT0 + 10000s));  // untimed: until replaced
  EXPECT_EQ(state.apply(BlackholeCommand{2}, kT0), "mode=blackhole for 2 s");
  EXPECT_EQ(state.mode().kind, ModeKind::kBlackhole);
  EXPECT_FALSE(state.expire(kT0 + 1999ms));
  EXPECT_EQ(state.mode().kind, ModeKind::kBlackhole);
  const auto generation = state.mode().generation;
  EXPECT_TRUE(state.expire(kT0 + 2s));
  EXPECT_EQ(state.mode().kind, ModeKind::kPass);
  EXPECT_FALSE(state.mode().until);
  EXPECT_GT(state.mode().generation, generation);
  EXPECT_FALSE(state.expire(kT0 + 3s));  // once

  EXPECT_EQ(state.apply(BandwidthCommand{1000, 5}, kT0), "mode=bandwidth:1000B/s for 5 s");
  EXPECT_EQ(state.apply(RefuseCommand{std::nullopt}, kT0 + 1s), "mode=refuse until pass");
  EXPECT_FALSE(state.expire(kT0 + 6s)) << "the bandwidth fault's time no longer applies";
  EXPECT_EQ(state.apply(PassCommand{}, kT0 + 7s), "mode=pass");
  EXPECT_EQ(state.mode().kind, ModeKind::kPass);
  // reset, status and help leave the mode alone.
  state.apply(BlackholeCommand{}, kT0);
  EXPECT_EQ(state.apply(ResetCommand{}, kT0), "mode=blackhole");
  EXPECT_EQ(state.mode().kind, ModeKind::kBlackhole);
}

TEST(FaultProxyMode, StatusShowsTheModeTheCountersAndTheTimeLeft) {
  FaultState state;
  ProxyCounters counters{2, 7, 1234, 56789};
  EXPECT_EQ(status_text(state.mode(), counters, kT0),
            "mode=pass connections=2 accepted=7 bytes_up=1234 bytes_down=56789");
  state.apply(BandwidthCommand{4096, 10}, kT0);
  EXPECT_EQ(status_text(state.mode(), counters, kT0 + 2500ms),
            "mode=bandwidth:4096B/s connections=2 accepted=7 bytes_up=1234 bytes_down=56789 "
            "left_s=8");
  state.apply(LatencyCommand{5'000, std::nullopt}, kT0);
  EXPECT_EQ(mode_name(state.mode()), "latency:5ms");
}

Mode mode_of(const ControlCommand& command) {
  FaultState state;
  state.apply(command, kT0);
  return state.mode();
}

TEST(FaultProxyShaper, PassAndRefuseReleaseEverythingAtOnce) {
  DirectionShaper shaper;
  for (const Mode& mode : {Mode{}, mode_of(RefuseCommand{})}) {
    Admission a = shaper.admit(mode, kT0, 65536, kT0);
    EXPECT_EQ(a.bytes, 65536u);
  }
}

TEST(FaultProxyShaper, BlackholeReleasesNothingAndNamesNoRetryTime) {
  DirectionShaper shaper;
  const Mode mode = mode_of(BlackholeCommand{});
  for (auto later : {0s, 1s, 3600s}) {
    Admission a = shaper.admit(mode, kT0, 100, kT0 + later);
    EXPECT_EQ(a.bytes, 0u);
    EXPECT_FALSE(a.retry_at) << "only a mode change ends a blackhole";
  }
}

TEST(FaultProxyShaper, LatencyReleasesEachChunkItsDelayAfterItWasRead) {
  DirectionShaper shaper;
  const Mode mode = mode_of(LatencyCommand{300'000, std::nullopt});
  Admission a = shaper.admit(mode, kT0, 10, kT0);
  EXPECT_EQ(a.bytes, 0u);
  ASSERT_TRUE(a.retry_at);
  EXPECT_EQ(*a.retry_at, kT0 + 300ms);
  a = shaper.admit(mode, kT0, 10, kT0 + 299ms);
  EXPECT_EQ(a.bytes, 0u);
  EXPECT_EQ(*a.retry_at, kT0 + 300ms);
  EXPECT_EQ(shaper.admit(mode, kT0, 10, kT0 + 300ms).bytes, 10u);
  // A later chunk waits for its own read time, not for the one before it: delay, not a
  // throughput cap (a chunk read 1 ms later is due 1 ms later).
  EXPECT_EQ(*shaper.admit(mode, kT0 + 1ms, 1 << 20, kT0 + 300ms).retry_at, kT0 + 301ms);
  EXPECT_EQ(shaper.admit(mode, kT0 + 1ms, 1 << 20, kT0 + 301ms).bytes, 1u << 20);
  // Below a millisecond: due that many microseconds after the read.
  const Mode half = mode_of(LatencyCommand{500, std::nullopt});
  EXPECT_EQ(*shaper.admit(half, kT0, 10, kT0).retry_at, kT0 + 500us);
  EXPECT_EQ(shaper.admit(half, kT0, 10, kT0 + 500us).bytes, 10u);
  // Latency 0 is pass.
  EXPECT_EQ(shaper.admit(mode_of(LatencyCommand{0, std::nullopt}), kT0, 5, kT0).bytes, 5u);
}

// Drains `total` bytes through a shaper as the proxy's writer would, jumping the clock to
// each retry time; returns when the last byte went.
TimePoint drain(DirectionShaper& shaper, const Mode& mode, std::size_t total, std::size_t chunk,
                TimePoint start, std::size_t* largest_slice = nullptr) {
  TimePoint now = start;
  std::size_t left_in_chunk = std::min(chunk, total);
  int asks = 0;
  while (total > 0) {
    Admission a = shaper.admit(mode, start, left_in_chunk, now);
    EXPECT_LT(++asks, 1'000'000) << "the shaper does not make progress";
    if (asks >= 1'000'000) {
      break;
    }
    if (a.bytes == 0) {
      EXPECT_TRUE(a.retry_at);
      EXPECT_GT(*a.retry_at, now) << "a retry time in the past would spin";
      now = *a.retry_at;
      continue;
    }
    EXPECT_LE(a.bytes, left_in_chunk);
    if (largest_slice != nullptr) {
      *largest_slice = std::max(*largest_slice, a.bytes);
    }
    total -= a.bytes;
    left_in_chunk -= a.bytes;
    if (left_in_chunk == 0) {
      left_in_chunk = std::min(chunk, total);
    }
  }
  return now;
}

TEST(FaultProxyShaper, BandwidthHoldsEachDirectionToItsRate) {
  const Mode mode = mode_of(BandwidthCommand{100'000, std::nullopt});
  EXPECT_EQ(burst_bytes(100'000), 5000u);
  DirectionShaper shaper;
  std::size_t largest = 0;
  // 200 KB at 100 KB/s: 2 s, less the bucket's first burst (5000 bytes, 50 ms).
  const TimePoint done = drain(shaper, mode, 200'000, 65536, kT0, &largest);
  const double took_s = std::chrono::duration<double>(done - kT0).count();
  EXPECT_NEAR(took_s, 1.95, 0.01);
  EXPECT_LE(largest, burst_bytes(100'000)) << "a chunk goes in slices of at most the burst";
}

TEST(FaultProxyShaper, BandwidthAtTheExtremesStillMakesProgress) {
  // 1 byte/s: one byte a second, the burst being one byte.
  EXPECT_EQ(burst_bytes(1), 1u);
  DirectionShaper slow;
  const Mode crawl = mode_of(BandwidthCommand{1, std::nullopt});
  const TimePoint done = drain(slow, crawl, 5, 5, kT0);
  EXPECT_NEAR(std::chrono::duration<double>(done - kT0).count(), 4.0, 0.001);
  // 1e9 bytes/s: bursts capped at 1 MiB, 64 KiB chunks go whole.
  EXPECT_EQ(burst_bytes(1'000'000'000), 1u << 20);
  DirectionShaper fast;
  const Mode flood = mode_of(BandwidthCommand{1'000'000'000, std::nullopt});
  EXPECT_EQ(fast.admit(flood, kT0, 65536, kT0).bytes, 65536u);
}

TEST(FaultProxyShaper, AnIdleBucketRefillsOnlyToItsBurst) {
  const Mode mode = mode_of(BandwidthCommand{1000, std::nullopt});  // burst: 50 bytes
  DirectionShaper shaper;
  EXPECT_EQ(shaper.admit(mode, kT0, 1000, kT0).bytes, 50u);
  Admission a = shaper.admit(mode, kT0, 1000, kT0);
  EXPECT_EQ(a.bytes, 0u);
  ASSERT_TRUE(a.retry_at);
  EXPECT_EQ(*a.retry_at, kT0 + 50ms);
  // An hour idle is still one burst, not an hour's worth.
  EXPECT_EQ(shaper.admit(mode, kT0, 1000, kT0 + 3600s).bytes, 50u);
  EXPECT_EQ(shaper.admit(mode, kT0, 1000, kT0 + 3600s).bytes, 0u);
}

TEST(FaultProxyShaper, ANewBandwidthCommandStartsAFullBucket) {
  FaultState state;
  state.apply(BandwidthCommand{1000, std::nullopt}, kT0);
  DirectionShaper shaper;
  EXPECT_EQ(shaper.admit(state.mode(), kT0, 1000, kT0).bytes, 50u);
  EXPECT_EQ(shaper.admit(state.mode(), kT0, 1000, kT0).bytes, 0u);
  state.apply(BandwidthCommand{2000, std::nullopt}, kT0);  // burst: 100 bytes
  EXPECT_EQ(shaper.admit(state.mode(), kT0, 1000, kT0).bytes, 100u);
  // Pass in between releases everything, and bandwidth afterwards starts full again.
  state.apply(PassCommand{}, kT0);
  EXPECT_EQ(shaper.admit(state.mode(), kT0, 1000, kT0).bytes, 1000u);
  state.apply(BandwidthCommand{2000, std::nullopt}, kT0);
  EXPECT_EQ(shaper.admit(state.mode(), kT0, 1000, kT0).bytes, 100u);
}

}  // namespace
}  // namespace agentfleet::faultproxy
