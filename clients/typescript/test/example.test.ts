/** The payments example runs end to end, from the source tree and from the
 * package `npm pack` makes, installed in an empty project. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { PKG_ROOT, type Server, startServer } from "./support.js";

describe("examples", () => {
  let server: Server;
  before(async () => {
    server = await startServer();
  });
  after(async () => server.stop());

  it("payments demo: a worker killed mid-payment charges nobody twice", () => {
    const out = execFileSync(process.execPath, [join(PKG_ROOT, "dist", "examples", "payments.js"), "demo", "--url", server.url], {
      timeout: 90000,
    }).toString();
    assert.match(out, /nobody was charged twice/);
    assert.match(out, /replayed, card NOT charged again/);
  });

  it("npm pack makes a package that installs and runs the example", () => {
    const dir = mkdtempSync(join(tmpdir(), "onceq-ts-pack-"));
    try {
      const tgz = execFileSync("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", dir], { cwd: PKG_ROOT })
        .toString()
        .trim()
        .split("\n")
        .pop()!;
      const app = join(dir, "app");
      execFileSync("mkdir", ["-p", app]);
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", type: "module", private: true }));
      execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--silent", join(dir, tgz)], { cwd: app });
      // The package by its name, from a user's own module:
      writeFileSync(join(app, "main.js"), `import { Client, Worker, Fenced } from "@onceq/client";
        console.log(typeof Client, typeof Worker, typeof Fenced, (await new Client(process.argv[2]).healthz()).ok);`);
      assert.equal(execFileSync(process.execPath, ["main.js", server.url], { cwd: app }).toString().trim(), "function function function true");
      const out = execFileSync(process.execPath, [join(app, "node_modules", "@onceq", "client", "dist", "examples", "payments.js"), "demo", "--url", server.url], {
        cwd: app,
        timeout: 90000,
      }).toString();
      assert.match(out, /nobody was charged twice/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
