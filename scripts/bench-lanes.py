#!/usr/bin/env python3
"""The load of `make bench-lanes` (scripts/bench-lanes.sh): the requests a sender makes.

    bench-lanes.py PORT campaign KEY USERS           makes the campaign; prints its id
    bench-lanes.py PORT fire KEY CAMPAIGN RUNS       fires RUNS runs of it, one after another
    bench-lanes.py PORT bulk KEY COUNT THREADS       posts COUNT notifications through
                                                     POST /v1/notifications:batch, 1,000 a request
    bench-lanes.py PORT singles KEY COUNT INTERVAL_MS [SECOND_KEY SECOND_COUNT]
                                                     COUNT single notifications, one every
                                                     INTERVAL_MS; with SECOND_KEY, after the fifth
                                                     single that key posts its first batch of
                                                     SECOND_COUNT (from its own thread)

Every notification is one hub send with no telemetry; any answer other than the expected one
fails the command. `singles` prints the largest `Herald-Lane-Backlog` header it was answered
(`-` when the server sends none) to standard error.

Python 3 standard library only.
"""
import datetime
import http.client
import json
import sys
import threading
import time

APPLE = {"aps": {"alert": "Your sign-in code is 271828", "badge": 1}}


def request(conn, key, method, path, body, expected):
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    conn.request(method, path, json.dumps(body).encode() if body is not None else None, headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != expected:
        sys.stderr.write(f"bench-lanes: {method} {path} answered {response.status}: {data[:300]!r}\n")
        sys.exit(1)
    return response, data


def connect(port):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=120)


def campaign(port, key, users):
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=300)
    body = {
        "name": "bench-lanes",
        # Users in hub sends of 20 tags, in every format: USERS / 20 × 4 hub sends per run.
        "audience": {"users": [f"u{i}" for i in range(users)]},
        "content": {
            "apple": {"aps": {"alert": "Weekend sale"}},
            "fcmv1": {"message": {"notification": {"title": "Weekend sale"}}},
            "windows": "<toast><visual><binding template=\"ToastGeneric\"><text>Weekend sale</text></binding></visual></toast>",
            "template": {"messageParam": "Weekend sale"},
        },
        # Fired by hand below; its own slot is far away.
        "schedule": {"at": at.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }
    _, data = request(connect(port), key, "POST", "/v1/campaigns", body, 201)
    print(json.loads(data)["id"])


def fire(port, key, campaign_id, runs):
    conn = connect(port)
    for _ in range(runs):
        request(conn, key, "POST", f"/v1/campaigns/{campaign_id}/runs", None, 201)


def bulk(port, key, count, threads):
    payload = {"notifications": [{"target": {"tags": "bench:bulk"}, "content": {"apple": APPLE}, "telemetry": False}] * 1000}
    per = count // threads // 1000
    errors = []

    def run():
        try:
            conn = connect(port)
            for _ in range(per):
                request(conn, key, "POST", "/v1/notifications:batch", payload, 202)
        except BaseException as e:  # noqa: BLE001 - reported below, with SystemExit from request
            errors.append(e)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for e in errors:
        if not isinstance(e, SystemExit):
            sys.stderr.write(f"bench-lanes: a sender failed: {e!r}\n")
    if errors:
        sys.exit(1)


def singles(port, key, count, interval_ms, second_key=None, second_count=0):
    item = {"target": {"user": "bench-b"}, "content": {"apple": APPLE}, "telemetry": False}
    conn = connect(port)
    second = None
    second_failed = []
    backlog = None

    def post_second():
        try:
            batch = [{"target": {"tags": "bench:second"}, "content": {"apple": APPLE}, "telemetry": False}] * second_count
            request(connect(port), second_key, "POST", "/v1/notifications:batch", {"notifications": batch}, 202)
        except BaseException as e:  # noqa: BLE001
            second_failed.append(e)

    start = time.monotonic()
    for n in range(count):
        response, _ = request(conn, key, "POST", "/v1/notifications", item, 202)
        header = response.getheader("Herald-Lane-Backlog")
        if header is not None:
            try:
                backlog = max(backlog or 0.0, float(header))
            except ValueError:
                pass
        if second_key and n == 4:
            second = threading.Thread(target=post_second)
            second.start()
        delay = start + (n + 1) * interval_ms / 1000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    if second:
        second.join()
    if second_failed:
        sys.stderr.write(f"bench-lanes: the second sender failed: {second_failed[0]!r}\n")
        sys.exit(1)
    sys.stderr.write(f"bench-lanes: largest Herald-Lane-Backlog answered: {'-' if backlog is None else backlog}\n")


def main():
    port, command, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if command == "campaign":
        campaign(port, args[0], int(args[1]))
    elif command == "fire":
        fire(port, args[0], int(args[1]), int(args[2]))
    elif command == "bulk":
        bulk(port, args[0], int(args[1]), int(args[2]))
    elif command == "singles":
        second = (args[3], int(args[4])) if len(args) >= 5 else (None, 0)
        singles(port, args[0], int(args[1]), int(args[2]), *second)
    else:
        sys.exit(f"bench-lanes: unknown command {command}")


if __name__ == "__main__":
    main()
