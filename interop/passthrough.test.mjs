// Everything but tools passes through interlock: resources, templates,
// prompts, completion, logging, progress and roots, with an upstream built
// on the TypeScript SDK (fixtures/everything-upstream.mjs), for SDK 1.x
// (2025-11-25, on a session) and client 2.x (2026-07-28, served without
// one) on the same default HTTP endpoint, and for both over stdio. Tool
// definitions keep every field the upstream gave, apart from what the gate
// changes.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import { ListRootsRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { DESCRIBED } from './fixtures/described-tool.mjs';
import { SDK1, SDK2, TEST_TIMEOUT, removeDir, startHttp, startStdio, tempDataDir } from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };
const FIXTURE = fileURLToPath(new URL('./fixtures/everything-upstream.mjs', import.meta.url));
const MRTR = '2026-07-28';
const ROOT = 'file:///srv/project';

function writeConfig(dir) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    ['upstreams:', '  - name: all', `    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]`, ''].join('\n'),
  );
  return path;
}

// A client that declares roots and hears log messages, which it keeps in logs.
function clientOf(sdk, logs) {
  const clientOptions = { capabilities: { roots: {} } };
  if (sdk === SDK2) clientOptions.versionNegotiation = { mode: { pin: MRTR } };
  const setup = (client) => {
    const roots = () => ({ roots: [{ uri: ROOT, name: 'project' }] });
    const log = (n) => logs.push(n.params);
    if (sdk === SDK1) {
      client.setRequestHandler(ListRootsRequestSchema, roots);
      client.setNotificationHandler(LoggingMessageNotificationSchema, log);
    } else {
      client.setRequestHandler('roots/list', roots);
      client.setNotificationHandler('notifications/message', log);
    }
  };
  return { sdk, clientOptions, setup };
}

const CONNECTIONS = [
  { label: 'SDK 1.x (2025-11-25) over HTTP with sessions', sdk: SDK1, transport: 'http' },
  { label: 'client 2.x (2026-07-28) over the same HTTP endpoint', sdk: SDK2, transport: 'http' },
  { label: 'SDK 1.x (2025-11-25) over stdio', sdk: SDK1, transport: 'stdio' },
  { label: 'client 2.x (2026-07-28) over stdio', sdk: SDK2, transport: 'stdio' },
];

for (const conn of CONNECTIONS) {
  describe(`pass-through: ${conn.label}`, () => {
    let cfgDir;
    let gw;
    const logs = [];
    before(async () => {
      cfgDir = tempDataDir();
      const opts = { ...clientOf(conn.sdk, logs), extraArgs: ['--config', writeConfig(cfgDir)] };
      gw = conn.transport === 'http' ? await startHttp(opts) : await startStdio(opts);
      if (conn.sdk === SDK2) assert.equal(gw.client.getNegotiatedProtocolVersion(), MRTR);
    }, T);
    after(async () => {
      await gw?.close();
      removeDir(cfgDir);
    }, T);

    it('lists and reads resources, and lists the template', T, async () => {
      const { resources } = await gw.client.listResources();
      assert.deepEqual(resources.map((r) => r.uri).sort(), ['memo://one', 'memo://two']);
      const { contents } = await gw.client.readResource({ uri: 'memo://two' });
      assert.equal(contents[0].text, 'the second memo');
      const { resourceTemplates } = await gw.client.listResourceTemplates();
      assert.deepEqual(resourceTemplates.map((t) => t.uriTemplate), ['memo://{name}']);
    });

    it('gets a prompt with its arguments, and completes an argument', T, async () => {
      const { prompts } = await gw.client.listPrompts();
      assert.deepEqual(prompts.map((p) => p.name), ['greet']);
      const { messages } = await gw.client.getPrompt({ name: 'greet', arguments: { who: 'Ada' } });
      assert.equal(messages[0].content.text, 'Hello, Ada');
      const { completion } = await gw.client.complete({
        ref: { type: 'ref/prompt', name: 'greet' },
        argument: { name: 'who', value: 'al' },
      });
      assert.deepEqual(completion.values, ['alice', 'albert']);
    });

    it('carries progress and log messages of a call back to its client', T, async () => {
      // A client of 2026-07-28 names its level in each request; an earlier one sets it once.
      const params = { name: 'work', arguments: {} };
      if (conn.sdk === SDK1) await gw.client.setLoggingLevel('info');
      else params._meta = { 'io.modelcontextprotocol/logLevel': 'info' };
      // What the gateway must do is send the progress before the result, and
      // that is checked on the wire: both SDKs hand a notification to its
      // handler a microtask later but settle a response at once, so when
      // they arrive in one read the client itself drops the progress.
      const wire = [];
      const transport = gw.client.transport;
      const deliver = transport.onmessage;
      transport.onmessage = (message, extra) => {
        if (message.method === 'notifications/progress') wire.push(message.params.progress);
        else if (message.result?.content?.[0]?.text === 'done') wire.push('result');
        deliver.call(transport, message, extra);
      };
      const onprogress = () => {};
      let res;
      try {
        res =
          conn.sdk === SDK1 ? await gw.client.callTool(params, undefined, { onprogress }) : await gw.client.callTool(params, { onprogress });
      } finally {
        transport.onmessage = deliver;
      }
      assert.equal(res.content[0].text, 'done');
      assert.deepEqual(wire, [1, 2, 'result']);
      assert.ok(
        logs.some((l) => l.data === 'working'),
        `no log message came back: ${JSON.stringify(logs)}`,
      );
    });

    // Only a client of an earlier protocol can be sent roots/list in the middle of a call.
    if (conn.sdk === SDK1) it('answers the upstream\'s roots/list with the client\'s roots', T, async () => {
      const res = await gw.client.callTool({ name: 'roots', arguments: {} });
      assert.equal(res.isError, undefined, `${JSON.stringify(res)}\n--- gateway stderr (tail) ---\n${gw.stderr().slice(-3000)}`);
      assert.equal(res.content[0].text, ROOT);
    });

    it('keeps every field of a tool definition the gate does not change', T, async () => {
      const { tools } = await gw.client.listTools();
      const tool = tools.find((t) => t.name === DESCRIBED.name);
      assert.ok(tool, JSON.stringify(tools.map((t) => t.name)));
      // execution is kept too, though go-sdk v1.8.0's Tool has no such
      // field: the gateway keeps it from the upstream's raw list. Client 2.x
      // on 2026-07-28 drops it itself, as vocabulary that protocol deleted.
      if (conn.sdk === SDK2) assert.equal(tool.execution, undefined);
      else assert.deepEqual(tool.execution, DESCRIBED.execution);
      for (const field of ['title', 'description', 'icons']) {
        assert.deepEqual(tool[field], DESCRIBED[field], field);
      }
      for (const [k, v] of Object.entries(DESCRIBED._meta)) assert.deepEqual(tool._meta?.[k], v, `_meta ${k}`);
      // What the gate changes: the annotations state every hint (the
      // title stays where the upstream wrote it), and the output schema
      // admits its error body too.
      assert.deepEqual(tool.annotations, DESCRIBED.annotations);
      const [own, errorBody] = tool.outputSchema?.anyOf ?? [];
      assert.deepEqual(own, DESCRIBED.outputSchema);
      assert.deepEqual(errorBody?.required, ['code', 'retriable', 'message', 'recovery_hint']);
    });
  });
}
