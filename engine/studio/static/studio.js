// Dossier studio: the page's logic. Plain JS, no libraries, no external requests.
// Every piece of corpus text is put in the page with textContent, never as HTML.
"use strict";

const ZOOMS = [0.5, 0.75, 1, 1.25, 1.5, 2, 3];
const ui = {};
const st = {
  slug: null,         // the annotator's run directory name
  question: null,     // {id, text, number}
  hits: [],           // the current result list
  current: -1,        // index of the opened result in `hits`, -1 when none
  page: null,         // {document, page, page_count}
  marked: [],         // [{document, page}]
  oracle: [],         // the gold pages shown under the oracle condition: [{document, page, page_count}]
  queries: [],        // this question's searches so far
  zoom: 2,            // index into ZOOMS (100%)
  busy: false,
};

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    const error = new Error((data && data.error) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

function annotatorPath(action) { return `api/annotators/${encodeURIComponent(st.slug)}/${action}`; }
function pageKey(p) { return `${p.document}\u0000${p.page}`; }
function isMarked(p) { return st.marked.some((m) => pageKey(m) === pageKey(p)); }

function show(screen) {
  for (const name of ["signin-screen", "work-screen", "done-screen"]) $(name).hidden = name !== screen;
}

function setError(id, message) { $(id).textContent = message || ""; }

// ---- sign-in ------------------------------------------------------------------------------------
async function boot() {
  for (const id of ["query", "results", "evidence", "answer-values", "page-image", "page-frame"]) ui[id] = $(id);
  if (location.search.includes("token=")) history.replaceState(null, "", location.pathname);  // the cookie holds it now
  bindEvents();
  try {
    const info = await api("GET", "api/info");
    $("corpus-info").textContent = `${info.questions} questions over ${info.documents} documents ` +
      `(${info.pages} pages). Search shows the top ${info.k} pages, as the agents see them.`;
    const table = $("query-help");
    for (const [example, meaning] of info.query_help) table.append(el("tr", {}, el("td", {}, el("code", {}, example)), el("td", {}, meaning)));
  } catch (e) {
    setError("signin-error", e.message);
  }
  const saved = localStorage.getItem("dossier-studio-annotator");
  if (saved) {
    st.slug = saved;
    try { render(await api("GET", annotatorPath("state"))); return; } catch (e) { localStorage.removeItem("dossier-studio-annotator"); }
  }
  show("signin-screen");
  $("name").focus();
}

async function signIn(event) {
  event.preventDefault();
  setError("signin-error", "");
  const body = { name: $("name").value };
  if (!$("resume-row").hidden && $("resume-code").value.trim()) body.resume_code = $("resume-code").value.trim();
  try {
    const state = await api("POST", "api/signin", body);
    localStorage.setItem("dossier-studio-annotator", state.slug);
    $("resume-row").hidden = true;
    $("resume-code").value = "";
    render(state);
  } catch (e) {
    if (e.status === 409 || e.status === 403) {  // the name has a run: its resume code re-binds this browser
      $("resume-row").hidden = false;
      $("resume-code").focus();
    }
    setError("signin-error", e.message);
  }
}

function signOut() {
  localStorage.removeItem("dossier-studio-annotator");
  st.slug = null;
  $("who").hidden = $("signout").hidden = $("progress").hidden = true;
  show("signin-screen");
}

// ---- one question ---------------------------------------------------------------------------------
function render(state) {
  st.slug = state.slug;
  $("who").textContent = state.annotator;
  $("who").hidden = $("signout").hidden = $("progress").hidden = false;
  const { done, total } = state.progress;
  $("progress-fill").style.width = `${total ? (100 * done) / total : 0}%`;
  $("progress-text").textContent = `${done} of ${total} done`;
  $("progress-track").setAttribute("aria-valuemax", String(total));
  $("progress-track").setAttribute("aria-valuenow", String(done));
  if (state.resume_code) {  // a new run: shown once
    $("resume-value").textContent = state.resume_code;
    $("resume-banner").hidden = false;
  }
  if (!state.question) {
    $("done-text").textContent = `${state.annotator}, you finished all ${total} questions.`;
    show("done-screen");
    return;
  }
  const fresh = !st.question || st.question.id !== state.question.id;
  st.question = state.question;
  $("question-number").textContent = `Question ${state.question.number} of ${total}`;
  $("question-text").textContent = state.question.text;
  st.marked = state.marked || [];
  renderEvidence();
  renderOracle(state.oracle);
  renderHistory(state.searches || []);
  if (state.last_search) {
    ui.query.value = state.last_search.query;
    renderResults(state.last_search);
  } else {
    ui.query.value = "";
    renderResults(null);
  }
  if (fresh) resetAnswer();
  if (state.viewing) showPage(state.viewing.document, state.viewing.page, state.viewing.page_count);
  else if (st.oracle.length) openPage(st.oracle[0].document, st.oracle[0].page, "oracle");  // before any search
  else clearViewer();
  setError("work-error", "");
  show("work-screen");
  if (fresh) ui.query.focus();
}

async function search(event) {
  if (event) event.preventDefault();
  const query = ui.query.value.trim();
  if (!query || st.busy) return;
  st.busy = true;
  $("search-status").textContent = "searching…";
  try {
    const result = await api("POST", annotatorPath("search"), { question_id: st.question.id, query });
    renderResults(result);
    renderHistory(st.queries.concat([query]));
  } catch (e) {
    await onActionError(e);
  } finally {
    st.busy = false;
  }
}

function renderResults(result) {
  st.hits = result ? result.hits : [];
  st.current = -1;
  const status = $("search-status");
  status.classList.toggle("error", Boolean(result && result.error));
  if (!result) status.textContent = "";
  else if (result.error) status.textContent = result.error;
  else status.textContent = st.hits.length
    ? `${st.hits.length} ${st.hits.length === 1 ? "page" : "pages"} for “${result.query}” (${result.server_ms} ms)`
    : `No page matches “${result.query}”. Try other words: synonyms, abbreviations, fewer terms.`;
  drawHits();
}

function drawHits() {
  ui.results.replaceChildren();
  st.hits.forEach((hit, i) => {
    const snippet = el("span", { class: "snippet" });
    for (const [text, match] of hit.snippet) snippet.append(match ? el("mark", {}, text) : document.createTextNode(text));
    const where = el("span", { class: "where" }, el("span", { class: "rank" }, `${i + 1}.`), `${hit.document} · page ${hit.page}`);
    if (isMarked(hit)) where.append(el("span", { class: "flag" }, "✓ evidence"));
    const button = el("button", { type: "button", "data-index": String(i), on: { click: () => openResult(i) } }, where, snippet);
    ui.results.append(el("li", {}, button));
  });
  highlightCurrent();
}

function renderHistory(queries) {
  st.queries = queries;
  $("history").textContent = queries.length ? `Your searches: ${queries.map((q) => `“${q}”`).join(" → ")}` : "";
}

function highlightCurrent() {
  ui.results.querySelectorAll("button").forEach((b, i) => b.classList.toggle("current", i === st.current));
}

function openResult(i) {
  if (i < 0 || i >= st.hits.length) return;
  st.current = i;
  highlightCurrent();
  openPage(st.hits[i].document, st.hits[i].page, "result");
}

// ---- the page viewer ------------------------------------------------------------------------------
async function openPage(document_, page, via) {
  try {
    const info = await api("POST", annotatorPath("view"), { question_id: st.question.id, document: document_, page, via });
    showPage(info.document, info.page, info.page_count);
  } catch (e) {
    await onActionError(e);
  }
}

function showPage(document_, page, pageCount) {
  st.page = { document: document_, page, page_count: pageCount || (st.page && st.page.document === document_ ? st.page.page_count : null) };
  const img = ui["page-image"];
  img.hidden = false;
  img.alt = `${document_}, page ${page}`;
  img.src = `pages/${encodeURIComponent(document_)}/${page}.png`;
  $("viewer-empty").hidden = true;
  $("page-label").textContent = document_;
  $("page-label").title = document_;
  $("page-number").textContent = st.page.page_count ? `page ${page} / ${st.page.page_count}` : `page ${page}`;
  $("prev-page").disabled = page <= 1;
  $("next-page").disabled = Boolean(st.page.page_count) && page >= st.page.page_count;
  $("mark").disabled = false;
  renderMarkButton();
  applyZoom();
}

function clearViewer() {
  st.page = null;
  ui["page-image"].hidden = true;
  ui["page-image"].removeAttribute("src");
  $("viewer-empty").hidden = false;
  $("page-label").textContent = "No page open";
  $("page-number").textContent = "";
  for (const id of ["prev-page", "next-page", "mark"]) $(id).disabled = true;
  renderMarkButton();
}

function step(delta) {
  if (!st.page) return;
  const target = st.page.page + delta;
  if (target < 1 || (st.page.page_count && target > st.page.page_count)) return;
  openPage(st.page.document, target, delta > 0 ? "next" : "previous");
}

function zoom(delta) {
  st.zoom = Math.max(0, Math.min(ZOOMS.length - 1, st.zoom + delta));
  applyZoom();
}

function applyZoom() {
  ui["page-image"].style.width = `${ZOOMS[st.zoom] * 100}%`;
  ui["page-image"].style.maxWidth = "none";
  $("zoom-label").textContent = `${Math.round(ZOOMS[st.zoom] * 100)}%`;
}

// ---- evidence and answer --------------------------------------------------------------------------
async function toggleMark(target) {
  const page = target || st.page;
  if (!page) return;
  try {
    const result = await api("POST", annotatorPath("mark"), {
      question_id: st.question.id, document: page.document, page: page.page, marked: !isMarked(page) });
    st.marked = result.marked;
    renderEvidence();
    renderMarkButton();
    drawHits();
  } catch (e) {
    await onActionError(e);
  }
}

function renderMarkButton() {
  const on = Boolean(st.page) && isMarked(st.page);
  $("mark").textContent = on ? "✓ Marked as evidence" : "Mark as evidence";
  $("mark").classList.toggle("on", on);
}

function renderEvidence() {
  ui.evidence.replaceChildren();
  if (!st.marked.length) ui.evidence.append(el("li", { class: "none" }, "No page marked yet."));
  for (const m of st.marked) {
    ui.evidence.append(el("li", {},
      el("button", { type: "button", title: "open this page", on: { click: () => openPage(m.document, m.page, "marked") } },
        `${m.document} · p. ${m.page}`),
      el("button", { type: "button", class: "remove", title: "unmark", "aria-label": `unmark ${m.document} page ${m.page}`,
        on: { click: () => toggleMark(m) } }, "×")));
  }
}

function renderOracle(oracle) {
  st.oracle = oracle ? oracle.pages : [];
  $("oracle").hidden = !oracle;
  const list = $("oracle-pages");
  list.replaceChildren();
  for (const p of st.oracle) {
    list.append(el("li", {}, el("button", { type: "button", title: "open this gold page",
      on: { click: () => openPage(p.document, p.page, "oracle") } }, `${p.document} · p. ${p.page}`)));
  }
  if (oracle && !st.oracle.length) list.append(el("li", { class: "none" }, "No gold page for this question."));
  $("oracle-note").textContent = (oracle && oracle.note) || "";
}

function addValue(text) {
  const input = el("input", { type: "text", maxlength: "1000", "aria-label": "answer value", class: "answer-value" });
  input.value = text || "";
  const row = el("div", { class: "value-row" }, input,
    el("button", { type: "button", class: "quiet", title: "remove this value", on: { click: () => { row.remove(); if (!ui["answer-values"].children.length) addValue(); } } }, "×"));
  ui["answer-values"].append(row);
  return input;
}

function resetAnswer() {
  ui["answer-values"].replaceChildren();
  addValue();
}

async function submit(action) {
  if (st.busy) return;
  const answer = [...ui["answer-values"].querySelectorAll("input")].map((i) => i.value.trim()).filter(Boolean);
  if (action === "answer" && !answer.length) {
    setError("work-error", "Enter the answer first (or use “I can't find it” / skip).");
    ui["answer-values"].querySelector("input").focus();
    return;
  }
  st.busy = true;
  try {
    const state = await api("POST", annotatorPath("submit"), { question_id: st.question.id, action, answer });
    render(state);
  } catch (e) {
    await onActionError(e);
  } finally {
    st.busy = false;
  }
}

async function onActionError(e) {
  if (e.status === 409) {  // another tab moved on: show where the run really is
    render(await api("GET", annotatorPath("state")));
    setError("work-error", e.message);
    return;
  }
  setError("work-error", e.message);
}

// ---- keyboard ---------------------------------------------------------------------------------------
function onKey(event) {
  if ($("work-screen").hidden) return;
  if ((event.ctrlKey || event.metaKey) && event.key === "Enter") {
    event.preventDefault();
    submit("answer");
    return;
  }
  const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName);
  if (typing) {
    if (event.key === "Escape") document.activeElement.blur();
    return;
  }
  if (event.altKey || event.ctrlKey || event.metaKey) return;
  const actions = {
    "/": () => { ui.query.focus(); ui.query.select(); },
    j: () => openResult(st.current + 1),
    k: () => openResult(Math.max(0, st.current - 1)),
    ArrowRight: () => step(1),
    ArrowLeft: () => step(-1),
    m: () => toggleMark(),
    "+": () => zoom(1),
    "=": () => zoom(1),
    "-": () => zoom(-1),
    a: () => ui["answer-values"].querySelector("input").focus(),
  };
  const action = actions[event.key];
  if (action) {
    event.preventDefault();
    action();
  }
}

function bindEvents() {
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  $("resume-ok").addEventListener("click", () => { $("resume-banner").hidden = true; });
  $("search-form").addEventListener("submit", search);
  $("prev-page").addEventListener("click", () => step(-1));
  $("next-page").addEventListener("click", () => step(1));
  $("zoom-in").addEventListener("click", () => zoom(1));
  $("zoom-out").addEventListener("click", () => zoom(-1));
  $("mark").addEventListener("click", () => toggleMark());
  $("add-value").addEventListener("click", () => addValue().focus());
  $("answer-form").addEventListener("submit", (e) => { e.preventDefault(); submit("answer"); });
  $("not-found").addEventListener("click", () => submit("not_found"));
  $("skip").addEventListener("click", () => submit("skip"));
  ui["page-image"].addEventListener("error", () => setError("work-error", "the page image could not be loaded"));
  document.addEventListener("keydown", onKey);
}

document.addEventListener("DOMContentLoaded", boot);
