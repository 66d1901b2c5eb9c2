// A Prometheus histogram whose label children count into arrays, for the two histograms every request
// observes (tollbooth_mcp_request_duration_seconds, tollbooth_upstream_duration_seconds). prom-client's
// own child hashes its labels into a fresh string and keys its buckets by the bound as a number, so
// each observation converts doubles to strings (V8's number-string cache misses under real traffic):
// 0.6–1 µs an observation with other numbers converted in between, against ≈ 0.01 µs here
// (docs/decisions.md, "Request histograms and an unsampled trace").
// The registry, the exposition and everything else stay prom-client's: this implements the metric
// protocol its Registry reads (`name`, `help`, `type`, `get()`, `reset()`), with the same series.
import type client from 'prom-client';

/** One series of get(), as prom-client's Registry reads it. */
export interface HistogramValue {
  labels: Record<string, string | number>;
  value: number;
  metricName: string;
}

export interface BucketHistogramChild {
  observe(value: number): void;
}

class Child implements BucketHistogramChild {
  readonly labels: Readonly<Record<string, string>>;
  /** Per bucket (not cumulative); the last slot is above the highest bound (+Inf). */
  readonly counts: Float64Array;
  readonly #bounds: readonly number[];
  sum = 0;
  count = 0;

  constructor(labels: Record<string, string>, bounds: readonly number[]) {
    this.labels = labels;
    this.#bounds = bounds;
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    // A duration is always finite; a non-finite one would poison _sum for good, so it is not counted.
    if (!Number.isFinite(value)) return;
    const bounds = this.#bounds;
    let at = 0;
    while (at < bounds.length && value > (bounds[at] as number)) at += 1;
    this.counts[at] = (this.counts[at] as number) + 1;
    this.sum += value;
    this.count += 1;
  }
}

export class BucketHistogram<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram' as const;
  readonly aggregator = 'sum' as const;
  readonly labelNames: readonly L[];
  readonly #bounds: readonly number[];
  readonly #bucketName: string;
  /** Children by their label values joined with NUL (label values never hold one from our callers; a collision would only merge series). */
  readonly #children = new Map<string, Child>();

  constructor(config: { name: string; help: string; labelNames: readonly L[]; buckets: readonly number[]; registers: client.Registry[] }) {
    this.name = config.name;
    this.help = config.help;
    this.labelNames = config.labelNames;
    this.#bounds = [...config.buckets].sort((a, b) => a - b);
    this.#bucketName = `${config.name}_bucket`;
    // The Registry reads only name, help, type and get(): prom-client's Metric type lists its own classes.
    for (const registry of config.registers) registry.registerMetric(this as unknown as client.Metric<L>);
  }

  /** The child for these label values, in `labelNames` order; keep it: looking it up is the only cost an observation adds. */
  labels(...values: string[]): BucketHistogramChild {
    if (values.length !== this.labelNames.length) throw new Error(`${this.name}: ${this.labelNames.length} label values expected, got ${values.length}`);
    const key = values.join('\u0000');
    let child = this.#children.get(key);
    if (child === undefined) {
      const labels: Record<string, string> = {};
      this.labelNames.forEach((label, at) => (labels[label] = values[at] as string));
      child = new Child(labels, this.#bounds);
      this.#children.set(key, child);
    }
    return child;
  }

  /** What prom-client's Histogram#get() returns for the same observations: cumulative buckets, +Inf, _sum, _count per label set. */
  async get(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: HistogramValue[] }> {
    const values: HistogramValue[] = [];
    for (const child of this.#children.values()) {
      let cumulative = 0;
      this.#bounds.forEach((bound, at) => {
        cumulative += child.counts[at] as number;
        values.push({ labels: { le: bound, ...child.labels }, value: cumulative, metricName: this.#bucketName });
      });
      values.push({ labels: { le: '+Inf', ...child.labels }, value: child.count, metricName: this.#bucketName });
      values.push({ labels: { ...child.labels }, value: child.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...child.labels }, value: child.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** Registry#resetMetrics(): every series back to zero (the children handed out stay valid). */
  reset(): void {
    for (const child of this.#children.values()) {
      child.counts.fill(0);
      child.sum = 0;
      child.count = 0;
    }
  }
}
