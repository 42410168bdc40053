// The browser's queue: IndexedDB, so events survive a reload, a closed tab and a lost
// connection. One database per name (by default per gateway URL and key); every tab of an origin
// shares it, and the Tracker sends it from one tab at a time (Web Locks, see tracker.ts).
import { MemoryQueue, type Queue, type QueuedItem } from './queue.js';

const ITEMS = 'items';
const META = 'meta';

const done = <T>(req: IDBRequest<T>): Promise<T> =>
  new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });

/**
 * A queue in IndexedDB database `name` (stores `items`, keyed by id and indexed by `at`, `seq`, and
 * `meta`). Where the database cannot be opened (storage blocked, some private modes) it is a
 * {@link MemoryQueue}: events then last as long as the page.
 */
export class IndexedDbQueue extends MemoryQueue implements Queue {
  readonly lockName: string;
  private db: Promise<IDBDatabase> | undefined;
  private memory = false;

  constructor(readonly name: string) {
    super();
    this.lockName = `gatehouse-tracker:${name}`;
  }

  /** Whether IndexedDB is out of reach (then the memory queue serves). */
  private async off(): Promise<boolean> {
    if (!this.memory) await this.open().catch(() => (this.memory = true));
    return this.memory;
  }

  private open(): Promise<IDBDatabase> {
    this.db ??= new Promise<IDBDatabase>((resolve, reject) => {
      const req = indexedDB.open(this.name, 1);
      req.onupgradeneeded = () => {
        const db = req.result;
        db.createObjectStore(ITEMS, { keyPath: 'id' }).createIndex('at', ['at', 'seq']);
        db.createObjectStore(META);
      };
      req.onsuccess = () => {
        const db = req.result;
        // Another tab upgrading (a later version of this package) must not be blocked by this one.
        db.onversionchange = () => {
          db.close();
          this.db = undefined;
        };
        resolve(db);
      };
      req.onerror = () => {
        this.db = undefined;
        reject(req.error);
      };
    });
    return this.db;
  }

  /** Runs `work` in one transaction and resolves when the transaction committed. */
  private async tx<T>(store: string, mode: IDBTransactionMode, work: (s: IDBObjectStore) => IDBRequest<T> | void): Promise<T | undefined> {
    const db = await this.open();
    return new Promise<T | undefined>((resolve, reject) => {
      const t = db.transaction(store, mode);
      const req = work(t.objectStore(store));
      t.oncomplete = () => resolve(req ? req.result : undefined);
      t.onerror = t.onabort = () => reject(t.error);
    });
  }

  override async add(items: QueuedItem[]): Promise<void> {
    if (await this.off()) return super.add(items);
    await this.tx(ITEMS, 'readwrite', (s) => {
      for (const item of items) s.put(item);
    });
  }

  override async read(n: number): Promise<QueuedItem[]> {
    if (await this.off()) return super.read(n);
    const db = await this.open();
    const index = db.transaction(ITEMS, 'readonly').objectStore(ITEMS).index('at');
    return (await done(index.getAll(null, n))) as QueuedItem[];
  }

  override async remove(ids: string[]): Promise<void> {
    if (await this.off()) return super.remove(ids);
    await this.tx(ITEMS, 'readwrite', (s) => {
      for (const id of ids) s.delete(id);
    });
  }

  override async count(): Promise<number> {
    if (await this.off()) return super.count();
    return (await this.tx(ITEMS, 'readonly', (s) => s.count())) ?? 0;
  }

  override async meta(key: string, value: string): Promise<string> {
    if (await this.off()) return super.meta(key, value);
    let kept = value;
    await this.tx(META, 'readwrite', (s) => {
      const req = s.get(key);
      req.onsuccess = () => {
        if (typeof req.result === 'string') kept = req.result;
        else s.put(value, key);
      };
    });
    return kept;
  }

  close(): void {
    void this.db?.then((db) => db.close(), () => undefined);
    this.db = undefined;
  }
}
