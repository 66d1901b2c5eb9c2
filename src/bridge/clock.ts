// The bridge's one time source. The bridge serves a process, not a gateway (its children outlive a config
// reload), and only measures spans on it: idle reaping, the probe cache, restart backoff, child age. So it
// reads the system clock's monotonic time, which never jumps with NTP; its tests drive real children.
import { systemClock } from '../clock.js';

export const monotonic = (): number => systemClock.monotonic();
