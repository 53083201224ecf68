// The ask page: streams one ask's events into an answer, its sources and a timeline of attempts.
"use strict";

const $ = (id) => document.getElementById(id);
const SIGNALS = ["coverage", "grounding", "faithfulness", "redundancy", "confidence"];
let controller = null;
let outcomeId = null;
const cards = new Map(); // attempt number -> its timeline card's parts
const pending = new Map(); // attempt number -> the repair that makes it

function status(text, kind) {
  const node = $("status");
  node.textContent = text;
  node.className = `status ${kind || ""}`;
}

function strategyChips(strategy) {
  const parts = [
    ["chunker", strategy.chunker], ["retriever", strategy.retriever], ["top k", strategy.top_k],
    ["rerank", strategy.rerank ? "on" : "off"], ["prompt", strategy.prompt], ["neighbours", strategy.neighbors],
    ["rewrite", strategy.query_rewrite], ["budget", strategy.context_budget],
  ];
  return el("span", {class: "chips"}, parts.map(([k, v]) => el("span", {class: "chip"}, `${k} ${v}`)));
}

function onRetrieval(data) {
  const old = cards.get(data.attempt);
  const before = pending.get(data.attempt);
  const repair = el("p", {class: "repair"});
  if (data.repair) {
    repair.append(el("span", {class: "chip repair-chip"}, `repair: ${data.repair}`));
    if (before && before.note) repair.append(" ", el("span", {class: "meta"}, before.note));
  }
  const stream = el("pre", {class: "stream"});
  const signals = el("div", {class: "signals"});
  const diagnosis = el("p", {class: "diagnosis"});
  const card = el("li", {class: "attempt running", "data-attempt": data.attempt},
    el("div", {class: "attempt-head"}, el("strong", {}, `Attempt ${data.attempt}`), " ", strategyChips(data.strategy)),
    repair,
    el("p", {class: "meta"}, `${data.passages.length} passage(s) retrieved in ${fmt(data.ms, 0)} ms`),
    stream, signals, diagnosis);
  if (old) old.card.replaceWith(card);
  else $("timeline").append(card);
  cards.set(data.attempt, {card, stream, signals, diagnosis});
  $("timeline-box").hidden = false;
  status(`attempt ${data.attempt}: the model is writing…`);
}

// The repair chosen after an attempt failed: said on the next attempt's card. A repair that gave
// an earlier prompt again is skipped, and the next one comes for the same attempt number.
function onRepair(data) {
  const before = pending.get(data.attempt);
  const skipped = data.replaces_skipped && before ? [...before.skipped, before.repair] : [];
  const notes = [];
  if (data.after_failure) notes.push(`after ${data.after_failure}`);
  if (skipped.length) {
    notes.push(`${skipped.join(" and ")} skipped: ${skipped.length > 1 ? "each" : "it"} gave an earlier prompt again`);
  }
  pending.set(data.attempt, {repair: data.repair, skipped, note: notes.join("; ")});
  status(`retrying: ${data.repair}`);
}

function onToken(data) {
  const card = cards.get(data.attempt);
  if (card && card.stream) card.stream.append(data.text);
}

function onAttempt(data) {
  const card = cards.get(data.number);
  if (!card) return;
  card.card.classList.remove("running");
  card.card.classList.add(data.failure === "NONE" ? "passed" : "failed");
  clear(card.signals);
  for (const name of SIGNALS) {
    const t = data.thresholds[name];
    card.signals.append(signalBar(name, data.signals[name].value, t.threshold, t.pass));
  }
  if (data.signals.refusal) card.signals.append(el("p", {class: "meta"}, "the model declined (refusal)"));
  clear(card.diagnosis);
  card.diagnosis.append(el("span", {class: `failure ${data.failure === "NONE" ? "ok" : "bad"}`}, data.failure), " ",
    data.failure_reason || "");
  card.card.append(el("p", {class: "meta"},
    `tokens: prompt ${data.prompt_tokens}, completion ${data.completion_tokens}; ${fmt((data.timings_ms.total || 0) / 1000)} s`));
}

// The answer's text with each [n] a link to source n.
function withCitations(text) {
  const out = [];
  const re = /\[(\d+(?:\s*,\s*\d+)*)\]/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    out.push(text.slice(last, m.index));
    const numbers = m[1].split(",").map((n) => n.trim());
    out.push("[");
    numbers.forEach((n, i) => {
      if (i) out.push(", ");
      out.push(el("a", {href: `#source-${n}`, class: "cite", "data-source": n}, n));
    });
    out.push("]");
    last = re.lastIndex;
  }
  out.push(text.slice(last));
  return out;
}

// A passage's text with its supporting sentence marked.
function passageText(text, sentence) {
  const at = sentence ? text.indexOf(sentence) : -1;
  if (at < 0) return [text];
  return [text.slice(0, at), el("mark", {}, sentence), text.slice(at + sentence.length)];
}

function showSources(result, highlights) {
  const marks = new Map((highlights || []).map((h) => [h.number, h.sentence]));
  const list = clear($("sources"));
  $("sources-title").textContent = result.refused ? "Closest passages" : "Sources";
  for (const s of result.sources) {
    list.append(el("li", {id: `source-${s.number}`, class: "source"},
      el("div", {class: "source-head"}, el("strong", {}, `[${s.number}] ${s.doc}`), " ",
        el("span", {class: "meta"}, `${s.section} · characters ${s.start}–${s.end} · score ${fmt(s.score)}`)),
      el("p", {class: "passage"}, passageText(s.text, marks.get(s.number)))));
  }
  if (!result.sources.length) list.append(el("li", {class: "meta"}, "no passage"));
}

function onFinal(name, data) {
  const result = data.result;
  $("result").hidden = false;
  outcomeId = result.outcome_id;
  if (name === "answer") {
    $("answer-box").hidden = false;
    append(clear($("answer")), withCitations(result.answer || ""));
    $("answer-meta").textContent = `confidence ${fmt(result.confidence)} · attempt ${result.chosen_attempt} of ` +
      `${result.attempts.length} · ${result.query_class} question` + (outcomeId ? ` · outcome ${outcomeId.slice(0, 12)}` : "");
    status("answered", "ok");
  } else {
    $("refusal-box").hidden = false;
    $("refusal").textContent = result.refusal_reason || "no answer";
    status("refused: no answer passed its checks", "warn");
  }
  showSources(result, data.highlights);
  $("feedback").hidden = !outcomeId;
  $("feedback-status").textContent = "";
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  if (controller) controller.abort(); // the earlier ask stops (the server stops its loop)
  controller = new AbortController();
  cards.clear();
  pending.clear();
  clear($("timeline"));
  clear($("sources"));
  for (const id of ["result", "answer-box", "refusal-box", "feedback", "timeline-box"]) $(id).hidden = true;
  outcomeId = null;
  status("retrieving…");
  $("ask").disabled = true;
  const handlers = {retrieval: onRetrieval, repair: onRepair, token: onToken, attempt: onAttempt};
  try {
    await streamEvents("/v1/ask", {question, stream: true, loop: $("loop").checked}, (name, data) => {
      if (handlers[name]) handlers[name](data);
      else if (name === "answer" || name === "refusal") onFinal(name, data);
      else if (name === "error") status(`error: ${data.message}`, "error");
    }, controller.signal);
  } catch (error) {
    if (error.name !== "AbortError") {
      const wait = error.retryAfter ? ` (try again in ${error.retryAfter} s)` : "";
      status(`error: ${error.message}${wait}`, "error");
    }
  } finally {
    $("ask").disabled = false;
  }
}

async function mark(correct) {
  if (!outcomeId) return;
  try {
    const reply = await api("/v1/feedback", {method: "POST", body: {outcome_id: outcomeId, correct}});
    $("feedback-status").textContent = `recorded: ${correct ? "right" : "wrong"}` +
      (reply.written ? "" : " (it already had this label)") + " · used by calibration";
    $("mark-right").classList.toggle("chosen", correct);
    $("mark-wrong").classList.toggle("chosen", !correct);
  } catch (error) {
    $("feedback-status").textContent = `not recorded: ${error.message}`;
  }
}

async function watchReady() {
  const pill = $("ready");
  try {
    const state = await api("/readyz");
    pill.textContent = "ready";
    pill.className = "pill ok";
    pill.title = state.corpus;
    return;
  } catch (error) {
    pill.textContent = error.status === 503 ? "loading models…" : "unreachable";
    pill.className = "pill warn";
    if (error.message && error.status === 503) pill.title = error.message;
  }
  setTimeout(watchReady, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", ask);
  $("mark-right").addEventListener("click", () => mark(true));
  $("mark-wrong").addEventListener("click", () => mark(false));
  watchReady();
});
