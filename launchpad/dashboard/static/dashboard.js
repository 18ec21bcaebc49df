// launchpad dashboard: polls the two JSON endpoints and draws the jobs table and one job's run.
// Every value from the server goes into the page as text (textContent), never as HTML.
"use strict";

const view = { plot: null, refreshS: 2, timer: null };
// launchpad.phases.PHASES: where the time until the first training step went
const PHASES = ["provision", "reachable", "sync", "environment", "launch", "prewarm", "loading", "first_step"];

function selectedId() {
  const m = /^#job=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store", credentials: "same-origin" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function age(ts, now) {
  if (!ts) return "";
  const s = Math.max(0, (now || Date.now() / 1000) - ts);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) if (s >= size) return `${Math.round(s / size)}${unit} ago`;
  return `${Math.round(s)}s ago`;
}

function duration(s) {
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${r}s` : `${r}s`;
}

const money = (x) => `$${(x || 0).toFixed(2)}`;
const stepText = (j) => (j.total_steps ? `${j.step}/${j.total_steps}` : String(j.step || 0));

function renderJobs(data) {
  const body = document.querySelector("#jobs tbody");
  const sel = selectedId();
  body.replaceChildren();
  for (const j of data.jobs) {
    const tr = document.createElement("tr");
    tr.dataset.job = j.id;
    tr.dataset.state = j.state;
    if (j.id === sel) tr.classList.add("selected");
    cell(tr, j.id, "id");
    cell(tr, j.state, j.state);
    cell(tr, j.provider);
    cell(tr, j.gpu);
    cell(tr, stepText(j), "num");
    cell(tr, j.loss == null ? "" : j.loss.toFixed(3), "num");
    cell(tr, money((j.cost_usd || 0) + (j.disk_usd || 0)), "num");
    cell(tr, age(j.created_at, data.now));
    tr.addEventListener("click", () => { location.hash = `job=${encodeURIComponent(j.id)}`; });
    body.appendChild(tr);
  }
  document.getElementById("no-jobs").hidden = data.jobs.length > 0;
}

function fact(dl, label, text) {
  if (text == null || text === "") return;
  const dt = document.createElement("dt"), dd = document.createElement("dd");
  dt.textContent = label;
  dd.textContent = text;
  dd.dataset.fact = label;
  dl.append(dt, dd);
}

function renderJob(j, now) {
  document.getElementById("job").hidden = false;
  document.getElementById("job-id").textContent = j.id;
  const state = document.getElementById("job-state");
  state.textContent = j.state + (j.phase && j.state === "TRAINING" ? ` · ${j.phase}` : "");
  state.className = `state ${j.state}`;
  const ended = document.getElementById("job-ended");  // a detached job: nothing records its end until asked
  ended.hidden = !(j.state === "TRAINING" && j.trainer_running === false);
  const err = document.getElementById("job-error");
  err.hidden = !j.error;
  err.textContent = j.error || "";

  const dl = document.getElementById("job-facts");
  dl.replaceChildren();
  fact(dl, "name", j.name);
  fact(dl, "provider", [j.provider, j.gpu].filter(Boolean).join(" · "));
  fact(dl, "step", stepText(j));
  fact(dl, "loss", j.loss == null ? null : j.loss.toPrecision(4));
  fact(dl, "eval loss", j.eval_losses && j.eval_losses.length ? j.eval_losses[j.eval_losses.length - 1][1].toPrecision(4) : null);
  const speed = [];
  if (j.tokens_per_s) speed.push(`${Math.round(j.tokens_per_s).toLocaleString()} tokens/s`);
  if (j.step_seconds) speed.push(`${j.step_seconds.toFixed(2)} s/step`);
  fact(dl, "speed", speed.join(", "));
  if (j.eta_s != null) fact(dl, "ETA", `${duration(j.eta_s)} to step ${j.total_steps}`);
  const cost = [`${money((j.cost_usd || 0) + (j.disk_usd || 0))} so far`];
  if (j.projected_usd != null) cost.push(`${money(j.projected_usd)} projected`);
  if (j.estimate_usd != null) cost.push(`${money(j.estimate_usd)} planned`);
  fact(dl, "cost", cost.join(", "));
  if ("store_checkpoint" in j) {
    const ck = j.store_checkpoint;
    fact(dl, "in the store", ck ? `checkpoint-${ck.step}, complete, written ${age(ck.created_at, now)}` : "no complete checkpoint yet");
  }
  const phases = j.phase_times || {};
  if (phases.total) {
    const parts = PHASES.filter((p) => phases[p]).map((p) => `${p.replace("_", " ")} ${phases[p].seconds.toFixed(1)} s`);
    fact(dl, "time to first step", `${phases.total.seconds.toFixed(1)} s (${parts.join(", ")})`);
  }
  fact(dl, "recipe", j.recipe);

  drawChart(j.losses || [], j.eval_losses || []);

  const ckBody = document.querySelector("#checkpoints tbody");
  ckBody.replaceChildren();
  for (const c of j.checkpoints || []) {
    const tr = document.createElement("tr");
    cell(tr, c.step, "num");
    cell(tr, age(c.created_at, now));
    cell(tr, c.uri);
    ckBody.appendChild(tr);
  }
  document.getElementById("no-checkpoints").hidden = (j.checkpoints || []).length > 0;
  const evBody = document.querySelector("#events tbody");
  evBody.replaceChildren();
  // the start-up phases' marks are summed up in "time to first step" above
  for (const e of (j.events || []).filter((e) => e.kind !== "agent:phases").reverse()) {
    const tr = document.createElement("tr");
    cell(tr, new Date(e.ts * 1000).toLocaleTimeString());
    cell(tr, e.kind);
    cell(tr, Object.entries(e.data || {}).filter(([k, v]) => v != null && typeof v !== "object")
      .map(([k, v]) => `${k}=${v}`).join(", "));
    evBody.appendChild(tr);
  }
  const log = document.getElementById("log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = (j.log_tail || []).join("\n");
  if (atEnd) log.scrollTop = log.scrollHeight;
}

function drawChart(losses, evals) {
  const box = document.getElementById("chart");
  box.dataset.points = String(losses.length);
  box.dataset.evalPoints = String(evals.length);
  document.getElementById("no-curve").hidden = losses.length > 0 || evals.length > 0;
  // one x axis (the step) for both curves; a curve has null where it logged nothing
  const steps = [...new Set([...losses.map((p) => p[0]), ...evals.map((p) => p[0])])].sort((a, b) => a - b);
  const train = new Map(losses), ev = new Map(evals);
  const data = [steps, steps.map((s) => (train.has(s) ? train.get(s) : null)), steps.map((s) => (ev.has(s) ? ev.get(s) : null))];
  const width = Math.max(320, box.parentElement.clientWidth);
  if (view.plot && view.plot.width !== width) { view.plot.destroy(); view.plot = null; }
  if (!steps.length) { if (view.plot) { view.plot.destroy(); view.plot = null; } return; }
  if (view.plot) { view.plot.setData(data); return; }
  view.plot = new uPlot({
    width, height: 280,
    scales: { x: { time: false } },
    axes: [{ label: "step" }, { label: "loss" }],
    series: [
      { label: "step" },
      { label: "loss", stroke: "#2563eb", width: 1.5, spanGaps: true, points: { show: false } },
      { label: "eval loss", stroke: "#db2777", width: 2, spanGaps: true, points: { show: true, size: 6 } },
    ],
  }, data, box);
}

async function refresh() {
  clearTimeout(view.timer);
  const status = document.getElementById("updated");
  try {
    const data = await getJSON("api/jobs");
    view.refreshS = data.refresh_s || view.refreshS;
    renderJobs(data);
    const id = selectedId() || (data.jobs[0] && data.jobs[0].id);
    if (id) {
      const j = await getJSON(`api/jobs/${encodeURIComponent(id)}`);
      renderJob(j, data.now);
      for (const tr of document.querySelectorAll("#jobs tbody tr")) tr.classList.toggle("selected", tr.dataset.job === id);
    } else {
      document.getElementById("job").hidden = true;
    }
    status.textContent = `${data.jobs.length} job${data.jobs.length === 1 ? "" : "s"} · state ${data.state} · updated ${new Date().toLocaleTimeString()}`;
    status.classList.remove("error");
    status.dataset.refreshes = String(Number(status.dataset.refreshes || 0) + 1);
  } catch (e) {
    status.textContent = `cannot refresh: ${e.message}`;
    status.classList.add("error");
  }
  view.timer = setTimeout(refresh, view.refreshS * 1000);
}

window.addEventListener("hashchange", refresh);
refresh();
