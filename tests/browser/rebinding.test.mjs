// DNS rebinding in a real browser (issue 28): headless Debian Chromium resolves the
// attacker's name rebind.test to 127.0.0.1 (--host-resolver-rules), as a rebound DNS
// answer would, so a page on http://rebind.test:PORT talks to the real server as its own
// origin. It must get nothing: not the dashboard, not the list of locks, and no lease or
// force-release. The dashboard still works on every name the server answers for:
// 127.0.0.1, localhost and an --allowed-host name (lg.test, also mapped to 127.0.0.1).
// Exits 77 (ctest: skipped) only when Chromium or tests/browser/node_modules are absent.
//
//   node tests/browser/rebinding.test.mjs          (LEASEGATE_BIN defaults to build/leasegate)
import { missingPrerequisite } from './lib.mjs';

const missing = missingPrerequisite();
if (missing) {
  console.log(`SKIP browser_rebinding: ${missing}`);
  process.exit(77);
}

const { test, before, after } = await import('node:test');
const assert = (await import('node:assert/strict')).default;
const { Server, launchBrowser } = await import('./lib.mjs');
const { readFileSync, existsSync } = await import('node:fs');
const { join } = await import('node:path');
const sleep = ms => new Promise(r => setTimeout(r, ms));

/** The status the access log shows for the first request of method to path (bounded wait). */
async function loggedStatus(method, path) {
  const file = join(server.dir, 'access.log');
  for (let i = 0; i < 100; i++) {
    const line = existsSync(file) && readFileSync(file, 'utf8').split('\n').find(l => l.includes(` ${method} ${path} `));
    if (line) return line;
    await sleep(50);
  }
  return null;
}

let server, browser, held;

before(async () => {
  server = await new Server({ extraArgs: ['--allowed-host', 'lg.test', '--access-log', 'access.log'] }).start();
  browser = await launchBrowser(['--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP lg.test 127.0.0.1']);
  held = await server.acquire('prod/db-migration', { owner: 'deploy-7', ttl_ms: 600000 });
});

after(async () => {
  await browser?.close();
  await server?.cleanup();
});

/** A page whose origin is http://NAME:PORT, opened on the server itself. */
async function pageOn(name) {
  const page = await browser.newPage();
  page.setDefaultTimeout(10000);
  // Nothing but this machine's server.
  await page.route(url => url.port !== String(server.port), route => route.abort());
  const res = await page.goto(`http://${name}:${server.port}/`);
  return { page, res };
}

test('a page on a rebound name gets 421 for everything it tries', async () => {
  const { page, res } = await pageOn('rebind.test');
  assert.equal(res.status(), 421, 'the dashboard itself is not served to the rebound name');
  assert.equal(page.url(), `http://rebind.test:${server.port}/`);
  // The attack of issue 28, from the page's own origin: list, force-release, take the lock.
  const tried = await page.evaluate(async () => {
    const call = async (method, path, body) => {
      const res = await fetch(path, { method, headers: body ? { 'Content-Type': 'application/json' } : {},
                                      body: body ? JSON.stringify(body) : undefined });
      return { status: res.status, text: await res.text() };
    };
    return {
      list: await call('GET', '/v1/locks'),
      events: await call('GET', '/v1/events?after=0'),
      revoke: await call('DELETE', '/v1/locks/prod/db-migration'),
      take: await call('POST', '/v1/locks/prod/db-migration/acquire', { owner: 'page', ttl_ms: 86400000 }),
    };
  });
  for (const [what, r] of Object.entries(tried)) {
    assert.equal(r.status, 421, `${what}: ${r.text}`);
    assert.equal(JSON.parse(r.text).error, 'misdirected_request');
    assert.doesNotMatch(r.text, /db-migration|deploy-7/, `${what} revealed the lock`);
  }
  await page.close();
  // The holder still holds it: nothing was revoked or taken.
  const r = await server.call('GET', '/v1/locks/prod/db-migration');
  assert.equal(r.body.holder.owner, 'deploy-7');
  assert.equal(r.body.holder.token, held.token);
  assert.equal((await server.call('POST', '/v1/locks/prod/db-migration/renew', { lease: held.lease })).status, 200);
});

test('a page elsewhere cannot write through an allowed name either (Origin)', async () => {
  // A page on rebind.test that sends a write to the server's IP address instead:
  // cross-origin, so the browser sends Origin: http://rebind.test:PORT, and refuses the
  // page the answer. The server refuses the write for its Origin, before anything else
  // (before the 415 a text/plain body gets): the access log shows 403.
  const { page } = await pageOn('rebind.test');
  const type = await page.evaluate(async url => {
    try {
      const res = await fetch(url + '/v1/locks/web/no-cors/acquire', {
        method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
        body: JSON.stringify({ owner: 'page' }) });
      return res.type;
    } catch (e) { return String(e); }
  }, server.url);
  assert.equal(type, 'opaque', 'the request went out (no-cors), its answer unreadable');
  await page.close();
  const line = await loggedStatus('POST', '/v1/locks/web/no-cors/acquire');
  assert.ok(line, 'the write is in the access log');
  assert.match(line, / 403 /, line);
  assert.equal((await server.call('GET', '/v1/locks/web/no-cors')).body.held, false);
});

for (const name of ['127.0.0.1', 'localhost', 'lg.test']) {
  test(`the dashboard works on ${name}`, async () => {
    const { page, res } = await pageOn(name);
    assert.equal(res.status(), 200);
    await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null,
                               { timeout: 5000 });
    await page.waitForFunction(() => [...document.querySelectorAll('#locks tr[data-name]')]
      .some(t => t.dataset.name === 'prod/db-migration'), null, { timeout: 5000 });
    await page.close();
  });
}
