// A Node.js client for an adk-mesh agent service: one root Run, its events streamed as they come
// (a running tool's progress on a line of its own).
//
//   npm ci            # the versions of package-lock.json
//   node client.mjs 127.0.0.1:50051 "What time is it in Tokyo?" [--user ada] [--session ID]
//
// With ADK_MESH_TLS_CA set (the CA that signed the service's certificate; `adk-mesh up` prints
// it, e.g. .adk-mesh/pki/ca.pem) it connects with TLS, as the Python client does; with
// ADK_MESH_TLS_CERT and ADK_MESH_TLS_KEY as well, with a client certificate (mutual TLS).
// Without ADK_MESH_TLS_CA it connects in plaintext (a service on loopback with TLS off).
//
// It loads the contract straight from protos/ (no code generation), so any language with gRPC
// can do the same with its own tooling.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoRoot = path.resolve(here, "../../protos");

function parseArgs(argv) {
  const options = { user: "user", session: "" };
  const positional = [];
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--user") options.user = argv[++i];
    else if (argv[i] === "--session") options.session = argv[++i];
    else positional.push(argv[i]);
  }
  if (positional.length !== 2) {
    console.error('usage: node client.mjs HOST:PORT "message" [--user U] [--session S]');
    process.exit(2);
  }
  return { target: positional[0], message: positional[1], ...options };
}

// google.protobuf.Struct / Value arrive as their message shape (with camelCase field names,
// since the well-known types ship precompiled); turn them back into JSON.
function valueToJson(value) {
  if (!value) return null;
  switch (value.kind) {
    case "stringValue": return value.stringValue;
    case "numberValue": return value.numberValue;
    case "boolValue": return value.boolValue;
    case "structValue": return structToJson(value.structValue);
    case "listValue": return (value.listValue.values ?? []).map(valueToJson);
    default: return null;
  }
}

function structToJson(struct) {
  const out = {};
  // Map order is not defined on the wire: sort keys so the output is stable.
  const entries = Object.entries(struct?.fields ?? {}).sort(([a], [b]) => a.localeCompare(b));
  for (const [key, value] of entries) out[key] = valueToJson(value);
  return out;
}

// Keys sorted at every level, as structToJson gives them.
function sortedKeys(value) {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const key of Object.keys(value).sort((a, b) => a.localeCompare(b))) {
    out[key] = sortedKeys(value[key]);
  }
  return out;
}

// A JSON value travels as a Struct/Value, or -- when it nests deeper than a Struct can carry --
// as JSON text in the `*_json` field next to it (the rule is in protos/adk_mesh/v1/content.proto).
// Read the text when it is there, the Struct otherwise.
function jsonObject(struct, jsonText) {
  return jsonText ? sortedKeys(JSON.parse(jsonText)) : structToJson(struct);
}

function stateDelta(actions) {
  const delta = {};
  for (const [key, value] of Object.entries(actions?.state_delta ?? {})) {
    delta[key] = valueToJson(value);
  }
  for (const [key, text] of Object.entries(actions?.state_delta_json ?? {})) {
    delta[key] = sortedKeys(JSON.parse(text));
  }
  return delta;
}

// What people call the built-in tools a provider names by type (ServerToolCall.tool_type).
const serverToolLabels = { GOOGLE_SEARCH_WEB: "google search", URL_CONTEXT: "url fetch" };

// A built-in tool the provider ran itself (a Google Search during the model call): one short
// line, its queries or URLs when it has them. What it returned is the provider's context, not
// for people: the answer's text says what it found.
function describeServerToolCall(author, call) {
  const type = call.tool_type ?? "";
  const label = serverToolLabels[type] ?? (type.toLowerCase().replaceAll("_", " ") || "server tool");
  const args = jsonObject(call.args, call.args_json);
  const listed = args.queries ?? args.urls;
  const summary = Array.isArray(listed) && Object.keys(args).length === 1
    ? listed.map((item) => JSON.stringify(item)).join(" ")
    : Object.keys(args).length ? JSON.stringify(args) : "";
  return `[${author}] [${label}] ${summary}`.trimEnd();
}

// One line per part, or null for a part shown to no one.
function describePart(author, part) {
  if (part.text !== undefined && part.text !== null) {
    // A thought is the model's reasoning, not its answer.
    return `[${author}] ${part.thought ? "(thought) " : ""}${part.text}`;
  }
  if (part.function_call) {
    const call = part.function_call;
    return `[${author}] -> ${call.name}(${JSON.stringify(jsonObject(call.args, call.args_json))})`;
  }
  if (part.function_response) {
    const reply = part.function_response;
    return `[${author}] <- ${reply.name}: ${JSON.stringify(jsonObject(reply.response, reply.response_json))}`;
  }
  if (part.inline_data) return `[${author}] <${part.inline_data.mime_type} data>`;
  if (part.file_data) return `[${author}] <${part.file_data.file_uri}>`;
  if (part.server_tool_call) return describeServerToolCall(author, part.server_tool_call);
  if (part.server_tool_response) return null;
  return `[${author}] <empty part>`;
}

// A running tool's progress (Event.tool_progress): its own line, never mixed with model text.
function describeProgress(author, progress) {
  const fraction = typeof progress.fraction === "number" ? ` (${Math.round(progress.fraction * 100)}%)` : "";
  return `[${author}] ${progress.tool_name} … ${progress.message}${fraction}`;
}

const args = parseArgs(process.argv.slice(2));
const definition = protoLoader.loadSync("adk_mesh/v1/agent.proto", {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
});
const { adk_mesh } = grpc.loadPackageDefinition(definition);

function credentials() {
  const { ADK_MESH_TLS_CA: ca, ADK_MESH_TLS_CERT: cert, ADK_MESH_TLS_KEY: key } = process.env;
  if (!ca) return grpc.credentials.createInsecure();
  const read = (file) => {
    try {
      return fs.readFileSync(file);
    } catch (error) {
      console.error(`error: cannot read ${file}: ${error.message}`);
      process.exit(2);
    }
  };
  if (Boolean(cert) !== Boolean(key)) {
    console.error("error: ADK_MESH_TLS_CERT and ADK_MESH_TLS_KEY go together");
    process.exit(2);
  }
  return grpc.credentials.createSsl(read(ca), key ? read(key) : null, cert ? read(cert) : null);
}

const client = new adk_mesh.v1.AgentService(args.target, credentials());

// `| head`: once the reader is gone, stop quietly (the call ends with the process), with the
// status of a Unix tool killed by SIGPIPE, as `adk-mesh run` does.
process.stdout.on("error", (error) => {
  if (error.code === "EPIPE") process.exit(141);
  throw error;
});

const call = client.Run({
  root: {
    user_id: args.user,
    session_id: args.session,
    new_message: { role: "user", parts: [{ text: args.message }] },
  },
});
function printEvent(event) {
  const author = event.author;
  if (event.tool_progress) {
    console.log(describeProgress(author, event.tool_progress));
    return;
  }
  const response = event.llm_response ?? {};
  if (response.partial) return;
  const parts = response.content?.parts ?? [];
  for (const part of parts) {
    const line = describePart(author, part);
    if (line !== null) console.log(line);
  }
  // A call of a long-running tool stays open when the turn ends; a later turn answers it
  // with a function response carrying this id.
  const waiting = new Set(event.long_running_tool_ids ?? []);
  for (const part of parts) {
    const id = part.function_call?.id;
    if (id !== undefined && waiting.has(id)) {
      console.log(`[${author}] … waiting for the answer to ${part.function_call.name} (long-running call ${id})`);
    }
  }
  // The turn ended on an error the model or the runner recorded (a safety block, an
  // interrupted turn): an event, not a failed call.
  if (response.error_code || response.error_message) {
    console.log(`[${author}] error: ${response.error_code || "error"}: ${response.error_message ?? ""}`.replace(/: $/, ""));
  }
  const actions = event.actions ?? {};
  for (const [key, value] of Object.entries(stateDelta(actions))) {
    console.log(`[${author}] state: ${key}=${JSON.stringify(value)}`);
  }
  for (const [name, version] of Object.entries(actions.artifact_delta ?? {})) {
    console.log(`[${author}] artifact: ${name} v${version}`);
  }
  if (actions.transfer_to_agent) console.log(`[${author}] transfer to ${actions.transfer_to_agent}`);
  if (actions.escalate) console.log(`[${author}] escalate`);
  console.log(`  (invocation ${event.invocation_id})`);
}

// A session the user named (--session) is known; one a response named was printed.
let sessionNamed = Boolean(args.session);
call.on("data", (response) => {
  if (response.session_id) {
    console.log(`session ${response.session_id}`);
    sessionNamed = true;
  }
  // One event per response, or a batch in `events` (a client that sets
  // accept_event_batches): read both.
  for (const event of response.event ? [response.event] : response.events ?? []) printEvent(event);
});
call.on("error", (error) => {
  // A turn that failed before its first response still names the session it used (one it
  // created holds the user's message) in the trailer adk-mesh-session-id.
  const [session] = error.metadata?.get("adk-mesh-session-id") ?? [];
  if (session && !sessionNamed) console.log(`session ${session}`);
  console.error(`error: ${grpc.status[error.code]}: ${error.details}`);
  client.close();
  process.exit(1);
});
call.on("end", () => client.close());
