// How numbers read on the dashboard; dollars as `spotrun cost` prints them.

const ROUNDS_TO_A_DOLLAR = 0.99995; // the least amount that shows as $1.0000 in tenths of a cent

// Cents from a dollar up, else tenths of a cent: "$1,234.50", "$0.0042", "-$12.35". Intl rounds half away from zero
// from the amount as it prints (toFixed rounded the float under it: 2.675 read 2.67), as the CLI's format_dollars.
export function dollars(amount) {
  const size = Math.abs(amount);
  const places = amount === 0 || size >= ROUNDS_TO_A_DOLLAR ? 2 : 4;
  const shown = size.toLocaleString("en-US", { minimumFractionDigits: places, maximumFractionDigits: places });
  return (amount < 0 && /[1-9]/.test(shown) ? "-$" : "$") + shown;
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
// Ended without the result they ran for (`control.states.ended_without_result`): what they spent saved nothing.
export const ENDED_WITHOUT_RESULT = new Set(["FAILED", "CANCELLED"]);

// What the API leaves out of a job's dollars (`unpriced_attempts`): attempts stored at a price no instance has.
export function unpricedNote(count) {
  if (!count) return "";
  return `${count === 1 ? "1 attempt" : `${integer(count)} attempts`} left out: stored at over 1,000,000 $/h, ` +
    "a price no instance has";
}

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
