// Waiting between attempts (provider and facilitator retries), cut short by the caller's signal.

/** Resolves after `ms`; rejects with `cancelled()` at once if `signal` is or becomes aborted first. */
export function sleep(ms: number, signal: AbortSignal | undefined, cancelled: () => Error): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(cancelled());
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(cancelled());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
