// A job's logs, one block per attempt, read incrementally from the API's per-attempt log endpoint: each poll asks
// for the bytes after the last offset (the X-Log-Size header), decoding UTF-8 split across reads correctly.
import { apiGet } from "./api.js";
import { clockTime, el } from "./format.js";

const FIRST_READ_LIMIT = 1_000_000;  // a huge log starts with its last megabyte

export class LogView {
  constructor(container, jobId) {
    this.container = container;
    this.jobId = jobId;
    this.readers = new Map();  // attempt number -> {offset, decoder, text}
  }

  reader(attempt) {
    if (!this.readers.has(attempt.number)) {
      const pruned = attempt.log_pruned_at != null;  // null or absent: the log is whole
      const skipped = pruned ? 0 : Math.max(0, attempt.log_bytes - FIRST_READ_LIMIT);
      const text = el("pre", { className: "log-text" }, pruned ? prunedLine(attempt)
        : skipped ? `… (${skipped} earlier bytes not shown)\n` : "");
      const header = `attempt ${attempt.number} · ${attempt.market} · ${attempt.zone} · ${attempt.instance_id ?? "—"}`
        + ` · started ${clockTime(attempt.started_at)}`;
      this.container.append(el("div", { className: "log", dataset: { attempt: attempt.number } },
        el("h3", { className: "log-header" }, header), text));
      this.readers.set(attempt.number, { offset: skipped, decoder: new TextDecoder("utf-8"), text, pruned });
    }
    return this.readers.get(attempt.number);
  }

  // Reads what is new for every placed attempt; `final` flushes the decoders (the job has ended).
  async update(attempts, final) {
    for (const attempt of attempts.filter((a) => a.started_at !== null)) {
      const reader = this.reader(attempt);
      if (reader.pruned) continue;  // nothing left to read
      const response = await apiGet(`/jobs/${this.jobId}/attempts/${attempt.number}/log?offset=${reader.offset}`);
      const bytes = await response.arrayBuffer();
      reader.offset = Number(response.headers.get("X-Log-Size"));
      const text = reader.decoder.decode(bytes, { stream: !final });
      if (text) reader.text.append(text);
    }
  }
}

// As `spotrun logs` says it (spotrun.server.logstream.pruned_line).
function prunedLine(attempt) {
  const day = new Date(attempt.log_pruned_at * 1000).toISOString().slice(0, 16).replace("T", " ");
  return `[its log of ${attempt.log_bytes} bytes was removed on ${day} UTC by log retention ` +
    "(`spotrun prune-logs` or the server's --keep-logs)]\n";
}
