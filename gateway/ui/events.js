// Events as google-adk's JSON writes them (camelCase), read defensively, and drawn as cards.

import { h, shortJson } from "./dom.js";

const snake = (name) => name.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

/** `object[name]`, or its snake_case spelling. */
export function field(object, name) {
  if (!object || typeof object !== "object") return undefined;
  return object[name] ?? object[snake(name)];
}

export const parts = (event) => field(field(event, "content"), "parts") ?? [];

/** The event's visible text (thoughts left out). */
export function textOf(event) {
  return parts(event)
    .filter((part) => typeof part.text === "string" && !part.thought)
    .map((part) => part.text)
    .join("");
}

export const functionCalls = (event) =>
  parts(event).map((part) => field(part, "functionCall")).filter(Boolean);

export const functionResponses = (event) =>
  parts(event).map((part) => field(part, "functionResponse")).filter(Boolean);

/** Built-in tools the model's provider ran itself (genai's `toolCall`, e.g. Google Search). */
export const serverToolCalls = (event) =>
  parts(event).map((part) => field(part, "toolCall")).filter(Boolean);

/** What those built-in tools returned (genai's `toolResponse`). */
export const serverToolResponses = (event) =>
  parts(event).map((part) => field(part, "toolResponse")).filter(Boolean);

/** The event's actions with every field present. */
export function actionsOf(event) {
  const actions = field(event, "actions") ?? {};
  return {
    stateDelta: field(actions, "stateDelta") ?? {},
    artifactDelta: field(actions, "artifactDelta") ?? {},
    transferToAgent: field(actions, "transferToAgent") ?? null,
    escalate: Boolean(field(actions, "escalate")),
    skipSummarization: Boolean(field(actions, "skipSummarization")),
  };
}

/**
 * A running tool's progress, wherever the gateway put it: a `toolProgress` field (adk-mesh's
 * Event.tool_progress), or inside `customMetadata`.
 */
export function progressOf(event) {
  const metadata = field(event, "customMetadata") ?? {};
  const progress =
    field(event, "toolProgress") ??
    field(metadata, "toolProgress") ??
    metadata["adk_mesh.tool_progress"] ??
    field(field(metadata, "adkMesh"), "toolProgress");
  if (!progress || typeof progress !== "object") return null;
  const fraction = field(progress, "fraction");
  return {
    toolName: field(progress, "toolName") ?? "tool",
    functionCallId: field(progress, "functionCallId") ?? null,
    message: field(progress, "message") ?? "",
    fraction: typeof fraction === "number" ? fraction : null,
    data: field(progress, "data") ?? null,
  };
}

/**
 * Where an answer comes from, as the gateway writes it: google-adk's `groundingMetadata`
 * (genai's shape: `groundingChunks[].web{uri, title}`, `webSearchQueries`) and the code a
 * provider ran, under `customMetadata.adkMesh.codeExecutions`. `null` when there is none.
 * Everything here is text a model or a web page chose: it is only ever shown as text.
 */
export function groundingOf(event) {
  const grounding = field(event, "groundingMetadata") ?? {};
  const metadata = field(event, "customMetadata") ?? {};
  const list = (value) => (Array.isArray(value) ? value : []);
  const text = (value) => (typeof value === "string" ? value : "");
  const sources = list(field(grounding, "groundingChunks"))
    .map((chunk) => field(chunk, "web") ?? field(chunk, "retrievedContext"))
    .filter((found) => found && typeof found === "object")
    .map((found) => ({ uri: text(found.uri), title: text(found.title) }))
    .filter((source) => source.uri || source.title);
  const queries = list(field(grounding, "webSearchQueries")).filter(
    (query) => typeof query === "string" && query,
  );
  const codeExecutions = list(field(field(metadata, "adkMesh"), "codeExecutions"))
    .filter((run) => run && typeof run === "object")
    .map((run) => ({
      code: text(run.code),
      output: text(run.output),
      language: text(run.language),
      outcome: text(run.outcome),
    }));
  if (!sources.length && !queries.length && !codeExecutions.length) return null;
  return { sources, queries, codeExecutions };
}

/** `uri` as a URL a link may point at (http or https only), else `null`. */
export function safeUrl(uri) {
  let url;
  try {
    url = new URL(uri);
  } catch {
    return null;
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url : null;
}

export const isPartial = (event) => Boolean(field(event, "partial"));
export const invocationOf = (event) => field(event, "invocationId") ?? "";

// Hues far apart, and none red: red marks errors.
export const HUES = [215, 145, 35, 275, 185, 320, 95, 250, 55, 165];

/** A stable hue for a name, so an author keeps its colour everywhere. */
export function hueOf(name) {
  let hash = 0;
  for (const character of String(name)) hash = (hash * 31 + character.charCodeAt(0)) >>> 0;
  return HUES[hash % HUES.length];
}

function timeOf(event) {
  const seconds = field(event, "timestamp");
  if (typeof seconds !== "number") return null;
  const date = new Date(seconds * 1000);
  return h("time", { datetime: date.toISOString(), text: date.toLocaleTimeString() });
}

export function authorBadge(author) {
  return h("span.author", { style: { "--hue": hueOf(author) }, text: author });
}

function mark(symbol, label, className) {
  return h(
    `span.mark.${className}`,
    null,
    h("span", { "aria-hidden": "true", text: symbol }),
    ` ${label}`,
  );
}

function line(className, ...children) {
  return h(`div.line.${className}`, null, ...children);
}

function callLine(call) {
  const name = field(call, "name") ?? "";
  const args = field(call, "args") ?? {};
  const id = field(call, "id") ?? "";
  if (name === "transfer_to_agent") {
    const target = field(args, "agentName") ?? args.agent_name ?? "";
    return line(
      "call transfer",
      mark("⇢", "transfer", "transfer"),
      " to ",
      h("strong", { text: target }),
    );
  }
  return h(
    "div.line.call",
    { dataset: { tool: name, callId: id } },
    mark("→", "call", "call"),
    " ",
    h("code.tool", { text: name }),
    h("span.args", { text: `(${shortJson(args, 160)})` }),
    // Filled in when the trace shows this call was an AgentTool delegation.
    h("span.delegation-slot"),
  );
}

function responseLine(response) {
  const name = field(response, "name") ?? "";
  const body = field(response, "response") ?? {};
  const shown = body.summary ?? body.result ?? body.error ?? body;
  return h(
    "div.line.response",
    { dataset: { tool: name, callId: field(response, "id") ?? "" } },
    mark("←", "result", "result"),
    " ",
    h("code.tool", { text: name }),
    h("span.args", { text: `: ${shortJson(shown, 220)}` }),
  );
}

const SERVER_TOOL_LABELS = { GOOGLE_SEARCH_WEB: "google search", URL_CONTEXT: "url fetch" };

/** What people call a built-in tool the provider names by type (`GOOGLE_SEARCH_WEB`). */
export function serverToolLabel(toolType) {
  if (typeof toolType !== "string" || !toolType) return "built-in tool";
  return SERVER_TOOL_LABELS[toolType] ?? toolType.toLowerCase().replace(/_/g, " ");
}

/** A built-in tool's call: its searches or URLs when that is all it holds, else its args. */
function serverCallLine(call) {
  const toolType = field(call, "toolType") ?? "";
  const args = field(call, "args") ?? {};
  const listed = field(args, "queries") ?? field(args, "urls");
  const items =
    Array.isArray(listed) && Object.keys(args).length === 1 && listed.every((item) => typeof item === "string")
      ? listed
      : null;
  return h(
    "div.line.server-call",
    { dataset: { toolType: String(toolType), callId: field(call, "id") ?? "" } },
    mark("→", "built-in", "call"),
    " ",
    h("code.tool", { text: serverToolLabel(toolType) }),
    " ",
    items
      ? items.flatMap((item, index) => [index ? ", " : "", h("q.query", { text: item })])
      : h("span.args", { text: `(${shortJson(args, 160)})` }),
  );
}

function serverResponseLine(response) {
  const toolType = field(response, "toolType") ?? "";
  return h(
    "div.line.server-response",
    { dataset: { toolType: String(toolType), callId: field(response, "id") ?? "" } },
    mark("←", "built-in", "result"),
    " ",
    h("code.tool", { text: serverToolLabel(toolType) }),
    h("span.args", { text: `: ${shortJson(field(response, "response") ?? {}, 220)}` }),
  );
}

/** A progress bar and message for a running tool. */
export function progressLine(progress) {
  const percent = progress.fraction === null ? null : Math.round(progress.fraction * 100);
  return line(
    "progress",
    mark("⋯", "progress", "progress"),
    " ",
    h("code.tool", { text: progress.toolName }),
    " ",
    h("progress", {
      max: 1,
      value: progress.fraction ?? undefined,
      "aria-label": `${progress.toolName} progress`,
    }),
    percent === null ? null : h("span.percent", { text: `${percent}%` }),
    progress.message ? h("span.message", { text: progress.message }) : null,
  );
}

/** One source: a link (title, then host) for an http(s) URI; plain text for any other. */
function sourceItem(source) {
  const url = safeUrl(source.uri);
  if (!url) {
    return h(
      "li.source.unlinked",
      null,
      h("span.source-title", { text: source.title || source.uri }),
      source.title && source.uri ? h("span.host", { text: source.uri }) : null,
    );
  }
  return h(
    "li.source",
    null,
    h(
      "a",
      { href: url.href, target: "_blank", rel: "noopener noreferrer" },
      h("span.source-title", { text: source.title || url.host }),
    ),
    h("span.host", { text: url.host }),
  );
}

/** Code a provider ran: collapsed, its summary saying the language and how it ended. */
function codeRun(run, index) {
  const summary = [`Code run ${index + 1}`, run.language, run.outcome.toLowerCase()]
    .filter(Boolean)
    .join(" · ");
  return h(
    "details.code-run",
    { dataset: { outcome: run.outcome } },
    h("summary", { text: summary }),
    h("pre.code", null, h("code", { text: run.code })),
    run.output ? h("pre.output", { "aria-label": "output", text: run.output }) : null,
  );
}

/** The answer's sources, the searches behind them and the code the provider ran. */
export function groundingBlock(grounding) {
  return h(
    "section.grounding",
    { "aria-label": "Grounding" },
    grounding.queries.length
      ? h(
          "p.queries",
          null,
          mark("⌕", "searched", "search"),
          " ",
          ...grounding.queries.flatMap((query, index) => [
            index ? ", " : "",
            h("q.query", { text: query }),
          ]),
        )
      : null,
    grounding.sources.length
      ? h(
          "div.sources",
          null,
          h("span.sources-title", { text: "Sources" }),
          h("ol.source-list", null, ...grounding.sources.map(sourceItem)),
        )
      : null,
    ...grounding.codeExecutions.map(codeRun),
  );
}

function deltaLines(actions) {
  const lines = [];
  for (const [key, value] of Object.entries(actions.stateDelta)) {
    lines.push(
      line(
        "state",
        mark("Δ", "state", "state"),
        " ",
        h("code.key", { text: key }),
        " = ",
        h("span.value", { text: shortJson(value, 160) }),
      ),
    );
  }
  for (const [name, version] of Object.entries(actions.artifactDelta)) {
    lines.push(
      line(
        "artifact",
        mark("▤", "artifact", "artifact"),
        " ",
        h("code.key", { text: name }),
        ` saved as version ${version}`,
      ),
    );
  }
  if (actions.transferToAgent) {
    lines.push(
      line(
        "transfer",
        mark("⇢", "transfer", "transfer"),
        " control goes to ",
        h("strong", { text: actions.transferToAgent }),
      ),
    );
  }
  if (actions.escalate) lines.push(line("escalate", mark("⇡", "escalate", "escalate"), " ends the loop"));
  if (actions.skipSummarization) lines.push(line("skip", "summarization skipped"));
  return lines;
}

/** Short words for what an event did, for its accessible name and the tags it shows. */
function tagsOf(event, actions) {
  const tags = [];
  if (isPartial(event)) tags.push("partial");
  if (field(event, "turnComplete")) tags.push("turn complete");
  if (field(event, "interrupted")) tags.push("interrupted");
  if (actions.transferToAgent || functionCalls(event).some((c) => c.name === "transfer_to_agent")) {
    tags.push("transfer");
  }
  if (field(event, "errorCode") || field(event, "errorMessage")) tags.push("error");
  return tags;
}

/** One event as a list item: who, what it said or called, what it changed, its JSON. */
export function eventCard(event) {
  const author = field(event, "author") ?? "?";
  const branch = field(event, "branch");
  const actions = actionsOf(event);
  const progress = progressOf(event);
  const tags = tagsOf(event, actions);
  const text = textOf(event);
  const thoughts = parts(event).filter((part) => part.thought && part.text);
  const errorCode = field(event, "errorCode");
  const errorMessage = field(event, "errorMessage");
  const usage = field(event, "usageMetadata");
  const grounding = groundingOf(event);
  const body = [
    ...thoughts.map((part) => h("p.thought", { text: part.text })),
    text ? h("p.text", { text }) : null,
    grounding ? groundingBlock(grounding) : null,
    ...serverToolCalls(event).map(serverCallLine),
    ...serverToolResponses(event).map(serverResponseLine),
    ...functionCalls(event).map(callLine),
    ...functionResponses(event).map(responseLine),
    progress ? progressLine(progress) : null,
    ...deltaLines(actions),
    errorCode || errorMessage
      ? line("error", mark("⚠", "error", "error"), ` ${[errorCode, errorMessage].filter(Boolean).join(": ")}`)
      : null,
  ];
  const classes = ["event", ...tags.map((tag) => tag.replace(/\s+/g, "-"))];
  if (progress) classes.push("tool-progress");
  if (grounding) classes.push("grounded");
  return h(
    `li.${classes.join(".")}`,
    {
      dataset: {
        eventId: field(event, "id") ?? "",
        author,
        invocation: invocationOf(event),
      },
    },
    h(
      "div.event-head",
      null,
      authorBadge(author),
      branch ? h("span.branch", { title: "branch", text: branch }) : null,
      ...tags.map((tag) => h("span.tag", { text: tag })),
      usage
        ? h("span.usage", {
            text: `${field(usage, "promptTokenCount") ?? 0} → ${field(usage, "candidatesTokenCount") ?? 0} tokens`,
          })
        : null,
      timeOf(event),
    ),
    h("div.event-body", null, ...body),
    h(
      "details.raw",
      null,
      h("summary", { text: "JSON" }),
      h("pre", { text: JSON.stringify(event, null, 2) }),
    ),
  );
}

/**
 * Mark the calls the trace shows were AgentTool delegations (control returns to the caller)
 * or transfers, by tool call id (else by tool name).
 * @param {HTMLElement} container
 * @param {Array<{mode: string, targetAgent?: string, tool?: string, toolCallId?: string, service?: string}>} controlFlow
 */
export function markControlFlow(container, controlFlow) {
  for (const move of controlFlow ?? []) {
    if (move.mode !== "return_to_caller") continue;
    const calls = [...container.querySelectorAll("div.line.call[data-tool]")].filter((element) =>
      move.toolCallId ? element.dataset.callId === move.toolCallId : element.dataset.tool === move.tool,
    );
    for (const call of calls) {
      const slot = call.querySelector(".delegation-slot");
      if (!slot || slot.childElementCount) continue;
      call.classList.add("delegation");
      call.closest("li.event")?.classList.add("delegation");
      slot.append(
        " ",
        mark("⇉", `AgentTool delegation to ${move.targetAgent ?? move.tool}`, "delegation"),
        move.service ? h("span.via", { text: ` (from ${move.service})` }) : "",
      );
    }
  }
}
