// Interop tests: the official TypeScript MCP SDK client against the interlock
// gateway, over stdio and streamable HTTP (with and without sessions).
//
//   INTERLOCK_BIN=/path/to/interlock npm test
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  ALL_TOOLS,
  APPROVAL_DRY_RUN_HINT,
  ELICIT_DRY_RUN_HINT,
  ELICIT_TOOLS,
  FLAG_HINT,
  FLAG_DRY_RUN_OFF_HINT,
  FLAG_TOOLS,
  GATED_TOOLS,
  READ_ONLY_TOOLS,
  TEST_TIMEOUT,
  TOKEN_DRY_RUN_HINT,
  TOKEN_TOOLS,
  assertGatewayError,
  assertPreview,
  startHttp,
  startStdio,
} from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };

// tools/list checks shared by every transport.
async function checkToolList(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ALL_TOOLS, 'tools/list must return exactly the 13 demo tools');
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));

  for (const t of tools) {
    for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) {
      assert.equal(typeof t.annotations?.[hint], 'boolean', `${t.name}: ${hint} must be explicit`);
    }
    assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema.type`);
  }
  assert.deepEqual(
    [...FLAG_TOOLS, ...TOKEN_TOOLS, ...ELICIT_TOOLS].sort(),
    [...GATED_TOOLS].sort(),
    'every gated tool has one mode',
  );
  for (const name of READ_ONLY_TOOLS) {
    const props = byName[name].inputSchema.properties ?? {};
    assert.equal(byName[name].annotations.readOnlyHint, true, `${name}: readOnlyHint`);
    assert.ok(!('__confirm' in props), `${name} must not take __confirm`);
    assert.ok(!('__confirm_token' in props), `${name} must not take __confirm_token`);
  }
  for (const name of GATED_TOOLS) {
    assert.equal(byName[name].annotations.readOnlyHint, false, `${name}: readOnlyHint`);
  }
  for (const name of FLAG_TOOLS) {
    const schema = byName[name].inputSchema;
    assert.equal(schema.properties?.__confirm?.type, 'boolean', `${name} must take __confirm: boolean`);
    assert.ok(!(schema.required ?? []).includes('__confirm'), `${name}: __confirm must be optional`);
    assert.ok(!('__confirm_token' in schema.properties), `flag-mode ${name} must not take __confirm_token`);
  }
  for (const name of TOKEN_TOOLS) {
    const schema = byName[name].inputSchema;
    assert.equal(schema.properties?.__confirm_token?.type, 'string', `${name} must take __confirm_token: string`);
    assert.ok(!(schema.required ?? []).includes('__confirm_token'), `${name}: __confirm_token must be optional`);
    assert.ok(!('__confirm' in schema.properties), `token-mode ${name} must not take __confirm`);
  }
  // Elicit tools ask a human in a form; __confirm_token is their token
  // fallback for clients that cannot show one. The flag key is no key here.
  for (const name of ELICIT_TOOLS) {
    const schema = byName[name].inputSchema;
    assert.equal(schema.properties?.__confirm_token?.type, 'string', `${name} must take __confirm_token: string`);
    assert.ok(!(schema.required ?? []).includes('__confirm_token'), `${name}: __confirm_token must be optional`);
    assert.ok(!('__confirm' in schema.properties), `elicit-mode ${name} must not take __confirm`);
  }
  // The human, not the model, picks promote_release's environment: the
  // model is no longer required to send it, and its description says whose
  // choice it is.
  const promote = byName.promote_release.inputSchema;
  assert.match(promote.properties.environment?.description ?? '', /confirmation form/, `promote_release: ${JSON.stringify(promote)}`);
  assert.deepEqual(promote.required, ['service']);
  assert.equal(promote.properties.service?.type, 'string');
  assert.deepEqual(byName.delete_customer.inputSchema.required, ['id']);
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

  it('tools/list returns the 13 demo tools with explicit hints, __confirm on flag tools, __confirm_token on token and elicit tools', T, async () => {
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

  it('every destructive demo tool previews instead of running, with the hint of its mode', T, async () => {
    // Flag tools are called with the agent's key; token and elicit tools as
    // an agent first calls them, without __confirm_token. The elicit tools
    // preview and nobody is asked (this client declares no elicitation).
    const calls = [
      ['delete_customer', { id: 'acct_2048' }, ELICIT_DRY_RUN_HINT],
      ['upgrade_plan', { customer_id: 'acct_2048', to: 'pro' }, TOKEN_DRY_RUN_HINT],
      ['downgrade_plan', { customer_id: 'acct_1024', to: 'pro' }, TOKEN_DRY_RUN_HINT],
      ['promote_release', { service: 'web' }, ELICIT_DRY_RUN_HINT],
      ['refund_invoice', { invoice_id: 'inv_1003', amount: 10 }, TOKEN_DRY_RUN_HINT],
      ['send_reminder', { customer_id: 'acct_1024', __confirm: true }, FLAG_HINT],
    ];
    assert.deepEqual(calls.map(([name]) => name).sort(), [...GATED_TOOLS].sort(), 'covers every gated tool');
    const summaries = {};
    for (const [name, args, hint] of calls) {
      const res = await gw.client.callTool({ name, arguments: args });
      summaries[name] = assertPreview(res, args, hint).summary;
    }
    // The summaries come from the policy (and delete_customer's from its
    // get_customer preview), not from the model.
    for (const part of ['Initech', 'acct_2048', '0 invoices', 'cannot be undone']) {
      assert.ok(summaries.delete_customer.includes(part), `delete summary ${JSON.stringify(summaries.delete_customer)} must name ${part}`);
    }
    assert.match(summaries.promote_release, /\bweb\b/);
    assert.match(summaries.promote_release, /environment/i);
    // Nothing ran: Initech still exists on the free plan, Globex is still on
    // scale and inv_1003 has no refund.
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id: 'acct_2048' } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.equal(res.structuredContent?.name, 'Initech');
    assert.equal(res.structuredContent?.plan, 'free');
    const globex = await gw.client.callTool({ name: 'get_customer', arguments: { id: 'acct_1024' } });
    assert.equal(globex.structuredContent?.plan, 'scale', JSON.stringify(globex));
    const inv = await gw.client.callTool({ name: 'list_invoices', arguments: { customer_id: 'acct_9931' } });
    const i1003 = inv.structuredContent?.invoices?.find((i) => i.id === 'inv_1003');
    assert.equal(i1003?.refunded, 0, JSON.stringify(inv.structuredContent));
  });

  it('a token tool with a __confirm_token still only previews while dry run is on', T, async () => {
    const args = { customer_id: 'acct_2048', to: 'pro', __confirm_token: 'ilt1_not-a-real-token' };
    const sc = assertPreview(await gw.client.callTool({ name: 'upgrade_plan', arguments: args }), args, TOKEN_DRY_RUN_HINT);
    assert.deepEqual(sc.preview, { customer_id: 'acct_2048', to: 'pro' });
  });

  it('get_customer {id: 5} gives VALIDATION_FAILED with validation_issues[0].path "id"', T, async () => {
    const res = await gw.client.callTool({ name: 'get_customer', arguments: { id: 5 } });
    const sc = assertGatewayError(res, 'VALIDATION_FAILED');
    assert.ok(Array.isArray(sc.validation_issues) && sc.validation_issues.length >= 1, JSON.stringify(sc));
    assert.equal(sc.validation_issues[0].path, 'id');
    assert.equal(typeof sc.validation_issues[0].message, 'string');
    assert.equal(typeof sc.validation_issues[0].code, 'string');
  });

  it('refund_invoice of 2000 previews with the approval hint, asks nobody and issues no token', T, async () => {
    const args = { invoice_id: 'inv_1005', amount: 2000 };
    const sc = assertPreview(await gw.client.callTool({ name: 'refund_invoice', arguments: args }), args, APPROVAL_DRY_RUN_HINT);
    assert.match(sc.summary, /\$2,000\.00/);
    assert.ok(!('approval_id' in sc), 'under dry run no approval is asked for');
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
    assertPreview(await gw.client.callTool({ name: 'send_reminder', arguments: args }), args, FLAG_DRY_RUN_OFF_HINT);
  });

  it('send_reminder with __confirm: false gives DRY_RUN_PREVIEW', T, async () => {
    const args = { customer_id: 'acct_9931', __confirm: false };
    assertPreview(await gw.client.callTool({ name: 'send_reminder', arguments: args }), args, FLAG_DRY_RUN_OFF_HINT);
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

  it('refund_invoice of 2000 with the operator key waits for approval, issues no token and refunds nothing', T, async () => {
    const args = { invoice_id: 'inv_1005', amount: 2000 };
    const sc = assertGatewayError(await gw.client.callTool({ name: 'refund_invoice', arguments: args }), 'APPROVAL_PENDING');
    assert.equal(sc.retriable, true);
    assert.match(sc.approval_id, /^apr_/);
    assert.match(sc.summary, /\$2,000\.00/);
    assert.deepEqual(sc.preview, args);
    assert.ok(!('confirm_token' in sc), 'a call waiting for approval issues no token');
    const again = assertGatewayError(await gw.client.callTool({ name: 'refund_invoice', arguments: args }), 'APPROVAL_PENDING');
    assert.equal(again.approval_id, sc.approval_id, 'the same call while pending answers the same approval');
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
    assert.equal(tools.length, ALL_TOOLS.length);
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

    it('tools/list returns the 13 demo tools', T, async () => {
      await checkToolList(gw.client);
    });

    it('list_customers runs', T, async () => {
      const res = await gw.client.callTool({ name: 'list_customers', arguments: {} });
      assert.notEqual(res.isError, true, JSON.stringify(res));
      const ids = res.structuredContent?.customers?.map((c) => c.id).sort();
      assert.deepEqual(ids, ['acct_1024', 'acct_2048', 'acct_9931']);
    });

    it('delete_customer gives DRY_RUN_PREVIEW with the elicit hint and the get_customer summary', T, async () => {
      const args = { id: 'acct_2048' };
      const sc = assertPreview(
        await gw.client.callTool({ name: 'delete_customer', arguments: args }),
        args,
        ELICIT_DRY_RUN_HINT,
      );
      assert.deepEqual(sc.preview, { id: 'acct_2048' });
      assert.match(sc.summary, /Initech \(acct_2048, plan free\)/);
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
