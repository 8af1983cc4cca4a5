"use strict";
// Following an election: GET /v1/elections/NAME/observe, Server-Sent Events, as an
// async iterator of events:
//   {event: "leader", id, owner, term, value} for every new leader or proclaimed value,
//   {event: "vacant", id, reason: "resigned"|"expired"|"revoked"|null, previous_term}
//   whenever nobody leads; the first is the election's state when the stream opened
//   (unless it resumes). Terms are decimal strings, as tokens are (json.js).
//
// A stream that ends (the server stops, the connection is cut, nothing came for
// SILENCE_MS though the server sends a comment every 15 s) is opened again, on the same
// server or the next, with Last-Event-ID: the id of the last event yielded, so none is
// yielded twice or missed. When the server no longer keeps the events missed (410, or
// a too_old event) it goes on from the election's state, with a warning. No server
// answering for retryFor rejects with UnavailableError; pass the last event's id as
// lastEventId to a new observe() to resume.

const process = require("node:process");
const { setTimeout: sleep } = require("node:timers/promises");
const { LeasegateError, OverloadedError, errorFromAnswer } = require("./errors.js");
const { parseAnswer } = require("./json.js");
const {
  BACKOFF_FIRST_MS, BACKOFF_MAX_MS, UnreachableError, now, parse, quoteName, unavailable,
} = require("./transport.js");

const SILENCE_MS = 45_000;
const MAX_LINE = 1024 * 1024; // a line of the stream; an event's data is far smaller
const MAX_ERROR_BODY = 64 * 1024;

/** The messages of an event stream, line by line. */
class EventParser {
  #buffer = "";
  #event = null;
  #data = null;
  #id = null;

  /** The messages complete in `text` (the stream's next characters): [{event, data, id}]. */
  feed(text) {
    this.#buffer += text;
    const messages = [];
    for (;;) {
      const end = this.#buffer.indexOf("\n");
      if (end < 0) {
        if (this.#buffer.length > MAX_LINE) throw new Error("a line of the observe stream is too long");
        return messages;
      }
      const line = this.#buffer.slice(0, end).replace(/\r$/, "");
      this.#buffer = this.#buffer.slice(end + 1);
      if (line === "") {
        if (this.#event !== null || this.#data !== null) messages.push({ event: this.#event, data: this.#data, id: this.#id });
        this.#event = this.#data = this.#id = null;
        continue;
      }
      if (line.startsWith(":")) continue; // a comment: the keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") this.#event = value;
      else if (field === "data") this.#data = this.#data === null ? value : `${this.#data}\n${value}`;
      else if (field === "id") this.#id = value;
    }
  }
}

/** The body of a refused stream (bounded), as text. */
async function errorBody(res) {
  let text = "";
  for await (const chunk of res) {
    text += chunk.toString("utf8");
    if (text.length > MAX_ERROR_BODY) break;
  }
  return text;
}

/**
 * The events of election `name` (see the top of this file).
 * @param {import("./transport.js").Transport} transport
 * @param {string} name
 * @param {{lastEventId?: string|number, retryForMs: number, signal?: AbortSignal}} options
 */
async function* observe(transport, name, { lastEventId, retryForMs, signal }) {
  const path = `/v1/elections/${quoteName(name)}/observe`;
  let lastId = lastEventId === undefined || lastEventId === null ? null : String(lastEventId);
  let failingSince = null;
  let tried = 0;
  const failures = [];
  const count = transport.urls.length;
  const restart = () => {
    process.emitWarning(`observe '${name}': the events after ${lastId} are no longer kept; going on from the ` +
                        "election's state", "LeasegateWarning");
    lastId = null;
  };
  for (;;) {
    signal?.throwIfAborted();
    const server = transport.currentServer;
    let pause = 0;
    let req = null;
    try {
      const headers = { Accept: "text/event-stream" };
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      const opened = await transport.openStream(server, path, {
        headers, timeoutMs: Math.max(transport.timeoutMs, transport.firstByteMs), signal,
      });
      req = opened.req;
      const { res } = opened;
      if (res.statusCode === 410) {
        res.resume();
        restart();
        continue;
      }
      if (res.statusCode !== 200) {
        const failure = errorFromAnswer(res.statusCode, parse(res.statusCode, await errorBody(res)));
        if (!(failure instanceof OverloadedError)) throw failure;
        throw new UnreachableError(`${server}: ${failure.message}`);
      }
      failingSince = null;
      tried = 0;
      req.setTimeout(SILENCE_MS, () => req.destroy(new Error(`nothing for ${SILENCE_MS}ms`)));
      res.setEncoding("utf8");
      const parser = new EventParser();
      let tooOld = false;
      try {
        for await (const text of res) {
          for (const m of parser.feed(text)) {
            if (m.event === "too_old") tooOld = true;
            if (m.event === "unauthorized") {
              const body = parseAnswer(m.data ?? "{}");
              throw errorFromAnswer(body?.error === "forbidden" ? 403 : 401, body);
            }
            if (m.event !== "leader" && m.event !== "vacant") continue;
            const fields = parseAnswer(m.data ?? "{}");
            if (m.id !== null) lastId = m.id;
            yield { event: m.event, id: m.id, ...fields };
          }
        }
      } catch (error) {
        // A refusal ends the observation; anything else (the connection cut, silent or
        // aborted) opens the stream again below.
        if (error instanceof LeasegateError) throw error;
      }
      if (tooOld) restart();
      pause = BACKOFF_FIRST_MS; // a server that ends streams at once is not asked in a tight loop
    } catch (error) {
      if (!(error instanceof UnreachableError)) throw error;
      failingSince ??= now();
      failures.push(error.message);
      transport.passOver();
      tried++;
      if (tried % count === 0) {
        if (now() - failingSince >= retryForMs) throw unavailable(failures.slice(-count));
        pause = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (tried / count - 1)) * (0.5 + Math.random() / 2);
      }
    } finally {
      req?.destroy();
    }
    if (pause) await sleep(pause, undefined, { signal });
  }
}

module.exports = { observe };
