#!/usr/bin/env python3
"""The ops dashboard in headless Chromium (issue 14's acceptance), against the real processes.

Starts a fresh database, nh-emulator (port 0), herald-api and herald-worker from BIN_DIR, seeds
notifications through the public API (one the hub refuses once with 500 and then takes, one it
refuses for good with 400, plain ones, one scheduled for later), lets the worker finish and stops
it (so nothing can move), then drives the dashboard with Selenium and checks:

  - sign-in with a read key shows the overview, and every number the overview shows equals
    GET /v1/stats for the same window;
  - a notification's detail shows each send attempt the emulator logged for it (status, order,
    the hub notification id of the accepted one);
  - with a read+send key, cancelling the scheduled notification from the page makes it
    Cancelled in the API;
  - the Webhooks page shows a paused endpoint's health and delivery log, replays a delivery
    (a new delivery of the same event) and resumes the endpoint;
  - a wrong key shows an error and no data;
  - every request the page made went to 127.0.0.1/localhost (Chrome's performance log);
  - the page's answer carries the Content-Security-Policy; the browser logged no errors.

Prints one line per check (`ok ...` / `FAIL ...`) and exits 1 on any failure. Screenshots of
each page (1280x800, and the overview at 390 px wide) go to .build/dashboard-screenshots/.
"""

import argparse
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOTS = os.path.join(ROOT, ".build", "dashboard-screenshots")
LOGS = os.path.join(ROOT, ".data", "dashboard-test")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATES = ["Scheduled", "Queued", "Enqueued", "Processing", "Completed", "NoTargetFound", "Abandoned", "Unknown",
          "Cancelled", "Expired"]
RESULTS = ["accepted", "retried", "throttled", "abandoned", "expired"]

failures = []


class Failure(Exception):
    pass


def report(ok, name, detail=""):
    print(f"dashboard-test: {'ok' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)
    if not ok:
        failures.append(name)


def wait_for(what, predicate, timeout=30, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def http(method, url, body=None, headers=None, timeout=20):
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


class Process:
    def __init__(self, name, argv, env):
        self.name = name
        self.log_path = os.path.join(LOGS, name + ".log")
        self.out_path = os.path.join(LOGS, name + ".out")
        self.log = open(self.log_path, "wb")
        self.out = open(self.out_path, "wb")
        self.popen = subprocess.Popen(argv, env=env, stdout=self.out, stderr=self.log, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    def wait_line(self, pattern, stdout=False, timeout=60):
        regex = re.compile(pattern)
        path = self.out_path if stdout else self.log_path

        def found():
            if self.popen.poll() is not None:
                raise Failure(f"{self.name} exited ({self.popen.returncode}); see {self.log_path}")
            with open(path, "rb") as f:
                return regex.search(f.read().decode("utf-8", "replace"))
        return wait_for(f"{self.name} to print /{pattern}/", found, timeout, 0.05)

    def stop(self):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self.log.close()
        self.out.close()


class System:
    def __init__(self, bin_dir, base_url):
        self.bin = bin_dir
        base = urllib.parse.urlsplit(base_url)
        self.db_name = "herald_dashboard_test"
        self.admin_url = base_url
        self.db_url = urllib.parse.urlunsplit(base._replace(path="/" + self.db_name))
        self.psql(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{self.db_name}"')
        self.env = dict(os.environ, HERALD_DATABASE_URL=self.db_url, HERALD_LOG_LEVEL="info", HERALD_AUTH_BCRYPT_COST="4")
        self.env.pop("HERALD_ENV_FILE", None)
        self.processes = []
        self.ctl("migrate")
        self.emulator = self.spawn("nh-emulator", [os.path.join(bin_dir, "nh-emulator"), "--port", "0", "--inspection"], self.env)
        self.emulator.wait_line(r"HERALD_HUB_NAME=", stdout=True)
        with open(self.emulator.out_path) as f:
            text = f.read()
        connection = re.search(r"HERALD_HUB_CONNECTION_STRING=(\S+)", text).group(1)
        self.emulator_url = re.search(r"Endpoint=(http://[^/;]+)/", connection).group(1).replace("sb://", "http://")
        self.hub = re.search(r"HERALD_HUB_NAME=(\S+)", text).group(1)
        self.env.update(HERALD_HUB_CONNECTION_STRING=connection, HERALD_HUB_NAME=self.hub)
        self.read_key = self.make_key("dashboard-read", "read")
        self.ops_key = self.make_key("dashboard-ops", "read,send")
        self.api = self.spawn("herald-api", [os.path.join(bin_dir, "herald-api")], dict(self.env, HERALD_API_PORT="0"))
        port = self.api.wait_line(r"port=(\d+).*herald\.api\.listening").group(1)
        self.api_url = f"http://127.0.0.1:{port}"
        self.worker = self.spawn("herald-worker", [os.path.join(bin_dir, "herald-worker")],
                                 dict(self.env, HERALD_WORKER_METRICS_PORT="0"))
        self.worker.wait_line(r"herald\.worker\.started")

    def psql(self, sql):
        out = subprocess.run(["psql", self.admin_url if "DATABASE" in sql else self.db_url, "-X", "-qtA",
                              "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise Failure(f"psql: {out.stderr.strip()[:300]}")
        return out.stdout.strip()

    def spawn(self, name, argv, env):
        process = Process(name, argv, env)
        self.processes.append(process)
        return process

    def ctl(self, *args):
        out = subprocess.run([os.path.join(self.bin, "heraldctl"), *args], env=self.env, capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0:
            raise Failure(f"heraldctl {args[0]}: {out.stderr.strip()[:300]}")
        return out.stdout

    def make_key(self, name, scopes):
        return self.ctl("keys", "create", "--name", name, "--scopes", scopes).strip().splitlines()[-1]

    def v1(self, method, path, body=None, key=None):
        status, text, headers = http(method, self.api_url + path, body,
                                     {"Authorization": "Bearer " + (key or self.ops_key)})
        return status, (json.loads(text) if text else None), headers

    def emu(self, method, path, body=None):
        status, text, _ = http(method, f"{self.emulator_url}/_emulator/hubs/{self.hub}{path}", body)
        if not 200 <= status < 300:
            raise Failure(f"emulator {method} {path}: {status} {text[:200]}")
        return json.loads(text) if text else None

    def stop(self):
        for process in reversed(self.processes):
            process.stop()
        try:
            self.psql(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        except Failure:
            pass


def direct(handle, alert, **extra):
    return dict({"target": {"deviceHandle": handle, "platform": "apple"},
                 "content": {"apple": {"aps": {"alert": alert}}}}, **extra)


def register_device(system):
    """A device user and one device through the tutorial API; waits until the worker synced it."""
    out = subprocess.run([os.path.join(system.bin, "heraldctl"), "users", "add", "alice", "--password-stdin"],
                         env=system.env, input="alice-password\n", capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise Failure(f"heraldctl users add: {out.stderr.strip()[:200]}")
    basic = "Basic " + base64.b64encode(b"alice:alice-password").decode()
    handle = "D" * 64
    status, text, _ = http("POST", f"{system.api_url}/api/register?handle={handle}", headers={"Authorization": basic})
    if status != 200:
        raise Failure(f"register: {status} {text[:200]}")
    device = text[1:-1]
    status, text, _ = http("PUT", f"{system.api_url}/api/register/{device}",
                           {"Platform": "apns", "Handle": handle, "Tags": ["World"]}, {"Authorization": basic})
    if status != 200:
        raise Failure(f"register update: {status} {text[:200]}")
    wait_for("alice's device to be synced", lambda: [d["syncState"] for d in
             system.v1("GET", "/v1/users/alice/devices")[1]["devices"]] == ["synced"], 60)
    return device


def seed(system):
    """Seeds through the public API; returns (retried id and handle, abandoned id, scheduled id)."""
    # The hub answers the first send 500 (retried) and the next 400 (abandoned for good).
    system.emu("POST", "/faults", [{"method": "POST", "pathPattern": "/messages", "status": 500, "count": 1}])
    retried_handle = "A" * 64
    status, body, _ = system.v1("POST", "/v1/notifications", direct(retried_handle, "retried once"))
    if status != 202:
        raise Failure(f"create: {status} {body}")
    retried = body["id"]
    wait_for("the retried send to be accepted", lambda: system.v1("GET", f"/v1/notifications/{retried}")[1]["state"]
             in ("Enqueued", "Completed", "Processing"), 60)
    system.emu("POST", "/faults", [{"method": "POST", "pathPattern": "/messages", "status": 400, "count": 1}])
    status, body, _ = system.v1("POST", "/v1/notifications", direct("B" * 64, "refused"))
    abandoned = body["id"]
    wait_for("the refused send to be abandoned",
             lambda: system.v1("GET", f"/v1/notifications/{abandoned}")[1]["state"] == "Abandoned", 60)
    items = [direct(f"{n:064X}", f"plain {n}") for n in range(1, 6)]
    status, body, _ = system.v1("POST", "/v1/notifications:batch", {"notifications": items})
    if status != 202:
        raise Failure(f"batch: {status} {body}")
    plain = [n["id"] for n in body["notifications"]]
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    status, body, _ = system.v1("POST", "/v1/notifications", direct("C" * 64, "later", sendAt=later))
    scheduled = body["id"]
    wait_for("the plain sends to be accepted", lambda: all(
        system.v1("GET", f"/v1/notifications/{i}")[1]["state"] in ("Enqueued", "Completed", "Processing")
        for i in plain), 60)
    return retried, retried_handle, abandoned, scheduled


def make_driver(width, height):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--no-first-run", "--no-default-browser-check",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--metrics-recording-only", "--mute-audio"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver",
                      log_output=os.path.join(LOGS, "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_window_size(width, height)
    return driver


class Browser:
    def __init__(self, api_url, width=1280, height=800):
        self.api_url = api_url
        self.driver = make_driver(width, height)
        self.requests = []
        self.responses = {}
        self.console = []

    def drain_logs(self):
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            elif message["method"] == "Network.responseReceived":
                response = message["params"]["response"]
                self.responses[response["url"]] = {k.lower(): v for k, v in response.get("headers", {}).items()}
        entries = self.driver.get_log("browser")
        self.console += entries
        return entries

    def wait(self, condition, timeout=20, what="the page"):
        try:
            return WebDriverWait(self.driver, timeout).until(condition)
        except TimeoutException:
            raise Failure(f"timed out waiting for {what}")

    def find(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def open(self, fragment=""):
        self.driver.get(self.api_url + "/dashboard" + fragment)

    def sign_in(self, key):
        self.wait(lambda d: d.find_element(By.ID, "api-key").is_displayed(), what="the sign-in form")
        field = self.driver.find_element(By.ID, "api-key")
        field.clear()
        field.send_keys(key)
        self.driver.find_element(By.CSS_SELECTOR, "#sign-in-form button[type=submit]").click()

    def sign_out(self):
        self.driver.find_element(By.ID, "sign-out").click()
        self.wait(lambda d: d.find_element(By.ID, "api-key").is_displayed(), what="the sign-in form")

    def go(self, fragment):
        self.driver.execute_script("location.hash = arguments[0]", fragment)

    def shot(self, name):
        os.makedirs(SHOTS, exist_ok=True)
        self.driver.save_screenshot(os.path.join(SHOTS, name + ".png"))

    def quit(self):
        self.driver.quit()


def overview_numbers(browser):
    return {e.get_attribute("data-stat"): (e.get_attribute("data-value") or e.text.strip())
            for e in browser.find("[data-stat]")}


def expected_numbers(stats):
    expected = {f"state.{s}": str(stats["notifications"]["byState"][s]) for s in STATES}
    expected.update({f"outcomes.{r}": str(stats["outcomes"]["totals"][r]) for r in RESULTS})
    expected["errorRate"] = stats["outcomes"]["errorRate"]
    for queue in stats["queues"]:
        expected[f"queue.{queue['queue']}.waiting"] = str(queue["byState"].get("waiting", 0))
        expected[f"queue.{queue['queue']}.running"] = str(queue["byState"].get("running", 0))
    expected["hubThrottling.inEffect"] = "yes" if stats["hubThrottling"]["inEffect"] else "no"
    expected["hubThrottling.throttledLast5m"] = str(stats["hubThrottling"]["throttledLast5m"])
    expected["campaignRuns.count"] = str(len(stats["campaignRuns"]))
    return expected


def run(system):
    device = register_device(system)
    retried, retried_handle, abandoned, scheduled = seed(system)
    # Quiesce: with the worker stopped nothing moves (telemetry would turn Enqueued into
    # Completed), so the page and the API must show the same numbers.
    system.worker.stop()
    report(True, "seeded through the API and quiesced",
           f"retried {retried[:8]}, abandoned {abandoned[:8]}, scheduled {scheduled[:8]}, 5 plain")

    # The page's own headers.
    status, _, headers = http("GET", system.api_url + "/dashboard")
    lower = {k.lower(): v for k, v in headers.items()}
    report(status == 200 and lower.get("content-security-policy") == CSP and lower.get("x-content-type-options") == "nosniff",
           "the page answers with the strict CSP, nosniff and no-referrer",
           f"{status} {lower.get('content-security-policy')!r}")

    browser = Browser(system.api_url)
    try:
        # Sign in with a read key: the overview, equal to /v1/stats for the same window.
        browser.open()
        browser.shot("sign-in")
        browser.sign_in(system.read_key)
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#overview[aria-busy=false] [data-stat='state.Scheduled']"),
                     what="the overview")
        browser.driver.execute_script("document.getElementById('window').value = '1h'")
        numbers = overview_numbers(browser)
        status, stats, _ = system.v1("GET", "/v1/stats?window=1h", key=system.read_key)
        expected = expected_numbers(stats)
        differences = {k: (numbers.get(k), v) for k, v in expected.items()
                       if (float(numbers.get(k) or "nan") != v if k == "errorRate" else numbers.get(k) != v)}
        report(status == 200 and not differences and numbers.get("state.Abandoned") == "1",
               "the overview's numbers equal GET /v1/stats?window=1h",
               f"{len(expected)} figures" if not differences else f"page vs API: {differences}")
        who = browser.driver.find_element(By.ID, "who-name").text
        report("dashboard-read" in who and not browser.find("#cancel-matching"),
               "a read key sees its name and no action buttons", who)
        browser.shot("overview")

        # A notification's detail: each attempt the emulator logged for it.
        browser.go(f"#/notifications/{retried}")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"#notification[data-id='{retried}']"),
                     what="the notification detail")
        shown = [(o.get_attribute("data-attempt"), o.find_element(By.CSS_SELECTOR, ".head").text)
                 for o in browser.find(".hub-send li.outcome[data-kind=send]")]
        logged = [r for r in system.emu("GET", "/requests") if r["method"] == "POST" and r["path"].endswith("/messages")
                  and any(v == retried_handle for k, v in r["headers"].items() if k.lower() == "servicebusnotification-devicehandle")]
        statuses_shown = [int(m.group(1)) for _, head in shown for m in [re.search(r"HTTP (\d+)", head)] if m]
        accepted_ids = [r["notificationId"] for r in logged if r.get("notificationId")]
        page_text = browser.driver.find_element(By.ID, "page").text
        report(len(logged) == 2 and statuses_shown == [r["status"] for r in logged]
               and [a for a, _ in shown] == ["1", "2"] and all(i in page_text for i in accepted_ids),
               "the detail shows each attempt the emulator saw",
               f"emulator {[r['status'] for r in logged]}, page {statuses_shown}, hub ids {accepted_ids}")
        browser.shot("notification-detail")

        browser.go("#/notifications")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#notifications tbody tr"), what="the list")
        report(len(browser.find("#notifications tbody tr")) == 8, "the notifications page lists the 8 seeded",
               str(len(browser.find("#notifications tbody tr"))))
        browser.shot("notifications")
        browser.go("#/failures")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#failures tbody tr, #page .muted:not(.loading)"),
                     what="the failures")
        report(any("400" in row.text for row in browser.find("#failures tbody tr")),
               "the failures page shows the hub's 400", " | ".join(r.text for r in browser.find("#failures tbody tr"))[:200])
        browser.shot("failures")
        browser.go("#/devices")
        browser.wait(lambda d: d.find_elements(By.ID, "device-user"), what="the devices page")
        browser.driver.find_element(By.ID, "device-user").send_keys("alice\n")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f".device[data-device='{device}']"), what="alice's device")
        card = browser.find(f".device[data-device='{device}']")[0]
        calls = card.find_elements(By.CSS_SELECTOR, "tbody tr")
        _, api_devices, _ = system.v1("GET", "/v1/users/alice/devices", key=system.read_key)
        api_calls = api_devices["devices"][0]["hubCalls"]
        report("synced" in card.text and len(calls) == len(api_calls) >= 1
               and [c.find_elements(By.TAG_NAME, "td")[1].text for c in calls] == [c["operation"] for c in api_calls],
               "the devices page shows alice's device, synced, with each registration-side hub call",
               f"{len(calls)} call(s) on the page, {len(api_calls)} in the API")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#device-hygiene [aria-busy='false']")
                     and d.find_elements(By.CSS_SELECTOR, "[data-card='reconcile'] > p.muted:not(.loading), [data-card='reconcile'] dl"),
                     what="the device hygiene and reconcile cards")
        _, stats, _ = system.v1("GET", "/v1/stats?window=1h", key=system.read_key)
        hygiene = browser.find("#device-hygiene")[0].text
        reconcile = browser.find("[data-card='reconcile']")[0].text
        report("stale (last sweep)" in hygiene and "retired in" in hygiene
               and ("No reconcile has run" in reconcile) == (stats["devices"]["lastReconcile"] is None),
               "the devices page shows the stale and retired counts and the last reconcile",
               f"{hygiene!r} / {reconcile!r}")
        browser.shot("devices")
        # 51 campaigns: the list pages them 50 at a time (a read key reads every campaign).
        for n in range(51):
            status, body, _ = system.v1("POST", "/v1/campaigns", {
                "name": f"campaign-{n:02d}", "audience": {"tags": "news"},
                "content": {"apple": {"aps": {"alert": "news"}}}, "schedule": {"cron": "0 9 * * *"}})
            if status != 201:
                raise Failure(f"campaign create: {status} {body}")
        browser.go("#/campaigns")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#campaigns tbody tr"), what="the campaigns page")
        first_page = len(browser.find("#campaigns tbody tr"))
        browser.shot("campaigns")
        next_button = [b for b in browser.find("#campaigns-pager button") if b.text == "Next page"]
        if next_button:
            next_button[0].click()
            browser.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#campaigns tbody tr")) == 1,
                         what="the second page of campaigns")
        second_page = len(browser.find("#campaigns tbody tr"))
        report(first_page == 50 and bool(next_button) and second_page == 1,
               "the campaigns page lists 50 campaigns a page, the next page the rest",
               f"{first_page} then {second_page}")
        browser.drain_logs()
        read_console = [e for e in browser.console if e["level"] == "SEVERE"]

        # A wrong key: an error, and no data.
        browser.sign_out()
        browser.sign_in("hrld_" + "x" * 40)
        browser.wait(lambda d: d.find_element(By.ID, "sign-in-error").is_displayed(), what="the sign-in error")
        error = browser.driver.find_element(By.ID, "sign-in-error").text
        report("refused" in error and not browser.find("[data-stat]") and not browser.find("#notifications")
               and not browser.driver.find_element(By.ID, "page").is_displayed(),
               "a wrong key shows an error and no data", error)
        browser.shot("wrong-key")
        expected_401 = [e for e in browser.drain_logs() if e["level"] == "SEVERE"]

        # A read+send key cancels the scheduled notification from the page.
        browser.sign_in(system.ops_key)
        browser.wait(lambda d: d.find_element(By.ID, "who").is_displayed(), what="the signed-in header")
        browser.go(f"#/notifications/{scheduled}")
        browser.wait(lambda d: d.find_elements(By.ID, "cancel-notification"), what="the Cancel button")
        browser.driver.find_element(By.ID, "cancel-notification").click()
        browser.wait(lambda d: d.find_element(By.ID, "confirm").is_displayed(), what="the confirmation")
        browser.driver.find_element(By.ID, "confirm-yes").click()
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#notification[data-state=Cancelled]"),
                     what="the notification shown Cancelled")
        _, detail, _ = system.v1("GET", f"/v1/notifications/{scheduled}")
        report(detail["state"] == "Cancelled", "cancelling a scheduled notification from the page makes it Cancelled",
               detail["state"])
        browser.shot("cancelled")

        # Retry the hub's 400 group from the Failures page: the confirmation counts it first.
        browser.go("#/failures")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#failures tbody tr button"), what="a Retry button")
        row = next(r for r in browser.find("#failures tbody tr") if r.find_element(By.TAG_NAME, "td").text == "400")
        row.find_element(By.TAG_NAME, "button").click()
        browser.wait(lambda d: d.find_element(By.ID, "confirm").is_displayed(), what="the retry confirmation")
        question = browser.driver.find_element(By.ID, "confirm-text").text
        browser.driver.find_element(By.ID, "confirm-yes").click()
        browser.wait(lambda d: "Retried" in d.find_element(By.ID, "status").text, what="the retry's answer")
        answer = browser.driver.find_element(By.ID, "status").text
        _, detail, _ = system.v1("GET", f"/v1/notifications/{abandoned}")
        audit = system.psql("SELECT count(*) FROM ops_actions WHERE action = 'hub_sends.retry'")
        report(question.startswith("Retry 1 ") and "Retried 1 of 1" in answer and detail["state"] == "Queued"
               and detail["hubSends"][0]["state"] == "Queued" and audit == "1",
               "retrying the 400 group from the Failures page (confirmed with its count) queues the send again",
               f"{question!r} -> {answer!r}; notification {detail['state']}; audit rows {audit}")
        browser.shot("retried")

        # Webhooks: a paused endpoint with a failed delivery (written as the worker would; it is
        # stopped): the page shows its health and log, replays the delivery and resumes it.
        status, endpoint, _ = system.v1("POST", "/v1/webhooks", {"url": "https://hooks.example.com/herald",
                                                                  "types": ["notification.failed"]})
        if status != 201:
            raise Failure(f"webhook create: {status} {endpoint}")
        hook = endpoint["id"]
        system.psql(f"""WITH e AS (INSERT INTO events (type, seq, data)
                          VALUES ('notification.failed', nextval('event_seq'), '{{"state": "Abandoned"}}') RETURNING id)
                        INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, last_status, last_error,
                                                        last_latency_ms)
                        SELECT {hook}, id, 'Failed', 11, 500, 'the receiver answered 500', 12 FROM e""")
        system.psql(f"UPDATE webhook_endpoints SET paused_at = now(), failing_since = now() - interval '7 hours' "
                    f"WHERE id = {hook}")
        browser.go("#/webhooks")
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"#webhooks tr[data-webhook='{hook}']"),
                     what="the endpoint in the list")
        listed = browser.find(f"#webhooks tr[data-webhook='{hook}']")[0].text
        browser.find(f"#webhooks tr[data-webhook='{hook}'] a")[0].click()
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#webhook-deliveries tr[data-state=Failed] button.replay"),
                     what="the failed delivery with its Replay button")
        shown = browser.find("#webhook-deliveries tbody tr")[0].text
        report("paused" in listed and "hooks.example.com" in listed and "HTTP 500" in shown and "12 ms" in shown
               and browser.find("#webhook[data-health=paused]"),
               "the Webhooks page shows a paused endpoint and its delivery log", f"{listed!r}; {shown!r}")
        browser.shot("webhook")
        browser.find("#webhook-deliveries button.replay")[0].click()
        browser.wait(lambda d: d.find_element(By.ID, "confirm").is_displayed(), what="the replay confirmation")
        browser.driver.find_element(By.ID, "confirm-yes").click()
        browser.wait(lambda d: "replayed" in d.find_element(By.ID, "status").text, what="the replay's answer")
        _, log, _ = system.v1("GET", f"/v1/webhooks/{hook}/deliveries")
        report([d["state"] for d in log["deliveries"]] == ["Pending", "Failed"]
               and log["deliveries"][0]["eventId"] == log["deliveries"][1]["eventId"],
               "replaying a delivery from the page makes a new delivery of the same event",
               f"{[(d['id'], d['state']) for d in log['deliveries']]}")
        browser.wait(lambda d: d.find_elements(By.ID, "resume-webhook"), what="the Resume button")
        browser.driver.find_element(By.ID, "resume-webhook").click()
        browser.wait(lambda d: d.find_element(By.ID, "confirm").is_displayed(), what="the resume confirmation")
        browser.driver.find_element(By.ID, "confirm-yes").click()
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#webhook[data-health=ok]"), what="the endpoint resumed")
        _, resumed, _ = system.v1("GET", f"/v1/webhooks/{hook}")
        report(resumed["health"] == "ok" and resumed["enabled"], "resuming a paused endpoint from the page closes its circuit",
               f"{resumed['health']}")
        browser.drain_logs()
        send_console = [e for e in browser.console if e["level"] == "SEVERE" and e not in expected_401
                        and e not in read_console]

        # Every request stayed on loopback.
        hosts = sorted({urllib.parse.urlsplit(u).hostname or u.split(":")[0] for u in browser.requests})
        report(bool(browser.requests) and all(h in ("127.0.0.1", "localhost") or h == "data" for h in hosts),
               "no request leaves loopback", f"{len(browser.requests)} requests to {hosts}")
        document = browser.responses.get(system.api_url + "/dashboard", {})
        report(document.get("content-security-policy") == CSP, "the browser received the CSP header with the page")
        errors = read_console + send_console
        report(not errors, "no console errors (besides the wrong key's 401)",
               "; ".join(e["message"][:160] for e in errors) or f"{len(expected_401)} expected 401 line(s)")
    finally:
        browser.quit()

    # The overview at phone width.
    phone = Browser(system.api_url, 390, 844)
    try:
        phone.open()
        phone.sign_in(system.read_key)
        phone.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#overview[aria-busy=false]"), what="the overview")
        width = phone.driver.execute_script("return document.documentElement.scrollWidth")
        report(width <= 390, "the overview fits 390 px without sideways scrolling", f"scrollWidth {width}")
        phone.driver.set_window_size(390, 1800)
        phone.shot("overview-390px")
    finally:
        phone.quit()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    base_url = os.environ.get("HERALD_DATABASE_URL")
    if not base_url:
        print("dashboard-test: HERALD_DATABASE_URL is not set (scripts/db.sh up)", file=sys.stderr)
        return 2
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch drivers: Debian's are used.
    shutil.rmtree(LOGS, ignore_errors=True)
    os.makedirs(LOGS)
    shutil.rmtree(SHOTS, ignore_errors=True)
    system = None
    try:
        system = System(args.bin, base_url)
        run(system)
    except Failure as error:
        report(False, "the run", str(error))
    finally:
        if system:
            system.stop()
    print(f"dashboard-test: screenshots in {os.path.relpath(SHOTS, ROOT)}/; logs in {os.path.relpath(LOGS, ROOT)}/")
    if failures:
        print(f"dashboard-test: {len(failures)} check(s) failed", flush=True)
        return 1
    print("dashboard-test: all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
