// Saves docs/dashboard.png: the dashboard at a laptop's size with a few locks held (some with
// metadata, one reentered, one with a value), one with two waiters (long-poll acquires), and
// that lock's detail; a semaphore's permits held by two leases; an election with a candidate.
//
//   node tests/browser/screenshot.mjs [OUT.png]       (LEASEGATE_BIN defaults to build/leasegate)
import { join } from 'node:path';
import { missingPrerequisite, repoRoot, Server, launchBrowser } from './lib.mjs';

const missing = missingPrerequisite();
if (missing) {
  console.error(`screenshot: ${missing}`);
  process.exit(77);
}
const out = process.argv[2] || join(repoRoot, 'docs', 'dashboard.png');
const sleep = ms => new Promise(r => setTimeout(r, ms));

const server = await new Server().start();
const hangUp = new AbortController();
let browser;
try {
  // A history for the chart: a few grants of one lock, each released.
  for (const owner of ['runner-a', 'runner-b', 'runner-a', 'runner-c']) {
    const g = await server.acquire('jobs/nightly', { owner });
    await server.acquire('cache/warmup', { owner: 'warmer' }).then(w => server.release('cache/warmup', w.lease));
    await server.release('jobs/nightly', g.lease);
    await sleep(1100);   // a second apart, so the chart's time axis reads well
  }
  await server.acquire('orders/42', { owner: 'billing-7f3', ttl_ms: 30000,
                                      metadata: { host: 'billing-7f3.prod', pid: 4121, why: 'settle invoice 42' } });
  const q3 = await server.acquire('reports/q3.csv', { owner: 'exporter', ttl_ms: 120000, metadata: { job: 'quarterly' } });
  await server.acquire('reports/q3.csv', { lease: q3.lease });   // reentered: count 2
  await server.acquire('orders/77', { owner: 'billing-2c1', ttl_ms: 15000 });
  // A checkpoint left by the last holder of a lock, permits held in one lease, and an election.
  const etl = await server.acquire('etl/orders', { owner: 'etl-3', ttl_ms: 60000 });
  await server.call('PUT', '/v1/locks/etl/orders/value', { lease: etl.lease, value: { offset: 81920, file: 'orders-07.log' } });
  await server.call('POST', '/v1/semaphores/gpu/pool/acquire', { owner: 'trainer-1', limit: 8, permits: 4, ttl_ms: 600000 });
  await server.call('POST', '/v1/semaphores/gpu/pool/acquire', { owner: 'eval-2', limit: 8, permits: 2, ttl_ms: 600000 });
  await server.call('POST', '/v1/elections/scheduler/campaign',
                    { owner: 'sched-a', value: { url: 'http://10.0.0.7:8080' }, ttl_ms: 600000 });
  const candidate = server.call('POST', '/v1/elections/scheduler/campaign',
                                { owner: 'sched-b', value: { url: 'http://10.0.0.8:8080' }, wait_ms: 60000 },
                                { signal: hangUp.signal, timeoutMs: 70000 }).catch(() => null);
  await server.acquire('jobs/nightly', { owner: 'runner-b', ttl_ms: 600000, metadata: { host: 'batch-1' } });
  const waiters = ['runner-c', 'runner-a'].map(owner =>
    server.acquire('jobs/nightly', { owner, wait_ms: 60000 }, { signal: hangUp.signal }).catch(() => null));
  await server.waitForWaiters('jobs/nightly', 2);

  browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.route(url => !url.href.startsWith(server.url), route => route.abort());
  await page.goto(server.url + '/');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'live', null, { timeout: 5000 });
  await page.getByRole('button', { name: 'Show metadata of orders/42' }).click();
  await page.getByRole('button', { name: 'Open lock jobs/nightly' }).click();
  await page.waitForFunction(() => document.querySelectorAll('#chart circle').length >= 5, null, { timeout: 5000 });
  // Some traffic for the rates, which need two samples of /metrics, 2 s apart.
  for (let i = 0; i < 20; i++)
    await server.acquire('cache/warmup', { owner: 'warmer' }).then(w => server.release('cache/warmup', w.lease));
  await server.acquire('cache/ping', { owner: 'pinger', ttl_ms: 200 });
  await sleep(2200);
  await page.waitForFunction(() => document.getElementById('t-grants').textContent !== '—', null, { timeout: 6000 });
  await page.screenshot({ path: out, fullPage: true });
  console.log(`screenshot: saved ${out}`);
  hangUp.abort();
  await Promise.all([...waiters, candidate]);
} finally {
  hangUp.abort();
  await browser?.close();
  await server.cleanup();
}
