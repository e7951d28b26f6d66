// Tasks an upstream runs itself, through interlock: server-everything's
// simulate-research-query requires a task (2025-11-25 experimental tasks).
// The client of 2025-11-25 (SDK 1.x) sees only the gateway's task id, owned
// by its identity; tasks/get, tasks/result and tasks/cancel about it reach
// the upstream and come back under the gateway's id; another identity is
// told the id does not exist; the question the upstream asks during
// tasks/result reaches the client that asked, about the gateway's id.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
  GetTaskResultSchema,
  ListTasksResultSchema,
} from '@modelcontextprotocol/sdk/types.js';

import { SDK1, removeDir, startHttp, startStdio, tempDataDir } from './harness.mjs';

const SLOW = { timeout: 60_000 };
const RELATED = 'io.modelcontextprotocol/related-task';
const TOOL = 'simulate-research-query';
const EVERYTHING = fileURLToPath(
  new URL('./node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
);
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

// alice and bob are in different tenants; alice@other has alice's name in
// bob's tenant, so ownership must be by tenant and principal both.
const KEYS = {
  alice: { key: 'alice-key', principal: 'alice', tenant: 'acme' },
  bob: { key: 'bob-key', principal: 'bob', tenant: 'other' },
  'alice@other': { key: 'alice-other-key', principal: 'alice', tenant: 'other' },
};

function writeConfig(dir) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    [
      'upstreams:',
      '  - name: everything',
      `    command: [${[process.execPath, EVERYTHING, 'stdio'].map((x) => JSON.stringify(x)).join(', ')}]`,
      'auth:',
      '  keys:',
      ...Object.values(KEYS).map(
        (k) => `    - {sha256: ${sha256(k.key)}, principal: ${k.principal}, tenant: ${k.tenant}}`,
      ),
      // The gate is not under test here: let every tool of the upstream run.
      'rules:',
      '  - name: everything-runs',
      '    match: {upstream: everything, tools: ["*"]}',
      '    mode: allow',
      '',
    ].join('\n'),
  );
  return path;
}

// A fetch that sends key as the bearer credential.
const withKey = (key) => (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${key}`);
  return fetch(url, { ...init, headers });
};

// What alice's client answers when asked to clarify: server-everything
// offers programming, snake and comedy for "python".
const CLARIFICATION = 'programming';

function aliceSetup(seen) {
  return (client) => {
    client.setRequestHandler(ElicitRequestSchema, (req) => {
      seen.push(req.params);
      return { action: 'accept', content: { interpretation: CLARIFICATION } };
    });
  };
}

const CLIENT_OPTIONS = { capabilities: { elicitation: { form: {} } } };

// Another client on the same HTTP gateway, as who.
async function connectAs(url, who) {
  const client = new SDK1.Client({ name: 'interlock-interop', version: '1.0.0' }, CLIENT_OPTIONS);
  const transport = new SDK1.StreamableHTTPClientTransport(url, { fetch: withKey(KEYS[who].key) });
  await client.connect(transport);
  return {
    client,
    async close() {
      if (transport.sessionId) await transport.terminateSession().catch(() => {});
      await client.close();
    },
  };
}

function startTask(client, args) {
  return client.request(
    { method: 'tools/call', params: { name: TOOL, arguments: args, task: { ttl: 60_000 } } },
    CreateTaskResultSchema,
  );
}

const getTask = (client, taskId) => client.request({ method: 'tasks/get', params: { taskId } }, GetTaskResultSchema);
const taskResult = (client, taskId) =>
  client.request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema, { timeout: 45_000 });
const cancelTask = (client, taskId) =>
  client.request({ method: 'tasks/cancel', params: { taskId } }, CancelTaskResultSchema);

// Polls tasks/get until the task ends; returns its last state.
async function settle(client, taskId, ms = 30_000) {
  const end = Date.now() + ms;
  let task;
  do {
    task = await getTask(client, taskId);
    assert.equal(task.taskId, taskId, 'tasks/get answers with the id the client knows');
    if (['completed', 'failed', 'cancelled'].includes(task.status)) return task;
    await new Promise((r) => setTimeout(r, 250));
  } while (Date.now() < end);
  assert.fail(`task ${taskId} did not end within ${ms} ms: ${JSON.stringify(task)}`);
}

// The error a request fails with, as { code, message, data }.
async function errorOf(promise) {
  try {
    const res = await promise;
    assert.fail(`expected an error, got ${JSON.stringify(res)}`);
  } catch (err) {
    if (err instanceof assert.AssertionError) throw err;
    return { code: err.code, message: err.message, data: err.data };
  }
}

function reportText(res) {
  assert.notEqual(res.isError, true, `the tool failed: ${JSON.stringify(res).slice(0, 500)}`);
  const texts = res.content.filter((c) => c.type === 'text').map((c) => c.text);
  assert.ok(texts.length > 0, `no text content: ${JSON.stringify(res.content)}`);
  return texts.join('\n');
}

// Starts interlock on transport with the test's configuration, alice
// connected (her key over HTTP; over stdio the caller is the OS user).
async function startGateway(transport, seen) {
  const dir = tempDataDir();
  const opts = {
    dryRun: 'false',
    extraArgs: ['--config', writeConfig(dir)],
    clientOptions: CLIENT_OPTIONS,
    setup: aliceSetup(seen),
  };
  const gw = await (transport === 'stdio'
    ? startStdio(opts)
    : startHttp({ ...opts, fetch: withKey(KEYS.alice.key) })
  ).catch((err) => {
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

for (const transport of ['http', 'stdio']) {
  const label = transport === 'http' ? 'streamable HTTP with sessions' : 'serve --stdio';

  describe(`an upstream's own tasks through interlock: client 1.x (2025-11-25), ${label}, server-everything as a stdio child`, () => {
    let gw;
    const seen = [];

    before(async () => {
      gw = await startGateway(transport, seen);
    });

    after(async () => {
      await gw?.close();
    });

    it(`${TOOL} requires a task, and the call answers with the gateway's task`, SLOW, async () => {
      const { tools } = await gw.client.listTools();
      assert.equal(tools.find((t) => t.name === TOOL)?.execution?.taskSupport, 'required');

      const created = await startTask(gw.client, { topic: 'mcp' });
      const id = created.task.taskId;
      assert.match(id, /^tsk_/, `the task id is the gateway's: ${JSON.stringify(created)}`);
      assert.ok(['working', 'completed'].includes(created.task.status), JSON.stringify(created));

      const last = await settle(gw.client, id);
      assert.equal(last.status, 'completed', JSON.stringify(last));

      const res = await taskResult(gw.client, id);
      assert.match(reportText(res), /Research Report: mcp/);
      assert.equal(res._meta?.[RELATED]?.taskId, id, `tasks/result is tied to the gateway's id: ${JSON.stringify(res._meta)}`);
    });

    if (transport === 'http') {
      // Over stdio there is one caller, the OS user: no other identity to try.
      for (const intruder of ['bob', 'alice@other']) {
        it(`${intruder} (${KEYS[intruder].principal} in tenant ${KEYS[intruder].tenant}) is told alice's task does not exist, as for an id that never was`, SLOW, async () => {
          const created = await startTask(gw.client, { topic: 'mcp' });
          const id = created.task.taskId;
          assert.match(id, /^tsk_/);
          const other = await connectAs(gw.url, intruder);
          try {
            for (const [method, ask] of [
              ['tasks/get', getTask],
              ['tasks/result', taskResult],
              ['tasks/cancel', cancelTask],
            ]) {
              const theirs = await errorOf(ask(other.client, id));
              const none = await errorOf(ask(other.client, 'tsk_doesnotexist'));
              assert.equal(none.code, -32602, `${method} of an unknown id: ${JSON.stringify(none)}`);
              assert.match(none.message, /no task with this id/, `${method} of an unknown id: ${JSON.stringify(none)}`);
              assert.deepEqual(theirs, none, `${method} of alice's task by ${intruder} must fail as an unknown id does`);
            }
            const listed = await other.client.request({ method: 'tasks/list', params: {} }, ListTasksResultSchema);
            assert.ok(!listed.tasks.some((t) => t.taskId === id), `${intruder}'s tasks/list shows alice's task: ${JSON.stringify(listed)}`);
          } finally {
            await other.close();
          }
          // The cancel did not reach alice's task: it completes as before.
          const last = await settle(gw.client, id);
          assert.equal(last.status, 'completed', JSON.stringify(last));
          assert.match(reportText(await taskResult(gw.client, id)), /Research Report: mcp/);
        });
      }
    }

    it("the upstream's question during tasks/result reaches the client, about the gateway's task id", SLOW, async () => {
      seen.length = 0;
      const created = await startTask(gw.client, { topic: 'python', ambiguous: true });
      const id = created.task.taskId;
      assert.match(id, /^tsk_/);

      // tasks/result waits for the task to end; the question comes while it waits.
      const res = await taskResult(gw.client, id);
      assert.equal(seen.length, 1, `the client is asked once: ${JSON.stringify(seen)}`);
      // server-everything ties its question to its task; the client must
      // see the tie, under the gateway's id, never the upstream's.
      assert.equal(seen[0]._meta?.[RELATED]?.taskId, id, `the question is tied to the gateway's id: ${JSON.stringify(seen[0]._meta)}`);
      assert.match(seen[0].message, /python/);

      const text = reportText(res);
      assert.match(text, /Research Report: python \(programming\)/);
      assert.match(text, /\*\*Clarification\*\*: programming/);
      assert.equal(res._meta?.[RELATED]?.taskId, id);
      assert.equal((await getTask(gw.client, id)).status, 'completed');
    });
  });
}
