/** Test support: a real onceqd on an ephemeral port with a fresh temp data
 * dir (the binary from $ONCEQD, else ../../build/cmd/onceqd), and helpers. */

import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { accessSync, constants, mkdtempSync, openSync, closeSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const PKG_ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const REPO = join(PKG_ROOT, "..", "..");
const READY = "onceqd listening on ";

export function onceqdBinary(): string {
  const path = process.env.ONCEQD || join(REPO, "build", "cmd", "onceqd");
  accessSync(path, constants.X_OK);
  return path;
}

export interface Server {
  url: string;
  port: number;
  proc: ChildProcess;
  logTail(): string;
  stop(): Promise<void>;
}

export async function startServer(extra: string[] = [], tls?: { cert: string; key: string }): Promise<Server> {
  const root = mkdtempSync(join(tmpdir(), "onceq-ts-"));
  const logPath = join(root, "server.log");
  const logFd = openSync(logPath, "a");
  const args = ["--listen", "127.0.0.1:0", "--data-dir", join(root, "data"), "--fsync", "none", "--log-level", "warn", ...extra];
  if (tls) args.push("--tls-cert", tls.cert, "--tls-key", tls.key);
  const proc = spawn(onceqdBinary(), args, { stdio: ["ignore", "pipe", logFd] });
  closeSync(logFd);
  const logTail = () => {
    try {
      return readFileSync(logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  };
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await exited;
    }
    rmSync(root, { recursive: true, force: true });
  };
  const lines = createInterface({ input: proc.stdout! });
  const line = await new Promise<string>((resolve) => {
    const t = setTimeout(() => resolve(""), 20000);
    lines.once("line", (l) => {
      clearTimeout(t);
      resolve(l);
    });
    proc.once("exit", () => resolve(""));
  });
  if (!line.startsWith(READY)) {
    await stop();
    throw new Error(`onceqd did not start: ${JSON.stringify(line)}; log:\n${logTail()}`);
  }
  lines.on("line", () => {}); // keep draining stdout
  const port = Number(line.slice(line.lastIndexOf(":") + 1));
  return { url: `${tls ? "https" : "http"}://127.0.0.1:${port}`, port, proc, logTail, stop };
}

export const unique = (prefix = "t") => `${prefix}-${randomUUID().slice(0, 10)}`;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function waitUntil(pred: () => boolean | Promise<boolean>, timeoutMs = 10000, intervalMs = 50): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await pred()) return true;
    await sleep(intervalMs);
  }
  return pred();
}

export interface WorkerEvent {
  event: string;
  [k: string]: any;
}

/** A worker in its own Node process (dist/test/worker_proc.js), printing JSON events. */
export class WorkerProcess {
  readonly proc: ChildProcess;
  readonly events: WorkerEvent[] = [];
  stderr = "";
  private readonly exited: Promise<number | null>;

  constructor(url: string, topic: string, group: string, owner: string, ...args: string[]) {
    this.proc = spawn(process.execPath, [join(PKG_ROOT, "dist", "test", "worker_proc.js"), url, topic, group, owner, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    createInterface({ input: this.proc.stdout! }).on("line", (l) => this.events.push(JSON.parse(l)));
    this.proc.stderr!.on("data", (d) => (this.stderr += d));
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }

  async waitEvent(kind: string, timeoutMs = 15000): Promise<WorkerEvent> {
    let found: WorkerEvent | undefined;
    await waitUntil(() => (found = this.events.find((e) => e.event === kind)) !== undefined, timeoutMs, 20);
    if (!found) throw new Error(`no ${kind} event in ${timeoutMs} ms; events ${JSON.stringify(this.events)}; stderr ${this.stderr.slice(-2000)}`);
    return found;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(sig);
  }

  async wait(timeoutMs: number): Promise<number | null> {
    return Promise.race([this.exited, sleep(timeoutMs).then(() => { throw new Error(`worker did not exit in ${timeoutMs} ms`); })]);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGKILL");
      await this.exited;
    }
  }
}
