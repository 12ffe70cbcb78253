// The job page's Cancel and Preempt buttons: each asks for confirmation, calls the user API's endpoint with the
// stored token (as every read does), and shows the API's answer. They are disabled once the job has ended, and
// while a request is under way.
import { Unauthorized, apiPost, toLogin } from "./api.js";

const ACTIONS = {
  cancel: {
    question: (jobId) => `Cancel job ${jobId}? The controller stops it and gives back its instance.`,
    accepted: () => "Cancel requested: the controller stops the job and gives back its instance.",
  },
  preempt: {
    question: (jobId) => `Preempt job ${jobId}? The cloud reclaims its instance (with the notice window), as a real `
      + "spot preemption would.",
    accepted: (answer) => `Preemption requested: instance ${answer.instance_id} (attempt ${answer.attempt_number}) `
      + "gets its notice.",
  },
};

function describeRefusal(status, answer) {
  const detail = typeof answer?.detail === "string" ? answer.detail : JSON.stringify(answer?.detail ?? answer);
  return `Refused (HTTP ${status}): ${detail}`;
}

export class JobActions {
  constructor(jobId, container) {
    this.jobId = jobId;
    this.ended = true;  // until the first read of the job says otherwise
    this.busy = false;
    this.result = container.querySelector("#action-result");
    this.buttons = new Map();
    for (const name of Object.keys(ACTIONS)) {
      const button = container.querySelector(`#${name}-job`);
      button.addEventListener("click", () => this.run(name));
      this.buttons.set(name, button);
    }
    this.sync();
  }

  // Called with each read of the job: an ended job cannot be cancelled or preempted.
  setEnded(ended) {
    this.ended = ended;
    this.sync();
  }

  sync() {
    for (const button of this.buttons.values()) button.disabled = this.ended || this.busy;
  }

  show(text, { action, status, ok }) {
    this.result.textContent = text;
    this.result.className = ok ? "action-result" : "action-result error";
    Object.assign(this.result.dataset, { action, status: String(status) });
  }

  async run(name) {
    if (!confirm(ACTIONS[name].question(this.jobId))) return;
    this.busy = true;
    this.sync();
    this.show(`${name}: asking the server…`, { action: name, status: "pending", ok: true });
    try {
      const { ok, status, answer } = await apiPost(`/jobs/${this.jobId}/${name}`);
      const text = ok ? ACTIONS[name].accepted(answer) : describeRefusal(status, answer);
      this.show(text, { action: name, status, ok });
    } catch (error) {
      if (error instanceof Unauthorized) {
        toLogin("The server refused the stored token; enter a valid one.");
        return;
      }
      this.show(`Could not reach the server: ${error.message}`, { action: name, status: "error", ok: false });
    } finally {
      this.busy = false;
      this.sync();
    }
  }
}
