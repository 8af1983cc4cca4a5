// The package from CommonJS and from ES modules, by its name (through the exports map):
// the same classes either way, and what it hands out goes through JSON.stringify.
// No server needed.
//
// Run: node --test clients/node/test/modules.test.cjs

const assert = require("node:assert/strict");
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { test } = require("node:test");

const PACKAGE = path.resolve(__dirname, "..");
const CHECKOUT = path.resolve(PACKAGE, "..", "..");

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

/** Every file and folder under dir, but node_modules and .git (relative paths, sorted). */
function tree(dir, base = dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === "node_modules" || entry.name === ".git" || entry.name === "build") continue;
    const full = path.join(dir, entry.name);
    out.push(path.relative(base, full));
    if (entry.isDirectory() && !entry.isSymbolicLink()) out.push(...tree(full, base));
  }
  return out.sort();
}

test("installed as the README says, it works and the checkout gains no file (issue 39)", (t) => {
  let npm;
  try {
    npm = execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim();
  } catch {
    t.skip("npm is missing (scripts/deps.sh --test installs it)");
    return;
  }
  // The README's commands, with its placeholders filled in: a project of one's own, and
  // the path of this checkout.
  const readme = fs.readFileSync(path.join(PACKAGE, "README.md"), "utf8");
  const install = readme.split("## Install")[1].match(/```sh\n([\s\S]*?)```/)[1];
  const lines = install.split("\n").map((l) => l.replace(/\s+#.*$/, "").trim()).filter(Boolean);
  assert.deepEqual(lines, ["cd my-service", "npm install /path/to/leasegate/clients/node"]);
  const project = fs.mkdtempSync(path.join(os.tmpdir(), "leasegate-npm-"));
  t.after(() => fs.rmSync(project, { recursive: true, force: true }));
  const before = { root: tree(CHECKOUT, CHECKOUT).filter((f) => !f.includes(path.sep)), pkg: tree(PACKAGE) };
  execFileSync(npm, ["install", lines[1].split(" ")[2].replace("/path/to/leasegate", CHECKOUT), "--offline",
    "--no-audit", "--no-fund", "--loglevel=error"], { cwd: project, stdio: ["ignore", "ignore", "pipe"] });
  assert.deepEqual(tree(PACKAGE), before.pkg, "npm wrote into clients/node");
  assert.deepEqual(tree(CHECKOUT, CHECKOUT).filter((f) => !f.includes(path.sep)), before.root,
    "npm wrote into the checkout's root");
  assert.ok(fs.existsSync(path.join(project, "package.json")));
  const out = execFileSync(process.execPath, ["-e",
    "const c = require('leasegate'); import('leasegate').then((m) => console.log(m.Client === c.Client))"],
  { cwd: project, encoding: "utf8" });
  assert.equal(out.trim(), "true");
});
