// The part of the Compose file format docker-compose.yml uses, checked without Docker (the suite's
// machines have none, so `docker compose config` could only ever skip). It catches what that command
// would: an unknown or misspelt key, a port or duration Docker cannot read, a dependency on a service
// that does not exist, an interpolation it cannot expand. Keys are those of the Compose specification
// (services, and the service attributes listed below); `x-` extensions are allowed anywhere on top.

const TOP_LEVEL = new Set(['name', 'services', 'volumes', 'networks', 'configs', 'secrets', 'include']);
const SERVICE_KEYS = new Set([
  'image', 'build', 'command', 'entrypoint', 'environment', 'env_file', 'ports', 'expose', 'volumes', 'tmpfs', 'read_only',
  'healthcheck', 'depends_on', 'restart', 'init', 'stop_grace_period', 'stop_signal', 'user', 'working_dir', 'labels',
  'networks', 'configs', 'secrets', 'deploy', 'container_name', 'hostname', 'cap_add', 'cap_drop', 'ulimits', 'logging',
  'profiles', 'extra_hosts', 'security_opt', 'shm_size', 'mem_limit', 'cpus', 'pull_policy', 'platform',
]);
const HEALTHCHECK_KEYS = new Set(['test', 'interval', 'timeout', 'retries', 'start_period', 'start_interval', 'disable']);
const RESTART = new Set(['no', 'always', 'on-failure', 'unless-stopped']);
const CONDITIONS = new Set(['service_started', 'service_healthy', 'service_completed_successfully']);
const DURATION = /^(\d+(\.\d+)?(us|ms|s|m|h))+$/;
const PORT = /^(\d{1,3}(\.\d{1,3}){3}:)?\d{1,5}(-\d{1,5})?:\d{1,5}(-\d{1,5})?(\/(tcp|udp))?$/;
const INTERPOLATION = /\$\{([^}]*)\}/g;
const VARIABLE = /^[A-Za-z_][A-Za-z0-9_]*((:?[-?+]).*)?$/;

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);
/** A scalar as YAML wrote it; anything else as JSON (never "[object Object]"). */
const text = (value: unknown): string => (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' ? String(value) : JSON.stringify(value));
const isStrings = (value: unknown): boolean => Array.isArray(value) && value.every((item) => typeof item === 'string');

/** Every finding, as `path: problem`; empty when the file has the shape Docker Compose reads. */
export function composeFindings(compose: unknown): string[] {
  const found: string[] = [];
  if (!isObject(compose)) return ['(root): not a mapping'];
  for (const key of Object.keys(compose)) if (!TOP_LEVEL.has(key) && !key.startsWith('x-')) found.push(`${key}: not a Compose top-level key`);
  const services = compose.services;
  if (!isObject(services) || Object.keys(services).length === 0) return [...found, 'services: missing or empty'];
  const volumes = new Set(Object.keys(isObject(compose.volumes) ? compose.volumes : {}));
  for (const [name, service] of Object.entries(services)) {
    const at = `services.${name}`;
    if (!isObject(service)) {
      found.push(`${at}: not a mapping`);
      continue;
    }
    for (const key of Object.keys(service)) if (!SERVICE_KEYS.has(key) && !key.startsWith('x-')) found.push(`${at}.${key}: not a Compose service attribute`);
    if (typeof service.image !== 'string' && service.build === undefined) found.push(`${at}: neither image nor build`);
    for (const key of ['command', 'entrypoint'] as const) if (service[key] !== undefined && typeof service[key] !== 'string' && !isStrings(service[key])) found.push(`${at}.${key}: not a string or a list of strings`);
    if (service.ports !== undefined) {
      if (!Array.isArray(service.ports)) found.push(`${at}.ports: not a list`);
      else for (const port of service.ports) if (typeof port !== 'string' || !PORT.test(port)) found.push(`${at}.ports: ${JSON.stringify(port)} is not HOST:CONTAINER (quote it: YAML reads 80:80 as a number)`);
    }
    if (service.environment !== undefined) {
      if (!isObject(service.environment)) found.push(`${at}.environment: not a mapping`);
      else for (const [key, value] of Object.entries(service.environment)) if (value !== null && typeof value !== 'string') found.push(`${at}.environment.${key}: ${JSON.stringify(value)} is not a string (quote it)`);
    }
    if (service.volumes !== undefined) {
      for (const volume of Array.isArray(service.volumes) ? service.volumes : [null]) {
        const source = typeof volume === 'string' ? volume.split(':')[0] ?? '' : '';
        if (typeof volume !== 'string' || volume.split(':').length < 2) found.push(`${at}.volumes: ${JSON.stringify(volume)} is not SOURCE:TARGET[:MODE]`);
        else if (!source.startsWith('.') && !source.startsWith('/') && !volumes.has(source)) found.push(`${at}.volumes: named volume ${source} is not declared under volumes`);
      }
    }
    if (service.restart !== undefined && !RESTART.has(text(service.restart).split(':')[0] ?? '')) found.push(`${at}.restart: ${text(service.restart)} is not one of ${[...RESTART].join(', ')}`);
    if (service.stop_grace_period !== undefined && !DURATION.test(text(service.stop_grace_period))) found.push(`${at}.stop_grace_period: not a duration`);
    if (service.healthcheck !== undefined) {
      const check = service.healthcheck;
      if (!isObject(check)) found.push(`${at}.healthcheck: not a mapping`);
      else {
        for (const key of Object.keys(check)) if (!HEALTHCHECK_KEYS.has(key)) found.push(`${at}.healthcheck.${key}: not a healthcheck attribute`);
        if (!(typeof check.test === 'string' || (isStrings(check.test) && ['CMD', 'CMD-SHELL', 'NONE'].includes((check.test as string[])[0] ?? '')))) found.push(`${at}.healthcheck.test: not a string or ["CMD"|"CMD-SHELL", …]`);
        for (const key of ['interval', 'timeout', 'start_period', 'start_interval']) if (check[key] !== undefined && !DURATION.test(text(check[key]))) found.push(`${at}.healthcheck.${key}: ${text(check[key])} is not a duration`);
        if (check.retries !== undefined && !Number.isInteger(check.retries)) found.push(`${at}.healthcheck.retries: not an integer`);
      }
    }
    if (service.depends_on !== undefined) {
      const deps = Array.isArray(service.depends_on) ? Object.fromEntries(service.depends_on.map((d) => [text(d), { condition: 'service_started' }])) : service.depends_on;
      if (!isObject(deps)) found.push(`${at}.depends_on: not a list or mapping`);
      else
        for (const [dep, spec] of Object.entries(deps)) {
          if (!(dep in services)) found.push(`${at}.depends_on: ${dep} is not a service`);
          if (dep === name) found.push(`${at}.depends_on: depends on itself`);
          if (!isObject(spec) || !CONDITIONS.has(text(spec.condition))) found.push(`${at}.depends_on.${dep}.condition: not one of ${[...CONDITIONS].join(', ')}`);
        }
    }
  }
  walkStrings(compose, '', (path, text) => {
    for (const match of text.matchAll(INTERPOLATION)) if (!VARIABLE.test(match[1] ?? '')) found.push(`${path}: cannot interpolate ${match[0]}`);
  });
  return found;
}

function walkStrings(value: unknown, path: string, visit: (path: string, text: string) => void): void {
  if (typeof value === 'string') visit(path, value);
  else if (Array.isArray(value)) value.forEach((item, i) => walkStrings(item, `${path}[${i}]`, visit));
  else if (isObject(value)) for (const [key, item] of Object.entries(value)) walkStrings(item, path ? `${path}.${key}` : key, visit);
}
