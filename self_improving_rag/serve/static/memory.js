// The memory page: today's `sirag memory report` figures, read live from /v1/memory/report,
// and the recorded outcomes, paged and searched, from /v1/outcomes.
"use strict";

const $ = (id) => document.getElementById(id);
const PAGE = 15;
const REFRESH_MS = 10000;
let offset = 0;
let query = "";

function table(headers, rows) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, row.map((cell) =>
      cell instanceof Node ? el("td", {}, cell) : el("td", {class: typeof cell === "number" ? "num" : ""}, fmt(cell)))))));
}

function empty(what) {
  return el("p", {class: "empty"}, `No data yet: ${what}.`);
}

// A horizontal bar of a rate in [0, 1], with its figure.
function rateBar(rate) {
  return el("span", {class: "ratebar"},
    el("span", {class: "track"}, el("span", {class: "fill pass", style: {width: `${Math.round((rate || 0) * 100)}%`}})),
    el("span", {class: "value"}, pct(rate)));
}

function summary(stats) {
  const cards = [
    ["questions", stats.questions], ["outcomes", stats.outcomes], ["answered", stats.answered],
    ["refused", stats.refused], ["success rate", pct(stats.success_rate)],
    ["first attempt passed", pct(stats.first_attempt_success_rate)], ["attempts per question", fmt(stats.mean_attempts)],
    ["labels (right / wrong)", `${stats.feedback.correct} / ${stats.feedback.wrong}`],
  ];
  append(clear($("summary")), cards.map(([k, v]) => el("div", {class: "card"}, el("span", {class: "big"}, fmt(v)),
    el("span", {class: "meta"}, k))));
}

function byClass(rows) {
  const box = clear($("by-class"));
  if (!rows.length) return box.append(empty("no attempt recorded"));
  box.append(table(["question kind", "strategy", "first attempts", "passed"],
    rows.map((r) => [r.query_class, el("code", {}, r.strategy_key), r.attempts, rateBar(r.success_rate)])));
}

function failures(rows) {
  const box = clear($("failures"));
  if (!rows.length) return box.append(empty("no failed attempt"));
  box.append(table(["failure", "attempts", "share of attempts", "repair most used after it", "uses", "it then passed"],
    rows.map((r) => [el("span", {class: "failure bad"}, r.failure), r.count, pct(r.share), r.top_repair || "–",
      r.top_repair_uses, r.top_repair_success_rate === null ? "–" : rateBar(r.top_repair_success_rate)])));
}

// An SVG chart frame: x and y in [0, 1] mapped to a w x h plot with axes and ticks.
const QUARTERS = [0, 0.25, 0.5, 0.75, 1].map((t) => [t, t.toFixed(2)]);

// xTicks: [position in [0, 1], label] pairs (default: quarters).
function frame(w, h, xLabel, yLabel, xTicks = QUARTERS) {
  const m = {l: 44, r: 12, t: 10, b: 36};
  const root = svg("svg", {viewBox: `0 0 ${w} ${h}`, class: "plot", role: "img"});
  const x = (v) => m.l + v * (w - m.l - m.r);
  const y = (v) => h - m.b - v * (h - m.t - m.b);
  for (const [t, label] of QUARTERS) {
    root.append(svg("line", {x1: x(0), x2: x(1), y1: y(t), y2: y(t), class: "grid"}));
    root.append(svg("text", {x: m.l - 6, y: y(t) + 4, class: "tick", "text-anchor": "end"}, label));
  }
  for (const [t, label] of xTicks) {
    root.append(svg("text", {x: x(t), y: h - m.b + 16, class: "tick", "text-anchor": "middle"}, label));
  }
  root.append(svg("text", {x: x(0.5), y: h - 4, class: "axis", "text-anchor": "middle"}, xLabel));
  root.append(svg("text", {x: 12, y: y(0.5), class: "axis", "text-anchor": "middle",
    transform: `rotate(-90 12 ${y(0.5)})`}, yLabel));
  return {root, x, y};
}

function reliability(data) {
  const box = clear($("reliability"));
  const filled = data.bins.filter((b) => b.n > 0);
  $("reliability-note").textContent = filled.length
    ? `${data.n} answered outcome(s); accuracy from ${data.target === "feedback" ? "your labels" : "the engine's own checks (no label yet)"}; ECE ${fmt(data.ece)}. The diagonal is perfect calibration.`
    : "";
  if (!filled.length) return box.append(empty("no answered outcome"));
  const {root, x, y} = frame(420, 300, "confidence", "accuracy");
  root.append(svg("line", {x1: x(0), y1: y(0), x2: x(1), y2: y(1), class: "diagonal"}));
  const most = Math.max(...filled.map((b) => b.n));
  for (const b of filled) {
    root.append(svg("circle", {cx: x(b.mean_confidence), cy: y(b.accuracy), r: 3 + 6 * Math.sqrt(b.n / most), class: "dot"},
      svg("title", {}, `${b.n} answer(s): confidence ${fmt(b.mean_confidence)}, accuracy ${fmt(b.accuracy)}`)));
  }
  box.append(root);
}

function confidence(data) {
  const box = clear($("confidence"));
  const total = data.answered.reduce((a, b) => a + b, 0) + data.refused.reduce((a, b) => a + b, 0);
  if (!total) return box.append(empty("no outcome"));
  const {root, x, y} = frame(420, 300, "confidence", "share of outcomes");
  const most = Math.max(...data.answered.map((a, i) => a + data.refused[i]));
  const bins = data.answered.length;
  data.answered.forEach((a, i) => {
    const r = data.refused[i];
    const left = x(i / bins) + 1;
    const width = x(1 / bins) - x(0) - 2;
    const ha = y(0) - y(a / most);
    const hr = y(0) - y(r / most);
    root.append(svg("rect", {x: left, y: y(0) - ha, width, height: ha, class: "bar-answered"},
      svg("title", {}, `${a} answered`)));
    root.append(svg("rect", {x: left, y: y(0) - ha - hr, width, height: hr, class: "bar-refused"},
      svg("title", {}, `${r} refused`)));
  });
  root.append(svg("text", {x: x(0.02), y: y(0.95), class: "legend answered"}, "answered"));
  root.append(svg("text", {x: x(0.02), y: y(0.87), class: "legend refused"}, "refused"));
  box.append(root);
}

function learning(points) {
  const box = clear($("learning"));
  if (points.length < 2) return box.append(empty("fewer than two outcomes"));
  const last = points.length - 1;
  const steps = Math.min(5, points.length);
  const ticks = [...new Set(Array.from({length: steps}, (_, i) => Math.round((i * last) / (steps - 1))))]
    .map((i) => [i / last, String(i + 1)]);
  const {root, x, y} = frame(860, 260, "outcomes, oldest first", "rolling share", ticks);
  const line = (key, cls) => svg("polyline", {class: cls, fill: "none",
    points: points.map((p, i) => `${x(i / (points.length - 1)).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ")});
  root.append(line("rolling_first_success", "line-first"), line("rolling_success", "line-success"));
  root.append(svg("text", {x: x(0.02), y: y(0.95), class: "legend first"}, "first attempt passed"));
  root.append(svg("text", {x: x(0.02), y: y(0.87), class: "legend success"}, "answered with confidence"));
  box.append(root);
}

function label(value) {
  if (value === null || value === undefined) return "–";
  return el("span", {class: value ? "failure ok" : "failure bad"}, value ? "right" : "wrong");
}

async function outcomes() {
  const params = new URLSearchParams({limit: PAGE, offset});
  if (query) params.set("q", query);
  const box = clear($("outcomes"));
  let data;
  try {
    data = await api(`/v1/outcomes?${params}`);
  } catch (error) {
    box.append(el("p", {class: "status error"}, error.message));
    return;
  }
  const rows = data.outcomes;
  if (!rows.length) box.append(empty(query ? `no outcome holds ${query}` : "no outcome recorded"));
  else {
    box.append(table(["when (UTC)", "question", "answer", "confidence", "label"], rows.map((r) => [
      (r.created_at || "").replace("T", " ").slice(0, 19), r.question,
      r.refused ? el("span", {class: "meta"}, "refused") : (r.answer || ""), r.confidence, label(r.label)])));
  }
  const more = data.total !== undefined ? offset + rows.length < data.total : data.more;
  $("prev").disabled = offset === 0;
  $("next").disabled = !more;
  $("page").textContent = rows.length ? `${offset + 1}–${offset + rows.length}` +
    (data.total !== undefined ? ` of ${data.total}` : "") : "";
}

async function refresh() {
  try {
    const report = await api("/v1/memory/report");
    summary(report.stats);
    byClass(report.strategy_by_class);
    failures(report.failures);
    reliability(report.reliability);
    confidence(report.confidence);
    learning(report.learning_curve);
    await outcomes();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("updated").className = "pill ok";
  } catch (error) {
    $("updated").textContent = `not updated: ${error.message}`;
    $("updated").className = "pill warn";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    query = $("search").value.trim();
    offset = 0;
    outcomes();
  });
  $("prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); outcomes(); });
  $("next").addEventListener("click", () => { offset += PAGE; outcomes(); });
  refresh();
  setInterval(refresh, REFRESH_MS);
});
