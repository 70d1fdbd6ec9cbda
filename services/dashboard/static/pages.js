// The dashboard's other views, one per location hash: #/ (overview, app.js),
// #/pod/NAME, #/session/POD/ID, #/topics, #/access, #/presence. Each reads what it
// draws from /api when it is shown (nothing of it is polled while another view is on).
"use strict";

let chartTimer = null;
let topicCursors = [];  // cursors of the pages before the one shown ("" for the first)
let topicNext = null;

async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...(options || {}) });
  if (response.status === 401) { location.href = "/login"; throw new Error("logged out"); }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || `${response.status}`);
  return body;
}

function notice(text, bad) {
  const p = document.getElementById("notice");
  p.textContent = text;
  p.className = `notice ${bad ? "bad" : "ok"}`;
  p.hidden = !text;
}

function fillRows(id, items, cells) { rows(id, items, cells); }

function kv(id, pairs) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...pairs.map(([k, v]) => {
    const tr = el("tr");
    tr.append(el("th", {}, k));
    const td = el("td");
    if (v instanceof Node) td.append(v); else td.textContent = typeof v === "object" && v !== null ? JSON.stringify(v) : String(v ?? "");
    tr.append(td);
    return tr;
  }));
}

// A button that asks once more before it acts (no browser dialog to dismiss).
function actionButton(label, attrs, run) {
  const button = el("button", { type: "button", class: "action", ...attrs }, label);
  let armed = null;
  button.addEventListener("click", async () => {
    if (!armed) {
      button.textContent = `Confirm: ${label.toLowerCase()}`;
      button.classList.add("armed");
      armed = setTimeout(() => { armed = null; button.textContent = label; button.classList.remove("armed"); }, 6000);
      return;
    }
    clearTimeout(armed); armed = null;
    button.disabled = true;
    try {
      await run();
      notice(`${label}: done`, false);
    } catch (error) {
      notice(`${label}: ${error.message}`, true);
    } finally {
      button.disabled = false; button.textContent = label; button.classList.remove("armed");
      route();
    }
  });
  return button;
}

function act(method, path) {
  return api(path, { method, headers: { "X-Apexmesh-Action": "1" } });
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function rfc3339(ms) { return ms ? new Date(ms).toISOString().replace(/\.\d+Z$/, "Z") : ""; }

// ------------------------------------------------------------------ charts

async function overviewChart() {
  const data = await api("/api/history");
  const series = {};
  for (const [service, rates] of Object.entries(data.services)) {
    for (const [key, points] of Object.entries(rates)) series[`${service} ${key.replace("_per_s", "/s")}`] = points;
  }
  drawChart(document.getElementById("rates-chart"), series, data.now);
}

async function podChart(name) {
  const data = await api(`/api/history?pod=${encodeURIComponent(name)}`);
  const series = {};
  for (const [key, points] of Object.entries(data.series)) series[key.replace("_per_s", "/s")] = points;
  drawChart(document.getElementById("pod-chart"), series, data.now);
}

function charts(draw) {
  clearInterval(chartTimer);
  const run = () => draw().catch((error) => notice(error.message, true));
  run();
  chartTimer = setInterval(run, 10000);
}

// ------------------------------------------------------------------ views

async function showPod(name) {
  const data = await api(`/api/pods/${encodeURIComponent(name)}`);
  const node = data.node;
  document.getElementById("pod-title").textContent = `${name} (${node.service}, ${node.domain})`;
  const status = el("span", { class: node.ready ? (node.draining ? "draining" : "ready") : "notready" },
    node.ready ? (node.draining ? "draining" : "ready") : `not ready: ${node.reason}`);
  kv("pod-details", [["status", status], ["rates", rate(node)], ["uptime", age(node.uptime_seconds)],
    ...Object.entries(node.details || {})]);
  const actions = document.getElementById("pod-actions");
  actions.replaceChildren();
  const relay = node.service === "relay";
  document.getElementById("pod-sessions-section").hidden = !relay;
  if (relay) {
    const draining = data.drain && data.drain.draining;
    actions.append(draining
      ? actionButton("Undrain", { "data-action": "undrain" }, () => act("POST", `/api/pods/${encodeURIComponent(name)}/undrain`))
      : actionButton("Drain", { "data-action": "drain" }, () => act("POST", `/api/pods/${encodeURIComponent(name)}/drain`)));
    fillRows("pod-sessions", data.sessions, (s) => [
      el("a", { href: `#/session/${encodeURIComponent(name)}/${s.id}`, "data-session-link": String(s.id) }, String(s.id)),
      s.mode, s.peer, s.identity, s.tls ? "yes" : "no", s.channels, s.attachments.join(", "), age(s.age_seconds),
      actionButton("Close", { "data-action": "close", "data-session": String(s.id) },
        () => act("DELETE", `/api/pods/${encodeURIComponent(name)}/sessions/${s.id}`)),
    ]);
  }
  charts(() => podChart(name));
}

async function showSession(name, id) {
  const data = await api(`/api/pods/${encodeURIComponent(name)}/sessions/${id}`);
  const s = data.session;
  document.getElementById("session-title").textContent = `Session ${s.id} at ${name}`;
  kv("session-details", [["pod", podLink(name)], ["mode", s.mode], ["peer", s.peer], ["identity", s.identity || "–"],
    ["tls", s.tls ? "yes" : "no"], ["channels", s.channels], ["opened", new Date(s.opened_at * 1000).toISOString().replace(/\.\d+Z$/, "Z")],
    ["age", age(s.age_seconds)]]);
  fillRows("session-attachments", s.channels_detail, (a) => [a.endpoint, a.channel, a.trans_id]);
  const actions = document.getElementById("session-actions");
  actions.replaceChildren(actionButton("Close session", { "data-action": "close", "data-session": String(s.id) }, async () => {
    await act("DELETE", `/api/pods/${encodeURIComponent(name)}/sessions/${s.id}`);
    location.hash = `#/pod/${encodeURIComponent(name)}`;
  }));
}

async function topicPage(after) {
  const domain = document.getElementById("topic-domain").value;
  const prefix = document.getElementById("topic-prefix").value.trim();
  const query = new URLSearchParams({ domain, prefix, limit: "50" });
  if (after) query.set("after", after);
  const page = await api(`/api/topics?${query}`);
  topicNext = page.next;
  document.getElementById("topic-next").hidden = !page.more;
  const summary = (state && state.pubsub || []).find((d) => d.domain === domain);
  document.getElementById("topic-count").textContent = summary
    ? `${summary.topics} topics, ${summary.subscriptions} subscriptions in ${domain}; page ${topicCursors.length + 1}` : "";
  fillRows("topic-page", page.rows, (t) => [t.domain,
    el("a", { href: "#/topics", "data-topic": t.topic, class: "topic" }, t.topic),
    t.subscriptions, t.backlog, t.creator, rfc3339(t.created_ms)]);
  for (const link of document.querySelectorAll("#topic-page a.topic")) {
    link.addEventListener("click", (e) => { e.preventDefault(); topicSubscriptions(domain, link.dataset.topic); });
  }
}

async function topicSubscriptions(domain, topic) {
  const query = new URLSearchParams({ domain, topic, limit: "200" });
  const page = await api(`/api/subscriptions?${query}`);
  document.getElementById("topic-subs-title").textContent = `Subscriptions of ${topic}@${domain}` + (page.more ? " (first 200)" : "");
  fillRows("topic-subs", page.rows, (s) => [s.topic, s.subscriber, s.subscription_id || "–", s.originator, age(s.expires_in_seconds), s.backlog]);
}

async function showTopics() {
  const select = document.getElementById("topic-domain");
  const domains = state ? state.domains : [];
  if (select.options.length !== domains.length) {
    select.replaceChildren(...domains.map((d) => el("option", { value: d }, d)));
  }
  topicCursors = [];
  await topicPage("");
}

async function showAccess() {
  const owner = document.getElementById("access-owner").value.trim();
  const data = await api(`/api/access${owner ? `?owner=${encodeURIComponent(owner)}` : ""}`);
  fillRows("access-entries", data.flatMap((d) => d.entries.map((e) => ({ ...e, domain: d.domain }))),
    (e) => [e.domain, e.owner, e.actor, e.actions.length ? e.actions.join(" ") : "(denies everything)", e.last_update]);
}

async function showPresence() {
  const data = await api("/api/presence");
  fillRows("presence-entries", data.flatMap((d) => d.entries.map((e) => ({ ...e, domain: d.domain }))),
    (e) => [e.domain, e.publisher, e.attached ? "attached" : "not attached", e.last_update,
      e.tuples.map((t) => `${t.destination} ${t.available ? "available" : "until"} ${t.available_until}`).join("; ")]);
  fillRows("presence-operations", data.flatMap((d) => d.operations.map((o) => ({ ...o, domain: d.domain }))),
    (o) => [o.domain, o.kind, o.originator, o.subject, o.trans_id, o.expires]);
}

// ------------------------------------------------------------------ routing

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = { pod: "pod", session: "session", topics: "topics", access: "access", presence: "presence" }[parts[0]] || "overview";
  currentView = view;
  for (const main of document.querySelectorAll("main[data-view]")) main.hidden = main.dataset.view !== view;
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("current", link.dataset.nav === view);
  clearInterval(chartTimer);
  const shown = {
    overview: async () => { if (state) render(); charts(overviewChart); },
    pod: () => showPod(parts[1]),
    session: () => showSession(parts[1], parts[2]),
    topics: showTopics,
    access: showAccess,
    presence: showPresence,
  }[view];
  Promise.resolve().then(shown).then(() => document.body.setAttribute("data-shown", view))
    .catch((error) => notice(error.message, true));
}

// A view that waits for the first state (the topics view's domains) draws once it came.
let routedOnce = false;
function onState() {
  if (!routedOnce) { routedOnce = true; route(); }
}

window.addEventListener("hashchange", () => { notice(""); route(); });
document.getElementById("topic-filter").addEventListener("submit", (e) => { e.preventDefault(); showTopics().catch((error) => notice(error.message, true)); });
document.getElementById("topic-next").addEventListener("click", () => { topicCursors.push(topicNext); topicPage(topicNext).catch((error) => notice(error.message, true)); });
document.getElementById("access-filter").addEventListener("submit", (e) => { e.preventDefault(); showAccess().catch((error) => notice(error.message, true)); });
