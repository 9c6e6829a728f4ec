// clusterctl dashboard: reads /api/ with the bearer token kept in this tab's sessionStorage.
// Everything user-controlled (job names, reasons, log text) is set as text, never as markup.
"use strict";

const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);
let timer = null;
let me = null;

function token() { return sessionStorage.getItem("clusterctl-token") || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : "HTTP " + status);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(path) {
  const resp = await fetch("/api/" + path, { headers: { Authorization: "Bearer " + token() }, cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (resp.status === 401) { showLogin("Your token was not accepted: " + (body ? body.error : resp.status)); }
  if (!resp.ok) { throw new ApiError(resp.status, body); }
  return body;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) { node.textContent = String(text); }
  if (cls) { node.className = cls; }
  return node;
}

function stateName(value) { return String(value || "").replace(/^JOB_STATE_/, "").replace(/^NODE_STATE_/, ""); }

function when(ts) {
  if (!ts) { return "-"; }
  const d = new Date(ts);
  return isNaN(d.getTime()) || d.getTime() === 0 ? "-" : d.toLocaleString();
}

function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  const clock = [h, m, s % 60].map((n) => String(n).padStart(2, "0")).join(":");
  return d ? d + "-" + clock : clock;
}

function bytes(n) {
  let v = Number(n || 0);
  for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (v < 1024 || unit === "TiB") { return unit === "B" ? v + " B" : v.toFixed(1) + " " + unit; }
    v /= 1024;
  }
  return String(n);
}

function fillTable(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
}

function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const [name, value] of Object.entries(attrs || {})) { tr.setAttribute(name, value); }
  for (const cell of cells) { tr.appendChild(cell instanceof Node ? cell : el("td", cell)); }
  return tr;
}

function stateCell(state) {
  const name = stateName(state);
  return el("td", name, "state state-" + name);
}

function link(text, href) {
  const td = el("td");
  const a = el("a", text);
  a.href = href;
  td.appendChild(a);
  return td;
}

// -- views -------------------------------------------------------------------------------------

async function showJobs() {
  const finished = $("show-finished").checked ? "?finished=1" : "";
  const data = await api("jobs" + finished);
  const jobs = data.jobs || [];
  fillTable($("jobs-table"), jobs.map((j) => row([
    link(j.job_id, "#/jobs/" + encodeURIComponent(j.job_id)), j.name, j.user, stateCell(j.state),
    el("td", j.restart_count, "num"), (j.nodes || []).join(",") || "-",
    Number(j.checkpoint_step) >= 0 ? String(j.checkpoint_step) : "-",
    (j.terminal && j.final_reason) ? j.final_reason : (j.reason || "-"),
  ], { "data-job-id": j.job_id, "data-state": stateName(j.state) })));
  $("jobs-empty").hidden = jobs.length > 0;
}

function field(list, name, value) {
  list.appendChild(el("dt", name));
  list.appendChild(el("dd", value === "" || value === undefined || value === null ? "-" : value));
}

async function showJob(jobId) {
  $("job-title").textContent = jobId;
  let job;
  try {
    job = (await api("jobs/" + encodeURIComponent(jobId))).job;
  } catch (e) {
    $("job-error").textContent = e.message;
    $("job-body").hidden = true;
    return;
  }
  $("job-error").textContent = "";
  $("job-body").hidden = false;
  const dl = $("job-fields");
  dl.replaceChildren();
  dl.setAttribute("data-state", stateName(job.state));
  field(dl, "Name", job.name);
  field(dl, "User", job.user);
  field(dl, "State", stateName(job.state) + (job.terminal ? " (terminal)" : ""));
  field(dl, "Reason", job.terminal && job.final_reason ? job.final_reason : job.reason);
  field(dl, "Nodes", (job.nodes || []).join(","));
  field(dl, "Restarts", job.restart_count);
  if ((job.stragglers || []).length) {
    field(dl, "Stragglers", job.stragglers.map((s) => s.node + " (" + Number(s.ratio).toFixed(2) + "x)").join(", "));
  }
  if (job.has_exit_code) { field(dl, "Exit code", job.exit_code + (job.exit_signal ? " (signal " + job.exit_signal + ")" : "")); }
  field(dl, "Submitted", when(job.original_submit_time || job.submit_time));
  field(dl, "Started", when(job.start_time));
  field(dl, "Ended", when(job.end_time));
  field(dl, "Output", job.stdout_path);
  field(dl, "Placement", job.placement_explanation);
  const restarts = $("job-restarts");
  restarts.replaceChildren(...(job.restarts || []).map((r) => el("li",
    when(r.time) + ": " + String(r.cause || "").replace(/^TERMINATION_CAUSE_/, "") +
    ((r.failed_nodes || []).length ? " on " + r.failed_nodes.join(",") : "") +
    " (checkpoint step " + (Number(r.checkpoint_step) >= 0 ? r.checkpoint_step : "-") + ")" +
    (r.detail ? ": " + r.detail : ""))));
  if (!restarts.children.length) { restarts.appendChild(el("li", "no restarts", "muted")); }
  await Promise.all([showGoodput(jobId), showCheckpoints(jobId), showLog(jobId)]);
}

function percent(x) { return (100 * (Number(x) || 0)).toFixed(1) + "%"; }

async function showGoodput(jobId) {
  try {
    const g = await api("jobs/" + encodeURIComponent(jobId) + "/goodput");
    const wall = Number(g.wall_seconds) || 0;
    $("goodput-error").textContent = "";
    $("goodput-ratio").textContent = "ETTR " + percent(g.ettr) + " of " + duration(wall) +
      (g.checkpoint_interval ? ", advised checkpoint interval " + duration(parseFloat(g.checkpoint_interval)) : "");
    fillTable($("goodput-table"), Object.entries(g.breakdown || {}).map(([part, s]) => row([
      part.replace(/_/g, " "), el("td", duration(Number(s)), "num"), el("td", percent(wall ? Number(s) / wall : 0), "num"),
    ], { "data-part": part })));
  } catch (e) {
    $("goodput-error").textContent = e.message;
  }
}

async function showFleet() {
  const data = await api("goodput");
  fillTable($("fleet-table"), (data.rows || []).map((r) => row([
    r.partition || "-", r.user, el("td", r.jobs, "num"), el("td", percent(r.ettr), "num"),
    el("td", duration(r.wall_seconds), "num"), el("td", duration(r.breakdown.lost), "num"),
    el("td", duration(r.breakdown.checkpoint_stall), "num"), el("td", duration(r.breakdown.restart), "num"),
  ], { "data-partition": r.partition, "data-user": r.user })));
}

async function showCheckpoints(jobId) {
  try {
    const data = await api("jobs/" + encodeURIComponent(jobId) + "/checkpoints");
    $("ckpt-uri").textContent = data.uri || "(no checkpoint URI)";
    $("ckpt-error").textContent = data.error || "";
    fillTable($("ckpt-table"), (data.checkpoints || []).map((c) => row([
      el("td", c.step, "num"), el("td", bytes(c.bytes), "num"), el("td", c.world_size, "num"), when(c.committed_at),
      el("td", c.verification + (c.detail ? ": " + c.detail : ""), c.verification),
    ])));
  } catch (e) {
    $("ckpt-error").textContent = e.message;
  }
}

async function showLog(jobId) {
  const stream = $("log-stream").value;
  try {
    const data = await api("jobs/" + encodeURIComponent(jobId) + "/log?stream=" + stream);
    $("log-path").textContent = data.path || "";
    $("log-notice").textContent = (data.notices || []).join("; ");
    $("log-text").textContent = data.text;
  } catch (e) {
    $("log-notice").textContent = e.message;
    $("log-text").textContent = "";
  }
}

async function showQueue() {
  const data = await api("queue");
  $("queue-asof").textContent = data.as_of ? "as of " + when(data.as_of) : "";
  const now = Date.now() / 1000;
  fillTable($("queue-table"), (data.jobs || []).map((j) => {
    const started = j.start_time ? new Date(j.start_time).getTime() / 1000 : 0;
    const running = stateName(j.state) !== "PENDING" && started > 0;
    const until = j.end_time ? new Date(j.end_time).getTime() / 1000 : now;  // a finished job's time stops
    return row([
      j.mine ? link(j.job_id, "#/jobs/" + encodeURIComponent(j.job_id.split("_[")[0])) : el("td", j.job_id),
      j.partition, j.name, j.user, stateCell(j.state), running ? duration(until - started) : "0:00",
      (j.nodes || []).length ? j.nodes.join(",") : "(" + (j.reason || "None") + ")",
    ], { "data-job-id": j.job_id });
  }));
}

function switchItem(sw, byName) {
  const li = el("li", sw.name + ": " + sw.gpus_free + "/" + sw.gpus_total + " GPUs free, " +
    sw.nodes_free + "/" + sw.nodes_total + " nodes idle");
  li.setAttribute("data-switch", sw.name);
  const kids = (sw.switches || []).map((n) => byName[n]).filter(Boolean);
  if (kids.length || (sw.nodes || []).length) {
    const ul = el("ul");
    for (const kid of kids) { ul.appendChild(switchItem(kid, byName)); }
    if ((sw.nodes || []).length) { ul.appendChild(el("li", sw.nodes.join(", "), "muted")); }
    li.appendChild(ul);
  }
  return li;
}

async function showNodes() {
  const topo = (await api("topology")).topology || {};
  const byName = {};
  for (const sw of topo.switches || []) { byName[sw.name] = sw; }
  $("switch-tree").replaceChildren(...(topo.roots || []).map((r) => byName[r]).filter(Boolean)
    .map((sw) => switchItem(sw, byName)));
  fillTable($("nodes-table"), (topo.nodes || []).map((n) => row([
    n.name, n.switch || "-", stateCell(n.state),
    el("td", Math.max(0, n.gpus_total - n.gpus_allocated) + "/" + n.gpus_total, "num"),
    el("td", Math.max(0, n.cpus_total - n.cpus_allocated) + "/" + n.cpus_total, "num"),
    (n.partitions || []).join(","), n.reason || "-",
  ], { "data-node": n.name })));
}

async function showHistory() {
  const data = await api("history");
  $("history-note").textContent = data.accounting ? "with Slurm accounting" : (data.accounting_note || "");
  fillTable($("history-table"), (data.jobs || []).map((j) => row([
    j.source === "clusterd" ? link(j.job_id, "#/jobs/" + encodeURIComponent(j.job_id)) : el("td", j.job_id),
    j.name, stateCell(j.state), j.has_exit_code ? j.exit_code + (j.exit_signal ? ":" + j.exit_signal : "") : "-",
    j.elapsed ? duration(parseFloat(j.elapsed)) : "-", el("td", j.restart_count, "num"),
    (j.nodes || []).join(",") || "-", when(j.end_time),
  ], { "data-job-id": j.job_id })));
}

// -- routing -----------------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/jobs";
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) { return { view: "job", render: () => showJob(parts[1]) }; }
  const views = { jobs: showJobs, queue: showQueue, nodes: showNodes, history: showHistory, goodput: showFleet };
  const name = views[parts[0]] ? parts[0] : "jobs";
  return { view: name, render: views[name] };
}

async function refresh() {
  clearTimeout(timer);
  if (!token()) { showLogin(""); return; }
  const current = route();
  for (const section of document.querySelectorAll(".view")) { section.hidden = section.id !== "view-" + current.view; }
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.view === current.view || (current.view === "job" && a.dataset.view === "jobs"));
  }
  try {
    await current.render();
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("status").textContent = e.message;
  }
  if (token()) { timer = setTimeout(refresh, REFRESH_MS); }
}

function showLogin(message) {
  clearTimeout(timer);
  sessionStorage.removeItem("clusterctl-token");
  me = null;
  $("login").hidden = false;
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("whoami").textContent = "";
  for (const section of document.querySelectorAll(".view")) { section.hidden = true; }
  $("login-error").textContent = message;
}

async function signedIn() {
  me = await api("whoami");
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = false;
  $("whoami").textContent = me.user + (me.admin ? " (admin)" : "");
  await refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("clusterctl-token", $("token-input").value.trim());
    $("token-input").value = "";
    signedIn().catch((e) => { if (!$("login").hidden) { return; } showLogin(e.message); });
  });
  $("logout").addEventListener("click", () => showLogin(""));
  $("show-finished").addEventListener("change", refresh);
  $("log-stream").addEventListener("change", refresh);
  window.addEventListener("hashchange", refresh);
  if (token()) { signedIn().catch((e) => showLogin(e.message)); } else { showLogin(""); }
});
