// Shared by the pages: DOM building with text only (document text is never parsed as HTML),
// API calls, and small SVG charts.
"use strict";

// el("p", {class: "x"}, "text", child): an element whose strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    // Styles through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 2) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return String(value);
}

function pct(value) {
  return value === null || value === undefined ? "–" : `${Math.round(value * 100)}%`;
}

// The API's JSON; an error reply raises an Error with its message (and its status).
async function api(path, options = {}) {
  const init = {method: options.method || "GET", headers: {}, credentials: "same-origin", signal: options.signal};
  if (options.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : `HTTP ${response.status}`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return data;
}

// POST `body` to `path` and call onEvent(name, data) for each server-sent event as it comes.
async function streamEvents(path, body, onEvent, signal) {
  const response = await fetch(path, {
    method: "POST", credentials: "same-origin", signal,
    headers: {"Content-Type": "application/json", "Accept": "text/event-stream"},
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try { message = (await response.json()).error.message; } catch (e) { /* keep the status */ }
    const error = new Error(message);
    error.status = response.status;
    error.retryAfter = response.headers.get("Retry-After");
    throw error;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true}).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const key = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (key === "event") name = val;
        else if (key === "data") data.push(val);
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

// A bar of `value` in [0, 1] against `threshold`: green when it passes ("at_least" or "at_most").
function signalBar(name, value, threshold, rule) {
  const defined = value !== null && value !== undefined;
  const passes = !defined ? null : rule === "at_most" ? value <= threshold : value >= threshold;
  const width = defined ? Math.max(0, Math.min(1, value)) * 100 : 0;
  const track = el("span", {class: "track", title: `${name} ${fmt(value)}; ${rule === "at_most" ? "at most" : "at least"} ${fmt(threshold)} passes`},
    el("span", {class: `fill ${passes === null ? "na" : passes ? "pass" : "fail"}`, style: {width: `${width.toFixed(1)}%`}}),
    el("span", {class: "mark", style: {left: `${(Math.max(0, Math.min(1, threshold)) * 100).toFixed(1)}%`}}));
  return el("div", {class: "signal", "data-signal": name},
    el("span", {class: "name"}, name), track,
    el("span", {class: "value"}, defined ? fmt(value) : "n/a", " / ", (rule === "at_most" ? "≤ " : "≥ ") + fmt(threshold)));
}
