// How numbers read on the dashboard; dollars as `spotrun cost` prints them.

export function dollars(amount) {
  if (amount >= 1 || amount === 0) {
    return "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }
  return "$" + amount.toFixed(4);
}

export function percent(fraction) {
  return (fraction * 100).toFixed(1) + "%";
}

export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

export function clockTime(epochSeconds) {
  if (epochSeconds === null || epochSeconds === undefined) return "—";
  return new Date(epochSeconds * 1000).toLocaleTimeString("en-GB");
}

export function integer(value) {
  return value === null || value === undefined ? "—" : value.toLocaleString("en-US");
}

export const TERMINAL_STATES = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

// A small element builder: el("td", {className: "state"}, "RUNNING"). Text always goes in as text, never as HTML.
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function stateBadge(state) {
  return el("span", { className: `state state-${state.toLowerCase()}` }, state);
}
