/** A plan's windows and monthly quota (Gatehouse's `PLANS` entries). */
export interface Plan {
  per_second?: number;
  per_minute?: number;
  per_hour?: number;
  per_day?: number;
  monthly_quota: number;
  [setting: string]: unknown;
}

/** A path prefix forwarded to an origin (Gatehouse's `UPSTREAMS` entries). */
export interface Upstream {
  prefix: string;
  origin: string;
  cost?: number;
  idempotency?: 'optional' | 'required' | 'off';
  [setting: string]: unknown;
}

export interface StartOptions {
  /** `PLANS`: every plan by name; `trial` is required (a project's plan when it names none). */
  plans?: Record<string, Plan>;
  /** `UPSTREAMS`: prefixes forwarded to your origins (the kit makes an `ORIGIN_SECRET`). */
  upstreams?: Upstream[];
  /** Any other setting, as in `wrangler.toml` `[vars]` (objects are sent as JSON). */
  vars?: Record<string, string | number | boolean | object>;
  /** The plan of the project the kit makes (default: `trial`). */
  plan?: string;
  /** A directory to keep the state in across starts (default: in memory, gone at `stop()`). */
  persist?: string;
  /** Print the worker's log lines to stderr (they are kept for `logs()` either way). */
  log?: boolean;
  /** Append the worker's log lines to this file too. */
  logFile?: string;
}

export interface TestClock {
  /** Gatehouse's time now. */
  now(): Date;
  /**
   * Moves Gatehouse's time forward and runs what falls inside, in order: it stops at each webhook
   * attempt due on the way (retries scheduled inside the advance included), runs the minute cron
   * there and waits for the attempts, then runs the cron once more at the new time.
   */
  advance(seconds: number): Promise<void>;
  /** Moves Gatehouse's time to `time`; never backwards (a `RangeError`). */
  set(time: Date | string | number): Promise<void>;
}

export interface CapturedDelivery {
  /** `webhook-id`: the delivery's id, the same on every attempt. */
  id: string;
  type: string | null;
  data: unknown;
  /** The whole payload `{id, type, created_at, data}`. */
  payload: unknown;
  /** The raw body as received. */
  body: string;
  headers: Record<string, string | string[] | undefined>;
  /** The signature checked against the secrets the kit knows; `null` when it knows none. */
  verified: boolean | null;
  /** 1 for the first attempt of this delivery the sink received, 2 for the next, … */
  attempt: number;
  /** What the sink answered: 200, or 500 while told to `fail`. */
  answered: number;
  receivedAt: Date;
}

export interface WebhookSink {
  /** A loopback URL whose deliveries the kit captures (the gateway accepts it as a target). */
  endpoint(path?: string): string;
  /** Subscribes the project to `events` at this sink (owner key unless `key`), trusting its secret. */
  subscribe(events: string[], options?: { key?: string; path?: string; signature?: 'v1' | 'v1a' }): Promise<Record<string, unknown> & { id: string; secret?: string; public_key: string | null }>;
  /** Verifies deliveries with this `v1` secret or `v1a` public key too (a subscription your own code made). */
  trust(secret: string): void;
  /** The next 2xx-answered delivery not returned before (of `type`), waiting up to `timeout` ms (5,000). */
  next(options?: { type?: string; timeout?: number }): Promise<CapturedDelivery>;
  /** Every delivery received, failed attempts included. */
  all(): CapturedDelivery[];
  /** Answer 500 to the next `n` deliveries. */
  fail(n?: number): void;
  clear(): void;
}

export interface ProjectKeys {
  owner: string;
  server: string;
  browser: string;
  cicd: string;
}

export declare class Gatehouse {
  /** Boots the built worker in-process and makes a project with a key of each type. */
  static start(options?: StartOptions): Promise<Gatehouse>;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly adminToken: string;
  readonly project: { id: string; keys: ProjectKeys };
  readonly clock: TestClock;
  readonly webhooks: WebhookSink;
  /** How long `start` took, in ms. */
  readonly startedInMs: number;
  /** An empty state with a fresh project (the clock keeps its time). */
  reset(): Promise<void>;
  /** Runs the minute cron at the clock's time and waits for the deliveries due by then. */
  tick(): Promise<void>;
  /** The worker's log lines so far. */
  logs(): string[];
  stop(): Promise<void>;
}

/** The statements of a SQL migration file. */
export declare function statements(sql: string): string[];

export default Gatehouse;
