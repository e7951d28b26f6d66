// The harness of the console's browser tests: start `interlock serve`, act
// as the agent over the REST face or over MCP, and drive Debian's Chromium
// headless with playwright-core.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, constants, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { chromium } from 'playwright-core';

// A missing binary or browser is a failure, never a skip: a suite that
// silently runs nothing proves nothing.
function executable(name, path) {
  if (!path) throw new Error(`${name} is not set: build the gateway and point INTERLOCK_BIN at it`);
  try {
    accessSync(path, constants.X_OK);
  } catch (err) {
    throw new Error(`${name}=${path} is not an executable file (${err.code ?? err.message}); on Debian: apt-get install -y chromium`);
  }
  return path;
}

export const BIN = executable('INTERLOCK_BIN', process.env.INTERLOCK_BIN);
export const CHROMIUM = executable('CHROMIUM', process.env.CHROMIUM || '/usr/bin/chromium');
export const T = { timeout: 60_000 };

// Screenshots of each state go to SCREENSHOTS, or a temporary directory.
export const SHOTS = process.env.SCREENSHOTS || mkdtempSync(join(tmpdir(), 'interlock-console-shots-'));
mkdirSync(SHOTS, { recursive: true });

export async function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

// listening waits until a page's live updates are connected: a change made
// before then sends the page no event.
export function listening(page) {
  return page.locator('html[data-live="open"]').waitFor();
}

export async function screenshot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

export function sha256(text) {
  return createHash('sha256').update(text).digest('hex');
}

// serve starts `interlock serve` with dry run off on a free loopback port
// and reads its banner. config is YAML text; without it the built-in
// config (the demo) is used.
export async function serve({ config } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'interlock-console-'));
  const args = ['serve', '--listen', '127.0.0.1:0', '--data', dir];
  if (config) {
    writeFileSync(join(dir, 'interlock.yaml'), config(dir));
    args.push('--config', join(dir, 'interlock.yaml'));
  }
  const env = { ...process.env, MCP_DRY_RUN: 'false' };
  const child = spawn(BIN, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let banner = '';
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`interlock serve did not start:\n${banner}`)), 20_000);
    child.stderr.on('data', (chunk) => {
      banner += chunk;
      const serving = banner.match(/serving\s+(http:\/\/\S+)\/mcp/);
      const console = banner.match(/console\s+(http:\/\/\S+)/);
      if (serving && console) {
        clearTimeout(timer);
        resolve({ base: serving[1], console: console[1] });
      }
    });
    child.on('exit', (code) => reject(new Error(`interlock serve exited with ${code}:\n${banner}`)));
  });
  const { base, console } = await ready;
  return {
    base,
    // The one-time link, when the gateway has no API keys.
    link: console.includes('once=') ? console : undefined,
    async close() {
      const exited = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// call is the agent's tool call over the REST face; key is its API key.
export async function call(gw, tool, args, key) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const res = await fetch(`${gw.base}/v1/tools/${tool}/call`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ arguments: args }),
  });
  return { status: res.status, body: await res.json() };
}

// Protocol 2026-07-28 has no session: each request carries the client's
// version, identity and capabilities in _meta. This client declares MCP's
// tasks extension, so a call that waits for approval answers a task.
const TASKS_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'console-e2e-agent', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
};
let rpcIds = 0;

// mcp is one JSON-RPC request of that protocol over streamable HTTP, as
// the agent's client sends it, and returns the JSON-RPC answer. The
// protocol wants the method and the tool or task it names in headers too,
// so the request is refused without them.
export async function mcp(gw, method, params, key) {
  const headers = {
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    'Mcp-Protocol-Version': TASKS_META['io.modelcontextprotocol/protocolVersion'],
    'Mcp-Method': method,
    'Mcp-Name': params.name ?? params.taskId ?? '',
  };
  if (key) headers.Authorization = `Bearer ${key}`;
  const res = await fetch(`${gw.base}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcIds, method, params: { ...params, _meta: TASKS_META } }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  // The answer is the body, or the last event of a stream.
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    return JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1).slice(6));
  }
  return JSON.parse(text);
}

// callAsTask calls tool over MCP and asserts that the call became a task
// waiting for approval; it returns the task and the approval page its
// status message points approvers to.
export async function callAsTask(gw, tool, args, key) {
  const answer = await mcp(gw, 'tools/call', { name: tool, arguments: args }, key);
  const t = answer.result;
  assert.equal(t?.resultType, 'task', JSON.stringify(answer));
  assert.equal(t.status, 'working');
  assert.match(t.taskId, /^tsk_/);
  const url = t.statusMessage.match(/Approvers decide it at (http\S+)\.$/)?.[1];
  assert.match(url ?? '', /\/console\/approvals\/apr_[\w-]+$/, `the status message names the approval page: ${t.statusMessage}`);
  return { task: t, approvalUrl: url };
}

// settled polls tasks/get as the agent's client does, a little faster
// than the task's pollIntervalMs, until the task is no longer working, and
// returns it. The poll that finds the approval decided starts the call
// and answers at once, so the task is seen working for a poll or two more.
export async function settled(gw, taskId, key) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const answer = await mcp(gw, 'tasks/get', { taskId }, key);
    assert.equal(answer.error, undefined, JSON.stringify(answer));
    if (answer.result.status !== 'working' || Date.now() > deadline) return answer.result;
    await sleep(50);
  }
}

// pending asserts that a call waits for approval and returns its body.
export function assertPending(res) {
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.code, 'APPROVAL_PENDING');
  assert.match(res.body.approval_id, /^apr_/);
  return res.body;
}

// invoice returns one invoice of a customer as the demo holds it.
export async function invoice(gw, customer, id, key) {
  const res = await call(gw, 'list_invoices', { customer_id: customer }, key);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.structuredContent.invoices.find((i) => i.id === id);
}

// signIn signs in on the console's form with an API key.
export async function signIn(page, gw, key) {
  await page.goto(`${gw.base}/console/`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('Signed in as').waitFor();
}
