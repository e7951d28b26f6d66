// Mode elicit through `interlock serve`: a human confirms delete_customer and
// promote_release in a form the client renders, driven by two official
// TypeScript clients.
//
// - `@modelcontextprotocol/sdk` 1.x speaks 2025-11-25: over stdio and over
//   streamable HTTP with sessions the gateway sends `elicitation/create` in
//   the middle of the call, answered by the client's ElicitRequestSchema
//   handler.
// - `@modelcontextprotocol/client` 2.x, pinned to 2026-07-28 (over stdio and
//   over `--stateless` HTTP): the call answers `input_required` with
//   `inputRequests.interlock_confirm` and a `requestState`; the client
//   retries with `inputResponses`. The client's driver does this by itself
//   through the registered `elicitation/create` handler; with
//   `allowInputRequired: true` the test drives the retry by hand.
//
// A client that declares no elicitation, and a 2025-11-25 client over
// stateless HTTP (the server cannot send it a request), get the token
// fallback instead. Every gateway runs with MCP_DRY_RUN=false (except the
// dry-run tests) and its own --data directory.
//
//   INTERLOCK_BIN=/path/to/interlock npm test
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import {
  ELICIT_DRY_RUN_HINT,
  SDK1,
  SDK2,
  TEST_TIMEOUT,
  assertGatewayError,
  assertPreview,
  startHttp,
  startStdio,
  tamper,
  assertRan,
} from './harness.mjs';

const T = { timeout: TEST_TIMEOUT };

const MRTR = '2026-07-28';
const FORM_ID = 'interlock_confirm';
const NORTHWIND = 'acct_9931';
const DELETE_NORTHWIND = { id: NORTHWIND };
const ACCEPT_NORTHWIND = { action: 'accept', content: { confirm: true, type_back: NORTHWIND } };
const TOKEN_FORMAT = /^ilt1_[A-Za-z0-9_-]{20,}$/;
const TOKEN_BODY_KEYS = ['confirm_token', 'confirm_required', 'ttl_seconds', 'expires_at'];

// The human at the client: answers each form with `answer` (a result, or a
// function of the request params) and remembers every form it was shown.
function scriptedHuman(answer) {
  return {
    answer,
    asked: [],
    async handle(params) {
      this.asked.push(params);
      return typeof this.answer === 'function' ? this.answer(params) : this.answer;
    },
  };
}

function attachHuman(sdk, client, human) {
  if (sdk === SDK1) client.setRequestHandler(ElicitRequestSchema, (req) => human.handle(req.params));
  else client.setRequestHandler('elicitation/create', (req) => human.handle(req.params));
}

// Client options per SDK: 1.x declares `elicitation: {}` (form support by
// default), 2.x declares form mode explicitly and pins 2026-07-28.
function clientOptions(sdk, { elicitation = true } = {}) {
  const opts = {};
  if (elicitation) opts.capabilities = sdk === SDK1 ? { elicitation: {} } : { elicitation: { form: {} } };
  if (sdk === SDK2) opts.versionNegotiation = { mode: { pin: MRTR } };
  return opts;
}

// Every tools/call the HTTP transport POSTs (to see the MRTR retry on the wire).
function recordingFetch(calls) {
  return async (input, init) => {
    if ((init?.method ?? 'GET').toUpperCase() === 'POST' && typeof init.body === 'string') {
      for (const m of [].concat(JSON.parse(init.body))) {
        if (m.method === 'tools/call') {
          calls.push({ session: new Headers(init.headers).get('mcp-session-id'), params: m.params });
        }
      }
    }
    return fetch(input, init);
  };
}

// The ways a client with a form reaches the gateway.
const FORM_CONNECTIONS = [
  { label: 'SDK 1.x (2025-11-25) over stdio', sdk: SDK1, transport: 'stdio' },
  { label: 'SDK 1.x (2025-11-25) over streamable HTTP with sessions', sdk: SDK1, transport: 'sessions' },
  { label: 'client 2.x (2026-07-28, MRTR) over stdio', sdk: SDK2, transport: 'stdio' },
  { label: 'client 2.x (2026-07-28, MRTR) over stateless streamable HTTP', sdk: SDK2, transport: 'stateless' },
  // The default endpoint serves a 2026-07-28 client statelessly beside the sessions of earlier ones.
  { label: 'client 2.x (2026-07-28, MRTR) over streamable HTTP with sessions', sdk: SDK2, transport: 'sessions' },
];

// Starts a gateway for conn with a scripted human; runs fn; stops it.
async function withGateway(conn, { answer, elicitation = true, dryRunOn = false } = {}, fn) {
  const human = scriptedHuman(answer);
  const calls = [];
  const opts = {
    dryRun: dryRunOn ? undefined : 'false',
    sdk: conn.sdk,
    clientOptions: clientOptions(conn.sdk, { elicitation }),
    setup: elicitation ? (client) => attachHuman(conn.sdk, client, human) : undefined,
  };
  const gw =
    conn.transport === 'stdio'
      ? await startStdio(opts)
      : await startHttp({ ...opts, stateless: conn.transport === 'stateless', fetch: recordingFetch(calls) });
  try {
    if (conn.sdk === SDK2) {
      assert.equal(gw.client.getNegotiatedProtocolVersion(), MRTR, 'the 2.x client must speak 2026-07-28');
    } else if (conn.transport !== 'stdio') {
      assert.equal(gw.transport.protocolVersion, '2025-11-25', 'the 1.x client speaks 2025-11-25');
    }
    if (conn.sdk === SDK1 && conn.transport === 'sessions') assert.ok(gw.transport.sessionId, 'expected an Mcp-Session-Id');
    if (conn.sdk === SDK2 || conn.transport === 'stateless') assert.equal(gw.transport.sessionId, undefined, 'no session');
    await fn({ client: gw.client, human, calls, gw });
  } catch (err) {
    err.message += `\n--- gateway stderr (tail) ---\n${gw.stderr().slice(-3000)}`;
    throw err;
  } finally {
    await gw.close();
  }
}

// get_customer: the customer's record, or null when the gateway answers
// NOT_FOUND.
async function customer(client, id) {
  const res = await client.callTool({ name: 'get_customer', arguments: { id } });
  if (res.isError) {
    assertGatewayError(res, 'NOT_FOUND');
    return null;
  }
  assert.equal(res.structuredContent?.id, id, JSON.stringify(res));
  return res.structuredContent;
}

async function assertNorthwindExists(client) {
  const c = await customer(client, NORTHWIND);
  assert.ok(c, 'acct_9931 must still exist: nothing may be deleted without a clean accept');
  assert.equal(c.name, 'Northwind Traders');
  assert.equal(c.invoice_count, 3);
}

function assertDeletedNorthwind(res) {
  const sc = assertRan(res);
  assert.equal(sc.deleted, true);
  assert.equal(sc.id, NORTHWIND);
  assert.equal(sc.name, 'Northwind Traders');
  assert.equal(sc.invoices_deleted, 3);
  return sc;
}

// A refusal: the given code and retriability, and neither a token nor a form.
function assertRefused(res, code, retriable) {
  const sc = assertGatewayError(res, code);
  assert.equal(sc.retriable, retriable, `${code}: retriable must be ${retriable}: ${JSON.stringify(sc)}`);
  for (const key of TOKEN_BODY_KEYS) assert.ok(!(key in sc), `${code} must not carry ${key}: ${JSON.stringify(sc)}`);
  assert.ok(!('resultType' in res), `${code} must be a complete result: ${JSON.stringify(res)}`);
  return sc;
}

function assertDeclined(res, tool) {
  const sc = assertRefused(res, 'DECLINED', false);
  assert.match(sc.recovery_hint, /refused/i, 'the hint says the user refused');
  assert.match(sc.recovery_hint, new RegExp(`not call ${tool} again`), 'the hint says not to call again');
  assert.match(sc.recovery_hint, /new instructions/i, '…without new instructions');
  return sc;
}

// A flat form: an object of primitive properties only.
function assertFlatForm(params) {
  assert.equal(params.mode ?? 'form', 'form', `expected a form, got ${JSON.stringify(params)}`);
  assert.equal(typeof params.message, 'string');
  const schema = params.requestedSchema;
  assert.equal(schema?.type, 'object', JSON.stringify(params));
  for (const [name, prop] of Object.entries(schema.properties)) {
    assert.ok(['boolean', 'string', 'number', 'integer'].includes(prop.type), `${name} must be a primitive: ${JSON.stringify(prop)}`);
  }
  assert.equal(schema.properties.confirm?.type, 'boolean', 'the form has a confirm checkbox');
  assert.ok(schema.required?.includes('confirm'), 'confirm is required');
  return schema;
}

// delete_customer's form: the get_customer preview in the message, the
// checkbox and the id to type back.
function assertDeleteForm(params) {
  const schema = assertFlatForm(params);
  for (const part of ['Northwind Traders', 'acct_9931', '3 invoices', 'This cannot be undone']) {
    assert.ok(params.message.includes(part), `message ${JSON.stringify(params.message)} must name ${part}`);
  }
  assert.deepEqual(Object.keys(schema.properties).sort(), ['confirm', 'type_back']);
  assert.equal(schema.properties.type_back.type, 'string');
  assert.match(schema.properties.type_back.title ?? '', /acct_9931/, 'the field says what to type');
  assert.deepEqual([...schema.required].sort(), ['confirm', 'type_back']);
}

// promote_release's form: the checkbox and the environment to pick.
function assertPromoteForm(params, service = 'web') {
  const schema = assertFlatForm(params);
  assert.match(params.message, new RegExp(`\\b${service}\\b`), 'the message names the service');
  assert.deepEqual(Object.keys(schema.properties).sort(), ['confirm', 'environment']);
  assert.equal(schema.properties.environment.type, 'string');
  assert.deepEqual([...schema.properties.environment.enum].sort(), ['production', 'staging']);
  assert.deepEqual([...schema.required].sort(), ['confirm', 'environment']);
}

const pick = (environment) => ({ action: 'accept', content: { confirm: true, environment } });

// web runs v2.1.0 in production and v2.1.1 (its latest) in staging. A
// promotion to production that reports the change from v2.1.0 proves that no
// earlier call touched production.
async function assertProductionUntouched(client, human) {
  human.answer = pick('production');
  const before = human.asked.length;
  const sc = assertRan(await client.callTool({ name: 'promote_release', arguments: { service: 'web' } }));
  assert.equal(human.asked.length, before + 1);
  assert.equal(sc.environment, 'production');
  assert.equal(sc.previous_version, 'v2.1.0', 'production must still run v2.1.0');
  assert.equal(sc.changed, true);
}

for (const conn of FORM_CONNECTIONS) {
  describe(`elicit: ${conn.label}`, () => {
    const gwIt = (name, opts, fn) => it(name, T, () => withGateway(conn, opts, fn));

    gwIt('unknown customer: NOT_FOUND from the preview, and nobody is asked', { answer: ACCEPT_NORTHWIND }, async ({ client, human }) => {
      const sc = assertRefused(
        await client.callTool({ name: 'delete_customer', arguments: { id: 'acct_0000' } }),
        'NOT_FOUND',
        false,
      );
      assert.match(sc.message, /acct_0000/);
      assert.equal(human.asked.length, 0, 'the human must not be asked about a customer that does not exist');
    });

    gwIt('accept with the typed id deletes the customer; the form shows the preview', { answer: ACCEPT_NORTHWIND }, async ({ client, human }) => {
      await assertNorthwindExists(client);
      assertDeletedNorthwind(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }));
      assert.equal(human.asked.length, 1, 'the human is asked exactly once');
      assertDeleteForm(human.asked[0]);
      assert.equal(await customer(client, NORTHWIND), null, 'acct_9931 must be gone');
    });

    gwIt('accept with a wrong typed id is DECLINED and deletes nothing', { answer: { action: 'accept', content: { confirm: true, type_back: 'acct_9932' } } }, async ({ client, human }) => {
      const sc = assertDeclined(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }), 'delete_customer');
      assert.match(sc.message, /did not match/i, 'the message says the typed value did not match');
      assert.equal(human.asked.length, 1);
      await assertNorthwindExists(client);
    });

    gwIt('accept without ticking the box is DECLINED and deletes nothing', { answer: { action: 'accept', content: { confirm: false, type_back: NORTHWIND } } }, async ({ client, human }) => {
      assertDeclined(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }), 'delete_customer');
      assert.equal(human.asked.length, 1);
      await assertNorthwindExists(client);
    });

    gwIt('decline is DECLINED (not retriable; the hint says the user refused) and deletes nothing', { answer: { action: 'decline' } }, async ({ client, human }) => {
      assertDeclined(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }), 'delete_customer');
      assert.equal(human.asked.length, 1);
      assertDeleteForm(human.asked[0]);
      await assertNorthwindExists(client);
    });

    gwIt('cancel is CANCELLED (retriable) and deletes nothing', { answer: { action: 'cancel' } }, async ({ client, human }) => {
      assertRefused(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }), 'CANCELLED', true);
      assert.equal(human.asked.length, 1);
      await assertNorthwindExists(client);
    });

    gwIt('the model\'s __confirm / __confirm_token does not skip the form', { answer: { action: 'decline' } }, async ({ client, human }) => {
      for (const meta of [{ __confirm: true }, { __confirm_token: 'ilt1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }]) {
        const res = await client.callTool({ name: 'delete_customer', arguments: { ...DELETE_NORTHWIND, ...meta } });
        assert.notEqual(res.structuredContent?.deleted, true, `${JSON.stringify(meta)} must not delete: ${JSON.stringify(res)}`);
        assertDeclined(res, 'delete_customer');
      }
      assert.equal(human.asked.length, 2, 'the human is asked every time');
      await assertNorthwindExists(client);
    });

    gwIt('promote_release: the human picks staging over the model\'s production; staging is what runs', { answer: pick('staging') }, async ({ client, human }) => {
      const sc = assertRan(
        await client.callTool({ name: 'promote_release', arguments: { service: 'web', environment: 'production' } }),
      );
      assert.equal(human.asked.length, 1);
      assertPromoteForm(human.asked[0]);
      assert.equal(sc.service, 'web');
      assert.equal(sc.environment, 'staging', 'the human\'s pick replaces the model\'s value');
      assert.equal(sc.version, 'v2.1.1');
      await assertProductionUntouched(client, human);
    });

    gwIt('promote_release: decline deploys nothing', { answer: { action: 'decline' } }, async ({ client, human }) => {
      assertDeclined(
        await client.callTool({ name: 'promote_release', arguments: { service: 'web', environment: 'production' } }),
        'promote_release',
      );
      assert.equal(human.asked.length, 1);
      assertPromoteForm(human.asked[0]);
      await assertProductionUntouched(client, human);
    });

    gwIt('dry run on: DRY_RUN_PREVIEW with the elicit hint, and nobody is asked', { answer: ACCEPT_NORTHWIND, dryRunOn: true }, async ({ client, human }) => {
      const sc = assertPreview(
        await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }),
        DELETE_NORTHWIND,
        ELICIT_DRY_RUN_HINT,
      );
      assert.match(sc.summary, /Northwind Traders \(acct_9931/);
      assertPreview(
        await client.callTool({ name: 'promote_release', arguments: { service: 'web' } }),
        { service: 'web' },
        ELICIT_DRY_RUN_HINT,
      );
      assert.equal(human.asked.length, 0, 'nobody is asked while dry run is on');
      await assertNorthwindExists(client);
    });

    if (conn.sdk === SDK2 && conn.transport !== 'stdio') {
      gwIt('on the wire: two POSTs, the retry carries inputResponses and the requestState', { answer: ACCEPT_NORTHWIND }, async ({ client, calls }) => {
        assertDeletedNorthwind(await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }));
        const deletes = calls.filter((c) => c.params?.name === 'delete_customer');
        assert.equal(deletes.length, 2, JSON.stringify(calls));
        assert.ok(!('inputResponses' in deletes[0].params) && !('requestState' in deletes[0].params));
        assert.deepEqual(deletes[1].params.arguments, DELETE_NORTHWIND);
        assert.deepEqual(deletes[1].params.inputResponses, { [FORM_ID]: ACCEPT_NORTHWIND });
        assert.match(deletes[1].params.requestState, TOKEN_FORMAT);
        for (const c of deletes) assert.equal(c.session, null, 'stateless: no session id');
      });
    }
  });
}

// --- 2.x by hand: allowInputRequired hands the input_required result back
// and the test retries with inputResponses and requestState itself.

const MANUAL = { allowInputRequired: true };

function assertInputRequired(res) {
  assert.equal(res.resultType, 'input_required', `expected input_required, got ${JSON.stringify(res)}`);
  assert.ok(!res.isError, 'input_required is not an error');
  assert.deepEqual(Object.keys(res.inputRequests), [FORM_ID]);
  const req = res.inputRequests[FORM_ID];
  assert.equal(req.method, 'elicitation/create');
  assert.equal(req.params.mode, 'form');
  assert.equal(typeof res.requestState, 'string');
  assert.match(res.requestState, TOKEN_FORMAT);
  return req.params;
}

function retry(client, name, args, requestState, response) {
  const params = { name, arguments: args, requestState };
  if (response !== undefined) params.inputResponses = { [FORM_ID]: response };
  return client.callTool(params, MANUAL);
}

for (const conn of FORM_CONNECTIONS.filter((c) => c.sdk === SDK2)) {
  describe(`elicit, retried by hand: ${conn.label}`, () => {
    const gwIt = (name, fn) =>
      it(name, T, () =>
        withGateway(conn, { answer: () => assert.fail('the 2.x driver must not answer by itself here') }, fn),
      );

    gwIt('input_required with the form; the retry runs it once; a replayed requestState is CONSENT_TOKEN_INVALID', async ({ client, human }) => {
      const first = await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }, MANUAL);
      assertDeleteForm(assertInputRequired(first));
      await assertNorthwindExists(client);

      assertDeletedNorthwind(await retry(client, 'delete_customer', DELETE_NORTHWIND, first.requestState, ACCEPT_NORTHWIND));
      assert.equal(await customer(client, NORTHWIND), null);

      const replay = await retry(client, 'delete_customer', DELETE_NORTHWIND, first.requestState, ACCEPT_NORTHWIND);
      assertRefused(replay, 'CONSENT_TOKEN_INVALID', false);
      assert.equal(human.asked.length, 0, 'manual mode: the handler is never called');
    });

    gwIt('a tampered requestState is CONSENT_TOKEN_INVALID; the state as issued still works', async ({ client }) => {
      const first = await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }, MANUAL);
      assertInputRequired(first);
      assertRefused(
        await retry(client, 'delete_customer', DELETE_NORTHWIND, tamper(first.requestState), ACCEPT_NORTHWIND),
        'CONSENT_TOKEN_INVALID',
        false,
      );
      await assertNorthwindExists(client);
      // Control: INVALID above came from the changed character alone.
      assertDeletedNorthwind(await retry(client, 'delete_customer', DELETE_NORTHWIND, first.requestState, ACCEPT_NORTHWIND));
    });

    gwIt('a requestState retried with other arguments is CONSENT_TOKEN_MISMATCH and deletes nothing', async ({ client }) => {
      const first = await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }, MANUAL);
      assertInputRequired(first);
      const other = { id: 'acct_2048' };
      assertRefused(
        await retry(client, 'delete_customer', other, first.requestState, {
          action: 'accept',
          content: { confirm: true, type_back: 'acct_2048' },
        }),
        'CONSENT_TOKEN_MISMATCH',
        false,
      );
      assert.ok(await customer(client, 'acct_2048'), 'acct_2048 must still exist');
      await assertNorthwindExists(client);
    });

    gwIt('decline, cancel and a retry without an answer run nothing', async ({ client }) => {
      for (const [response, code, retriable] of [
        [{ action: 'decline' }, 'DECLINED', false],
        [{ action: 'cancel' }, 'CANCELLED', true],
        [undefined, 'CANCELLED', true],
      ]) {
        const first = await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }, MANUAL);
        assertInputRequired(first);
        const res = await retry(client, 'delete_customer', DELETE_NORTHWIND, first.requestState, response);
        if (code === 'DECLINED') assertDeclined(res, 'delete_customer');
        else assertRefused(res, code, retriable);
        await assertNorthwindExists(client);
      }
    });

    gwIt('promote_release: the picked environment is injected; one outside the enum is DECLINED', async ({ client }) => {
      const args = { service: 'web', environment: 'production' };
      let first = await client.callTool({ name: 'promote_release', arguments: args }, MANUAL);
      assertPromoteForm(assertInputRequired(first));
      assertDeclined(await retry(client, 'promote_release', args, first.requestState, pick('moon')), 'promote_release');

      first = await client.callTool({ name: 'promote_release', arguments: args }, MANUAL);
      assertInputRequired(first);
      const sc = assertRan(await retry(client, 'promote_release', args, first.requestState, pick('staging')));
      assert.equal(sc.environment, 'staging');

      // Production still runs v2.1.0: neither call above deployed there.
      first = await client.callTool({ name: 'promote_release', arguments: { service: 'web' } }, MANUAL);
      assertInputRequired(first);
      const prod = assertRan(await retry(client, 'promote_release', { service: 'web' }, first.requestState, pick('production')));
      assert.equal(prod.environment, 'production');
      assert.equal(prod.previous_version, 'v2.1.0');
      assert.equal(prod.changed, true);
    });
  });
}

// --- The token fallback: clients that cannot show a form.

function assertConfirmationRequired(res, tool, args) {
  const sc = assertGatewayError(res, 'CONFIRMATION_REQUIRED');
  assert.equal(sc.retriable, false);
  assert.deepEqual(sc.preview, args);
  assert.equal(sc.confirm_required, true);
  assert.match(sc.confirm_token, TOKEN_FORMAT);
  assert.match(sc.recovery_hint, /__confirm_token/);
  assert.match(sc.recovery_hint, new RegExp(`\\b${tool}\\b`));
  assert.ok(!('resultType' in res), 'the fallback is no input_required result');
  return sc;
}

const FALLBACK_CONNECTIONS = [
  { label: 'SDK 1.x over stdio, no elicitation capability', sdk: SDK1, transport: 'stdio', elicitation: false },
  { label: 'SDK 1.x over stateless HTTP, with elicitation (the server cannot send it a request)', sdk: SDK1, transport: 'stateless', elicitation: true },
  { label: 'client 2.x (2026-07-28) over stdio, no elicitation capability', sdk: SDK2, transport: 'stdio', elicitation: false },
];

for (const conn of FALLBACK_CONNECTIONS) {
  describe(`elicit falls back to the token: ${conn.label}`, () => {
    const gwIt = (name, fn) =>
      it(name, T, () =>
        withGateway(conn, { elicitation: conn.elicitation, answer: () => assert.fail('nobody may be asked') }, fn),
      );

    gwIt('delete_customer answers CONFIRMATION_REQUIRED with the preview summary; redeeming deletes once', async ({ client, human }) => {
      const sc = assertConfirmationRequired(
        await client.callTool({ name: 'delete_customer', arguments: DELETE_NORTHWIND }),
        'delete_customer',
        DELETE_NORTHWIND,
      );
      for (const part of ['Northwind Traders', 'acct_9931', '3 invoices', 'This cannot be undone']) {
        assert.ok(sc.summary.includes(part), `summary ${JSON.stringify(sc.summary)} must name ${part}`);
      }
      await assertNorthwindExists(client);

      const withToken = { ...DELETE_NORTHWIND, __confirm_token: sc.confirm_token };
      assertDeletedNorthwind(await client.callTool({ name: 'delete_customer', arguments: withToken }));
      assert.equal(await customer(client, NORTHWIND), null);
      assertRefused(await client.callTool({ name: 'delete_customer', arguments: withToken }), 'CONSENT_TOKEN_INVALID', false);
      assert.equal(human.asked.length, 0, 'nobody is asked in a form');
    });

    gwIt('delete_customer of an unknown customer is NOT_FOUND and issues no token', async ({ client }) => {
      assertRefused(
        await client.callTool({ name: 'delete_customer', arguments: { id: 'acct_0000' } }),
        'NOT_FOUND',
        false,
      );
    });

    if (conn.sdk === SDK1 && conn.transport === 'stdio') {
      // Without a form, the user's choice of environment comes through the
      // agent: the gate asks for it, and the summary the user confirms names it.
      gwIt('promote_release without a form: the environment must be the user\'s choice, named in the summary', async ({ client }) => {
        const missing = await client.callTool({ name: 'promote_release', arguments: { service: 'web' } });
        assert.equal(missing.isError, true);
        assert.equal(missing.structuredContent.code, 'VALIDATION_FAILED');
        assert.equal(missing.structuredContent.validation_issues?.[0]?.path, 'environment');
        assert.match(missing.structuredContent.recovery_hint, /Ask the user/);
        const args = { service: 'web', environment: 'staging' };
        const sc = assertConfirmationRequired(
          await client.callTool({ name: 'promote_release', arguments: args }),
          'promote_release',
          args,
        );
        assert.match(sc.summary, /Target environment: staging/);
        const res = await client.callTool({ name: 'promote_release', arguments: { ...args, __confirm_token: sc.confirm_token } });
        const ran = assertRan(res);
        assert.equal(ran.service, 'web');
        assert.equal(ran.environment, 'staging');
      });
    }
  });
}

describe('elicit: SDK 1.x, an answer outside the form\'s schema', () => {
  it('an environment outside the enum runs nothing', T, () =>
    withGateway(FORM_CONNECTIONS[0], { answer: pick('moon') }, async ({ client, human }) => {
      let res;
      try {
        res = await client.callTool({ name: 'promote_release', arguments: { service: 'web' } });
      } catch (err) {
        res = { thrown: err };
      }
      assert.ok(res.thrown || res.isError === true, `must not run: ${JSON.stringify(res)}`);
      assert.equal(human.asked.length, 1);
      await assertProductionUntouched(client, human);
    }),
  );
});
