// A job's attempts on one time axis: a segment per placed attempt (coloured by market, labelled with its zone,
// a mark at its end when it was preempted) and a hatched gap wherever the job held no instance. A multi-node
// job gets one lane per node, all on the same axis, so a replaced node shows where its gap was.
import { clockTime, duration, el } from "./format.js";

const MIN_GAP_SECONDS = 1;

function gap(start, end, unplaced) {
  const tries = unplaced.filter((a) => a.created_at >= start && a.created_at <= end).length;
  return { kind: "gap", start, end, tries };
}

// The items from `start` (default: the first attempt's creation) to `end` (the job's end, or now while it runs).
export function timelineItems(attempts, end, start = Math.min(...attempts.map((a) => a.created_at))) {
  const placed = attempts.filter((a) => a.started_at !== null);
  const unplaced = attempts.filter((a) => a.started_at === null);
  const items = [];
  let cursor = start;
  for (const attempt of placed) {
    if (attempt.started_at - cursor >= MIN_GAP_SECONDS) items.push(gap(cursor, attempt.started_at, unplaced));
    const stop = Math.max(attempt.ended_at ?? end, attempt.started_at);
    items.push({ kind: "segment", attempt, start: attempt.started_at, end: stop });
    cursor = Math.max(cursor, stop);
  }
  if (end - cursor >= MIN_GAP_SECONDS) items.push(gap(cursor, end, unplaced));
  return items;
}

function segmentNode(item) {
  const a = item.attempt;
  const preempted = a.end_reason === "preempted";
  const title = `attempt ${a.number}: ${a.market} in ${a.zone}, ${duration(item.end - item.start)}`
    + (a.end_reason ? `, ended: ${a.end_reason}` : ", running");
  const node = el("div", {
    className: `segment market-${a.market}` + (a.ended_at === null ? " running" : ""),
    title,
    dataset: { attempt: a.number, market: a.market, zone: a.zone, endReason: a.end_reason ?? "" },
    style: { flexGrow: String(item.end - item.start) },
  }, el("span", { className: "segment-label" }, `#${a.number} ${a.market} · ${a.zone}`));
  if (preempted) {
    const notice = a.notice_at ? ` (notice at ${clockTime(a.notice_at)})` : "";
    node.append(el("span", { className: "preemption-mark", title: `preempted at ${clockTime(a.ended_at)}${notice}` }));
  }
  return node;
}

function gapNode(item) {
  const tries = item.tries ? ` · ${item.tries} ${item.tries === 1 ? "try" : "tries"} without capacity` : "";
  const label = `waiting ${duration(item.end - item.start)}${tries}`;
  return el("div", {
    className: "gap", title: label, dataset: { seconds: Math.round(item.end - item.start) },
    style: { flexGrow: String(item.end - item.start) },
  }, el("span", { className: "segment-label" }, label));
}

function itemNodes(items) {
  return items.map((item) => (item.kind === "segment" ? segmentNode(item) : gapNode(item)));
}

function laneNodes(attempts, end, start) {
  const ranks = [...new Set(attempts.map((a) => a.node_rank ?? 0))].sort((x, y) => x - y);
  return ranks.map((rank) => {
    const items = timelineItems(attempts.filter((a) => (a.node_rank ?? 0) === rank), end, start);
    return el("div", { className: "lane", dataset: { node: rank } },
      el("span", { className: "lane-label" }, `node ${rank}`),
      el("div", { className: "lane-track" }, ...itemNodes(items)));
  });
}

export function renderTimeline(container, axis, attempts, end) {
  if (attempts.length === 0) {
    container.replaceChildren(el("p", { className: "note" }, "No attempt yet."));
    axis.replaceChildren();
    return;
  }
  const start = Math.min(...attempts.map((a) => a.created_at));
  const multiNode = attempts.some((a) => (a.node_rank ?? 0) > 0);
  container.classList.toggle("lanes", multiNode);
  container.replaceChildren(...(multiNode ? laneNodes(attempts, end, start) : itemNodes(timelineItems(attempts, end, start))));
  axis.replaceChildren(
    el("span", {}, clockTime(start)),
    el("span", {}, duration(end - start)),
    el("span", {}, clockTime(end)),
  );
}
