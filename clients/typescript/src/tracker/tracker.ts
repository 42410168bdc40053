// The event tracker (SPEC §24): every event gets its event_id at the moment of the fact and keeps
// it in a persistent queue until the gateway's answer says it was accepted, a duplicate, or
// rejected. Sends are batched, paced by the retry contract (src/retry.ts), made from one tab at a
// time (Web Locks) and never two at once from one Tracker. TRACKER.md says what that guarantees.
import { DEFAULT_MAX_ATTEMPTS, nextWait, retryDelay, type Failure } from '../retry.js';
import { uuid } from '../uuid.js';
import { IndexedDbQueue } from './idb-queue.js';
import { MemoryQueue, byAge, type Queue, type QueuedItem } from './queue.js';
import { BODY_BUDGET, KEEPALIVE_BUDGET, Sender, TIMEOUT_MS, pack, type Outcome, type Rejection } from './sender.js';

/** Events older than this when they would be sent are dropped (the gateway de-duplicates for 48 h). */
export const MAX_AGE_MS = 47 * 3600 * 1000;

export interface TrackerOptions {
  apiKey: string;
  baseUrl: string;
  fetch?: typeof fetch;
  /** Where events wait. Default: IndexedDB where there is one (database `name`), memory otherwise. */
  queue?: Queue;
  /** The IndexedDB database name (default: per gateway URL and key prefix). */
  name?: string;
  /** How often queued events are sent, in ms (default 5,000). */
  flushIntervalMs?: number;
  /** Events per request, 1–500 (default 500). */
  maxBatch?: number;
  /** A request not answered within this many ms is abandoned and retried (default 30,000). */
  timeoutMs?: number;
  /** Attempts of one `flush()` before it returns with events still queued (default 5). */
  maxAttempts?: number;
  /** Events given up without the gateway storing them: `EXPIRED` (older than 47 h), or the code of a request it refuses for good. */
  onDrop?(count: number, reason: string): void;
  /** An item the gateway rejected (not sent again). Default: `console.warn`. */
  onRejected?(item: QueuedItem, error: Rejection): void;
  now?(): number;
  sleep?(ms: number): Promise<void>;
  random?(): number;
  /** Send on an interval, when the page is hidden or closed, and when back online (default true). */
  autoFlush?: boolean;
}

export interface Ids {
  userId?: string;
  anonymousId?: string;
}

export interface FlushResult {
  /** Items the gateway accepted now. */
  sent: number;
  /** Items it already had (a send whose answer was lost, another tab's). */
  duplicates: number;
  /** Items it rejected (reported to `onRejected`). */
  rejected: number;
  /** Items given up (reported to `onDrop`). */
  dropped: number;
  /** Items still queued. */
  remaining: number;
}

const ANON = 'anonymous_id';
/**
 * The body as it will be sent, now: what JSON cannot carry (a cycle, a BigInt) throws at the
 * call that made it, not at every later send; dates become strings, functions go.
 */
const json = (body: Record<string, unknown>): Record<string, unknown> => JSON.parse(JSON.stringify(body)) as Record<string, unknown>;
const g = globalThis as unknown as {
  document?: Document;
  navigator?: Navigator;
  indexedDB?: IDBFactory;
  addEventListener?: Window['addEventListener'];
  removeEventListener?: Window['removeEventListener'];
};

export class Tracker {
  readonly queue: Queue;
  private readonly sender: Sender;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private readonly maxBatch: number;
  private readonly maxAttempts: number;
  private readonly anon: Promise<string>;
  private anonNow: string | undefined;
  private userId: string | undefined;
  /** Items this Tracker queued and has not seen answered (what an unload sends at once). */
  private readonly mine = new Map<string, QueuedItem>();
  /** Ids in a request of this Tracker now: never in a second one at the same time. */
  private readonly inFlight = new Set<string>();
  private pending: QueuedItem[] = [];
  private seq = 0;
  private writing: Promise<void> = Promise.resolve();
  private running: Promise<unknown> = Promise.resolve();
  /** The unload's requests still unanswered (each ends within the sender's timeout). */
  private unloading: Promise<void> = Promise.resolve();
  private busy = false;
  private notBefore = 0;
  /** Failed background sends in a row (their backoff grows across intervals). */
  private streak = 0;
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  private readonly listeners: Array<[EventTarget, string, () => void]> = [];

  constructor(private readonly o: TrackerOptions) {
    this.now = o.now ?? Date.now;
    this.sleep = o.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.random = o.random ?? Math.random;
    this.maxBatch = Math.min(Math.max(Math.floor(o.maxBatch ?? 500), 1), 500);
    this.maxAttempts = o.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
    this.queue =
      o.queue ??
      (g.indexedDB ? new IndexedDbQueue(o.name ?? `gatehouse:${o.baseUrl}:${o.apiKey.slice(0, 12)}`) : new MemoryQueue());
    this.sender = new Sender({
      apiKey: o.apiKey,
      baseUrl: o.baseUrl,
      fetch: o.fetch ?? ((...a) => fetch(...a)),
      now: this.now,
      ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
    });
    this.anon = this.queue.meta(ANON, uuid()).then((id) => (this.anonNow = id));
    this.anon.catch(() => undefined);
    if (o.autoFlush ?? true) this.auto(o.flushIntervalMs ?? 5000);
  }

  /**
   * Queues an event and returns its event_id (the id the gateway stores it under). Throws a
   * TypeError when `properties` cannot be JSON (a cycle, a BigInt).
   */
  track(event: string, properties?: Record<string, unknown>, ids?: Ids): string {
    const id = uuid();
    const at = this.now();
    const body: Record<string, unknown> = { event_id: id, event, timestamp: new Date(at).toISOString() };
    const userId = ids?.userId ?? (ids?.anonymousId ? undefined : this.userId);
    if (userId !== undefined) body.user_id = userId;
    if (ids?.anonymousId !== undefined) body.anonymous_id = ids.anonymousId;
    if (properties !== undefined) body.properties = properties;
    this.enqueue({ id, kind: 'track', at, seq: this.seq++, body: json(body) });
    return id;
  }

  /** Links this visitor's anonymous id to `userId` (events tracked from now on carry it). */
  identify(userId: string, traits?: Record<string, unknown>): void {
    this.userId = userId;
    const body: Record<string, unknown> = { user_id: userId };
    if (traits !== undefined) body.traits = traits;
    this.enqueue({ id: uuid(), kind: 'identify', at: this.now(), seq: this.seq++, body: json(body) });
  }

  /** Links `previousId` (an anonymous id) to `userId`. Server keys only: a browser key gets 403 (dropped, `onDrop`). */
  alias(previousId: string, userId: string): void {
    this.enqueue({ id: uuid(), kind: 'alias', at: this.now(), seq: this.seq++, body: { anonymous_id: previousId, user_id: userId } });
  }

  /** This visitor's anonymous id, kept with the queue. */
  anonymousId(): Promise<string> {
    return this.anon;
  }

  /**
   * Sends what is queued, waiting out retryable failures (`Retry-After`, backoff) up to
   * `maxAttempts` in a row, and the answer of a request the page's unload sent meanwhile;
   * events still unsent stay queued. Flushes run one after the other.
   */
  flush(): Promise<FlushResult> {
    const run = this.running.then(() => this.locked(true));
    this.running = run.catch(() => undefined);
    return run;
  }

  /** Stops the timer and the page's listeners after the queued writes end. Call `flush()` first to send. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    for (const [target, type, fn] of this.listeners) target.removeEventListener(type, fn);
    await this.writing;
    await this.running;
    // A late answer to the unload's request still removes its events (not sent again later).
    await this.unloaded();
    this.queue.close?.();
  }

  private enqueue(item: QueuedItem): void {
    this.mine.set(item.id, item);
    this.pending.push(item);
    this.writing = this.writing.then(async () => {
      const items = this.pending.splice(0);
      if (!items.length) return;
      try {
        await this.queue.add(items);
      } catch {
        for (const i of items) this.mine.delete(i.id);
        this.o.onDrop?.(items.length, 'QUEUE_WRITE_FAILED');
      }
    });
    if (this.mine.size >= this.maxBatch) queueMicrotask(() => this.tick());
  }

  private auto(interval: number): void {
    this.timer = setInterval(() => this.tick(), interval);
    (this.timer as { unref?: () => void }).unref?.();
    setTimeout(() => this.tick(), 0);
    const on = (target: EventTarget | undefined, type: string, fn: () => void): void => {
      if (!target?.addEventListener) return;
      target.addEventListener(type, fn);
      this.listeners.push([target, type, fn]);
    };
    const w = g.addEventListener ? (globalThis as unknown as EventTarget) : undefined;
    on(w, 'online', () => {
      this.notBefore = this.streak = 0;
      this.tick();
    });
    on(w, 'pagehide', () => this.unload());
    on(g.document, 'visibilitychange', () => {
      if (g.document?.visibilityState === 'hidden') this.unload();
    });
  }

  /** A background send: skipped while one runs or while a retryable failure's wait lasts. */
  private tick(): void {
    if (this.busy || this.closed || this.now() < this.notBefore) return;
    this.busy = true;
    const run = this.running.then(() => this.locked(false));
    this.running = run.catch(() => undefined).finally(() => (this.busy = false));
  }

  /**
   * The page is going away (or hidden, and may be killed): this Tracker's own queued events,
   * not in a request already, go now in one `keepalive` request within its 64 KB budget,
   * synchronously, as a page being unloaded runs no more tasks. Not behind the tab lock: another
   * tab may be sending the same ids at this moment, which the gateway de-duplicates.
   */
  private unload(): void {
    const anon = this.anonNow;
    const items = [...this.mine.values()]
      .filter((i) => !this.inFlight.has(i.id) && i.at >= this.now() - MAX_AGE_MS && (anon || this.ided(i)))
      .sort(byAge);
    const batch = pack(items, this.maxBatch, KEEPALIVE_BUDGET, true);
    if (!batch.length) return;
    const sent = this.send(batch, true, { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 }).catch(() => undefined);
    this.unloading = Promise.all([this.unloading, sent]).then(() => undefined);
  }

  /** Whether the item names its visitor already (identify always needs the anonymous id). */
  private ided(item: QueuedItem): boolean {
    return item.body.anonymous_id != null || (item.kind === 'track' && item.body.user_id != null);
  }

  /** Read-send-remove under the queue's Web Lock when there is one (one tab at a time). */
  private async locked(wait: boolean): Promise<FlushResult> {
    await this.writing;
    const locks = g.navigator?.locks;
    const name = this.queue.lockName;
    if (!locks || !name) return this.drain(wait);
    const skipped = async (): Promise<FlushResult> => ({ sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: await this.queue.count() });
    // A background send leaves the queue to the tab sending it; an explicit flush waits its turn.
    const r = await locks.request(name, { ifAvailable: !wait }, (lock) => (lock ? this.drain(wait) : skipped()));
    await this.forget();
    return r;
  }

  /**
   * Forgets, of this page's own events, those another tab sent: written before the oldest item
   * still queued, they are no longer in the queue (so an unload does not send them again).
   */
  private async forget(): Promise<void> {
    await this.writing;
    const mark = this.seq;
    const [oldest] = await this.queue.read(1);
    for (const [id, item] of this.mine) {
      if (item.seq < mark && !this.inFlight.has(id) && (!oldest || item.at < oldest.at)) this.mine.delete(id);
    }
  }

  private async drain(wait: boolean): Promise<FlushResult> {
    const r: FlushResult = { sent: 0, duplicates: 0, rejected: 0, dropped: 0, remaining: 0 };
    let attempt = wait ? 0 : this.streak;
    let limit = this.maxBatch;
    let waited = false;
    for (;;) {
      const read = (await this.queue.read(this.maxBatch + this.inFlight.size)).filter((i) => !this.inFlight.has(i.id));
      const old = read.filter((i) => i.at < this.now() - MAX_AGE_MS);
      if (old.length) {
        await this.done(old.map((i) => i.id));
        r.dropped += old.length;
        this.o.onDrop?.(old.length, 'EXPIRED');
        continue;
      }
      const batch = pack(read, limit, BODY_BUDGET, false);
      if (!batch.length) {
        // An explicit flush waits for an unload's request still in flight: its events are
        // removed when it is answered, or sent by this flush when it failed.
        if (!wait || !this.inFlight.size || waited) break;
        await this.unloaded();
        waited = true;
        continue;
      }
      const out = await this.send(batch, false, r);
      if (out.ok) {
        if (!out.again.length) {
          attempt = 0;
          continue;
        }
      } else if (!out.retry) {
        // 400/413/422: this request's shape or size; halve it until the one item at fault is alone.
        if ([400, 413, 422].includes(out.status) && batch.length > 1) {
          limit = Math.ceil(batch.length / 2);
          continue;
        }
        // The gateway will refuse these whatever happens (a revoked key, a forbidden origin, the
        // month's quota spent): they are given up and reported, never sent for ever.
        await this.done(batch.map((i) => i.id));
        r.dropped += batch.length;
        this.o.onDrop?.(batch.length, out.code);
        continue;
      }
      attempt += 1;
      const failure: Failure = out.ok ? 'network' : out.failure;
      const after = out.ok ? undefined : out.retryAfterMs;
      const pause = wait ? nextWait(attempt, this.maxAttempts, failure, true, after, this.random(), undefined) : undefined;
      if (pause === undefined) {
        this.notBefore = this.now() + retryDelay(attempt, after, this.random());
        break;
      }
      await this.sleep(pause);
    }
    if (!wait || attempt === 0) this.streak = attempt;
    r.remaining = await this.queue.count();
    return r;
  }

  /**
   * Waits for the unload's requests to be answered, at most the request timeout (a `fetch` that
   * ignores its signal, or a runtime without `AbortSignal.timeout`, still ends the wait).
   */
  private async unloaded(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.o.timeoutMs ?? TIMEOUT_MS);
    });
    await Promise.race([this.unloading, deadline]);
    clearTimeout(timer);
  }

  /** One request; its answer applied to the queue and counted in `r`. */
  private async send(batch: QueuedItem[], keepalive: boolean, r: FlushResult): Promise<Outcome> {
    const anon = this.anonNow ?? (keepalive ? '' : await this.anon);
    const sent = batch.map((i) => (this.ided(i) ? i : { ...i, body: { ...i.body, anonymous_id: anon } }));
    for (const i of batch) this.inFlight.add(i.id);
    try {
      return await this.apply(batch, await this.sender.send(sent, keepalive), r);
    } finally {
      // Only once the answer is applied: an unload in between would send them again.
      for (const i of batch) this.inFlight.delete(i.id);
    }
  }

  private async apply(batch: QueuedItem[], out: Outcome, r: FlushResult): Promise<Outcome> {
    if (out.ok) {
      for (const [item, error] of out.rejected) {
        if (this.o.onRejected) this.o.onRejected(item, error);
        else console.warn(`gatehouse: event ${item.id} (${String(item.body.event)}) rejected: ${error.code} ${error.message}`);
      }
      await this.done([...out.accepted, ...out.duplicates, ...out.rejected.map(([i]) => i.id)]);
      r.sent += out.accepted.length;
      r.duplicates += out.duplicates.length;
      r.rejected += out.rejected.length;
      // Items the answer did not mention (a 2xx without the per-item answer) stay queued.
      const answered = out.accepted.length + out.duplicates.length + out.rejected.length;
      if (answered < batch.length && !out.again.length) out.again.push('');
    }
    return out;
  }

  private async done(ids: string[]): Promise<void> {
    if (!ids.length) return;
    await this.queue.remove(ids);
    for (const id of ids) this.mine.delete(id);
  }
}
