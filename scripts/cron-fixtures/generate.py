"""Generates the cron fixtures the Swift tests (CronScheduleTests) check CronSchedule against.

Run it through generate.sh, which pins croniter and tzdata in a venv. Three files come out:

  croniter.json  [expression, zone, start, [next fire instants]]: random and hand-picked
                 expressions in UTC and fixed-offset zones, and in DST zones where every fire is
                 hours away from a transition. The expected instants come from croniter; a second
                 implementation here (a day walk over a parser of our own) must agree on every
                 case, except where croniter is known to differ from Herald's rules (see
                 croniter_differs), where the day walk's answer is used.
  dst.json       [expression, zone, after, through, [fire instants in (after, through]]]: windows
                 around every offset transition in 2024-2027 (1986 for Asia/Kathmandu) from a
                 brute-force oracle that walks UTC minutes with zoneinfo, plus windows away from
                 transitions where croniter must agree with that oracle.
  invalid.json   [expression]: expressions both croniter and our parser refuse, or that can
                 never fire; CronSchedule must refuse each one.

Instants are whole seconds since 1970 (UTC). The output is deterministic: a fixed seed.
"""

import argparse
import importlib.metadata
import json
import random
import sys
import zoneinfo
from datetime import datetime, timedelta, timezone
from pathlib import Path

from croniter import croniter

# Read zones from the pinned tzdata package only, never the system's copy, so a rerun on
# another machine sees the same rules (Foundation's are 2025b with Swift 6.3).
zoneinfo.reset_tzpath(to=[])

SEED = 20261120
FIRES_PER_CASE = 5

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# name, lowest, highest, names (index 0 = lowest), end of `*` and `a/n`
FIELDS = [
    ("minute", 0, 59, None, 59),
    ("hour", 0, 23, None, 23),
    ("day-of-month", 1, 31, None, 31),
    ("month", 1, 12, MONTHS, 12),
    ("day-of-week", 0, 7, WEEKDAYS, 6),
]
NICKNAMES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

# Zones whose offset is fixed over the instants used (checked in fixed_offset), and the offset.
FIXED_ZONES = {
    "UTC": 0,
    "Asia/Tokyo": 9 * 3600,
    "Asia/Kolkata": 5 * 3600 + 1800,
    "Asia/Kathmandu": 5 * 3600 + 2700,
    "America/Phoenix": -7 * 3600,
    "Pacific/Marquesas": -(9 * 3600 + 1800),
    "Pacific/Kiritimati": 14 * 3600,
    "Etc/GMT+12": -12 * 3600,
}
# DST zones: transition windows for each, in these years. Havana and Santiago change at
# midnight (so midnight itself is skipped), Chatham by an hour at +12:45, Lord Howe by 30 minutes.
DST_ZONES = {
    "Europe/Berlin": range(2024, 2028),
    "America/New_York": range(2024, 2028),
    "Australia/Lord_Howe": range(2024, 2028),
    "Asia/Kathmandu": range(1986, 1987),
    "America/Havana": range(2025, 2027),
    "America/Santiago": range(2025, 2027),
    "Pacific/Chatham": range(2025, 2027),
}
RANGE_START = int(datetime(1996, 1, 1, tzinfo=timezone.utc).timestamp())
RANGE_END = int(datetime(2046, 1, 1, tzinfo=timezone.utc).timestamp())


# MARK: Our own reading of the syntax (independent of croniter and of the Swift code)


class Invalid(ValueError):
    pass


def parse(expression):
    """Returns (minutes, hours, days, months, weekdays, day_of_month_star, day_of_week_star)."""
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in NICKNAMES:
            raise Invalid("nickname")
        text = NICKNAMES[text.lower()]
    parts = text.split()
    if len(parts) != 5:
        raise Invalid("field count")
    sets = [parse_field(part, index) for index, part in enumerate(parts)]
    return (*sets, parts[2][0] in "*?", parts[4][0] in "*?")


def parse_field(text, index):
    _, low, high, names, star_end = FIELDS[index]

    def value(token):
        if token.isascii() and token.isdigit() and len(token) <= 4:
            number = int(token)
            if not low <= number <= high:
                raise Invalid("range")
            return number
        if names and token.upper() in names:
            return names.index(token.upper()) + low
        raise Invalid("value")

    result = set()
    for item in text.split(","):
        if not item:
            raise Invalid("empty item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit() and len(step_text) <= 4):
                raise Invalid("step")
            step = int(step_text)
            if not 1 <= step <= star_end - low + 1:
                raise Invalid("step size")
        if base in ("*", "?"):
            if base == "?" and (index not in (2, 4) or text != "?"):
                raise Invalid("?")
            first, last = low, star_end
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = value(a), value(b)
            if first > last:
                raise Invalid("reversed")
        else:
            first = value(base)
            last = max(first, star_end) if slash else first
        result.update(range(first, last + 1, step))
    if index == 4 and 7 in result:
        result = (result - {7}) | {0}
    return result


LONGEST_MONTH = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def never_fires(parsed):
    minutes, hours, days, months, weekdays, dom_star, dow_star = parsed
    if not (dom_star or dow_star):
        return False
    return not any(day <= LONGEST_MONTH[month] for month in months for day in days)


def day_matches(parsed, date):
    _, _, days, months, weekdays, dom_star, dow_star = parsed
    if date.month not in months:
        return False
    by_date = date.day in days
    by_weekday = (date.weekday() + 1) % 7 in weekdays
    return (by_date and by_weekday) if (dom_star or dow_star) else (by_date or by_weekday)


def matches(parsed, wall):
    return wall.minute in parsed[0] and wall.hour in parsed[1] and day_matches(parsed, wall)


# MARK: Oracles


def walk_days(parsed, start, zone, count):
    """The first `count` fires after `start` by walking local days; right only where no fire
    is near an offset transition (callers check that)."""
    wall = datetime.fromtimestamp(start, zone).replace(tzinfo=None, second=0) + timedelta(minutes=1)
    day = wall.date()
    times = sorted((hour, minute) for hour in parsed[1] for minute in parsed[0])
    fires = []
    while len(fires) < count and day.year < 2500:
        if day_matches(parsed, day):
            for hour, minute in times:
                local = datetime(day.year, day.month, day.day, hour, minute)
                if local >= wall:
                    fires.append(int(local.replace(tzinfo=zone).timestamp()))
                    if len(fires) == count:
                        break
        day += timedelta(days=1)
    return fires


def brute_force(parsed, zone, after, through):
    """Fires in (after, through] by walking UTC minutes: a local minute that matches fires at its
    first occurrence (fold 0) only; when the clock jumps forward, the transition instant fires if
    any skipped local minute matches. The zones used change offset on whole minutes."""
    fires = []
    instant = (after // 60 + 1) * 60
    previous = datetime.fromtimestamp(instant - 60, zone).replace(tzinfo=None)
    while instant <= through:
        moment = datetime.fromtimestamp(instant, zone)
        wall = moment.replace(tzinfo=None)
        fire = moment.fold == 0 and matches(parsed, wall)
        skipped = previous + timedelta(minutes=1)
        while not fire and skipped < wall:
            fire = matches(parsed, skipped)
            skipped += timedelta(minutes=1)
        if fire:
            fires.append(instant)
        previous = wall
        instant += 60
    return fires


def croniter_fires(expression, start, zone, count):
    iterator = croniter(
        expression,
        datetime.fromtimestamp(start, zone),
        implement_cron_bug=True,  # Vixie's rule: a day field starting with * makes the day fields AND
        max_years_between_matches=100,
    )
    fires = []
    for _ in range(count):
        value = iterator.get_next(float)
        assert value == int(value), (expression, value)
        fires.append(int(value))
    return fires


def croniter_differs(expression):
    """Syntax croniter 7.0.0 reads differently from Herald (and Vixie cron); for these the day
    walk's answer is used and croniter's is not compared.
    - A one-value range `a-a` becomes `*` in croniter (`0 0 * * 1-1` fires daily).
    - `7/n` in day-of-week: croniter steps from Sunday over the week; Herald reads it as
      7-7/n, Sunday alone (`a/n` runs from a to the field's end).
    - A `*` inside a day field's list, not first (`0 0 9,*/19 * 0-6`): croniter turns the other
      day field into `*` when it covers every value and this field's text has a `*` anywhere,
      and so ANDs the fields where Vixie's rule (only a leading `*` counts) ORs them."""
    def number(token):
        return WEEKDAYS.index(token.upper()) if token.upper() in WEEKDAYS else token.upper()

    fields = NICKNAMES.get(expression.lower(), expression).split()
    parsed = parse(expression)
    full = {2: set(range(1, 32)), 4: set(range(7))}
    for inner, other in ((2, 4), (4, 2)):
        if "*" in fields[inner][1:] and fields[other][0] not in "*?" and parsed[other] == full[other]:
            return True
    for index, field in enumerate(fields):
        for item in field.split(","):
            base = item.partition("/")[0]
            a, dash, b = base.partition("-")
            if dash and (a.upper() == b.upper() or (index == 4 and str(number(a)) == str(number(b)))):
                return True
            if index == 4 and "/" in item and base == "7":
                return True
    return False


def offset_at(zone, instant):
    # ZoneInfo.utcoffset reads a datetime's wall-clock fields, so ask via fromtimestamp.
    return datetime.fromtimestamp(instant, zone).utcoffset()


def transitions(zone, year):
    """The instants in `year` at which `zone`'s UTC offset changes."""
    found = []
    instant = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp()) - 86400
    end = int(datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp()) + 86400
    offset = offset_at(zone, instant)
    while instant < end:
        following = instant + 3600
        if offset_at(zone, following) != offset:
            low, high = instant, following  # offset(low) == offset, offset(high) != offset
            while high - low > 1:
                middle = (low + high) // 2
                if offset_at(zone, middle) == offset:
                    low = middle
                else:
                    high = middle
            if datetime.fromtimestamp(high, timezone.utc).year == year:
                found.append(high)
            offset = offset_at(zone, following)
        instant = following
    return found


def near_transition(zone, instants, margin=3 * 3600):
    return any(
        offset_at(zone, t - margin)
        != offset_at(zone, t + margin)
        for t in instants
    )


def fixed_offset(zone_name, offset):
    zone = zoneinfo.ZoneInfo(zone_name)
    for instant in range(RANGE_START, RANGE_END + 100 * 366 * 86400, 7 * 86400 + 3600):
        assert offset_at(zone, instant).total_seconds() == offset, zone_name


# MARK: Expressions


HAND_PICKED = [
    "* * * * *", "0 * * * *", "*/5 * * * *", "5/15 * * * *", "0-59/20 * * * *", "10-50/7 3-21/4 * * *",
    "0 0 * * *", "30 2 * * *", "59 23 * * *", "0 12 * * MON-FRI", "0 9 * * mon,wed,Fri", "0 0 * * 0",
    "0 0 * * 7", "0 0 * * 5-7", "0 0 * * 0-7", "0 0 * * SUN-SAT", "0 0 * * */2", "0 0 * * 1-5/2",
    "0 0 * * 1/3", "0 0 * * MON/2", "0 0 1 * *", "0 0 31 * *", "0 0 30 * *", "0 0 29 * *",
    "0 0 29 2 *", "0 12 28,29 FEB *", "0 0 29 2 MON", "0 0 29 2 */3", "0 0 31 */2 *", "0 0 31 1-12/3 *",
    "0 0 1 JAN *", "0 0 1 jan-mar,oct-DEC *", "15 10 * JUN-AUG SAT,SUN", "0 0 1,15 * MON", "0 0 13 * FRI",
    "0 0 */2 * MON", "0 0 1-7 * MON", "0 0 ? * MON", "0 0 1 * ?", "0 0 ? * ?", "0 0 */10 * *",
    "0 0 10/7 * *", "0 0 * 3/4 *", "0 10/6 * * *", "*/15 */6 1,15 JAN,jul *", "0 0 15 * */1",
    "0 0 */1 * 1", "0 0 1-31 * 1", "0 0 1 * 1,*/3", "00 01 * * *", "0,30 * * * *", "1,2,3,58,59 * * * *",
    "0 0,12 * * *", "0 23 31 12 *", "0 0 31 12 SAT", "0 0 * * 6,0", "0 4 8-14 * 2", "*/59 */23 * * *",
    "*/60 * * * *", "0 */24 * * *", "0 0 */31 * *", "0 0 1 */12 *", "0 0 * * */7", "0 0 5-5 * *",
    "0 0 * * 1-1", "0 0 * * 7/2", "0 0 * * 0-0", "0 0 * * 7-7",
    "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually", "@DAILY",
]

HAND_PICKED_INVALID = [
    "", "* * * *", "* * * * * *", "0 0 0 1 1 * 2026", "60 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 32 * *",
    "0 0 * 0 *", "0 0 * 13 *", "0 0 * * 8", "5-1 * * * *", "0 0 * * FRI-SUN", "*/0 * * * *", "1-5/0 * * * *",
    "*/61 * * * *", "0 0 * * */8", "0,,1 * * * *", "0, * * * *", ",0 * * * *", "0 0 * JANUARY *",
    "0 0 * * MONDAY", "0 0 * * 1#2", "0 0 L * *", "0 0 15W * *", "H * * * *", "0 0 ? ? *", "? * * * *",
    "0 0 ?/2 * *", "0 0 1,? * *", "@reboot", "@every 5m", "@daily *", "-1 * * * *", "+5 * * * *", "1- * * * *",
    "-5 * * * *", "a * * * *", "*/x * * * *", "1/ * * * *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *",
    "0 0 30,31 FEB *", "0 0 31 APR */7", "0 0 30 2 */2", "0 0 ３ * *",
]


def random_field(rng, index):
    _, low, high, names, star_end = FIELDS[index]
    span = star_end - low + 1

    def value():
        number = rng.randint(low, high if index != 4 else 7)
        if names and rng.random() < 0.3 and number - low < len(names):
            name = names[number - low]
            return rng.choice([name, name.lower(), name.capitalize()])
        return str(number)

    def item():
        kind = rng.random()
        if kind < 0.35:
            return value()
        if kind < 0.55:
            a, b = sorted(rng.sample(range(low, star_end + 1), 2))
            return f"{a}-{b}"
        if kind < 0.7:
            return f"*/{rng.randint(1, span)}"
        if kind < 0.85:
            a, b = sorted(rng.sample(range(low, star_end + 1), 2))
            return f"{a}-{b}/{rng.randint(1, span)}"
        return f"{rng.randint(low, star_end)}/{rng.randint(1, span)}"

    roll = rng.random()
    if index in (2, 4) and roll < 0.05:
        return "?"
    if roll < (0.45 if index >= 2 else 0.25):
        return "*"
    return ",".join(item() for _ in range(rng.choice([1, 1, 1, 2, 3])))


def random_expression(rng):
    return " ".join(random_field(rng, index) for index in range(5))


def random_invalid(rng):
    fields = [random_field(rng, index) for index in range(5)]
    index = rng.randrange(5)
    _, low, high, names, _ = FIELDS[index]
    fields[index] = rng.choice(
        [
            str(high + rng.randint(1, 20)),
            f"{high}-{low}",
            f"*/{rng.choice([0, 100])}",
            f"{low},",
            f",{low}",
            f"{low}--{high}",
            f"{low}-{high}-{low}",
            "**",
            "*-5",
            f"{low}/*",
            "XYZ",
        ]
    )
    return " ".join(fields)


# MARK: Generation


def instant_starts(rng, count):
    starts = []
    for _ in range(count):
        start = rng.randrange(RANGE_START, RANGE_END)
        starts.append(start - start % 60 if rng.random() < 0.5 else start)
    return starts


def main():
    arguments = argparse.ArgumentParser()
    arguments.add_argument("--out", required=True)
    arguments.add_argument("--random", type=int, default=2500, help="random expressions")
    options = arguments.parse_args()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    for name, offset in FIXED_ZONES.items():
        fixed_offset(name, offset)
    zones = {name: zoneinfo.ZoneInfo(name) for name in list(FIXED_ZONES) + list(DST_ZONES)}
    fixed_zone_names = list(FIXED_ZONES)

    expressions = list(HAND_PICKED)
    seen = set(expressions)
    never = []
    while len(expressions) < len(HAND_PICKED) + options.random:
        expression = random_expression(rng)
        if expression in seen:
            continue
        seen.add(expression)
        if never_fires(parse(expression)):
            never.append(expression)
        else:
            expressions.append(expression)

    # croniter.json: next fires from random starts.
    cases, compared, walked_only, skipped = [], 0, 0, 0
    for position, expression in enumerate(expressions):
        parsed = parse(expression)
        hand_picked = position < len(HAND_PICKED)
        # Hand-picked expressions run in every fixed zone; random ones in one or two zones.
        names = fixed_zone_names if hand_picked else rng.sample(fixed_zone_names, rng.choice([1, 2]))
        if rng.random() < 0.3 or hand_picked:
            names = names + [rng.choice(list(DST_ZONES))]
        for name in names:
            zone = zones[name]
            for start in instant_starts(rng, 2 if hand_picked else 1):
                expected = walk_days(parsed, start, zone, FIRES_PER_CASE)
                if len(expected) < FIRES_PER_CASE:
                    skipped += 1
                    continue
                if name in DST_ZONES and near_transition(zone, [start] + expected):
                    skipped += 1
                    continue
                if croniter_differs(expression):
                    walked_only += 1
                else:
                    got = croniter_fires(expression, start, zone, FIRES_PER_CASE)
                    if got != expected:
                        sys.exit(f"croniter and the day walk disagree: {expression!r} {name} {start}: {got} vs {expected}")
                    compared += 1
                cases.append([expression, name, start, expected])

    # dst.json: windows around every transition (brute force), and quiet windows (vs croniter).
    transition_expressions = [
        "* * * * *", "*/15 * * * *", "*/7 * * * *", "0 * * * *", "30 * * * *", "45 * * * *", "15,45 * * * *",
        "0 0 * * *", "10 0 * * *", "30 0 * * *", "0 1 * * *", "30 1 * * *", "59 1 * * *", "0 2 * * *",
        "15 2 * * *", "30 2 * * *", "45 2 * * *", "59 2 * * *", "0 3 * * *", "30 3 * * *", "0,30 1-3 * * *",
        "*/10 2 * * *", "15 2,3 * * *", "45 1,2 * * *", "0 23 * * *", "30 23 * * *", "*/5 0 * * *",
        "@hourly", "@daily", "30 2 * * SUN", "30 2 * * MON-SAT", "0 0 1 1 *", "0 0 * * 0",
    ]
    dst_cases, dst_compared = [], 0
    for name, years in DST_ZONES.items():
        zone = zones[name]
        for year in years:
            for transition in transitions(zone, year):
                candidates = transition_expressions + [
                    # Random times in the hours around the transition, local to the zone.
                    f"{random_field(rng, 0)} {rng.choice(['0-3', '1,2', '2', '22-23', '0', '*/2'])} "
                    f"{rng.choice(['*', '*', str(datetime.fromtimestamp(transition, zone).day)])} * "
                    f"{rng.choice(['*', '*', '1-5', 'SUN,SAT'])}"
                    for _ in range(12)
                ]
                for expression in candidates:
                    parsed = parse(expression)
                    if never_fires(parsed):
                        continue
                    margin = 3600 if expression.startswith("* ") else 4 * 3600
                    after, through = transition - margin - rng.randrange(0, 600), transition + margin
                    dst_cases.append([expression, name, after, through, brute_force(parsed, zone, after, through)])
    # The brute force against croniter where no transition is near: the oracle's own check.
    for name in list(DST_ZONES) + ["UTC", "Asia/Kolkata"]:
        zone = zones[name]
        for _ in range(40):
            expression = rng.choice(transition_expressions[:20] + expressions[: len(HAND_PICKED)])
            if croniter_differs(expression):
                continue
            after = rng.randrange(RANGE_START, RANGE_END)
            through = after + 6 * 3600
            if near_transition(zone, [after, through], margin=86400):
                continue
            fires = brute_force(parse(expression), zone, after, through)
            got = [f for f in croniter_fires(expression, after, zone, len(fires) + 1) if f <= through]
            if got != fires:
                sys.exit(f"croniter and the brute force disagree: {expression!r} {name} {after}: {got} vs {fires}")
            dst_compared += 1
            dst_cases.append([expression, name, after, through, fires])

    # invalid.json: refused by both croniter and our parser, or never firing.
    invalid = []
    candidates = HAND_PICKED_INVALID + [random_invalid(rng) for _ in range(400)]
    for expression in candidates:
        try:
            parsed = parse(expression)
        except Invalid:
            parsed = None
        if parsed is not None and not never_fires(parsed):
            if expression in HAND_PICKED_INVALID:
                sys.exit(f"our parser accepts {expression!r}, listed as invalid")
            continue
        if expression in HAND_PICKED_INVALID or parsed is not None:
            invalid.append(expression)
            continue
        try:
            croniter_fires(expression, RANGE_START, timezone.utc, 1)
        except Exception:  # croniter refuses it too
            invalid.append(expression)
    invalid += never[:200]

    def write(name, rows, header):
        body = ",\n".join(json.dumps(row, separators=(",", ":"), ensure_ascii=False) for row in rows)
        (out / name).write_text(json.dumps(header)[:-1] + ',"cases":[\n' + body + "\n]}\n", encoding="utf-8")

    provenance = {
        "generator": "scripts/cron-fixtures/generate.sh",
        "croniter": importlib.metadata.version("croniter"),
        "tzdata": importlib.metadata.version("tzdata"),
        "seed": SEED,
    }
    write("croniter.json", cases, {**provenance, "format": "[expression, zone, start, [next fires]]"})
    write("dst.json", dst_cases, {**provenance, "format": "[expression, zone, after, through, [fires in (after, through]]]"})
    write("invalid.json", [[e] for e in dict.fromkeys(invalid)], {**provenance, "format": "[expression]"})
    print(
        f"croniter.json: {len(cases)} cases ({compared} checked against croniter, {walked_only} day walk only, "
        f"{skipped} skipped); dst.json: {len(dst_cases)} cases ({dst_compared} checked against croniter); "
        f"invalid.json: {len(set(invalid))} expressions"
    )


if __name__ == "__main__":
    main()
