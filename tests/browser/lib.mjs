// Shared by the browser test and the screenshot script: the real leasegate binary on
// 127.0.0.1 with a temporary data dir, a small API client, and Debian's Chromium driven by
// playwright-core. Every wait is bounded; every process started here is stopped by its PID.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..');
export const CHROMIUM = process.env.LEASEGATE_CHROMIUM || '/usr/bin/chromium';
const PLAYWRIGHT = join(here, 'node_modules', 'playwright-core', 'index.mjs');
const START_TIMEOUT_MS = 10000;
const STOP_TIMEOUT_MS = 10000;
const READY_RE = /^leasegate: listening on http:\/\/127\.0\.0\.1:(\d+)\s*$/m;

/** Why the browser tests cannot run here, or null when they can. */
export function missingPrerequisite() {
  if (!existsSync(CHROMIUM)) return `${CHROMIUM} is missing (Debian package chromium: scripts/deps.sh --test)`;
  if (!existsSync(PLAYWRIGHT))
    return 'tests/browser/node_modules is missing (npm ci --prefix tests/browser, or scripts/deps.sh --test)';
  return null;
}

export function binaryPath() {
  const bin = process.env.LEASEGATE_BIN || join(repoRoot, 'build', 'leasegate');
  if (!existsSync(bin)) throw new Error(`no leasegate binary at ${bin} (build it, or set LEASEGATE_BIN)`);
  return bin;
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

/** The real server. start() picks a free port the first time and keeps it across restarts,
 *  so the page sees the same origin come back; the data dir is kept too. */
export class Server {
  /** extraArgs go after --listen and --data; key (when set) is sent as Bearer by call(). */
  constructor({ extraArgs = [], key = null } = {}) {
    this.extraArgs = extraArgs;
    this.key = key;
    this.bin = binaryPath();
    this.dir = mkdtempSync(join(tmpdir(), 'leasegate-browser-'));
    this.port = 0;
    this.proc = null;
    this.log = '';
  }

  get url() { return `http://127.0.0.1:${this.port}`; }

  async start() {
    const args = ['serve', '--listen', `127.0.0.1:${this.port}`, '--data', join(this.dir, 'leasegate.db'),
                  ...this.extraArgs];
    const proc = spawn(this.bin, args, { cwd: this.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    let out = '';
    proc.stderr.on('data', d => { this.log += d; });
    const port = await new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`no listening line within ${START_TIMEOUT_MS} ms: ${this.log}`)),
                               START_TIMEOUT_MS);
      proc.stdout.on('data', d => {
        out += d;
        const m = READY_RE.exec(out);
        if (m) { clearTimeout(timer); ok(Number(m[1])); }
      });
      proc.on('exit', code => { clearTimeout(timer); fail(new Error(`leasegate exited (${code}): ${this.log}`)); });
    });
    this.port = port;
    return this;
  }

  /** SIGTERM by PID, then SIGKILL if it is still there after STOP_TIMEOUT_MS. */
  async stop() {
    const proc = this.proc;
    this.proc = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise(r => proc.once('exit', r));
    proc.kill('SIGTERM');
    if (await Promise.race([exited.then(() => true), sleep(STOP_TIMEOUT_MS).then(() => false)])) return;
    proc.kill('SIGKILL');
    await Promise.race([exited, sleep(STOP_TIMEOUT_MS)]);
  }

  async cleanup() {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** One API call: {status, body}. */
  async call(method, path, body, { timeoutMs = 10000, signal } = {}) {
    const signals = [AbortSignal.timeout(timeoutMs)];
    if (signal) signals.push(signal);
    const res = await fetch(this.url + path, {
      method,
      headers: { ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
                 ...(this.key ? { Authorization: `Bearer ${this.key}` } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.any(signals),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  }

  /** Acquires name (the path keeps its '/': the server reads the last segment as the action). */
  async acquire(name, fields = {}, opts = {}) {
    const timeoutMs = (fields.wait_ms || 0) + 10000;
    const r = await this.call('POST', `/v1/locks/${name}/acquire`, { owner: 'tester', ...fields }, { timeoutMs, ...opts });
    if (r.status !== 200) throw new Error(`acquire ${name}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  async release(name, lease) {
    const r = await this.call('POST', `/v1/locks/${name}/release`, { lease });
    if (r.status !== 200) throw new Error(`release ${name}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  /** Resolves once name has n waiters (bounded). */
  async waitForWaiters(name, n, timeoutMs = 5000) {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      const r = await this.call('GET', `/v1/locks/${name}`);
      if (r.body.waiters === n) return;
      await sleep(20);
    }
    throw new Error(`${name} did not get ${n} waiters within ${timeoutMs} ms`);
  }
}

/** An --auth-file in a new temporary dir with one key of role for prefixes: {key, path, dir}. */
export function keyFile(role, ...prefixes) {
  const [key, line] = execFileSync(binaryPath(), ['keygen', 'browser-test', role, ...prefixes], { encoding: 'utf8' })
    .trim().split('\n');
  const dir = mkdtempSync(join(tmpdir(), 'leasegate-keys-'));
  const path = join(dir, 'keys');
  writeFileSync(path, line + '\n', { mode: 0o600 });
  return { key, path, dir };
}

/** Debian's Chromium, headless, with nothing reaching beyond this machine; extraArgs are
 *  added to its command line (e.g. --host-resolver-rules). */
export async function launchBrowser(extraArgs = []) {
  const { chromium } = await import(PLAYWRIGHT);
  return chromium.launch({
    executablePath: CHROMIUM,
    timeout: 30000,
    // As root Chromium needs --no-sandbox; the others keep it off the (closed) network.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', ...extraArgs],
  });
}
