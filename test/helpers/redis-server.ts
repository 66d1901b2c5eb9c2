// Real redis-server processes for the store tests: each on free ports, in its own temp dir, never the
// machine's Redis on 6379. Every process started here is killed when the test process exits.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from './clock.js';

export interface RedisServer {
  url: string;
  port: number;
  /** SIGTERM, wait for exit, remove the data dir. */
  stop(): Promise<void>;
  /** Sends a signal without waiting (SIGKILL = crash, SIGSTOP/SIGCONT = hang/resume). */
  kill(signal: NodeJS.Signals): void;
  /** Starts the server again on the same port and data dir (after kill or stop). */
  restart(): Promise<void>;
}

export interface RedisCluster {
  seeds: string[];
  ports: number[];
  /**
   * One node per port (same order; three masters, the rest their replicas): signal
   * it, or start it again on its port and data dir (it rejoins with its slots, or as a replica of the
   * master that replaced it).
   */
  nodes: { port: number; kill(signal: NodeJS.Signals): void; restart(): Promise<void> }[];
  /** The ports of the nodes that are masters with slots now (after a failover, a promoted replica among them), asking every node but `skip`. */
  masters(skip?: number): number[];
  /** Resolves once every node says cluster_state:ok again (after a node was stopped or restarted). */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface StartRedisOptions {
  /** AOF with fsync on every write, so a SIGKILLed server restarts with its data. */
  persist?: boolean;
  /** Starts a replica of the server on this port (resolves once its link to the primary is up). */
  replicaOf?: number;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const dir = mkdtempSync(join(tmpdir(), 'tb-redis-'));
  const persistence = options.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  const replication = options.replicaOf !== undefined ? ['--replicaof', '127.0.0.1', String(options.replicaOf)] : [];
  const started = await launchOnFreePort(false, (port) => ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...persistence, ...replication, '--dir', dir, '--daemonize', 'no', '--loglevel', 'warning']);
  const { port, args } = started;
  if (options.replicaOf !== undefined) await waitFor(async () => cli(port, 'info', 'replication').includes('master_link_status:up'), `replica on ${port} linked to its primary`);
  let { child } = started;
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      await terminate(child);
      rmSync(dir, { recursive: true, force: true });
    },
    kill(signal) {
      child.kill(signal);
    },
    async restart() {
      await terminate(child);
      child = await launch(args, port);
    },
  };
}

/** `replicasPerMaster`: replicas for each of the three masters (default 0), so a master can fail over to one. */
export async function startRedisCluster(options: StartRedisOptions & { replicasPerMaster?: number } = {}): Promise<RedisCluster> {
  const nodes: { child: ChildProcess; dir: string; port: number; args: string[] }[] = [];
  const persistence = options.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  const replicas = options.replicasPerMaster ?? 0;
  for (let i = 0; i < 3 * (1 + replicas); i++) {
    const dir = mkdtempSync(join(tmpdir(), 'tb-redis-cluster-'));
    const started = await launchOnFreePort(true, (port) => ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...persistence, '--dir', dir, '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000', '--loglevel', 'warning']);
    nodes.push({ ...started, dir });
  }
  const ports = nodes.map((n) => n.port);
  const created = spawnSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', String(replicas), '--cluster-yes'], { encoding: 'utf8', timeout: 20_000 });
  if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
  await waitFor(async () => ports.every((p) => /cluster_state:ok/.test(cli(p, 'cluster', 'info'))), 'cluster_state:ok on every node');
  // Every node must also agree that all 16384 slots are served before the first command is routed.
  await waitFor(async () => ports.every((p) => /cluster_slots_ok:16384/.test(cli(p, 'cluster', 'info'))), 'all slots ok');
  const healthy = (timeoutMs = 15_000): Promise<void> =>
    waitFor(async () => ports.every((p) => /cluster_state:ok/.test(cli(p, 'cluster', 'info'))), 'cluster_state:ok on every node', { timeoutMs });
  if (replicas > 0) {
    await waitFor(async () => ports.filter((p) => cli(p, 'info', 'replication').includes('master_link_status:up')).length === 3 * replicas, 'every replica linked to its master', { timeoutMs: 30_000, everyMs: 200 });
  }
  return {
    seeds: ports.map((p) => `redis://127.0.0.1:${p}`),
    ports,
    masters: (skip) => clusterMasters(ports.filter((port) => port !== skip)),
    nodes: nodes.map((node) => ({
      port: node.port,
      kill: (signal: NodeJS.Signals) => void node.child.kill(signal),
      async restart() {
        await terminate(node.child);
        node.child = await launch(node.args, node.port);
      },
    })),
    waitHealthy: healthy,
    async stop() {
      await Promise.all(nodes.map((n) => terminate(n.child)));
      for (const n of nodes) rmSync(n.dir, { recursive: true, force: true });
    },
  };
}

/** One line of CLUSTER NODES: the node's id, port, flags, the id of its master (replicas) and the slot ranges it serves. */
export interface ClusterNodeLine {
  id: string;
  port: number;
  roles: string[];
  masterId: string;
  slots: [number, number][];
}

/** CLUSTER NODES as the node on `port` sees it (empty if it does not answer). */
export function clusterNodes(port: number): ClusterNodeLine[] {
  return cli(port, 'cluster', 'nodes')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [id = '', address = '', flags = '', masterId = '', , , , , ...ranges] = line.split(' ');
      const slots = ranges
        .filter((range) => !range.startsWith('['))
        .map((range): [number, number] => {
          const [from = -1, to = from] = range.split('-').map(Number);
          return [from, to];
        });
      return { id, port: Number(/:(\d+)@/.exec(address)?.[1]), roles: flags.split(','), masterId, slots };
    });
}

/** The masters holding slots, as the first node that answers sees them (a node SIGKILLed or stopped does not). */
function clusterMasters(ports: number[]): number[] {
  for (const port of ports) {
    const nodes = clusterNodes(port);
    if (nodes.length === 0) continue;
    return nodes.filter((node) => node.roles.includes('master') && !node.roles.includes('fail') && !node.roles.includes('fail?') && node.slots.length > 0).map((node) => node.port);
  }
  return [];
}

/** A Sentinel monitoring `masterPort` as `masterName` (quorum 1); `url` is the store URL for it. */
export async function startRedisSentinel(masterPort: number, masterName = 'tbmaster'): Promise<{ url: string; port: number; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'tb-redis-sentinel-'));
  const config = join(dir, 'sentinel.conf');
  const { child, port } = await launchOnFreePort(false, (port) => {
    writeFileSync(config, [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor ${masterName} 127.0.0.1 ${masterPort} 1`, ''].join('\n'));
    return [config, '--sentinel', '--loglevel', 'warning'];
  });
  await waitFor(async () => cli(port, 'sentinel', 'get-master-addr-by-name', masterName).includes(String(masterPort)), 'sentinel to know its master');
  return {
    url: `redis://127.0.0.1:${port}/0?sentinelMasterName=${masterName}`,
    port,
    async stop() {
      await terminate(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface SentinelSet {
  /** The store URL: every sentinel, the master name. */
  url: string;
  /** The data nodes (index 0 started as primary); each keeps its port across a kill and restart. */
  nodes: RedisServer[];
  sentinelPorts: number[];
  /** The port of the primary the sentinels name now. */
  primaryPort(): number;
  /** Resolves once the sentinels name a primary other than `oldPort` that answers as master. */
  awaitPromotion(oldPort: number, timeoutMs?: number): Promise<number>;
  stop(): Promise<void>;
}

/**
 * A Sentinel set-up from the real binaries: one primary, `replicas` replicas and `sentinels`
 * `redis-server --sentinel` processes (quorum: a majority), on random ports, with short timeouts so
 * a failover takes a few seconds.
 */
export async function startSentinelSet(options: { replicas?: number; sentinels?: number; masterName?: string } = {}): Promise<SentinelSet> {
  const masterName = options.masterName ?? 'tbfail';
  // With persistence, as in production: a node restarted without it comes back empty, and an empty
  // node taken for a primary (or synced from) wipes the data set — a different failure than the one tested.
  const primary = await startRedis({ persist: true });
  const nodes = [primary];
  for (let i = 0; i < (options.replicas ?? 2); i++) nodes.push(await startRedis({ persist: true, replicaOf: primary.port }));
  const count = options.sentinels ?? 3;
  const quorum = Math.floor(count / 2) + 1;
  const sentinels: { child: ChildProcess; port: number; dir: string }[] = [];
  for (let i = 0; i < count; i++) {
    const dir = mkdtempSync(join(tmpdir(), 'tb-redis-sentinel-'));
    const config = join(dir, 'sentinel.conf');
    const started = await launchOnFreePort(false, (port) => {
      writeFileSync(config, [
        `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
        `sentinel monitor ${masterName} 127.0.0.1 ${primary.port} ${quorum}`,
        `sentinel down-after-milliseconds ${masterName} 1000`,
        `sentinel failover-timeout ${masterName} 4000`,
        `sentinel parallel-syncs ${masterName} 2`,
        '',
      ].join('\n'));
      return [config, '--sentinel', '--loglevel', 'warning'];
    });
    sentinels.push({ child: started.child, port: started.port, dir });
  }
  const named = (port: number): number => {
    const reply = cli(port, 'sentinel', 'get-master-addr-by-name', masterName).trim().split('\n');
    return Number(reply[1]);
  };
  // Every sentinel knows the replicas and the other sentinels before the first failover is asked of them.
  await waitFor(async () => sentinels.every(({ port }) => /num-other-sentinels\n(\d+)/.exec(cli(port, 'sentinel', 'master', masterName))?.[1] === String(count - 1)), 'sentinels to discover each other', { timeoutMs: 20_000, everyMs: 200 });
  await waitFor(async () => sentinels.every(({ port }) => /num-slaves\n(\d+)/.exec(cli(port, 'sentinel', 'master', masterName))?.[1] === String(nodes.length - 1)), 'sentinels to discover the replicas', { timeoutMs: 20_000, everyMs: 200 });
  return {
    url: `redis://${sentinels.map(({ port }) => `127.0.0.1:${port}`).join(',')}/0?sentinelMasterName=${masterName}`,
    nodes,
    sentinelPorts: sentinels.map(({ port }) => port),
    primaryPort: () => named(sentinels[0]?.port ?? 0),
    async awaitPromotion(oldPort, timeoutMs = 30_000) {
      let promoted = 0;
      await waitFor(async () => {
        const port = named(sentinels[0]?.port ?? 0);
        if (!port || port === oldPort || !cli(port, 'info', 'replication').includes('role:master')) return false;
        promoted = port;
        return true;
      }, 'a replica promoted by the sentinels', { timeoutMs, everyMs: 100 });
      return promoted;
    },
    async stop() {
      await Promise.all(sentinels.map(({ child }) => terminate(child)));
      for (const { dir } of sentinels) rmSync(dir, { recursive: true, force: true });
      await Promise.all(nodes.map((node) => node.stop()));
    },
  };
}

/** Runs redis-cli against a local port and returns its stdout. */
export function cli(port: number, ...args: string[]): string {
  return spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { encoding: 'utf8', timeout: 5_000 }).stdout ?? '';
}

/**
 * redis-server cannot bind port 0 and report it, so a port is picked and handed over; another process
 * taking it first makes redis-server exit "Address already in use", and a fresh port is tried.
 */
async function launchOnFreePort(withBus: boolean, argsFor: (port: number) => string[]): Promise<{ child: ChildProcess; port: number; args: string[] }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort(withBus);
    const args = argsFor(port);
    try {
      return { child: await launch(args, port), port, args };
    } catch (err) {
      if (attempt >= 3 || !/address already in use/i.test(String(err))) throw err;
    }
  }
}

async function launch(args: string[], port: number): Promise<ChildProcess> {
  // redis-server logs to stdout (a bind failure among it): both are kept for the error.
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  live.add(child);
  child.once('exit', () => live.delete(child));
  try {
    await waitFor(async () => {
      if (child.exitCode !== null) throw new Error(`redis-server exited (${child.exitCode}): ${stderr}`);
      // Our own server answering, not another process that got the port first.
      return cli(port, 'info', 'server').includes(`process_id:${child.pid}`);
    }, `redis-server on port ${port}`);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return child;
}

async function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGCONT'); // a stopped process would never handle SIGTERM
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}


/** A free port (and, for cluster nodes, its bus port + 10000), away from 6379. */
async function freePort(withBus: boolean): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = withBus ? 20_000 + Math.floor(Math.random() * 25_000) : await ephemeralPort();
    if (port === 6379 || port === 16379) continue;
    if (!(await canListen(port))) continue;
    if (withBus && !(await canListen(port + 10_000))) continue;
    return port;
  }
  throw new Error('no free port for redis-server');
}

function ephemeralPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
