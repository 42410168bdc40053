// Verifying our webhooks where they arrive (Standard Webhooks; SPEC §10, §24, §25), as the Rust
// SDK's `WebhookVerifier` does (crates/gatehouse-client/src/verify.rs): `v1` — HMAC-SHA256 with
// the subscription's `whsec_` secret — and `v1a` — Ed25519 with its `whpk_` public key — over
// `{webhook-id}.{webhook-timestamp}.{body}`; `webhook-signature` may hold several space-separated
// entries (a rotation sends the new and the old) and is valid when any entry of the key's scheme
// matches; a timestamp more than 5 minutes from now is refused; HMACs are compared in constant
// time. Web Crypto only: Node ≥ 20, browsers, Workers, Deno, Bun.

/** How far a delivery's `webhook-timestamp` may be from the receiver's clock, in seconds. */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

/** Why a delivery is not accepted as ours. */
export type WebhookVerificationReason =
  /** A key is neither `whsec_` + base64 nor `whpk_` + a base64 Ed25519 public key. */
  | 'invalid_secret'
  /** `webhook-id`, `webhook-timestamp` or `webhook-signature` is missing. */
  | 'missing_header'
  /** `webhook-timestamp` is not Unix seconds. */
  | 'invalid_timestamp'
  /** The timestamp is more than the tolerance from now: a replayed old delivery, or a clock that is off. */
  | 'timestamp_out_of_tolerance'
  /** `webhook-signature` holds no entry of the key's scheme (`v1,` for `whsec_`, `v1a,` for `whpk_`). */
  | 'no_signature'
  /** No signature of the key's scheme matches. */
  | 'signature_mismatch';

/** A delivery that did not verify: answer it 400 (or 401) and do not act on it. */
export class WebhookVerificationError extends Error {
  readonly reason: WebhookVerificationReason;
  /** For `timestamp_out_of_tolerance`: the timestamp minus now, in seconds (negative: in the past). */
  readonly skew: number | undefined;

  constructor(reason: WebhookVerificationReason, message: string, skew?: number) {
    super(message);
    this.name = 'WebhookVerificationError';
    this.reason = reason;
    this.skew = skew;
  }
}

export interface VerifyWebhookOptions {
  /** How far the timestamp may be from now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The time to verify at, as Unix ms or a Date (default: now). */
  now?: number | Date;
}

/** Headers as a receiver has them: a `Headers`, or Node's `req.headers`. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

type Bytes = Uint8Array<ArrayBuffer>;

type Key = { scheme: 'v1'; key: CryptoKey } | { scheme: 'v1a'; key: CryptoKey };

/**
 * Verifies a delivery: the raw body as received (not re-serialised JSON), its headers, and the
 * subscription's `secret` (`whsec_…`) or, for a `v1a` subscription, its `public_key` (`whpk_…`) —
 * or several (any may match). Resolves `true`, or rejects with a {@link WebhookVerificationError}.
 *
 * ```ts
 * await verifyWebhook(await request.text(), request.headers, env.WEBHOOK_SECRET);
 * ```
 */
export async function verifyWebhook(
  body: string | Uint8Array | ArrayBuffer,
  headers: WebhookHeaders,
  secret: string | readonly string[],
  options: VerifyWebhookOptions = {},
): Promise<true> {
  if (typeof crypto === 'undefined' || crypto.subtle === undefined) {
    throw new TypeError('verifyWebhook needs Web Crypto (crypto.subtle): in a browser, a secure context (https)');
  }
  const secrets = typeof secret === 'string' ? [secret] : [...secret];
  if (secrets.length === 0) throw invalidSecret();
  const keys = await Promise.all(secrets.map(importKey));
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signature = header(headers, 'webhook-signature');
  if (id === undefined || timestamp === undefined || signature === undefined) {
    throw new WebhookVerificationError(
      'missing_header',
      'webhook-id, webhook-timestamp and webhook-signature are all required',
    );
  }
  const sentText = timestamp.trim();
  if (!/^-?[0-9]{1,15}$/.test(sentText)) {
    throw new WebhookVerificationError('invalid_timestamp', 'webhook-timestamp is not Unix seconds');
  }
  const nowMs = options.now === undefined ? Date.now() : +options.now;
  const tolerance = options.toleranceSeconds ?? WEBHOOK_TOLERANCE_SECONDS;
  // A time or tolerance that is no number would turn the timestamp check off: refuse it.
  if (!Number.isFinite(nowMs)) throw new TypeError('verifyWebhook: now must be a valid time');
  if (!Number.isFinite(tolerance) || tolerance < 0) throw new TypeError('verifyWebhook: toleranceSeconds must be a number ≥ 0');
  const skew = Number(sentText) - Math.floor(nowMs / 1000);
  if (Math.abs(skew) > tolerance) {
    throw new WebhookVerificationError(
      'timestamp_out_of_tolerance',
      `webhook-timestamp is ${Math.abs(skew)}s ${skew < 0 ? 'old' : 'in the future'} (tolerance ±${tolerance}s)`,
      skew,
    );
  }
  const signed = concat(new TextEncoder().encode(`${id}.${sentText}.`), bytesOf(body));
  const entries = signature.split(/\s+/).filter((entry) => entry !== '');
  let anyCandidate = false;
  for (const key of keys) {
    const prefix = `${key.scheme},`;
    const candidates = entries
      .filter((entry) => entry.startsWith(prefix))
      .map((entry) => base64(entry.slice(prefix.length)))
      .filter((decoded): decoded is Bytes => decoded !== undefined);
    if (candidates.length === 0) continue;
    anyCandidate = true;
    if (await matches(key, candidates, signed)) return true;
  }
  if (!anyCandidate) {
    throw new WebhookVerificationError('no_signature', "webhook-signature holds no signature of the key's scheme");
  }
  throw new WebhookVerificationError('signature_mismatch', 'no signature matches the body');
}

async function matches(key: Key, candidates: Bytes[], signed: Bytes): Promise<boolean> {
  if (key.scheme === 'v1') {
    const expected = new Uint8Array(await crypto.subtle.sign('HMAC', key.key, signed));
    // Every candidate is compared in full, matched or not: the time says nothing about which.
    let any = 0;
    for (const candidate of candidates) any |= equalInConstantTime(candidate, expected) ? 1 : 0;
    return any === 1;
  }
  // A signature proves nothing about a secret: no timing to hide.
  for (const candidate of candidates) {
    if (candidate.length !== 64) continue;
    if (await crypto.subtle.verify('Ed25519', key.key, candidate, signed)) return true;
  }
  return false;
}

/** Whether `a` and `b` are equal, in a time that depends only on their lengths. */
function equalInConstantTime(a: Uint8Array, b: Uint8Array): boolean {
  let difference = a.length ^ b.length;
  for (let i = 0; i < b.length; i++) difference |= (a[i % Math.max(a.length, 1)] ?? 0) ^ (b[i] ?? 0);
  return difference === 0;
}

async function importKey(text: string): Promise<Key> {
  const trimmed = text.trim();
  if (trimmed.startsWith('whpk_')) {
    const raw = base64(trimmed.slice(5));
    if (raw === undefined || raw.length !== 32) throw invalidSecret();
    try {
      return { scheme: 'v1a', key: await crypto.subtle.importKey('raw', raw, 'Ed25519', false, ['verify']) };
    } catch {
      throw invalidSecret();
    }
  }
  if (!trimmed.startsWith('whsec_')) throw invalidSecret();
  const raw = base64(trimmed.slice(6));
  if (raw === undefined || raw.length === 0) throw invalidSecret();
  const key = await crypto.subtle.importKey('raw', raw, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return { scheme: 'v1', key };
}

function invalidSecret(): WebhookVerificationError {
  return new WebhookVerificationError(
    'invalid_secret',
    'the key is not whsec_ followed by base64, nor whpk_ followed by an Ed25519 public key',
  );
}

/** A header's value from a `Headers` or a Node-style record (any case; several values joined). */
function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (key.toLowerCase() !== name || value === undefined) continue;
    return Array.isArray(value) ? value.join(' ') : value;
  }
  return undefined;
}

/** Standard base64 with its padding; `undefined` for anything else. */
function base64(text: string): Bytes | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) return undefined;
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}

function bytesOf(body: string | Uint8Array | ArrayBuffer): Uint8Array {
  if (typeof body === 'string') return new TextEncoder().encode(body);
  return body instanceof Uint8Array ? body : new Uint8Array(body);
}

function concat(a: Uint8Array, b: Uint8Array): Bytes {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
