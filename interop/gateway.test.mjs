// Interop tests: the official TypeScript MCP SDK client against the interlock
// gateway, over stdio and streamable HTTP (with and without sessions).
//
//   INTERLOCK_BIN=/path/to/interlock npm test
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  ALL_TOOLS,
  GATED_TOOLS,
  READ_ONLY_TOOLS,
  TEST_TIMEOUT,
  assertGatewayError,
  assertPreview,
  startHttp,
  startStdio,
} from './helpers.mjs';

const T = { timeout: TEST_TIMEOUT };

// tools/list checks shared by every transport.
async function checkToolList(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ALL_TOOLS, 'tools/list must return exactly the 9 demo tools');
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));

  for (const t of tools) {
    for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) {
      assert.equal(typeof t.annotations?.[hint], 'boolean', `${t.name}: ${hint} must be explicit`);
    }
    assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema.type`);
  }
  for (const name of READ_ONLY_TOOLS) {
    assert.equal(byName[name].annotations.readOnlyHint, true, `${name}: readOnlyHint`);
    assert.ok(!('__confirm' in (byName[name].inputSchema.properties ?? {})), `${name} must not take __confirm`);
  }
  for (const name of GATED_TOOLS) {
    assert.equal(byName[name].annotations.readOnlyHint, false, `${name}: readOnlyHint`);
    assert.equal(byName[name].inputSchema.properties?.__confirm?.type, 'boolean', `${name} must take __confirm: boolean`);
    assert.ok(!(byName[name].inputSchema.required ?? []).includes('__confirm'), `${name}: __confirm must be optional`);
  }
  assert.equal(byName.get_customer.annotations.readOnlyHint, true);
  assert.equal(byName.delete_customer.annotations.destructiveHint, true);
  assert.equal(byName.send_reminder.annotations.destructiveHint, false);
  assert.equal(byName.send_reminder.annotations.openWorldHint, true);
  assert.equal(byName.send_reminder.annotations.idempotentHint, false);
  return byName;
}

describe('stdio, dry run on (MCP_DRY_RUN unset)', () => {
  let gw;
  before(async () => {
    gw = await startStdio();
  }, T);
  after(async () => {
    await gw?.close();
  }, T);

  it('initialize reports the interlock server with the tools capability', T, () => {
    assert.equal(gw.client.getServerVersion()?.name, 'interlock');
    assert.ok(gw.client.getServerCapabilities()?.tools, 'tools capability');
  });

  it('tools/list returns the 9 demo tools with explicit hints and __confirm only on gated tools', T, async () => {
    await checkToolList(gw.client);
  });

  it('get_customer acct_9931 runs and returns Northwind Traders', T, async () => {
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id: 'acct_9931' } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.equal(res.structuredContent?.id, 'acct_9931');
    assert.equal(res.structuredContent?.name, 'Northwind Traders');
    assert.equal(res.structuredContent?.plan, 'pro');
    const text = res.content.find((c) => c.type === 'text');
    assert.equal(JSON.parse(text.text).name, 'Northwind Traders');
  });

  it('send_reminder without __confirm gives DRY_RUN_PREVIEW', T, async () => {
    const args = { customer_id: 'acct_9931' };
    const res = await gw.client.callTool({ name: 'send_reminder', arguments: args });
    const sc = assertPreview(res, args);
    assert.equal(sc.preview.customer_id, 'acct_9931');
  });

  it('send_reminder with __confirm: true still previews while dry run is on', T, async () => {
    const args = { customer_id: 'acct_9931', __confirm: true };
    const res = await gw.client.callTool({ name: 'send_reminder', arguments: args });
    const sc = assertPreview(res, args);
    assert.deepEqual(sc.preview, { customer_id: 'acct_9931' });
  });

  it('every destructive demo tool previews instead of running', T, async () => {
    const calls = [
      ['delete_customer', { id: 'acct_2048', __confirm: true }],
      ['upgrade_plan', { customer_id: 'acct_2048', to: 'pro', __confirm: true }],
      ['downgrade_plan', { customer_id: 'acct_1024', to: 'pro', __confirm: true }],
      ['promote_release', { service: 'web', environment: 'production', __confirm: true }],
      ['refund_invoice', { invoice_id: 'inv_1003', amount: 10, __confirm: true }],
    ];
    for (const [name, args] of calls) {
      const res = await gw.client.callTool({ name, arguments: args });
      assertPreview(res, args);
    }
    // Nothing ran: Initech still exists on the free plan.
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id: 'acct_2048' } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.equal(res.structuredContent?.name, 'Initech');
    assert.equal(res.structuredContent?.plan, 'free');
  });

  it('get_customer {id: 5} gives VALIDATION_FAILED with validation_issues[0].path "id"', T, async () => {
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id: 5 } });
    const sc = assertGatewayError(res, 'VALIDATION_FAILED');
    assert.ok(Array.isArray(sc.validation_issues) && sc.validation_issues.length >= 1, JSON.stringify(sc));
    assert.equal(sc.validation_issues[0].path, 'id');
    assert.equal(typeof sc.validation_issues[0].message, 'string');
    assert.equal(typeof sc.validation_issues[0].code, 'string');
  });

  it('refund_invoice of 2000 with __confirm gives TOOL_NOT_ALLOWED', T, async () => {
    const res = await gw.client.callTool({
      name: 'refund_invoice',
      arguments: { invoice_id: 'inv_1005', amount: 2000, __confirm: true },
    });
    const sc = assertGatewayError(res, 'TOOL_NOT_ALLOWED');
    assert.equal(sc.retriable, false);
    assert.ok(!('preview' in sc), 'a denied call is not a preview');
  });
});

describe('stdio, MCP_DRY_RUN=false', () => {
  let gw;
  before(async () => {
    gw = await startStdio({ dryRun: 'false' });
  }, T);
  after(async () => {
    await gw?.close();
  }, T);

  it('send_reminder with __confirm: true runs and returns the upstream result', T, async () => {
    const res = await gw.client.callTool({
      name: 'send_reminder',
      arguments: { customer_id: 'acct_9931', __confirm: true },
    });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    const sc = res.structuredContent;
    assert.ok(sc, `expected structuredContent, got ${JSON.stringify(res)}`);
    assert.equal(sc.customer_id, 'acct_9931');
    assert.equal(sc.to, 'billing@northwind.example');
    assert.ok(sc.reminder_id !== undefined && sc.reminder_id !== null, 'reminder_id');
    assert.equal(typeof sc.subject, 'string');
    assert.ok(!('code' in sc), 'an executed call is not a gateway error');
    const text = res.content.find((c) => c.type === 'text');
    assert.equal(JSON.parse(text.text).customer_id, 'acct_9931');
  });

  it('send_reminder without __confirm gives DRY_RUN_PREVIEW', T, async () => {
    const args = { customer_id: 'acct_9931' };
    assertPreview(await gw.client.callTool({ name: 'send_reminder', arguments: args }), args);
  });

  it('send_reminder with __confirm: false gives DRY_RUN_PREVIEW', T, async () => {
    const args = { customer_id: 'acct_9931', __confirm: false };
    assertPreview(await gw.client.callTool({ name: 'send_reminder', arguments: args }), args);
  });

  it('send_reminder with __confirm: "true" (a string) does not run', T, async () => {
    const res = await gw.client.callTool({
      name: 'send_reminder',
      arguments: { customer_id: 'acct_9931', __confirm: 'true' },
    });
    assert.equal(res.isError, true, `a string "true" must not confirm: ${JSON.stringify(res)}`);
    assert.ok(
      ['VALIDATION_FAILED', 'DRY_RUN_PREVIEW'].includes(res.structuredContent?.code),
      JSON.stringify(res.structuredContent),
    );
  });

  it('refund_invoice of 2000 with both keys is TOOL_NOT_ALLOWED and refunds nothing', T, async () => {
    const res = await gw.client.callTool({
      name: 'refund_invoice',
      arguments: { invoice_id: 'inv_1005', amount: 2000, __confirm: true },
    });
    assertGatewayError(res, 'TOOL_NOT_ALLOWED');
    const inv = await gw.client.callTool({ name: 'list_invoices', arguments: { customer_id: 'acct_1024' } });
    assert.notEqual(inv.isError, true, JSON.stringify(inv));
    const i1005 = inv.structuredContent?.invoices?.find((i) => i.id === 'inv_1005');
    assert.ok(i1005, JSON.stringify(inv.structuredContent));
    assert.equal(i1005.refunded, 0);
    assert.equal(i1005.amount, 2400);
  });
});

describe('stdio, MCP_DRY_RUN other than exactly "false" keeps dry run on', () => {
  for (const value of ['true', 'FALSE', '0', '']) {
    it(`MCP_DRY_RUN=${JSON.stringify(value)}: confirmed send_reminder only previews`, T, async () => {
      const gw = await startStdio({ dryRun: value });
      try {
        const args = { customer_id: 'acct_9931', __confirm: true };
        assertPreview(await gw.client.callTool({ name: 'send_reminder', arguments: args }), args);
      } finally {
        await gw.close();
      }
    });
  }
});

describe('stdio lifecycle', () => {
  it('closing the client ends the gateway process', T, async () => {
    const gw = await startStdio();
    const pid = gw.pid;
    assert.ok(pid, 'transport.pid');
    const { tools } = await gw.client.listTools();
    assert.equal(tools.length, 9);
    const started = Date.now();
    await gw.client.close();
    // StdioClientTransport ends stdin first and only sends SIGTERM after 2 s.
    assert.ok(Date.now() - started < 1_900, `gateway took ${Date.now() - started} ms to exit on stdin EOF`);
    await gw.close();
  });
});

for (const stateless of [false, true]) {
  const mode = stateless ? 'stateless' : 'sessions';
  describe(`streamable HTTP (${mode})`, () => {
    let gw;
    before(async () => {
      gw = await startHttp({ stateless });
    }, T);
    after(async () => {
      await gw?.close();
    }, T);

    it('serves on a loopback address at /mcp', T, () => {
      assert.equal(gw.url.hostname, '127.0.0.1');
      assert.equal(gw.url.pathname, '/mcp');
      assert.ok(Number(gw.url.port) > 0);
      assert.match(gw.stderr(), stateless ? /\(stateless/ : /\(sessions/);
    });

    it(stateless ? 'hands out no session id' : 'hands out a session id', T, () => {
      if (stateless) assert.equal(gw.transport.sessionId, undefined);
      else assert.ok(gw.transport.sessionId, 'expected an Mcp-Session-Id');
    });

    it('tools/list returns the 9 demo tools', T, async () => {
      await checkToolList(gw.client);
    });

    it('list_customers runs', T, async () => {
      const res = await gw.client.callTool({ name: 'list_customers', arguments: {} });
      assert.notEqual(res.isError, true, JSON.stringify(res));
      const ids = res.structuredContent?.customers?.map((c) => c.id).sort();
      assert.deepEqual(ids, ['acct_1024', 'acct_2048', 'acct_9931']);
    });

    it('delete_customer with __confirm gives DRY_RUN_PREVIEW', T, async () => {
      const args = { id: 'acct_2048', __confirm: true };
      const sc = assertPreview(await gw.client.callTool({ name: 'delete_customer', arguments: args }), args);
      assert.deepEqual(sc.preview, { id: 'acct_2048' });
    });

    it('get_customer {id: 5} gives VALIDATION_FAILED', T, async () => {
      const sc = assertGatewayError(
        await gw.client.callTool({ name: 'get_customer', arguments: { id: 5 } }),
        'VALIDATION_FAILED',
      );
      assert.equal(sc.validation_issues?.[0]?.path, 'id');
    });
  });
}
