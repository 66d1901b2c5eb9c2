// A time budget on one piece of work: the store's calls and connects, the readiness ping.

/** `work`'s result, or a rejection with `new Error(message)` once `ms` passed first (the work itself is not stopped). */
export function withBudget<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
