// A test that needs an outside tool (promtool, prometheus, Chromium, the MCP conformance runner)
// skips with a reason on a developer's machine that lacks it. Under CI=true a missing tool is a
// failure instead: a CI image that lost the tool must not turn those checks into silent skips.
import type { Test } from 'tap';

/** Returns the skip reason to pass to `t.test(…, { skip })`; under CI=true also records a failure. */
export function skipUnlessInstalled(t: Pick<Test, 'fail'>, missing: string | false, env: NodeJS.ProcessEnv = process.env): string | false {
  if (missing && env.CI === 'true') t.fail(`required in CI (CI=true): ${missing}`);
  return missing;
}
