// The Moove webhook route (SPEC §7.2): `POST /tollbooth/webhooks/moove` in its own encapsulated
// plugin. What a delivery means — the signature, the timestamp window, the link id — is the provider's
// side, in payments/webhook.ts; this file answers fast and triggers the re-read after the response.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { sendErrorReply } from '../io/error-reply.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { MOOVE_WEBHOOK_BODY_LIMIT, MOOVE_WEBHOOK_PATH, verifyMooveWebhook } from '../payments/webhook.js';

export interface MooveWebhookRouteOptions {
  /** Empty: webhooks are off and the route answers 503. */
  secret: string;
  /** Re-reads the link and settles it; runs after the response, its failures are only logged. */
  onLink: (linkId: string) => Promise<void>;
  /**
   * Records an event id as processed (in the store, so every replica sees it): true the first time,
   * false for a replay, which then triggers nothing. Runs after the response, like onLink.
   */
  claimEvent?: (eventId: string) => Promise<boolean>;
  logger: Logger;
  /** Counts each trigger when it concludes, so a test or an operator can tell when none is still running. */
  metrics?: Pick<Metrics, 'webhookTriggers' | 'webhookTriggersRunning'>;
  clock?: () => number;
  /** How long app.close() waits for triggers still running (default 5 s). */
  drainTimeoutMs?: number;
}

/**
 * Registers `POST /tollbooth/webhooks/moove` in its own encapsulated plugin, so its raw-body parser
 * and error handler touch nothing else on the app. Call before `app.ready()`/`listen()`.
 */
export function registerMooveWebhookRoute(app: FastifyInstance, options: MooveWebhookRouteOptions): void {
  const clock = options.clock ?? Date.now;
  const logger = options.logger;
  const running = new Set<Promise<void>>();
  const concluded = (outcome: 'handled' | 'replay' | 'failed'): void => options.metrics?.webhookTriggers.inc({ provider: 'moove', outcome });

  const trigger = (linkId: string, eventId: string | null): void => {
    const task = new Promise<void>((resolve) => setImmediate(resolve))
      .then(async () => {
        // A replay (the same signed delivery again) is acknowledged like any other and triggers nothing.
        if (eventId !== null && options.claimEvent && !(await options.claimEvent(eventId))) {
          logger.info({ evt: 'webhook', provider: 'moove', replay: true }, 'a Moove webhook event already processed was delivered again; nothing to do');
          concluded('replay');
          return;
        }
        await options.onLink(linkId);
        concluded('handled');
      })
      .catch((error: unknown) => {
        logger.warn({ evt: 'webhook', provider: 'moove', err: describeFailure(error, linkId) }, 'handling a Moove webhook failed; the reconciler will pick the charge up');
        concluded('failed');
      })
      .finally(() => {
        running.delete(task);
        options.metrics?.webhookTriggersRunning.dec({ provider: 'moove' });
      });
    running.add(task);
    options.metrics?.webhookTriggersRunning.inc({ provider: 'moove' });
  };

  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: MOOVE_WEBHOOK_BODY_LIMIT }, (_request, body, done) => done(null, body));

    scope.setErrorHandler((error: { statusCode?: number }, _request, reply) => {
      if (error.statusCode === 413) return sendErrorReply(reply, new GatewayError('TB_ERR_BODY_TOO_LARGE', `webhook body over ${MOOVE_WEBHOOK_BODY_LIMIT} bytes`));
      return sendErrorReply(reply, new GatewayError(error.statusCode === 415 ? 'TB_ERR_UNSUPPORTED_MEDIA_TYPE' : 'TB_ERR_INVALID_REQUEST', 'unreadable webhook request'));
    });

    scope.addHook('onClose', async () => {
      if (running.size === 0) return;
      let timer: NodeJS.Timeout | undefined;
      const limit = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, options.drainTimeoutMs ?? 5_000);
      });
      await Promise.race([Promise.allSettled([...running]), limit]);
      clearTimeout(timer);
    });

    const notConfigured = async (_request: unknown, reply: FastifyReply): Promise<FastifyReply | undefined> => {
      if (!options.secret) return sendErrorReply(reply, new GatewayError('TB_ERR_WEBHOOKS_OFF', 'webhooks not configured'));
      return undefined;
    };

    scope.route({
      method: 'POST',
      url: MOOVE_WEBHOOK_PATH,
      bodyLimit: MOOVE_WEBHOOK_BODY_LIMIT,
      onRequest: notConfigured, // answered before the body is read
      handler: async (request, reply) => {
        const rawBody = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
        const verdict = verifyMooveWebhook({ rawBody, headers: request.headers, secret: options.secret, now: clock() });
        if (!verdict.ok) {
          logger.info({ evt: 'webhook', reqId: request.id, provider: 'moove', status: verdict.status, reason: verdict.reason }, 'refused a Moove webhook');
          return sendErrorReply(reply, new GatewayError(verdict.status === 401 ? 'TB_ERR_WEBHOOK_SIGNATURE' : 'TB_ERR_INVALID_REQUEST', verdict.reason));
        }
        const { linkId, id: eventId } = verdict.event;
        if (linkId) trigger(linkId, eventId);
        else logger.info({ evt: 'webhook', reqId: request.id, provider: 'moove' }, 'a signed Moove webhook named no payment link; nothing to do');
        return reply.code(200).send({ ok: true });
      },
    });

    scope.route({
      method: ['GET', 'HEAD', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
      url: MOOVE_WEBHOOK_PATH,
      exposeHeadRoute: false,
      handler: async (_request, reply) => sendErrorReply(reply, new GatewayError('TB_ERR_METHOD_NOT_ALLOWED', 'method not allowed: Moove webhooks are POST', { headers: { allow: 'POST' } })),
    });
  });
}

/** An onLink failure for the log: its name/code and message with the link id taken out (SPEC §10). */
function describeFailure(error: unknown, linkId: string): { name: string; code?: string; message: string } {
  const name = error instanceof Error ? error.name : typeof error;
  const message = (error instanceof Error ? error.message : String(error)).split(linkId).join('[link]').slice(0, 500);
  const code = typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'string' ? (error as { code: string }).code : undefined;
  return code === undefined ? { name, message } : { name, code, message };
}
