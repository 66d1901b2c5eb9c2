// The dev provider's checkout page and pay action (SPEC §4, §7.3): a small accessible HTML form.
// Paying here only marks the link completed; credits are granted by the settlement path
// (the agent's retry, or the reconciler), exactly as with a real provider.
//
// SPEC §20: the pay action takes posts from the page itself only — a browser post carrying another
// Origin (a page elsewhere submitting the form) is refused 403 — and nothing may frame the page
// (clickjacking the Pay button). A post without Origin is not a browser's (browsers send it on
// every POST), so it cannot be a cross-site forgery and is accepted, as a scripted test payment.
import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../errors.js';
import { sendErrorReply } from '../io/error-reply.js';
import type { DevLink, Store } from '../store/store.js';
import { compareDecimal, isDecimalString, parseDecimal } from '../money/decimal.js';
import { DEV_CHECKOUT_PREFIX } from '../payments/dev.js';

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

const NO_FRAMING = { 'content-security-policy': "frame-ancestors 'none'", 'x-frame-options': 'DENY' };

export interface DevCheckoutDeps {
  store: Store;
  /** server.publicUrl: its origin is the only Origin the pay action accepts. */
  publicUrl: string;
  now?: () => number;
  onPaid?: (linkId: string) => Promise<unknown>;
}

export function registerDevCheckout(app: FastifyInstance, deps: DevCheckoutDeps): void {
  const now = deps.now ?? Date.now;
  const ownOrigin = new URL(deps.publicUrl).origin;

  app.get<{ Params: { id: string } }>(`${DEV_CHECKOUT_PREFIX}:id`, async (request, reply) => {
    reply.headers(NO_FRAMING);
    const link = await deps.store.getDevLink(request.params.id);
    // same-origin, not no-referrer: the link id never leaves in a Referer to another site, and the
    // form's own post still carries the page's Origin (under no-referrer browsers send "null").
    reply.header('cache-control', 'no-store').header('referrer-policy', 'same-origin').type('text/html; charset=utf-8');
    if (!link) return reply.code(404).send(page('Checkout not found', '<p>This checkout link does not exist or has expired.</p>'));
    const expired = link.status === 'active' && link.expiresAt <= now();
    const title = `Pay ${link.amount} ${link.currency}`;
    const summary = `<dl>
  <dt>Item</dt><dd id="label">${escapeHtml(link.label)}</dd>
  <dt>Price</dt><dd id="amount">${escapeHtml(link.amount)} ${escapeHtml(link.currency)}</dd>
  <dt>Credits</dt><dd id="credits">${link.credits}</dd>
</dl>`;
    if (link.status === 'completed') return reply.send(page(title, `${summary}${await paidReport(deps.store, link)}`));
    if (expired || link.status === 'expired') return reply.code(410).send(page(title, `${summary}<p role="status" id="status">This checkout link has expired. Ask your assistant to try again for a new link.</p>`));
    return reply.send(
      page(
        title,
        `${summary}
<p class="warning">Development checkout: no real money moves.</p>
<form method="post" action="${DEV_CHECKOUT_PREFIX}${encodeURIComponent(link.id)}/pay">
  <label for="received">Amount to send (${escapeHtml(link.currency)}), to try an underpayment</label>
  <input id="received" name="received" inputmode="decimal" value="${escapeHtml(link.amount)}" pattern="\\d+(\\.\\d{1,6})?">
  <button type="submit" id="pay">Pay ${escapeHtml(link.amount)} ${escapeHtml(link.currency)}</button>
</form>`,
      ),
    );
  });

  app.post<{ Params: { id: string }; Body: unknown }>(`${DEV_CHECKOUT_PREFIX}:id/pay`, async (request, reply) => {
    reply.headers(NO_FRAMING);
    const origin = request.headers.origin;
    if (origin !== undefined && originOf(origin) !== ownOrigin) return sendErrorReply(reply, new GatewayError('TB_ERR_ORIGIN_FORBIDDEN', 'payments are only accepted from the checkout page itself'));
    const link = await deps.store.getDevLink(request.params.id);
    if (!link) return sendErrorReply(reply, new GatewayError('TB_ERR_NOT_FOUND', 'checkout link not found'));
    const received = receivedFrom(request.body) ?? link.amount;
    if (!isDecimal(received)) return sendErrorReply(reply, new GatewayError('TB_ERR_INVALID_REQUEST', 'received must be a decimal amount such as 5.00'));
    const paid = await deps.store.payDevLink(link.id, received);
    if (!paid) return sendErrorReply(reply, new GatewayError('TB_ERR_CHECKOUT_CLOSED', 'this checkout link is no longer payable'));
    // Like a provider webhook: settle now, so the agent's very next retry finds the credits.
    await deps.onPaid?.(link.id).catch(() => undefined);
    return reply.code(303).header('location', `${DEV_CHECKOUT_PREFIX}${encodeURIComponent(link.id)}`).send();
  });
}

/**
 * What the payer sees once the link is paid. A full payment says "Paid."; a short one says what was
 * received, what the settlement granted (the charge's outcome: pro rata credits, or nothing below the
 * minimum fraction) and what is still due, and how to pay it: a link takes one payment, so the rest is
 * paid on the new link the assistant's next call shows. Before this page the payer saw "Paid." whatever
 * arrived, and the reason reached only the agent's structured data.
 */
async function paidReport(store: Store, link: DevLink): Promise<string> {
  const charge = await store.findChargeByRef(link.id).catch(() => null);
  const received = link.receivedAmount ?? charge?.receivedAmount ?? null;
  const money = (amount: string): string => `${escapeHtml(amount)} ${escapeHtml(link.currency)}`;
  const receivedRow = received === null ? '' : `\n  <dt>Received</dt><dd id="received-amount">${money(received)}</dd>`;
  const short = received !== null && compareDecimal(received, link.amount) < 0;
  if (!short || charge === null || (charge.status !== 'settled' && charge.status !== 'underpaid') || charge.grantedCredits >= charge.credits) {
    const rows = receivedRow === '' ? '' : `<dl>${receivedRow}\n</dl>`;
    return `${rows}<p role="status" id="status">Paid. You can return to your assistant and tell it you have paid.</p>`;
  }
  const granted = charge.grantedCredits;
  if (charge.status === 'underpaid') {
    // Below the minimum fraction: nothing granted, the charge left for the operator (never re-shown as payable).
    return `<dl>${receivedRow}
  <dt>Credits granted</dt><dd id="granted">none</dd>
  <dt>Still due</dt><dd id="due">${money(link.amount)} for ${link.credits} credits</dd>
</dl>
<p role="status" id="status">Underpaid: ${money(received)} of ${money(link.amount)} arrived, too little for any credits.</p>
<p id="next">This link takes one payment. To pay, return to your assistant and tell it you have paid: it will show a new checkout link for ${money(link.amount)}. The ${money(received)} received here is recorded on this charge for the operator, who can credit or refund it.</p>`;
  }
  const due = amountLeft(link.amount, received);
  return `<dl>${receivedRow}
  <dt>Credits granted</dt><dd id="granted">${granted} of ${link.credits}</dd>
  <dt>Still due</dt><dd id="due">${money(due)} for the other ${link.credits - granted} credits</dd>
</dl>
<p role="status" id="status">Partly paid: ${money(received)} of ${money(link.amount)} arrived, so ${granted} of ${link.credits} credits were granted.</p>
<p id="next">This link takes one payment, so the rest cannot be paid here. Return to your assistant and tell it you have paid: it can use the ${granted} credit${granted === 1 ? '' : 's'} now, and when it needs more it shows a new checkout link for a full pack (${money(link.amount)}, ${link.credits} credits).</p>`;
}

/** `amount − received` (received below amount), with the decimals of the longer of the two. */
function amountLeft(amount: string, received: string): string {
  const a = parseDecimal(amount);
  const r = parseDecimal(received);
  const scale = Math.max(a.scale, r.scale);
  const left = a.units * 10n ** BigInt(scale - a.scale) - r.units * 10n ** BigInt(scale - r.scale);
  const digits = left.toString().padStart(scale + 1, '0');
  return scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
}

/** The serialised origin of an Origin header value, or null for "null" and anything unparseable. */
function originOf(value: string): string | null {
  try {
    const { origin } = new URL(value);
    return origin === 'null' ? null : origin;
  } catch {
    return null;
  }
}

function receivedFrom(body: unknown): string | undefined {
  if (typeof body === 'string') {
    const value = new URLSearchParams(body).get('received');
    return value === null || value.trim() === '' ? undefined : value.trim();
  }
  if (body && typeof body === 'object' && 'received' in body) {
    const value = (body).received;
    return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
  }
  return undefined;
}

/** The amounts a SKU may have: a decimal string with at most 6 decimals (config/schema.ts). */
const isDecimal = (text: string): boolean => isDecimalString(text) && /^\d+(\.\d{1,6})?$/.test(text);

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · Tollbooth checkout</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 28rem; margin: 3rem auto; padding: 0 1rem; color: #111; }
  dl { display: grid; grid-template-columns: auto 1fr; gap: .25rem 1rem; }
  dt { font-weight: 600; } dd { margin: 0; }
  label { display: block; margin-top: 1rem; }
  input { font: inherit; padding: .4rem; width: 10rem; }
  button { font: inherit; margin-top: 1rem; padding: .6rem 1.2rem; background: #0b57d0; color: #fff; border: 0; border-radius: .3rem; cursor: pointer; }
  button:focus-visible, input:focus-visible { outline: 3px solid #f9ab00; outline-offset: 2px; }
  .warning { color: #7a4b00; }
</style>
</head>
<body>
<main>
<h1>${escapeHtml(title)}</h1>
${body}
</main>
</body>
</html>
`;
}
