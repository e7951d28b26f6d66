// The console behind a load balancer without affinity: three gateways
// share their store, and a balancer (set up by
// TestConsoleAcrossReplicasInBrowser in cmd/interlock, which runs this
// file) sends each request to the next. Signing in, the pending list, an
// approval's page, the decision, the live update and a passkey all hold,
// whichever gateway each request lands on.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { T, assertPending, call, invoice, launchBrowser, listening, screenshot, signIn } from './harness.mjs';

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this file through TestConsoleAcrossReplicasInBrowser in cmd/interlock`);
  return v;
}

const gw = { base: required('BALANCER') };
// WebAuthn takes a host name as a relying party, not 127.0.0.1.
const local = { base: gw.base.replace('127.0.0.1', 'localhost') };
const KEYS = { agent: required('AGENT_KEY'), bob: required('BOB_KEY') };
const viewport = { width: 1000, height: 800 };

let browser;
before(async () => {
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
});

// told waits until a page's live status, which only an event sets, says
// text.
function told(page, text) {
  return page.locator('#live-status').filter({ hasText: text }).waitFor();
}

describe('three gateways behind a balancer without affinity', () => {
  it('sign in, list, open, approve, and the live update, each request on another gateway', T, async () => {
    const context = await browser.newContext({ viewport });
    const watching = await context.newPage();
    await signIn(watching, gw, KEYS.bob);
    await watching.getByText('Nothing waits for your decision.').waitFor();
    await listening(watching);

    const args = { invoice_id: 'inv_1005', amount: 1500 };
    const before = (await invoice(gw, 'acct_1024', 'inv_1005', KEYS.agent)).refunded;
    const pending = assertPending(await call(gw, 'refund_invoice', args, KEYS.agent));
    // The call reached one gateway, the open page listens on another.
    await told(watching, 'New approval waiting: refund_invoice, called by agent.');
    await watching.getByRole('link', { name: /Review and decide/ }).waitFor();
    await screenshot(watching, 'replicas-pending');

    const deciding = await context.newPage();
    await deciding.goto(`${gw.base}/console/`);
    await deciding.getByRole('link', { name: /Review and decide/ }).click();
    assert.equal(new URL(deciding.url()).pathname, `/console/approvals/${pending.approval_id}`);
    await deciding.getByRole('button', { name: 'Approve' }).click();
    await deciding.getByText("You approved agent's call of refund_invoice.").waitFor();
    await deciding.getByText('Approved: runs when the caller calls again or polls its task').first().waitFor();

    // The page left open learns of the decision without a reload.
    await told(watching, 'refund_invoice is approved by bob; it runs when agent calls it again.');
    await watching.getByText('Nothing waits for your decision.').waitFor();
    await screenshot(watching, 'replicas-decided');

    const ran = await call(gw, 'refund_invoice', args, KEYS.agent);
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    const again = assertPending(await call(gw, 'refund_invoice', args, KEYS.agent));
    assert.notEqual(again.approval_id, pending.approval_id, 'a used approval does not run a second call');
    assert.equal((await invoice(gw, 'acct_1024', 'inv_1005', KEYS.agent)).refunded - before, 1500, 'refunded exactly once');
    await context.close();
  });

  it('a passkey registered through one gateway signs a decision through another', T, async () => {
    const context = await browser.newContext({ viewport });
    const bob = await context.newPage();
    const cdp = await context.newCDPSession(bob);
    await cdp.send('WebAuthn.enable');
    await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true },
    });
    await signIn(bob, local, KEYS.bob);
    // The page that holds the registration's challenge and the form that
    // answers it reach two gateways.
    await bob.goto(`${local.base}/console/passkey`);
    await bob.getByRole('button', { name: 'Register a passkey' }).click();
    await bob.getByText('Your passkey is registered for localhost.').waitFor();
    await bob.getByText('You have 1 passkey registered for localhost.').waitFor();

    const args = { customer_id: 'acct_9931' };
    const pending = assertPending(await call(gw, 'send_reminder', args, KEYS.agent));
    await bob.goto(`${local.base}/console/approvals/${pending.approval_id}`);
    await bob.getByText('confirm your decision with your passkey').waitFor();
    await bob.getByRole('button', { name: 'Approve' }).click();
    await bob.getByText("You approved agent's call of send_reminder.").waitFor();
    await screenshot(bob, 'replicas-passkey');

    const ran = await call(gw, 'send_reminder', args, KEYS.agent);
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    const again = assertPending(await call(gw, 'send_reminder', args, KEYS.agent));
    assert.notEqual(again.approval_id, pending.approval_id);
    await context.close();
  });
});
