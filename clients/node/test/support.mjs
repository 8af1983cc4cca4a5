// What the client tests share: the real binary on a loopback port with its own
// temporary database, stopped by its PID; bounded waits; unique names.

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const READY = /^leasegate: listening on (https?:\/\/127\.0\.0\.1:(\d+))\s*$/m;
export const BOUND_MS = 20_000; // the longest any wait in these tests may take

export const unique = (prefix) => `${prefix}/${randomUUID().slice(0, 8)}`;

/** Polls predicate() until it is true; fails after BOUND_MS. */
export async function waitFor(predicate, what) {
  const deadline = Date.now() + BOUND_MS;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The real binary on a loopback port, with its own temporary database. */
export class Server {
  constructor(args = []) {
    this.args = args;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "leasegate-nodeclient-"));
    this.port = 0;
  }

  /** Starts it (again, on the same port and database after a stop). */
  async start() {
    const bin = process.env.LEASEGATE_BIN;
    if (!bin) throw new Error("set LEASEGATE_BIN to the leasegate binary (e.g. build/leasegate)");
    const stderr = fs.openSync(path.join(this.dir, "stderr.log"), "a");
    this.proc = spawn(bin, ["serve", "--listen", `127.0.0.1:${this.port}`, "--data", path.join(this.dir, "t.db"),
      ...this.args], { stdio: ["ignore", "pipe", stderr] });
    fs.closeSync(stderr);
    const exited = new Promise((resolve) => this.proc.once("exit", resolve));
    this.exited = exited;
    let out = "";
    const ready = new Promise((resolve, reject) => {
      this.proc.stdout.on("data", (chunk) => {
        out += chunk;
        const m = READY.exec(out);
        if (m) resolve(m);
      });
      exited.then((code) => reject(new Error(`leasegate exited (${code}) before listening: ${out}`)));
    });
    let timer;
    const tooLate = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`leasegate did not start; see ${this.dir}/stderr.log`)), 10_000);
    });
    const m = await Promise.race([ready, tooLate]).finally(() => clearTimeout(timer));
    this.url = m[1];
    this.port = Number(m[2]);
    return this;
  }

  async kill(signal = "SIGKILL") {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill(signal);
      await this.exited;
    }
  }

  async stop() {
    await this.kill("SIGTERM");
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
