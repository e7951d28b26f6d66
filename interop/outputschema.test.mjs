// interlock in front of a TypeScript-SDK upstream whose destructive tool
// declares an outputSchema (fixtures/typed-upstream.mjs).
//
// The TS SDK client (1.x, at least up to 1.32.2) validates structuredContent
// against the tool's outputSchema even when the result has isError: true
// (modelcontextprotocol/typescript-sdk issue #1943). interlock therefore
// advertises such a tool's outputSchema widened to "the tool's output, or
// interlock's error body", so Client.callTool hands previews and refusals to
// the agent instead of throwing McpError -32602.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { TEST_TIMEOUT, assertPreview, removeDir, startStdio, tempDataDir } from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };
const FIXTURE = fileURLToPath(new URL('./fixtures/typed-upstream.mjs', import.meta.url));

function writeConfig(dir) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    [
      'upstreams:',
      '  - name: tickets',
      `    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(FIXTURE)}]`,
      'default_mode: flag',
      '',
    ].join('\n'),
  );
  return path;
}

// tools/call without Client.callTool's outputSchema check: the result exactly
// as the gateway sent it (still parsed against the MCP result schema).
function rawCall(client, name, args) {
  return client.request({ method: 'tools/call', params: { name, arguments: args } }, CallToolResultSchema);
}

describe('upstream tool with an outputSchema', () => {
  let cfgDir;
  let dry;
  let live;
  before(async () => {
    cfgDir = tempDataDir();
    const config = writeConfig(cfgDir);
    dry = await startStdio({ extraArgs: ['--config', config] });
    live = await startStdio({ dryRun: 'false', extraArgs: ['--config', config] });
  }, T);
  after(async () => {
    await dry?.close();
    await live?.close();
    removeDir(cfgDir);
  }, T);

  it('the gateway advertises the tool gated, its outputSchema widened to admit error bodies', T, async () => {
    const { tools } = await dry.client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['close_ticket']);
    const [tool] = tools;
    assert.equal(tool.annotations?.destructiveHint, true);
    assert.equal(tool.inputSchema.properties?.__confirm?.type, 'boolean');
    assert.equal(tool.outputSchema?.type, 'object');
    const [own, errorBody] = tool.outputSchema?.anyOf ?? [];
    assert.deepEqual(own?.required, ['ticket_id', 'closed']);
    assert.deepEqual(errorBody?.required, ['code', 'retriable', 'message', 'recovery_hint']);
  });

  it('on the wire, an unconfirmed call is a DRY_RUN_PREVIEW', T, async () => {
    await dry.client.listTools();
    const args = { ticket_id: 'T-1' };
    assertPreview(await rawCall(dry.client, 'close_ticket', args), args);
  });

  it('with both keys the call runs and callTool validates the upstream result', T, async () => {
    await live.client.listTools(); // caches the outputSchema validator
    const res = await live.client.callTool({ name: 'close_ticket', arguments: { ticket_id: 'T-2', __confirm: true } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.deepEqual(res.structuredContent, { ticket_id: 'T-2', closed: true });
  });

  it(
    'Client.callTool hands the DRY_RUN_PREVIEW to the caller instead of throwing',
    T,
    async () => {
      await dry.client.listTools(); // caches the outputSchema validator
      const args = { ticket_id: 'T-3', __confirm: true };
      assertPreview(await dry.client.callTool({ name: 'close_ticket', arguments: args }), args);
    },
  );
});
