// slipstream's dashboard: polls /api/stats, turns counters into rates and histogram buckets
// into p50/p99 over the last poll, and keeps up to 10 minutes of history for the charts.
// Every value from the server is written as text (textContent), never as markup.
"use strict";
const POLL_MS = 2000;
const KEEP = 300; // points: 10 minutes at 2 s
let previous = null;
// The documents of the last minute, oldest first: latency percentiles are over this window.
const recent = [];
const WINDOW = 30;
const history = new Map();
const CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"];

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function family(doc, name) { return (doc && doc.metrics[name]) || []; }

// The sum of a family's samples whose labels pass `keep`, grouped by `key(labels)`.
function grouped(doc, name, key, keep) {
  const out = new Map();
  for (const s of family(doc, name)) {
    if (keep && !keep(s.labels)) continue;
    const k = key(s.labels);
    out.set(k, (out.get(k) || 0) + s.value);
  }
  return out;
}

// A quantile from cumulative buckets (le -> count), interpolated within its bucket.
function quantile(buckets, q) {
  const bounds = [...buckets.keys()].map(le => [le === "+Inf" ? Infinity : Number(le), buckets.get(le)])
    .sort((a, b) => a[0] - b[0]);
  const total = bounds.length ? bounds[bounds.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lower = 0, below = 0;
  for (const [bound, count] of bounds) {
    if (count >= rank) {
      if (bound === Infinity) return lower;
      const inBucket = count - below;
      return inBucket > 0 ? lower + (bound - lower) * (rank - below) / inBucket : bound;
    }
    lower = bound; below = count;
  }
  return lower;
}

// Per group, the buckets' growth since `before` (le -> count), or all of it without one.
function bucketDeltas(doc, before, name, groupOf) {
  const now = grouped(doc, name, l => groupOf(l) + "\u0000" + l.le);
  const then = before ? grouped(before, name, l => groupOf(l) + "\u0000" + l.le) : new Map();
  const out = new Map();
  for (const [k, v] of now) {
    // The group may hold a NUL itself (upstream and server): le is after the last one.
    const cut = k.lastIndexOf("\u0000");
    const group = k.slice(0, cut), le = k.slice(cut + 1);
    if (!out.has(group)) out.set(group, new Map());
    out.get(group).set(le, Math.max(0, v - (then.get(k) || 0)));
  }
  return out;
}

function rate(now, then, k, secs) {
  if (!then || !(secs > 0)) return 0;
  return Math.max(0, (now.get(k) || 0) - (then.get(k) || 0)) / secs;
}

function ms(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const v = seconds * 1000;
  return v < 10 ? v.toFixed(2) + " ms" : v < 1000 ? v.toFixed(0) + " ms" : (v / 1000).toFixed(2) + " s";
}

function num(v, digits) { return v.toLocaleString(undefined, { maximumFractionDigits: digits || 0 }); }

function remember(key, value) {
  if (!history.has(key)) history.set(key, []);
  const h = history.get(key);
  h.push(value);
  if (h.length > KEEP) h.shift();
  return h;
}

function spark(points, kind) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark" + (kind ? " " + kind : ""));
  svg.setAttribute("viewBox", "0 0 140 28");
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1e-9, ...points);
  const step = points.length > 1 ? 140 / (KEEP - 1) : 0;
  const x0 = 140 - step * (points.length - 1);
  const d = points.map((p, i) => (i ? "L" : "M") + (x0 + i * step).toFixed(1) + " " + (26 - 24 * p / max).toFixed(1)).join(" ");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", d || "M0 26");
  svg.append(path);
  return svg;
}

function mix(classes) {
  const total = ["2xx", "3xx", "4xx", "5xx"].reduce((s, c) => s + (classes.get(c) || 0), 0);
  const bar = el("span", { class: "mix", title: ["2xx", "3xx", "4xx", "5xx"].map(c => c + " " + num(classes.get(c) || 0)).join(", ") });
  if (total > 0) for (const c of ["2xx", "3xx", "4xx", "5xx"]) {
    const part = el("span", { class: "c" + c[0] });
    part.style.width = (100 * (classes.get(c) || 0) / total) + "%";
    bar.append(part);
  }
  return bar;
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { class: "dim", colspan: "13" }, "none")));
}

function tiles(doc, before, secs) {
  const st = doc.status, c = st.connections, cfg = st.config;
  const total = grouped(doc, "slipstream_requests_total", () => "");
  const totalThen = before ? grouped(before, "slipstream_requests_total", () => "") : null;
  const rps = rate(total, totalThen, "", secs);
  const rpsHistory = remember("total", rps);
  const items = [
    ["requests/s", num(rps, 1), spark(rpsHistory)],
    ["requests", num(st.requests.total)],
    ["4xx / 5xx", num(st.requests.responses_4xx) + " / " + num(st.requests.responses_5xx)],
    ["connections", num(c.active) + " (r " + c.reading + " w " + c.writing + " idle " + c.waiting + ")"],
    ["accepted", num(c.accepted)],
    ["accept paused at limit", num(c.accept_paused_at_limit)],
    ["upstream connects / reused", num(st.upstream.connects) + " / " + num(st.upstream.reused)],
    ["config generation", String(cfg.generation)],
  ];
  document.getElementById("tiles").replaceChildren(...items.map(([k, v, extra]) =>
    el("div", { class: "tile" }, el("div", { class: "v" }, v), el("div", { class: "k" }, k), ...(extra ? [extra] : []))));
}

function meta(doc) {
  const cfg = doc.status.config, last = cfg.last_reload;
  const parts = ["version " + doc.version, "generation " + cfg.generation,
    "reloads " + cfg.reloads_ok + " ok, " + cfg.reloads_failed + " refused"];
  const m = document.getElementById("meta");
  m.replaceChildren(parts.join(" · "));
  if (last) {
    const when = new Date(last.at_ms).toISOString().replace("T", " ").slice(0, 19);
    m.append(" · last reload " + when + " UTC: ",
      el("span", { class: last.ok ? "ok" : "bad", title: last.errors || "" }, last.ok ? "served" : "refused: " + last.errors));
  }
  m.append(" · updated " + new Date(doc.time_ms).toLocaleTimeString());
}

function sites(doc, before, secs) {
  const site = l => l.site || "(no site)";
  const by = grouped(doc, "slipstream_route_responses_total", l => site(l) + "\u0000" + l.class);
  const then = before ? grouped(before, "slipstream_route_responses_total", l => site(l) + "\u0000" + l.class) : null;
  const lat = bucketDeltas(doc, recent[0], "slipstream_route_request_duration_seconds_bucket", site);
  const seen = new Map();
  for (const [k, v] of by) seen.set(k.split("\u0000")[0], (seen.get(k.split("\u0000")[0]) || 0) + v);
  // Every named site; requests that matched none only once there were some.
  const names = [...seen.keys()].filter(n => n !== "(no site)" || seen.get(n) > 0).sort();
  fill("sites", names.map(name => {
    // The mix of the last poll's responses; with none, of all so far.
    const classes = new Map();
    let r = 0;
    for (const c of CLASSES) {
      const d = rate(by, then, name + "\u0000" + c, secs);
      r += d;
      classes.set(c, d);
    }
    if (!(r > 0)) for (const c of CLASSES) classes.set(c, by.get(name + "\u0000" + c) || 0);
    const b = lat.get(name) || new Map();
    const p99 = quantile(b, 0.99);
    return el("tr", {}, el("td", {}, name), el("td", { class: "n" }, num(r, 1)), el("td", {}, mix(classes)),
      el("td", { class: "n" }, ms(quantile(b, 0.5))), el("td", { class: "n" }, ms(p99)),
      el("td", {}, spark(remember("site " + name, r))), el("td", {}, spark(remember("site p99 " + name, p99 || 0), "p99")));
  }));
}

// Each checked server's last failed health check, by group and server.
function lastFailures(doc) {
  const out = new Map();
  for (const c of doc.checks || []) out.set(c.group + "\u0000" + c.server, c);
  return out;
}

function checkCell(ok, failed, last) {
  if (ok === undefined) return el("span", { class: "dim" }, "no active checks");
  const cell = el("span", { class: ok > 0 ? "ok" : "bad" }, (ok > 0 ? "passing" : "failing") + ", " + num(failed || 0) + " failed");
  if (!last) return cell;
  const when = new Date(last.at_ms).toLocaleTimeString();
  return el("span", {}, cell, el("div", { class: "fix" }, "last failure " + when + ": " + last.reason));
}

function servers(doc, before, secs) {
  const key = l => l.group + "\u0000" + l.server;
  const state = new Map();
  for (const s of family(doc, "slipstream_upstream_server_state")) if (s.value > 0) state.set(key(s.labels), s.labels.state);
  const req = grouped(doc, "slipstream_upstream_server_requests_total", key);
  const reqThen = before ? grouped(before, "slipstream_upstream_server_requests_total", key) : null;
  const inflight = grouped(doc, "slipstream_upstream_server_in_flight", key);
  const failures = grouped(doc, "slipstream_upstream_server_failures_total", key);
  const checkOk = grouped(doc, "slipstream_upstream_server_check_ok", key);
  const checkFailed = grouped(doc, "slipstream_upstream_server_check_failures_total", key);
  const idle = grouped(doc, "slipstream_upstream_pool_idle_connections", l => l.server);
  const lat = bucketDeltas(doc, recent[0], "slipstream_upstream_server_response_seconds_bucket", key);
  const last = lastFailures(doc);
  const ck = l => key(l) + "\u0000" + l.class;
  const answers = grouped(doc, "slipstream_upstream_server_responses_total", ck);
  const answersThen = before ? grouped(before, "slipstream_upstream_server_responses_total", ck) : null;
  // A server's (or its group's) status mix over the last poll; with none, over all so far.
  const mixOf = members => {
    const classes = new Map();
    let recent = 0;
    for (const c of CLASSES) for (const k of members) {
      const d = rate(answers, answersThen, k + "\u0000" + c, secs);
      recent += d;
      classes.set(c, (classes.get(c) || 0) + d);
    }
    if (!(recent > 0)) for (const c of CLASSES) classes.set(c, members.reduce((n, k) => n + (answers.get(k + "\u0000" + c) || 0), 0));
    return mix(classes);
  };
  const keys = [...new Set([...state.keys(), ...req.keys()])].sort();
  const groups = new Map();
  for (const k of keys) {
    const g = k.slice(0, k.indexOf("\u0000"));
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(k);
  }
  const rows = [];
  for (const [g, members] of groups) {
    // The group's row: its servers summed, its latency from their buckets together.
    let r = 0, flying = 0, pooled = 0, failed = 0, up = 0;
    const b = new Map();
    for (const k of members) {
      r += rate(req, reqThen, k, secs);
      flying += inflight.get(k) || 0;
      pooled += idle.get(k.slice(k.indexOf("\u0000") + 1)) || 0;
      failed += failures.get(k) || 0;
      if (state.get(k) === "up") up++;
      for (const [le, n] of lat.get(k) || []) b.set(le, (b.get(le) || 0) + n);
    }
    const p99 = quantile(b, 0.99);
    rows.push(el("tr", { class: "group" }, el("td", {}, g), el("td", { class: "dim" }, members.length + (members.length === 1 ? " server" : " servers")),
      el("td", {}, el("span", { class: "pill " + (up === members.length ? "ok" : up > 0 ? "warn" : "bad") }, up + "/" + members.length + " up")),
      el("td", { class: "n" }, num(r, 1)), el("td", {}, mixOf(members)), el("td", { class: "n" }, num(flying)), el("td", { class: "n" }, num(pooled)),
      el("td", { class: "n" }, ms(quantile(b, 0.5))), el("td", { class: "n" }, ms(p99)),
      el("td", { class: "n" }, num(failed)), el("td", {}, ""),
      el("td", {}, spark(remember("group " + g, r))), el("td", {}, spark(remember("group p99 " + g, p99 || 0), "p99"))));
    for (const k of members) rows.push(serverRow(k));
  }
  function serverRow(k) {
    const server = k.slice(k.indexOf("\u0000") + 1);
    const s = state.get(k) || "?";
    const r = rate(req, reqThen, k, secs);
    const b = lat.get(k) || new Map();
    const p99 = quantile(b, 0.99);
    return el("tr", {}, el("td", { class: "dim" }, k.slice(0, k.indexOf("\u0000"))), el("td", {}, server),
      el("td", {}, el("span", { class: "pill " + (s === "up" ? "ok" : s === "draining" ? "warn" : "bad") }, s)),
      el("td", { class: "n", "data-requests": String(req.get(k) || 0) }, num(r, 1)), el("td", {}, mixOf([k])),
      el("td", { class: "n" }, num(inflight.get(k) || 0)), el("td", { class: "n" }, num(idle.get(server) || 0)),
      el("td", { class: "n" }, ms(quantile(b, 0.5))), el("td", { class: "n" }, ms(p99)),
      el("td", { class: "n" }, num(failures.get(k) || 0)),
      el("td", {}, checkCell(checkOk.get(k), checkFailed.get(k), last.get(k))),
      el("td", {}, spark(remember("server " + k, r))), el("td", {}, spark(remember("server p99 " + k, p99 || 0), "p99")));
  }
  fill("servers", rows);
}

function listeners(doc, before, secs) {
  const by = name => grouped(doc, name, l => l.listener);
  const accepted = by("slipstream_listener_connections_accepted_total");
  const then = before ? grouped(before, "slipstream_listener_connections_accepted_total", l => l.listener) : null;
  const open = by("slipstream_listener_connections_open");
  const paused = by("slipstream_listener_accept_paused_total");
  fill("listeners", [...accepted.keys()].sort().map(name => {
    const r = rate(accepted, then, name, secs);
    const p = paused.get(name) || 0;
    return el("tr", {}, el("td", {}, name), el("td", { class: "n" }, num(open.get(name) || 0)),
      el("td", { class: "n" }, num(accepted.get(name) || 0)), el("td", { class: "n" }, num(r, 1)),
      el("td", { class: "n " + (p > 0 ? "warn" : "") }, num(p)), el("td", {}, spark(remember("listener " + name, r))));
  }));
}

function utc(secs) { return new Date(secs * 1000).toISOString().replace("T", " ").slice(0, 16); }

function certificates(doc) {
  const rows = [];
  const seen = new Set();
  const days = at => (at * 1000 - doc.time_ms) / 86400000;
  const left = at => el("td", { class: "n " + (days(at) < 7 ? "bad" : days(at) < 21 ? "warn" : "ok") }, num(days(at), 1));
  // ACME certificates first, with their renewals; then the files served.
  for (const a of doc.status.acme || []) {
    const name = (a.names || []).join(", ");
    for (const n of a.names || []) seen.add(n);
    const renewal = a.failing > 0
      ? el("span", { class: "bad" }, a.failing + " failed in a row: " + (a.last_error || "") + (a.retry_at ? "; next try " + utc(a.retry_at) : ""))
      : el("span", { class: "dim" }, (a.renew_at ? "renews " + utc(a.renew_at) : a.placeholder ? "waiting for the CA (placeholder served)" : "") +
        " · " + num(a.orders) + (a.orders === 1 ? " order, " : " orders, ") + num(a.issued) + " issued, " + num(a.failures) + " failed");
    rows.push(el("tr", {}, el("td", {}, name), el("td", {}, "ACME"), el("td", {}, a.not_after ? utc(a.not_after) : "—"),
      a.not_after ? left(a.not_after) : el("td", { class: "n dim" }, "—"), el("td", {}, renewal)));
  }
  for (const s of family(doc, "slipstream_tls_certificate_expiry_timestamp_seconds")) {
    if (seen.has(s.labels.certificate)) continue;
    rows.push(el("tr", {}, el("td", {}, s.labels.certificate), el("td", {}, "file"), el("td", {}, utc(s.value)), left(s.value), el("td", {}, "")));
  }
  fill("certs", rows);
}

// Answers served from the cache: fresh, stale (a failing origin or while updating), revalidated.
const SERVED = ["HIT", "STALE", "UPDATING", "REVALIDATED"];

function caches(doc, before, secs) {
  const key = l => l.zone + "\u0000" + l.status;
  const now = grouped(doc, "slipstream_cache_responses_total", key);
  const then = before ? grouped(before, "slipstream_cache_responses_total", key) : null;
  const zones = [...new Set([...now.keys()].map(k => k.slice(0, k.indexOf("\u0000"))))].sort();
  const one = (name, zone) => grouped(doc, name, l => l.zone).get(zone) || 0;
  document.getElementById("caches-section").hidden = zones.length === 0;
  fill("caches", zones.map(zone => {
    let all = 0, hits = 0, r = 0, rHits = 0;
    for (const [k, v] of now) {
      if (!k.startsWith(zone + "\u0000")) continue;
      const status = k.slice(zone.length + 1), d = rate(now, then, k, secs);
      all += v; r += d;
      if (SERVED.includes(status)) { hits += v; rHits += d; }
    }
    // The ratio over the last poll; with no traffic then, over all so far.
    const ratio = r > 0 ? rHits / r : all > 0 ? hits / all : null;
    return el("tr", {}, el("td", {}, zone), el("td", { class: "n" }, num(r, 1)),
      el("td", { class: "n" }, ratio === null ? "—" : num(100 * ratio, 1) + " %"),
      el("td", { class: "n" }, num(one("slipstream_cache_entries", zone))), el("td", { class: "n" }, bytes(one("slipstream_cache_bytes", zone))),
      el("td", { class: "n" }, bytes(one("slipstream_cache_disk_bytes", zone))), el("td", { class: "n" }, num(one("slipstream_cache_stored_total", zone))),
      el("td", { class: "n" }, num(one("slipstream_cache_evictions_total", zone))), el("td", { class: "n" }, num(one("slipstream_cache_purged_total", zone))),
      el("td", {}, spark(remember("cache " + zone, ratio === null ? 0 : ratio))));
  }));
}

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return num(n, i ? 1 : 0) + " " + units[i];
}

function fleet(doc) {
  const c = doc.status.cluster;
  const section = document.getElementById("fleet-section");
  section.hidden = !c;
  if (!c) return;
  const lr = c.limit_records || {};
  const items = [
    ["etcd", el("span", { class: c.connected ? "ok" : "bad" }, c.connected ? "connected" : "unreachable")],
    ["configuration revision", String(c.revision)],
    ["etcd calls failed", num(c.etcd_failures)],
    ["configurations refused", num(c.refused)],
    ["rate-limit records sent / applied", num(lr.sent || 0) + " / " + num(lr.applied || 0)],
  ];
  const rows = items.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v)));
  if (c.last_refusal) rows.push(el("tr", {}, el("td", {}, "last refusal"), el("td", { class: "bad" }, String(c.last_refusal))));
  fill("fleet", rows);
}

function doctor(doc) {
  const list = doc.doctor || [];
  const bad = list.filter(f => f.severity !== "ok");
  const items = bad.map(f => el("li", {},
    el("span", { class: "pill " + (f.severity === "critical" ? "bad" : "warn") }, f.severity), " ", f.title,
    ...(f.fix ? [el("div", { class: "fix" }, "fix: " + f.fix)] : [])));
  items.push(el("li", { class: "dim" }, (list.length - bad.length) + " checks fine"));
  document.getElementById("doctor").replaceChildren(...items);
}

async function poll() {
  const banner = document.getElementById("error");
  try {
    const response = await fetch("/api/stats", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const doc = await response.json();
    const secs = previous ? (doc.time_ms - previous.time_ms) / 1000 : 0;
    meta(doc);
    tiles(doc, previous, secs);
    sites(doc, previous, secs);
    servers(doc, previous, secs);
    listeners(doc, previous, secs);
    caches(doc, previous, secs);
    fleet(doc);
    certificates(doc);
    doctor(doc);
    previous = doc;
    recent.push(doc);
    if (recent.length > WINDOW) recent.shift();
    banner.style.display = "none";
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    banner.textContent = "cannot read /api/stats: " + e.message + " (retrying)";
    banner.style.display = "block";
  }
  setTimeout(poll, POLL_MS);
}
poll();
