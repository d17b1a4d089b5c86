// The run's dashboard: reads /v1/dashboard every few seconds and draws it (inline SVG, no libraries: the page is
// served by the coordinator and needs no network beyond it).
"use strict";
const EVERY_S = Number(new URLSearchParams(location.search).get("every")) || 3;
const $ = (id) => document.getElementById(id);
const fmt = (x, d = 0) => Number(x).toLocaleString("en", { maximumFractionDigits: d, minimumFractionDigits: d });
const NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// series: [{points: [[x, y]...], color, label, right}] ; a series with right=true uses its own scale (right axis)
function chart(svg, series) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 600, H = 240, L = 44, R = 44, T = 12, B = 24;
  const all = series.flatMap((s) => s.points);
  svg.dataset.points = String(all.length);
  if (all.length < 1) {
    svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return;
  }
  const xs = all.map((p) => p[0]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) > x0 ? Math.max(...xs) : x0 + 1;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#dde1e6" }));
  for (const s of series) {
    if (!s.points.length) continue;
    const ys = s.points.map((p) => p[1]);
    let y0 = Math.min(0, ...ys), y1 = Math.max(...ys);
    if (y1 <= y0) y1 = y0 + 1;
    const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    svg.appendChild(el("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
    const ax = s.right ? W - R + 4 : 4, anchor = "start";
    svg.appendChild(el("text", { x: ax, y: T + 4, fill: s.color, "text-anchor": anchor }, fmt(y1, s.digits || 0)));
    svg.appendChild(el("text", { x: ax, y: H - B, fill: s.color, "text-anchor": anchor }, fmt(y0, s.digits || 0)));
    svg.appendChild(el("text", { x: s.right ? W - R - 4 : L + 4, y: T + 16, fill: s.color,
      "text-anchor": s.right ? "end" : "start" }, s.label));
  }
  svg.appendChild(el("text", { x: L, y: H - 6 }, fmt(x0)));
  svg.appendChild(el("text", { x: W - R, y: H - 6, "text-anchor": "end" }, fmt(x1)));
}

function rows(tbody, data) {
  tbody.replaceChildren(...data.map((cells) => {
    const tr = document.createElement("tr");
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    return tr;
  }));
}

function throughput(history) {
  const out = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i], dt = b.at - a.at;
    if (dt > 0) out.push([b.at - history[0].at, Math.max(0, (b.samples_applied - a.samples_applied) / dt)]);
  }
  return out;
}

function render(d) {
  const st = d.status;
  $("title").textContent = `${st.model} on ${st.dataset}`;
  $("state").textContent = st.state;
  $("state").className = "badge " + st.state;
  $("spec").textContent = `${st.algorithm} · run ${st.run_id}` + (st.stop_reason ? ` · ${st.stop_reason}` : "");
  $("progress").textContent = fmt(100 * st.progress, 1) + " %";
  $("progress-bar").style.width = (100 * st.progress).toFixed(1) + "%";
  $("samples-total").textContent = fmt(st.samples_total);
  $("accuracy").textContent = st.test ? fmt(100 * st.test.accuracy, 2) + " %" : "–";
  $("version").textContent = fmt(st.version);
  const tp = throughput(d.history);
  $("throughput").textContent = tp.length ? fmt(tp[tp.length - 1][1]) : "–";
  $("workers-online").textContent = fmt(st.workers.filter((w) => w.online).length);
  const v = st.validation || {};
  const validated = (v.applied || 0) + (v.recorded || 0) + (v.duplicate || 0) + (v.stale || 0);
  $("validated").textContent = `${fmt(validated)} / ${fmt(v.invalid || 0)}`;
  chart($("chart-accuracy"), [
    { points: st.evaluations.map((e) => [e.samples, 100 * e.accuracy]), color: "#2563eb", label: "accuracy %", digits: 1 },
    { points: st.evaluations.map((e) => [e.samples, e.loss]), color: "#d97706", label: "loss", right: true, digits: 2 },
  ]);
  chart($("chart-throughput"), [
    { points: tp, color: "#2563eb", label: "samples/s" },
    { points: d.history.map((h) => [h.at - (d.history[0] ? d.history[0].at : 0), h.workers_online]), color: "#16a34a",
      label: "workers online", right: true },
  ]);
  rows($("leaderboard").tBodies[0], d.leaderboard.map((r, i) => [i + 1, r.user, r.workers, fmt(r.samples),
    fmt(r.flops / 1e9, 1), r.valid, r.invalid]));
  rows($("workers").tBodies[0], st.workers.map((w) => [w.name + (w.banned ? " (banned)" : ""), w.device,
    fmt(w.samples_per_s), w.units_done, fmt(w.credit), w.reputation, w.online ? "yes" : "no"]));
  $("updated").textContent = new Date().toLocaleTimeString();
  document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
}

async function refresh() {
  try {
    const r = await fetch("/v1/dashboard", { cache: "no-store" });
    if (r.ok) render(await r.json());
    else $("updated").textContent = `error ${r.status}`;
  } catch (e) {
    $("updated").textContent = "coordinator unreachable";
  }
  setTimeout(refresh, EVERY_S * 1000);
}
$("every").textContent = String(EVERY_S);
refresh();
