// The dashboard (web/index.html) in a real browser: headless Debian Chromium driven by
// playwright-core, against the real binary on 127.0.0.1. Exits 77 (ctest: skipped) only
// when Chromium or tests/browser/node_modules are absent.
//
//   node tests/browser/dashboard.test.mjs          (LEASEGATE_BIN defaults to build/leasegate)
import { missingPrerequisite } from './lib.mjs';

const missing = missingPrerequisite();
if (missing) {
  console.log(`SKIP browser_dashboard: ${missing}`);
  process.exit(77);
}

const { test, before, after } = await import('node:test');
const assert = (await import('node:assert/strict')).default;
const { Server, keyFile, launchBrowser } = await import('./lib.mjs');
const { rmSync } = await import('node:fs');

// What the issue asks: changes show within a second of the API answering.
const LIVE_MS = 1000;
const sleep = ms => new Promise(r => setTimeout(r, ms));

let server, browser, page;
const pageErrors = [];

before(async () => {
  server = await new Server().start();
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(10000);
  page.on('pageerror', e => pageErrors.push(String(e)));
  // The page must reach nothing but the server.
  await page.route(url => !url.href.startsWith(server.url), route => route.abort());
});

after(async () => {
  await browser?.close();
  await server?.cleanup();
});

/** The row of one lock as the page shows it, or null. */
function row(name) {
  return page.evaluate(n => {
    const tr = [...document.querySelectorAll('#locks tr[data-name]')].find(t => t.dataset.name === n);
    if (!tr) return null;
    const cell = c => tr.querySelector(`td[data-col=${c}]`).textContent;
    return { mode: cell('mode'), owner: cell('owner'), token: cell('token'), left: cell('left'), count: cell('count'),
             waiters: cell('waiters'), value: cell('value') };
  }, name);
}

/** The row of one election as the page shows it, or null. */
function electionRow(name) {
  return page.evaluate(n => {
    const tr = [...document.querySelectorAll('#elections tr[data-name]')].find(t => t.dataset.name === n);
    if (!tr) return null;
    const cell = c => tr.querySelector(`td[data-col=${c}]`).textContent;
    return { leader: cell('leader'), term: cell('term'), value: cell('value'), candidates: cell('candidates'),
             vacant: cell('vacant') };
  }, name);
}

/** The row of one semaphore as the page shows it, or null. */
function semRow(name) {
  return page.evaluate(n => {
    const tr = [...document.querySelectorAll('#sems tr[data-name]')].find(t => t.dataset.name === n);
    if (!tr) return null;
    const cell = c => tr.querySelector(`td[data-col=${c}]`).textContent;
    return { permits: cell('permits'), holders: cell('holders'), waiters: cell('waiters'), token: cell('token') };
  }, name);
}

/** Waits (bounded) until pred(row(name)) holds (of a semaphore's row with read = semRow);
 *  returns how long it took. */
async function waitForRow(name, pred, timeoutMs, what, read = row) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 <= timeoutMs) {
    last = await read(name);
    if (pred(last)) return Date.now() - t0;
    await sleep(25);
  }
  assert.fail(`${what}: not shown within ${timeoutMs} ms (row: ${JSON.stringify(last)})`);
}

const shownNames = () => page.$$eval('#locks tr[data-name]', trs => trs.map(t => t.dataset.name));
const status = () => page.textContent('#status');

test('the page loads and goes live', async () => {
  const res = await page.goto(server.url + '/');
  assert.equal(res.status(), 200);
  assert.equal(await page.title(), 'leasegate');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 5000 });
  assert.match(await page.textContent('#locks'), /No locks yet/);
  assert.equal(await page.isVisible('#auth'), false, 'this server needs no key: the key form stays hidden');
});

test('an acquired lock appears with owner and token, and its countdown runs', async () => {
  const g = await server.acquire('orders/42', { owner: 'billing-1', ttl_ms: 60000, metadata: { host: 'web-3' } });
  await waitForRow('orders/42', r => r && r.owner === 'billing-1' && r.token === String(g.token), LIVE_MS, 'the grant');
  const first = parseFloat((await row('orders/42')).left);
  assert.ok(first > 55 && first <= 60, `time left ${first} s of a 60 s lease`);
  await sleep(700);
  const second = parseFloat((await row('orders/42')).left);
  assert.ok(second < first, `the countdown moved from ${first} to ${second}`);
  // Never re-entered: no reentries (it showed 1, the API's count of grant and reentries).
  assert.equal((await row('orders/42')).count, '0');

  // Metadata on expand, through the button's accessible name.
  await page.getByRole('button', { name: 'Show metadata of orders/42' }).click();
  assert.match(await page.textContent('#locks tr.meta'), /"host": "web-3"/);
  await page.getByRole('button', { name: 'Hide metadata of orders/42' }).click();
  assert.equal(await page.$('#locks tr.meta'), null);

  // A reentry shows as one; release shows within a second.
  await server.acquire('orders/42', { lease: g.lease });
  await waitForRow('orders/42', r => r.count === '1', LIVE_MS, 'the reentry');
  await server.release('orders/42', g.lease);
  await server.release('orders/42', g.lease);
  await waitForRow('orders/42', r => r.owner === 'free', LIVE_MS, 'the release');
});

test('an expiry shows within a second of the lease running out', async () => {
  const g = await server.acquire('short/1', { owner: 'brief', ttl_ms: 600 });
  await waitForRow('short/1', r => r && r.owner === 'brief', LIVE_MS, 'the grant');
  await sleep(Math.max(0, g.expires_at_ms - Date.now()));
  await waitForRow('short/1', r => r.owner === 'free', LIVE_MS, 'the expiry');
});

test('the prefix filter lists and follows only its locks', async () => {
  const a = await server.acquire('alpha/1', { owner: 'a1' });
  const b = await server.acquire('beta/1', { owner: 'b1' });
  await waitForRow('beta/1', r => r && r.owner === 'b1', LIVE_MS, 'beta/1');
  await page.getByLabel('Filter by name prefix').fill('alpha/');
  await page.waitForFunction(() => [...document.querySelectorAll('#locks tr[data-name]')]
    .every(t => t.dataset.name.startsWith('alpha/')), null, { timeout: 3000 });
  assert.deepEqual(await shownNames(), ['alpha/1']);
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 3000 });
  await server.acquire('alpha/2', { owner: 'a2' });
  await server.acquire('beta/2', { owner: 'b2' });
  await waitForRow('alpha/2', r => r && r.owner === 'a2', LIVE_MS, 'alpha/2 under the filter');
  assert.deepEqual(await shownNames(), ['alpha/1', 'alpha/2']);

  await page.getByLabel('Filter by name prefix').fill('');
  await waitForRow('beta/2', r => r && r.owner === 'b2', 3000, 'beta/2 after clearing the filter');
  assert.deepEqual(await shownNames(), ['alpha/1', 'alpha/2', 'beta/1', 'beta/2', 'orders/42', 'short/1']);
  await server.release('alpha/1', a.lease);
  await server.release('beta/1', b.lease);
});

test('one lock: its queue, its history and the chart of its tokens', async () => {
  const first = await server.acquire('jobs/nightly', { owner: 'runner-a', ttl_ms: 60000 });
  const hangUp = new AbortController();
  const waiting = ['runner-b', 'runner-c'].map(owner =>
    server.acquire('jobs/nightly', { owner, wait_ms: 20000 }, { signal: hangUp.signal }).catch(e => e));
  await server.waitForWaiters('jobs/nightly', 2);
  await waitForRow('jobs/nightly', r => r && r.waiters === '2', LIVE_MS, 'two waiters');

  await page.getByRole('button', { name: 'Open lock jobs/nightly' }).click();
  const detail = page.locator('#detail');
  await detail.waitFor({ state: 'visible', timeout: 2000 });
  assert.equal(await page.textContent('#detail-h'), 'Lock jobs/nightly');
  // The queue by name when the server lists it, else its length.
  await page.waitForFunction(() => /2 waiting/.test(document.getElementById('detail-queue').textContent), null,
                             { timeout: 2000 });
  const queue = await page.textContent('#detail-queue');
  if (queue.includes('runner-')) assert.ok(queue.indexOf('runner-b') < queue.indexOf('runner-c'), queue);

  // History: the holder's grant; after a release, the next one's too, and two points on the chart.
  await page.waitForFunction(t => document.getElementById('detail-history').textContent.includes('runner-a'),
                             first.token, { timeout: 2000 });
  await server.release('jobs/nightly', first.lease);
  const second = await waiting[0];
  assert.equal(second.owner, 'runner-b');
  await page.waitForFunction(() => document.querySelectorAll('#detail-history tr').length === 2 &&
                                   document.querySelectorAll('#chart circle').length === 2, null, { timeout: 2000 });
  const history = await page.$$eval('#detail-history tr', trs => trs.map(t => [...t.cells].map(c => c.textContent)));
  assert.deepEqual(history.map(h => [h[0], h[1], h[4]]),
                   [[String(second.token), 'runner-b', 'holding'], [String(first.token), 'runner-a', 'released']]);
  await page.waitForFunction(() => /1 waiting/.test(document.getElementById('detail-queue').textContent), null,
                             { timeout: 2000 });

  hangUp.abort();   // runner-c hangs up: it leaves the queue
  await Promise.all(waiting);
  await server.release('jobs/nightly', second.lease);
  await waitForRow('jobs/nightly', r => r.owner === 'free' && r.waiters === '0', 2000, 'the queue emptied');
  await page.getByRole('button', { name: 'Close lock details' }).click();
  assert.equal(await detail.isVisible(), false);
});

test('readers, a lock-delay and semaphores show live', async () => {
  const first = await server.acquire('shared/1', { owner: 'reader-a', mode: 'read', ttl_ms: 60000 });
  const second = await server.acquire('shared/1', { owner: 'reader-b', mode: 'read', ttl_ms: 60000 });
  await waitForRow('shared/1', r => r && r.mode === 'read' && r.owner === 'reader-a +1 reader' &&
                   r.token === String(first.token), LIVE_MS, 'two readers');
  await page.getByRole('button', { name: 'Open lock shared/1' }).click();
  await page.waitForFunction(() => {
    const facts = document.getElementById('detail-facts').textContent;
    return /read \(shared\)/.test(facts) && facts.indexOf('reader-a') < facts.indexOf('reader-b — token');
  }, null, { timeout: 2000 });
  await page.getByRole('button', { name: 'Close lock details' }).click();
  await server.release('shared/1', first.lease);
  await waitForRow('shared/1', r => r.owner === 'reader-b' && r.token === String(second.token), LIVE_MS,
                   'the oldest reader left');
  await server.release('shared/1', second.lease);
  await waitForRow('shared/1', r => r.owner === 'free' && r.mode === '—', LIVE_MS, 'the last reader left');

  // A lease that expires with a lock-delay leaves the lock free but not grantable.
  await server.acquire('delayed/1', { owner: 'crashed', ttl_ms: 300, lock_delay_ms: 30000 });
  await waitForRow('delayed/1', r => r && r.owner === 'free (lock-delay)' && /^delay /.test(r.left), 5000,
                   'the lock-delay after the expiry');

  const take = async owner => {
    const r = await server.call('POST', '/v1/semaphores/pool/db/acquire', { owner, limit: 3, ttl_ms: 60000 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body;
  };
  const p1 = await take('worker-1');
  const p2 = await take('worker-2');
  await waitForRow('pool/db', s => s && s.permits === '2 / 3' && /worker-1 \(token \d+.*worker-2/.test(s.holders),
                   LIVE_MS, 'two permits', semRow);
  assert.equal((await semRow('pool/db')).token, String(p2.token));
  assert.equal(await row('pool/db'), null, 'a semaphore is not a lock');
  await page.waitForFunction(() => document.getElementById('t-permits').textContent === '2', null, { timeout: 5000 });
  for (const p of [p1, p2])
    assert.equal((await server.call('POST', '/v1/semaphores/pool/db/release', { lease: p.lease })).status, 200);
  await waitForRow('pool/db', s => s.permits === '0 / 3' && s.holders === 'none', LIVE_MS, 'the permits back',
                   semRow);
});

test("a lock's value, a lease of several permits and an election show live", async () => {
  // A value: its version in the lock's row, the value itself in its details.
  const holder = await server.acquire('valued/1', { owner: 'etl', ttl_ms: 60000 });
  let r = await server.call('PUT', '/v1/locks/valued/1/value', { lease: holder.lease, value: { offset: 41 } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await waitForRow('valued/1', l => l && l.value === 'v1', LIVE_MS, 'the value written');
  await page.getByRole('button', { name: 'Open lock valued/1' }).click();
  await page.waitForFunction(() => /"offset": 41/.test(document.getElementById('detail-facts').textContent) &&
    /value version1 \(written by token \d+\)/.test(document.getElementById('detail-facts').textContent), null,
  { timeout: 2000 });
  await page.getByRole('button', { name: 'Close lock details' }).click();
  await server.release('valued/1', holder.lease);
  await waitForRow('valued/1', l => l.owner === 'free' && l.value === 'v1', LIVE_MS, 'the value outlives its holder');

  // Three permits in one lease count as three of the five.
  r = await server.call('POST', '/v1/semaphores/pool/gpu/acquire', { owner: 'trainer', limit: 5, permits: 3, ttl_ms: 60000 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const trainer = r.body;
  await waitForRow('pool/gpu', s => s && s.permits === '3 / 5' && /^trainer ×3 \(token \d+/.test(s.holders), LIVE_MS,
                   'three permits in one lease', semRow);

  // An election: its leader, term and value; a candidate; a proclaimed value; the handover;
  // the vacancy.
  r = await server.call('POST', '/v1/elections/sched/main/campaign', { owner: 'sched-1', value: { url: 'http://a' },
                                                                       ttl_ms: 60000 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const first = r.body;
  await waitForRow('sched/main', e => e && /^sched-1 \(since /.test(e.leader) && e.term === String(first.term) &&
                   e.value === '{"url":"http://a"}' && e.candidates === '0', LIVE_MS, 'the leader', electionRow);
  await page.waitForFunction(() => document.getElementById('t-led').textContent === '1', null, { timeout: 5000 });
  const second = server.call('POST', '/v1/elections/sched/main/campaign', { owner: 'sched-2', value: 'b',
                                                                            ttl_ms: 60000, wait_ms: 20000 },
                             { timeoutMs: 30000 });
  await waitForRow('sched/main', e => e.candidates === '1 (next: sched-2)', LIVE_MS, 'a candidate', electionRow);
  r = await server.call('POST', '/v1/elections/sched/main/proclaim', { lease: first.lease, value: { url: 'http://a2' } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await waitForRow('sched/main', e => e.value === '{"url":"http://a2"}', LIVE_MS, 'the proclaimed value', electionRow);
  assert.equal((await server.call('POST', '/v1/elections/sched/main/resign', { lease: first.lease })).status, 200);
  const next = (await second).body;
  await waitForRow('sched/main', e => /^sched-2 /.test(e.leader) && e.term === String(next.term) && e.value === '"b"' &&
                   e.candidates === '0', LIVE_MS, 'the next leader', electionRow);
  assert.equal((await server.call('POST', '/v1/elections/sched/main/resign', { lease: next.lease })).status, 200);
  await waitForRow('sched/main', e => e.leader === 'vacant' && e.vacant !== '—' && e.term === String(next.term),
                   LIVE_MS, 'the vacancy', electionRow);
  assert.equal((await server.call('POST', '/v1/semaphores/pool/gpu/release', { lease: trainer.lease })).status, 200);
  await waitForRow('pool/gpu', s => s.permits === '0 / 5', LIVE_MS, 'the permits back', semRow);
});

test('the totals come from /metrics', async () => {
  // Two samples 2 s apart give the rates; wait for the second.
  await page.waitForFunction(() => document.getElementById('t-grants').textContent !== '—', null, { timeout: 6000 });
  assert.match(await page.textContent('#t-held'), /^\d+$/);
  assert.match(await page.textContent('#t-waiters'), /^\d+$/);
  assert.match(await page.textContent('#t-grants'), /^\d+\.\d$/);
  assert.match(await page.textContent('#t-expiries'), /^\d+\.\d$/);
  assert.match(await page.textContent('#t-commit'), /^\d+\.\d\d ms$/);
});

test('a 410 too_old makes the page list again and carry on from latest', async () => {
  // The server answers 410 when the page fell behind its ring; here the next long-poll gets
  // one, with a lock changed meanwhile that only a new listing can show.
  let latest = null;
  const listings = [];
  const onRequest = r => { if (new URL(r.url()).pathname === '/v1/locks') listings.push(r.url()); };
  page.on('request', onRequest);
  const longPoll = u => u.pathname === '/v1/events' && u.searchParams.get('wait_ms') === '25000';
  await page.route(longPoll, async route => {
    if (latest !== null) return route.continue();
    await server.acquire('missed/1', { owner: 'unseen' });
    latest = (await server.call('GET', '/v1/events?after=0&limit=1')).body.latest;
    await route.fulfill({ status: 410, contentType: 'application/json',
      body: JSON.stringify({ error: 'too_old', message: 'no longer kept', oldest: latest, latest }) });
  });
  try {
    const g = await server.acquire('trigger/1', { owner: 'trigger' });   // the page's next poll gets the 410
    await waitForRow('missed/1', r => r && r.owner === 'unseen', 3000, 'the lock changed while the page missed events');
    assert.ok(listings.length >= 1, 'the page listed the locks again');
    await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 3000 });
    await server.release('trigger/1', g.lease);
    await waitForRow('trigger/1', r => r.owner === 'free', LIVE_MS, 'a release after the resync');
  } finally {
    page.off('request', onRequest);
    await page.unroute(longPoll);
  }
});

test('the page survives a server restart', async () => {
  const kept = await server.acquire('kept/1', { owner: 'survivor', ttl_ms: 60000 });
  await waitForRow('kept/1', r => r && r.owner === 'survivor', LIVE_MS, 'kept/1');
  const permit = await server.call('POST', '/v1/semaphores/kept/sem/acquire', { owner: 'survivor', limit: 2 });
  assert.equal(permit.status, 200);
  await waitForRow('kept/sem', s => s && s.holders.startsWith('survivor (token'), LIVE_MS, 'a permit', semRow);
  await server.stop();
  await page.waitForFunction(() => document.getElementById('status').textContent === 'reconnecting…', null,
                             { timeout: 5000 });
  await server.start();   // same port, same data
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 10000 });
  // The lease survived the restart, and the page follows the new server's events.
  assert.equal((await row('kept/1')).token, String(kept.token));
  // A listing counts a semaphore's holders without naming them.
  await waitForRow('kept/sem', s => s && s.permits === '1 / 2' && s.holders === '1 holder', LIVE_MS,
                   'a permit listed after the restart', semRow);
  const g = await server.acquire('after/restart', { owner: 'newcomer' });
  await waitForRow('after/restart', r => r && r.owner === 'newcomer' && r.token === String(g.token), LIVE_MS,
                   'a grant after the restart');
  await server.release('kept/1', kept.lease);
  await waitForRow('kept/1', r => r.owner === 'free', LIVE_MS, 'a release after the restart');
});

test('with --auth-file and --auth-metrics the page opens, asks for a key, keeps it in the tab and sends it', async () => {
  const keys = keyFile('client', 'p/');
  const keyed = await new Server({ extraArgs: ['--auth-file', keys.path, '--auth-metrics'], key: keys.key }).start();
  const tab = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  try {
    tab.on('pageerror', e => pageErrors.push(String(e)));
    await tab.route(url => !url.href.startsWith(keyed.url), route => route.abort());
    // A browser cannot send a Bearer key when it opens a page: `/` stays open under
    // --auth-metrics (before, it answered 401 and the dashboard could not be opened at all).
    const opened = await tab.goto(keyed.url + '/');
    assert.equal(opened.status(), 200);
    await tab.waitForFunction(() => document.getElementById('status').textContent === 'key needed', null,
                              { timeout: 5000 });
    assert.equal(await tab.isVisible('#auth'), true);
    await tab.waitForFunction(() => document.getElementById('t-held').textContent === '—', null, { timeout: 5000 });
    await tab.getByLabel('API key').fill(keys.key);
    await tab.getByLabel('Lock prefix').fill('p/');
    await tab.getByRole('button', { name: 'Show locks' }).click();
    await tab.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 5000 });
    assert.equal(await tab.isVisible('#auth'), false);
    assert.equal(await tab.inputValue('#filter'), 'p/');
    await keyed.acquire('p/1', { owner: 'keyed' });
    await tab.waitForFunction(() => [...document.querySelectorAll('#locks tr[data-name]')]
      .some(t => t.dataset.name === 'p/1' && t.textContent.includes('keyed')), null, { timeout: LIVE_MS });
    // With the key, /metrics (closed by --auth-metrics) answers: the totals show numbers.
    await tab.waitForFunction(() => /^[0-9]/.test(document.getElementById('t-held').textContent), null,
                              { timeout: 5000 });
    // The key stays in this tab: a reload goes live without asking again.
    await tab.reload();
    await tab.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 5000 });
  } finally {
    await tab.close();
    await keyed.cleanup();
    rmSync(keys.dir, { recursive: true, force: true });
  }
});

test('a phone-sized screen scrolls only inside the table, and every control has a name', async () => {
  await page.setViewportSize({ width: 375, height: 740 });
  await sleep(100);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `the page is ${width} px wide at 375 px`);
  const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, input')].filter(e => {
    if (e.closest('[hidden]')) return false;
    const label = e.getAttribute('aria-label') || (e.labels && [...e.labels].map(l => l.textContent).join('')) ||
                  e.textContent;
    return !label.trim();
  }).map(e => e.outerHTML));
  assert.deepEqual(unnamed, []);
  assert.deepEqual(pageErrors, []);
});
