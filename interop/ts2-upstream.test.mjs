// A server of the TypeScript SDK 2.x over streamable HTTP, which speaks
// 2026-07-28 (and 2025-era requests, statelessly), as interlock's upstream.
// interlock calls its tool on the link's own raw side, with the headers and
// _meta that 2026-07-28 asks of every request, which this server checks.
// Clients of both SDKs, two tenants of them at once, each get their own
// call's result, with what the upstream wrote that no SDK models.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer, createMcpHandler, fromJsonSchema } from '@modelcontextprotocol/server';

import { SDK1, SDK2, startHttp, tempDataDir, withDir, withKey } from './harness.mjs';

const SLOW = { timeout: 60_000 };
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const KEYS = {
  'alice@acme': { key: 'alice-acme-key', principal: 'alice', tenant: 'acme' },
  'alice@globex': { key: 'alice-globex-key', principal: 'alice', tenant: 'globex' },
};

// startUpstream serves echo, which answers its text and, in its structured
// content, a member of its own. Returns { url, calls, close }: calls counts
// the tools/call requests that carried 2026-07-28's Mcp-Method header.
async function startUpstream() {
  const factory = () => {
    const server = new McpServer({ name: 'ts2-upstream', version: '1.0.0' });
    server.registerTool(
      'echo',
      {
        description: 'Answers its text.',
        inputSchema: fromJsonSchema({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }),
        annotations: { readOnlyHint: true },
      },
      async ({ text }) => ({ content: [{ type: 'text', text }], structuredContent: { text, upstreamOwn: { kept: true } } }),
    );
    return server;
  };
  const handler = toNodeHandler(createMcpHandler(factory));
  const up = { calls: 0 };
  const http = createServer((req, res) => {
    if (req.headers['mcp-method'] === 'tools/call') up.calls++;
    handler(req, res);
  });
  await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
  up.url = `http://127.0.0.1:${http.address().port}/mcp`;
  up.close = () => new Promise((resolve) => http.close(resolve));
  return up;
}

function writeConfig(dir, url) {
  const path = join(dir, 'interlock.yaml');
  writeFileSync(
    path,
    [
      'upstreams:',
      '  - name: ts2',
      `    url: ${JSON.stringify(url)}`,
      'auth:',
      '  keys:',
      ...Object.values(KEYS).map((k) => `    - {sha256: ${sha256(k.key)}, principal: ${k.principal}, tenant: ${k.tenant}}`),
      '',
    ].join('\n'),
  );
  return path;
}

const CLIENTS = [
  { label: 'client 1.x (2025-11-25) with sessions', sdk: SDK1, stateless: false },
  { label: 'client 1.x (2025-11-25) without sessions', sdk: SDK1, stateless: true },
  { label: 'client 2.x (2026-07-28) without sessions', sdk: SDK2, stateless: true },
];

for (const { label, sdk, stateless } of CLIENTS) {
  describe(`a TypeScript SDK 2.x server over HTTP behind interlock: ${label}`, () => {
    let up;
    let gw;
    before(async () => {
      up = await startUpstream();
      const dir = tempDataDir();
      gw = await withDir(
        dir,
        startHttp({
          dryRun: 'false',
          stateless,
          sdk,
          extraArgs: ['--config', writeConfig(dir, up.url)],
          clientOptions: sdk === SDK2 ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : undefined,
          fetch: withKey(KEYS['alice@acme'].key),
        }),
      );
    }, SLOW);
    after(async () => {
      try {
        await gw?.close();
      } finally {
        await up?.close();
      }
    });

    it("two tenants' calls at once each get their own result, as the upstream wrote it", SLOW, async () => {
      const other = new sdk.Client({ name: 'interlock-interop', version: '1.0.0' },
        sdk === SDK2 ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : undefined);
      await other.connect(new sdk.StreamableHTTPClientTransport(gw.url, { fetch: withKey(KEYS['alice@globex'].key) }));
      try {
        const calls = [];
        for (let i = 0; i < 5; i++) {
          for (const [who, client] of [['acme', gw.client], ['globex', other]]) {
            const text = `${who}-${i}`;
            calls.push(client.callTool({ name: 'echo', arguments: { text } }).then((res) => ({ text, res })));
          }
        }
        for (const { text, res } of await Promise.all(calls)) {
          assert.notEqual(res.isError, true, JSON.stringify(res));
          assert.equal(res.content[0].text, text);
          assert.deepEqual(res.structuredContent, { text, upstreamOwn: { kept: true } });
        }
      } finally {
        await other.close();
      }
      // Every call reached the upstream; on a link of 2026-07-28 with the
      // headers that protocol asks of a request (clients of 2025-11-25 with
      // sessions are served on a link of their own protocol, without them).
      assert.equal(up.calls, sdk === SDK1 && !stateless ? 0 : 10);
    });
  });
}
