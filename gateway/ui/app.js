// The adk-mesh web UI: pick an app, start or resume a session, chat with streaming partials,
// inspect every event, the session's state and artifacts, and each invocation's trace.

import { Api, ApiError, apiBase } from "./api.js";
import { formatMs, h, replace, shortJson } from "./dom.js";
import {
  actionsOf,
  authorBadge,
  eventCard,
  field,
  functionResponses,
  invocationOf,
  isPartial,
  markControlFlow,
  progressLine,
  progressOf,
  textOf,
} from "./events.js";
import { renderTrace } from "./waterfall.js";

const $ = (id) => document.getElementById(id);

const elements = {
  app: $("app"),
  user: $("user"),
  session: $("session"),
  newSession: $("new-session"),
  token: $("token"),
  credentialKind: $("credential-kind"),
  transcript: $("transcript"),
  showPartials: $("show-partials"),
  composer: $("composer"),
  message: $("message"),
  streaming: $("streaming"),
  send: $("send"),
  stop: $("stop"),
  status: $("status"),
  trace: $("trace"),
  traceInvocation: $("trace-invocation"),
  refreshTrace: $("refresh-trace"),
  state: $("state"),
  artifacts: $("artifacts"),
  artifactView: $("artifact-view"),
};

const ui = {
  /** @type {AbortController|null} the running turn */
  running: null,
  session: null,
  /** keys the latest invocation changed, highlighted in the state panel */
  changedKeys: new Set(),
  traceInvocation: "",
  traceTimer: 0,
  traceGeneration: 0,
};

const api = new Api(apiBase(), () => ({
  kind: elements.credentialKind.value,
  secret: elements.token.value.trim(),
}));

const current = () => ({
  app: elements.app.value,
  user: elements.user.value.trim() || "user",
  sessionId: elements.session.value,
});

function say(text, kind = "info") {
  elements.status.textContent = text;
  elements.status.dataset.kind = kind;
}

function failure(error) {
  if (error instanceof ApiError) return error.message;
  return error?.message ?? String(error);
}

// -- where we are: the URL's hash keeps app, user and session ---------------------------------

function readHash() {
  return new URLSearchParams(window.location.hash.slice(1));
}

function writeHash() {
  const { app, user, sessionId } = current();
  const params = new URLSearchParams();
  if (app) params.set("app", app);
  params.set("user", user);
  if (sessionId) params.set("session", sessionId);
  history.replaceState(null, "", `#${params}`);
  localStorage.setItem("adk-mesh.user", user);
}

// -- apps and sessions ----------------------------------------------------------------------

async function loadApps(wanted) {
  const apps = await api.listApps();
  replace(elements.app, ...apps.map((name) => h("option", { value: name, text: name })));
  if (!apps.length) {
    say("The gateway serves no app.", "error");
    return;
  }
  elements.app.value = apps.includes(wanted) ? wanted : apps[0];
}

function sessionLabel(session) {
  const seconds = field(session, "lastUpdateTime");
  const when = typeof seconds === "number" && seconds > 0 ? new Date(seconds * 1000).toLocaleString() : "";
  return when ? `${session.id} · ${when}` : session.id;
}

async function loadSessions(wanted) {
  const { app, user } = current();
  if (!app) return;
  let sessions = [];
  try {
    sessions = await api.listSessions(app, user);
  } catch (error) {
    say(`Sessions could not be listed: ${failure(error)}`, "error");
  }
  sessions.sort((a, b) => (field(b, "lastUpdateTime") ?? 0) - (field(a, "lastUpdateTime") ?? 0));
  replace(
    elements.session,
    h("option", { value: "", text: "— new session —" }),
    ...sessions.map((session) => h("option", { value: session.id, text: sessionLabel(session) })),
  );
  elements.session.value = sessions.some((s) => s.id === wanted) ? wanted : "";
  await openSession(elements.session.value);
}

/**
 * Leave the session shown: a turn still streaming into it is stopped (as Stop does: the
 * gateway cancels the run), for its events belong to the page being replaced — left running,
 * they would change the next session's state panel and trace; and its open artifact closes.
 */
function leaveSession() {
  ui.running?.abort();
  closeArtifact();
}

async function openSession(sessionId) {
  leaveSession();
  writeHash();
  clearTrace();
  ui.session = null;
  ui.changedKeys = new Set();
  if (!sessionId) {
    replace(elements.transcript, h("p.empty", { text: "A new session starts with your first message." }));
    replace(elements.state, h("p.empty", { text: "No session yet." }));
    replace(elements.artifacts, h("p.empty", { text: "No session yet." }));
    return;
  }
  const { app, user } = current();
  try {
    ui.session = await api.getSession(app, user, sessionId);
  } catch (error) {
    say(`The session could not be loaded: ${failure(error)}`, "error");
    return;
  }
  renderHistory(ui.session.events ?? []);
  renderState();
  await loadArtifacts();
  const turns = elements.transcript.querySelectorAll("article.turn[data-invocation]");
  const last = turns[turns.length - 1];
  if (last) showTrace(last.dataset.invocation);
  say(`Session ${sessionId}: ${(ui.session.events ?? []).length} events.`);
}

async function newSession() {
  const { app, user } = current();
  const session = await api.createSession(app, user);
  elements.session.append(h("option", { value: session.id, text: sessionLabel(session) }));
  elements.session.value = session.id;
  ui.session = session;
  writeHash();
  closeArtifact();
  replace(elements.transcript);
  renderState();
  replace(elements.artifacts, h("p.empty", { text: "No artifacts yet." }));
  clearTrace();
  return session.id;
}

// -- the transcript: one article per invocation ---------------------------------------------

function turnElement(userText, invocationId = "") {
  const events = h("ol.events", { "aria-label": "Events" });
  const live = h("div.live");
  const footer = h("footer.turn-foot");
  const article = h(
    "article.turn",
    { dataset: { invocation: invocationId }, "aria-label": userText ? `Turn: ${userText}` : "Turn" },
    userText
      ? h("div.user-message", null, authorBadge("user"), h("p.text", { text: userText }))
      : null,
    events,
    live,
    footer,
  );
  return { article, events, live, footer };
}

function setInvocation(turn, invocationId) {
  if (!invocationId || turn.article.dataset.invocation) return;
  turn.article.dataset.invocation = invocationId;
}

function finishTurn(turn, count, elapsedMs) {
  const invocationId = turn.article.dataset.invocation;
  replace(
    turn.footer,
    h("span.muted", {
      text: [
        invocationId ? `invocation ${invocationId}` : "no invocation",
        `${count} event${count === 1 ? "" : "s"}`,
        elapsedMs === undefined ? null : formatMs(elapsedMs),
      ]
        .filter(Boolean)
        .join(" · "),
    }),
    invocationId
      ? h("button.trace-button", {
          type: "button",
          text: "Trace",
          "aria-label": `Show the trace of invocation ${invocationId}`,
          onclick: () => showTrace(invocationId, { focus: true }),
        })
      : null,
  );
}

function renderHistory(events) {
  replace(elements.transcript);
  const turns = new Map();
  for (const event of events) {
    const invocationId = invocationOf(event) || "(none)";
    let turn = turns.get(invocationId);
    if (!turn) {
      const userText = event.author === "user" ? textOf(event) : "";
      turn = { ...turnElement(userText, invocationOf(event)), count: 0 };
      turns.set(invocationId, turn);
      elements.transcript.append(turn.article);
      if (event.author === "user") continue;
    }
    turn.events.append(eventCard(event));
    turn.count += 1;
  }
  for (const turn of turns.values()) finishTurn(turn, turn.count);
  if (!events.length) {
    elements.transcript.append(h("p.empty", { text: "No events yet: write the first message." }));
  }
  elements.transcript.scrollTop = elements.transcript.scrollHeight;
}

/** The streaming text of one author, shown until its final event arrives. */
function liveBubble(turn, author) {
  let bubble = turn.live.querySelector(`.bubble[data-author="${CSS.escape(author)}"]`);
  if (!bubble) {
    bubble = h(
      "div.bubble",
      { dataset: { author, partials: "0" } },
      h("div.event-head", null, authorBadge(author), h("span.tag", { text: "streaming" })),
      h("p.text"),
      h("span.muted.partials"),
    );
    turn.live.append(bubble);
  }
  return bubble;
}

function progressRow(turn, progress) {
  const key = progress.functionCallId ?? progress.toolName;
  const row = progressLine(progress);
  row.dataset.key = key;
  const existing = [...turn.live.querySelectorAll(".line.progress")].find((e) => e.dataset.key === key);
  if (existing) existing.replaceWith(row);
  else turn.live.append(row);
}

function applyEvent(turn, event) {
  const author = field(event, "author") ?? "?";
  const partial = isPartial(event);
  const card = eventCard(event);
  turn.events.append(card);
  if (partial) {
    const progress = progressOf(event);
    if (progress) {
      progressRow(turn, progress);
      return;
    }
    const text = textOf(event);
    if (text) {
      const bubble = liveBubble(turn, author);
      bubble.querySelector("p.text").append(text);
      const partials = Number(bubble.dataset.partials) + 1;
      bubble.dataset.partials = String(partials);
      bubble.querySelector(".partials").textContent = `${partials} partial event${partials === 1 ? "" : "s"}`;
    }
    return;
  }
  // The final event replaces what streamed before it.
  turn.live.querySelector(`.bubble[data-author="${CSS.escape(author)}"]`)?.remove();
  for (const response of functionResponses(event)) {
    const key = field(response, "id") ?? field(response, "name");
    [...turn.live.querySelectorAll(".line.progress")].find((e) => e.dataset.key === key)?.remove();
  }
  const { stateDelta } = actionsOf(event);
  if (ui.session && Object.keys(stateDelta).length) {
    ui.session.state = { ...(ui.session.state ?? {}), ...stateDelta };
    for (const key of Object.keys(stateDelta)) ui.changedKeys.add(key);
    renderState();
  }
}

function errorLine(turn, message) {
  turn.events.append(
    h(
      "li.event.error",
      { role: "alert" },
      h("div.line.error", null, h("span.mark.error", null, h("span", { "aria-hidden": "true", text: "⚠" }), " error"), ` ${message}`),
    ),
  );
}

/** Whether the transcript shows its end: only then do new events scroll it, so a person who
 * scrolled up to read stays where they are while a long answer streams. */
function atBottom() {
  const transcript = elements.transcript;
  return transcript.scrollHeight - transcript.clientHeight - transcript.scrollTop < 32;
}

/** A turn's live area once its stream ended: tool progress goes; the text streamed before a
 * Stop or a failure stays (its final event never came, and it is what the person read),
 * marked as such. */
function endLive(turn) {
  const state = turn.article.dataset.state;
  if (state === "done") {
    turn.live.replaceChildren();
    return;
  }
  for (const row of turn.live.querySelectorAll(".line.progress")) row.remove();
  for (const tag of turn.live.querySelectorAll(".bubble .tag")) tag.textContent = state;
}

async function send(text) {
  if (ui.running) return;
  let { sessionId } = current();
  const { app, user } = current();
  if (!app) {
    say("Choose an app first.", "error");
    return;
  }
  const controller = new AbortController();
  ui.running = controller;
  elements.send.disabled = true;
  elements.stop.hidden = false;
  elements.transcript.querySelector(":scope > p.empty")?.remove();
  const turn = turnElement(text);
  turn.article.dataset.state = "running";
  let count = 0;
  /** The gateway's error frame, when the run ended with one (a failure after it started). */
  let failed = "";
  const started = performance.now();
  // Whether this turn's session is still the one shown (another one opened stops the turn).
  const shown = () => current().sessionId === sessionId;
  try {
    if (!sessionId) sessionId = await newSession();
    elements.transcript.append(turn.article);
    elements.transcript.scrollTop = elements.transcript.scrollHeight;
    ui.changedKeys = new Set();
    say("Running…");
    for await (const frame of api.runSse({
      app,
      user,
      sessionId,
      text,
      streaming: elements.streaming.checked,
      signal: controller.signal,
    })) {
      // Frames already read when the turn was stopped are not drawn.
      controller.signal.throwIfAborted();
      const follow = atBottom();
      if (frame && typeof frame.error === "string" && !frame.author) {
        errorLine(turn, frame.error);
        failed = frame.error;
        continue;
      }
      setInvocation(turn, invocationOf(frame));
      if (field(frame, "author") === "user") continue; // the message shown at the top
      applyEvent(turn, frame);
      if (!isPartial(frame)) count += 1;
      if (follow) elements.transcript.scrollTop = elements.transcript.scrollHeight;
    }
    if (failed) {
      say(`The run failed: ${failed}`, "error");
      turn.article.dataset.state = "failed";
    } else {
      say(`Done: ${count} event${count === 1 ? "" : "s"} in ${formatMs(performance.now() - started)}.`);
      turn.article.dataset.state = "done";
    }
  } catch (error) {
    if (controller.signal.aborted) {
      errorLine(turn, "stopped: the run was cancelled");
      if (shown()) say("Stopped.");
      turn.article.dataset.state = "stopped";
    } else {
      turn.article.dataset.state = "failed";
      if (!turn.article.isConnected && shown()) elements.transcript.append(turn.article);
      errorLine(turn, failure(error));
      say(`The run failed: ${failure(error)}`, "error");
    }
  } finally {
    ui.running = null;
    elements.send.disabled = false;
    elements.stop.hidden = true;
    endLive(turn);
    finishTurn(turn, count, performance.now() - started);
  }
  if (!shown()) return;
  await refreshSession();
  const invocationId = turn.article.dataset.invocation;
  if (invocationId) showTrace(invocationId);
}

async function refreshSession() {
  const { app, user, sessionId } = current();
  if (!sessionId) return;
  try {
    ui.session = await api.getSession(app, user, sessionId);
  } catch (error) {
    say(`The session could not be reloaded: ${failure(error)}`, "error");
    return;
  }
  renderState();
  await loadArtifacts();
}

// -- session state --------------------------------------------------------------------------

function renderState() {
  const state = ui.session?.state ?? {};
  const keys = Object.keys(state).sort();
  if (!keys.length) {
    replace(elements.state, h("p.empty", { text: "The state is empty." }));
    return;
  }
  replace(
    elements.state,
    h(
      "table.state-table",
      null,
      h("caption.visually-hidden", { text: "Session state" }),
      h("thead", null, h("tr", null, h("th", { scope: "col", text: "Key" }), h("th", { scope: "col", text: "Value" }))),
      h(
        "tbody",
        null,
        ...keys.map((key) => {
          const changed = ui.changedKeys.has(key);
          const scope = /^(app|user|temp):/.exec(key)?.[1];
          return h(
            "tr",
            { class: changed ? "changed" : "", dataset: { key } },
            h(
              "th",
              { scope: "row" },
              h("code", { text: key }),
              scope ? h("span.tag", { text: scope }) : null,
              changed ? h("span.tag.changed", { text: "changed" }) : null,
            ),
            h("td", null, h("span.value", { text: shortJson(state[key], 400) })),
          );
        }),
      ),
    ),
  );
}

// -- artifacts ------------------------------------------------------------------------------

async function loadArtifacts() {
  const { app, user, sessionId } = current();
  if (!sessionId) return;
  let names = [];
  try {
    names = await api.listArtifacts(app, user, sessionId);
  } catch (error) {
    replace(elements.artifacts, h("p.empty", { text: `Artifacts could not be listed: ${failure(error)}` }));
    return;
  }
  if (!names.length) {
    replace(elements.artifacts, h("p.empty", { text: "No artifacts yet." }));
    return;
  }
  const versions = await Promise.all(
    names.map((name) => api.listArtifactVersions(app, user, sessionId, name).catch(() => [])),
  );
  replace(
    elements.artifacts,
    h(
      "ul.artifact-list",
      null,
      ...names.map((name, index) => {
        const list = [...versions[index]].sort((a, b) => a - b);
        const latest = list.length ? list[list.length - 1] : undefined;
        return h(
          "li",
          { dataset: { artifact: name } },
          h("button", {
            type: "button",
            text: name,
            "aria-label": `Open artifact ${name}`,
            onclick: () => openArtifact(name, latest),
          }),
          h("span.muted", { text: list.length ? ` versions ${list.join(", ")}` : "" }),
        );
      }),
    ),
  );
}

/** Standard base64 (the url-safe alphabet already mapped) as bytes. */
function decodeBase64(data) {
  const binary = atob(data);
  return Uint8Array.from(binary, (character) => character.charCodeAt(0));
}

/** The object URL of the artifact shown, released when it is closed or replaced. */
let artifactUrl = "";

function closeArtifact() {
  if (artifactUrl) URL.revokeObjectURL(artifactUrl);
  artifactUrl = "";
  elements.artifactView.replaceChildren();
  elements.artifactView.hidden = true;
}

async function openArtifact(name, version) {
  const { app, user, sessionId } = current();
  const view = elements.artifactView;
  let part;
  try {
    part = await api.loadArtifact(app, user, sessionId, name, version);
  } catch (error) {
    if (current().sessionId !== sessionId) return;
    closeArtifact();
    view.hidden = false;
    replace(view, h("p.empty", { text: `${name} could not be loaded: ${failure(error)}` }));
    return;
  }
  if (current().sessionId !== sessionId) return; // another session was opened meanwhile
  closeArtifact();
  view.hidden = false;
  const heading = h("h3", { text: version === undefined ? name : `${name} · version ${version}` });
  const inline = field(part, "inlineData");
  if (typeof part?.text === "string") {
    replace(view, heading, h("pre.artifact-text", { text: part.text }));
  } else if (inline && typeof inline.data === "string") {
    const mime = String(field(inline, "mimeType") ?? "application/octet-stream");
    const base64 = inline.data.replace(/-/g, "+").replace(/_/g, "/");
    const bytes = decodeBase64(base64);
    // An artifact is what a model or a tool wrote: HTML or SVG under a blob: URL of this
    // origin would run its scripts here, next to the tab's credentials, when opened in a tab
    // ("Open link/image in new tab"). So the download is untyped bytes, and an image is shown
    // from a data: URL (an opaque origin, and never opened as a page).
    artifactUrl = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
    const preview = /^image\/[\w.+-]+$/.test(mime)
      ? h("img", { src: `data:${mime};base64,${base64}`, alt: name })
      : mime.startsWith("text/") || mime.includes("json")
        ? h("pre.artifact-text", { text: new TextDecoder().decode(bytes) })
        : null;
    replace(
      view,
      heading,
      preview,
      h("a", { href: artifactUrl, download: name, text: `Download (${mime}, ${bytes.length} bytes)` }),
    );
  } else {
    replace(view, heading, h("pre.artifact-text", { text: JSON.stringify(part, null, 2) }));
  }
}

// -- traces ---------------------------------------------------------------------------------

function clearTrace() {
  window.clearTimeout(ui.traceTimer);
  ui.traceGeneration += 1;
  ui.traceInvocation = "";
  elements.traceInvocation.textContent = "";
  elements.refreshTrace.disabled = true;
  delete elements.trace.dataset.complete;
  delete elements.trace.dataset.invocation;
  replace(elements.trace, h("p.empty", { text: "Each invocation's spans across the services appear here once it ran." }));
}

/**
 * Show an invocation's trace. Services export a span when it ends, the root's last: while
 * spans are missing (none yet, or children whose parent is not exported), ask again a few
 * times, backing off.
 */
async function showTrace(invocationId, { focus = false, attempt = 0 } = {}) {
  window.clearTimeout(ui.traceTimer);
  if (attempt === 0) ui.traceGeneration += 1;
  const generation = ui.traceGeneration;
  ui.traceInvocation = invocationId;
  elements.traceInvocation.textContent = invocationId;
  elements.refreshTrace.disabled = false;
  for (const article of elements.transcript.querySelectorAll("article.turn")) {
    article.classList.toggle("selected", article.dataset.invocation === invocationId);
  }
  if (attempt === 0) {
    elements.trace.setAttribute("aria-busy", "true");
    delete elements.trace.dataset.complete;
    delete elements.trace.dataset.invocation;
  }
  let data;
  try {
    data = await api.trace(invocationId);
  } catch (error) {
    if (generation !== ui.traceGeneration) return;
    elements.trace.removeAttribute("aria-busy");
    replace(elements.trace, h("p.empty", { text: `The trace could not be read: ${failure(error)}` }));
    return;
  }
  if (generation !== ui.traceGeneration) return;
  const { spans, orphans } = renderTrace(elements.trace, data);
  elements.trace.dataset.invocation = invocationId;
  markControlFlow(elements.transcript, data.controlFlow);
  const incomplete = data.source !== "none" && (spans === 0 || orphans > 0);
  if (incomplete && attempt < 8) {
    elements.trace.dataset.complete = "false";
    ui.traceTimer = window.setTimeout(
      () => showTrace(invocationId, { attempt: attempt + 1 }),
      Math.min(250 * 2 ** attempt, 2000),
    );
  } else {
    elements.trace.dataset.complete = String(!incomplete);
    elements.trace.removeAttribute("aria-busy");
  }
  if (focus) elements.trace.closest("section")?.querySelector("h2")?.scrollIntoView({ block: "nearest" });
}

// -- wiring ---------------------------------------------------------------------------------

elements.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = elements.message.value.trim();
  if (!text || ui.running) return;
  elements.message.value = "";
  send(text);
});

elements.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    elements.composer.requestSubmit();
  }
});

elements.stop.addEventListener("click", () => ui.running?.abort());
elements.app.addEventListener("change", () => loadSessions(""));
elements.user.addEventListener("change", () => loadSessions(""));
elements.session.addEventListener("change", () => openSession(elements.session.value));
elements.newSession.addEventListener("click", async () => {
  leaveSession();
  try {
    const id = await newSession();
    say(`New session ${id}.`);
    elements.message.focus();
  } catch (error) {
    say(`No session was created: ${failure(error)}`, "error");
  }
});
elements.refreshTrace.addEventListener("click", () => {
  if (ui.traceInvocation) showTrace(ui.traceInvocation);
});
elements.showPartials.addEventListener("change", () => {
  elements.transcript.classList.toggle("show-partials", elements.showPartials.checked);
});
elements.token.value = sessionStorage.getItem("adk-mesh.token") ?? "";
elements.credentialKind.value = sessionStorage.getItem("adk-mesh.credential-kind") ?? "bearer";
for (const input of [elements.token, elements.credentialKind]) {
  input.addEventListener("change", async () => {
    sessionStorage.setItem("adk-mesh.token", elements.token.value.trim());
    sessionStorage.setItem("adk-mesh.credential-kind", elements.credentialKind.value);
    // Credentials may open what was refused: the apps, then the sessions, again.
    try {
      await loadApps(elements.app.value);
      await loadSessions(current().sessionId);
      say("Credentials saved for this tab.");
    } catch (error) {
      say(`The gateway refused: ${failure(error)}`, "error");
    }
  });
}

// A link to another session opened in this tab changes only the fragment: no reload.
window.addEventListener("hashchange", () => {
  const hash = readHash();
  const now = current();
  const wanted = {
    app: hash.get("app") ?? now.app,
    user: hash.get("user") ?? now.user,
    sessionId: hash.get("session") ?? "",
  };
  if (wanted.app === now.app && wanted.user === now.user && wanted.sessionId === now.sessionId) return;
  if ([...elements.app.options].some((option) => option.value === wanted.app)) elements.app.value = wanted.app;
  elements.user.value = wanted.user;
  loadSessions(wanted.sessionId);
});

async function start() {
  const hash = readHash();
  elements.user.value = hash.get("user") ?? localStorage.getItem("adk-mesh.user") ?? "user";
  try {
    await loadApps(hash.get("app"));
    await loadSessions(hash.get("session") ?? "");
    document.body.dataset.ready = "true";
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      say(`The gateway asks for credentials (under “Credentials”): ${failure(error)}`, "error");
      document.querySelector("details.token")?.setAttribute("open", "");
    } else {
      say(`The gateway could not be reached: ${failure(error)}`, "error");
    }
    document.body.dataset.ready = "error";
  }
}

start();
