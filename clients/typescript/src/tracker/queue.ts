// The tracker's queue: where an event waits, with its event_id, from the moment of the fact until
// the gateway's answer says it was accepted (or was a duplicate, or was rejected). Small on
// purpose, so that a browser (IndexedDB), Node (a file, src/node.ts) or an integrator's own store
// can hold it.

/** What a queued item is sent as: an event to /v1/track, or a call to /v1/identify or /v1/alias. */
export type ItemKind = 'track' | 'identify' | 'alias';

/** One queued item. `id` is the event_id for `track` items (a local id for the others). */
export interface QueuedItem {
  id: string;
  kind: ItemKind;
  /** When the fact happened, Unix ms (the order items are sent in, and the 47 h rule). */
  at: number;
  /** The order of items of one Tracker within one ms. */
  seq: number;
  /**
   * The body: for `track`, the batch item (`event_id`, `event`, `timestamp`, ids, `properties`);
   * for `identify`/`alias`, the request body. An item with neither `user_id` nor `anonymous_id`
   * gets the queue's anonymous id when it is sent.
   */
  body: Record<string, unknown>;
}

/**
 * A persistent queue. Every method may be called while another is pending; implementations keep
 * their own order. `read` does not take items out: only `remove` does, after the gateway answered.
 */
export interface Queue {
  add(items: QueuedItem[]): Promise<void>;
  /** The oldest `n` items, oldest first ({@link byAge}). */
  read(n: number): Promise<QueuedItem[]>;
  /** Removes these ids (ids not present are ignored). */
  remove(ids: string[]): Promise<void>;
  count(): Promise<number>;
  /**
   * A small persistent value kept with the queue (the anonymous id): the one stored under `key`,
   * or `value`, stored now, when there is none (atomically, so two tabs agree on one).
   */
  meta(key: string, value: string): Promise<string>;
  /** A name that identifies the storage across tabs (the Web Lock's name); none: not shared. */
  readonly lockName?: string;
  close?(): void;
}

/** Oldest first, in the order they were queued: the order every queue reads in. */
export const byAge = (a: QueuedItem, b: QueuedItem): number => a.at - b.at || a.seq - b.seq;

/** A queue in memory: it lasts as long as the Tracker (the default where there is no IndexedDB). */
export class MemoryQueue implements Queue {
  protected items = new Map<string, QueuedItem>();
  protected values = new Map<string, string>();

  async add(items: QueuedItem[]): Promise<void> {
    for (const item of items) this.items.set(item.id, item);
  }
  async read(n: number): Promise<QueuedItem[]> {
    return [...this.items.values()].sort(byAge).slice(0, n);
  }
  async remove(ids: string[]): Promise<void> {
    for (const id of ids) this.items.delete(id);
  }
  async count(): Promise<number> {
    return this.items.size;
  }
  async meta(key: string, value: string): Promise<string> {
    if (!this.values.has(key)) this.values.set(key, value);
    return this.values.get(key) ?? value;
  }
}
