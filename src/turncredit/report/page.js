/* The report page: learning curves as inline SVG, the evaluation table and the trajectory
   browser, all drawn from the JSON in #report-data. Run text (model output) only ever enters
   the page as text nodes, never as markup. */
"use strict";

const DATA = JSON.parse(document.getElementById("report-data").textContent);
const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#57606a"];
const W = 440, H = 230, M = { l: 54, r: 12, t: 10, b: 36 };
const MARKERS_UP_TO = 60;  // points drawn as dots too, for short runs

const CHARTS = [
  { metric: "reward_mean", title: "reward (mean ± std)", series: ["reward_mean"], band: "reward_std" },
  { metric: "success_rate", title: "success rate", series: ["success_rate"], range: [0, 1] },
  { metric: "f1", title: "F1", series: ["f1"], range: [0, 1] },
  { metric: "entropy", title: "entropy", series: ["entropy"] },
  { metric: "kl", title: "KL", series: ["approx_kl", "ref_kl"] },
  { metric: "seconds", title: "seconds per step", series: ["seconds_generate", "seconds_oracle", "seconds_update"] },
];
const EVAL_COLUMNS = ["k", "n_tasks", "n_samples", "episodes", "avg_questions", "avg_questions_when_won",
  "repeated_rate", "invalid_rate", "aborted", "f1", "precision", "recall", "exact_match", "evidence_recall",
  "tool_calls", "format_error_rate"];

// ------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  e.append(...children);  // strings become text nodes
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

const isNum = (v) => typeof v === "number" && Number.isFinite(v);

function fmt(v) {
  if (!isNum(v)) return "—";
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a >= 1000 ? v.toFixed(0) : String(Number(v.toPrecision(a >= 1 ? 4 : 3)));
}

const pct = (v) => (isNum(v) ? (100 * v).toFixed(1) + " %" : "—");
const signed = (v) => (isNum(v) ? (v > 0 ? "+" : v < 0 ? "−" : "") + fmt(Math.abs(v)) : "—");
const short = (k, v) => (isNum(v) && !Number.isInteger(v) ? Number(v.toPrecision(4)) : v);  // JSON.stringify replacer
const signClass = (v) => (isNum(v) && v > 0 ? "pos" : isNum(v) && v < 0 ? "neg" : "");

// ------------------------------------------------------------------ header

function header() {
  const run = DATA.run, rows = DATA.metrics, last = rows[rows.length - 1];
  document.getElementById("title").textContent = "turncredit report: " + run.name;
  document.getElementById("run-path").textContent = run.path;
  const facts = [...Object.entries(run.facts || {}),
    ["steps", String(rows.length)], ["success, last step", pct(last.success_rate)],
    ["reward, last step", fmt(last.reward_mean)], ["episodes", String(DATA.episodes_total)]];
  const box = document.getElementById("facts");
  for (const [k, v] of facts) box.append(h("span", {}, k + " ", h("b", {}, String(v))));
  if (run.config !== null) {
    document.getElementById("config").textContent = run.config;
    document.getElementById("config-section").hidden = false;
  }
}

// ------------------------------------------------------------------ curves

function niceStep(span, n) {
  const raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

function ticks(lo, hi, step) {
  const out = [];
  for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++) out.push(Number((i * step).toPrecision(12)));
  return out;
}

/** [lo, hi, tick step] around the values, widened to whole ticks (and to `range` if given). */
function yDomain(values, range) {
  let lo = Math.min(...values, ...(range ? [range[0]] : [])), hi = Math.max(...values, ...(range ? [range[1]] : []));
  if (lo === hi) { const d = Math.abs(lo) * 0.1 || 1; lo -= d; hi += d; }
  const step = niceStep(hi - lo, 4);
  return [Math.floor(lo / step + 1e-9) * step, Math.ceil(hi / step - 1e-9) * step, step];
}

function linePath(rows, key, X, Y) {
  let d = "", pen = false, n = 0;
  for (const r of rows) {
    if (!isNum(r[key])) { pen = false; continue; }
    d += (pen ? "L" : "M") + X(r.step).toFixed(1) + " " + Y(r[key]).toFixed(1) + " ";
    pen = true; n++;
  }
  return [d.trim(), n];
}

function bandPath(rows, key, std, X, Y) {
  const ok = rows.filter((r) => isNum(r[key]) && isNum(r[std]));
  if (ok.length < 2) return "";
  const up = ok.map((r) => X(r.step).toFixed(1) + " " + Y(r[key] + r[std]).toFixed(1));
  const down = ok.slice().reverse().map((r) => X(r.step).toFixed(1) + " " + Y(r[key] - r[std]).toFixed(1));
  return "M" + up.join(" L") + " L" + down.join(" L") + " Z";
}

function chartCard(title) {
  const parts = {
    card: h("div", { class: "chart" }),
    head: h("div", { class: "chart-head" }, h("h3", {}, title)),
    svg: svg("svg", { class: "curve", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title }),
    legend: h("div", { class: "legend" }),
    readout: h("div", { class: "readout" }),
  };
  parts.card.append(parts.head, parts.svg, parts.legend, parts.readout);
  return parts;
}

/** Draw `spec.series` of the metrics against step into parts.svg (replacing what was there). */
function drawChart(parts, spec) {
  const rows = DATA.metrics, el = parts.svg;
  el.replaceChildren(); parts.legend.replaceChildren(); parts.readout.textContent = "";
  el.setAttribute("data-metric", spec.metric);
  const series = spec.series.filter((k) => rows.some((r) => isNum(r[k])));
  const band = spec.band && rows.some((r) => isNum(r[spec.band])) ? spec.band : null;
  const ys = [];
  for (const r of rows) {
    for (const k of series) if (isNum(r[k])) ys.push(r[k]);
    if (band && isNum(r[series[0]]) && isNum(r[band])) ys.push(r[series[0]] - r[band], r[series[0]] + r[band]);
  }
  const steps = rows.map((r) => r.step);
  let x0 = Math.min(...steps), x1 = Math.max(...steps);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  const [y0, y1, ystep] = yDomain(ys, spec.range);
  const X = (v) => M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r);
  const Y = (v) => H - M.b - (v - y0) / (y1 - y0) * (H - M.t - M.b);

  for (const v of ticks(y0, y1, ystep)) {
    el.append(svg("line", { class: "grid", x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v) }));
    const t = svg("text", { x: M.l - 5, y: Y(v) + 3.5, "text-anchor": "end" }); t.textContent = fmt(v); el.append(t);
  }
  for (const v of ticks(x0, x1, Math.max(1, niceStep(x1 - x0, 5)))) {
    if (v < x0 || v > x1) continue;
    el.append(svg("line", { class: "axis", x1: X(v), x2: X(v), y1: H - M.b, y2: H - M.b + 4 }));
    const t = svg("text", { x: X(v), y: H - M.b + 15, "text-anchor": "middle" }); t.textContent = fmt(v); el.append(t);
  }
  el.append(svg("line", { class: "axis", x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }));
  el.append(svg("line", { class: "axis", x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }));
  const xl = svg("text", { class: "axis-label", x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle" });
  xl.textContent = "step";
  const yl = svg("text", { class: "axis-label", "text-anchor": "middle",
    transform: `translate(12 ${(M.t + H - M.b) / 2}) rotate(-90)` });
  yl.textContent = series.length === 1 ? series[0] : spec.title;
  el.append(xl, yl);

  if (band) el.append(svg("path", { class: "band", fill: COLORS[0], d: bandPath(rows, series[0], band, X, Y) }));
  series.forEach((k, i) => {
    const [d, n] = linePath(rows, k, X, Y);
    el.append(svg("path", { class: "line", stroke: COLORS[i % COLORS.length], d, "data-series": k, "data-points": n }));
    if (rows.length <= MARKERS_UP_TO) {
      for (const r of rows.filter((r) => isNum(r[k]))) {
        const c = svg("circle", { class: "point", cx: X(r.step), cy: Y(r[k]), r: 2.6, fill: COLORS[i % COLORS.length] });
        const tip = svg("title"); tip.textContent = `step ${r.step}: ${k} ${fmt(r[k])}`; c.append(tip); el.append(c);
      }
    }
    parts.legend.append(h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), k));
  });
  if (band) parts.legend.append(h("span", {}, "band: ± " + band));
  hover(parts, rows, series.concat(band ? [band] : []), X, x0, x1);
}

/** A cursor line and a readout of every series at the step under the mouse. */
function hover(parts, rows, keys, X, x0, x1) {
  const el = parts.svg;
  const cursor = svg("line", { class: "cursor", y1: M.t, y2: H - M.b, visibility: "hidden" });
  const pad = svg("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: "transparent" });
  el.append(cursor, pad);
  pad.addEventListener("mousemove", (e) => {
    const box = el.getBoundingClientRect();
    const step = x0 + ((e.clientX - box.left) * W / box.width - M.l) / (W - M.l - M.r) * (x1 - x0);
    const r = rows.reduce((a, b) => (Math.abs(b.step - step) < Math.abs(a.step - step) ? b : a));
    cursor.setAttribute("x1", X(r.step)); cursor.setAttribute("x2", X(r.step));
    cursor.setAttribute("visibility", "visible");
    parts.readout.textContent = `step ${r.step}: ` + keys.map((k) => `${k} ${fmt(r[k])}`).join(" · ");
  });
  pad.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); parts.readout.textContent = ""; });
}

function curves() {
  const box = document.getElementById("curves");
  for (const spec of CHARTS) {
    if (!spec.series.some((k) => DATA.metrics.some((r) => isNum(r[k])))) continue;
    const parts = chartCard(spec.title);
    box.append(parts.card);
    drawChart(parts, spec);
  }
  // any other logged number (turns, label rates, grad norm, keys added later) on demand
  const keys = [...new Set(DATA.metrics.flatMap((r) => Object.keys(r).filter((k) => k !== "step" && isNum(r[k]))))];
  if (!keys.length) return;
  const parts = chartCard("any metric");
  parts.svg.id = "custom-curve";
  const pick = h("select", { id: "custom-metric", "aria-label": "metric to plot" },
    ...keys.map((k) => h("option", { value: k }, k)));
  const charted = new Set(CHARTS.flatMap((c) => c.series.concat(c.band || [])));
  pick.value = keys.includes("turns_mean") ? "turns_mean" : keys.find((k) => !charted.has(k)) || keys[0];
  parts.head.append(pick);
  const draw = () => drawChart(parts, { metric: pick.value, title: pick.value, series: [pick.value] });
  pick.addEventListener("change", draw);
  box.append(parts.card);
  draw();
}

// ------------------------------------------------------------------ evaluation

function evalTable() {
  const evals = DATA.evals;
  if (!evals.length) return;
  document.getElementById("eval-section").hidden = false;
  const present = new Set(evals.flatMap((e) => Object.keys(e.result).filter((k) => isNum(e.result[k]))));
  const shown = new Set(["mean_at_k", "mean_at_k_std", "pass_at_k", ...EVAL_COLUMNS]);
  const cols = [...EVAL_COLUMNS.filter((k) => present.has(k)), ...[...present].filter((k) => !shown.has(k)).sort()];
  const table = document.getElementById("eval-table");
  table.tHead.append(h("tr", {}, h("th", {}, "model / stage"), h("th", {}, "Mean@k"), h("th", {}, "Pass@k"),
    ...cols.map((k) => h("th", {}, k)), h("th", { class: "text" }, "source")));
  for (const e of evals) {
    const r = e.result;
    const mean = !isNum(r.mean_at_k) ? "—" : (100 * r.mean_at_k).toFixed(1) +
      (isNum(r.mean_at_k_std) ? " ± " + (100 * r.mean_at_k_std).toFixed(1) : "") + " %";
    table.tBodies[0].append(h("tr", { class: "eval-row" },
      h("td", {}, e.label), h("td", {}, mean), h("td", {}, pct(r.pass_at_k)),
      ...cols.map((k) => h("td", {}, fmt(r[k]))),
      h("td", { class: "text", title: e.source }, e.source.split(/[\\/]/).slice(-2).join("/"))));
  }
}

// ------------------------------------------------------------------ trajectories

/** |advantage| that gets full colour: the 95th percentile over every embedded turn. */
function advantageScale() {
  const a = DATA.episodes.flatMap((ep) => ep.turns.map((t) => Math.abs(t.advantage)).filter(isNum)).sort((x, y) => x - y);
  return a.length && a[Math.floor(0.95 * (a.length - 1))] > 0 ? a[Math.floor(0.95 * (a.length - 1))] : 1;
}

function browser() {
  const eps = DATA.episodes;
  const note = document.getElementById("episode-note");
  note.textContent = DATA.sources.length ? DATA.episodes_note : "No episode files in this run (episodes/step_*.jsonl).";

  const source = document.getElementById("filter-source");
  for (const s of DATA.sources) source.append(h("option", { value: s }, s));
  const task = document.getElementById("filter-task"), result = document.getElementById("filter-result");
  const taskIds = [...new Set(eps.map((ep) => ep.task_id))].sort();
  const ids = h("datalist", { id: "task-ids" }, ...taskIds.map((t) => h("option", { value: t })));
  task.setAttribute("list", "task-ids");
  task.after(ids);

  const body = document.getElementById("episode-rows");
  const rows = eps.map((ep, i) => {
    const tr = h("tr", { class: "episode", tabindex: 0, "data-index": i, "data-result": ep.result },
      h("td", { class: "text", title: ep.source }, ep.source),
      h("td", { class: "text", title: String(ep.group_id ?? "") }, String(ep.group_id ?? "")),
      h("td", { class: "text", title: ep.task_id }, ep.task_id), h("td", {}, String(ep.turns.length)),
      h("td", { class: signClass(ep.return) }, signed(isNum(ep.return) ? Number(ep.return.toFixed(3)) : ep.return)),
      h("td", { class: "text" }, h("span", { class: "chip", "data-result": ep.result }, ep.result)));
    tr.addEventListener("click", () => showEpisode(i, rows));
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") showEpisode(i, rows); });
    body.append(tr);
    return tr;
  });
  const count = document.getElementById("episode-count");
  const filter = () => {
    const s = source.value, q = task.value.trim().toLowerCase(), res = result.value;
    let n = 0;
    rows.forEach((tr, i) => {
      const ep = eps[i];
      const ok = (!s || ep.source === s) && (!res || ep.result === res) &&
        (!q || ep.task_id.toLowerCase().includes(q) || String(ep.group_id ?? "").toLowerCase().includes(q));
      tr.hidden = !ok;
      n += ok;
    });
    count.textContent = `${n} of ${eps.length} episodes`;
  };
  for (const el of [source, result]) el.addEventListener("change", filter);
  task.addEventListener("input", filter);
  filter();
}

const ADV_SCALE = advantageScale();

function tint(li, adv) {
  if (!isNum(adv) || adv === 0) return;
  const w = Math.min(1, Math.abs(adv) / ADV_SCALE), rgb = adv > 0 ? "22, 163, 74" : "220, 38, 38";
  li.style.background = `rgba(${rgb}, ${(0.05 + 0.3 * w).toFixed(3)})`;
  li.style.borderLeftColor = `rgba(${rgb}, ${(0.35 + 0.65 * w).toFixed(3)})`;
}

function showEpisode(i, rows) {
  const ep = DATA.episodes[i];
  rows.forEach((tr, j) => tr.classList.toggle("selected", j === i));
  const box = document.getElementById("episode-detail");
  box.replaceChildren();
  box.setAttribute("data-index", i);
  box.append(h("h3", {}, ep.task_id || "(no task id)"));
  const facts = [h("span", { class: "chip", "data-result": ep.result }, ep.result), ep.source,
    `group ${ep.group_id ?? "—"}`, `outcome ${fmt(ep.outcome)}`, `return ${signed(ep.return)}`,
    ...(ep.truncated ? ["truncated"] : []), ...(ep.abort_reason ? [`aborted: ${ep.abort_reason}`] : [])];
  box.append(h("div", { class: "facts" }, ...facts.map((f) => (typeof f === "string" ? h("span", {}, f) : f))));
  if (ep.info && Object.keys(ep.info).length) {
    box.append(h("div", { class: "extra" }, "info " + JSON.stringify(ep.info, short)));
  }
  const prompt = (ep.messages || []).map((m) => `[${m.role}]\n${m.content}`).join("\n\n");
  box.append(h("details", {}, h("summary", {}, "task and opening prompt"),
    h("pre", {}, JSON.stringify(ep.task, null, 1) + "\n\n" + prompt), h("div", { class: "extra" }, ep.where)));

  const list = h("ol", { class: "turns" });
  ep.turns.forEach((t, j) => {
    // what the environment said beyond the reply: typed fields worth a look, its own record, then the
    // free-form info (an older file keeps all of it in info)
    const typed = {};
    if (isNum(t.env_reward) && t.env_reward !== t.reward) typed.env_reward = t.env_reward;
    if (isNum(t.outcome_reward)) typed.outcome_reward = t.outcome_reward;
    if (t.truncated_action) typed.truncated_action = true;
    const info = { ...typed, ...(t.record || {}), ...(t.info || {}) };
    const label = t.label || info.label;
    const head = h("div", { class: "turn-head" }, h("span", { class: "num" }, `turn ${j + 1}`));
    if (label !== undefined) {
      head.append(h("span", { class: "chip label", "data-label": String(label) }, String(label)));
    }
    head.append(h("span", { class: "reward " + signClass(t.reward) }, "reward " + signed(t.reward)),
      h("span", { class: "advantage " + signClass(t.advantage) }, "advantage " + signed(t.advantage)));
    if (t.tokens) head.append(h("span", { class: "muted" }, `${t.tokens} tokens`));
    const extra = Object.entries(info).filter(([k]) => k !== "label")
      .map(([k, v]) => `${k}: ${JSON.stringify(v, short)}`).join("   ");
    const li = h("li", { class: "turn", "data-advantage": isNum(t.advantage) ? t.advantage : "" }, head,
      h("div", { class: "turn-body" },
        h("div", { class: "k" }, "action"), h("div", { class: "action" }, h("pre", {}, String(t.action_text ?? ""))),
        h("div", { class: "k" }, "reply"), h("div", { class: "reply" }, h("pre", {}, String(t.observation ?? "")))));
    if (extra) li.append(h("div", { class: "extra" }, extra));
    tint(li, t.advantage);
    list.append(li);
  });
  box.append(list);
}

header();
curves();
evalTable();
browser();
document.documentElement.setAttribute("data-ready", "1");
