// The package from CommonJS and from ES modules, by its name (through the exports map):
// the same classes either way, and what it hands out goes through JSON.stringify.
// No server needed.
//
// Run: node --test clients/node/test/modules.test.cjs

const assert = require("node:assert/strict");
const { test } = require("node:test");

test("require and import give the same objects", async () => {
  const required = require("leasegate");
  const imported = await import("leasegate");
  const names = Object.keys(required).sort();
  assert.ok(names.includes("Client") && names.includes("TLSVerificationError") && names.includes("ensureOk"));
  for (const name of names) assert.equal(imported[name], required[name], name);
  assert.deepEqual(Object.keys(imported).filter((n) => n !== "default").sort(), names);
  const client = new required.Client({ servers: "http://127.0.0.1:9" });
  assert.ok(client instanceof imported.Client);
  assert.equal(require("leasegate/package.json").name, "leasegate");
});

test("a bare number as a duration is a TypeError from either entry", async () => {
  const { Client } = await import("leasegate");
  assert.throws(() => new Client({ servers: "http://127.0.0.1:9", timeout: 5 }), TypeError);
  await assert.rejects(new (require("leasegate").Client)({ servers: "http://127.0.0.1:9" }).acquire("x", { ttl: 30 }),
    TypeError);
});
