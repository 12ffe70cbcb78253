// The job's events, as the page reads them. A run of launch tries that got no instance (a job waiting for spot
// through a long gap is refused every few minutes, for hours, and each try brings three or four events) shows its
// first tries in full, then one line for the rest, which grows in place while the run goes on and is followed by
// the try that then got an instance, as `spotrun launch --follow` prints them (spotrun.cli.refusals).
import { clockTime, el } from "./format.js";

const SHOWN_IN_FULL = 3;  // refused tries of a run whose events are shown
const PLACING_STATES = new Set(["PROVISIONING", "WAITING"]);  // the job being placed, or waiting to be

function movedTo(event) {
  return event.kind === "state" ? (event.data?.to ?? null) : null;
}

// An event of a try that got no instance (the API's `no_instance` marks its end), or of the job moving between
// being placed and waiting.
function isPlacing(event) {
  return event.kind === "launch_refused" || event.no_instance || PLACING_STATES.has(movedTo(event));
}

function moreTries(count) {
  return `${count} more launch ${count === 1 ? "try" : "tries"}`;
}

// e.g. "spot in local-a, local-b: no_capacity ×12"; markets apart, separated by "; "
function where(ends) {
  const markets = new Map();
  for (const { market, zone, reason } of ends) {
    const seen = markets.get(market) ?? { zones: new Set(), reasons: new Map() };
    seen.zones.add(zone);
    seen.reasons.set(reason, (seen.reasons.get(reason) ?? 0) + 1);
    markets.set(market, seen);
  }
  return [...markets].map(([market, { zones, reasons }]) =>
    `${market} in ${[...zones].join(", ")}: ${[...reasons].map(([reason, n]) => `${reason} ×${n}`).join(", ")}`,
  ).join("; ");
}

export class EventList {
  constructor(list) {
    this.list = list;
    this.lastId = 0;  // events are read after it
    this.startRun();
  }

  append(events) {
    for (const event of events) {
      this.take(event);
      this.lastId = Math.max(this.lastId, event.id);
    }
  }

  startRun() {
    this.shown = new Set();  // attempts of this run whose events are shown
    this.held = [];  // the run's events past its first tries
    this.ends = [];  // the held tries' ends: { market, zone, reason }
    this.line = null;  // the run's line, once a try is held
  }

  take(event) {
    if (!isPlacing(event)) {
      this.closeRun();
      this.show(event);
    } else if (!this.folds(event)) {
      this.show(event);
    } else {
      this.held.push(event);
      if (event.no_instance) {
        this.ends.push(event.data);
        this.renderLine();
      }
    }
  }

  folds(event) {
    if (event.attempt_id === null) return this.shown.size >= SHOWN_IN_FULL;  // a state move
    if (this.shown.has(event.attempt_id)) return false;
    if (this.shown.size < SHOWN_IN_FULL) {
      this.shown.add(event.attempt_id);
      return false;
    }
    return true;
  }

  // Something else happened: the line stays as it is, followed by the try that got an instance, if that is how the
  // run ended; held events without any try (the job waiting) are shown after all.
  closeRun() {
    const { held, line } = this;
    this.startRun();
    if (!line) {
      held.forEach((event) => this.show(event));
    } else if (held.length && movedTo(held[held.length - 1]) === "PROVISIONING") {
      this.show(held[held.length - 1]);
    }
  }

  renderLine() {
    if (!this.line) {
      this.line = el("li", { className: "refused-tries" });
      this.list.append(this.line);
    }
    const first = this.held[0], last = this.held[this.held.length - 1];
    this.line.textContent = `${clockTime(first.at)}–${clockTime(last.at)} ${moreTries(this.ends.length)} got no `
      + `instance (${where(this.ends)})`;
  }

  show(event) {
    this.list.append(el("li", { dataset: { kind: event.kind } },
      el("time", {}, clockTime(event.at)), " ", el("code", {}, event.kind), " ", event.message));
  }
}
