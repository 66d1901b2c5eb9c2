// Real processes, counted from /proc (SPEC §22 tests: no orphans, no zombies). A test gives its children a
// marker argument nobody else uses and looks for it in every process's command line.
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';

export interface ProcessInfo {
  pid: number;
  /** R, S, D, Z (zombie), T … as /proc/PID/stat says. */
  state: string;
  ppid: number;
  pgid: number;
  cmdline: string;
}

/** A fresh marker: pass it as an argument the program ignores, then find the processes that carry it. */
export const newMarker = (): string => `--tb-marker=${randomUUID()}`;

/** Every live process (zombies included) of this machine, read from /proc. */
export function allProcesses(): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name in parentheses may hold spaces: the fields start after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      found.push({ pid, state: fields[0] ?? '?', ppid: Number(fields[1]), pgid: Number(fields[2]), cmdline });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** The processes whose command line holds `marker` (a zombie's is empty: find those by group). */
export const processesWith = (marker: string): ProcessInfo[] => allProcesses().filter((p) => p.cmdline.includes(marker));

/** Every process, zombies included, in one of these process groups. */
export const processesInGroups = (groups: ReadonlySet<number>): ProcessInfo[] => allProcesses().filter((p) => groups.has(p.pgid));
