// The deployment artefacts (SPEC §14) agree with each other and with the code: every YAML parses,
// both shipped tollbooth.yaml files pass the real config schema, the compose stack and the
// Kubernetes manifests wire the same paths, ports, labels and secrets, and every metric the alerts
// and the dashboard query is one src/observability/metrics.ts declares.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, posix, resolve } from 'node:path';
import t from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { parseConfigText } from '../../src/config/load.js';
import { configSchema } from '../../src/config/schema.js';
import { composeFindings } from './compose-shape.js';

const repo = resolve(import.meta.dirname, '../..');
const read = (path: string): string => readFileSync(join(repo, path), 'utf8');
// Compose files use YAML merge keys (<<: *anchor), as docker compose does.
const readYaml = (path: string): any => parse(read(path), { merge: true });

/** `${VAR}` and `${VAR:-default}` in every string value (SPEC §3; compose uses the same syntax). */
function expandEnv(value: unknown, env: Record<string, string | undefined>): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_, name: string, fallback?: string) =>
      env[name] ? (env[name]) : (fallback ?? ''));
  }
  if (Array.isArray(value)) return value.map((item) => expandEnv(item, env));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, expandEnv(item, env)]));
  }
  return value;
}

/** `${VAR}` references in the string values of a parsed document (comments do not count). */
function referencedVars(value: unknown): Array<{ name: string; required: boolean }> {
  if (typeof value === 'string') {
    return [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}/g)].map((m) => ({ name: m[1] as string, required: m[2] === undefined }));
  }
  if (value !== null && typeof value === 'object') return Object.values(value).flatMap(referencedVars);
  return [];
}

const issues = (result: { success: boolean; error?: { issues: Array<{ path: PropertyKey[]; message: string }> } }): string =>
  result.success ? '' : (result.error?.issues ?? []).map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');

/** Every series name metrics.ts declares, with the _bucket/_sum/_count series of its histograms. */
function declaredSeries(): Set<string> {
  const names = new Set<string>(['up']);
  // BucketHistogram (observability/bucket-histogram.ts) is a histogram with prom-client's series.
  for (const m of read('src/observability/metrics.ts').matchAll(/new (?:client\.)?(Counter|Gauge|Histogram|BucketHistogram)\(\{\s*name: '([a-z0-9_]+)'/g)) {
    const [, kind, name] = m as unknown as [string, string, string];
    names.add(name);
    if (kind.endsWith('Histogram')) for (const suffix of ['_bucket', '_sum', '_count']) names.add(name + suffix);
  }
  return names;
}
const seriesIn = (expr: string): string[] => [...expr.matchAll(/\btollbooth_[a-z0-9_]+/g)].map((m) => m[0]);

t.test('every YAML file under deploy/ and docker-compose.yml parses without errors', async (t) => {
  const files = ['docker-compose.yml'];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(repo, dir), { withFileTypes: true })) {
      const path = posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.ya?ml$/.test(entry.name)) files.push(path);
    }
  };
  walk('deploy');
  t.ok(files.length >= 12, `found ${files.length} YAML files`);
  for (const file of files) {
    const docs = parseAllDocuments(read(file), { merge: true });
    const errors = (Array.isArray(docs) ? docs : [docs]).flatMap((doc) => doc.errors.map((e) => e.message));
    t.same(errors, [], file);
  }
});

t.test('Dockerfile: multi-stage build, slim runtime with production deps, non-root, healthcheck on /healthz', async (t) => {
  const dockerfile = read('Dockerfile');
  const froms = [...dockerfile.matchAll(/^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/gim)];
  t.ok(froms.length >= 2, 'at least two stages');
  t.match(dockerfile, /^ARG NODE_IMAGE=node:20-bookworm-slim$/m, 'both stages are node:20-bookworm-slim');
  t.match(dockerfile, /RUN npm ci\b.*\n(?:.*\n)*?RUN npm run build/, 'build stage: npm ci then npm run build');
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  t.match(runtime, /npm ci --omit=dev/, 'runtime installs production deps only');
  t.match(runtime, /COPY --from=build \/app\/dist \.\/dist/, 'runtime gets dist/ from the build stage');
  const user = /^USER\s+(\S+)/m.exec(runtime)?.[1] ?? '';
  t.ok(user !== '' && !/^(0|root)(:|$)/.test(user), `runtime runs as a non-root user (${user})`);
  t.match(runtime, /^EXPOSE 8080$/m);
  t.match(runtime, /^HEALTHCHECK .*\n?.*CMD \["node", "-e", .*fetch\(/m, 'healthcheck runs node (no curl in slim)');
  t.match(runtime, /TOLLBOOTH_HEALTHCHECK_URL=http:\/\/127\.0\.0\.1:8080\/healthz/);
  t.match(runtime, /^ENTRYPOINT \["node", "dist\/cli\.js"\]$/m);
  t.match(runtime, /^CMD \["start", "--config", "\/etc\/tollbooth\/tollbooth\.yaml"\]$/m);
  const ignored = read('.dockerignore').split('\n').map((line) => line.trim());
  for (const entry of ['node_modules', 'dist', '.git', '.env']) t.ok(ignored.includes(entry), `.dockerignore excludes ${entry}`);
});

t.test('every package src/ imports at run time is a production dependency (the image omits dev deps)', async (t) => {
  const pkg = JSON.parse(read('package.json')) as { name: string; dependencies: Record<string, string> };
  const allowed = new Set([...Object.keys(pkg.dependencies), pkg.name]);
  const missing = new Set<string>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(repo, dir), { withFileTypes: true })) {
      const path = posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.ts$/.test(entry.name) && !entry.name.endsWith('.d.ts')) {
        const source = read(path);
        const specifiers = [
          ...[...source.matchAll(/^\s*(?:import|export)\s+(?!type\s)(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)].map((m) => m[1] as string),
          ...[...source.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1] as string),
        ];
        for (const spec of specifiers) {
          if (spec.startsWith('.') || spec.startsWith('node:') || builtinModules.includes(spec)) continue;
          const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] as string);
          if (!allowed.has(name)) missing.add(`${name} (${path})`);
        }
      }
    }
  };
  walk('src');
  t.same([...missing], [], 'imported by src/ but not under "dependencies" in package.json');
});

t.test('docker-compose.yml: services, ports, volumes, healthchecks and start order', async (t) => {
  const compose = readYaml('docker-compose.yml');
  const services = compose.services as Record<string, any>;
  t.same(Object.keys(services).sort(), ['gateway-1', 'gateway-2', 'grafana', 'prometheus', 'redis', 'research']);

  t.match(services.redis.image, /^redis:7/);
  const redisCommand = (services.redis.command as string[]).join(' ');
  t.match(redisCommand, /--appendonly yes/);
  t.match(redisCommand, /--appendfsync (everysec|always)/);
  t.match(redisCommand, /--maxmemory-policy noeviction/, 'Redis never evicts credit or claim keys');
  t.ok((services.redis.volumes as string[]).some((v) => /^redis-data:\/data$/.test(v)), 'Redis data on a named volume');

  t.same(services.research.command, ['dist/research/http.js']);
  t.same(services.research.entrypoint, ['node']);
  t.equal(services.research.environment.RESEARCH_HOST, '0.0.0.0');

  const hostPorts: Record<string, string[]> = { 'gateway-1': ['8080:8080'], 'gateway-2': ['8081:8080'] };
  for (const [name, ports] of Object.entries(hostPorts)) {
    const gateway = services[name];
    t.same(gateway.ports, ports, `${name} ports`);
    t.equal(gateway.image, services.research.image, `${name} runs the same image as research`);
    t.same(gateway.command, ['start', '--config', '/etc/tollbooth/tollbooth.yaml'], `${name} command`);
    t.ok((gateway.volumes as string[]).includes('./deploy/compose/tollbooth.yaml:/etc/tollbooth/tollbooth.yaml:ro'), `${name} mounts the config read-only`);
    t.match(gateway.healthcheck.test.join(' '), /\/healthz/, `${name} healthcheck`);
    t.same(gateway.depends_on, { redis: { condition: 'service_healthy' }, research: { condition: 'service_healthy' } }, `${name} waits for healthy redis and research`);
  }
  for (const name of ['redis', 'research', 'gateway-1', 'gateway-2', 'prometheus']) {
    t.ok(Array.isArray(services[name].healthcheck?.test), `${name} has a healthcheck`);
  }
  t.same(services.prometheus.depends_on, { 'gateway-1': { condition: 'service_healthy' }, 'gateway-2': { condition: 'service_healthy' } });
  t.same(services.grafana.depends_on, { prometheus: { condition: 'service_healthy' } });

  const named = new Set(Object.keys(compose.volumes ?? {}));
  for (const [name, service] of Object.entries(services)) {
    for (const volume of (service.volumes ?? []) as string[]) {
      const [source = ''] = volume.split(':');
      if (source.startsWith('.')) t.ok(existsSync(join(repo, source)), `${name}: bind-mounted ${source} exists`);
      else t.ok(named.has(source), `${name}: volume ${source} is declared`);
    }
  }
});

t.test('compose: Prometheus scrapes both gateways and Grafana loads the datasource and dashboard', async (t) => {
  const services = readYaml('docker-compose.yml').services as Record<string, any>;
  t.ok((services.prometheus.volumes as string[]).includes('./deploy/prometheus:/etc/prometheus:ro'));
  t.ok((services.prometheus.command as string[]).includes('--config.file=/etc/prometheus/prometheus.yml'));
  const prometheus = readYaml('deploy/prometheus/prometheus.yml');
  t.same(prometheus.rule_files, ['alerts.yml'], 'rules resolve beside prometheus.yml in the repo and the container');
  const job = (prometheus.scrape_configs as any[]).find((c) => c.job_name === 'tollbooth');
  t.equal(job.metrics_path, '/metrics');
  t.same(job.static_configs[0].targets, ['gateway-1:8080', 'gateway-2:8080']);

  const datasource = readYaml('deploy/grafana/provisioning/datasources/prometheus.yml').datasources[0];
  t.match(datasource, { type: 'prometheus', url: 'http://prometheus:9090', isDefault: true });
  const provider = readYaml('deploy/grafana/provisioning/dashboards/tollbooth.yml').providers[0];
  const mounts = services.grafana.volumes as string[];
  t.ok(mounts.includes('./deploy/grafana/provisioning:/etc/grafana/provisioning:ro'));
  const dashboardMount = mounts.find((v) => v.startsWith('./deploy/grafana/dashboard.json:'));
  t.equal(dirname(dashboardMount?.split(':')[1] ?? ''), provider.options.path, 'dashboard mounted where the provider looks');
});

t.test('compose tollbooth.yaml is a valid config: redis store, research upstream, the research SKU', async (t) => {
  const raw = parse(read('deploy/compose/tollbooth.yaml'));
  const gatewayEnv = readYaml('docker-compose.yml').services['gateway-1'].environment as Record<string, string>;
  const vars = referencedVars(raw);
  t.ok(vars.length >= 5, `${vars.length} \${VAR} references`);
  for (const { name } of vars) t.ok(name in gatewayEnv, `\${${name}} is passed to the gateway container`);
  const containerEnv = expandEnv(gatewayEnv, {}) as Record<string, string>; // an empty shell: compose defaults
  const result = configSchema.safeParse(expandEnv(raw, containerEnv));
  t.ok(result.success, issues(result));
  if (!result.success) return;
  const config = result.data;
  t.match(config.server, { host: '0.0.0.0', port: 8080, publicUrl: 'http://127.0.0.1:8080/mcp' });
  t.equal(config.upstream.url, 'http://research:3001/mcp');
  t.equal(readYaml('docker-compose.yml').services.research.environment.RESEARCH_PORT, '3001', 'the upstream port is the research port');
  t.match(config.store, { type: 'redis', redis: { url: 'redis://redis:6379/0' } });
  t.equal(config.payments.provider, 'dev', 'dev provider by default');
  t.match(config.skus.research, { label: 'Research tools', amount: '5.00', currency: 'USDC', credits: 250 });
  t.match(config.tools, { fetch_readable: { sku: 'research', cost: 1 }, extract_tables: { sku: 'research', cost: 2 }, inspect_domain: { sku: 'research', cost: 1 } });
});

t.test('compose tollbooth.yaml switches to Moove from the environment, and refuses Moove without a key', async (t) => {
  const raw = parse(read('deploy/compose/tollbooth.yaml'));
  const moove = configSchema.safeParse(expandEnv(raw, { TOLLBOOTH_PAYMENTS_PROVIDER: 'moove', MOOVE_API_KEY: 'mk_test_dummy', MOOVE_WEBHOOK_SECRET: 'whsec_dummy' }));
  t.ok(moove.success, issues(moove));
  if (moove.success) t.match(moove.data.payments, { provider: 'moove', moove: { apiKey: 'mk_test_dummy', webhookSecret: 'whsec_dummy' } });
  const keyless = configSchema.safeParse(expandEnv(raw, { TOLLBOOTH_PAYMENTS_PROVIDER: 'moove' }));
  t.notOk(keyless.success, 'provider moove without MOOVE_API_KEY is refused');
  const forgotProvider = configSchema.safeParse(expandEnv(raw, { MOOVE_API_KEY: 'mk_test_dummy' }));
  t.notOk(forgotProvider.success, 'MOOVE_API_KEY without TOLLBOOTH_PAYMENTS_PROVIDER=moove is refused (SPEC §20), never a free dev checkout');
  if (!forgotProvider.success) t.same(forgotProvider.error.issues.map((issue) => issue.path.join('.')), ['payments.provider']);
});

const k8s = (file: string): any => readYaml(`deploy/kubernetes/${file}`);

t.test('the gateway\'s own config loader accepts the compose and Kubernetes configs', async (t) => {
  const compose = read('deploy/compose/tollbooth.yaml');
  t.doesNotThrow(() => parseConfigText(compose, 'deploy/compose/tollbooth.yaml', {}), 'compose config with an empty environment');
  const configMap = k8s('configmap.yaml').data['tollbooth.yaml'] as string;
  const env = { MOOVE_API_KEY: 'dummy', MOOVE_WEBHOOK_SECRET: 'dummy', TOLLBOOTH_HASH_SECRET: 'dummy' };
  t.doesNotThrow(() => parseConfigText(configMap, 'deploy/kubernetes/configmap.yaml', env), 'Kubernetes config with the Secret\'s variables');
  t.throws(() => parseConfigText(configMap, 'deploy/kubernetes/configmap.yaml', { ...env, MOOVE_API_KEY: '' }), 'and refuses it without MOOVE_API_KEY');
});

t.test('kubernetes: kustomization lists every manifest except the example Secret', async (t) => {
  const kustomization = k8s('kustomization.yaml');
  const manifests = readdirSync(join(repo, 'deploy/kubernetes')).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
  t.same([...kustomization.resources].sort(), manifests.filter((f) => f !== 'secret.example.yaml').sort());
  t.equal(kustomization.namespace, k8s('namespace.yaml').metadata.name);
});

t.test('kubernetes: Deployment has 2+ replicas, probes, resources, a locked-down pod and the config', async (t) => {
  const deployment = k8s('deployment.yaml');
  t.match(deployment, { apiVersion: 'apps/v1', kind: 'Deployment' });
  t.ok(deployment.spec.replicas >= 2, 'replicas ≥ 2');
  const pod = deployment.spec.template.spec;
  const labels = deployment.spec.template.metadata.labels as Record<string, string>;
  t.match(labels, deployment.spec.selector.matchLabels, 'selector matches the pod labels');
  const [container] = pod.containers as any[];
  t.match(container.readinessProbe, { httpGet: { path: '/readyz', port: 'http' } });
  t.match(container.livenessProbe, { httpGet: { path: '/healthz', port: 'http' } });
  t.ok((container.ports as any[]).some((p) => p.name === 'http' && p.containerPort === 8080), 'port http = 8080');
  for (const kind of ['requests', 'limits']) {
    t.ok(container.resources[kind]?.cpu && container.resources[kind]?.memory, `resources.${kind} cpu and memory`);
  }
  t.match(pod.securityContext, { runAsNonRoot: true, runAsUser: 1000 });
  t.match(container.securityContext, { readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });

  const configMap = k8s('configmap.yaml');
  const configVolume = (pod.volumes as any[]).find((v) => v.configMap?.name === configMap.metadata.name);
  t.ok(configVolume, 'a volume from the tollbooth ConfigMap');
  const mount = (container.volumeMounts as any[]).find((m) => m.name === configVolume?.name);
  t.equal(mount?.readOnly, true, 'config mounted read-only');
  const configPath = posix.join(mount?.mountPath ?? '', configVolume?.configMap.items[0].path ?? '');
  t.same(container.args, ['start', '--config', configPath], 'the gateway reads the mounted file');
  t.ok(Object.hasOwn(configMap.data, configVolume?.configMap.items[0].key), 'the mounted key exists in the ConfigMap');

  const secret = k8s('secret.example.yaml');
  t.ok((container.envFrom as any[]).some((e) => e.secretRef?.name === secret.metadata.name), 'env from the Secret');
  const required = referencedVars(parse(configMap.data['tollbooth.yaml'])).filter((v) => v.required).map((v) => v.name);
  t.ok(required.includes('MOOVE_API_KEY'), 'the Moove key comes from the environment, not the ConfigMap');
  for (const name of required) t.ok(Object.hasOwn(secret.stringData, name), `\${${name}} is a key of the Secret`);

  const parsed = configSchema.safeParse(expandEnv(parse(configMap.data['tollbooth.yaml']), { MOOVE_API_KEY: 'dummy' }));
  if (parsed.success) {
    const needed = Math.ceil(parsed.data.upstream.callDeadline / 1000) + 10;
    t.ok(pod.terminationGracePeriodSeconds >= needed, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} ≥ callDeadline + 10 s (${needed})`);
  } else t.fail(`ConfigMap config invalid: ${issues(parsed)}`);
});

t.test('kubernetes: the ConfigMap config is valid with the Secret present and refused without the Moove key', async (t) => {
  const raw = parse(k8s('configmap.yaml').data['tollbooth.yaml']);
  const secrets = Object.fromEntries(Object.keys(k8s('secret.example.yaml').stringData).map((key) => [key, `dummy-${key.toLowerCase()}`]));
  const result = configSchema.safeParse(expandEnv(raw, secrets));
  t.ok(result.success, issues(result));
  if (result.success) {
    t.match(result.data.store, { type: 'redis', redis: { url: 'redis://tollbooth-redis:6379/0' } }, 'Redis by its Service name');
    t.match(result.data.payments, { provider: 'moove', moove: { apiKey: 'dummy-moove_api_key' } });
    t.equal(result.data.handles.hashSecret, 'dummy-tollbooth_hash_secret');
    t.equal(result.data.server.host, '0.0.0.0');
  }
  t.notOk(configSchema.safeParse(expandEnv(raw, { ...secrets, MOOVE_API_KEY: '' })).success, 'refused without MOOVE_API_KEY');
});

t.test('kubernetes: Service and PodDisruptionBudget select the gateway pods', async (t) => {
  const deployment = k8s('deployment.yaml');
  const labels = deployment.spec.template.metadata.labels as Record<string, string>;
  const service = k8s('service.yaml');
  t.match(labels, service.spec.selector, 'Service selector matches the pod labels');
  t.ok(Object.keys(service.spec.selector).length > 0, 'Service selector is not empty');
  const portNames = (deployment.spec.template.spec.containers[0].ports as any[]).map((p) => p.name);
  for (const port of service.spec.ports as any[]) t.ok(portNames.includes(port.targetPort), `targetPort ${port.targetPort} is a container port`);
  const pdb = k8s('pdb.yaml');
  t.match(pdb, { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', spec: { minAvailable: 1 } });
  t.match(labels, pdb.spec.selector.matchLabels, 'PDB selector matches the pod labels');
  t.ok(deployment.spec.replicas > pdb.spec.minAvailable, 'a drain can evict one pod');
});

/** GitHub-style anchors of the headings in docs/operations.md. */
function docAnchors(): Set<string> {
  const headings = [...read('docs/operations.md').matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => m[1] as string);
  return new Set(headings.map((h) => h.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-')));
}

t.test('docs/operations.md: every in-page link names a heading', async (t) => {
  const anchors = docAnchors();
  const links = [...read('docs/operations.md').matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1] as string);
  t.ok(links.length > 5, `${links.length} in-page links`);
  for (const link of links) t.ok(anchors.has(link), `#${link}`);
});

t.test('alerts: for, severity, summary/description and a runbook anchor that exists in docs/operations.md', async (t) => {
  const rules = (readYaml('deploy/prometheus/alerts.yml').groups as any[]).flatMap((g) => g.rules as any[]);
  t.same(rules.map((r) => r.alert).sort(), [
    'TollboothGatewayDown', 'TollboothHighLatencyP99', 'TollboothPaymentsUnavailable', 'TollboothReconcilerStalled',
    'TollboothRedisDown', 'TollboothUnderpaidCharges', 'TollboothUpstreamErrors',
  ]);
  const anchors = docAnchors();
  const series = declaredSeries();
  for (const rule of rules) {
    t.match(rule.for, /^\d+[smh]$/, `${rule.alert} has a for`);
    t.match(rule.labels?.severity, /^(critical|warning)$/, `${rule.alert} severity`);
    t.ok(rule.annotations?.summary && rule.annotations?.description, `${rule.alert} summary and description`);
    const [path, anchor] = String(rule.annotations?.runbook_url).split('#');
    t.equal(path, 'docs/operations.md', `${rule.alert} runbook file`);
    t.ok(anchors.has(anchor as string), `${rule.alert} runbook anchor #${anchor} is a heading in docs/operations.md`);
    for (const name of seriesIn(rule.expr)) t.ok(series.has(name), `${rule.alert}: ${name} is declared in metrics.ts`);
  }
});

t.test('dashboard: schema, datasource variable, unique ids, non-overlapping panels, queries on declared metrics', async (t) => {
  const dashboard = JSON.parse(read('deploy/grafana/dashboard.json'));
  t.ok(dashboard.schemaVersion >= 36, `schemaVersion ${dashboard.schemaVersion}`);
  t.ok(dashboard.uid && dashboard.title, 'uid and title');
  const variable = (dashboard.templating.list as any[]).find((v) => v.name === 'datasource');
  t.match(variable, { type: 'datasource', query: 'prometheus' });
  const panels = dashboard.panels as any[];
  t.ok(panels.length >= 12, `${panels.length} panels`);
  t.equal(new Set(panels.map((p) => p.id)).size, panels.length, 'panel ids are unique');
  const series = declaredSeries();
  const cells = new Map<string, number>();
  for (const panel of panels) {
    const name = `panel ${panel.id} "${panel.title}"`;
    if (panel.type === 'row') {
      // A row header: full width, one unit high, no queries of its own.
      t.match(panel.gridPos, { x: 0, w: 24, h: 1 }, `${name} spans the dashboard`);
      t.ok(panel.title && panel.collapsed === false && !panel.targets, `${name} is an open row header`);
      for (let col = 0; col < 24; col++) cells.set(`${panel.gridPos.y}:${col}`, panel.id);
      continue;
    }
    t.ok(['timeseries', 'stat'].includes(panel.type), `${name} type ${panel.type}`);
    t.same(panel.datasource, { type: 'prometheus', uid: '${datasource}' }, `${name} datasource`);
    const { x, y, w, h } = panel.gridPos;
    t.ok([x, y, w, h].every(Number.isInteger) && w > 0 && h > 0 && x >= 0 && x + w <= 24, `${name} gridPos`);
    for (let row = y; row < y + h; row++) for (let col = x; col < x + w; col++) {
      const other = cells.get(`${row}:${col}`);
      if (other !== undefined) t.fail(`${name} overlaps panel ${other} at row ${row}, column ${col}`);
      cells.set(`${row}:${col}`, panel.id);
    }
    t.ok(panel.targets?.length > 0, `${name} has targets`);
    t.equal(new Set(panel.targets.map((q: any) => q.refId)).size, panel.targets.length, `${name} refIds unique`);
    for (const target of panel.targets) {
      t.ok(target.refId && target.expr, `${name} target ${target.refId} has refId and expr`);
      t.same(target.datasource, panel.datasource, `${name} target ${target.refId} datasource`);
      for (const metric of seriesIn(target.expr)) t.ok(series.has(metric), `${name}: ${metric} is declared in metrics.ts`);
    }
  }
  const exprs = panels.flatMap((p) => (p.targets ?? []).map((q: any) => q.expr as string)).join('\n');
  for (const [needle, what] of [
    ['tollbooth_credits_total{kind="granted"}', 'credits granted'], ['tollbooth_settlements_total', 'settlements'],
    ['kind="refunded"', 'credits refunded'], ['outcome="challenged"', 'challenges'], ['tollbooth_mcp_requests_total', 'request rate'],
    ['histogram_quantile(0.99', 'p99'], ['histogram_quantile(0.50', 'p50'], ['histogram_quantile(0.95', 'p95'],
    ['upstream_error', 'upstream errors'], ['tollbooth_pending_charges', 'pending charges'], ['tollbooth_store_errors_total', 'store errors'],
    ['tollbooth_auth_failures_total', 'auth failures'],
  ] as const) t.ok(exprs.includes(needle), `a panel shows ${what}`);

  // Issue 16: a revenue/credits row, granted vs spent vs refunded per SKU, from the existing series.
  const row = panels.find((p) => p.type === 'row' && /revenue/i.test(p.title));
  t.ok(row, 'a revenue and credits row');
  const below = panels.filter((p) => p.type !== 'row' && p.gridPos.y > row.gridPos.y);
  for (const kind of ['granted', 'spent', 'refunded']) {
    t.ok(below.some((p) => p.targets.some((q: any) => q.expr.includes(`tollbooth_credits_total{kind="${kind}"}`) && /by \(sku\)/.test(q.expr))), `the row shows credits ${kind} per SKU`);
  }
  t.ok(below.some((p) => p.targets.some((q: any) => q.expr.includes('tollbooth_settlements_total'))), 'the row shows settlements');
});

// SPEC §20: tollbooth_mcp_requests_total{status} carries 2xx/3xx/4xx/5xx, never a raw code.
const RAW_STATUS_SELECTOR = /tollbooth_mcp_requests_total\{[^}]*\bstatus\s*(=~?|!~?)\s*"[^"]*\d[\d.[]/;

t.test('no alert or panel selects tollbooth_mcp_requests_total by a raw status code (the label holds classes)', async (t) => {
  t.match('sum(rate(tollbooth_mcp_requests_total{status="503"}[5m]))', RAW_STATUS_SELECTOR, 'negative control: a raw-code selector is recognised');
  t.match('tollbooth_mcp_requests_total{method="x", status=~"5.."}', RAW_STATUS_SELECTOR, 'negative control: a raw-code regex is recognised');
  t.notMatch('tollbooth_mcp_requests_total{status="5xx"}', RAW_STATUS_SELECTOR, 'a class selector is fine');
  const rules = (readYaml('deploy/prometheus/alerts.yml').groups as any[]).flatMap((g) => g.rules as any[]);
  const panels = JSON.parse(read('deploy/grafana/dashboard.json')).panels as any[];
  const exprs = [...rules.map((r) => String(r.expr)), ...panels.flatMap((p) => (p.targets ?? []).map((q: any) => String(q.expr)))];
  t.ok(exprs.some((expr) => expr.includes('tollbooth_mcp_requests_total')), 'the request series is used somewhere (the scan is not vacuous)');
  for (const expr of exprs) t.notMatch(expr, RAW_STATUS_SELECTOR, expr.slice(0, 80));
});

t.test('docker-compose.yml has the shape Docker Compose reads (keys, ports, durations, dependencies, interpolations)', async (t) => {
  t.same(composeFindings(readYaml('docker-compose.yml')), [], 'no findings');
});

t.test('the compose shape check finds a misspelt key, an unquoted port, a bad duration and a missing dependency (negative control)', async (t) => {
  const broken = readYaml('docker-compose.yml');
  broken.services.redis.healtcheck = broken.services.redis.healthcheck;
  broken.services['gateway-1'].ports = [8080];
  broken.services.prometheus.healthcheck.interval = '10 seconds';
  broken.services.grafana.depends_on = { prometheus: { condition: 'service_healthy' }, loki: { condition: 'service_started' } };
  broken.services.grafana.environment.BROKEN = '${GRAFANA ADMIN}';
  t.same(composeFindings(broken).map((finding) => finding.split(':')[0]), [
    'services.redis.healtcheck',
    'services.gateway-1.ports',
    'services.prometheus.healthcheck.interval',
    'services.grafana.depends_on',
    'services.grafana.environment.BROKEN',
  ]);
});
