// A real 2026-07-28 upstream (the v2 SDK's createMcpHandler) whose tool `deploy` first answers
// `input_required` — an embedded elicitation asking for a confirmation, with a `requestState` — and
// finishes only on the continuation that carries the confirmation. It records every tools/call it runs,
// with the round it was (first call or continuation).
import { acceptedContent, createMcpHandler, inputRequired, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { serveFetchHandler } from './dual-era-upstream.js';
import { listenRecording, type ReceivedCall, type RecordingUpstream } from './paid-upstream.js';

export type InputRequiredUpstream = RecordingUpstream<ReceivedCall & { round: 'first' | 'continuation' }>;

const confirmation = z.object({ confirm: z.boolean() });

export async function startInputRequiredUpstream(): Promise<InputRequiredUpstream> {
  const calls: InputRequiredUpstream['calls'] = [];
  const bodies: string[] = [];
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'input-required-upstream', version: '1.0.0' });
    server.registerTool('deploy', { description: 'Deploys after a confirmation.', inputSchema: z.object({ env: z.string() }) }, async ({ env }, ctx) => {
      const confirmed = acceptedContent(ctx.mcpReq.inputResponses, 'confirm', confirmation);
      calls.push({ name: 'deploy', arguments: { env }, headers: {}, round: confirmed ? 'continuation' : 'first' });
      if (confirmed?.confirm !== true) {
        return inputRequired({
          inputRequests: { confirm: inputRequired.elicit({ message: `Deploy to ${env}?`, requestedSchema: confirmation }) },
          requestState: `deploy:${env}`,
        });
      }
      return { content: [{ type: 'text' as const, text: `deployed to ${env}` }] };
    });
    return server;
  });
  return listenRecording(serveFetchHandler(handler, bodies), calls, bodies, async () => {
    await handler.close().catch(() => undefined);
  });
}
