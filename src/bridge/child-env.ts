// A stdio child's environment is given, never inherited (SPEC §22): the gateway's own environment holds
// the store's password, the payment provider's key, the hash secret and other upstreams' credentials, and
// a third-party server must see none of them. What a program needs to run at all — where to find
// programs, a home, the locale, the time zone, a temporary directory — passes; everything else the
// operator names (`upstream.inheritEnv`) or writes out (`upstream.env`).

/** Passed to every child when the gateway has them. */
const ALWAYS = ['PATH', 'HOME', 'LANG', 'TZ', 'TMPDIR'];

export interface ChildEnvSpec {
  /** Names taken from the gateway's environment as they are (absent ones are skipped). */
  inheritEnv?: readonly string[];
  /** Values set for the child (the config's `${VAR}` already expanded); they win over inherited ones. */
  env?: Readonly<Record<string, string>>;
}

export function childEnvironment(parent: NodeJS.ProcessEnv, spec: ChildEnvSpec = {}): NodeJS.ProcessEnv {
  const given: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(parent)) {
    if (value !== undefined && (ALWAYS.includes(name) || name.startsWith('LC_'))) given[name] = value;
  }
  for (const name of spec.inheritEnv ?? []) {
    const value = parent[name];
    if (value !== undefined) given[name] = value;
  }
  return { ...given, ...spec.env };
}
