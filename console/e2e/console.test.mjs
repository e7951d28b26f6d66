// The approvers' console in a real browser: a call waits, an approver
// decides in the page, and the agent's next identical call runs once, or
// not at all; or, for an agent whose call became a task, its polls see
// the call run once, or declined.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  T,
  assertPending,
  call,
  callAsTask,
  invoice,
  launchBrowser,
  listening,
  mcp,
  screenshot,
  serve,
  settled,
  sha256,
  signIn,
} from './harness.mjs';

let browser;
before(async () => {
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
});

describe('the built-in demo: no API keys, the operator signs in with the one-time link', () => {
  let gw;
  let operator;
  before(async () => {
    gw = await serve();
    operator = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  });
  after(async () => {
    await gw?.close();
  });

  it('the one-time link signs the operator in, once', T, async () => {
    assert.ok(gw.link, 'the banner prints a one-time link');
    await operator.goto(gw.link);
    assert.equal(new URL(operator.url()).pathname, '/console/');
    await operator.getByText('Signed in as operator').waitFor();
    await operator.getByText('Nothing waits for your decision.').waitFor();

    const stranger = await browser.newContext();
    const page = await stranger.newPage();
    const res = await page.goto(gw.link);
    assert.equal(res.status(), 403);
    await page.getByRole('heading', { name: 'Link already used' }).waitFor();
    await screenshot(page, 'link-used');
    await stranger.close();
  });

  it('a large refund waits; the operator approves it with the keyboard; the re-call runs once', T, async () => {
    const args = { invoice_id: 'inv_1005', amount: 1100 };
    // The open page listens for changes before the call is made, so the
    // event of the new approval reaches it.
    await listening(operator);
    const first = assertPending(await call(gw, 'refund_invoice', args));
    assert.equal(first.approval_url, `${gw.base}/console/approvals/${first.approval_id}`);

    // The page that was open shows the new approval without a reload.
    await operator.getByRole('status').filter({ hasText: 'New approval waiting: refund_invoice, called by anonymous.' }).waitFor();
    const card = operator.getByRole('article', { name: /refund_invoice/ });
    await card.getByText('Refund $1,100.00 on invoice inv_1005').waitFor();
    const amount = card.getByRole('row', { name: /amount/ });
    assert.equal(await amount.getByRole('cell').textContent(), '1100');
    await screenshot(operator, 'pending');

    await operator.goto(first.approval_url);
    await operator.getByRole('heading', { level: 1, name: 'Approval of refund_invoice' }).waitFor();
    await operator.getByLabel('Reason').fill('Globex was billed twice in March');
    await screenshot(operator, 'approval');
    await operator.keyboard.press('Tab');
    assert.equal(await operator.evaluate(() => document.activeElement.textContent), 'Approve');
    await operator.keyboard.press('Enter');
    await operator.getByText("You approved anonymous's call of refund_invoice.").waitFor();
    await operator.getByText('Approved: runs when the caller calls again or polls its task').first().waitFor();

    await listening(operator);
    const ran = await call(gw, 'refund_invoice', args);
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    assert.equal(ran.body.structuredContent.amount, 1100);
    // The page learns that the call ran.
    await operator.getByText('Approved and run').first().waitFor();
    await screenshot(operator, 'approved');

    const again = assertPending(await call(gw, 'refund_invoice', args));
    assert.notEqual(again.approval_id, first.approval_id, 'a used approval does not run a second call');
    const inv = await invoice(gw, 'acct_1024', 'inv_1005');
    assert.equal(inv.refunded, 1100, 'refunded exactly once');

    await operator.goto(`${gw.base}/console/history`);
    const history = operator.getByRole('table', { name: /Recent decisions/ });
    await history.getByRole('row', { name: /operator .*approved the call of anonymous/ }).waitFor();
    await history.getByRole('row', { name: /anonymous .*ran, approved by operator ran/ }).waitFor();
    await screenshot(operator, 'history');
  });

  it('a denial ends the call with the approver\'s reason', T, async () => {
    const args = { invoice_id: 'inv_1001', amount: 1100 };
    const pending = assertPending(await call(gw, 'refund_invoice', args));
    await operator.goto(pending.approval_url);
    await operator.getByLabel('Reason').fill('No refund without the customer asking');
    await operator.getByRole('button', { name: 'Deny' }).click();
    await operator.getByText("You denied anonymous's call of refund_invoice.").waitFor();
    await operator.getByRole('listitem').filter({ hasText: 'operator denied' }).waitFor();
    await screenshot(operator, 'denied');

    const res = await call(gw, 'refund_invoice', args);
    assert.equal(res.status, 403, JSON.stringify(res.body));
    assert.equal(res.body.code, 'DECLINED');
    assert.match(res.body.message, /No refund without the customer asking/);
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1001')).refunded, 0);
  });

  it('reads well on a phone', T, async () => {
    const pending = assertPending(await call(gw, 'refund_invoice', { invoice_id: 'inv_1001', amount: 1200 }));
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, storageState: await operator.context().storageState() });
    const page = await phone.newPage();
    await page.goto(pending.approval_url);
    await page.getByRole('button', { name: 'Approve' }).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow}px`);
    await screenshot(page, 'phone');
    await phone.close();
  });
});

// financeHead is the demo upstream and the finance team's keys, up to the
// rules.
function financeHead(dir) {
  const keys = Object.entries(KEYS)
    .map(([who, key]) => `    - {sha256: ${sha256(key)}, principal: ${who}, tenant: acme, groups: [finance]}`)
    .join('\n');
  return `upstreams:
  - name: demo
    command: [${JSON.stringify(process.env.INTERLOCK_BIN)}, demo, --db, ${JSON.stringify(`${dir}/demo.db`)}]
auth:
  keys:
${keys}
rules:`;
}

const KEYS = { alice: 'key-alice-0123456789abcdef', bob: 'key-bob-0123456789abcdef', carol: 'key-carol-0123456789abcdef' };

// Finance approves: reminders within 3 seconds, large refunds two of them.
function financeConfig(dir) {
  return `${financeHead(dir)}
  - name: reminders
    match: {tools: [send_reminder]}
    mode: approval
    approvers: ["group:finance"]
    timeout: 3s
    summary: "Email a payment reminder to {{.args.customer_id}}."
  - name: refunds-review
    match: {tools: [refund_invoice]}
    when: "num(args.amount) > 100 && num(args.amount) <= 1000"
    mode: approval
    approvers: ["group:finance"]
    summary: "Refund {{.args.amount}} on {{.args.invoice_id}}."
  - name: large-refunds
    match: {tools: [refund_invoice]}
    when: "num(args.amount) > 1000"
    mode: approval
    approvers: ["group:finance"]
    quorum: 2
    summary: "Refund {{.args.amount}} on {{.args.invoice_id}}."
`;
}

describe('approvers with API keys', () => {
  let gw;
  const pages = {};
  before(async () => {
    gw = await serve({ config: financeConfig });
    for (const who of Object.keys(KEYS)) {
      pages[who] = await (await browser.newContext({ viewport: { width: 1000, height: 800 } })).newPage();
      await signIn(pages[who], gw, KEYS[who]);
    }
  });
  after(async () => {
    await gw?.close();
  });

  it('an unknown key does not sign in', T, async () => {
    const page = await (await browser.newContext()).newPage();
    await page.goto(`${gw.base}/console/`);
    await page.getByLabel('API key').fill('not-a-key');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'That is not an API key of this gateway.' }).waitFor();
    await screenshot(page, 'login-refused');
  });

  it('the caller cannot approve their own call', T, async () => {
    const pending = assertPending(await call(gw, 'refund_invoice', { invoice_id: 'inv_1005', amount: 1500 }, KEYS.alice));
    const alice = pages.alice;
    await alice.goto(`${gw.base}/console/`);
    await alice.getByRole('heading', { name: 'Your calls, waiting for others' }).waitFor();
    await alice.goto(pending.approval_url);
    await alice.getByText('You made this call, so you cannot approve or deny it').waitFor();
    assert.equal(await alice.getByRole('button', { name: 'Approve' }).count(), 0);
    await screenshot(alice, 'own-call');

    // A hand-made form with her own session's token is refused as well.
    const status = await alice.evaluate(async (id) => {
      const csrf = document.querySelector('input[name=csrf]').value;
      const body = new URLSearchParams({ csrf, decision: 'approve' });
      const res = await fetch(`/console/approvals/${id}/decide`, { method: 'POST', body });
      return [res.status, await res.text()];
    }, pending.approval_id);
    assert.equal(status[0], 403);
    assert.match(status[1], /You cannot approve or deny your own call/);
    assert.equal((await call(gw, 'refund_invoice', { invoice_id: 'inv_1005', amount: 1500 }, KEYS.alice)).body.code, 'APPROVAL_PENDING');
  });

  it('a quorum of two: one approval is not enough, the second lets the call run once', T, async () => {
    const args = { invoice_id: 'inv_1005', amount: 1500 };
    const pending = assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
    const { bob, carol } = pages;
    await carol.goto(pending.approval_url);
    await bob.goto(pending.approval_url);
    await listening(carol);
    await bob.getByRole('button', { name: 'Approve' }).click();
    await bob.getByText('1 of 2 needed: bob').waitFor();
    await bob.getByText('You approved this call; it waits for the other approvers.').waitFor();
    // Carol's open page shows bob's vote without a reload.
    await carol.getByText('1 of 2 needed: bob').waitFor();
    await screenshot(carol, 'quorum');
    assert.equal((await call(gw, 'refund_invoice', args, KEYS.alice)).body.code, 'APPROVAL_PENDING');

    await carol.getByRole('button', { name: 'Approve' }).click();
    await carol.getByText('2 of 2 needed: bob, carol').waitFor();
    const ran = await call(gw, 'refund_invoice', args, KEYS.alice);
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    assert.equal((await invoice(gw, 'acct_1024', 'inv_1005', KEYS.alice)).refunded, 1500);
    assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
  });

  it('an approval nobody decides in time expires, and the call is cancelled', T, async () => {
    const args = { customer_id: 'acct_9931' };
    const pending = assertPending(await call(gw, 'send_reminder', args, KEYS.alice));
    const bob = pages.bob;
    await bob.goto(pending.approval_url);
    await bob.getByRole('button', { name: 'Approve' }).waitFor();
    await listening(bob);
    // The page turns without a reload once the 3 seconds are over.
    await bob.getByText('Expired undecided').first().waitFor({ timeout: 10_000 });
    assert.equal(await bob.getByRole('button', { name: 'Approve' }).count(), 0);
    await screenshot(bob, 'expired');
    const res = await call(gw, 'send_reminder', args, KEYS.alice);
    assert.equal(res.status, 409, JSON.stringify(res.body));
    assert.equal(res.body.code, 'CANCELLED');
  });
  it('a standing grant: calls inside its condition run at once, others wait, revoking ends it', T, async () => {
    const { bob, carol } = pages;
    const first = { invoice_id: 'inv_1001', amount: 200 };
    const pending = assertPending(await call(gw, 'refund_invoice', first, KEYS.alice));
    await bob.goto(pending.approval_url);
    await bob.getByRole('heading', { name: 'Approve this call and similar ones' }).waitFor();

    // A condition that does not compile is refused with the reason, and
    // the form keeps what was typed.
    await bob.getByLabel('Condition over the arguments').fill('num(args.amount) <=');
    await bob.getByRole('button', { name: 'Grant these calls' }).click();
    await bob.getByRole('alert').filter({ hasText: 'The condition does not compile' }).waitFor();
    assert.equal(await bob.getByLabel('Condition over the arguments').inputValue(), 'num(args.amount) <=');
    await screenshot(bob, 'grant-refused');

    await bob.getByLabel('Condition over the arguments').fill('num(args.amount) <= 300');
    await bob.getByLabel('Lifetime').selectOption('1h');
    await bob.getByLabel('Uses').fill('3');
    await bob.getByLabel('Purpose').fill('duplicate March charges');
    await bob.getByRole('button', { name: 'Grant these calls' }).click();
    await bob.getByText("You approved alice's call of refund_invoice and granted similar calls: 3 uses").waitFor();
    assert.equal(new URL(bob.url()).pathname, '/console/grants');
    const row = bob.getByRole('row', { name: /refund_invoice/ });
    await row.getByText('num(args.amount) <= 300').waitFor();
    await row.getByText('0 of 3').waitFor();
    await carol.goto(`${gw.base}/console/grants`);
    await carol.getByRole('row', { name: /refund_invoice/ }).getByText('0 of 3').waitFor();

    // The waiting call runs, and so does the next one inside the
    // condition, without a new approval; the open pages count the uses.
    await listening(bob);
    await listening(carol);
    assert.equal((await call(gw, 'refund_invoice', first, KEYS.alice)).status, 200);
    const inside = await call(gw, 'refund_invoice', { invoice_id: 'inv_1001', amount: 250 }, KEYS.alice);
    assert.equal(inside.status, 200, JSON.stringify(inside.body));
    await row.getByText('2 of 3').waitFor();
    await carol.getByRole('row', { name: /refund_invoice/ }).getByText('2 of 3').waitFor();
    await screenshot(bob, 'grants');
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1001', KEYS.alice)).refunded, 450);

    // A call outside the condition waits for an approval.
    assertPending(await call(gw, 'refund_invoice', { invoice_id: 'inv_1001', amount: 900 }, KEYS.alice));

    await listening(bob);
    await carol.getByRole('button', { name: 'Revoke the grant of refund_invoice to alice' }).click();
    await carol.getByText('You revoked the grant of refund_invoice to alice').waitFor();
    await carol.getByText('No live grant is yours to revoke.').waitFor();
    // Bob's open page learns of it too.
    await bob.getByText('No live grant is yours to revoke.').waitFor();
    assertPending(await call(gw, 'refund_invoice', { invoice_id: 'inv_1001', amount: 150 }, KEYS.alice));
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1001', KEYS.alice)).refunded, 450);
  });
});

describe("an agent's call waiting as a task (protocol 2026-07-28, MCP's tasks extension)", () => {
  let gw;
  let bob;
  before(async () => {
    gw = await serve({ config: financeConfig });
    bob = await (await browser.newContext({ viewport: { width: 1000, height: 800 } })).newPage();
    await signIn(bob, gw, KEYS.bob);
  });
  after(async () => {
    await gw?.close();
  });

  it("bob approves in the page its status message names; alice's polls see it completed with the refund, made once", T, async () => {
    const args = { invoice_id: 'inv_1002', amount: 300 };
    const { task, approvalUrl } = await callAsTask(gw, 'refund_invoice', args, KEYS.alice);
    assert.match(task.statusMessage, /refund_invoice waits for approval by group:finance; it has not run/);
    assert.equal(new URL(approvalUrl).origin, gw.base);
    assert.ok(task.statusMessage.includes(`(approval ${approvalUrl.split('/').at(-1)})`), task.statusMessage);
    // Nothing ran before anyone decided: the task only waits.
    const waiting = await mcp(gw, 'tasks/get', { taskId: task.taskId }, KEYS.alice);
    assert.equal(waiting.result?.status, 'working', JSON.stringify(waiting));
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1002', KEYS.alice)).refunded, 0);

    await bob.goto(approvalUrl);
    await bob.getByRole('heading', { level: 1, name: 'Approval of refund_invoice' }).waitFor();
    await bob.getByText('Refund 300 on inv_1002.').waitFor();
    await screenshot(bob, 'task-approval');
    await bob.getByRole('button', { name: 'Approve' }).click();
    await bob.getByText("You approved alice's call of refund_invoice.").waitFor();

    await listening(bob);
    const done = await settled(gw, task.taskId, KEYS.alice);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(done.result.isError, undefined, JSON.stringify(done.result));
    assert.equal(done.result.structuredContent.invoice_id, 'inv_1002');
    assert.equal(done.result.structuredContent.amount, 300);
    assert.match(done.result.content[0].text, /inv_1002/, JSON.stringify(done.result.content));
    // The open page learns that the call ran, without a reload.
    await bob.getByText('Approved and run').first().waitFor();
    await bob.getByRole('listitem').filter({ hasText: 'bob approved' }).waitFor();
    await screenshot(bob, 'task-approved');

    // Later polls read the stored result; they do not run the call again.
    const again = await settled(gw, task.taskId, KEYS.alice);
    assert.deepEqual(again.result, done.result);
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1002', KEYS.alice)).refunded, 300, 'refunded exactly once');
  });

  it("bob denies in the page; alice's task completes with the DECLINED error and his reason, and nothing ran", T, async () => {
    const args = { invoice_id: 'inv_1003', amount: 200 };
    const { task, approvalUrl } = await callAsTask(gw, 'refund_invoice', args, KEYS.alice);
    await bob.goto(approvalUrl);
    await bob.getByLabel('Reason').fill('Acme disputes nothing on this invoice');
    await bob.getByRole('button', { name: 'Deny' }).click();
    await bob.getByText("You denied alice's call of refund_invoice.").waitFor();
    await bob.getByRole('listitem').filter({ hasText: 'bob denied' }).waitFor();
    await screenshot(bob, 'task-denied');

    const done = await settled(gw, task.taskId, KEYS.alice);
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(done.result.isError, true, JSON.stringify(done.result));
    assert.equal(done.result.structuredContent.code, 'DECLINED', JSON.stringify(done.result));
    assert.match(done.result.structuredContent.message, /Acme disputes nothing on this invoice/);
    assert.equal((await invoice(gw, 'acct_9931', 'inv_1003', KEYS.alice)).refunded, 0);
    await bob.reload();
    await bob.getByText('Denied', { exact: true }).waitFor();
  });
});

describe('a rule that requires a passkey', () => {
  let gw;
  let bob;
  // WebAuthn needs a secure context and a host name: http://localhost is
  // one, http://127.0.0.1 is not a valid relying party.
  let local;
  before(async () => {
    gw = await serve({
      config: (dir) => `${financeHead(dir)}
  - name: small-refunds-signed
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: ["group:finance"]
    require_passkey: true
    summary: "Refund {{.args.amount}} on {{.args.invoice_id}}."
`,
    });
    local = gw.base.replace('127.0.0.1', 'localhost');
    bob = await (await browser.newContext({ viewport: { width: 1000, height: 800 } })).newPage();
    const cdp = await bob.context().newCDPSession(bob);
    await cdp.send('WebAuthn.enable');
    await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true },
    });
    await signIn(bob, { base: local }, KEYS.bob);
  });
  after(async () => {
    await gw?.close();
  });

  it('without a passkey the call is neither approved in the console nor over REST', T, async () => {
    const args = { invoice_id: 'inv_1001', amount: 40 };
    const pending = assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
    await bob.goto(`${local}/console/approvals/${pending.approval_id}`);
    await bob.getByRole('link', { name: 'Register a passkey' }).waitFor();
    assert.equal(await bob.getByRole('button', { name: 'Approve' }).count(), 0);
    await screenshot(bob, 'passkey-missing');

    const refused = await bob.evaluate(async (id) => {
      const csrf = document.querySelector('input[name=csrf]').value;
      const res = await fetch(`/console/approvals/${id}/decide`, { method: 'POST', body: new URLSearchParams({ csrf, decision: 'approve' }) });
      return [res.status, await res.text()];
    }, pending.approval_id);
    assert.equal(refused[0], 403);
    assert.match(refused[1], /only when it is signed with your passkey/);

    const res = await fetch(`${gw.base}/v1/approvals/${pending.approval_id}/approve`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${KEYS.bob}` },
    });
    const body = await res.json();
    assert.equal(res.status, 403, JSON.stringify(body));
    assert.equal(body.code, 'PERMISSION_DENIED');
    assert.match(body.message, /passkey in the console/);
    assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
  });

  it('bob registers a passkey and approves with it; the re-call runs once', T, async () => {
    await bob.goto(`${local}/console/passkey`);
    await bob.getByRole('button', { name: 'Register a passkey' }).click();
    await bob.getByText('Your passkey is registered for localhost.').waitFor();
    await bob.getByText('You have 1 passkey registered for localhost.').waitFor();
    await screenshot(bob, 'passkey-registered');

    const args = { invoice_id: 'inv_1005', amount: 60 };
    const pending = assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
    await bob.goto(`${local}/console/approvals/${pending.approval_id}`);
    await bob.getByText('confirm your decision with your passkey').waitFor();
    await bob.getByRole('button', { name: 'Approve' }).click();
    await bob.getByText("You approved alice's call of refund_invoice.").waitFor();
    await bob.getByText('Approved: runs when the caller calls again or polls its task').first().waitFor();

    const ran = await call(gw, 'refund_invoice', args, KEYS.alice);
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    const again = assertPending(await call(gw, 'refund_invoice', args, KEYS.alice));
    assert.notEqual(again.approval_id, pending.approval_id, 'a used approval does not run a second call');
    assert.equal((await invoice(gw, 'acct_1024', 'inv_1005', KEYS.alice)).refunded, 60, 'refunded exactly once');
  });
});
