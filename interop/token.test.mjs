// The confirm-token handshake (mode token) through `interlock serve`, driven
// by the official TypeScript SDK client (Client.callTool).
//
// The built-in policy puts upgrade_plan, downgrade_plan and refund_invoice
// (amount <= 1000) in token mode. With MCP_DRY_RUN=false a call without
// __confirm_token answers CONFIRMATION_REQUIRED with a summary and a
// single-use confirm_token; the same call plus __confirm_token runs once.
//
//   INTERLOCK_BIN=/path/to/interlock npm test
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  TEST_TIMEOUT,
  TOKEN_DRY_RUN_HINT,
  assertGatewayError,
  assertPreview,
  startHttp,
  startStdio,
  tamper,
  assertRan,
} from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };

const NORTHWIND_UPGRADE = { customer_id: 'acct_9931', to: 'scale' };
const NORTHWIND_SUMMARY = 'Move Northwind Traders (acct_9931) from pro ($19.00/mo) to scale ($49.00/mo).';
const TOKEN_FORMAT = /^ilt1_[A-Za-z0-9_-]{20,}$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
const TOKEN_BODY_KEYS = ['confirm_token', 'confirm_required', 'ttl_seconds', 'expires_at'];

// Asserts CONFIRMATION_REQUIRED for a call of tool with args, and that the
// token's expiry is ttl_seconds after the call (sentAt..receivedAt, in ms).
// Returns structuredContent.
function assertConfirmationRequired(res, tool, args, { sentAt, receivedAt }) {
  const sc = assertGatewayError(res, 'CONFIRMATION_REQUIRED');
  assert.equal(sc.retriable, false);
  assert.match(sc.recovery_hint, /summary/i, 'the hint says to show the summary');
  assert.match(sc.recovery_hint, /verbatim/i, 'the hint says to show the summary verbatim');
  assert.match(sc.recovery_hint, /explicit(ly)? (agree|consent)/i, 'the hint asks for explicit consent');
  assert.match(sc.recovery_hint, /__confirm_token/, 'the hint names __confirm_token');
  assert.match(sc.recovery_hint, new RegExp(`\\b${tool}\\b`), 'the hint names the tool to call again');
  assert.deepEqual(sc.preview, args, 'preview must be the arguments');
  assert.equal(typeof sc.summary, 'string');
  assert.ok(sc.summary.length > 0, 'summary must not be empty');
  assert.equal(sc.confirm_required, true);
  assert.equal(typeof sc.confirm_token, 'string');
  assert.match(sc.confirm_token, TOKEN_FORMAT);
  assert.equal(sc.ttl_seconds, 60);
  assert.equal(typeof sc.expires_at, 'string');
  assert.match(sc.expires_at, RFC3339);
  const expires = Date.parse(sc.expires_at);
  assert.ok(
    expires >= sentAt + 60_000 - 2_000 && expires <= receivedAt + 60_000 + 1_000,
    `expires_at ${sc.expires_at} is not 60 s after the call (${new Date(sentAt).toISOString()})`,
  );
  return sc;
}

// Calls tool without __confirm_token and returns the CONFIRMATION_REQUIRED body.
async function requestToken(client, tool, args) {
  const sentAt = Date.now();
  const res = await client.callTool({ name: tool, arguments: args });
  return assertConfirmationRequired(res, tool, args, { sentAt, receivedAt: Date.now() });
}

// Asserts one of the token failures: not retriable, a hint, no new token.
function assertTokenRefused(res, code) {
  const sc = assertGatewayError(res, code);
  assert.equal(sc.retriable, false, `${code} must not be retriable`);
  for (const key of TOKEN_BODY_KEYS) {
    assert.ok(!(key in sc), `${code} must not carry ${key}: ${JSON.stringify(sc)}`);
  }
  return sc;
}

function assertUpgradedNorthwind(res) {
  const sc = assertRan(res);
  assert.equal(sc.customer_id, 'acct_9931');
  assert.equal(sc.from_plan, 'pro');
  assert.equal(sc.to_plan, 'scale');
  assert.equal(sc.from_price, 19);
  assert.equal(sc.to_price, 49);
  return sc;
}

async function planOf(client, id) {
  const res = await client.callTool({ name: 'get_customer', arguments: { id } });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  assert.equal(res.structuredContent?.id, id);
  return res.structuredContent.plan;
}

async function invoice(client, customerId, invoiceId) {
  const res = await client.callTool({ name: 'list_invoices', arguments: { customer_id: customerId } });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  const inv = res.structuredContent?.invoices?.find((i) => i.id === invoiceId);
  assert.ok(inv, `${invoiceId} not in ${JSON.stringify(res.structuredContent)}`);
  return inv;
}

// A test with its own gateway (its own --data directory and token store),
// so no test depends on another's state. The gateway runs with
// MCP_DRY_RUN=false unless dryRunOn is set (then MCP_DRY_RUN is unset).
function gatewayIt(name, fn, { dryRunOn = false } = {}) {
  it(name, T, async () => {
    const gw = await startStdio({ dryRun: dryRunOn ? undefined : 'false' });
    try {
      await fn(gw.client);
    } finally {
      await gw.close();
    }
  });
}

describe('token handshake over stdio, MCP_DRY_RUN=false', () => {
  gatewayIt('describe: upgrade_plan without __confirm_token answers CONFIRMATION_REQUIRED and runs nothing', async (client) => {
    const sc = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    // The summary comes from the read-only get_customer preview: it names
    // the customer, both plans and both prices.
    for (const part of ['Northwind Traders', 'acct_9931', 'pro', '$19.00', 'scale', '$49.00']) {
      assert.ok(sc.summary.includes(part), `summary ${JSON.stringify(sc.summary)} must name ${part}`);
    }
    assert.match(sc.summary, /Northwind Traders.*\bpro\b.*\$19\.00.*\bscale\b.*\$49\.00/);
    assert.equal(sc.summary, NORTHWIND_SUMMARY);
    assert.equal(await planOf(client, 'acct_9931'), 'pro', 'describing must not change the plan');
  });

  gatewayIt('redeem: the same arguments plus __confirm_token run upgrade_plan; the customer is then on scale', async (client) => {
    const { confirm_token } = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const res = await client.callTool({
      name: 'upgrade_plan',
      arguments: { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token },
    });
    const sc = assertUpgradedNorthwind(res);
    assert.equal(sc.monthly_change, 30);
    assert.equal(await planOf(client, 'acct_9931'), 'scale');
  });

  gatewayIt('reuse: a redeemed token is CONSENT_TOKEN_INVALID', async (client) => {
    const { confirm_token } = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const args = { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token };
    assertUpgradedNorthwind(await client.callTool({ name: 'upgrade_plan', arguments: args }));
    assertTokenRefused(await client.callTool({ name: 'upgrade_plan', arguments: args }), 'CONSENT_TOKEN_INVALID');
    assertTokenRefused(await client.callTool({ name: 'upgrade_plan', arguments: args }), 'CONSENT_TOKEN_INVALID');
  });

  gatewayIt('mismatch: a token with other arguments is CONSENT_TOKEN_MISMATCH, then used up (INVALID)', async (client) => {
    const { confirm_token } = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const other = await client.callTool({
      name: 'upgrade_plan',
      arguments: { customer_id: 'acct_2048', to: 'scale', __confirm_token: confirm_token },
    });
    assertTokenRefused(other, 'CONSENT_TOKEN_MISMATCH');
    assert.equal(await planOf(client, 'acct_2048'), 'free', 'the mismatched call must not run');

    const right = await client.callTool({
      name: 'upgrade_plan',
      arguments: { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token },
    });
    assertTokenRefused(right, 'CONSENT_TOKEN_INVALID');
    assert.equal(await planOf(client, 'acct_9931'), 'pro', 'a used-up token must not run the call');
  });

  gatewayIt('supersede: a second describe replaces the first token (old INVALID, new runs)', async (client) => {
    const first = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const second = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    assert.notEqual(first.confirm_token, second.confirm_token, 'each describe issues a new token');

    const old = await client.callTool({
      name: 'upgrade_plan',
      arguments: { ...NORTHWIND_UPGRADE, __confirm_token: first.confirm_token },
    });
    assertTokenRefused(old, 'CONSENT_TOKEN_INVALID');
    assert.equal(await planOf(client, 'acct_9931'), 'pro');

    const res = await client.callTool({
      name: 'upgrade_plan',
      arguments: { ...NORTHWIND_UPGRADE, __confirm_token: second.confirm_token },
    });
    assertUpgradedNorthwind(res);
    assert.equal(await planOf(client, 'acct_9931'), 'scale');
  });

  gatewayIt('tampered: a token with one character changed is CONSENT_TOKEN_INVALID', async (client) => {
    const { confirm_token } = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const res = await client.callTool({
      name: 'upgrade_plan',
      arguments: { ...NORTHWIND_UPGRADE, __confirm_token: tamper(confirm_token) },
    });
    assertTokenRefused(res, 'CONSENT_TOKEN_INVALID');
    assert.equal(await planOf(client, 'acct_9931'), 'pro', 'a tampered token must not run the call');
    // Control: the token as issued still works, so INVALID above came from
    // the changed character and nothing else.
    assertUpgradedNorthwind(
      await client.callTool({ name: 'upgrade_plan', arguments: { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token } }),
    );
  });

  gatewayIt('keys reordered: the token matches the same arguments in another key order', async (client) => {
    const described = { customer_id: 'acct_9931', to: 'scale' };
    const { confirm_token } = await requestToken(client, 'upgrade_plan', described);
    const reordered = { __confirm_token: confirm_token, to: 'scale', customer_id: 'acct_9931' };
    assert.notEqual(JSON.stringify(Object.keys(reordered)), JSON.stringify([...Object.keys(described), '__confirm_token']));
    assertUpgradedNorthwind(await client.callTool({ name: 'upgrade_plan', arguments: reordered }));
    assert.equal(await planOf(client, 'acct_9931'), 'scale');
  });

  gatewayIt('unknown customer: the preview answers NOT_FOUND and issues no token', async (client) => {
    // A live token for upgrade_plan: if the NOT_FOUND call issued a token,
    // it would supersede this one.
    const { confirm_token } = await requestToken(client, 'upgrade_plan', NORTHWIND_UPGRADE);

    const res = await client.callTool({ name: 'upgrade_plan', arguments: { customer_id: 'acct_0000', to: 'scale' } });
    const sc = assertGatewayError(res, 'NOT_FOUND');
    assert.equal(sc.retriable, false);
    for (const key of TOKEN_BODY_KEYS) {
      assert.ok(!(key in sc), `NOT_FOUND must not carry ${key}: ${JSON.stringify(sc)}`);
    }
    assert.match(sc.message, /acct_0000/, 'the message names the missing customer');

    assertUpgradedNorthwind(
      await client.callTool({ name: 'upgrade_plan', arguments: { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token } }),
    );
  });

  gatewayIt('downgrade_plan: Globex from scale to pro, described with both prices and redeemed', async (client) => {
    const args = { customer_id: 'acct_1024', to: 'pro' };
    const sc = await requestToken(client, 'downgrade_plan', args);
    assert.equal(sc.summary, 'Move Globex (acct_1024) from scale ($49.00/mo) to pro ($19.00/mo).');
    assert.equal(await planOf(client, 'acct_1024'), 'scale');
    const ran = assertRan(
      await client.callTool({ name: 'downgrade_plan', arguments: { ...args, __confirm_token: sc.confirm_token } }),
    );
    assert.equal(ran.from_plan, 'scale');
    assert.equal(ran.to_plan, 'pro');
    assert.equal(await planOf(client, 'acct_1024'), 'pro');
  });

  gatewayIt('refund_invoice: $5 on inv_1003 is confirmed with a token, refunded once', async (client) => {
    const args = { invoice_id: 'inv_1003', amount: 5 };
    const sc = await requestToken(client, 'refund_invoice', args);
    assert.match(sc.summary, /\$5\.00/);
    assert.match(sc.summary, /inv_1003/);
    assert.equal((await invoice(client, 'acct_9931', 'inv_1003')).refunded, 0, 'describing must not refund');

    const withToken = { ...args, __confirm_token: sc.confirm_token };
    const ran = assertRan(await client.callTool({ name: 'refund_invoice', arguments: withToken }));
    assert.equal(ran.invoice_id, 'inv_1003');
    assert.equal(ran.amount, 5);

    let inv = await invoice(client, 'acct_9931', 'inv_1003');
    assert.equal(inv.refunded, 5);
    assert.equal(inv.refundable, 475);

    assertTokenRefused(await client.callTool({ name: 'refund_invoice', arguments: withToken }), 'CONSENT_TOKEN_INVALID');
    inv = await invoice(client, 'acct_9931', 'inv_1003');
    assert.equal(inv.refunded, 5, 'a reused token must not refund again');
  });

  gatewayIt('refund_invoice over $1,000 waits for approval even with a token from a small refund', async (client) => {
    const { confirm_token } = await requestToken(client, 'refund_invoice', { invoice_id: 'inv_1005', amount: 5 });
    const res = await client.callTool({
      name: 'refund_invoice',
      arguments: { invoice_id: 'inv_1005', amount: 2000, __confirm_token: confirm_token },
    });
    assertGatewayError(res, 'APPROVAL_PENDING');
    assert.equal((await invoice(client, 'acct_1024', 'inv_1005')).refunded, 0);
  });
});

describe('token mode with dry run on (MCP_DRY_RUN unset)', () => {
  gatewayIt(
    'token tools answer DRY_RUN_PREVIEW with the token hint and no confirm_token',
    async (client) => {
      const upgrade = assertPreview(
        await client.callTool({ name: 'upgrade_plan', arguments: NORTHWIND_UPGRADE }),
        NORTHWIND_UPGRADE,
        TOKEN_DRY_RUN_HINT,
      );
      assert.equal(upgrade.summary, NORTHWIND_SUMMARY, 'the dry-run preview shows the same summary');

      const refundArgs = { invoice_id: 'inv_1003', amount: 5 };
      const refund = assertPreview(
        await client.callTool({ name: 'refund_invoice', arguments: refundArgs }),
        refundArgs,
        TOKEN_DRY_RUN_HINT,
      );
      assert.match(refund.summary, /\$5\.00/);

      assert.equal(await planOf(client, 'acct_9931'), 'pro');
      assert.equal((await invoice(client, 'acct_9931', 'inv_1003')).refunded, 0);
    },
    { dryRunOn: true },
  );
});

describe('token handshake over streamable HTTP (sessions), MCP_DRY_RUN=false', () => {
  let gw;
  // Every tools/call the transport POSTs: its session id and arguments.
  const calls = [];
  const recordingFetch = async (input, init) => {
    if ((init?.method ?? 'GET').toUpperCase() === 'POST' && typeof init.body === 'string') {
      const messages = [].concat(JSON.parse(init.body));
      for (const m of messages) {
        if (m.method === 'tools/call') {
          calls.push({ session: new Headers(init.headers).get('mcp-session-id'), params: m.params });
        }
      }
    }
    return fetch(input, init);
  };

  before(async () => {
    gw = await startHttp({ dryRun: 'false', fetch: recordingFetch });
  }, T);
  after(async () => {
    await gw?.close();
  }, T);

  it('a token issued in one HTTP request is redeemed in another of the same session', T, async () => {
    const session = gw.transport.sessionId;
    assert.ok(session, 'expected an Mcp-Session-Id');
    assert.match(gw.stderr(), /\(sessions/);

    const { confirm_token } = await requestToken(gw.client, 'upgrade_plan', NORTHWIND_UPGRADE);
    const withToken = { ...NORTHWIND_UPGRADE, __confirm_token: confirm_token };
    assertUpgradedNorthwind(await gw.client.callTool({ name: 'upgrade_plan', arguments: withToken }));
    assert.equal(await planOf(gw.client, 'acct_9931'), 'scale');
    assertTokenRefused(
      await gw.client.callTool({ name: 'upgrade_plan', arguments: withToken }),
      'CONSENT_TOKEN_INVALID',
    );

    // Describe and redeem went out as separate POSTs carrying the session id.
    const upgrades = calls.filter((c) => c.params?.name === 'upgrade_plan');
    assert.equal(upgrades.length, 3, JSON.stringify(calls));
    assert.ok(!('__confirm_token' in upgrades[0].params.arguments), 'the first request asks for a token');
    assert.equal(upgrades[1].params.arguments.__confirm_token, confirm_token, 'the second request redeems it');
    for (const c of upgrades) assert.equal(c.session, session, 'each request carries the session id');
  });
});
