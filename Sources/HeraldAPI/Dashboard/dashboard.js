// Herald ops console. Plain JavaScript, no dependencies, no inline script or style (the page's
// CSP allows only this origin's files). The API key lives in sessionStorage (this tab only) and
// goes out as `Authorization: Bearer` on each fetch; no cookies.
"use strict";

(() => {
  const KEY = "herald.apiKey";
  const STATES = ["Scheduled", "Queued", "Enqueued", "Processing", "Completed", "NoTargetFound", "Abandoned",
    "Unknown", "Cancelled", "Expired"];
  const FAILURE_STATES = new Set(["Abandoned", "Unknown", "Expired"]);
  const RESULTS = ["accepted", "retried", "throttled", "abandoned", "expired"];
  const WINDOWS = ["15m", "1h", "24h", "7d"];
  const WINDOW_SECONDS = { "15m": 900, "1h": 3600, "24h": 86400, "7d": 604800 };
  const REFRESH_MS = 5000;
  const SVG = "http://www.w3.org/2000/svg";

  const state = { key: null, who: null, window: "1h", timer: null, renderToken: 0 };
  const $ = (id) => document.getElementById(id);

  // MARK: DOM helpers

  /** An element with attributes and children (strings become text nodes: never HTML). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "onclick" || name === "onsubmit" || name === "onchange") node.addEventListener(name.slice(2), value);
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const fmtInt = (n) => (typeof n === "number" ? String(n) : "–");
  const fmtTime = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–");
  const badge = (text) => el("span", { class: "badge s-" + String(text).replace(/[^A-Za-z]/g, "") }, text);
  const canSend = () => !!state.who && (state.who.scopes.includes("send") || state.who.scopes.includes("admin"));
  const canRead = () => !!state.who && (state.who.scopes.includes("read") || state.who.scopes.includes("admin"));

  function setStatus(text, kind) {
    const status = $("status");
    status.replaceChildren();
    if (text) status.append(el("p", { class: kind || "muted" }, text));
  }

  // MARK: API

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, options) {
    const opts = options || {};
    const headers = { Accept: "application/json", Authorization: "Bearer " + state.key };
    let body;
    if (opts.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.json);
    }
    let response;
    try {
      response = await fetch(path, { method: opts.method || "GET", headers, body, credentials: "omit", cache: "no-store" });
    } catch (error) {
      throw new APIError(0, "network", "Herald did not answer: " + error.message);
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const code = (data && data.code) || "http_" + response.status;
      const message = (data && data.message) || "HTTP " + response.status;
      if (response.status === 401 && !opts.signingIn) signOut("The API key was refused (" + message + "). Sign in again.");
      throw new APIError(response.status, code, message);
    }
    return data;
  }

  // MARK: Sign-in

  async function signIn(key, fromStorage) {
    state.key = key;
    try {
      state.who = await api("/v1/whoami", { signingIn: true });
    } catch (error) {
      state.key = null;
      state.who = null;
      sessionStorage.removeItem(KEY);
      showSignIn(
        error.status === 401
          ? "That API key was refused: " + error.message
          : "Could not sign in: " + error.message);
      return;
    }
    if (!fromStorage) sessionStorage.setItem(KEY, key);
    $("api-key").value = "";
    $("sign-in").hidden = true;
    $("sign-in-error").hidden = true;
    $("nav").hidden = false;
    $("who").hidden = false;
    $("who-name").textContent = state.who.name + " (" + state.who.scopes.join(", ") + ")";
    $("page").hidden = false;
    if (!location.hash || location.hash === "#" || location.hash === "#/") location.hash = "#/overview";
    else route();
  }

  function showSignIn(error) {
    stopRefresh();
    $("page").hidden = true;
    $("page").replaceChildren();
    $("nav").hidden = true;
    $("who").hidden = true;
    $("sign-in").hidden = false;
    setStatus("");
    const message = $("sign-in-error");
    message.hidden = !error;
    message.textContent = error || "";
    $("api-key").focus();
  }

  function signOut(error) {
    state.key = null;
    state.who = null;
    sessionStorage.removeItem(KEY);
    showSignIn(error);
  }

  // MARK: Routing

  function stopRefresh() {
    if (state.timer) clearTimeout(state.timer);
    state.timer = null;
  }

  function route() {
    if (!state.who) return;
    stopRefresh();
    const token = ++state.renderToken;
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    const page = parts[0] || "overview";
    for (const link of document.querySelectorAll("#nav a")) {
      if (link.dataset.page === page) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const container = $("page");
    container.replaceChildren();
    setStatus("");
    const render = {
      overview: () => renderOverview(container, token),
      notifications: () => (parts[1] ? renderNotification(container, parts[1], token) : renderNotifications(container, token)),
      failures: () => renderFailures(container, token),
      devices: () => renderDevices(container, parts[1] || "", token),
      campaigns: () => (parts[1] ? renderCampaign(container, parts[1], token) : renderCampaigns(container, token)),
      webhooks: () => (parts[1] ? renderWebhook(container, parts[1], token) : renderWebhooks(container, token)),
    }[page];
    if (!render) {
      container.append(el("p", { class: "error" }, "No such page."));
      return;
    }
    if (!canRead()) {
      container.append(
        el("p", { class: "error", role: "alert" }, "This API key has no read scope: the console can show nothing with it."));
      return;
    }
    render().catch((error) => {
      if (token !== state.renderToken || !state.who) return;
      setStatus("Error: " + error.message, "error");
    });
  }

  const current = (token) => token === state.renderToken && !!state.who;

  // MARK: Overview

  async function renderOverview(container, token) {
    const select = el("select", { id: "window", "aria-label": "Window" },
      WINDOWS.map((w) => el("option", { value: w, selected: w === state.window }, w)));
    select.addEventListener("change", () => {
      state.window = select.value;
      refresh();
    });
    const updated = el("span", { class: "muted", "data-test": "updated" });
    container.append(
      el("div", { class: "toolbar" },
        el("div", { class: "field" }, el("label", { for: "window" }, "Window"), select),
        el("button", { type: "button", class: "secondary", onclick: () => refresh() }, "Refresh"),
        updated));
    const body = el("div", { id: "overview", "aria-busy": "true" }, el("p", { class: "loading muted" }, "Loading statistics"));
    container.append(body);

    async function refresh() {
      stopRefresh();
      let stats;
      try {
        stats = await api("/v1/stats?window=" + encodeURIComponent(state.window));
      } catch (error) {
        if (!current(token)) return;
        setStatus("Could not load statistics: " + error.message, "error");
        schedule();
        return;
      }
      if (!current(token)) return;
      setStatus("");
      body.replaceChildren(...overviewContent(stats));
      body.setAttribute("aria-busy", "false");
      body.dataset.window = stats.window;
      body.dataset.generatedAt = stats.generatedAt;
      updated.textContent = "Updated " + fmtTime(stats.generatedAt) + (document.hidden ? " (paused)" : "");
      schedule();
    }

    function schedule() {
      stopRefresh();
      if (!current(token) || document.hidden) return;
      state.timer = setTimeout(refresh, REFRESH_MS);
    }
    state.resume = () => current(token) && refresh();
    await refresh();
  }

  function tile(label, value, stat, extraClass) {
    return el("div", { class: "tile " + (extraClass || "") },
      el("div", { class: "label" }, label),
      el("div", { class: "value", "data-stat": stat }, value));
  }

  function overviewContent(stats) {
    const byState = (stats.notifications && stats.notifications.byState) || {};
    const strip = el("div", { class: "strip", role: "list", "aria-label": "Notifications by state" },
      STATES.map((s) => {
        const node = tile(s, fmtInt(byState[s] || 0), "state." + s, FAILURE_STATES.has(s) && byState[s] ? "failure" : "");
        node.setAttribute("role", "listitem");
        return node;
      }));
    const outcomes = stats.outcomes || { totals: {}, buckets: [], errorRate: 0 };
    const totals = el("div", { class: "figures" },
      RESULTS.map((r) => tile(r, fmtInt(outcomes.totals[r] || 0), "outcomes." + r)),
      (() => {
        const t = tile("error rate", (100 * (outcomes.errorRate || 0)).toFixed(1) + " %", "errorRate");
        t.querySelector(".value").dataset.value = String(outcomes.errorRate || 0);
        return t;
      })());
    const queues = el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "queue"), el("th", { class: "num" }, "waiting"),
        el("th", { class: "num" }, "running"), el("th", { class: "num" }, "oldest waiting (s)"))),
      el("tbody", {}, (stats.queues || []).map((q) => el("tr", {},
        el("td", {}, q.queue),
        el("td", { class: "num", "data-stat": "queue." + q.queue + ".waiting" }, fmtInt((q.byState || {}).waiting || 0)),
        el("td", { class: "num", "data-stat": "queue." + q.queue + ".running" }, fmtInt((q.byState || {}).running || 0)),
        el("td", { class: "num", "data-stat": "queue." + q.queue + ".oldestWaitingSeconds" },
          (q.oldestWaitingSeconds || 0).toFixed(1)))))));
    const throttling = stats.hubThrottling || {};
    const runs = stats.campaignRuns || [];
    const errors = stats.errors || [];
    return [
      el("section", { class: "card", "aria-labelledby": "h-states" },
        el("h2", { id: "h-states" }, "Notifications created in the last " + stats.window + ", by state"), strip),
      el("section", { class: "card", "aria-labelledby": "h-throughput" },
        el("h2", { id: "h-throughput" }, "Hub send outcomes per " + (stats.bucketSeconds === 60 ? "minute" : "hour")),
        throughputChart(outcomes.buckets || [], stats.bucketSeconds), totals),
      el("div", { class: "grid" },
        el("section", { class: "card", "aria-labelledby": "h-queues" }, el("h2", { id: "h-queues" }, "Queues"), queues),
        el("section", { class: "card", "aria-labelledby": "h-hub" }, el("h2", { id: "h-hub" }, "Hub throttling"),
          el("dl", { class: "facts" },
            el("dt", {}, "in effect"),
            el("dd", { "data-stat": "hubThrottling.inEffect" }, throttling.inEffect ? "yes" : "no"),
            el("dt", {}, "throttled, last 5 min"),
            el("dd", { "data-stat": "hubThrottling.throttledLast5m" }, fmtInt(throttling.throttledLast5m || 0)),
            el("dt", {}, "last throttled"), el("dd", {}, fmtTime(throttling.lastThrottledAt)))),
        el("section", { class: "card", "aria-labelledby": "h-runs" },
          el("h2", { id: "h-runs" }, "Campaign runs in progress: ",
            el("span", { "data-stat": "campaignRuns.count" }, fmtInt(runs.length))),
          runs.length === 0 ? el("p", { class: "muted" }, "None.") :
            el("ul", {}, runs.map((r) => el("li", {},
              el("a", { href: "#/campaigns/" + encodeURIComponent(r.campaignId) }, r.campaignName || r.campaignId), " ",
              el("progress", { max: Math.max(1, r.hubSends), value: r.finishedHubSends, "aria-label": "progress" }), " ",
              fmtInt(r.finishedHubSends) + "/" + fmtInt(r.hubSends)))))),
      el("section", { class: "card", "aria-labelledby": "h-errors" },
        el("h2", { id: "h-errors" }, "Errors from the hub"),
        errors.length === 0 ? el("p", { class: "muted" }, "No errors in this window.") :
          el("div", { class: "table-wrap" }, el("table", {},
            el("thead", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "error"), el("th", { class: "num" }, "count"),
              el("th", { class: "hide-narrow" }, "last"))),
            el("tbody", {}, errors.map((e) => el("tr", {},
              el("td", {}, e.httpStatus === null ? "no answer" : String(e.httpStatus)),
              el("td", { class: "mono" }, e.error || ""), el("td", { class: "num" }, fmtInt(e.count)),
              el("td", { class: "hide-narrow" }, fmtTime(e.lastAt)))))))),
    ];
  }

  /** A stacked bar chart of outcome buckets, as SVG elements (geometry in attributes only). */
  function throughputChart(buckets, bucketSeconds) {
    const width = 800, height = 200, left = 40, bottom = 20, top = 8;
    const totals = buckets.map((b) => RESULTS.reduce((sum, r) => sum + (b[r] || 0), 0));
    const max = Math.max(1, ...totals);
    const plotHeight = height - bottom - top;
    const step = (width - left) / Math.max(1, buckets.length);
    const chart = svg("svg", {
      class: "chart", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
      "aria-label": `Hub send outcomes per ${bucketSeconds === 60 ? "minute" : "hour"}, stacked by result; peak ${max}`,
    });
    chart.append(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }));
    chart.append(svg("text", { class: "axis-label", x: 2, y: top + 8 }, String(max)));
    chart.append(svg("text", { class: "axis-label", x: 2, y: height - bottom }, "0"));
    buckets.forEach((b, i) => {
      let y = height - bottom;
      for (const r of RESULTS) {
        const value = b[r] || 0;
        if (!value) continue;
        const h = (value / max) * plotHeight;
        y -= h;
        chart.append(svg("rect", {
          class: "r-" + r, x: left + i * step + step * 0.1, y: y, width: Math.max(1, step * 0.8), height: h,
        }, svg("title", {}, `${fmtTime(b.at)} ${r}: ${value}`)));
      }
    });
    if (buckets.length) {
      chart.append(svg("text", { class: "axis-label", x: left, y: height - 4 }, fmtTime(buckets[0].at)));
      chart.append(svg("text", { class: "axis-label", x: width - 4, y: height - 4, "text-anchor": "end" },
        fmtTime(buckets[buckets.length - 1].at)));
    }
    const legend = el("div", { class: "legend" },
      RESULTS.map((r) => el("span", {}, el("span", { class: "swatch r-" + r }), r)));
    return el("div", {}, chart, legend);
  }

  // MARK: Notifications

  const filterState = { state: "", tag: "", sender: "", since: "", until: "" };

  function toISO(localValue) {
    if (!localValue) return "";
    const date = new Date(localValue);
    return isNaN(date) ? "" : date.toISOString();
  }

  function filterQuery() {
    const query = new URLSearchParams();
    if (filterState.state) query.set("state", filterState.state);
    if (filterState.tag) query.set("tag", filterState.tag);
    if (filterState.sender) query.set("sender", filterState.sender);
    if (filterState.since) query.set("since", toISO(filterState.since));
    if (filterState.until) query.set("until", toISO(filterState.until));
    return query;
  }

  function filterBody() {
    const body = {};
    if (filterState.state) body.state = filterState.state;
    if (filterState.tag) body.tag = filterState.tag;
    if (filterState.sender) body.sender = filterState.sender;
    if (filterState.since) body.since = toISO(filterState.since);
    if (filterState.until) body.until = toISO(filterState.until);
    return body;
  }

  async function renderNotifications(container, token) {
    const field = (id, label, input) => el("div", { class: "field" }, el("label", { for: id }, label), input);
    const stateSelect = el("select", { id: "f-state" }, el("option", { value: "" }, "any"),
      STATES.map((s) => el("option", { value: s, selected: filterState.state === s }, s)));
    const tag = el("input", { id: "f-tag", value: filterState.tag, placeholder: "username:alice", maxlength: 1000 });
    const sender = el("input", { id: "f-sender", value: filterState.sender, placeholder: "apiKeyId:3", maxlength: 64 });
    const since = el("input", { id: "f-since", type: "datetime-local", value: filterState.since });
    const until = el("input", { id: "f-until", type: "datetime-local", value: filterState.until });
    const form = el("form", { class: "toolbar", "aria-label": "Filter notifications" },
      field("f-state", "State", stateSelect), field("f-tag", "Tag", tag), field("f-sender", "Sender", sender),
      field("f-since", "Created since", since), field("f-until", "Created before", until),
      el("button", { type: "submit" }, "Apply"));
    const list = el("div", { class: "table-wrap", "aria-live": "polite" });
    const pager = el("div", { class: "pager" });
    const actions = el("div", { class: "actions" });
    container.append(el("section", { class: "card" }, el("h2", {}, "Notifications"), form, actions, list, pager));

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      Object.assign(filterState, {
        state: stateSelect.value, tag: tag.value.trim(), sender: sender.value.trim(), since: since.value, until: until.value,
      });
      load(null);
    });
    if (canSend()) {
      actions.append(el("button", {
        type: "button", class: "danger", id: "cancel-matching",
        onclick: () => bulkCancel(filterBody(), "notifications matching this filter", () => load(null)),
      }, "Cancel all matching that have not gone out…"));
    }

    async function load(cursor) {
      list.replaceChildren(el("p", { class: "loading muted" }, "Loading notifications"));
      pager.replaceChildren();
      const query = filterQuery();
      query.set("limit", "50");
      if (cursor) query.set("cursor", cursor);
      let page;
      try {
        page = await api("/v1/notifications?" + query.toString());
      } catch (error) {
        if (!current(token)) return;
        list.replaceChildren(el("p", { class: "error", role: "alert" }, "Could not load notifications: " + error.message));
        return;
      }
      if (!current(token)) return;
      const rows = page.notifications || [];
      list.replaceChildren(rows.length === 0 ? el("p", { class: "muted" }, "No notifications match.") :
        el("table", { id: "notifications" },
          el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", {}, "state"), el("th", {}, "target"),
            el("th", { class: "hide-narrow" }, "sender"), el("th", {}, "created"), el("th", { class: "hide-narrow" }, "send at"))),
          el("tbody", {}, rows.map((n) => el("tr", { "data-id": n.id },
            el("td", {}, el("a", { href: "#/notifications/" + n.id, class: "mono" }, n.id.slice(0, 8))),
            el("td", {}, badge(n.state)),
            el("td", { class: "mono" }, describeTarget(n.target)),
            el("td", { class: "hide-narrow mono" }, describeSender(n.sender)),
            el("td", {}, fmtTime(n.createdAt)),
            el("td", { class: "hide-narrow" }, fmtTime(n.sendAt)))))));
      if (page.nextCursor) {
        pager.append(el("button", { type: "button", class: "secondary", onclick: () => load(page.nextCursor) }, "Next page"));
      }
      if (cursor) pager.prepend(el("button", { type: "button", class: "secondary", onclick: () => load(null) }, "First page"));
    }
    await load(null);
  }

  function describeTarget(target) {
    if (!target) return "";
    if (target.user) return "user " + target.user;
    if (target.users) return target.users.length + " users";
    if (target.tags) return "tags " + target.tags;
    if (target.installationId) return "installation " + target.installationId;
    if (target.deviceHandleFingerprint) return "device " + target.deviceHandleFingerprint;
    return JSON.stringify(target);
  }

  function describeSender(sender) {
    if (!sender) return "";
    if (sender.apiKeyId) return "apiKeyId:" + sender.apiKeyId;
    if (sender.userId) return "userId:" + sender.userId;
    if (sender.campaignRunId) return "campaignRunId:" + sender.campaignRunId;
    return "";
  }

  async function renderNotification(container, id, token) {
    container.append(el("p", {}, el("a", { href: "#/notifications" }, "← Notifications")));
    const body = el("div", {}, el("p", { class: "loading muted" }, "Loading notification"));
    container.append(body);
    let detail;
    try {
      detail = await api("/v1/notifications/" + encodeURIComponent(id));
    } catch (error) {
      if (!current(token)) return;
      body.replaceChildren(el("p", { class: "error", role: "alert" }, "Could not load the notification: " + error.message));
      return;
    }
    if (!current(token)) return;
    const cancellable = detail.state === "Scheduled" || detail.state === "Queued";
    const message = el("p", { role: "status" });
    const cancel = canSend() && cancellable ? el("button", {
      type: "button", class: "danger", id: "cancel-notification",
      onclick: async () => {
        if (!(await confirmAction("Cancel this notification? Its hub sends that have not gone out will never be sent."))) return;
        try {
          await api("/v1/notifications/" + encodeURIComponent(id), { method: "DELETE" });
          route();
          setStatus("Notification cancelled.", "ok");
        } catch (error) {
          message.className = "error";
          message.textContent = "Could not cancel: " + error.message;
        }
      },
    }, "Cancel notification") : null;
    body.replaceChildren(
      el("section", { class: "card", id: "notification", "data-id": detail.id, "data-state": detail.state },
        el("h2", {}, "Notification ", el("span", { class: "mono" }, detail.id), " ", badge(detail.state)),
        el("dl", { class: "facts" },
          el("dt", {}, "target"), el("dd", { class: "mono" }, describeTarget(detail.target)),
          el("dt", {}, "sender"), el("dd", { class: "mono" }, describeSender(detail.sender)),
          el("dt", {}, "formats"), el("dd", {}, (detail.formats || []).join(", ")),
          el("dt", {}, "created"), el("dd", {}, fmtTime(detail.createdAt)),
          el("dt", {}, "send at"), el("dd", {}, fmtTime(detail.sendAt)),
          el("dt", {}, "deadline"), el("dd", {}, fmtTime(detail.deadline)),
          el("dt", {}, "finished"), el("dd", {}, fmtTime(detail.finishedAt))),
        el("div", { class: "actions" }, cancel), message),
      ...(detail.hubSends || []).map(hubSendCard));
  }

  function hubSendCard(send) {
    const outcomes = send.outcomes || [];
    return el("section", { class: "card hub-send", "data-hub-send": send.id },
      el("h3", {}, `Hub send ${send.id} · ${send.format} `, badge(send.state)),
      el("dl", { class: "facts" },
        el("dt", {}, "to"), el("dd", { class: "mono" }, send.tagExpression || send.deviceHandleFingerprint || "everyone"),
        el("dt", {}, "attempts"), el("dd", {}, fmtInt(send.attempts)),
        el("dt", {}, "hub notification id"), el("dd", { class: "mono" }, send.hubNotificationId || "–"),
        el("dt", {}, "last error"), el("dd", { class: "mono" }, send.lastError || "–"),
        el("dt", {}, "telemetry"), el("dd", { class: "mono" },
          send.telemetry ? JSON.stringify(send.telemetry) : (send.telemetryNote || "–"))),
      outcomes.length === 0 ?
        el("p", { class: "muted" }, ["Scheduled", "Queued"].includes(send.state) ? "No attempt yet." : "No attempt was made.") :
        el("ol", { class: "timeline", "aria-label": "Attempts of hub send " + send.id },
          outcomes.map((o) => el("li", {
            class: "outcome", "data-kind": o.kind, "data-attempt": o.attempt, "data-tracking-id": o.trackingId || "",
          },
            el("div", { class: "head" }, `${fmtTime(o.startedAt || o.at)} · ${o.kind} attempt ${o.attempt} · `,
              o.httpStatus === null || o.httpStatus === undefined ? "no answer" : "HTTP " + o.httpStatus, " · ",
              el("span", { class: "decision" }, o.decision), " → ", badge(o.state)),
            el("div", { class: "muted" },
              `duration ${Number(o.durationMs || 0).toFixed(1)} ms`,
              o.trackingId ? " · tracking id " : "", o.trackingId ? el("span", { class: "mono tracking" }, o.trackingId) : "",
              o.retryAfterMs !== null && o.retryAfterMs !== undefined ? ` · Retry-After ${o.retryAfterMs} ms` : "",
              o.hubNotificationId ? " · hub id " + o.hubNotificationId : ""),
            o.error ? el("div", { class: "mono error" }, o.error) : null,
            o.telemetry ? el("div", { class: "mono" }, "telemetry " + JSON.stringify(o.telemetry)) : null))));
  }

  // MARK: Actions

  function confirmAction(text) {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    return new Promise((resolve) => {
      const done = (answer) => {
        $("confirm-yes").onclick = null;
        $("confirm-no").onclick = null;
        dialog.onclose = null;
        if (dialog.open) dialog.close();
        resolve(answer);
      };
      $("confirm-yes").onclick = () => done(true);
      $("confirm-no").onclick = () => done(false);
      dialog.onclose = () => done(false);
      dialog.showModal();
      $("confirm-no").focus();
    });
  }

  async function bulkCancel(filter, what, after) {
    if (Object.keys(filter).length === 0) {
      setStatus("Set at least one filter first: cancelling everything is not offered.", "error");
      return;
    }
    try {
      const preview = await api("/v1/notifications:cancel", { method: "POST", json: Object.assign({ dryRun: true }, filter) });
      if (preview.cancelled === 0) {
        setStatus(`Nothing to cancel: ${preview.matched} matched, none is still waiting.`, "muted");
        return;
      }
      const ok = await confirmAction(
        `Cancel ${preview.cancelled}${preview.more ? "+ (10,000 per call)" : ""} ${what}? ` +
        `${preview.matched} match; ${preview.notCancellable} have already gone out and stay as they are.`);
      if (!ok) return;
      const done = await api("/v1/notifications:cancel", { method: "POST", json: filter });
      setStatus(`Cancelled ${done.cancelled} of ${done.matched}; ${done.notCancellable} had gone out.` +
        (done.more ? " More remain: run it again." : ""), "ok");
      if (after) after();
    } catch (error) {
      setStatus("Cancel failed: " + error.message, "error");
    }
  }

  async function retrySends(selection, what, after) {
    try {
      const preview = await api("/v1/hub-sends:retry", { method: "POST", json: Object.assign({ dryRun: true }, selection) });
      if (preview.retried === 0) {
        setStatus(`Nothing to retry: ${preview.matched} matched; ${preview.skipped.deadlinePassed} past their deadline.`, "muted");
        return;
      }
      const ok = await confirmAction(
        `Retry ${preview.retried}${preview.more ? "+" : ""} ${what} as new attempts? ` +
        `${preview.skipped.deadlinePassed} are past their deadline and stay abandoned.`);
      if (!ok) return;
      const done = await api("/v1/hub-sends:retry", { method: "POST", json: selection });
      setStatus(`Retried ${done.retried} of ${done.matched} hub sends.` + (done.more ? " More remain: run it again." : ""), "ok");
      if (after) after();
    } catch (error) {
      setStatus("Retry failed: " + error.message, "error");
    }
  }

  // MARK: Failures

  const failureFilter = { window: "24h", tag: "", sender: "" };

  async function renderFailures(container, token) {
    const select = el("select", { id: "fail-window" }, WINDOWS.map((w) => el("option", { value: w, selected: w === failureFilter.window }, w)));
    const tag = el("input", { id: "fail-tag", value: failureFilter.tag, placeholder: "username:alice", maxlength: 1000 });
    const sender = el("input", { id: "fail-sender", value: failureFilter.sender, placeholder: "apiKeyId:3", maxlength: 64 });
    const form = el("form", { class: "toolbar", "aria-label": "Failures filter" },
      el("div", { class: "field" }, el("label", { for: "fail-window" }, "Window"), select),
      el("div", { class: "field" }, el("label", { for: "fail-tag" }, "Tag (cancel)"), tag),
      el("div", { class: "field" }, el("label", { for: "fail-sender" }, "Sender (cancel)"), sender),
      el("button", { type: "submit" }, "Apply"));
    const actions = el("div", { class: "actions" });
    const list = el("div", { class: "table-wrap" });
    container.append(el("section", { class: "card" }, el("h2", {}, "Failures: abandoned and expired hub sends, by cause"),
      form, actions, list));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      Object.assign(failureFilter, { window: select.value, tag: tag.value.trim(), sender: sender.value.trim() });
      load();
    });
    const cancelFilter = () => {
      const body = { since: new Date(Date.now() - WINDOW_SECONDS[failureFilter.window] * 1000).toISOString() };
      if (failureFilter.tag) body.tag = failureFilter.tag;
      if (failureFilter.sender) body.sender = failureFilter.sender;
      return body;
    };
    if (canSend()) {
      actions.append(
        el("button", {
          type: "button", class: "danger", id: "failures-cancel",
          onclick: () => bulkCancel(cancelFilter(), "waiting notifications created in this window (and tag/sender)", load),
        }, "Cancel what has not gone out…"),
        el("button", {
          type: "button", id: "failures-retry-all",
          onclick: () => retrySends({ window: failureFilter.window, decision: "abandoned" },
            "abandoned hub sends of this window", load),
        }, "Retry all abandoned…"));
    }

    async function load() {
      list.replaceChildren(el("p", { class: "loading muted" }, "Loading failures"));
      let report;
      try {
        report = await api("/v1/failures?window=" + encodeURIComponent(failureFilter.window));
      } catch (error) {
        if (!current(token)) return;
        list.replaceChildren(el("p", { class: "error", role: "alert" }, "Could not load failures: " + error.message));
        return;
      }
      if (!current(token)) return;
      const groups = report.groups || [];
      list.replaceChildren(groups.length === 0 ? el("p", { class: "muted" }, "No failures in this window.") :
        el("table", { id: "failures" },
          el("thead", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "error"), el("th", {}, "decision"),
            el("th", { class: "num" }, "sends"), el("th", { class: "num hide-narrow" }, "notifications"),
            el("th", { class: "hide-narrow" }, "last"), el("th", {}, "examples"), el("th", {}, ""))),
          el("tbody", {}, groups.map((g) => {
            const cause = g.cause || {};
            const retry = canSend() && g.decision === "abandoned" ? el("button", {
              type: "button", class: "secondary",
              onclick: () => retrySends({
                window: failureFilter.window, httpStatus: cause.httpStatus === undefined ? null : cause.httpStatus,
                error: cause.error === undefined ? null : cause.error, decision: "abandoned",
              }, "abandoned hub sends of this cause", load),
            }, "Retry…") : null;
            return el("tr", {},
              el("td", {}, cause.httpStatus === null || cause.httpStatus === undefined ? "no answer" : String(cause.httpStatus)),
              el("td", { class: "mono" }, cause.error || ""), el("td", {}, g.decision),
              el("td", { class: "num" }, fmtInt(g.count)), el("td", { class: "num hide-narrow" }, fmtInt(g.notifications)),
              el("td", { class: "hide-narrow" }, fmtTime(g.lastAt)),
              el("td", {}, (g.sampleNotificationIds || []).map((id) =>
                el("a", { href: "#/notifications/" + id, class: "mono" }, id.slice(0, 8) + " "))),
              el("td", {}, retry));
          }))));
    }
    await load();
  }

  // MARK: Devices

  // The newest hub reconcile run (`heraldctl hub reconcile`, or the scheduled one), from /v1/stats.
  function reconcileCard(token) {
    const body = el("p", { class: "loading muted" }, "Loading");
    const card = el("section", { class: "card", "data-card": "reconcile" }, el("h2", {}, "Last hub reconcile"), body);
    api("/v1/stats?window=15m").then((stats) => {
      if (!current(token)) return;
      const run = stats.devices && stats.devices.lastReconcile;
      if (!run) {
        body.replaceWith(el("p", { class: "muted" }, "No reconcile has run (heraldctl hub reconcile)."));
        return;
      }
      const count = (label, value, note) => [el("dt", {}, label), el("dd", { class: "num" }, String(value), note ? el("span", { class: "muted" }, " " + note) : "")];
      body.replaceWith(el("dl", { class: "facts" },
        el("dt", {}, "state"), el("dd", {}, badge(run.state), run.apply ? " (repairs applied)" : " (report only)"),
        el("dt", {}, "started"), el("dd", {}, fmtTime(run.startedAt)),
        el("dt", {}, "finished"), el("dd", {}, fmtTime(run.finishedAt)),
        ...count("scanned", run.scanned),
        ...count("orphans", run.orphans, "Herald's, no live device"),
        ...count("missing", run.missing, "live, not at the hub"),
        ...count("different", run.different),
        ...count("foreign", run.foreign, "not Herald's: never deleted"),
        ...count("repaired", run.repaired, "jobs enqueued")));
    }).catch((error) => {
      if (!current(token)) return;
      body.replaceWith(el("p", { class: "error", role: "alert" }, "Could not load the last reconcile: " + error.message));
    });
    return card;
  }

  async function renderDevices(container, name, token) {
    container.append(reconcileCard(token));
    const input = el("input", { id: "device-user", value: name, required: true, maxlength: 64, placeholder: "alice" });
    const form = el("form", { class: "toolbar", "aria-label": "Look up a user" },
      el("div", { class: "field" }, el("label", { for: "device-user" }, "User name"), input),
      el("button", { type: "submit" }, "Look up"));
    const result = el("div", {});
    container.append(hygieneCard(token));
    container.append(el("section", { class: "card" }, el("h2", {}, "Devices of a user"), form), result);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const user = input.value.trim();
      if (user) location.hash = "#/devices/" + encodeURIComponent(user);
    });
    if (!name) return;
    result.replaceChildren(el("p", { class: "loading muted" }, "Loading devices"));
    let data;
    try {
      data = await api("/v1/users/" + encodeURIComponent(name) + "/devices");
    } catch (error) {
      if (!current(token)) return;
      result.replaceChildren(el("p", { class: "error", role: "alert" },
        error.status === 404 ? `No user called ${name}.` : "Could not load devices: " + error.message));
      return;
    }
    if (!current(token)) return;
    const devices = data.devices || [];
    result.replaceChildren(el("p", {}, `${data.user}: ${devices.length} device(s)`),
      ...devices.map((d) => el("section", { class: "card device", "data-device": d.id },
        el("h3", {}, `${d.platform} ${d.kind} `, badge(d.syncState)),
        el("dl", { class: "facts" },
          el("dt", {}, "id"), el("dd", { class: "mono" }, d.id),
          el("dt", {}, "handle"), el("dd", { class: "mono" }, d.handleFingerprint || "–"),
          el("dt", {}, "tags"), el("dd", { class: "mono" }, (d.tags || []).join(", ") || "–"),
          el("dt", {}, "hub registration"), el("dd", { class: "mono" }, d.hubRegistrationId || "–"),
          el("dt", {}, "last error"), el("dd", { class: "mono" }, d.lastError || "–"),
          el("dt", {}, "updated"), el("dd", {}, fmtTime(d.updatedAt)),
          el("dt", {}, "synced"), el("dd", {}, fmtTime(d.syncedAt))),
        (d.hubCalls || []).length === 0 ? el("p", { class: "muted" }, "No hub calls.") :
          el("div", { class: "table-wrap" }, el("table", {},
            el("thead", {}, el("tr", {}, el("th", {}, "at"), el("th", {}, "operation"), el("th", {}, "status"),
              el("th", { class: "num" }, "ms"), el("th", { class: "hide-narrow" }, "tracking id"), el("th", {}, "error"))),
            el("tbody", {}, d.hubCalls.map((c) => el("tr", {},
              el("td", {}, fmtTime(c.at)), el("td", {}, c.operation),
              el("td", {}, c.httpStatus === null ? "no answer" : String(c.httpStatus)),
              el("td", { class: "num" }, Number(c.durationMs || 0).toFixed(1)),
              el("td", { class: "mono hide-narrow" }, c.trackingId || ""), el("td", { class: "mono" }, c.error || "")))))))));
  }

  // The stale and retired counts of GET /v1/stats (devices.stale, devices.retired), in the
  // overview's window.
  function hygieneCard(token) {
    const body = el("div", { "aria-busy": "true" }, el("p", { class: "loading muted" }, "Loading device hygiene"));
    const card = el("section", { class: "card", id: "device-hygiene" }, el("h2", {}, "Device hygiene"), body);
    api("/v1/stats?window=" + encodeURIComponent(state.window)).then((stats) => {
      if (!current(token)) return;
      const devices = stats.devices || {};
      const retired = devices.retired || { total: 0, byReason: {} };
      const reasons = Object.keys(retired.byReason || {}).sort();
      body.replaceChildren(
        el("div", { class: "figures" },
          tile("stale (last sweep)", fmtInt(devices.stale || 0), "devices.stale"),
          tile("retired in " + stats.window, fmtInt(retired.total || 0), "devices.retired.total"),
          reasons.map((r) => tile("retired: " + r, fmtInt(retired.byReason[r]), "devices.retired." + r))));
      body.setAttribute("aria-busy", "false");
    }, (error) => {
      if (!current(token)) return;
      body.replaceChildren(el("p", { class: "error", role: "alert" }, "Could not load device hygiene: " + error.message));
      body.setAttribute("aria-busy", "false");
    });
    return card;
  }

  // MARK: Campaigns

  async function renderCampaigns(container, token) {
    const list = el("div", { class: "table-wrap" }, el("p", { class: "loading muted" }, "Loading campaigns"));
    const pager = el("div", { class: "pager", id: "campaigns-pager" });
    container.append(el("section", { class: "card" }, el("h2", {}, "Campaigns"), list, pager));

    async function load(cursor) {
      list.replaceChildren(el("p", { class: "loading muted" }, "Loading campaigns"));
      pager.replaceChildren();
      const query = new URLSearchParams({ limit: "50" });
      if (cursor) query.set("cursor", cursor);
      let page;
      try {
        page = await api("/v1/campaigns?" + query.toString());
      } catch (error) {
        if (!current(token)) return;
        list.replaceChildren(el("p", { class: "error", role: "alert" }, "Could not load campaigns: " + error.message));
        return;
      }
      if (!current(token)) return;
      const campaigns = page.campaigns || [];
      list.replaceChildren(campaigns.length === 0 ? el("p", { class: "muted" }, "No campaigns.") :
        el("table", { id: "campaigns" },
          el("thead", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "state"), el("th", {}, "schedule"),
            el("th", {}, "next fire times (UTC)"))),
          el("tbody", {}, campaigns.map((c) => el("tr", {},
            el("td", {}, el("a", { href: "#/campaigns/" + encodeURIComponent(c.id) }, c.name)),
            el("td", {}, badge(c.state)),
            el("td", { class: "mono" }, c.schedule && c.schedule.cron ? `${c.schedule.cron} (${c.schedule.timeZone || "UTC"})` :
              fmtTime(c.schedule && c.schedule.at)),
            el("td", {}, (c.nextRuns || []).slice(0, 3).map((r) => fmtTime(r.utc)).join(", ") || "–"))))));
      if (page.nextCursor) {
        pager.append(el("button", { type: "button", class: "secondary", onclick: () => load(page.nextCursor) }, "Next page"));
      }
      if (cursor) pager.prepend(el("button", { type: "button", class: "secondary", onclick: () => load(null) }, "First page"));
    }
    await load(null);
  }

  async function renderCampaign(container, id, token) {
    container.append(el("p", {}, el("a", { href: "#/campaigns" }, "← Campaigns")));
    const body = el("div", {}, el("p", { class: "loading muted" }, "Loading campaign"));
    container.append(body);
    const [campaign, runs] = await Promise.all([
      api("/v1/campaigns/" + encodeURIComponent(id)),
      api("/v1/campaigns/" + encodeURIComponent(id) + "/runs?limit=50"),
    ]);
    if (!current(token)) return;
    const runList = runs.runs || [];
    const total = (counts) => Object.values((counts && counts.hubSends) || {}).reduce((a, b) => a + b, 0);
    const finished = (counts) => Object.entries((counts && counts.hubSends) || {})
      .filter(([s]) => !["Scheduled", "Queued"].includes(s)).reduce((a, [, n]) => a + n, 0);
    body.replaceChildren(
      el("section", { class: "card" }, el("h2", {}, campaign.name, " ", badge(campaign.state)),
        el("dl", { class: "facts" },
          el("dt", {}, "next fire times"),
          el("dd", {}, (campaign.nextRuns || []).map((r) => el("div", {}, fmtTime(r.utc) + " (local " + r.local + ")"))))),
      el("section", { class: "card" }, el("h2", {}, "Runs"),
        runList.length === 0 ? el("p", { class: "muted" }, "No runs yet.") :
          el("div", { class: "table-wrap" }, el("table", {},
            el("thead", {}, el("tr", {}, el("th", {}, "slot"), el("th", {}, "state"), el("th", {}, "fired by"),
              el("th", {}, "progress"))),
            el("tbody", {}, runList.map((r) => el("tr", {},
              el("td", {}, fmtTime(r.slot)), el("td", {}, badge(r.state)), el("td", {}, r.firedBy),
              el("td", {}, el("progress", { max: Math.max(1, total(r.counts)), value: finished(r.counts), "aria-label": "hub sends finished" }),
                ` ${finished(r.counts)}/${total(r.counts)}`))))))));
  }

  // MARK: Webhooks

  const NO_SEND = "Webhook endpoints need a key with the send scope (or admin): this key cannot see them.";

  async function renderWebhooks(container, token) {
    const list = el("div", { class: "table-wrap" }, el("p", { class: "loading muted" }, "Loading webhook endpoints"));
    container.append(el("section", { class: "card" }, el("h2", {}, "Webhook endpoints"), list));
    if (!canSend()) {
      list.replaceChildren(el("p", { class: "error", role: "alert" }, NO_SEND));
      return;
    }
    const page = await api("/v1/webhooks");
    if (!current(token)) return;
    const endpoints = page.webhooks || [];
    list.replaceChildren(endpoints.length === 0 ? el("p", { class: "muted" }, "No webhook endpoints.") :
      el("table", { id: "webhooks" },
        el("thead", {}, el("tr", {}, el("th", {}, "endpoint"), el("th", {}, "health"), el("th", {}, "events"),
          el("th", {}, "limits"), el("th", {}, "failing since"))),
        el("tbody", {}, endpoints.map((w) => el("tr", { "data-webhook": w.id },
          el("td", { class: "mono" }, el("a", { href: "#/webhooks/" + encodeURIComponent(w.id) }, w.url)),
          el("td", {}, badge(w.enabled ? w.health : "disabled")),
          el("td", {}, (w.types || []).join(", ")),
          el("td", {}, webhookLimits(w)),
          el("td", {}, fmtTime(w.failingSince)))))));
  }

  function webhookLimits(w) {
    return `${w.maxConcurrency} at once` + (w.maxPerSecond ? `, ${w.maxPerSecond}/s` : "");
  }

  async function renderWebhook(container, id, token) {
    container.append(el("p", {}, el("a", { href: "#/webhooks" }, "← Webhook endpoints")));
    const body = el("div", {}, el("p", { class: "loading muted" }, "Loading webhook endpoint"));
    container.append(body);
    if (!canSend()) {
      body.replaceChildren(el("p", { class: "error", role: "alert" }, NO_SEND));
      return;
    }
    const path = "/v1/webhooks/" + encodeURIComponent(id);
    const [endpoint, log] = await Promise.all([api(path), api(path + "/deliveries?limit=100")]);
    if (!current(token)) return;
    const health = endpoint.enabled ? endpoint.health : "disabled";
    const resume = endpoint.health === "paused" || !endpoint.enabled ? el("button", {
      type: "button", id: "resume-webhook",
      onclick: async () => {
        if (!(await confirmAction("Enable this endpoint? What waits for it is sent at once."))) return;
        try {
          await api(path, { method: "PATCH", json: { enabled: true } });
          route();
          setStatus("Endpoint enabled.", "ok");
        } catch (error) {
          setStatus("Could not enable it: " + error.message, "error");
        }
      },
    }, endpoint.enabled ? "Resume" : "Enable") : null;
    const replay = async (deliveryId) => {
      if (!(await confirmAction(`Deliver the event of delivery ${deliveryId} again, as a new delivery?`))) return;
      try {
        await api(path + "/replay", { method: "POST", json: { deliveryId: Number(deliveryId) } });
        route();
        setStatus(`Delivery ${deliveryId} replayed.`, "ok");
      } catch (error) {
        setStatus("Replay failed: " + error.message, "error");
      }
    };
    const deliveries = log.deliveries || [];
    body.replaceChildren(
      el("section", { class: "card", id: "webhook", "data-id": endpoint.id, "data-health": health },
        el("h2", {}, "Webhook endpoint ", el("span", { class: "mono" }, endpoint.url), " ", badge(health)),
        el("dl", { class: "facts" },
          el("dt", {}, "events"), el("dd", {}, (endpoint.types || []).join(", ")),
          el("dt", {}, "limits"), el("dd", {}, webhookLimits(endpoint)),
          el("dt", {}, "failing since"), el("dd", {}, fmtTime(endpoint.failingSince)),
          el("dt", {}, "paused at"), el("dd", {}, fmtTime(endpoint.pausedAt)),
          el("dt", {}, "created"), el("dd", {}, fmtTime(endpoint.createdAt))),
        el("div", { class: "actions" }, resume)),
      el("section", { class: "card" }, el("h2", {}, "Deliveries"),
        deliveries.length === 0 ? el("p", { class: "muted" }, "No deliveries yet.") :
          el("div", { class: "table-wrap" }, el("table", { id: "webhook-deliveries" },
            el("thead", {}, el("tr", {}, el("th", {}, "delivery"), el("th", {}, "event"), el("th", {}, "state"),
              el("th", {}, "attempts"), el("th", {}, "last answer"), el("th", {}, "latency"), el("th", {}, "next try"),
              el("th", {}, ""))),
            el("tbody", {}, deliveries.map((d) => el("tr", { "data-delivery": d.id, "data-state": d.state },
              el("td", { class: "mono" }, d.id),
              el("td", { class: "mono" }, `${d.eventId} ${d.eventType || ""}`),
              el("td", {}, badge(d.state)),
              el("td", {}, fmtInt(d.attempts)),
              el("td", { class: "mono" }, d.lastStatus ? "HTTP " + d.lastStatus : "–",
                d.lastError ? el("div", { class: "error" }, d.lastError) : null),
              el("td", {}, d.latencyMs === null || d.latencyMs === undefined ? "–" : d.latencyMs + " ms"),
              el("td", {}, fmtTime(d.nextTryAt)),
              el("td", {}, d.state === "Pending" ? null : el("button", {
                type: "button", class: "secondary replay", onclick: () => replay(d.id),
              }, "Replay")))))))));
  }

  // MARK: Start

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) stopRefresh();
    else if (state.resume) state.resume();
  });
  window.addEventListener("hashchange", () => {
    state.resume = null;
    route();
  });

  document.addEventListener("DOMContentLoaded", () => {
    $("sign-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("api-key").value.trim();
      if (key) signIn(key, false);
    });
    $("sign-out").addEventListener("click", () => signOut(""));
    const stored = sessionStorage.getItem(KEY);
    if (stored) signIn(stored, true);
    else showSignIn("");
  });
})();
