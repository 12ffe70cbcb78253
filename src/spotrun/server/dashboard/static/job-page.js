import { NotFound, apiJson, poll, setUpPage } from "./api.js";
import {
  ENDED_WITHOUT_RESULT, TERMINAL_STATES, clockTime, dollars, duration, el, integer, percent, stateBadge, unpricedNote,
} from "./format.js";
import { EventList } from "./event-list.js";
import { JobActions } from "./job-actions.js";
import { LogView } from "./log-view.js";
import { renderTimeline } from "./timeline.js";

const jobId = Number(location.pathname.match(/\/dashboard\/jobs\/(\d+)/)[1]);
const logView = new LogView(document.getElementById("logs"), jobId);
const actions = new JobActions(jobId, document.getElementById("actions"));
const eventList = new EventList(document.getElementById("events"));

function setText(id, text) {
  document.getElementById(id).textContent = text;
}

function setAmount(id, text, value) {
  const node = document.getElementById(id);
  node.textContent = text;
  node.dataset.value = String(value);
}

function renderHeader(detail) {
  const job = detail.job;
  document.title = `spotrun · ${job.name}`;
  setText("job-name", job.name);
  setText("job-id", `#${job.id}`);
  document.getElementById("job-state").replaceChildren(stateBadge(job.state));
  setText("job-owner", detail.owner);
  setText("job-elapsed", duration(job.elapsed));
  setText("job-failure", job.failure_reason ? ` · ${job.failure_reason}` : "");
  const ofTotal = job.checkpoint_step !== null && job.total_steps
    ? ` of ${integer(job.total_steps)} (${percent(job.checkpoint_step / job.total_steps)})`
    : "";
  setAmount("checkpoint-step", integer(job.checkpoint_step) + ofTotal, job.checkpoint_step ?? "");
}

function showBoth(ids, shown) {
  for (const id of ids) document.getElementById(id).hidden = !shown;
}

// A job that failed or was cancelled saved nothing, whatever spot's discount: what it spent bought no result, and
// the on-demand amount is only what the same hours would have cost (as `spotrun cost` says it).
function renderBill(bill, state) {
  const noResult = ENDED_WITHOUT_RESULT.has(state);
  setAmount("cost", dollars(bill.cost), bill.cost);
  setText("on-demand-term", noResult ? "on-demand, same hours" : "on-demand only");
  setAmount("on-demand-cost", dollars(bill.on_demand_cost), bill.on_demand_cost);
  showBoth(["saved-term", "saved-line"], !noResult);
  showBoth(["no-result-term", "no-result-line"], noResult);
  setText("no-result-state", state);
  setAmount("saved", dollars(bill.saved), bill.saved);
  setAmount("saved-percent", percent(bill.saved_fraction), bill.saved_fraction);
  setText("unpriced", unpricedNote(bill.unpriced_attempts));
  setText("spot-seconds", duration(bill.spot_seconds));
  setText("on-demand-seconds", duration(bill.on_demand_seconds));
  const until = bill.provisional_until === null ? "" : ` by ${clockTime(bill.provisional_until)}`;
  setText("provisional", bill.provisional > 0
    ? `${dollars(bill.provisional)} of it provisional: free if the cloud takes back what it interrupted${until}`
    : "");
  const share = bill.on_demand_cost > 0 ? Math.min(bill.cost / bill.on_demand_cost, 1) : 0;
  document.getElementById("cost-bar").style.width = `${(share * 100).toFixed(1)}%`;
}

// Runs of two or more consecutive tries in one market that got no instance (the API's `no_instance`) are one row:
// a job that waits for spot through a long gap is refused hundreds of times, and each try is an attempt (as
// `spotrun status JOB` folds them).
function foldRefusedTries(attempts) {
  const items = [];
  let run = [];
  const closeRun = () => {
    if (run.length >= 2) items.push({ tries: run });
    else items.push(...run);
    run = [];
  };
  for (const a of attempts) {
    if (!a.no_instance) {
      closeRun();
      items.push(a);
      continue;
    }
    if (run.length && run[run.length - 1].market !== a.market) closeRun();
    run.push(a);
  }
  closeRun();
  return items;
}

function distinct(values) {
  return [...new Set(values)].join(", ");
}

function refusedRow({ tries }) {
  const first = tries[0], last = tries[tries.length - 1];
  const reasons = new Map();
  for (const a of tries) reasons.set(a.end_reason, (reasons.get(a.end_reason) ?? 0) + 1);
  return el("tr", { className: "refused-tries", dataset: { attempt: `${first.number}-${last.number}`,
                                                           market: last.market, tries: tries.length } },
    el("td", {}, `${first.number}–${last.number}`),
    el("td", { className: "num" }, distinct(tries.map((a) => a.node_rank ?? 0))),
    el("td", {}, el("span", { className: `market-tag market-${last.market}` }, last.market)),
    el("td", {}, distinct(tries.map((a) => a.zone))),
    el("td", {}, last.instance_type),
    el("td", {}, "—"),
    el("td", {}, `${clockTime(first.ended_at)} – ${clockTime(last.ended_at)}`),
    el("td", { className: "num" }, "—"),
    el("td", { className: "end-reason end-refused" },
      [...reasons].map(([reason, count]) => `${reason} ×${count}`).join(", ")),
    el("td", { className: "num" }, "—"),
    el("td", { className: "num" }, `${dollars(last.price_per_hour)} (on-demand ${dollars(last.on_demand_price_per_hour)})`),
    el("td", { className: "num cost", dataset: { value: 0, charged: 0 } }, dollars(0)),
  );
}

// The API prices each attempt as the ledger bills it (`cost`). Once ended, the cloud's rule may have charged
// other seconds than those held (its minimum; EC2 charges nothing for spot it reclaims in the first hour): say so.
// An instance left for the cloud to take back has a provisional cost: free if the cloud does, in time. An attempt
// stored at a price no instance has is not priced (`cost` null).
function costCell(a) {
  if (a.cost === null) {  // stored at a price no instance has: left out of the bill
    return el("td", { className: "num cost unpriced", dataset: { value: "" } }, "unpriced: over 1,000,000 $/h");
  }
  const charged = a.ended_at !== null && a.charged_seconds !== null ? a.charged_seconds : null;
  const differs = charged !== null && Math.round(charged) !== Math.round(a.billed_seconds);
  let text = differs ? `${dollars(a.cost)} (${integer(Math.round(charged))} s charged)` : dollars(a.cost);
  if (a.left_to_cloud_until !== null) {
    text = `${dollars(a.cost)} (free if the cloud takes it back by ${clockTime(a.left_to_cloud_until)})`;
  }
  return el("td", { className: "num cost", dataset: { value: a.cost, charged: charged ?? "" } }, text);
}

// How the attempt ended (or its state), and the early warning its agent reported, as `spotrun status JOB` says it.
function endText(a) {
  const end = a.end_reason ?? a.state;
  return a.warning ? `${end}, warned: ${a.warning.split("/").slice(1).join("/")}` : end;
}

function attemptRow(a) {
  if (a.tries) return refusedRow(a);
  const ran = a.started_at === null ? "—" : duration((a.ended_at ?? Date.now() / 1000) - a.started_at);
  return el("tr", { dataset: { attempt: a.number, market: a.market, node: a.node_rank ?? 0 } },
    el("td", {}, a.number),
    el("td", { className: "num" }, a.node_rank ?? 0),
    el("td", {}, el("span", { className: `market-tag market-${a.market}` }, a.market)),
    el("td", {}, a.zone),
    el("td", {}, `${a.instance_type} ${a.instance_id ?? ""}`),
    el("td", {}, clockTime(a.started_at)),
    el("td", {}, clockTime(a.ended_at)),
    el("td", { className: "num" }, ran),
    el("td", { className: `end-reason end-${a.end_reason ?? "running"}` }, endText(a)),
    el("td", { className: "num" }, integer(a.checkpoint_step)),
    el("td", { className: "num" }, `${dollars(a.price_per_hour)} (on-demand ${dollars(a.on_demand_price_per_hour)})`),
    costCell(a),
  );
}

async function appendEvents() {
  eventList.append(await apiJson(`/jobs/${jobId}/events?after=${eventList.lastId}`));
}

// Ended tries that got no instance never change: the page keeps them and asks only for the other attempts (a job
// that waited days for spot has thousands of tries). It keeps those below the oldest try still without an instance
// and not ended (which may yet end as one of them), and below the newest attempt.
let settledTries = [];
let settledBelow = 0;

async function readAttempts() {
  const detail = await apiJson(`/jobs/${jobId}?settled_below=${settledBelow}`);
  const attempts = [...settledTries, ...detail.attempts].sort((a, b) => a.number - b.number);
  const open = attempts.filter((a) => a.started_at === null && a.ended_at === null).map((a) => a.number);
  settledBelow = Math.min(attempts.length ? attempts[attempts.length - 1].number : 0, ...open);
  settledTries = attempts.filter((a) => a.no_instance && a.number < settledBelow);
  return { ...detail, attempts };
}

async function refresh() {
  const detail = await readAttempts();
  const ended = TERMINAL_STATES.has(detail.job.state);
  const attempts = detail.attempts;
  const end = ended && attempts.length
    ? Math.max(...attempts.map((a) => a.ended_at ?? a.started_at ?? a.created_at))
    : Date.now() / 1000;
  renderHeader(detail);
  actions.setEnded(ended);
  renderBill(detail.bill, detail.job.state);
  renderTimeline(document.getElementById("timeline"), document.getElementById("timeline-axis"), attempts, end);
  document.querySelector("#attempts tbody").replaceChildren(...foldRefusedTries(attempts).map(attemptRow));
  await logView.update(attempts, ended);
  await appendEvents();
  document.getElementById("job").hidden = false;
  setText("status", ended ? `Job ended (${detail.job.state}).` : `Live · updated ${clockTime(Date.now() / 1000)}`);
  return !ended;  // an ended job changes no more: stop polling
}

function showError(error) {
  if (error instanceof NotFound) {
    setText("status", `Job ${jobId} not found (it does not exist or is not yours).`);
    return false;
  }
  setText("status", `Could not refresh: ${error.message}`);
  return true;
}

if (setUpPage()) poll(refresh, showError);
