// x402 authorizations in the Redis store (SPEC §19): one string key per nonce under the payer's
// hash tag (keys.ts). The claim is a SET NX PX in a script (x402.lua.ts): one atomic command, so the
// first claim wins on any replica and in Cluster mode. Settlements through the durable outbox
// (store/outbox.ts) are idempotent by their marker.
import { GatewayError } from '../../errors.js';
import { newPaymentNonceRecord } from '../policy.js';
import type { Attempt, PaymentNonceClaim, PaymentNonceKey, PaymentNonceOutcome, PaymentNonceRecord, X402SettlementRecord } from '../store.js';
import { RedisCore } from './core.js';

export class RedisX402 {
  constructor(private readonly core: RedisCore) {}

  async claimPaymentNonce(claim: PaymentNonceClaim): Promise<boolean> {
    const now = this.core.now();
    const record = newPaymentNonceRecord(claim, now);
    const ttlMs = record.expiresAt - now;
    const nonceKey = this.core.keys.paymentNonce(claim);
    return this.core.call('claimPaymentNonce', async () => {
      const mark = await this.core.mark(nonceKey);
      const claimed = Number(await this.core.once('tbClaimPaymentNonce', this.core.keys.paymentOperation(claim, 'claim'), claim.attempt, [nonceKey], [JSON.stringify(record), ttlMs])) === 1;
      if (claimed && !(await this.core.replicated(mark))) {
        // Fail closed: the call is refused unpaid; the claim still refuses the nonce, so nothing is paid twice.
        this.core.countUnreplicated('x402_claim');
        throw new GatewayError('TB_ERR_STORE_UNAVAILABLE', `the x402 nonce claim was not acknowledged by ${this.core.durabilityText()}`);
      }
      return claimed;
    });
  }

  async finishPaymentNonce(key: PaymentNonceKey, outcome: PaymentNonceOutcome, attempt?: Attempt): Promise<boolean> {
    const nonceKey = this.core.keys.paymentNonce(key);
    const keys = [nonceKey, this.core.keys.paymentLedger(key.payer)];
    return this.core.call('finishPaymentNonce', async () => {
      const mark = await this.core.mark(nonceKey);
      const reply = await this.core.once('tbFinishPaymentNonce', this.core.keys.paymentOperation(key, 'finish'), attempt, keys, [outcome.state, outcome.transaction ?? '', outcome.at, this.core.ledgerRetentionMs]);
      const finished = Number(reply) === 1;
      // The payment already moved on chain and the result goes out: counted, for the operator.
      if (finished && outcome.state === 'settled' && !(await this.core.replicated(mark))) this.core.countUnreplicated('x402_settle');
      return finished;
    });
  }

  async recordX402Settlement(record: X402SettlementRecord): Promise<boolean> {
    const keys = [this.core.keys.paymentNonce(record), this.core.keys.paymentLedger(record.payer), this.core.keys.paymentSettled(record)];
    const args = [record.nonce, record.tool, record.amount, record.network, record.asset, record.payer, record.sku, record.transaction, record.at, this.core.ledgerRetentionMs];
    return this.core.call('recordX402Settlement', async () => {
      const mark = await this.core.mark(keys[0] as string);
      const written = Number(await this.core.run('tbRecordX402Settlement', keys, args)) === 1;
      // The payment already moved on chain and the result goes out: counted, for the operator.
      if (written && !(await this.core.replicated(mark))) this.core.countUnreplicated('x402_settle');
      return written;
    });
  }

  async getPaymentNonce(key: PaymentNonceKey): Promise<PaymentNonceRecord | null> {
    const raw = await this.core.call('getPaymentNonce', () => this.core.client.get(this.core.keys.paymentNonce(key)));
    return raw === null ? null : (JSON.parse(raw) as PaymentNonceRecord);
  }
}
