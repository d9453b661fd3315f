"""A webhook receiver for the tests: verifies every delivery with the reference Standard Webhooks
library (PyPI `standardwebhooks`, in the venv of scripts/webhook-venv.sh), answers some with
errors or too late, and prints one JSON line per request.

    python scripts/webhook-receiver.py --secret-file F [--fail-every 3] [--slow-every 10] [--slow-seconds 2]
                                       [--refuse-at-most K]

Each line also has "inFlight", the requests being handled when it arrived (itself included), and
"at", its arrival in seconds on a monotonic clock.

Prints `PORT=<n>` first (it listens on 127.0.0.1, a free port). The secret is read from F at the
first request (the test writes it once the endpoint exists). Request n (from 1) is answered late
(after --slow-seconds, longer than Herald waits) when n is a multiple of --slow-every, else 500
when n is a multiple of --fail-every, else 204; but an event (a webhook-id) already answered late
or 500 K times (--refuse-at-most) is answered 204. Without that bound a retry schedule can fall
into step with n: a few events retried in turn, each once per round, keep their place modulo
--fail-every and one of them is refused every time. Each line: {"n", "id", "verified", "answer",
"type", "notificationId", "error"}; a request whose body ends early (the sender gave up) is
answered nothing and logged with "answer": "truncated".
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

lock = threading.Lock()
count = 0
in_flight = 0
refused: dict = {}  # webhook-id -> how many times it was answered late or 500


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--slow-every", type=int, default=0)
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument("--refuse-at-most", type=int, default=0, help="0: no bound")
    options = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            global in_flight
            with lock:
                in_flight += 1
                now = in_flight
            self.counted = True
            try:
                self.handle_delivery(now)
            finally:
                self.leave()

        def leave(self) -> None:
            """No longer counted in flight: before the answer goes out, since the sender may
            start its next request as soon as it has the answer."""
            global in_flight
            if self.counted:
                self.counted = False
                with lock:
                    in_flight -= 1

        def handle_delivery(self, now: int) -> None:
            global count
            with lock:
                count += 1
                n = count
            arrived = time.monotonic()
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            line = {"n": n, "id": self.headers.get("webhook-id"), "verified": False, "inFlight": now, "at": arrived}
            if len(body) < length:
                # The sender gave up mid-request (its deadline passed): nothing to verify or answer.
                line["answer"] = "truncated"
                self.emit(line)
                return
            try:
                with open(options.secret_file) as file:
                    secret = file.read().strip()
                event = Webhook(secret).verify(body.decode("utf-8"), dict(self.headers.items()))
                line["verified"] = True
                line["type"] = event.get("type")
                line["notificationId"] = (event.get("data") or {}).get("notificationId")
                if event.get("id") != line["id"]:
                    line["verified"] = False
                    line["error"] = "the body's id is not the webhook-id"
            except Exception as error:  # any failure to verify is reported, never answered 2xx
                line["error"] = f"{type(error).__name__}: {error}"
            slow = bool(options.slow_every) and n % options.slow_every == 0
            fail = bool(options.fail_every) and n % options.fail_every == 0
            if (slow or fail) and line["verified"] and not self.may_refuse(line["id"]):
                slow = fail = False
            if slow:
                line["answer"] = "slow"
                self.emit(line)
                time.sleep(options.slow_seconds)
                self.answer(204)
            elif not line["verified"]:
                line["answer"] = 400
                self.emit(line)
                self.answer(400)
            elif fail:
                line["answer"] = 500
                self.emit(line)
                self.answer(500)
            else:
                line["answer"] = 204
                self.emit(line)
                self.answer(204)

        def may_refuse(self, event_id: str) -> bool:
            """Whether the event may be answered late or 500 once more (counting this time)."""
            if not options.refuse_at_most:
                return True
            with lock:
                if refused.get(event_id, 0) >= options.refuse_at_most:
                    return False
                refused[event_id] = refused.get(event_id, 0) + 1
                return True

        def answer(self, status: int) -> None:
            self.leave()
            try:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
            except OSError:
                pass  # Herald gave up waiting and closed the connection

        def emit(self, line: dict) -> None:
            with lock:
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    sys.stdout.write(f"PORT={server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
