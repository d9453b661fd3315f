#!/usr/bin/env python3
"""Writes the figures of a `make bench` run into docs/benchmarks.md.

    scripts/bench-table.py [--doc PATH] [--stdout] OUTPUT

OUTPUT is what `make bench` printed (scripts/bench.sh keeps the whole of it in
.data/bench/latest.txt). It reads:

    # date: 2025-01-31T10:00Z             when the run started (UTC)
    # machine: 2 cores, 7.8 GB memory      where it ran
    # baseline: DIR                        the lines after it, up to `# this build:`, are the
    # this build: DIR                      baseline's (BENCH_BASELINE_BIN) and this build's
    bench NAME VALUE UNIT                  one figure (herald-bench, bench-api.sh, bench-send.sh)
    target NAME VALUE OP GOAL [before B] met|missed
                                           a figure with a target, as scripts/bench.sh judged it

and replaces what lies between `<!-- bench-table:start -->` and `<!-- bench-table:end -->` in
the page with one table: every figure of this build in the order the run printed them, its
unit, its target and whether it was met, and the baseline's value when the run had one.
Without `# date:` or `# machine:` lines (an output saved by hand), the file's time and this
machine are used. `--stdout` prints the table instead of writing the page.

Python 3 standard library only.
"""
import argparse
import datetime
import os

START = "<!-- bench-table:start -->"
END = "<!-- bench-table:end -->"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class Run:
    def __init__(self):
        self.after = {}      # name -> (value text, unit), this build
        self.before = {}     # name -> (value text, unit), the baseline
        self.order = []      # names of this build's figures, as printed
        self.targets = {}    # name -> (op, goal, value text, before text or None, met)
        self.has_baseline = False
        self.date = None
        self.machine = None


def parse(lines):
    run = Run()
    half = "after"
    for raw in lines:
        line = raw.strip()
        if line.startswith("# date:"):
            run.date = line[len("# date:"):].strip()
        elif line.startswith("# machine:"):
            run.machine = line[len("# machine:"):].strip()
        elif line.startswith("# baseline:"):
            half, run.has_baseline = "before", True
        elif line.startswith("# this build:"):
            half = "after"
        parts = line.split()
        if len(parts) == 4 and parts[0] == "bench":
            _, name, value, unit = parts
            if half == "before":
                run.before[name] = (value, unit)
            else:
                if name not in run.after:
                    run.order.append(name)
                run.after[name] = (value, unit)
        elif len(parts) >= 6 and parts[0] == "target" and parts[-1] in ("met", "missed"):
            name, value, op, goal = parts[1:5]
            before = None
            if len(parts) == 8 and parts[5] == "before":
                before = parts[6]
                run.has_baseline = True
            run.targets[name] = (op, goal, value, before, parts[-1] == "met")
    return run


def machine_here():
    cores = os.cpu_count() or 0
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = f", {int(line.split()[1]) / 1048576:.1f} GB memory"
    except OSError:
        pass
    return f"{cores} cores{memory} (the machine that wrote this table; the output did not say)"


def table(run, source):
    if not run.order and not run.targets:
        raise SystemExit(f"bench-table: no `bench NAME VALUE UNIT` or `target` lines in {source}")
    date = run.date
    if not date:
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(source), datetime.timezone.utc)
        date = stamp.strftime("%Y-%m-%dT%H:%MZ") + " (the output file's time)"
    machine = run.machine or machine_here()
    names = list(run.order) + [name for name in run.targets if name not in run.after]
    met = sum(1 for t in run.targets.values() if t[4])
    unmeasured = sum(1 for t in run.targets.values() if t[2] == "-")
    summary = f"{met} of {len(run.targets)} targets met" + (f" ({unmeasured} not measured)" if unmeasured else "")
    out = [f"Measured {date} on {machine}. {summary}.", ""]
    if run.has_baseline:
        out.append("| figure | before | now | unit | target | |")
        out.append("|---|---:|---:|---|---|---|")
    else:
        out.append("| figure | value | unit | target | |")
        out.append("|---|---:|---|---|---|")
    for name in names:
        value, unit = run.after.get(name, ("-", ""))
        target, verdict, before = "", "", None
        if name in run.targets:
            op, goal, judged, before, was_met = run.targets[name]
            # The target line holds the figure as judged (bench.sh takes the larger of two RSS readings).
            value = judged
            target = f"{'≥' if op == '>=' else '≤' if op == '<=' else op} {goal}"
            verdict = "met" if was_met else "not measured" if judged == "-" else "**missed**"
        if before is None:
            before = run.before.get(name, ("-", ""))[0]
        if not unit:
            unit = run.before.get(name, ("", ""))[1]
        if run.has_baseline:
            out.append(f"| `{name}` | {before} | {value} | {unit} | {target} | {verdict} |")
        else:
            out.append(f"| `{name}` | {value} | {unit} | {target} | {verdict} |")
    return "\n".join(out)


def rewrite(doc, body):
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"bench-table: {doc} has no {START} … {END} markers")
    note = ("<!-- Written by scripts/bench-table.py from `make bench` output; "
            "run it again rather than editing this table. -->")
    text = text[:start + len(START)] + "\n" + note + "\n\n" + body + "\n\n" + text[end:]
    with open(doc, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description="Write a make bench run's figures into docs/benchmarks.md.")
    parser.add_argument("output", help="a make bench output (scripts/bench.sh keeps it in .data/bench/latest.txt)")
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"), help="the page to rewrite")
    parser.add_argument("--stdout", action="store_true", help="print the table instead of writing the page")
    args = parser.parse_args()
    with open(args.output, encoding="utf-8", errors="replace") as f:
        run = parse(f)
    body = table(run, args.output)
    if args.stdout:
        print(body)
    else:
        rewrite(args.doc, body)
        print(f"bench-table: wrote {len(run.order) or len(run.targets)} figures into {os.path.relpath(args.doc)}")


if __name__ == "__main__":
    main()
