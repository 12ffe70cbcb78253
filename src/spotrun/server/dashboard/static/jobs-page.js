import { apiJson, poll, setUpPage } from "./api.js";
import { clockTime, dollars, duration, el, integer, stateBadge } from "./format.js";

function jobRow(job) {
  const link = el("a", { href: `/dashboard/jobs/${job.id}` }, job.name);
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
    el("td", { className: "cost num" }, dollars(job.cost)),
    el("td", { className: "elapsed num" }, duration(job.elapsed)),
  );
}

async function refresh() {
  const jobs = await apiJson("/jobs");
  jobs.reverse();  // newest first
  document.querySelector("#jobs tbody").replaceChildren(...jobs.map(jobRow));
  document.getElementById("empty").hidden = jobs.length > 0;
  document.getElementById("status").textContent = `${jobs.length} job(s) · updated ${clockTime(Date.now() / 1000)}`;
}

function showError(error) {
  document.getElementById("status").textContent = `Could not refresh: ${error.message}`;
}

if (setUpPage()) poll(refresh, showError);
