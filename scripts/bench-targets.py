#!/usr/bin/env python3
"""The benchmark figures that have a target, judged: `target NAME VALUE OP GOAL [before B] met|missed`.

Usage: bench-targets.py NOW_FILE [BEFORE_FILE] [--only PREFIX]
NOW_FILE and BEFORE_FILE hold `bench NAME VALUE UNIT` lines (a missing BEFORE_FILE is no baseline).
--only judges the targets whose names start with PREFIX (a benchmark run on its own).
docs/benchmarks.md lists the same targets with why each is set where it is.
"""
import os
import sys

TARGETS = [
    ("api.device_put_sql_ratio", ">=", 1.0), ("api.sync_keepup_ratio", ">=", 1.0),
    ("send.batch_accept_ratio", ">=", 0.5), ("send.e2e_ratio", ">=", 0.6),
    ("send.e2e_telemetry_ratio", ">=", 0.35), ("send.latency.p50_ms", "<=", 5), ("send.latency.p99_ms", "<=", 25),
    ("queue.pickup.p50_ms", "<=", 1), ("queue.drain.pgbench_ratio", ">=", 0.9), ("api.rss_mb", "<=", 60),
    ("worker.rss_mb", "<=", 80), ("send.e2e_two_workers_ratio", ">=", 0.95), ("webhooks.e2e_ratio", ">=", 0.5),
    ("webhooks.latency.p99_ms", "<=", 1000), ("cli.send_rate", ">=", 0.8),
    ("stats.p95_ms", "<=", 50),
    ("lanes.campaign.single_p99.after", "<=", 2000), ("lanes.batch.single_p99.after", "<=", 2000),
    ("lanes.batch.second_sender_first.after", "<=", 2000), ("lanes.campaign.ratio_to_idle.after", "<=", 10),
    ("lanes.batch.ratio_to_idle.after", "<=", 10), ("queue.retention.partition_drop_s", "<=", 1.0),
    ("notifications.retention.outcome_drop_s", "<=", 1.0),
]


def load(path):
    figures = {}
    if path and os.path.exists(path):
        for line in open(path):
            parts = line.split()
            if len(parts) == 4 and parts[0] == "bench":
                figures[parts[1]] = float(parts[2])
    # The larger resident set of either load phase.
    for process in ("api", "worker"):
        values = [figures[k] for k in (f"{process}.rss_mb", f"send.{process}_rss_mb") if k in figures]
        if values:
            figures[f"{process}.rss_mb"] = max(values)
    return figures


def main(argv):
    only = ""
    if "--only" in argv:
        i = argv.index("--only")
        only = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    now = load(argv[0])
    before = load(argv[1]) if len(argv) > 1 else {}
    print("# figure | target" + (" | before" if before else "") + " | now")
    for name, op, goal in TARGETS:
        if not name.startswith(only):
            continue
        value = now.get(name)
        met = value is not None and (value >= goal if op == ">=" else value <= goal)
        shown = "-" if value is None else f"{value:g}"
        prior = f" before {before[name]:g}" if name in before else (" before -" if before else "")
        print(f"target {name} {shown} {op} {goal:g}{prior} {'met' if met else 'missed'}")


if __name__ == "__main__":
    main(sys.argv[1:])
