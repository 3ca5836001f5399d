// meshnode dashboard: polls the node's JSON API (the same one the CLI uses) and renders the
// mesh, the raft group and the jobs. No framework, no network beyond this node's origin.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "meshnode-token";
const state = { job: null, epochs: new Map() };

const $ = (id) => document.getElementById(id);
const short = (id) => (id && id.length > 12 ? "…" + id.slice(-8) : id || "");
const fmtBytes = (b) => {
  if (!b) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return b.toFixed(i ? 1 : 0) + " " + u[i];
};
const fmtNum = (x, d = 1) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(d));
const fmtTime = (t) => (t ? new Date(t).toLocaleTimeString() : "–");

// --- the token: from the URL fragment once, then from this tab's sessionStorage ---
function takeTokenFromFragment() {
  const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

class AuthError extends Error {}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/yaml";
  const resp = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
  if (resp.status === 401) throw new AuthError("the API token is missing or wrong");
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text }; }
  if (!resp.ok) throw new Error(`${method} ${path}: ${(data && data.error) || resp.statusText}`);
  return data;
}

// --- small DOM helpers ---
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function fillRows(tableId, rows) {
  const tb = $(tableId).tBodies[0];
  tb.replaceChildren(...rows);
}
function facts(dlId, pairs) {
  $(dlId).replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}
const svgEl = (tag, attrs = {}) => {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};

// --- mesh ---
function memberRow(id, st, prof, rtt, bw, self) {
  const gpus = (prof && prof.gpus) || [];
  return el("tr", {},
    el("td", { title: id }, short(id) + (self ? " (this node)" : "")),
    el("td", {}, st),
    el("td", {}, fmtNum(prof && prof.gemm_gflops)),
    el("td", {}, fmtNum(prof && prof.train_gflops)),
    el("td", {}, fmtBytes(prof && (prof.memory_budget_bytes || prof.memory_available_bytes))),
    el("td", {}, gpus.length ? gpus.map((g) => g.name).join(", ") : "–"),
    el("td", {}, rtt === null || rtt === undefined ? "–" : fmtNum(rtt, 2) + " ms"),
    el("td", {}, bw === null || bw === undefined ? "–" : fmtNum(bw, 0) + " Mbit/s"));
}
function renderMesh(status, peers) {
  $("node").textContent = `node ${short(status.id)} · mesh ${status.mesh} · ${status.version} · ${status.peers} peer(s)`;
  const rows = [memberRow(status.id, "alive", status.profile, null, null, true)];
  for (const p of peers) rows.push(memberRow(p.id, p.state, p.profile, p.rtt_ms, p.bandwidth_mbps, false));
  fillRows("members", rows);
}

// --- raft ---
function renderRaft(r) {
  facts("raft", [
    ["state", r.state], ["leader", short(r.leader)], ["term", r.term],
    ["voters", (r.voters || []).map(short).join(", ") || "–"],
    ["non-voters", (r.nonvoters || []).map(short).join(", ") || "–"],
    ["commit / applied", `${r.commit_index} / ${r.applied_index}`],
  ]);
}

// --- jobs ---
function renderJobs(jobs) {
  jobs.sort((a, b) => (a.submitted_at < b.submitted_at ? 1 : -1));
  if (!state.job && jobs.length) state.job = jobs[0].id;
  fillRows("jobs", jobs.map((j) => el("tr", {
    class: "clickable" + (j.id === state.job ? " selected" : ""),
    onclick: () => { state.job = j.id; refresh(); },
  }, el("td", {}, j.id), el("td", {}, j.name || ""), el("td", {}, el("span", { class: "badge " + j.status }, j.status)),
  el("td", {}, fmtTime(j.submitted_at)))));
}

function planOf(d) {
  if (!d.plan || !d.plan.plan) return null;
  return typeof d.plan.plan === "string" ? JSON.parse(d.plan.plan) : d.plan.plan;
}

function renderLayerMap(plan, layers) {
  const box = $("layer-map");
  if (!plan || !plan.replicas) { box.replaceChildren(el("span", { class: "muted" }, "no plan yet")); return; }
  const W = 840, rowH = 34, left = 70;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${rowH * plan.replicas.length + 22}`, role: "img", "aria-label": "layer map" });
  const palette = ["#2563eb", "#0891b2", "#7c3aed", "#c2410c", "#15803d", "#be185d", "#4d7c0f", "#b45309"];
  const colors = new Map();
  const span = (W - left - 10) / layers;
  plan.replicas.forEach((stages, r) => {
    const y = 4 + r * rowH;
    const t = svgEl("text", { x: 4, y: y + 20 }); t.textContent = `replica ${r}`; svg.append(t);
    for (const s of stages) {
      if (!colors.has(s.node)) colors.set(s.node, palette[colors.size % palette.length]);
      // A stage holds layers [first, last): last is exclusive.
      const x = left + s.first * span, w = (s.last - s.first) * span;
      const rect = svgEl("rect", { x, y, width: w, height: rowH - 6, rx: 3, class: "stage", fill: colors.get(s.node) });
      const title = svgEl("title"); title.textContent = `${s.node}: layers ${s.first}–${s.last - 1}`; rect.append(title);
      const label = svgEl("text", { x: x + 5, y: y + 18, class: "stage-label", "data-node": s.node });
      label.textContent = `${short(s.node)} · ${s.last - s.first > 1 ? `layers ${s.first}–${s.last - 1}` : `layer ${s.first}`}`;
      svg.append(rect, label);
    }
  });
  const axis = svgEl("text", { x: left, y: rowH * plan.replicas.length + 16 });
  axis.textContent = `layers 0–${layers - 1} (embedding, blocks, head) · ${plan.strategy || ""} · ${plan.micro_batches} micro-batches`;
  svg.append(axis);
  box.replaceChildren(svg);
}

function renderLinks(plan) {
  const snap = plan && plan.inputs && plan.inputs.snapshot;
  if (!snap || !snap.links || !snap.links.length) { $("links").replaceChildren(el("span", { class: "muted" }, "no measured links in the plan")); return; }
  const ids = snap.nodes.map((n) => n.id);
  const cell = new Map(snap.links.map((l) => [l.from + ">" + l.to, l]));
  const head = el("tr", {}, el("th", {}, "from \\ to"), ...ids.map((i) => el("th", { title: i }, short(i))));
  const rows = ids.map((a) => el("tr", {}, el("th", { title: a }, short(a)), ...ids.map((b) => {
    const l = cell.get(a + ">" + b);
    return el("td", {}, a === b ? "·" : l ? `${fmtNum(l.rtt_seconds * 1000, 1)} ms, ${fmtNum(l.bandwidth_bytes_per_second * 8 / 1e6, 0)} Mbit/s` : "–");
  })));
  $("links").replaceChildren(el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
}

function chart(svgId, series) {
  const svg = $(svgId), W = 420, H = 220, L = 44, B = 20, T = 8, R = 8;
  svg.replaceChildren();
  const pts = series.flatMap((s) => s.points);
  if (pts.length === 0) { const t = svgEl("text", { x: L, y: H / 2 }); t.textContent = "no samples yet"; svg.append(t); return; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T);
  svg.append(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#d9dde5" }), svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#d9dde5" }));
  for (const [v, y] of [[y1, T + 8], [y0, H - B]]) { const t = svgEl("text", { x: 2, y }); t.textContent = fmtNum(v, v < 100 ? 2 : 0); svg.append(t); }
  for (const [v, x, anchor] of [[x0, L, "start"], [x1, W - R, "end"]]) {
    const t = svgEl("text", { x, y: H - 5, "text-anchor": anchor }); t.textContent = "step " + v; svg.append(t);
  }
  for (const s of series) {
    if (s.dots) {
      for (const p of s.points) svg.append(svgEl("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: s.color, class: "point " + s.name }));
    } else if (s.points.length) {
      svg.append(svgEl("polyline", { points: s.points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" "), fill: "none", stroke: s.color, "stroke-width": 1.5, class: "line " + s.name, "data-points": s.points.length }));
    }
  }
}

function renderCurves(samples) {
  const train = samples.filter((s) => s.loss > 0).map((s) => [s.step, s.loss]);
  const val = samples.filter((s) => s.val_loss !== undefined && s.val_loss !== null).map((s) => [s.step, s.val_loss]);
  chart("loss-chart", [{ name: "train", points: train, color: "#2563eb" }, { name: "val", points: val, color: "#c2410c", dots: true }]);
  chart("tps-chart", [{ name: "tps", points: samples.filter((s) => s.tokens_per_sec > 0).map((s) => [s.step, s.tokens_per_sec]), color: "#15803d" }]);
}

function renderEpochs(d) {
  const seen = state.epochs.get(d.id) || new Map();
  for (const p of d.epochs || (d.plan ? [d.plan] : [])) seen.set(p.epoch, p);
  state.epochs.set(d.id, seen);
  fillRows("epochs", [...seen.values()].sort((a, b) => b.epoch - a.epoch).map((p) =>
    el("tr", {}, el("td", {}, p.epoch), el("td", {}, fmtTime(p.set_at)), el("td", { class: "msg" }, p.reason || ""))));
}

function renderJob(d) {
  $("job").hidden = false;
  $("job-id").textContent = d.id;
  $("job-status").textContent = d.status;
  $("job-status").className = "badge " + d.status;
  $("cancel").hidden = ["done", "failed", "cancelled"].includes(d.status);
  const p = d.progress || {};
  facts("job-facts", [
    ["step", `${p.step || 0} / ${p.steps || "?"}`], ["epoch", p.epoch || 0],
    ["train loss", fmtNum(p.loss, 4)], ["validation loss", `${fmtNum(p.initial_val_loss, 4)} → ${fmtNum(p.val_loss, 4)}`],
    ["tokens/s", fmtNum(p.tokens_per_sec, 0)], ["step time", p.step_s ? fmtNum(p.step_s, 3) + " s" : "–"],
    ["bytes sent", fmtBytes(p.bytes_sent)], ["model", `${d.spec.model.layers} layers, d ${d.spec.model.d_model}`],
  ]);
  const plan = planOf(d);
  $("plan-epoch").textContent = d.plan ? `epoch ${d.plan.epoch}` : "";
  renderLayerMap(plan, d.spec.model.layers + 2);
  renderLinks(plan);
  renderCurves(p.samples || []);
  renderEpochs(d);
  fillRows("checkpoints", (d.checkpoints || []).slice().reverse().map((c) => el("tr", {},
    el("td", {}, c.step), el("td", {}, c.epoch), el("td", {}, c.files.length),
    el("td", {}, fmtBytes(c.files.reduce((a, f) => a + f.bytes, 0))),
    el("td", {}, [...new Set(c.files.map((f) => short(f.node)))].join(", ")))));
  fillRows("events", (d.events || []).slice(-50).reverse().map((e) => el("tr", {},
    el("td", {}, fmtTime(e.time)), el("td", {}, e.kind), el("td", {}, e.epoch), el("td", {}, e.step), el("td", { class: "msg" }, e.message))));
}

// --- polling ---
function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; return; }
  box.hidden = false;
  box.textContent = String(err.message || err);
}

async function refresh() {
  try {
    const [status, peers, jobs] = await Promise.all([api("GET", "/v1/status"), api("GET", "/v1/peers"), api("GET", "/v1/jobs")]);
    $("auth").hidden = true;
    renderMesh(status, peers);
    renderJobs(jobs || []);
    api("GET", "/v1/raft").then(renderRaft, () => facts("raft", [["state", "not running on this node"]]));
    if (state.job) renderJob(await api("GET", "/v1/jobs/" + encodeURIComponent(state.job)));
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    showError(null);
  } catch (err) {
    if (err instanceof AuthError) $("auth").hidden = false;
    showError(err);
  }
}

function wire() {
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-input").value = "";
    refresh();
  });
  // Cancelling takes two clicks within a few seconds: the first arms the button.
  let armed = 0;
  $("cancel").addEventListener("click", async () => {
    if (!state.job) return;
    if (Date.now() - armed > 5000) {
      armed = Date.now();
      $("cancel").textContent = "Click again to cancel";
      return;
    }
    armed = 0;
    $("cancel").textContent = "Cancel job";
    try { await api("DELETE", "/v1/jobs/" + encodeURIComponent(state.job)); refresh(); } catch (err) { showError(err); }
  });
  $("submit-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", "/v1/jobs", $("submit-spec").value);
      state.job = r.id;
      $("submit-box").open = false;
      refresh();
    } catch (err) { showError(err); }
  });
}

takeTokenFromFragment();
wire();
refresh();
setInterval(refresh, POLL_MS);
