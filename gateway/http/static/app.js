// reame's page: load a document, ask question after question about it, see what each answer cost.
//
// The document goes first, as the system message, and the conversation after it, so every
// question starts the same way and the server's KV cache reuses the document. Everything
// the page keeps (conversations, settings, the API key) stays in this browser's
// localStorage; the server stores nothing for it. Model text is rendered by markdown.js,
// which builds DOM nodes and never parses HTML.

import { renderMarkdown } from "./markdown.js";

const STORE = "reame.conversations.v1";
const SETTINGS = "reame.settings.v1";
const KEY = "reame.apiKey";
const SPEED = "reame.prefillSpeed"; // prompt tokens per second, from the last document read
const DEFAULTS = {
  model: "",
  temperature: 0.2,
  maxTokens: 512,
  compress: "",
  speculative: "",
  systemPrompt: "Answer questions about the document below. Be brief and exact.",
};
const NEAR_BOTTOM_PX = 48;

const $ = (id) => document.getElementById(id);
const ui = {
  server: $("server"), menu: $("menu"), closeMenu: $("close-menu"), sidebar: $("sidebar"),
  conversations: $("conversations"), newConversation: $("new-conversation"), exportAll: $("export-all"),
  apiKey: $("api-key"), model: $("model"), temperature: $("temperature"), maxTokens: $("max-tokens"),
  compress: $("compress"), speculative: $("speculative"), systemPrompt: $("system-prompt"),
  document: $("document"), documentSummary: $("document-summary"), drop: $("drop"),
  documentText: $("document-text"), openFile: $("open-file"), file: $("file"),
  readDocument: $("read-document"), progress: $("document-progress"), documentStatus: $("document-status"),
  messages: $("messages"), empty: $("empty"), composer: $("composer"), question: $("question"),
  send: $("send"), stop: $("stop"),
};

// ---- storage ------------------------------------------------------------------------

function load(name, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(name));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

function save(name, value) {
  try {
    localStorage.setItem(name, JSON.stringify(value));
    return true;
  } catch {
    setServer("This browser's storage is full: the conversation is not saved. Delete or export old ones.", true);
    return false;
  }
}

const settings = { ...DEFAULTS, ...load(SETTINGS, {}) };
const state = load(STORE, { current: null, conversations: [] });
let busy = null; // the AbortController of the request in flight
let warmed = null; // what the server last read for us: { key, promptTokens, cached }

function newId() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

function newConversation() {
  const conversation = {
    id: newId(), title: "New conversation", named: false, created: new Date().toISOString(),
    document: { name: "", text: "" }, messages: [],
  };
  state.conversations.unshift(conversation);
  state.current = conversation.id;
  return conversation;
}

function current() {
  return state.conversations.find((c) => c.id === state.current) ?? newConversation();
}

function persist() {
  const conversation = current();
  conversation.updated = new Date().toISOString();
  save(STORE, state);
}

// ---- the API ------------------------------------------------------------------------

function headers() {
  const result = { "Content-Type": "application/json" };
  const key = ui.apiKey.value.trim();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

class APIError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

/** Turn an error answer (OpenAI's ``{"error": {...}}``) into a sentence a person can act on. */
async function failure(response) {
  let message = "";
  try {
    const body = await response.json();
    message = body?.error?.message ?? "";
  } catch {
    // not JSON: say the status alone
  }
  const retry = response.headers.get("Retry-After");
  let text = `${response.status} ${response.statusText || ""}`.trim();
  if (message) text += `: ${message}`;
  if (response.status === 401) text += " Enter a valid key under Settings → API key.";
  if ((response.status === 429 || response.status === 503) && retry) text += ` Retry after ${retry} s.`;
  return new APIError(response.status, text, retry);
}

async function api(path, body, signal) {
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST", headers: headers(), signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return response;
}

/** Yield the JSON payloads of a server-sent event stream until ``[DONE]``. */
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const payload = JSON.parse(data);
      if (payload.error) throw new APIError(0, `The server stopped: ${payload.error.message}`);
      yield payload;
    }
  }
}

function reameOptions(fields) {
  const options = {};
  for (const [name, value] of Object.entries(fields)) if (value) options[name] = value;
  return Object.keys(options).length ? { reame: options } : {};
}

/** The system message: the system prompt, then the document. Always the same bytes for the same inputs. */
function systemMessage(conversation) {
  const parts = [settings.systemPrompt.trim(), conversation.document.text.trim()].filter(Boolean);
  return parts.length ? [{ role: "system", content: parts.join("\n\n") }] : [];
}

function warmKey(conversation) {
  return JSON.stringify([systemMessage(conversation), settings.model, settings.compress, ui.apiKey.value.trim()]);
}

// ---- the server line and the models ------------------------------------------------

function setServer(text, isError = false) {
  ui.server.textContent = text;
  ui.server.classList.toggle("error", isError);
}

async function loadModels() {
  try {
    const body = await (await api("/v1/models")).json();
    const ids = body.data.map((m) => m.id);
    ui.model.replaceChildren(...ids.map((id) => new Option(id, id)));
    if (!ids.includes(settings.model)) settings.model = ids[0] ?? "";
    ui.model.value = settings.model;
    let workers = "";
    try {
      const ready = await (await fetch("/ready")).json();
      if (ready.workers) workers = ` · ${ready.workers} worker${ready.workers === 1 ? "" : "s"}, cache ${ready.cache}`;
    } catch {
      // /ready is optional here
    }
    setServer(`${settings.model}${workers}`);
  } catch (error) {
    setServer(`Models: ${error.message}`, true);
  }
}

// ---- the document ------------------------------------------------------------------

function formatCount(n) {
  return Number(n).toLocaleString("en");
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

function setDocumentStatus(text, kind = "") {
  ui.documentStatus.textContent = text;
  ui.documentStatus.dataset.state = kind;
}

function showDocumentState() {
  const conversation = current();
  const text = conversation.document.text;
  const name = conversation.document.name;
  ui.documentSummary.textContent = text
    ? `${name ? `${name}, ` : ""}${formatCount(text.length)} characters${warmed?.key === warmKey(conversation) ? ", in the cache" : ""}`
    : "none yet";
  if (busy?.warming) return;
  if (!text) setDocumentStatus("");
  else if (warmed?.key === warmKey(conversation)) setDocumentStatus(warmed.message, "cached");
  else setDocumentStatus("Not read yet: Read the document, or ask and it is read with the first question.", "pending");
}

async function readDocument() {
  const conversation = current();
  if (!conversation.document.text.trim()) {
    setDocumentStatus("Paste or drop a document first.", "error");
    ui.documentText.focus();
    return;
  }
  if (busy) return;
  if (settings.compress === "query") {
    setDocumentStatus("Query compression keeps a different part of the document for each question, "
      + "so it cannot be read ahead: it is read with each question.", "pending");
    return;
  }
  const key = warmKey(conversation);
  const controller = startBusy(true);
  const started = performance.now();
  const estimate = Math.max(1, Math.round(conversation.document.text.length / 4));
  const speed = Number(load(SPEED, 0));
  ui.progress.hidden = false;
  ui.progress.removeAttribute("value"); // indeterminate until there is a speed to go by
  const tick = () => {
    const elapsed = performance.now() - started;
    if (speed > 0) ui.progress.value = Math.min(0.95, elapsed / 1000 / (estimate / speed));
    setDocumentStatus(`Reading about ${formatCount(estimate)} tokens… ${seconds(elapsed)}`, "reading");
  };
  tick();
  const timer = setInterval(tick, 100);
  try {
    const body = {
      model: settings.model || undefined, messages: systemMessage(conversation),
      ...reameOptions({ compress: settings.compress }),
    };
    const answer = await (await api("/v1/cache/warm", body, controller.signal)).json();
    const elapsed = performance.now() - started;
    const tokens = answer.usage.prompt_tokens;
    const reused = answer.usage.prompt_tokens_details.cached_tokens;
    if (tokens > reused && elapsed > 0) save(SPEED, (tokens - reused) / (elapsed / 1000));
    const how = reused * 2 >= tokens ? `${formatCount(reused)} of them were in the cache already` : `read in ${seconds(elapsed)}`;
    const message = answer.cached || reused > 0
      ? `In the cache: ${formatCount(tokens)} tokens, ${how}. Questions reuse it.`
      : `Read: ${formatCount(tokens)} tokens, ${how}. Held in memory, not stored (too short, or the cache is off).`;
    warmed = { key, message };
    ui.drop.dataset.cached = "true";
  } catch (error) {
    warmed = null;
    setDocumentStatus(error.name === "AbortError" ? "Stopped reading." : error.message, "error");
    endBusy(controller);
    clearInterval(timer);
    ui.progress.hidden = true;
    return;
  }
  clearInterval(timer);
  ui.progress.hidden = true;
  endBusy(controller);
  showDocumentState();
}

function setDocument(text, name = "") {
  const conversation = current();
  conversation.document = { name, text };
  if (!conversation.named && name && !conversation.messages.length) conversation.title = name;
  ui.documentText.value = text;
  warmed = null;
  delete ui.drop.dataset.cached;
  persist();
  renderConversations();
  showDocumentState();
}

async function openFile(file) {
  if (!file) return;
  if (file.size > 8 * 1024 * 1024) {
    setDocumentStatus(`${file.name} is larger than 8 MB; paste the part you need.`, "error");
    return;
  }
  setDocument(await file.text(), file.name);
  readDocument();
}

// ---- messages ----------------------------------------------------------------------

function nearBottom() {
  const box = ui.messages;
  return box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
}

function stick(wasNearBottom) {
  if (wasNearBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
}

function statsText(stats) {
  if (!stats) return "";
  const parts = [];
  if (stats.ttftMs !== undefined) parts.push(`first token ${seconds(stats.ttftMs)}`);
  if (stats.tokensPerSecond) parts.push(`${stats.tokensPerSecond.toFixed(1)} tokens/s`);
  if (stats.promptTokens !== undefined) {
    parts.push(`${formatCount(stats.cachedTokens)} of ${formatCount(stats.promptTokens)} prompt tokens cached`);
    parts.push(`${formatCount(stats.savedTokens)} saved by compression`);
  }
  if (stats.stopped) parts.push("stopped");
  return parts.join(" · ");
}

function messageNode(message) {
  const item = document.createElement("li");
  item.className = `message ${message.role}`;
  const who = document.createElement("p");
  who.className = "who";
  who.textContent = message.role === "user" ? "You" : "reame";
  const content = document.createElement("div");
  content.className = "content";
  item.append(who);
  if (message.role === "assistant") {
    // Above the answer, with its room reserved: it fills in while the answer grows below it.
    const stats = document.createElement("p");
    stats.className = "stats";
    item.append(stats);
  }
  item.append(content);
  fillMessage(item, message);
  return item;
}

function fillMessage(item, message) {
  const content = item.querySelector(".content");
  if (message.role === "user") content.textContent = message.content;
  else renderMarkdown(message.content, content);
  if (message.error) {
    const error = document.createElement("p");
    error.className = "error";
    error.setAttribute("role", "alert");
    error.textContent = message.error;
    content.append(error);
  }
  const stats = item.querySelector(".stats");
  if (stats) {
    stats.textContent = statsText(message.stats) || (message.pending ? "waiting for the first token…" : "\u00a0");
    for (const [name, value] of Object.entries(message.stats ?? {})) stats.dataset[name] = String(value);
  }
}

function renderMessages() {
  const conversation = current();
  ui.messages.replaceChildren(...conversation.messages.map(messageNode));
  ui.empty.hidden = conversation.messages.length > 0;
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

/** The messages to send: the document, then every finished turn, then the new question. */
function requestMessages(conversation) {
  const turns = [];
  const messages = conversation.messages;
  for (let i = 0; i < messages.length; i += 1) {
    const message = messages[i];
    if (message.role === "user") {
      const answer = messages[i + 1];
      if (answer && answer.role === "assistant" && (answer.error || answer.pending)) {
        i += 1; // a failed question is not part of the conversation
        continue;
      }
    }
    if (!message.pending) turns.push({ role: message.role, content: message.content });
  }
  return [...systemMessage(conversation), ...turns];
}

async function ask(question) {
  if (busy || !question.trim()) return;
  const conversation = current();
  if (!conversation.named && !conversation.messages.length && !conversation.document.name) {
    conversation.title = question.trim().slice(0, 60);
  }
  conversation.messages.push({ role: "user", content: question });
  const messages = requestMessages(conversation);
  const answer = { role: "assistant", content: "", pending: true, chunks: 0 };
  conversation.messages.push(answer);
  persist();
  renderConversations();
  ui.empty.hidden = true;
  if (matchMedia("(max-width: 760px)").matches) ui.document.open = false; // room for the answers on a phone
  const userNode = messageNode(conversation.messages.at(-2));
  const node = messageNode(answer);
  node.classList.add("streaming");
  ui.messages.append(userNode, node);
  ui.messages.scrollTop = ui.messages.scrollHeight;
  ui.question.value = "";

  const controller = startBusy(false);
  const started = performance.now();
  let first = null;
  let usage = null;
  let frame = 0;
  const paint = () => {
    frame = 0;
    const wasNearBottom = nearBottom();
    fillMessage(node, answer);
    node.dataset.chunks = String(answer.chunks);
    stick(wasNearBottom);
  };
  try {
    const body = {
      model: settings.model || undefined, messages, stream: true, stream_options: { include_usage: true },
      temperature: settings.temperature, max_tokens: settings.maxTokens,
      ...reameOptions({ compress: settings.compress, speculative: settings.speculative }),
    };
    const response = await api("/v1/chat/completions", body, controller.signal);
    for await (const chunk of events(response)) {
      if (chunk.usage) usage = chunk.usage;
      const text = chunk.choices?.[0]?.delta?.content;
      if (text) {
        if (first === null) {
          first = performance.now();
          answer.stats = { ttftMs: Math.round(first - started) };
        }
        answer.content += text;
        answer.chunks += 1;
        if (!frame) frame = requestAnimationFrame(paint);
      }
    }
  } catch (error) {
    if (error.name === "AbortError") answer.stats = { ...answer.stats, stopped: true };
    else answer.error = error instanceof APIError ? error.message : `The request failed: ${error.message}`;
  }
  if (frame) cancelAnimationFrame(frame);
  const ended = performance.now();
  delete answer.pending;
  if (usage) {
    const generated = usage.completion_tokens;
    answer.stats = {
      ...answer.stats,
      promptTokens: usage.prompt_tokens,
      cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
      savedTokens: Math.max(0, (usage.reame?.uncompressed_prompt_tokens ?? usage.prompt_tokens) - usage.prompt_tokens),
      completionTokens: generated,
      tokensPerSecond: first !== null && generated > 1 && ended > first ? (generated - 1) / ((ended - first) / 1000) : 0,
    };
    if (conversation.document.text && warmed?.key !== warmKey(conversation)) {
      const message = `In the cache, with the conversation so far: ${formatCount(usage.prompt_tokens)} tokens.`;
      warmed = { key: warmKey(conversation), message };
    }
  }
  node.classList.remove("streaming");
  node.dataset.chunks = String(answer.chunks);
  node.dataset.state = answer.error ? "error" : answer.stats?.stopped ? "stopped" : "done";
  const wasNearBottom = nearBottom();
  fillMessage(node, answer);
  stick(wasNearBottom);
  persist();
  endBusy(controller);
  showDocumentState();
}

// ---- busy state: one request at a time, Stop aborts it -----------------------------

function startBusy(warming) {
  busy = new AbortController();
  busy.warming = warming;
  ui.send.disabled = true;
  ui.readDocument.disabled = true;
  ui.stop.disabled = false;
  document.body.classList.add("busy");
  return busy;
}

function endBusy(controller) {
  if (busy !== controller) return;
  busy = null;
  ui.send.disabled = false;
  ui.readDocument.disabled = false;
  ui.stop.disabled = true;
  document.body.classList.remove("busy");
}

function stop() {
  // Aborting the fetch closes the connection; the server sees the client go and stops decoding.
  busy?.abort();
}

// ---- the conversation list ---------------------------------------------------------

function download(name, value) {
  const blob = new Blob([JSON.stringify(value, null, 2)], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function fileName(title) {
  return `reame-${title.replace(/[^\w-]+/g, "-").replace(/^-|-$/g, "").slice(0, 40) || "conversation"}.json`;
}

function button(text, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (label) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

function rename(conversation, item) {
  const input = document.createElement("input");
  input.type = "text";
  input.value = conversation.title;
  input.className = "rename";
  input.setAttribute("aria-label", "New name");
  let done = false;
  const finish = (keep) => {
    if (done) return;
    done = true;
    if (keep && input.value.trim()) {
      conversation.title = input.value.trim().slice(0, 120);
      conversation.named = true;
      save(STORE, state);
    }
    renderConversations();
    ui.conversations.querySelector(`[data-id="${conversation.id}"] .open`)?.focus();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); finish(true); }
    if (event.key === "Escape") { event.preventDefault(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
  item.querySelector(".open").replaceWith(input);
  input.focus();
  input.select();
}

function renderConversations() {
  const items = state.conversations.map((conversation) => {
    const item = document.createElement("li");
    item.dataset.id = conversation.id;
    const open = button(conversation.title, null, () => {
      if (busy) return;
      state.current = conversation.id;
      save(STORE, state);
      showConversation();
      closeMenu();
      ui.question.focus();
    });
    open.className = "open";
    if (conversation.id === state.current) open.setAttribute("aria-current", "true");
    const tools = document.createElement("span");
    tools.className = "tools";
    tools.append(
      button("Rename", `Rename “${conversation.title}”`, () => rename(conversation, item)),
      button("Export", `Export “${conversation.title}” as JSON`, () => download(fileName(conversation.title), conversation)),
      button("Delete", `Delete “${conversation.title}”`, () => {
        if (busy && conversation.id === state.current) return;
        if (!confirm(`Delete “${conversation.title}”? This cannot be undone.`)) return;
        state.conversations = state.conversations.filter((c) => c.id !== conversation.id);
        if (state.current === conversation.id) state.current = state.conversations[0]?.id ?? null;
        save(STORE, state);
        showConversation();
        ui.newConversation.focus();
      }),
    );
    item.append(open, tools);
    return item;
  });
  ui.conversations.replaceChildren(...items);
}

function showConversation() {
  const conversation = current();
  ui.documentText.value = conversation.document.text;
  warmed = null;
  delete ui.drop.dataset.cached;
  renderConversations();
  renderMessages();
  showDocumentState();
  ui.document.open = !conversation.messages.length || !conversation.document.text;
}

// ---- settings ----------------------------------------------------------------------

function readSettings() {
  const number = (input, fallback, min, max) => {
    const value = Number(input.value);
    return input.value !== "" && Number.isFinite(value) ? Math.min(max, Math.max(min, value)) : fallback;
  };
  settings.model = ui.model.value;
  settings.temperature = number(ui.temperature, DEFAULTS.temperature, 0, 2);
  settings.maxTokens = Math.round(number(ui.maxTokens, DEFAULTS.maxTokens, 1, 32768));
  settings.compress = ui.compress.value;
  settings.speculative = ui.speculative.value;
  settings.systemPrompt = ui.systemPrompt.value;
  save(SETTINGS, settings);
  showDocumentState();
}

function showSettings() {
  ui.apiKey.value = localStorage.getItem(KEY) ?? "";
  ui.temperature.value = String(settings.temperature);
  ui.maxTokens.value = String(settings.maxTokens);
  ui.compress.value = settings.compress;
  ui.speculative.value = settings.speculative;
  ui.systemPrompt.value = settings.systemPrompt;
}

// ---- the phone menu ----------------------------------------------------------------

function closeMenu() {
  if (ui.menu.getAttribute("aria-expanded") !== "true") return;
  ui.menu.setAttribute("aria-expanded", "false");
  document.body.classList.remove("menu-open");
  ui.menu.focus();
}

// ---- wiring ------------------------------------------------------------------------

function wire() {
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    ui.question.focus();
  });
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    ask(ui.question.value);
  });
  ui.question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey && !event.isComposing) {
      event.preventDefault();
      ask(ui.question.value);
    }
  });
  ui.stop.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    if (document.body.classList.contains("menu-open")) closeMenu();
    else if (busy) stop();
  });

  ui.readDocument.addEventListener("click", readDocument);
  ui.openFile.addEventListener("click", () => ui.file.click());
  ui.file.addEventListener("change", () => {
    openFile(ui.file.files[0]);
    ui.file.value = "";
  });
  ui.documentText.addEventListener("input", () => setDocument(ui.documentText.value, current().document.name));
  ui.documentText.addEventListener("paste", () => setTimeout(() => readDocument(), 0));
  for (const name of ["dragenter", "dragover"]) {
    ui.drop.addEventListener(name, (event) => {
      event.preventDefault();
      ui.drop.classList.add("dragging");
    });
  }
  ui.drop.addEventListener("dragleave", () => ui.drop.classList.remove("dragging"));
  ui.drop.addEventListener("drop", (event) => {
    event.preventDefault();
    ui.drop.classList.remove("dragging");
    const file = event.dataTransfer?.files?.[0];
    if (file) openFile(file);
    else {
      const text = event.dataTransfer?.getData("text/plain");
      if (text) {
        setDocument(text);
        readDocument();
      }
    }
  });

  ui.newConversation.addEventListener("click", () => {
    if (busy) return;
    newConversation();
    save(STORE, state);
    showConversation();
    closeMenu();
    ui.documentText.focus();
  });
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  ui.exportAll.addEventListener("click", () => download("reame-conversations.json", state.conversations));

  ui.apiKey.addEventListener("change", () => {
    const key = ui.apiKey.value.trim();
    if (key) localStorage.setItem(KEY, key);
    else localStorage.removeItem(KEY);
    loadModels();
    showDocumentState();
  });
  for (const input of [ui.model, ui.temperature, ui.maxTokens, ui.compress, ui.speculative, ui.systemPrompt]) {
    input.addEventListener("change", readSettings);
  }

  ui.menu.addEventListener("click", () => {
    const open = ui.menu.getAttribute("aria-expanded") !== "true";
    ui.menu.setAttribute("aria-expanded", String(open));
    document.body.classList.toggle("menu-open", open);
    if (open) ui.closeMenu.focus();
  });
  ui.closeMenu.addEventListener("click", closeMenu);
}

showSettings();
wire();
showConversation();
loadModels();
document.body.dataset.ready = "true";
