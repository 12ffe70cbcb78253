import { DASHBOARD, apiJson, poll, setUpPage } from "./api.js";
import { clockTime, dollars, duration, el, integer, stateBadge, unpricedNote } from "./format.js";

// The job's cost so far, and how many attempts it leaves out (`unpriced_attempts`), as `spotrun status` shows them.
function costCell(job) {
  const unpriced = job.unpriced_attempts ? ` + ${integer(job.unpriced_attempts)} unpriced` : "";
  const text = dollars(job.cost) + unpriced;
  return el("td", { className: "cost num", title: unpricedNote(job.unpriced_attempts) }, text);
}

function jobRow(job) {
  const link = el("a", { href: `${DASHBOARD}jobs/${job.id}` }, job.name);
  return el("tr", { dataset: { jobId: job.id, state: job.state } },
    el("td", { className: "id" }, job.id),
    el("td", { className: "name" }, link),
    el("td", { className: "owner" }, job.owner),
    el("td", { className: "state-cell" }, stateBadge(job.state)),
    el("td", { className: "market" }, job.market ?? "—"),
    el("td", { className: "zone" }, job.zone ?? "—"),
    el("td", { className: "attempts num" }, job.attempts),
    el("td", { className: "preemptions num" }, job.preemptions),
    el("td", { className: "checkpoint num" }, integer(job.checkpoint_step)),
    costCell(job),
    el("td", { className: "elapsed num" }, duration(job.elapsed)),
  );
}

// A store keeps every job: the page lists those not ended and the newest ended ones, more on request.
const ENDED_PAGE = 50;
let endedWanted = ENDED_PAGE;

async function refresh() {
  const unended = await apiJson("/jobs?ended=false");
  // asked after the others: a job that ends in between is in both and kept as the newer answer says
  const ended = await apiJson(`/jobs?ended=true&limit=${endedWanted + 1}`);  // one more: are older ones left out?
  const olderLeftOut = ended.length > endedWanted;
  const byId = new Map([...unended, ...ended.slice(olderLeftOut ? 1 : 0)].map((job) => [job.id, job]));
  const jobs = [...byId.values()].sort((a, b) => b.id - a.id);  // newest first
  document.querySelector("#jobs tbody").replaceChildren(...jobs.map(jobRow));
  document.getElementById("empty").hidden = jobs.length > 0;
  document.getElementById("more").hidden = !olderLeftOut;
  const leftOut = olderLeftOut ? " · older ended jobs left out" : "";
  document.getElementById("status").textContent =
    `${jobs.length} job(s)${leftOut} · updated ${clockTime(Date.now() / 1000)}`;
}

function showMoreEnded() {
  endedWanted += ENDED_PAGE;
  refresh().catch(showError);
}

function showError(error) {
  document.getElementById("status").textContent = `Could not refresh: ${error.message}`;
}

if (setUpPage()) {
  document.getElementById("more").addEventListener("click", showMoreEnded);
  poll(refresh, showError);
}
