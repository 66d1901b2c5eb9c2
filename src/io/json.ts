// JSON from peers: parsed without throwing, and the one test for "a plain object" (not null, not an array).

/** The parsed value, or undefined when `text` is not JSON. */
export function parseJsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
