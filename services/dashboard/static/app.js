// The apex-mesh dashboard's overview: draws the state the server pushes (server-sent
// events from /api/events), no reloads, no external scripts. The other views (a pod, a
// session, topics, access, presence) and the actions are in pages.js.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let state = null;
let selected = null; // "originator#transID"
let currentView = "overview"; // set by pages.js

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function rows(table, items, cells) {
  const body = document.querySelector(`#${table} tbody`);
  body.replaceChildren(...items.map((item) => {
    const tr = el("tr");
    for (const cell of cells(item)) {
      const td = el("td");
      if (cell instanceof Node) td.append(cell); else td.textContent = cell;
      tr.append(td);
    }
    return tr;
  }));
}

function podLink(name) {
  return el("a", { href: `#/pod/${encodeURIComponent(name)}`, "data-pod-link": name }, name);
}

function rate(node) {
  const entries = Object.entries(node.rates || {});
  return entries.length ? entries.map(([k, v]) => `${v} ${k.replace("_per_s", "/s")}`).join(", ") : "–";
}

function drawTopology() {
  const svg = document.getElementById("topology");
  svg.replaceChildren();
  const domains = state.domains;
  const width = svg.clientWidth || 900;
  const column = width / Math.max(domains.length, 1);
  const pos = {};
  domains.forEach((domain, i) => {
    const nodes = state.nodes.filter((n) => n.domain === domain);
    const relays = nodes.filter((n) => n.service === "relay");
    const others = nodes.filter((n) => n.service !== "relay");
    const x0 = i * column + 12;
    const g = el("svg:g", { class: "domain", "data-domain": domain });
    g.append(el("svg:rect", { x: x0, y: 6, width: column - 24, height: 320, rx: 8 }));
    g.append(el("svg:text", { x: x0 + 10, y: 24 }, domain));
    svg.append(g);
    const place = (list, y) => list.forEach((n, j) => {
      const step = (column - 24) / list.length;
      pos[n.name] = { x: x0 + step * j + step / 2, y };
    });
    place(relays, 90);
    place(others.filter((n) => n.service !== "pubsub"), 270);
    place(others.filter((n) => n.service === "pubsub"), 190);
  });
  // Pod-to-pod links arc above the relay row and domain-to-domain links dip below it,
  // so neither runs along the other (both join relays drawn on one row).
  for (const link of state.links) {
    const a = pos[link.from], b = pos[link.to];
    if (!a || !b) continue;
    const attrs = { class: link.kind, "data-link": `${link.from}|${link.to}` };
    if (link.kind === "pod") {
      attrs.d = `M${a.x},${a.y - 20} Q${(a.x + b.x) / 2},${a.y - 75} ${b.x},${b.y - 20}`;
    } else if (link.kind === "mesh") {
      attrs.d = `M${a.x},${a.y + 20} C${a.x},${a.y + 70} ${b.x},${b.y + 70} ${b.x},${b.y + 20}`;
    } else {
      attrs.d = `M${a.x},${a.y} L${b.x},${b.y}`;
    }
    svg.append(el("svg:path", attrs));
  }
  for (const n of state.nodes) {
    const p = pos[n.name];
    if (!p) continue;
    const box = Math.min(170, Math.max(110, column / 2 - 16));
    const g = el("svg:g", { class: `node ${n.service} ${n.ready ? "ready" : "down"}`, "data-node": n.name,
                            transform: `translate(${p.x - box / 2},${p.y - 20})` });
    g.addEventListener("click", () => { location.hash = `#/pod/${encodeURIComponent(n.name)}`; });
    g.append(el("svg:rect", { width: box, height: 40 }));
    g.append(el("svg:text", { x: 8, y: 16 }, n.name.replace(`-${n.domain}`, "")));
    g.append(el("svg:text", { x: 8, y: 32, class: "small" }, n.service === "relay" ? `${n.attachments ?? 0} attached · ${rate(n)}` : rate(n)));
    const title = el("svg:title", {}, `${n.name}: ${n.ready ? "ready" : n.reason}`);
    g.append(title);
    svg.append(g);
  }
}

function traceKey(hop, id) { return `${hop.originator}#${id}`; }

function traces() {
  const groups = new Map();
  for (const hop of state.hops) {
    for (const id of hop.trans_ids) {
      const key = traceKey(hop, id);
      if (!groups.has(key)) groups.set(key, { key, originator: hop.originator, transId: id, hops: [] });
      groups.get(key).hops.push(hop);
    }
  }
  const wantOriginator = document.getElementById("filter-originator").value.trim().toLowerCase();
  const wantTrans = document.getElementById("filter-trans").value.trim();
  return [...groups.values()].filter((t) =>
    (!wantOriginator || t.originator.toLowerCase().includes(wantOriginator)) &&
    (!wantTrans || String(t.transId) === wantTrans)).reverse();
}

function codeClass(code) { return code < 300 ? "code-ok" : code < 400 ? "code-wait" : "code-bad"; }

function drawTraces() {
  const list = document.getElementById("traces");
  const all = traces();
  list.replaceChildren(...all.slice(0, 100).map((t) => {
    const outcomes = t.hops.flatMap((h) => h.outcomes);
    const li = el("li", { "data-trace": t.key });
    if (t.key === selected) li.classList.add("selected");
    li.append(el("strong", {}, t.originator), document.createTextNode(` transID ${t.transId} → `));
    for (const o of outcomes) li.append(el("span", { class: codeClass(o.code) }, `${o.recipient} ${o.code} `));
    li.addEventListener("click", () => { selected = t.key; drawTraces(); });
    return li;
  }));
  const chosen = all.find((t) => t.key === selected);
  drawTrace(chosen);
}

function drawTrace(trace) {
  const view = document.getElementById("trace-view");
  if (!trace) { view.replaceChildren(el("p", { class: "muted" }, "No message selected.")); return; }
  const hops = [...trace.hops].sort((a, b) => a.received_ms - b.received_ms);
  const rowsNeeded = hops.reduce((n, h) => n + Math.max(h.outcomes.length, 1), 0);
  const svg = el("svg:svg", { viewBox: `0 0 960 ${40 + rowsNeeded * 70}`, "data-trace-view": trace.key });
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "arrowhead", markerWidth: 10, markerHeight: 7, refX: 10, refY: 3.5, orient: "auto" });
  marker.append(el("svg:polygon", { points: "0 0, 10 3.5, 0 7", fill: "#58a6ff" }));
  defs.append(marker); svg.append(defs);
  const box = (x, y, w, lines, attrs) => {
    const g = el("svg:g", { class: "hopbox", transform: `translate(${x},${y})`, ...attrs });
    g.append(el("svg:rect", { width: w, height: 18 * lines.length + 10, rx: 5 }));
    lines.forEach((line, i) => {
      const t = el("svg:text", { x: 8, y: 18 + 18 * i }, line.text ?? line);
      if (line.cls) t.setAttribute("class", line.cls);
      g.append(t);
    });
    svg.append(g);
  };
  const arrow = (x1, y1, x2, y2) => svg.append(el("svg:path", { class: "arrow", d: `M${x1},${y1} L${x2},${y2}` }));
  let y = 20;
  box(10, y, 190, [trace.originator, `transID ${trace.transId}`], { "data-hop": "originator" });
  for (const hop of hops) {
    const start = y;
    const when = new Date(hop.received_ms).toLocaleTimeString();
    arrow(200, start + 20, 270, start + 20);
    box(270, start, 250, [hop.pod, `from ${hop.origin} at ${when}`, `${hop.concluded_ms - hop.received_ms} ms · cid ${hop.cid || "–"}`],
        { "data-hop": hop.pod });
    hop.outcomes.forEach((o, i) => {
      const oy = start + i * 70;
      arrow(520, start + 20, 590, oy + 20);
      box(590, oy, 360, [{ text: `${o.recipient}`, cls: "" }, { text: `${o.code} ${o.text || ""}`, cls: codeClass(o.code) },
                          `via ${o.route}` + (hop.reported_by.length ? ` · reported by apex=report@${hop.reported_by.join(", ")}` : "")],
          { "data-outcome": o.recipient, "data-code": String(o.code) });
    });
    y += Math.max(hop.outcomes.length, 1) * 70;
  }
  view.replaceChildren(svg);
}

function render() {
  document.getElementById("context").textContent = `context ${state.context}`;
  const down = state.nodes.filter((n) => !n.ready);
  const health = document.getElementById("health");
  health.textContent = down.length ? `${down.length} of ${state.nodes.length} not ready` : `${state.nodes.length} pods ready`;
  health.className = `badge ${down.length ? "bad" : "ok"}`;
  document.getElementById("updated").textContent = `updated ${new Date(state.at * 1000).toLocaleTimeString()}`;
  if (currentView === "overview") drawTopology();
  rows("pods", state.nodes, (n) => [podLink(n.name), n.service, n.domain, el("span", { class: n.ready ? (n.draining ? "draining" : "ready") : "notready" }, n.ready ? (n.draining ? "draining" : "ready") : n.reason), rate(n), n.sessions ?? "", n.attachments ?? ""]);
  rows("pubsub", state.pubsub || [], (d) => [d.domain, d.topics, d.subscriptions, d.journal]);
  rows("topics", state.topics, (t) => [t.domain, t.topic, t.subscriptions, t.backlog]);
  rows("subscriptions", state.subscriptions, (s) => [`${s.topic}@${s.domain}`, s.subscriber, `${Math.round(s.expires_in_seconds)} s`, s.backlog]);
  rows("held", state.held, (h) => [h.endpoint, h.count, h.bytes, `${Math.round(h.oldest_age_seconds)} s`]);
  drawTraces();
}

function connect() {
  const source = new EventSource("/api/events");
  source.addEventListener("state", (event) => { state = JSON.parse(event.data); render(); if (typeof onState === "function") onState(); });
  source.onerror = () => { document.getElementById("health").textContent = "reconnecting…"; };
}

document.getElementById("trace-filter").addEventListener("input", () => state && drawTraces());
document.getElementById("trace-filter").addEventListener("submit", (e) => e.preventDefault());
connect();
