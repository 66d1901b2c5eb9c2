// Newline framing for a child's stdout and stderr with a hard cap on the line being assembled: memory
// stays at most `maxLineBytes` + one chunk whatever the child writes (a 100 MB line never gets buffered).
// Bytes are kept as Buffers until the newline arrives, so a UTF-8 character split across chunks is
// decoded whole.

export interface LineSplitterOptions {
  maxLineBytes: number;
  /** A complete line (without its newline; a trailing CR is removed) and its size in bytes. */
  onLine(line: string, bytes: number): void;
  /**
   * The line being assembled passed `maxLineBytes`. `truncate` keeps its first `maxLineBytes` bytes and
   * delivers them as a line when the newline comes; `stop` discards everything from here on (the owner
   * kills the producer).
   */
  onOverflow?(bytesSoFar: number): 'truncate' | 'stop';
}

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

export class LineSplitter {
  readonly #options: LineSplitterOptions;
  #parts: Buffer[] = [];
  #size = 0;
  /** Bytes of the current line dropped past the cap (truncate mode). */
  #dropped = 0;
  #stopped = false;

  constructor(options: LineSplitterOptions) {
    this.#options = options;
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  push(chunk: Buffer): void {
    let start = 0;
    while (!this.#stopped && start < chunk.length) {
      const newline = chunk.indexOf(NEWLINE, start);
      const end = newline === -1 ? chunk.length : newline;
      this.#append(chunk.subarray(start, end));
      if (newline === -1 || this.#stopped) return;
      this.#emit();
      start = newline + 1;
    }
  }

  /** The stream ended: a last line without its newline still counts. */
  end(): void {
    if (!this.#stopped && (this.#size > 0 || this.#dropped > 0)) this.#emit();
  }

  #append(piece: Buffer): void {
    if (piece.length === 0) return;
    if (this.#dropped > 0) {
      this.#dropped += piece.length;
      return;
    }
    const room = this.#options.maxLineBytes - this.#size;
    if (piece.length <= room) {
      this.#parts.push(piece);
      this.#size += piece.length;
      return;
    }
    const decision = this.#options.onOverflow?.(this.#size + piece.length) ?? 'stop';
    if (decision === 'stop') {
      this.#stopped = true;
      this.#parts = [];
      this.#size = 0;
      return;
    }
    if (room > 0) {
      this.#parts.push(piece.subarray(0, room));
      this.#size += room;
    }
    this.#dropped = piece.length - room;
  }

  #emit(): void {
    let line = this.#parts.length === 1 ? (this.#parts[0] as Buffer) : Buffer.concat(this.#parts, this.#size);
    const bytes = this.#size + this.#dropped;
    this.#parts = [];
    this.#size = 0;
    this.#dropped = 0;
    if (line.length > 0 && line[line.length - 1] === CARRIAGE_RETURN) line = line.subarray(0, line.length - 1);
    this.#options.onLine(line.toString('utf8'), bytes);
  }
}
