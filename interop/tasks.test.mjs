// Approvals and forms as tasks, driven by the official 2.x client and the
// tasks extension's requester package (@modelcontextprotocol/ext-tasks): a
// call that waits for approval becomes a task the client settles by
// polling, without calling again; an approver decides over REST. A call
// whose rule asks a human by a form becomes an input_required task the
// requester answers with tasks/update through its input handler. Another
// tenant's identity can neither see nor answer the task.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createApplicationInputHandler, createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';

import {
  BIN,
  SDK2,
  TEST_TIMEOUT,
  assertGatewayError,
  assertRan,
  startHttp,
  tempDataDir,
  withDir,
  withKey,
} from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };
const MRTR = '2026-07-28';
const CLIENT_INFO = { name: 'interlock-interop', version: '1.0.0' };
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const TASKS_EXT = 'io.modelcontextprotocol/tasks';
const FORM_ID = 'interlock_confirm';

// The _meta of a raw request of 2026-07-28 with the client's capabilities.
const v2Meta = (clientCapabilities = {}) => ({
  'io.modelcontextprotocol/protocolVersion': MRTR,
  'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
  'io.modelcontextprotocol/clientCapabilities': clientCapabilities,
});

function writeConfig(dir) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    [
      'upstreams:',
      '  - name: billing',
      `    command: [${JSON.stringify(BIN)}, demo, --db, ${JSON.stringify(join(dir, 'demo.db'))}]`,
      'auth:',
      '  keys:',
      `    - {sha256: ${sha256('agent-key')}, principal: agent, tenant: acme}`,
      `    - {sha256: ${sha256('bob-key')}, principal: bob, tenant: acme}`,
      `    - {sha256: ${sha256('other-agent-key')}, principal: agent, tenant: other}`,
      'rules:',
      '  - name: reminders-need-approval',
      '    match: {tools: [send_reminder]}',
      '    mode: approval',
      '    approvers: [bob]',
      '  - name: deletes-need-a-form',
      '    match: {tools: [delete_customer]}',
      '    mode: elicit',
      '',
    ].join('\n'),
  );
  return path;
}


// The answer of a POST of one JSON-RPC message, read from JSON or from the
// last event of a stream.
async function rpcAnswer(res) {
  const text = await res.text();
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const data = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    return JSON.parse(data.at(-1));
  }
  return JSON.parse(text);
}

// rawDispatch for ext-tasks: a task request of 2026-07-28 as streamable
// HTTP carries it, with key as the credential.
function rawDispatch(url, key) {
  let n = 0;
  return async (request) => {
    const name = request.params?.name ?? request.params?.taskId ?? '';
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'Mcp-Protocol-Version': MRTR,
        'Mcp-Method': request.method,
        'Mcp-Name': name,
        Authorization: `Bearer ${key}`,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: `interop-${++n}`, ...request }),
    });
    const answer = await rpcAnswer(res);
    return answer.error ? { kind: 'error', error: answer.error } : { kind: 'result', result: answer.result };
  };
}

// The pending approvals bob may decide, over the gateway's REST face.
async function pendingFor(base, key) {
  const res = await fetch(new URL('/v1/approvals', base), { headers: { Authorization: `Bearer ${key}` } });
  assert.equal(res.status, 200, await res.clone().text());
  const body = await res.json();
  return body.approvals ?? body;
}

// Waits for the approval of a send_reminder call to be asked for, has bob
// approve it over REST, and returns its id.
async function bobApprovesTheReminder(base) {
  let approvalId;
  for (let i = 0; i < 100 && !approvalId; i++) {
    approvalId = (await pendingFor(base, 'bob-key')).find((a) => a.tool === 'send_reminder')?.id;
    if (!approvalId) await new Promise((r) => setTimeout(r, 50));
  }
  assert.match(approvalId ?? '', /^apr_/, 'the call waits for an approval bob may decide');
  const decided = await fetch(new URL(`/v1/approvals/${approvalId}/approve`, base), {
    method: 'POST',
    headers: { Authorization: 'Bearer bob-key', 'Content-Type': 'application/json' },
    body: '{"reason":"checked"}',
  });
  assert.equal(decided.status, 200, await decided.clone().text());
  return approvalId;
}

// Starts interlock over streamable HTTP with the test's configuration and
// dry run off, and connects the agent with a 2.x client of clientOptions;
// close() also removes its directory.
async function startTasksGateway(clientOptions) {
  const dir = tempDataDir();
  return withDir(
    dir,
    startHttp({
      dryRun: 'false',
      sdk: SDK2,
      extraArgs: ['--config', writeConfig(dir)],
      fetch: withKey('agent-key'),
      clientOptions,
    }),
  );
}

describe('approvals as tasks: client 2.x (2026-07-28) with @modelcontextprotocol/ext-tasks over streamable HTTP', () => {
  let gw;
  let session;

  before(async () => {
    gw = await startTasksGateway({ versionNegotiation: { mode: { pin: MRTR } } });
    session = createTaskSessionFromClient(gw.client, {
      endpointId: 'interlock',
      rawDispatch: rawDispatch(gw.url, 'agent-key'),
      v2RequestFraming: { protocolVersion: MRTR, clientInfo: CLIENT_INFO, clientCapabilities: {} },
    });
  });

  after(async () => {
    await session?.close();
    await gw?.close();
  });

  it('the server offers the tasks extension', T, () => {
    assert.deepEqual(gw.client.getServerCapabilities()?.extensions?.['io.modelcontextprotocol/tasks'], {});
  });

  it('a call that waits for approval settles with the tool result once bob approves, and ran once', T, async () => {
    const execution = await session.callTool('send_reminder', { customer_id: 'acct_9931' });
    const approvalId = await bobApprovesTheReminder(gw.url);
    const { outcome } = await execution.settle();
    const result = resultFromTaskOutcome(outcome);
    assert.notEqual(result.isError, true, JSON.stringify(result));
    assert.match(JSON.stringify(result.content), /acct_9931/);
    const approval = await fetch(new URL(`/v1/approvals/${approvalId}`, gw.url), { headers: { Authorization: 'Bearer bob-key' } });
    assert.equal((await approval.json()).state, 'consumed', 'the approval was used, once');
  });

  it("another tenant's agent is told the task does not exist, as for an id that never was", T, async () => {
    const first = await rawDispatch(gw.url, 'agent-key')({
      method: 'tools/call',
      params: {
        name: 'send_reminder',
        arguments: { customer_id: 'acct_1024' },
        _meta: v2Meta({ extensions: { [TASKS_EXT]: {} } }),
      },
    });
    assert.equal(first.kind, 'result', JSON.stringify(first));
    assert.equal(first.result.resultType, 'task');
    const meta = v2Meta();
    const theirs = await rawDispatch(gw.url, 'other-agent-key')({ method: 'tasks/get', params: { taskId: first.result.taskId, _meta: meta } });
    const none = await rawDispatch(gw.url, 'other-agent-key')({ method: 'tasks/get', params: { taskId: 'tsk_none', _meta: meta } });
    assert.equal(theirs.kind, 'error');
    assert.deepEqual(theirs.error, none.error);
    const mine = await rawDispatch(gw.url, 'agent-key')({ method: 'tasks/get', params: { taskId: first.result.taskId, _meta: meta } });
    assert.equal(mine.kind, 'result');
    assert.equal(mine.result.status, 'working');
  });
});

describe('approvals as tasks: client 2.x in its legacy mode (2025-11-25, experimental tasks) with @modelcontextprotocol/ext-tasks over streamable HTTP', () => {
  let gw;
  let session;

  before(async () => {
    gw = await startTasksGateway({ versionNegotiation: { mode: 'legacy' } });
    session = createTaskSessionFromClient(gw.client, { endpointId: 'interlock' });
  });

  after(async () => {
    await session?.close();
    await gw?.close();
  });

  it('initialize offers tasks, and send_reminder may run as one', T, async () => {
    assert.deepEqual(gw.client.getServerCapabilities()?.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
    const { tools } = await gw.client.listTools();
    assert.deepEqual(tools.find((t) => t.name === 'send_reminder')?.execution, { taskSupport: 'optional' });
    assert.equal(tools.find((t) => t.name === 'list_customers')?.execution, undefined);
  });

  it('a call that waits for approval settles with the tool result once bob approves', T, async () => {
    const execution = await session.callTool('send_reminder', { customer_id: 'acct_1024' }, { task: { preference: 'prefer' } });
    await bobApprovesTheReminder(gw.url);
    const { outcome } = await execution.settle();
    const result = resultFromTaskOutcome(outcome);
    assert.notEqual(result.isError, true, JSON.stringify(result));
    assert.match(JSON.stringify(result.content), /acct_1024/);
  });
});

describe('forms as tasks: client 2.x (2026-07-28) with @modelcontextprotocol/ext-tasks over streamable HTTP', () => {
  // The form capability goes both in the client's own options and in the
  // requester's framing: the latter is what the task requests carry.
  const capabilities = { elicitation: { form: {} } };
  let gw;
  let session;
  // The human at the client: every form it is shown, with its context, and
  // the answer it gives.
  const human = { answer: undefined, asked: [] };

  before(async () => {
    gw = await startTasksGateway({ capabilities, versionNegotiation: { mode: { pin: MRTR } } });
    session = createTaskSessionFromClient(gw.client, {
      endpointId: 'interlock',
      rawDispatch: rawDispatch(gw.url, 'agent-key'),
      v2RequestFraming: { protocolVersion: MRTR, clientInfo: CLIENT_INFO, clientCapabilities: capabilities },
      onInputRequest: createApplicationInputHandler({
        elicitation: (request, context) => {
          human.asked.push({ request, context });
          return human.answer;
        },
        sampling: () => assert.fail('interlock asks for no sampling'),
        roots: () => assert.fail('interlock asks for no roots'),
      }),
    });
  });

  after(async () => {
    await session?.close();
    await gw?.close();
  });

  // Calls delete_customer for id as a task, the human answering answer,
  // and returns the tool result the task ends with and the forms shown.
  async function deleteAsTask(id, answer) {
    human.answer = answer;
    human.asked = [];
    const execution = await session.callTool('delete_customer', { id });
    const { outcome } = await execution.settle();
    return { result: resultFromTaskOutcome(outcome), asked: human.asked };
  }

  // The form interlock describes: the tool named, a required confirm box;
  // asked once, as a task's input request under interlock's key.
  function assertOneForm(asked) {
    assert.equal(asked.length, 1, `the human is asked exactly once: ${JSON.stringify(asked)}`);
    const [{ request, context }] = asked;
    assert.equal(request.kind, 'elicitation');
    assert.equal(request.params.mode ?? 'form', 'form');
    assert.match(request.params.message, /delete_customer/, 'the form names the tool');
    assert.equal(request.params.requestedSchema?.properties?.confirm?.type, 'boolean', JSON.stringify(request.params));
    assert.ok(request.params.requestedSchema.required?.includes('confirm'), 'confirm is required');
    assert.equal(context.scope, 'task');
    assert.equal(context.delivery, 'task-update');
    assert.equal(context.inputId, FORM_ID);
    assert.match(context.taskId, /^tsk_/);
  }

  async function customerExists(id) {
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id } });
    if (res.isError) {
      assertGatewayError(res, 'NOT_FOUND');
      return false;
    }
    assert.equal(res.structuredContent?.id, id, JSON.stringify(res));
    return true;
  }

  it('an accepted form: the task completes with the result of the tool, which ran', T, async () => {
    const { result, asked } = await deleteAsTask('acct_9931', { action: 'accept', content: { confirm: true } });
    assertOneForm(asked);
    const sc = assertRan(result);
    assert.equal(sc.deleted, true, JSON.stringify(sc));
    assert.equal(sc.id, 'acct_9931');
    assert.equal(sc.name, 'Northwind Traders');
    assert.equal(sc.invoices_deleted, 3);
    assert.equal(await customerExists('acct_9931'), false, 'the customer is gone');
  });

  it('a declined form: the task completes with DECLINED, and nothing ran', T, async () => {
    const { result, asked } = await deleteAsTask('acct_1024', { action: 'decline' });
    assertOneForm(asked);
    const sc = assertGatewayError(result, 'DECLINED');
    assert.equal(sc.retriable, false);
    assert.equal(await customerExists('acct_1024'), true, 'the customer is still there');
  });

  it("another tenant's agent cannot answer the form: tasks/update answers as for an id that never was", T, async () => {
    const first = await rawDispatch(gw.url, 'agent-key')({
      method: 'tools/call',
      params: { name: 'delete_customer', arguments: { id: 'acct_2048' }, _meta: v2Meta({ ...capabilities, extensions: { [TASKS_EXT]: {} } }) },
    });
    assert.equal(first.kind, 'result', JSON.stringify(first));
    assert.equal(first.result.resultType, 'task');
    assert.equal(first.result.status, 'input_required', JSON.stringify(first.result));
    assert.ok(first.result.inputRequests?.[FORM_ID], JSON.stringify(first.result));
    const update = (key, taskId) =>
      rawDispatch(gw.url, key)({
        method: 'tasks/update',
        params: { taskId, inputResponses: { [FORM_ID]: { action: 'accept', content: { confirm: true } } }, _meta: v2Meta(capabilities) },
      });
    const theirs = await update('other-agent-key', first.result.taskId);
    const none = await update('other-agent-key', 'tsk_none');
    assert.equal(theirs.kind, 'error', JSON.stringify(theirs));
    assert.equal(theirs.error.code, -32602, JSON.stringify(theirs));
    assert.deepEqual(theirs.error, none.error);
    const mine = await rawDispatch(gw.url, 'agent-key')({ method: 'tasks/get', params: { taskId: first.result.taskId, _meta: v2Meta() } });
    assert.equal(mine.kind, 'result', JSON.stringify(mine));
    assert.equal(mine.result.status, 'input_required', 'the task still waits for its owner');
    assert.equal(await customerExists('acct_2048'), true, 'nothing ran');
  });
});
