// One request to the gateway and what its answer means for each item: done (accepted or a
// duplicate), rejected (never sent again), to be sent again (a retryable failure, or an item
// another request is accepting right now), or a request the gateway will never accept.
import { parseRetryAfter, shouldRetry, type Failure } from '../retry.js';
import type { QueuedItem } from './queue.js';

/** How long a request may go unanswered before it is a timeout (retried), unless `timeoutMs` says. */
export const TIMEOUT_MS = 30_000;

/** The body budget of one normal send (the gateway takes 512 KiB; room left for the envelope). */
export const BODY_BUDGET = 500_000;
/**
 * The body budget of a `keepalive` send: browsers allow 64 KiB in flight for all of a page's
 * keepalive requests together; the tracker keeps one at a time, a little under it.
 */
export const KEEPALIVE_BUDGET = 60_000;

/** An item the gateway refused alone (`rejected[i]` of /v1/track, or the error of identify/alias). */
export interface Rejection {
  code: string;
  message: string;
}

export type Outcome =
  /** The gateway answered: `done` ids are accepted or duplicates; `again` ids are in flight elsewhere. */
  | { ok: true; accepted: string[]; duplicates: string[]; rejected: Array<[QueuedItem, Rejection]>; again: string[] }
  /** Not answered, or answered with a retryable failure: nothing is known, send it all again. */
  | { ok: false; retry: true; failure: Failure; retryAfterMs: number | undefined }
  /** A failure the gateway will answer again however often it is sent. */
  | { ok: false; retry: false; status: number; code: string; message: string };

const ENVELOPE = '{"batch":[]}'.length;
const encoder = /* @__PURE__ */ new TextEncoder();
const bytes = (item: QueuedItem): number => encoder.encode(JSON.stringify(item.body)).length;

/**
 * The items of the next request, from `items` (oldest first): an identify or alias alone, or the
 * longest run of events of at most `max` items whose body fits `budget` bytes (at least one event
 * unless `strict`: a keepalive send leaves an event too large for it to a normal send).
 */
export function pack(items: QueuedItem[], max: number, budget: number, strict: boolean): QueuedItem[] {
  const first = items[0];
  if (!first) return [];
  if (first.kind !== 'track') return strict && bytes(first) > budget ? [] : [first];
  const out: QueuedItem[] = [];
  let size = ENVELOPE;
  for (const item of items) {
    if (item.kind !== 'track' || out.length >= max) break;
    size += bytes(item) + (out.length ? 1 : 0);
    if (size > budget && (out.length || strict)) break;
    out.push(item);
  }
  return out;
}

export interface SenderOptions {
  apiKey: string;
  baseUrl: string;
  fetch: typeof fetch;
  now: () => number;
  /** A request not answered by then is a timeout (retried); default 30 s. */
  timeoutMs?: number;
}

/** Sends packed items; stateless but for whether `?key=` works on this gateway. */
export class Sender {
  /** A browser key may come as `?key=` on /v1/track (no preflight on unload); off after a 401. */
  private queryKey: boolean;
  private readonly base: string;

  constructor(private readonly o: SenderOptions) {
    this.base = o.baseUrl.replace(/\/+$/, '');
    this.queryKey = o.apiKey.startsWith('gh_b_');
  }

  async send(items: QueuedItem[], keepalive: boolean): Promise<Outcome> {
    const first = items[0] as QueuedItem;
    const track = first.kind === 'track';
    const body = JSON.stringify(track ? { batch: items.map((i) => i.body) } : first.body);
    const viaQuery = keepalive && track && this.queryKey;
    const url = `${this.base}/v1/${first.kind}${viaQuery ? `?key=${encodeURIComponent(this.o.apiKey)}` : ''}`;
    const headers: Record<string, string> = viaQuery
      ? { 'content-type': 'text/plain' }
      : { authorization: `Bearer ${this.o.apiKey}`, 'content-type': 'application/json' };
    let res: Response;
    let answer: unknown;
    try {
      // Only what every runtime takes (Cloudflare Workers refuse some RequestInit fields).
      const init: RequestInit = { method: 'POST', headers, body };
      if (keepalive) init.keepalive = true;
      if (typeof AbortSignal.timeout === 'function') init.signal = AbortSignal.timeout(this.o.timeoutMs ?? TIMEOUT_MS);
      res = await this.o.fetch(url, init);
      answer = await res.json().catch(() => undefined);
    } catch (e) {
      const timeout = (e as { name?: string } | undefined)?.name === 'TimeoutError';
      return { ok: false, retry: true, failure: timeout ? 'timeout' : 'network', retryAfterMs: undefined };
    }
    if (res.ok) {
      if (!track) return { ok: true, accepted: [first.id], duplicates: [], rejected: [], again: [] };
      return read(items, answer);
    }
    const error = ((answer as { error?: Partial<Rejection> & { retryable?: boolean } } | undefined)?.error) ?? {};
    const failure: Failure = { status: res.status, code: error.code ?? `HTTP_${res.status}`, retryable: error.retryable === true };
    if (viaQuery && res.status === 401) {
      // This gateway does not take the key in the query: send it again with the header.
      this.queryKey = false;
      return { ok: false, retry: true, failure, retryAfterMs: 0 };
    }
    if (shouldRetry(failure, true)) {
      return { ok: false, retry: true, failure, retryAfterMs: parseRetryAfter(res.headers.get('retry-after'), this.o.now()) };
    }
    return { ok: false, retry: false, status: res.status, code: failure.code, message: error.message ?? res.statusText };
  }
}

type Slot = { index?: unknown; event_id?: unknown; code?: unknown; message?: unknown };

/** The per-item answer of /v1/track; an item the answer does not mention is sent again. */
function read(items: QueuedItem[], answer: unknown): Outcome {
  const a = (answer ?? {}) as { accepted?: Slot[]; duplicates?: Slot[]; rejected?: Slot[] };
  const at = (s: Slot): QueuedItem | undefined => (typeof s.index === 'number' ? items[s.index] : undefined);
  const ids = (list: Slot[] | undefined): string[] => (list ?? []).flatMap((s) => at(s)?.id ?? []);
  const out: Outcome = { ok: true, accepted: ids(a.accepted), duplicates: ids(a.duplicates), rejected: [], again: [] };
  for (const s of a.rejected ?? []) {
    const item = at(s);
    if (!item) continue;
    const code = String(s.code);
    // EVENT_IN_FLIGHT: another request is accepting this id now; its answer decides, so ask again.
    if (code === 'EVENT_IN_FLIGHT') out.again.push(item.id);
    else out.rejected.push([item, { code, message: String(s.message) }]);
  }
  return out;
}
