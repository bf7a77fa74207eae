// Small DOM helpers: every text goes in through textContent, never as HTML.

/**
 * Create an element.
 * @param {string} tag  element name, optionally with classes: "span.badge.author"
 * @param {Record<string, unknown>|null} [attributes]  attributes; `on*` functions become
 *   listeners, `dataset` an object of data-* values, `text` the text content, boolean
 *   `true`/`false` set or leave out the attribute
 * @param {...(Node|string|number|null|undefined|false|Array<Node|string>)} children
 * @returns {HTMLElement}
 */
export function h(tag, attributes, ...children) {
  const [name, ...classes] = tag.split(".");
  const element = document.createElement(name);
  if (classes.length) element.className = classes.join(" ");
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") element.textContent = String(value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key === "class") element.classList.add(...String(value).split(/\s+/).filter(Boolean));
    else if (key === "style" && typeof value === "object") {
      // setProperty: custom properties (--hue) cannot be assigned as style fields.
      for (const [property, setting] of Object.entries(value)) {
        element.style.setProperty(property, String(setting));
      }
    }
    else if (key.startsWith("on") && typeof value === "function") {
      element.addEventListener(key.slice(2).toLowerCase(), /** @type {EventListener} */ (value));
    } else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

/** Append children (nested arrays flattened; null, undefined and false skipped). */
export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Replace every child of `parent`. */
export function replace(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

/** A JSON value as short one-line text. */
export function shortJson(value, limit = 140) {
  let text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) text = String(value);
  text = text.replace(/\s+/g, " ");
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

/** Milliseconds, readably. */
export function formatMs(ms) {
  if (!Number.isFinite(ms)) return "–";
  if (ms >= 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}
