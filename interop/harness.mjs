// The harness of the interop tests: start interlock over stdio or
// streamable HTTP with an official TypeScript MCP client (SDK 1.x by
// default, or the 2.x client package), and check the shape of interlock's
// structured error results.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import {
  Client as Client2,
  StreamableHTTPClientTransport as StreamableHTTPClientTransport2,
} from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioClientTransport2 } from '@modelcontextprotocol/client/stdio';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

// The gateway binary under test. A missing INTERLOCK_BIN is a failure, never
// a skip: a suite that silently runs nothing proves nothing.
export const BIN = (() => {
  const bin = process.env.INTERLOCK_BIN;
  if (!bin) {
    throw new Error(
      'INTERLOCK_BIN is not set. Build the gateway and point INTERLOCK_BIN at it, e.g.\n' +
        '  (cd .. && go build -o /tmp/il-interop ./cmd/interlock) && INTERLOCK_BIN=/tmp/il-interop npm test',
    );
  }
  try {
    accessSync(bin, constants.X_OK);
  } catch (err) {
    throw new Error(`INTERLOCK_BIN=${bin} is not an executable file (${err.code ?? err.message})`);
  }
  return bin;
})();

export const TEST_TIMEOUT = 30_000;

// The preview tools the built-in policy names (get_service, preview_reminder,
// quote_plan_change, quote_refund) are read-only too.
export const READ_ONLY_TOOLS = [
  'get_customer',
  'get_service',
  'list_customers',
  'list_invoices',
  'preview_reminder',
  'quote_plan_change',
  'quote_refund',
];
export const GATED_TOOLS = [
  'delete_customer',
  'downgrade_plan',
  'promote_release',
  'refund_invoice',
  'send_reminder',
  'upgrade_plan',
];
export const ALL_TOOLS = [...READ_ONLY_TOOLS, ...GATED_TOOLS].sort();

// The built-in policy's modes: flag tools take `__confirm: true`, token tools
// take `__confirm_token` (the confirm-token handshake), elicit tools ask a
// human in a form and take `__confirm_token` only for their token fallback.
// refund_invoice over $1,000 waits for an approver's decision (mode approval).
export const FLAG_TOOLS = ['send_reminder'];
export const TOKEN_TOOLS = ['downgrade_plan', 'refund_invoice', 'upgrade_plan'];
export const ELICIT_TOOLS = ['delete_customer', 'promote_release'];

// How the recovery hints of a DRY_RUN_PREVIEW start (interlock.FlagHint,
// interlock.TokenDryRunHint and interlock.ElicitDryRunHint in Go); a flag
// hint goes on to say what the agent can do about the missing keys.
export const FLAG_HINT = 'Set MCP_DRY_RUN=false AND pass __confirm:true to actually execute';
// With dry run off, only the agent's key is missing.
export const FLAG_DRY_RUN_OFF_HINT = 'Pass __confirm:true to actually execute';
export const TOKEN_DRY_RUN_HINT =
  'Set MCP_DRY_RUN=false AND call again without __confirm_token to get a confirm token; ' +
  'show its summary to the user and pass it back as __confirm_token only after they agree';
export const ELICIT_DRY_RUN_HINT =
  'Set MCP_DRY_RUN=false AND call again: the user will be asked to confirm in a form ' +
  '(or, where the client cannot show one, you will get a confirm token to show them)';
export const APPROVAL_DRY_RUN_HINT =
  'Set MCP_DRY_RUN=false AND call again: the call will wait for approval by the people the policy names';
export const RECOVERY_HINT = FLAG_HINT;

// The two TypeScript clients under test. SDK1 is `@modelcontextprotocol/sdk`
// 1.x (protocol 2025-11-25: elicitation is a server-to-client request);
// SDK2 is `@modelcontextprotocol/client` 2.x, which speaks 2026-07-28 once
// versionNegotiation asks for it (elicitation rides in `input_required`
// results, multi round-trip requests).
export const SDK1 = {
  name: '@modelcontextprotocol/sdk 1.x',
  Client,
  StdioClientTransport,
  StreamableHTTPClientTransport,
};
export const SDK2 = {
  name: '@modelcontextprotocol/client 2.x',
  Client: Client2,
  StdioClientTransport: StdioClientTransport2,
  StreamableHTTPClientTransport: StreamableHTTPClientTransport2,
};

// A fresh state directory per gateway, so tests never share the demo database.
export function tempDataDir() {
  return mkdtempSync(join(tmpdir(), 'interlock-interop-'));
}

export function removeDir(dir) {
  if (dir) rmSync(dir, { recursive: true, force: true });
}

// withDir waits for a gateway started on dir (its state and config) and
// makes its close() remove dir too; dir is removed at once if it did not
// start.
export async function withDir(dir, starting) {
  const gw = await starting.catch((err) => {
    removeDir(dir);
    throw err;
  });
  const close = gw.close.bind(gw);
  gw.close = async () => {
    try {
      await close();
    } finally {
      removeDir(dir);
    }
  };
  return gw;
}

// withKey is a fetch that sends key as the bearer credential.
export const withKey = (key) => (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${key}`);
  return fetch(url, { ...init, headers });
};

// The environment for a child gateway: the caller's, without MCP_DRY_RUN
// unless dryRun is given (a string, set verbatim).
function childEnv(dryRun) {
  const env = { ...process.env };
  delete env.MCP_DRY_RUN;
  if (dryRun !== undefined) env.MCP_DRY_RUN = dryRun;
  return env;
}

// A client of the given SDK with clientOptions (capabilities,
// versionNegotiation, …); setup(client), if given, runs before connecting
// (to register request handlers such as elicitation/create).
function newClient(sdk, clientOptions, setup) {
  const client = new sdk.Client({ name: 'interlock-interop', version: '1.0.0' }, clientOptions);
  setup?.(client);
  return client;
}

// Starts `interlock serve --stdio` through the SDK's StdioClientTransport and
// connects a client. Returns { client, transport, stderr(), close() }.
export async function startStdio({ dryRun, extraArgs = [], sdk = SDK1, clientOptions, setup } = {}) {
  const dataDir = tempDataDir();
  const transport = new sdk.StdioClientTransport({
    command: BIN,
    args: ['serve', '--stdio', '--data', dataDir, ...extraArgs],
    env: childEnv(dryRun),
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  const client = newClient(sdk, clientOptions, setup);
  try {
    await client.connect(transport);
  } catch (err) {
    await transport.close().catch(() => {});
    removeDir(dataDir);
    throw new Error(`could not connect over stdio: ${err.message}\n--- gateway stderr ---\n${stderr}`);
  }
  const pid = transport.pid;
  return {
    client,
    transport,
    pid,
    stderr: () => stderr,
    async close() {
      try {
        await client.close();
      } finally {
        // client.close() ends stdin, then SIGTERM, then SIGKILL; make sure.
        if (pid && isAlive(pid)) process.kill(pid, 'SIGKILL');
        removeDir(dataDir);
      }
    },
  };
}

export function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Starts `interlock serve --listen 127.0.0.1:0` as a child process, reads the
// URL from its stderr banner and connects a client over streamable HTTP.
// fetch, if given, is handed to the SDK transport (to observe requests).
export async function startHttp({ dryRun, stateless = false, extraArgs = [], fetch, sdk = SDK1, clientOptions, setup } = {}) {
  const dataDir = tempDataDir();
  const args = ['serve', '--listen', '127.0.0.1:0', '--data', dataDir, ...extraArgs];
  if (stateless) args.push('--stateless');
  const child = spawn(BIN, args, { env: childEnv(dryRun), stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));

  const killChild = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    removeDir(dataDir);
  };

  let url;
  try {
    url = await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no "serving http://…/mcp" line on stderr within 15 s`)),
        15_000,
      );
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
        const m = /^\s*serving\s+(http:\/\/\S+\/mcp)\b/m.exec(stderr);
        if (m) {
          clearTimeout(timer);
          resolve(new URL(m[1]));
        }
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`gateway exited early (code ${code}, signal ${signal})`));
      });
    });
  } catch (err) {
    await killChild();
    throw new Error(`${err.message}\n--- gateway stderr ---\n${stderr}`);
  }

  const transport = new sdk.StreamableHTTPClientTransport(url, fetch ? { fetch } : undefined);
  const client = newClient(sdk, clientOptions, setup);
  try {
    await client.connect(transport);
  } catch (err) {
    await killChild();
    throw new Error(`could not connect to ${url}: ${err.message}\n--- gateway stderr ---\n${stderr}`);
  }
  return {
    client,
    transport,
    url,
    child,
    stderr: () => stderr,
    async close() {
      try {
        if (transport.sessionId) await transport.terminateSession();
        await client.close();
      } finally {
        await killChild();
      }
    },
  };
}

// Go error text that must never reach a client.
const GO_ERROR_TEXT = /(\.go:\d+|goroutine \d|panic:|runtime error|json: cannot|unexpected end of JSON|%!|<nil>)/;

// Asserts that result is one of interlock's structured errors with the given
// code: isError, structuredContent with code/retriable/message/recovery_hint,
// and the same JSON again in a text content block. Returns structuredContent.
export function assertGatewayError(result, code) {
  assert.equal(result.isError, true, `expected isError: true, got ${JSON.stringify(result)}`);
  const sc = result.structuredContent;
  assert.ok(sc && typeof sc === 'object', `expected structuredContent, got ${JSON.stringify(result)}`);
  assert.equal(sc.code, code, `expected code ${code}, got ${JSON.stringify(sc)}`);
  assert.equal(typeof sc.retriable, 'boolean', 'retriable must be a boolean');
  assert.equal(typeof sc.message, 'string');
  assert.ok(sc.message.length > 0, 'message must not be empty');
  assert.equal(typeof sc.recovery_hint, 'string');
  assert.ok(sc.recovery_hint.length > 0, 'recovery_hint must not be empty');
  assert.doesNotMatch(sc.message, GO_ERROR_TEXT, 'message leaks Go error text');
  assert.doesNotMatch(sc.recovery_hint, GO_ERROR_TEXT, 'recovery_hint leaks Go error text');

  assert.ok(Array.isArray(result.content), 'content must be an array');
  const texts = result.content.filter((c) => c.type === 'text');
  assert.ok(texts.length >= 1, `expected a text content block, got ${JSON.stringify(result.content)}`);
  const parsed = texts.map((t) => {
    try {
      return JSON.parse(t.text);
    } catch {
      return undefined;
    }
  });
  assert.ok(
    parsed.some((p) => p !== undefined && isDeepEqual(p, sc)),
    `no text block carries the same JSON as structuredContent: ${JSON.stringify(result.content)}`,
  );
  return sc;
}

// Asserts a DRY_RUN_PREVIEW for the given arguments (preview = args without
// the meta-arguments __confirm and __confirm_token) with the given recovery
// hint (the flag-mode hint unless told). A preview never carries a confirm
// token. Returns structuredContent.
export function assertPreview(result, args, hint = FLAG_HINT) {
  const sc = assertGatewayError(result, 'DRY_RUN_PREVIEW');
  assert.equal(sc.retriable, false);
  assert.ok(sc.recovery_hint.startsWith(hint), `hint ${JSON.stringify(sc.recovery_hint)} must start with ${JSON.stringify(hint)}`);
  const expected = { ...args };
  delete expected.__confirm;
  delete expected.__confirm_token;
  assert.deepEqual(sc.preview, expected, 'preview must be the arguments without the meta-arguments');
  assert.ok(!('__confirm' in sc.preview), 'preview must not contain __confirm');
  assert.ok(!('__confirm_token' in sc.preview), 'preview must not contain __confirm_token');
  assert.equal(typeof sc.summary, 'string');
  assert.ok(sc.summary.length > 0, 'summary must not be empty');
  for (const key of ['confirm_token', 'confirm_required', 'ttl_seconds', 'expires_at']) {
    assert.ok(!(key in sc), `a dry-run preview must not carry ${key}: ${JSON.stringify(sc)}`);
  }
  return sc;
}

// Changes one character in the middle of a confirm token or request state
// to another one of the base64url alphabet.
// Asserts that a call ran: no error, structured upstream output.
export function assertRan(res) {
  assert.notEqual(res.isError, true, `expected the call to run, got ${JSON.stringify(res)}`);
  const sc = res.structuredContent;
  assert.ok(sc && typeof sc === 'object', `expected structuredContent, got ${JSON.stringify(res)}`);
  assert.ok(!('code' in sc), `an executed call is not a gateway error: ${JSON.stringify(sc)}`);
  return sc;
}

export function tamper(token) {
  const i = Math.floor(token.length / 2);
  const replacement = token[i] === 'A' ? 'B' : 'A';
  const out = token.slice(0, i) + replacement + token.slice(i + 1);
  assert.notEqual(out, token);
  assert.equal(out.length, token.length);
  return out;
}

function isDeepEqual(a, b) {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

// EVERYTHING is server-everything's entry point, for a stdio child or a
// streamable HTTP server (startEverythingHttp).
export const EVERYTHING = fileURLToPath(
  new URL('./node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.once('error', reject);
  });
}

// startEverythingHttp starts server-everything over streamable HTTP, on a free
// port. Returns { url, close }.
export async function startEverythingHttp() {
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  await new Promise((resolve, reject) => {
    // A loaded machine may take a while; one that did not listen in time
    // is stopped, or it would keep the test process alive.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server-everything did not listen within 30 s: ${err}`));
    }, 30_000);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      err += d;
      if (/listening on port/.test(err)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server-everything exited (${code}): ${err}`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      if (child.exitCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await gone;
      }
    },
  };
}
