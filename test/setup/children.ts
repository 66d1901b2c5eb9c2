// Loaded into every test process by .taprc (node-arg). A child a test spawns with NODE_OPTIONS '' (or
// removed) is meant to run without tap's hooks: the helpers say so (childEnv, gateway-process, bench
// smoke...). tap's @tapjs/processinfo does not let it: it hooks every spawn (process-on-spawn) and puts
// its `--import` back into the child's NODE_OPTIONS whenever the caller's is empty. In the child that
// import runs an ESM loader thread and source maps for every module it loads, and a JSON file at exit:
// it doubled a stdio server's start-up CPU (0.3 s → 0.7 s) and most of the suite's processes are such
// children. This module runs a first and a last spawn listener around tap's: the first notes what the
// caller set, the last gives it back. Children that inherit the test's own environment keep the hooks.
// If tap changes how it hooks spawns, the state is not found and nothing changes (children are slower).

interface SpawnOptions {
  env: Record<string, string | undefined>;
}
type Listener = (options: SpawnOptions) => void;

const state = (globalThis as Record<symbol, { listeners?: Listener[] } | undefined>)[Symbol.for('process-on-spawn@*:singletonId')];

if (Array.isArray(state?.listeners)) {
  /** Spawns whose caller asked for no NODE_OPTIONS, with what it set ('' or nothing); every listener gets the same options object. */
  const cleared = new WeakMap<SpawnOptions, { value: string | undefined }>();
  state.listeners.unshift((options) => {
    if (!options.env.NODE_OPTIONS) cleared.set(options, { value: options.env.NODE_OPTIONS });
  });
  state.listeners.push((options) => {
    const asked = cleared.get(options);
    if (!asked) return;
    const env = Object.fromEntries(Object.entries(options.env).filter(([name]) => name !== 'NODE_OPTIONS' && !name.startsWith('_TAPJS_PROCESSINFO_')));
    if (asked.value !== undefined) env.NODE_OPTIONS = asked.value;
    options.env = env;
  });
}
