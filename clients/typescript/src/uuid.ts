// UUIDv4s for Idempotency-Keys and event ids: `crypto.randomUUID` where there is one (browsers
// have it only in secure contexts), else the same from `crypto.getRandomValues`.

const hex = (b: number): string => b.toString(16).padStart(2, '0');

/** A random UUIDv4. */
export function uuid(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = ((b[6] ?? 0) & 0x0f) | 0x40;
  b[8] = ((b[8] ?? 0) & 0x3f) | 0x80;
  const h = Array.from(b, hex).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
