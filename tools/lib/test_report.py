#!/usr/bin/env python3
"""Where the time of a tools/test run went: printed after ctest's summary.

Reads what tools/test left in its report folder (build/test-report/):
  phases.tsv     one line per phase: name, build tree or '-', start and end (ns since epoch)
  junit.xml      ctest --output-junit: each test's time and status
  tests.json     ctest --show-only=json-v1: each test's labels (its tier)
  ccache.before/.after  ccache --print-stats around the builds
and each built tree's .ninja_log (the steps that ran during its phase). Prints the phases,
the costliest compiles, the tests by tier, the slowest tests and the compiler cache's hit
rate, then, when the whole run passed the guard (45 minutes), says so in its last lines.
It never fails the run: the suite's verdict is ctest's.
"""

import argparse
import json
import os
import re
import sys
import time
import xml.etree.ElementTree as ET

GUARD_S = 45 * 60  # docs/testing.md: the budget; CI gives up at 90 minutes
TIERS = ["unit", "pg", "integration", "e2e", "chaos", "bench", "tsan", "fuzz", "helm",
         "console", "observability"]


def mmss(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def read_phases(path):
    phases = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, tree, start, end = line.rstrip("\n").split("\t")
                phases.append((name, tree, int(start), int(end)))
    except OSError:
        pass
    return phases


def ninja_steps(log_path, since_ns):
    """The steps of a .ninja_log (v5: start end mtime output hash) whose output was written
    at or after since_ns: those of this run's build of the tree."""
    steps = []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("#"):
                    continue
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    continue
                try:
                    start_ms, end_ms, mtime = int(parts[0]), int(parts[1]), int(parts[2])
                except ValueError:
                    continue
                if mtime >= since_ns:
                    steps.append(((end_ms - start_ms) / 1000.0, parts[3]))
    except OSError:
        pass
    # A step listed twice (several outputs of one command) counts once per output name.
    return steps


def read_ccache(path):
    stats = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    stats[parts[0]] = int(parts[1])
    except OSError:
        pass
    return stats


# The slots of the resource `machine` (tests/ctest-resources.json): a test that needs them all
# runs with no other test but the unit tests.
MACHINE_ALL = 64


def read_tests(path):
    """Each test's labels, and the names of the tests ctest runs alone: those that hold every
    slot of the resource `machine` (tests/CMakeLists.txt; only the unit tests, on idle cores,
    run beside them), or RUN_SERIAL."""
    labels, alone = {}, set()
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return labels, alone
    for test in doc.get("tests", []):
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                labels[test.get("name")] = list(prop.get("value") or [])
            elif prop.get("name") == "RUN_SERIAL" and prop.get("value"):
                alone.add(test.get("name"))
            elif prop.get("name") == "RESOURCE_GROUPS":
                for group in prop.get("value") or []:
                    for need in group.get("requirements", []):
                        if need.get(".type") == "machine" and need.get("slots", 0) >= MACHINE_ALL:
                            alone.add(test.get("name"))
    return labels, alone


def read_junit(path):
    """[(name, seconds, failed)] from ctest's junit file, and why it could not be read ('' when
    it could). A test's output is copied into the file as it was printed: bytes that are not
    UTF-8 or characters XML does not allow are replaced before parsing rather than losing every
    test's time to one test's output."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        return [], f"ctest wrote no junit file ({e.strerror})"
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        text = raw.decode("utf-8", errors="replace")
        text = re.sub("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", "?", text)
        text = re.sub(r"<\?xml[^>]*\?>", "", text, count=1)
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            return [], f"ctest's junit file is not readable XML ({e})"
    tests = []
    for case in root.iter("testcase"):
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            seconds = 0.0
        failed = case.find("failure") is not None or case.get("status") == "fail"
        tests.append((case.get("name", "?"), seconds, failed))
    return tests, ""


def tier_of(labels):
    for tier in TIERS:
        if tier in labels:
            return tier
    return labels[0] if labels else "(none)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--report-dir", required=True)
    parser.add_argument("--started-ns", type=int, required=True)
    parser.add_argument("--jobs", default="?")
    parser.add_argument("--slowest", type=int, default=15)
    args = parser.parse_args()

    now_ns = time.time_ns()
    total_s = (now_ns - args.started_ns) / 1e9
    out = []
    out.append("")
    out.append("== tools/test: where the time went (docs/testing.md) ==")
    out.append(f"{'phase':<14} {'wall':>7}  notes")
    # In the order they began: the tsan and fuzz builds run beside ctest (tools/test).
    phases = sorted(read_phases(os.path.join(args.report_dir, "phases.tsv")), key=lambda p: p[2])
    ctest_span = next(((start, end) for name, _, start, end in phases if name == "ctest"), None)
    compiles = []
    for name, tree, start, end in phases:
        note = ""
        if tree != "-":
            steps = ninja_steps(os.path.join(args.root, "build", tree, ".ninja_log"), start)
            objects = [s for s in steps if s[1].endswith(".o")]
            cpu = sum(s[0] for s in objects)
            others = len(steps) - len(objects)
            if ctest_span and start < ctest_span[1] and end > ctest_span[0]:
                # Ninja's log holds each compile's wall time: on idle cores beside the tests
                # that is stretched by every while a test held them (the tsan tree's HTTP
                # client: 189 s there, 28 s of a core alone), so it is no compiler time, and
                # its files are left out of the costliest below.
                note = (f"{len(objects)} compiles, {cpu:.0f} s of their wall time summed, {others} "
                        "other steps, beside ctest on idle cores")
            else:
                note = f"{len(objects)} compiles, {cpu:.0f} s of compiler time, {others} other steps"
                compiles += [(s[0], tree, s[1]) for s in objects]
        if name == "ctest":
            note = f"-j {args.jobs}"
        out.append(f"{name:<14} {mmss((end - start) / 1e9):>7}  {note}")
    out.append(f"{'total':<14} {mmss(total_s):>7}  the guard at {mmss(GUARD_S)}, CI's limit 90:00")

    if compiles:
        compiles.sort(reverse=True)
        out.append("")
        out.append("costliest compiles of this run (seconds, tree, object; the trees built before ctest):")
        for seconds, tree, obj in compiles[:8]:
            out.append(f"  {seconds:7.1f}  {tree:<5} {obj}")

    before = read_ccache(os.path.join(args.report_dir, "ccache.before"))
    after = read_ccache(os.path.join(args.report_dir, "ccache.after"))
    if after:
        def delta(key):
            return after.get(key, 0) - before.get(key, 0)
        hits = delta("direct_cache_hit") + delta("preprocessed_cache_hit")
        misses = delta("cache_miss")
        calls = hits + misses
        rate = f"{100.0 * hits / calls:.1f}%" if calls else "n/a"
        out.append("")
        out.append(f"compiler cache (ccache): {hits} hits, {misses} misses of {calls} compiles: "
                   f"hit rate {rate}")
    else:
        out.append("")
        out.append("compiler cache: ccache is not installed (tools/setup installs it)")

    tests, unread = read_junit(os.path.join(args.report_dir, "junit.xml"))
    labels, alone = read_tests(os.path.join(args.report_dir, "tests.json"))
    if tests:
        tiers = {}
        for name, seconds, failed in tests:
            tier = tier_of(labels.get(name, []))
            count, total, failures = tiers.get(tier, (0, 0.0, 0))
            tiers[tier] = (count + 1, total + seconds, failures + (1 if failed else 0))
        out.append("")
        out.append(f"tests by tier ({len(tests)} tests; the sums overlap when ctest runs several at once):")
        out.append(f"  {'tier':<14} {'tests':>5} {'sum':>7} {'failed':>6}")
        for tier, (count, total, failures) in sorted(tiers.items(), key=lambda kv: -kv[1][1]):
            out.append(f"  {tier:<14} {count:>5} {mmss(total):>7} {failures:>6}")
        alone_s = sum(seconds for name, seconds, _ in tests if name in alone)
        if alone_s:
            out.append(f"  run alone (the whole machine): {sum(1 for t in tests if t[0] in alone)} tests, "
                       f"{mmss(alone_s)}: ctest's wall time can be no shorter")
        out.append("")
        out.append(f"slowest {args.slowest} tests:")
        for name, seconds, failed in sorted(tests, key=lambda t: -t[1])[:args.slowest]:
            mark = "  FAILED" if failed else ""
            out.append(f"  {seconds:7.1f} s  {tier_of(labels.get(name, [])):<12} {name}{mark}")
    else:
        out.append("")
        out.append(f"no test times: {unread or 'the junit file holds no test'}")

    if total_s > GUARD_S:
        bar = "!" * 78
        out.append("")
        out.append(bar)
        out.append(f"!! tools/test took {mmss(total_s)}, past the {mmss(GUARD_S)} guard "
                   f"(CI gives up at 90:00).")
        out.append("!! The suite is drifting toward CI's limit: find the cause in the tables above")
        out.append("!! and in docs/testing.md before adding to it.")
        out.append(bar)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
