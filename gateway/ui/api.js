// The gateway's HTTP API, as google-adk's api_server speaks it, plus the trace route.

/** An HTTP answer that was not a success, with the problem+json detail when there is one. */
export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail ? `${title}: ${detail}` : title);
    this.status = status;
    this.title = title;
    this.detail = detail;
  }
}

/** The API's root: the path the UI is served under, without its /ui/ part. */
export function apiBase(location = window.location) {
  const path = location.pathname.replace(/\/ui(?:\/.*)?$/, "/");
  return new URL(path.endsWith("/") ? path : `${path}/`, location.origin);
}

const segment = (value) => encodeURIComponent(value);

export class Api {
  /**
   * @param {URL} base  the API root
   * @param {() => {kind: "bearer"|"api-key", secret: string}} credentials  what to send
   *   ("" sends nothing)
   */
  constructor(base, credentials = () => ({ kind: "bearer", secret: "" })) {
    this.base = base;
    this.credentials = credentials;
  }

  url(path, query) {
    const url = new URL(path.replace(/^\//, ""), this.base);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    return url;
  }

  headers(extra = {}) {
    const headers = { Accept: "application/json", ...extra };
    const { kind, secret } = this.credentials();
    if (secret && kind === "api-key") headers["X-API-Key"] = secret;
    else if (secret) headers.Authorization = `Bearer ${secret}`;
    return headers;
  }

  async request(method, path, { body, query, signal } = {}) {
    const init = { method, headers: this.headers(), signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.url(path, query), init);
    if (!response.ok) throw await problem(response);
    if (response.status === 204) return null;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  listApps() {
    return this.request("GET", "/list-apps");
  }

  sessionsPath(app, user) {
    return `/apps/${segment(app)}/users/${segment(user)}/sessions`;
  }

  listSessions(app, user) {
    return this.request("GET", this.sessionsPath(app, user));
  }

  createSession(app, user, state) {
    return this.request("POST", this.sessionsPath(app, user), { body: state ? { state } : {} });
  }

  getSession(app, user, sessionId) {
    return this.request("GET", `${this.sessionsPath(app, user)}/${segment(sessionId)}`);
  }

  deleteSession(app, user, sessionId) {
    return this.request("DELETE", `${this.sessionsPath(app, user)}/${segment(sessionId)}`);
  }

  artifactsPath(app, user, sessionId) {
    return `${this.sessionsPath(app, user)}/${segment(sessionId)}/artifacts`;
  }

  listArtifacts(app, user, sessionId) {
    return this.request("GET", this.artifactsPath(app, user, sessionId));
  }

  listArtifactVersions(app, user, sessionId, name) {
    return this.request("GET", `${this.artifactsPath(app, user, sessionId)}/${segment(name)}/versions`);
  }

  loadArtifact(app, user, sessionId, name, version) {
    return this.request("GET", `${this.artifactsPath(app, user, sessionId)}/${segment(name)}`, {
      query: { version },
    });
  }

  trace(invocationId, signal) {
    return this.request("GET", `/debug/traces/${segment(invocationId)}`, { signal });
  }

  /**
   * POST /run_sse and yield each `data:` frame's JSON: events, or `{error: ...}` frames.
   * Aborting `signal` closes the stream (the gateway cancels the run downstream).
   */
  async *runSse({ app, user, sessionId, text, streaming = true, signal }) {
    const response = await fetch(this.url("/run_sse"), {
      method: "POST",
      headers: this.headers({ Accept: "text/event-stream", "Content-Type": "application/json" }),
      body: JSON.stringify({
        appName: app,
        userId: user,
        sessionId,
        newMessage: { role: "user", parts: [{ text }] },
        streaming,
      }),
      signal,
    });
    if (!response.ok) throw await problem(response);
    for await (const data of sseData(response.body)) {
      try {
        yield JSON.parse(data);
      } catch {
        yield { error: `an event the UI could not read: ${data.slice(0, 200)}` };
      }
    }
  }
}

async function problem(response) {
  let title = `${response.status} ${response.statusText}`.trim();
  let detail = "";
  try {
    const body = await response.json();
    if (body && typeof body === "object") {
      title = body.title ?? title;
      detail = body.detail ?? body.error ?? body.message ?? "";
      if (typeof detail !== "string") detail = JSON.stringify(detail);
    }
  } catch {
    // Not JSON: the status line says enough.
  }
  return new ApiError(response.status, title, detail);
}

/**
 * The data of each server-sent event in a byte stream (the text/event-stream format: lines
 * ended by CRLF, LF or CR; `data:` lines joined by "\n"; a blank line ends an event).
 * @param {ReadableStream<Uint8Array>} body
 */
export async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      for (;;) {
        const end = buffer.search(/\r\n|\r|\n/);
        // A lone CR at the end may be the first half of a CRLF: wait for the next chunk.
        if (end < 0 || (end === buffer.length - 1 && buffer[end] === "\r")) break;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        if (line === "") {
          if (data.length) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
        // Comments (":") and other fields (event:, id:, retry:) carry nothing the UI uses.
      }
    }
    if (data.length) yield data.join("\n");
  } finally {
    // Closed early (the consumer stopped, or the run was aborted): let go of the response.
    reader.cancel().catch(() => {});
  }
}
