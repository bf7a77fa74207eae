// A Node.js client for an adk-mesh agent service: one root Run, its events streamed as they come
// (a running tool's progress on a line of its own).
//
//   npm install
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

function describePart(author, part) {
  if (part.text !== undefined && part.text !== null) return `[${author}] ${part.text}`;
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

const call = client.Run({
  root: {
    user_id: args.user,
    session_id: args.session,
    new_message: { role: "user", parts: [{ text: args.message }] },
  },
});
call.on("data", (response) => {
  if (response.session_id) console.log(`session ${response.session_id}`);
  const event = response.event;
  if (!event) return;
  if (event.tool_progress) {
    console.log(describeProgress(event.author, event.tool_progress));
    return;
  }
  if (event.llm_response?.partial) return;
  for (const part of event.llm_response?.content?.parts ?? []) {
    console.log(describePart(event.author, part));
  }
  for (const [key, value] of Object.entries(stateDelta(event.actions))) {
    console.log(`[${event.author}] state: ${key}=${JSON.stringify(value)}`);
  }
  if (event.actions?.transfer_to_agent) {
    console.log(`[${event.author}] transfer to ${event.actions.transfer_to_agent}`);
  }
  console.log(`  (invocation ${event.invocation_id})`);
});
call.on("error", (error) => {
  console.error(`error: ${grpc.status[error.code]}: ${error.details}`);
  client.close();
  process.exit(1);
});
call.on("end", () => client.close());
