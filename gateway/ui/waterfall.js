// An invocation's trace (GET /debug/traces/{invocation_id}) as a waterfall: one row per span,
// nested by parent, coloured by service, placed on the invocation's time axis.

import { formatMs, h, replace, shortJson } from "./dom.js";
import { HUES } from "./events.js";

/** Services take the hues in the order they appear, so the first few never share one. */
let serviceHues = new Map();
const hueOf = (service) => {
  if (!serviceHues.has(service)) serviceHues.set(service, HUES[serviceHues.size % HUES.length]);
  return serviceHues.get(service);
};

const CONTROL_FLOW = {
  return_to_caller: "AgentTool delegation",
  pass_control: "transfer",
};

function axis(durationMs) {
  // Zero needs no label; each label ends at its grid line.
  const ticks = [0.25, 0.5, 0.75, 1];
  return h(
    "div.axis",
    { "aria-hidden": "true" },
    ...ticks.map((tick) =>
      h("span.tick", { style: { left: `${tick * 100}%` }, text: formatMs(tick * durationMs) }),
    ),
  );
}

function attributesList(span) {
  const entries = Object.entries(span.attributes ?? {});
  const rows = [
    ["span id", span.spanId],
    ["kind", span.kind],
    ["status", span.statusMessage ? `${span.status}: ${span.statusMessage}` : span.status],
    ["starts at", formatMs(span.startMs)],
    ["duration", formatMs(span.durationMs)],
    ...entries.map(([key, value]) => [key, typeof value === "string" ? value : shortJson(value, 2000)]),
  ];
  return h(
    "dl.attributes",
    null,
    ...rows.flatMap(([key, value]) => [h("dt", { text: key }), h("dd", { text: value ?? "" })]),
  );
}

function spanRow(span, traceDurationMs, parentService, index) {
  const start = traceDurationMs > 0 ? (span.startMs / traceDurationMs) * 100 : 0;
  const width = traceDurationMs > 0 ? (span.durationMs / traceDurationMs) * 100 : 100;
  const detailId = `span-detail-${span.spanId}-${index}`;
  const flow = span.attributes?.["adk_mesh.control_flow"];
  const target = span.attributes?.["adk_mesh.target_agent"];
  const crossesService = parentService !== null && parentService !== span.service;
  const error = span.status === "ERROR";
  const toggle = h(
    "button.span-toggle",
    {
      type: "button",
      "aria-expanded": "false",
      "aria-controls": detailId,
      title: `${span.name} (${span.service})`,
    },
    h("span.swatch", { style: { "--hue": hueOf(span.service) }, "aria-hidden": "true" }),
    h("span.span-name", { text: span.name }),
    h("span.visually-hidden", { text: `, service ${span.service}, depth ${span.depth}` }),
  );
  const detail = h(
    "tr.span-detail",
    { id: detailId, hidden: true },
    h("td", { colspan: 3 }, attributesList(span)),
  );
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    detail.hidden = !open;
  });
  const row = h(
    "tr.span-row",
    {
      class: [error ? "error" : "", crossesService ? "crosses" : "", span.orphan ? "orphan" : ""].join(" "),
      dataset: { service: span.service, depth: span.depth, spanId: span.spanId },
    },
    h(
      "th.span-label",
      { scope: "row", style: { "--depth": span.depth } },
      toggle,
      // The service is named where the trace enters it; the colour says it on every row.
      parentService === null || crossesService || flow || error || span.orphan
        ? h(
            "span.span-meta",
            null,
            parentService === null || crossesService
              ? h("span.service", {
                  style: { "--hue": hueOf(span.service) },
                  text: crossesService ? `↪ ${span.service}` : span.service,
                })
              : null,
            flow ? h(`span.tag.flow.${flow}`, { text: `${CONTROL_FLOW[flow] ?? flow} → ${target ?? "?"}` }) : null,
            error ? h("span.tag.error", { text: "error" }) : null,
            span.orphan ? h("span.tag.orphan", { text: "parent not exported yet" }) : null,
          )
        : null,
    ),
    h(
      "td.span-timeline",
      null,
      h("div.bar", {
        style: {
          "--hue": hueOf(span.service),
          left: `${Math.min(start, 100)}%`,
          width: `max(2px, ${Math.min(width, 100 - start)}%)`,
        },
      }),
      h("span.visually-hidden", {
        text: `starts at ${formatMs(span.startMs)}, lasts ${formatMs(span.durationMs)}`,
      }),
    ),
    h("td.span-duration", { text: formatMs(span.durationMs) }),
  );
  return [row, detail];
}

function traceTable(trace) {
  const services = new Map();
  const rows = [];
  trace.spans.forEach((span, index) => {
    services.set(span.spanId, span.service);
    const parentService = span.parentSpanId ? (services.get(span.parentSpanId) ?? null) : null;
    rows.push(...spanRow(span, trace.durationMs, parentService, index));
  });
  return h(
    "table.waterfall",
    null,
    h(
      "caption.visually-hidden",
      { text: `Trace ${trace.traceId}: ${trace.spans.length} spans over ${formatMs(trace.durationMs)}` },
    ),
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        h("th.span-label", { scope: "col", text: "Span" }),
        h("th.span-timeline", { scope: "col" }, h("span.visually-hidden", { text: "Timeline" }), axis(trace.durationMs)),
        h("th.span-duration", { scope: "col", text: "Duration" }),
      ),
    ),
    h("tbody", null, ...rows),
  );
}

/** Summary words for the trace's source. */
const SOURCES = { files: "trace files", jaeger: "Jaeger", none: "no source" };

/**
 * Draw `data` (the trace route's JSON) into `container`.
 * @returns {{spans: number, orphans: number}}
 */
export function renderTrace(container, data) {
  const traces = data.traces ?? [];
  const spans = traces.reduce((count, trace) => count + trace.spans.length, 0);
  const orphans = traces.reduce((count, trace) => count + trace.spans.filter((s) => s.orphan).length, 0);
  if (!traces.length) {
    replace(
      container,
      h("p.empty", {
        text:
          data.source === "none"
            ? (data.detail ?? "No trace source is configured on the gateway.")
            : `No spans of invocation ${data.invocationId} yet (${SOURCES[data.source] ?? data.source}).`,
      }),
    );
    return { spans, orphans };
  }
  serviceHues = new Map(data.services.map((service, index) => [service, HUES[index % HUES.length]]));
  const total = Math.max(...traces.map((trace) => trace.durationMs));
  replace(
    container,
    h(
      "p.trace-summary",
      null,
      h("span", { text: `${spans} spans` }),
      " · ",
      h("span", { text: `${data.services.length} services` }),
      " · ",
      h("span", { text: formatMs(total) }),
      " · ",
      h("span", { text: `from ${SOURCES[data.source] ?? data.source}` }),
    ),
    h(
      "ul.legend",
      { "aria-label": "Services" },
      ...data.services.map((service) =>
        h(
          "li",
          null,
          h("span.swatch", { style: { "--hue": hueOf(service) }, "aria-hidden": "true" }),
          service,
        ),
      ),
    ),
    ...traces.map((trace) =>
      h(
        "div.trace",
        { dataset: { traceId: trace.traceId } },
        traces.length > 1 ? h("h3.trace-id", { text: `trace ${trace.traceId}` }) : null,
        h("div.waterfall-scroll", null, traceTable(trace)),
      ),
    ),
  );
  return { spans, orphans };
}
