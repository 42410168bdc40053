/// <reference types="node" />
// @gatehouse/client/node: what only Node has. `FileQueue` keeps the tracker's queue in a file, so
// events tracked before a crash or a restart are sent after it with the same event_ids.
import { randomUUID } from 'node:crypto';
import { readFile, rename, writeFile, unlink } from 'node:fs/promises';
import { MemoryQueue, type Queue, type QueuedItem } from './tracker/queue.js';

interface Stored {
  v: 1;
  meta: Record<string, string>;
  items: QueuedItem[];
}

/**
 * The tracker's queue in one JSON file at `path`, rewritten whole on every change through a
 * temporary file and a rename (a crash leaves the old file or the new one, never half of one).
 * One process, one Tracker per file: there is no lock between processes.
 */
export class FileQueue extends MemoryQueue implements Queue {
  private loaded: Promise<void> | undefined;
  private chain: Promise<void> = Promise.resolve();

  constructor(readonly path: string) {
    super();
  }

  private load(): Promise<void> {
    this.loaded ??= readFile(this.path, 'utf8').then(
      (text) => {
        const stored = JSON.parse(text) as Stored;
        for (const item of stored.items) this.items.set(item.id, item);
        for (const [k, v] of Object.entries(stored.meta)) this.values.set(k, v);
      },
      (e: NodeJS.ErrnoException) => {
        if (e.code !== 'ENOENT') throw e;
      },
    );
    return this.loaded;
  }

  /** Changes the copy in memory, then writes it; writes are one after the other. */
  private change(fn: () => void): Promise<void> {
    const run = this.chain.then(async () => {
      await this.load();
      fn();
      const stored: Stored = { v: 1, meta: Object.fromEntries(this.values), items: [...this.items.values()] };
      const temp = `${this.path}.${randomUUID()}.tmp`;
      try {
        await writeFile(temp, JSON.stringify(stored));
        await rename(temp, this.path);
      } catch (e) {
        await unlink(temp).catch(() => undefined);
        throw e;
      }
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  override add(items: QueuedItem[]): Promise<void> {
    return this.change(() => void super.add(items));
  }
  override remove(ids: string[]): Promise<void> {
    return this.change(() => void super.remove(ids));
  }
  override async read(n: number): Promise<QueuedItem[]> {
    await this.chain;
    await this.load();
    return super.read(n);
  }
  override async count(): Promise<number> {
    await this.chain;
    await this.load();
    return super.count();
  }
  override async meta(key: string, value: string): Promise<string> {
    await this.chain;
    await this.load();
    if (!this.values.has(key)) await this.change(() => void (this.values.has(key) || this.values.set(key, value)));
    return this.values.get(key) ?? value;
  }
}
