// Tasks an upstream runs itself, through interlock: server-everything's
// simulate-research-query requires a task (2025-11-25 experimental tasks).
// The client of 2025-11-25 (SDK 1.x) sees only the gateway's task id, owned
// by its identity; tasks/get, tasks/result and tasks/cancel about it reach
// the upstream and come back under the gateway's id; another identity is
// told the id does not exist; the question the upstream asks during
// tasks/result reaches the client that asked, about the gateway's id. All
// of it with server-everything as a stdio child and reached over streamable
// HTTP. A call that waits for approval first is a task of the gateway's
// until bob decides: approved, it goes on as the upstream's task under the
// same id; denied, it ends with DECLINED and never reaches the upstream.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
  GetTaskResultSchema,
  ListTasksResultSchema,
} from '@modelcontextprotocol/sdk/types.js';

import {
  EVERYTHING,
  SDK1,
  assertGatewayError,
  startEverythingHttp,
  startHttp,
  startStdio,
  tempDataDir,
  withDir,
  withKey,
} from './harness.mjs';

const SLOW = { timeout: 60_000 };
const RELATED = 'io.modelcontextprotocol/related-task';
const TOOL = 'simulate-research-query';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

// alice and bob are in different tenants; alice@other has alice's name in
// bob's tenant, so ownership must be by tenant and principal both. An
// approver is named in the tenant of the call: bob@acme decides alice's.
const KEYS = {
  alice: { key: 'alice-key', principal: 'alice', tenant: 'acme' },
  bob: { key: 'bob-key', principal: 'bob', tenant: 'other' },
  'alice@other': { key: 'alice-other-key', principal: 'alice', tenant: 'other' },
  'bob@acme': { key: 'bob-acme-key', principal: 'bob', tenant: 'acme' },
};

// upstream is { command } or { url }; with approval, TOOL waits for bob.
function writeConfig(dir, upstream, { approval = false } = {}) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    [
      'upstreams:',
      '  - name: everything',
      upstream.url
        ? `    url: ${JSON.stringify(upstream.url)}`
        : `    command: [${upstream.command.map((x) => JSON.stringify(x)).join(', ')}]`,
      'auth:',
      '  keys:',
      ...Object.values(KEYS).map(
        (k) => `    - {sha256: ${sha256(k.key)}, principal: ${k.principal}, tenant: ${k.tenant}}`,
      ),
      'rules:',
      ...(approval
        ? [
            '  - name: research-needs-approval',
            `    match: {upstream: everything, tools: [${TOOL}]}`,
            '    mode: approval',
            '    approvers: [bob]',
          ]
        : []),
      // The gate is not under test otherwise: let every tool of the upstream run.
      '  - name: everything-runs',
      '    match: {upstream: everything, tools: ["*"]}',
      '    mode: allow',
      '',
    ].join('\n'),
  );
  return path;
}


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

// Another client on the same HTTP gateway, as who; setup, if given, is
// called with the client before it connects.
async function connectAs(url, who, setup) {
  const client = new SDK1.Client({ name: 'interlock-interop', version: '1.0.0' }, CLIENT_OPTIONS);
  setup?.(client);
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

// Polls tasks/get until the task ends; returns its last state. Each state
// polled is pushed on trail.
async function settle(client, taskId, ms = 30_000, trail = []) {
  const end = Date.now() + ms;
  let task;
  do {
    task = await getTask(client, taskId);
    trail.push(task);
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


// The two ways the gateway reaches server-everything. start() returns
// { config, close() }: config is the upstream's entry.
const UPSTREAMS = [
  {
    title: 'server-everything as a stdio child',
    start: async () => ({ config: { command: [process.execPath, EVERYTHING, 'stdio'] }, close: async () => {} }),
  },
  {
    title: 'server-everything over streamable HTTP',
    start: async () => {
      const server = await startEverythingHttp();
      return { config: { url: server.url }, close: server.close };
    },
  },
];

// The approval of the call of TOOL, with id, as who sees it over REST.
async function approvalAs(base, who, id) {
  const res = await fetch(new URL(`/v1/approvals/${id}`, base), { headers: { Authorization: `Bearer ${KEYS[who].key}` } });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

// bob@acme decides (approve or deny) the approval id over REST, once he
// sees it among the pending ones he may decide.
async function bobDecides(base, id, decision) {
  const auth = { Authorization: `Bearer ${KEYS['bob@acme'].key}` };
  const res = await fetch(new URL('/v1/approvals', base), { headers: auth });
  assert.equal(res.status, 200, await res.clone().text());
  const body = await res.json();
  const pending = body.approvals ?? body;
  assert.ok(
    pending.some((a) => a.id === id && a.tool === TOOL),
    `bob may decide ${id}: ${JSON.stringify(pending)}`,
  );
  const decided = await fetch(new URL(`/v1/approvals/${id}/${decision}`, base), {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ reason: `interop: ${decision}` }),
  });
  assert.equal(decided.status, 200, await decided.clone().text());
}

// Starts interlock on transport in front of upstream with the test's
// configuration, alice connected (her key over HTTP; over stdio the caller
// is the OS user).
async function startGateway(transport, upstream, seen, config) {
  const dir = tempDataDir();
  const opts = {
    dryRun: 'false',
    extraArgs: ['--config', writeConfig(dir, upstream, config)],
    clientOptions: CLIENT_OPTIONS,
    setup: aliceSetup(seen),
  };
  return withDir(dir, transport === 'stdio' ? startStdio(opts) : startHttp({ ...opts, fetch: withKey(KEYS.alice.key) }));
}

// Before the suite's tests, starts up and then the gateway that start
// returns in front of it; after them, closes both.
function gatewayInFrontOf(up, start) {
  let upstream;
  let gw;
  before(async () => {
    upstream = await up.start();
    gw = await start(upstream);
  }, SLOW);
  after(async () => {
    try {
      await gw?.close();
    } finally {
      await upstream?.close();
    }
  });
}

for (const { up, transport } of UPSTREAMS.flatMap((up) => ['http', 'stdio'].map((transport) => ({ up, transport })))) {
  const label = transport === 'http' ? 'streamable HTTP with sessions' : 'serve --stdio';

  describe(`an upstream's own tasks through interlock: client 1.x (2025-11-25), ${label}, ${up.title}`, () => {
    let gw;
    const seen = [];
    gatewayInFrontOf(up, async (upstream) => (gw = await startGateway(transport, upstream.config, seen)));

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

    if (transport === 'http') {
      it("two tenants' tasks in flight at once on the one upstream link: each upstream question reaches its own client, about its own task", SLOW, async () => {
        // alice of acme and alice of other: the same principal's name in
        // two tenants, each answering the question with an interpretation
        // of her own.
        const parties = [
          { who: 'alice', answer: 'programming', seen: [] },
          { who: 'alice@other', answer: 'snake', seen: [] },
        ];
        for (const p of parties) {
          p.conn = await connectAs(gw.url, p.who, (client) => {
            client.setRequestHandler(ElicitRequestSchema, (req) => {
              p.seen.push(req.params);
              return { action: 'accept', content: { interpretation: p.answer } };
            });
          });
        }
        try {
          const created = await Promise.all(
            parties.map((p) => startTask(p.conn.client, { topic: 'python', ambiguous: true })),
          );
          parties.forEach((p, i) => {
            p.id = created[i].task.taskId;
            assert.match(p.id, /^tsk_/, `${p.who}'s task id is the gateway's: ${JSON.stringify(created[i])}`);
          });
          assert.notEqual(parties[0].id, parties[1].id, 'each call has a task of its own');

          // Both tasks/result wait at once; each task's question comes while they do.
          const results = await Promise.all(parties.map((p) => taskResult(p.conn.client, p.id)));

          const asked = JSON.stringify(parties.map((p) => ({ who: p.who, id: p.id, seen: p.seen })));
          parties.forEach((p, i) => {
            const other = parties[1 - i];
            assert.equal(p.seen.length, 1, `${p.who} is asked once, about her own task: ${asked}`);
            const about = p.seen[0]._meta?.[RELATED]?.taskId;
            assert.equal(about, p.id, `${p.who}'s question is tied to her own gateway task id: ${asked}`);
            assert.notEqual(about, other.id, `${p.who} is asked about ${other.who}'s task: ${asked}`);
            assert.match(p.seen[0].message, /python/);

            const text = reportText(results[i]);
            assert.ok(
              text.includes(`Research Report: python (${p.answer})`),
              `${p.who}'s report carries her clarification: ${text.slice(0, 300)}`,
            );
            assert.ok(text.includes(`**Clarification**: ${p.answer}`), `${p.who}: ${text.slice(0, 300)}`);
            assert.ok(
              !text.includes(`python (${other.answer})`) && !text.includes(`**Clarification**: ${other.answer}`),
              `${p.who}'s report carries ${other.who}'s clarification: ${text.slice(0, 300)}`,
            );
            assert.equal(results[i]._meta?.[RELATED]?.taskId, p.id, `${p.who}'s tasks/result is tied to her task`);
          });
        } finally {
          await Promise.all(parties.map((p) => p.conn?.close()));
        }
      });
    }
  });
}

// How server-everything's research task tells its stages.
const UPSTREAM_STAGE = /^(Gathering sources|Analyzing content|Synthesizing findings|Generating report)\.\.\.$/;

// The REST face that decides approvals is the HTTP gateway's.
for (const up of UPSTREAMS) {
  describe(`approval, then the upstream's task: client 1.x (2025-11-25), streamable HTTP with sessions, ${up.title}`, () => {
    let gw;
    const seen = [];
    gatewayInFrontOf(up, async (upstream) => (gw = await startGateway('http', upstream.config, seen, { approval: true })));

    // The task the call waits as, checked as the table of docs/modes.md
    // says while the approval waits; returns its id and the approval's.
    async function waitingTask(args) {
      const created = await startTask(gw.client, args);
      const id = created.task.taskId;
      assert.match(id, /^tsk_/, `the task id is the gateway's: ${JSON.stringify(created)}`);
      assert.equal(created.task.status, 'working', JSON.stringify(created));
      assert.match(created.task.statusMessage ?? '', /waits for approval by bob; it has not run/, JSON.stringify(created));
      const approvalId = /\bapr_[\w-]+/.exec(created.task.statusMessage)?.[0];
      assert.ok(approvalId, `the status message names the approval: ${created.task.statusMessage}`);

      // Nothing was passed on yet: the gateway's task still waits on the
      // approval, which nobody decided.
      const first = await getTask(gw.client, id);
      assert.equal(first.taskId, id);
      assert.equal(first.status, 'working', JSON.stringify(first));
      assert.match(first.statusMessage ?? '', /waits for approval/, JSON.stringify(first));
      assert.ok(first.statusMessage.includes(approvalId), first.statusMessage);
      assert.equal((await approvalAs(gw.url, 'alice', approvalId)).state, 'pending');
      return { id, approvalId };
    }

    it(`a task-augmented call of ${TOOL} waits for approval as the gateway's task, and once bob approves goes on as the upstream's under the same id`, SLOW, async () => {
      const { id, approvalId } = await waitingTask({ topic: 'mcp' });
      await bobDecides(gw.url, approvalId, 'approve');

      const trail = [];
      const last = await settle(gw.client, id, 30_000, trail);
      assert.equal(last.status, 'completed', JSON.stringify(last));
      // The research takes server-everything four stages of a second, each
      // told in its task's status message: polls answered with them were
      // passed on to the upstream's task.
      const relayed = trail.findIndex((t) => UPSTREAM_STAGE.test(t.statusMessage ?? ''));
      assert.ok(relayed >= 0, `no poll showed the upstream's progress: ${JSON.stringify(trail)}`);
      assert.ok(
        trail.slice(relayed).every((t) => !/approval/.test(t.statusMessage ?? '')),
        `once the upstream's task stands, no poll waits for approval again: ${JSON.stringify(trail)}`,
      );
      const res = await taskResult(gw.client, id);
      assert.match(reportText(res), /Research Report: mcp/);
      assert.equal(res._meta?.[RELATED]?.taskId, id, `tasks/result is tied to the gateway's id: ${JSON.stringify(res._meta)}`);
      assert.equal((await approvalAs(gw.url, 'bob@acme', approvalId)).state, 'consumed', 'the approval was used, once');
    });

    it('bob denies: the task ends failed (2025-11-25 words for an error result), and tasks/result gives DECLINED', SLOW, async () => {
      // Other arguments than the approved call's: they ask for an approval of their own.
      const { id, approvalId } = await waitingTask({ topic: 'denied research' });
      await bobDecides(gw.url, approvalId, 'deny');

      const last = await settle(gw.client, id);
      assert.equal(last.status, 'failed', JSON.stringify(last));
      const res = await taskResult(gw.client, id);
      const sc = assertGatewayError(res, 'DECLINED');
      assert.doesNotMatch(JSON.stringify(res.content), /Research Report/, 'the denied call never ran');
      assert.equal(res._meta?.[RELATED]?.taskId, id, `tasks/result is tied to the gateway's id: ${JSON.stringify(res._meta)}`);
      assert.equal(sc.retriable, false, JSON.stringify(sc));
      assert.equal(seen.length, 0, `nothing asked alice anything: ${JSON.stringify(seen)}`);
    });
  });
}
