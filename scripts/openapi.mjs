// Writes public/openapi.json, the OpenAPI 3.1 description of every public route. Edit the tables
// here and run `node scripts/openapi.mjs`; a unit test (gatehouse_core::route) fails when the description
// and the router disagree.
import { writeFileSync } from 'node:fs';

const ref = (name) => ({ $ref: `#/components/schemas/${name}` });
const str = { type: 'string' };
const int = (minimum, maximum) => ({ type: 'integer', ...(minimum !== undefined && { minimum }), ...(maximum !== undefined && { maximum }) });
const time = { type: 'string', format: 'date-time' };
/** A free-form JSON object (properties, traits, details, …): open, so generated types accept any member. */
const freeForm = { type: 'object', additionalProperties: true };
const nullable = (schema) => ({ oneOf: [schema, { type: 'null' }] });
const obj = (properties, required = []) => ({ type: 'object', properties, required, additionalProperties: false });
/** A response object: every property is always present. */
const out = (properties) => obj(properties, Object.keys(properties));
const list = (item) => out({ data: { type: 'array', items: item }, next_cursor: nullable(str) });
const signatureScheme = { enum: ['v1', 'v1a'], description: 'v1 (default): HMAC-SHA256 with the whsec_ secret; v1a: Ed25519, receivers verify with the public key (422 otherwise)' };
const json = (schema) => ({ 'application/json': { schema } });
/** Text the server trims: at most `max` characters and, when `blank` is false, not only whitespace. */
const text = (max, { min = 1, blank = false } = {}) => ({ type: 'string', minLength: min, maxLength: max, ...(!blank && { pattern: '\\S' }) });

// Headers: X-Request-Id on every response; the rate-limit headers on every answer to a known key
// (SPEC §3, §4), so required on its successes and present on most of its errors (not on a 401).
const header = (name, required) => ({ $ref: `#/components/headers/${name}${required ? '' : '-optional'}` });
const RATE = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit'];
const successHeaders = (keyed) => ({ 'X-Request-Id': header('X-Request-Id', true), ...(keyed ? Object.fromEntries(RATE.map((h) => [h, header(h, true)])) : {}) });
/**
 * The documented answers of one operation: its success(es) and every error status it can give,
 * 400 always (an unknown query parameter is refused on every route, as an unknown body field is).
 */
const responses = (keyed, successes, codes) => ({
  ...Object.fromEntries(Object.entries(successes).map(([status, { schema, description = 'OK', content }]) =>
    [status, { description, headers: successHeaders(keyed), content: content ?? json(schema) }])),
  ...Object.fromEntries([...new Set([400, ...codes])].sort().map((c) => [String(c), { $ref: `#/components/responses/E${c}` }])),
});
const idemHeader = { $ref: '#/components/parameters/IdempotencyKey' };
const pathParam = (name, description) => ({ name, in: 'path', required: true, schema: str, ...(description && { description }) });
const query = (name, schema, description) => ({ name, in: 'query', schema, ...(description && { description }) });
const paging = [query('limit', int(1, 200), '1–200 (400 otherwise), default 50'), query('cursor', str, 'next_cursor of the previous page (400 for one this API did not return)')];

// Error statuses shared by whole kinds of operation (SPEC §3): a key route answers 401 (missing,
// unknown or revoked key), 429 (its window or quota, or too many failed authentications from the
// address) and 503 (its guard or storage unreachable); 403 where the key type may not call it.
// A body is read within the route's limit (413) and parsed (400); a mutation honours
// Idempotency-Key (409 reused or in use, 422 malformed or repeated).
const KEYED = [401, 429, 503];
const SCOPED = [...KEYED, 403];
const BODY = [400, 413];
const IDEMPOTENT = [409, 422];
const ADMIN = [401, 429, 503];

const keyed = { security: [{ apiKey: [] }] };
const admin = { security: [{ adminToken: [] }] };
const get = (summary, { parameters = [], ok, codes = [], scoped = true, content }) => ({
  summary, ...keyed, ...(parameters.length && { parameters }),
  responses: responses(true, { 200: { schema: ok, content } }, [...(scoped ? SCOPED : KEYED), ...codes].sort()),
});
/** A key route that changes something: optional Idempotency-Key, a JSON body (unless `body` is null). */
const mutating = (summary, body, successes, codes = [], { parameters = [] } = {}) => ({
  summary, ...keyed, parameters: [idemHeader, ...parameters],
  ...(body && { requestBody: { required: true, content: json(body) } }),
  responses: responses(true, successes, [...new Set([...SCOPED, ...BODY, ...IDEMPOTENT, ...codes])].sort()),
});
/** An ingestion route (SPEC §7): no Idempotency-Key (event ids, chunk keys), bodies up to 512 KiB. */
const ingestion = (summary, body, ok, codes = []) => ({
  summary, ...keyed, requestBody: { required: true, content: json(body) },
  responses: responses(true, { 202: { schema: ok, description: 'Accepted' } }, [...new Set([...SCOPED, ...BODY, 422, ...codes])].sort()),
});

const nonBlankId = text(200);
const contactIn = {
  ...obj({ name: nullable(text(200)), phone: nullable({ type: 'string', maxLength: 32, pattern: '^\\+?[ ().-]*([0-9][ ().-]*){3,15}$', description: '3 to 15 digits, optionally a leading + and spaces, dashes, dots or parentheses' }),
    email: nullable({ type: 'string', maxLength: 254, pattern: '^[^\\s@]+@[^\\s.]\\S*\\.\\S*[^\\s.]$' }), external_id: nullable(text(255)) }),
  description: 'At least one of name, phone, email, external_id (422 otherwise). Text is trimmed; blank is absent.',
  anyOf: ['name', 'phone', 'email', 'external_id'].map((f) => ({ required: [f], properties: { [f]: { type: 'string', pattern: '\\S' } } })),
};
const messageIn = obj({ contact_id: { ...str, description: 'a contact of this project (422 otherwise)' }, text: { type: 'string', minLength: 1, maxLength: 4096, pattern: '\\S' } }, ['contact_id', 'text']);
const bulkIn = (item) => obj({ items: { type: 'array', minItems: 1, maxItems: 100, items: item, description: '1–100 items (422 otherwise); an item that is not valid fails alone' } }, ['items']);
const rateOverride = nullable({ ...int(1, 4294967295), description: 'requests per minute, at most the plan\'s limit (403 above: an owner may lower a key\'s limit, not raise it; 400 for 0); null = the plan\'s limit' });
const samePlan = nullable({ ...str, description: 'only the project\'s own plan (403 otherwise: the operator sets plans, PATCH /admin/v1/projects/{id})' });
const timeBound = { type: 'string', anyOf: [{ format: 'date-time' }, { format: 'date', pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' }, { pattern: '^[0-9]+$' }] };
const futureTime = (extra) => ({ ...time, description: `RFC 3339, in the future (422 otherwise)${extra}` });
const grace = (max, byDefault, what) => ({ ...int(0, max), description: `0–${max} seconds (422 above), default ${byDefault}: ${what}` });
// Limits (SPEC §20): any of four windows, each a whole number ≥ 1 (400 otherwise, details.field
// naming it, e.g. limits.per_minute); an identity may also set a monthly quota, a key may not.
const WINDOWS = ['per_second', 'per_minute', 'per_hour', 'per_day'];
const windowLimit = int(1, 4294967295);
const monthlyQuota = int(1, 9007199254740991);
const identityLimits = obj({ ...Object.fromEntries(WINDOWS.map((w) => [w, windowLimit])), monthly_quota: monthlyQuota });
const keyLimits = obj(Object.fromEntries(WINDOWS.map((w) => [w, windowLimit])));
const identityLimitsIn = nullable({ ...identityLimits, description: 'each field optional, a whole number ≥ 1 (400 naming the field otherwise, an unknown field too); {} or null: none of its own. Shared by all the identity\'s keys' });
const keyLimitsIn = nullable({ ...keyLimits, description: 'the key\'s own windows, each at most its plan\'s (403 above: an owner may lower, not raise); a window its plan does not limit, or monthly_quota (a key has no quota of its own), is a 422 naming the field; {} or null: the plan\'s' });
const identityIdIn = nullable({ ...str, description: 'an identity of this project (422 with details.field "identity_id" otherwise); its keys share its limits. null: none' });
const metaIn = nullable({ ...freeForm, description: 'any JSON object, at most 4 KiB as compact JSON (422 beyond); null: none' });
const eventTypes = ['contact.created', 'message.created', 'scenario.run.started', 'release_marker.created', 'usage.hourly', 'usage.adjustment'];

const paths = {
  '/health': { get: { summary: 'Liveness; no credentials, no storage', security: [], responses: responses(false, { 200: { schema: out({ status: { const: 'ok' } }) } }, []) } },
  '/admin/v1/health': { get: { summary: 'Deep health: one round trip to a KeyGuard Durable Object', ...admin,
    responses: responses(false, { 200: { schema: out({ status: { const: 'ok' }, key_guard: { const: 'ok' } }) } }, ADMIN) } },
  '/admin/v1/projects': { post: { summary: 'Create a project and its first owner key', ...admin,
    parameters: [idemHeader],
    requestBody: { required: true, content: json(obj({ name: { ...text(200), description: 'trimmed; 1–200 characters (400 otherwise)' }, plan: nullable({ ...str, description: 'a plan of PLANS (422 otherwise); default trial' }) }, ['name'])) },
    responses: responses(false, { 201: { schema: ref('ProjectCreated'), description: 'Created' } }, [...new Set([...BODY, ...IDEMPOTENT, ...ADMIN])].sort()) } },
  '/admin/v1/projects/{id}': { patch: { summary: 'Put a project and all its keys on another plan (only the operator chooses plans)', ...admin,
    parameters: [idemHeader, pathParam('id')],
    requestBody: { required: true, content: json(obj({ plan: { ...str, description: 'a plan of PLANS (422 otherwise)' } }, ['plan'])) },
    responses: responses(false, { 200: { schema: out({ project_id: str, name: str, plan: str, keys: int(0), keys_told: { ...int(0), description: 'keys whose guard took the new limits at once; the others read them within 10 minutes' } }) } }, [...new Set([...BODY, 404, ...IDEMPOTENT, ...ADMIN])].sort()) } },
  '/admin/v1/projects/{id}/owner-keys': { post: { summary: 'Issue a new owner key for a project (the way back in when its owner keys are lost); the secret is shown only here', ...admin,
    parameters: [idemHeader, pathParam('id')],
    requestBody: { required: true, content: json(obj({ name: nullable({ type: 'string', maxLength: 200, description: 'trimmed; blank is none (400 beyond 200 characters)' }) })) },
    responses: responses(false, { 201: { schema: ref('KeyCreated'), description: 'Created' } }, [...new Set([...BODY, 404, ...IDEMPOTENT, ...ADMIN])].sort()) } },
  '/admin/v1/projects/{id}/keys': { post: { summary: 'Issue a key of any type for a project, using nothing of its windows or quota (the test kit sets up its project so); the secret is shown only here', ...admin,
    parameters: [idemHeader, pathParam('id')],
    requestBody: { required: true, content: json(obj({ type: { type: 'string', enum: ['owner', 'server', 'browser', 'cicd'] }, name: nullable({ type: 'string', maxLength: 200, description: 'trimmed; blank is none (400 beyond 200 characters)' }) }, ['type'])) },
    responses: responses(false, { 201: { schema: ref('KeyCreated'), description: 'Created' } }, [...new Set([...BODY, 404, ...IDEMPOTENT, ...ADMIN])].sort()) } },
  '/admin/v1/dead-letters': { get: { summary: 'Queue messages the consumers gave up on, newest first', ...admin,
    parameters: [query('queue', { type: 'string', maxLength: 128 }, 'only letters from this queue, e.g. gatehouse-events (400 beyond 128 characters)'), ...paging],
    responses: responses(false, { 200: { schema: list(ref('DeadLetter')) } }, [400, ...ADMIN]) } },
  '/admin/v1/dead-letters/redrive': { post: { summary: 'Send dead letters back to their queues (the named ones, or up to 500 not yet re-driven)', ...admin,
    parameters: [idemHeader],
    requestBody: { required: false, content: json(obj({ ids: nullable({ type: 'array', minItems: 1, maxItems: 500, items: str, description: '1–500 ids (400 otherwise); absent or null = every letter not yet re-driven' }) })) },
    responses: responses(false, { 200: { schema: out({ redriven: int(0), failed: { ...int(0), description: 'sends that failed; still dead, re-drive again' }, skipped: { ...int(0), description: 'named ids unknown or re-driven already' } }) } }, [...new Set([...BODY, ...IDEMPOTENT, ...ADMIN])].sort()) } },
  '/admin/v1/usage/reconcile': { get: { summary: "A usage period's export against its audit rows (SPEC §22): difference 0 once the period's runs are sent", ...admin,
    parameters: [query('hour', time, 'the RFC 3339 start of a usage period (USAGE_PERIOD_SECONDS; 400 otherwise)'), query('project_id', str, 'one project (default: every one; 422 when their archived rows of the period are in more than 200 objects)')],
    responses: responses(false, { 200: { schema: out({ hour: time, period_seconds: int(60, 3600), project_id: nullable(str),
      exported: { ...int(), description: 'billable requests in the sent export runs (first and adjustments)' },
      audited: { ...int(), description: 'billable audit rows of the period, hot and archived, counted row by row' },
      difference: { ...int(), description: 'audited − exported' },
      pending: { ...int(), description: 'counted but not exported yet (an open period, or a run not yet sent)' } }) } }, [400, 422, ...ADMIN].sort()) } },
  '/admin/v1/audit/health': { get: { summary: 'The audit digests across projects (SPEC §23): signing on, projects whose archived objects wait past the documented lag, and projects whose storage disagrees with their chain head', ...admin,
    responses: responses(false, { 200: { schema: out({ signing: { type: 'boolean' }, lag_seconds: { type: 'integer' }, projects_behind: int(0), oldest_undigested: nullable(time),
      alerts: { type: 'array', items: out({ project_id: str, at: time, alert: str }) }, healthy: { type: 'boolean' } }) } }, ADMIN) } },
  '/admin/v1/projects/{project_id}/events': { post: { summary: "An origin's event for the project's webhook subscribers (proxy mode, EVENTS_SECRET); with an Idempotency-Key the event id derives from it, so a retry writes no second delivery", security: [{ originSecret: [] }],
    parameters: [idemHeader, pathParam('project_id')],
    requestBody: { required: true, content: json(obj({ type: { type: 'string', pattern: '^[a-z0-9_.]{1,64}$', description: '1–64 characters of a-z 0-9 _ . (422 otherwise)' }, data: { description: 'any JSON; the payload data of the webhook' } }, ['type'])) },
    responses: responses(false, { 202: { description: 'Accepted: one delivery per matching active subscription', schema: out({ event_id: str, deliveries: { ...int(0), description: 'deliveries of this event (an earlier call with the same Idempotency-Key included)' } }) } }, [...BODY, 404, 409, 422, ...ADMIN].sort()) } },
  '/public/v1/me': { get: get('The calling key, its window and quota', { ok: ref('Me'), scoped: false }) },
  '/public/v1/keys': {
    post: mutating('Create a key on the project\'s plan (the secret is shown only here)', obj({ type: { enum: ['owner', 'server', 'browser', 'cicd'] }, name: nullable({ type: 'string', maxLength: 200, description: 'trimmed; blank is none (400 beyond 200 characters)' }), plan: samePlan, rate_limit_per_minute: rateOverride,
      expires_at: nullable(futureTime('; from then on the key is refused: 401, details.reason "expired"')), identity_id: identityIdIn, limits: keyLimitsIn, allowed_origins: nullable({ type: 'array', maxItems: 20, items: { type: 'string', maxLength: 200 }, description: 'browser keys only (422 otherwise): the origins (https://shop.example) whose pages may use the key; another Origin is 403. Empty or null: any origin' }) }, ['type']),
      { 201: { schema: ref('KeyCreated'), description: 'Created' } }),
    get: get('List the project\'s keys', { parameters: paging, ok: list(ref('Key')), codes: [400] }),
  },
  '/public/v1/keys/last-used': { get: get('The last day each key was used in the last 31 days (UTC), from the daily aggregates: one call for every key', {
    ok: out({ since: { type: 'string', format: 'date' }, data: { type: 'array', items: out({ key_id: str, last_used_on: { type: 'string', format: 'date' } }) } }) }) },
  '/public/v1/keys/{id}': {
    patch: mutating('Change the name, lower the limits, set the expiry or the identity (applies at once)', obj({ name: nullable({ type: 'string', maxLength: 200, description: 'trimmed; blank or null clears it (400 beyond 200 characters)' }), plan: samePlan, rate_limit_per_minute: rateOverride,
      expires_at: nullable(futureTime('; null: never. Not for a rolled or expired key (422)')), identity_id: identityIdIn, limits: keyLimitsIn, allowed_origins: nullable({ type: 'array', maxItems: 20, items: { type: 'string', maxLength: 200 }, description: 'browser keys only (422 otherwise): the origins (https://shop.example) whose pages may use the key; another Origin is 403. Empty or null: any origin' }) }),
      { 200: { schema: ref('Key') } }, [404], { parameters: [pathParam('id')] }),
    delete: mutating('Revoke a key (applies at once)', null, { 200: { schema: ref('Key') } }, [404], { parameters: [pathParam('id')] }),
  },
  '/public/v1/keys/{id}/roll': { post: mutating('Roll a key: a new key (the secret is shown only here) with the same type, name and limit; the old one works until the grace ends, then is refused (401, details.reason "rolled")',
    obj({ grace_seconds: grace(86400, 3600, 'how long the old key keeps working') }),
    { 201: { schema: ref('KeyCreated'), description: 'Created' } }, [404], { parameters: [pathParam('id')] }) },
  '/public/v1/stats': { get: get('The project overview: every key together — daily counts, 4xx, 5xx and p50/p95/p99 response times, top endpoints, error share (from the daily aggregates)', {
    parameters: [query('days', int(1, 90), '1–90 (400 otherwise), default 30'),
      query('endpoint', { type: 'string', pattern: '^[A-Z]+ /', description: 'one endpoint only: a method and a route, as top_endpoints name them (400 otherwise)' })],
    ok: ref('ProjectStats'), codes: [400] }) },
  '/public/v1/keys/{id}/stats': { get: get('Daily counts, response-time percentiles, top endpoints and error share of a key', {
    parameters: [pathParam('id'), query('days', int(1, 90), '1–90 (400 otherwise), default 30')], ok: ref('KeyStats'), codes: [400, 404] }) },
  '/public/v1/identities': {
    post: mutating('Create an identity: keys that belong to it share its limits and quota', obj({ external_id: { type: 'string', minLength: 1, maxLength: 255, description: 'your id for this customer, kept as sent; 1–255 characters (400 otherwise), unique in the project (409 CONFLICT otherwise)' },
      meta: metaIn, limits: identityLimitsIn }, ['external_id']),
      { 201: { schema: ref('Identity'), description: 'Created' } }),
    get: get('List the project\'s identities, newest first', { parameters: paging, ok: list(ref('Identity')), codes: [400] }),
  },
  '/public/v1/identities/{id}': {
    get: get('One identity', { parameters: [pathParam('id')], ok: ref('Identity'), codes: [404] }),
    patch: mutating('Change an identity\'s meta or limits (null clears; its keys\' guards are told at once)', obj({ meta: metaIn, limits: identityLimitsIn }),
      { 200: { schema: ref('Identity') } }, [404], { parameters: [pathParam('id')] }),
    delete: mutating('Delete an identity; its keys stay, belonging to no identity', null,
      { 200: { schema: out({ id: str, status: { const: 'deleted' }, keys_detached: { ...int(0), description: 'keys that belonged to it' } }) } }, [404], { parameters: [pathParam('id')] }),
  },
  '/public/v1/logs': { get: get('The audit log, newest first', {
    parameters: [query('method', { type: 'string', maxLength: 10, pattern: '^\\s*[A-Za-z]*\\s*$' }, 'an HTTP method, any case (400 otherwise)'),
      query('status', { type: 'string', pattern: '^\\s*([1-5][xX][xX]|[1-5][0-9][0-9])?\\s*$' }, '1xx–5xx or a code 100–599 (400 otherwise)'),
      query('path', { type: 'string', maxLength: 200 }, 'glob over the path with its query: * matches any run of characters, everything else itself (case-sensitive); at most 200 characters (422 beyond)'),
      query('request_id', str), query('key_id', str), query('idempotency_key', str),
      query('trace_id', { type: 'string', pattern: '^\\s*[0-9a-f]{32}\\s*$' }, 'a W3C trace id: 32 lowercase hex digits, not all 0 (400 otherwise)'),
      query('from', timeBound, 'RFC 3339, YYYY-MM-DD (the day\'s first ms) or Unix ms (400 otherwise); a date or time that does not exist (2026-02-31) is a 422'),
      query('to', timeBound, 'RFC 3339, YYYY-MM-DD (the day\'s last ms) or Unix ms; not before from (422)'),
      query('dashboard', { enum: ['true', 'false'] }, 'true: only the dashboard\'s reads (Gatehouse-Budget); false: all but them (400 otherwise)'), ...paging],
    ok: list(ref('AuditRow')), codes: [400, 422] }) },
  '/public/v1/events': { get: get('The events the project\'s keys sent, as stored (newest first, over the last EVENT_RETENTION_DAYS days, 30 by default)', {
    parameters: [query('from', timeBound, 'RFC 3339, YYYY-MM-DD (the day\'s first ms) or Unix ms: received at or after (400 otherwise; a date that does not exist is a 422)'),
      query('to', timeBound, 'received at or before; not before from (422)'), query('event', { type: 'string', maxLength: 200 }, 'the event\'s name (400 beyond 200 characters)'),
      query('user_id', { type: 'string', maxLength: 200 }), query('anonymous_id', { type: 'string', maxLength: 200 }), ...paging],
    ok: list(ref('StoredEvent')), codes: [400, 422] }) },
  '/public/v1/logs/archives': { get: get('Archived days of the log', { ok: list(ref('Archive')) }) },
  '/public/v1/logs/archives/{date}': { get: get('Download one archived day (gzip NDJSON)', {
    parameters: [{ ...pathParam('date', 'YYYY-MM-DD (400 otherwise); a day that does not exist (2026-02-31) is a 422'), schema: { type: 'string', format: 'date', pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' } }],
    content: { 'application/gzip': { schema: { type: 'string', format: 'binary' } } }, codes: [400, 404, 422] }) },
  '/public/v1/audit/public-key': { get: get('The Ed25519 public key the project\'s audit digests verify under (404 when no AUDIT_SIGNING_KEY is set)', { ok: out({ algorithm: { const: 'ed25519' }, public_key: str }), codes: [404] }) },
  '/public/v1/usage': { get: get('Billable requests of the periods starting in [from, to), grouped (SPEC §22)', {
    parameters: [query('from', time, 'RFC 3339 (default: 30 days before to; 400 otherwise)'), query('to', time, 'RFC 3339 (default: now), after from and at most 31 days after it (400 otherwise)'),
      query('group_by', { enum: ['key', 'identity', 'route', 'day', 'hour'] }, 'default key (400 otherwise)'),
      query('limit', int(1, 1000), '1–1000 groups (400 otherwise), default 100'), query('cursor', str, 'next_cursor of the previous page (400 for one this API did not return)')],
    ok: out({ from: time, to: time, group_by: str, meter: { const: 'requests' }, period_seconds: int(60, 3600), total: { ...int(0), description: 'every billable request of the range' },
      data: { type: 'array', items: { ...freeForm, description: 'the group (key_id, identity_id — null for keys of no identity —, route as "METHOD template", day YYYY-MM-DD or hour) and its requests', properties: { requests: int(1) } } },
      has_more: { type: 'boolean' }, next_cursor: nullable(str) }), codes: [400] }) },
  '/public/v1/usage/file': { get: get('One usage export of the project (CloudEvents, one per line), as written', {
    parameters: [query('key', str, 'a key under usage/{project}/, as an event\'s data.object names it (400 otherwise)')],
    content: { 'application/x-ndjson': { schema: { type: 'string' } } }, codes: [400, 404] }) },
  '/public/v1/audit/head': { get: get('The project\'s audit chain head, signed now with the digests\' key (SPEC §23): its newest digest, and what is archived and not digested yet (404 when no AUDIT_SIGNING_KEY is set)', {
    ok: { ...out({ project_id: str, as_of: time, started: { type: 'boolean', description: 'false: the project\'s digests (if any) are all from before the chain head; the listing alone is the chain' },
      sequence: { ...int(0), description: 'digests in the chain' }, covered_to: { ...time, description: 'everything archived before this is digested' },
      digest_key: { type: 'string', description: 'the newest digest\'s key (empty: none yet)' }, digest_sha256: str, pending_objects: int(0),
      oldest_pending: { ...time, description: 'the first row time of the oldest object not digested yet' }, algorithm: { const: 'ed25519' }, public_key: str,
      signature: { type: 'string', description: 'base64 Ed25519 over this JSON without `signature`' } }),
      required: ['project_id', 'as_of', 'started', 'sequence', 'covered_to', 'digest_key', 'digest_sha256', 'pending_objects', 'algorithm', 'public_key', 'signature'] }, codes: [404] }) },
  '/public/v1/audit/digests': { get: get('The signed, chained digests of the archive, oldest first, of periods starting in [from, to) (default: the last 7 days)', {
    parameters: [query('from', time, 'RFC 3339 (400 otherwise)'), query('to', time, 'RFC 3339, not before from (400 otherwise)')],
    ok: out({ data: { type: 'array', items: out({ period_start: time, period_end: time, key: str, sha256: str, objects: int(0) }) }, more: { type: 'boolean' } }), codes: [400] }) },
  '/public/v1/audit/objects': { get: get('The archive objects whose first row is in [from, to), and any odd name in those days\' folders', {
    parameters: [query('from', time, 'RFC 3339 (400 otherwise)'), query('to', time, 'RFC 3339, not before from and at most 31 days after it (400 otherwise)')],
    ok: out({ data: { type: 'array', items: out({ key: str, size: int(0) }) } }), codes: [400] }) },
  '/public/v1/audit/file': { get: get('An archive object or digest of the project, its bytes as stored', {
    parameters: [query('key', str, 'a key under audit/{project}/ (400 otherwise)')],
    content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } }, codes: [400, 404] }) },
  '/public/v1/logs/{request_id}': { get: get('One request of the log', { parameters: [pathParam('request_id')], ok: ref('AuditRow'), codes: [404] }) },
  '/public/v1/contacts': {
    post: mutating('Create a contact (emits contact.created)', contactIn, { 201: { schema: ref('Contact'), description: 'Created' } }),
    get: get('List contacts', { parameters: paging, ok: list(ref('Contact')), codes: [400] }),
  },
  '/public/v1/contacts/bulk': { post: mutating('Create 1–100 contacts, each on its own', bulkIn(contactIn), { 200: { schema: ref('BulkResult') } }) },
  '/public/v1/contacts/{id}': { get: get('One contact', { parameters: [pathParam('id')], ok: ref('Contact'), codes: [404] }) },
  '/public/v1/messages': { post: mutating('Queue a message (emits message.created)', messageIn, { 201: { schema: ref('Message'), description: 'Created' } }) },
  '/public/v1/messages/bulk': { post: mutating('Queue 1–100 messages, each on its own', bulkIn(messageIn), { 200: { schema: ref('BulkResult') } }) },
  '/public/v1/scenarios': { post: mutating('Create a scenario', obj({ name: { ...text(200), description: 'trimmed; 1–200 characters (422 otherwise)' } }, ['name']),
    { 201: { schema: out({ id: str, name: str, created_at: time }), description: 'Created' } }) },
  '/public/v1/scenarios/{id}/run': { post: mutating('Start a run (emits scenario.run.started)', obj({ contact_id: { ...str, description: 'a contact of this project (422 otherwise)' }, variables: freeForm }, ['contact_id']),
    { 202: { schema: out({ run_id: str, status: { const: 'started' } }), description: 'Started' } }, [404], { parameters: [pathParam('id')] }) },
  '/api/v1/projects/{project_id}/release-markers/deploy': { post: {
    summary: 'Record a deploy (cicd keys; Idempotency-Key required, 8–128; a replay answers 200)', ...keyed,
    parameters: [{ name: 'Idempotency-Key', in: 'header', required: true, description: '8–128 visible ASCII characters, no comma (400 when missing, 422 otherwise)', schema: { type: 'string', minLength: 8, maxLength: 128, pattern: '^[!#-+\\--~][!-+\\--~]*$' } },
      pathParam('project_id', 'the key\'s own project (403 otherwise)')],
    requestBody: { required: true, content: json(obj({ version: text(128), ts: { oneOf: [int(0), { type: 'string', minLength: 10, maxLength: 64 }], description: 'Unix seconds or an RFC 3339 string (422 otherwise)' }, environment: nullable({ type: 'string', maxLength: 64 }), commit: nullable({ type: 'string', maxLength: 64 }) }, ['version', 'ts'])) },
    responses: responses(true, { 201: { schema: ref('ReleaseMarker'), description: 'Created' }, 200: { schema: ref('ReleaseMarker'), description: 'Replayed' } }, [...new Set([...SCOPED, ...BODY, ...IDEMPOTENT])].sort()) } },
  '/v1/track': { post: { ...ingestion('Ingest up to 500 events (event_id de-duplication, 48 h)',
    obj({ batch: { type: 'array', minItems: 1, maxItems: 500, items: ref('TrackItem'), description: '1–500 events (422 otherwise); an event that is not valid is rejected alone' } }, ['batch']), ref('TrackResult'), [500]),
    parameters: [{ name: 'key', in: 'query', required: false, schema: { type: 'string' }, description: 'a browser key, for a page that cannot set Authorization (navigator.sendBeacon; the body may then be text/plain). Only on this route and only a browser key (401 otherwise); the audit log keeps it redacted' }] } },
  '/v1/identify': { post: ingestion('Link ids and record an identify event', obj({ anonymous_id: nonBlankId, user_id: nonBlankId, traits: freeForm }, ['anonymous_id', 'user_id']), out({ event_id: { type: 'string', format: 'uuid' } })) },
  '/v1/alias': { post: ingestion('Link ids (server keys only)', obj({ anonymous_id: nonBlankId, user_id: nonBlankId }, ['anonymous_id', 'user_id']), out({ anonymous_id: str, user_id: str })) },
  '/v1/replay': { post: ingestion('Store a session-replay chunk once', obj({ session_id: nonBlankId, chunk: int(0, 4294967295), data: {} }, ['session_id', 'chunk', 'data']), out({ duplicate: { type: 'boolean' } })) },
  '/public/v1/webhooks': {
    post: mutating('Subscribe (the secret is shown only here)', obj({ kind: { enum: ['url', 'cli'], description: '"url" (default: Gatehouse posts to url) or "cli" (no url: `gatehouse listen` pulls the deliveries)' },
      url: { type: 'string', format: 'uri', description: 'required for kind "url", absent for "cli"; https (http too when ALLOW_PRIVATE_WEBHOOK_URLS), no credentials, no special-purpose address (422 otherwise)' },
      events: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: [...eventTypes, '*'] }, description: 'known event types or "*", no repeats (422 otherwise)' },
      signature: signatureScheme }, ['events']),
      { 201: { schema: ref('WebhookCreated'), description: 'Created' } }),
    get: get('List subscriptions, newest first', { parameters: paging, ok: list(ref('Webhook')), codes: [400] }),
  },
  '/public/v1/webhooks/{id}': {
    delete: mutating('Delete a subscription (its pending deliveries fail)', null, { 200: { schema: out({ id: str, status: { const: 'deleted' } }) } }, [404], { parameters: [pathParam('id')] }),
    patch: mutating('Re-enable a subscription (e.g. one disabled by a 410 Gone; its failed deliveries stay failed) or switch its signing scheme (as a rotation with the default 24 h grace: the answer shows a new v1 secret once, or the new v1a public key)',
      { ...obj({ status: { const: 'active', description: 'only "active" (422 otherwise)' }, signature: signatureScheme }), minProperties: 1 },
      { 200: { schema: ref('WebhookCreated') } }, [404], { parameters: [pathParam('id')] }),
  },
  '/public/v1/webhooks/{id}/public-key': { get: get('A v1a subscription\'s public key, which its receivers verify deliveries with (404 for a v1 subscription, details.signature "v1")', {
    parameters: [pathParam('id')], ok: out({ public_key: { type: 'string', pattern: '^whpk_' } }), codes: [404] }) },
  '/public/v1/webhooks/{id}/rotate-secret': { post: mutating('Rotate the signing secret (the new one is shown only here); during the grace every attempt carries both signatures, new first',
    obj({ grace_seconds: grace(604800, 86400, 'how long the old secret keeps signing') }),
    { 200: { schema: ref('WebhookCreated') } }, [404], { parameters: [pathParam('id')] }) },
  '/public/v1/webhooks/{id}/recover': { post: mutating('Give every failed delivery created at or after `since` one more attempt, then the schedule again (422 while the subscription is not active)',
    obj({ since: { ...time, description: 'RFC 3339 (422 if it does not exist)' } }, ['since']),
    { 202: { schema: out({ requeued: int(0) }), description: 'Queued' } }, [404], { parameters: [pathParam('id')] }) },
  '/public/v1/webhooks/{id}/deliveries': { get: get('Deliveries with every attempt', {
    parameters: [pathParam('id'), query('status', { enum: ['pending', 'delivered', 'failed'] }, '400 otherwise'), ...paging], ok: list(ref('Delivery')), codes: [400, 404] }) },
  '/public/v1/webhooks/trigger': { post: mutating('Send a sample event of a type (built-in or an origin\'s) to the project\'s matching subscriptions',
    obj({ type: { type: 'string', pattern: '^[a-z0-9_.]{1,64}$', description: '1–64 characters of a-z, 0-9, _ and . (422 otherwise)' } }, ['type']),
    { 202: { schema: out({ event_id: str, type: str, deliveries: int(0) }), description: 'Queued' } }) },
  '/public/v1/webhooks/{id}/pull': { get: get('A listener\'s long poll on a cli subscription (`gatehouse listen`): the deliveries due, each held for it as an attempt, or none after `wait` seconds', {
    parameters: [pathParam('id'), query('wait', int(0, 25), 'seconds to wait for a delivery, 0–25 (400 otherwise), default 25'), query('resume', { type: 'boolean' }, 'true: every pending delivery of the subscription becomes due now (400 unless true or false)')],
    ok: out({ data: { type: 'array', items: out({ delivery_id: str, attempt: int(1), event: str, headers: { type: 'object', additionalProperties: str }, body: str }) }, now: time, hold_seconds: int(0) }), codes: [400, 404, 422] }) },
  '/public/v1/webhooks/{id}/deliveries/{delivery_id}/report': { post: mutating('A listener reports what the receiver answered to an attempt it forwarded; the schedule goes on from it',
    obj({ attempt: int(1), status_code: int(100, 599), response_excerpt: { type: 'string' }, error: { type: 'string' }, duration_ms: int(0) }, ['attempt', 'duration_ms']),
    { 200: { schema: out({ delivery_id: str, attempt: int(1), status: { enum: ['pending', 'delivered', 'failed'] }, next_attempt_at: nullable(time) }) } }, [404, 409], { parameters: [pathParam('id'), pathParam('delivery_id')] }) },
  '/public/v1/webhooks/deliveries/{id}/retry': { post: mutating('Make a delivery due now (failed ones too)', null, { 202: { schema: ref('Delivery'), description: 'Queued' } }, [404], { parameters: [pathParam('id')] }) },
};

const keyProps = { id: str, prefix: str, type: { enum: ['owner', 'server', 'browser', 'cicd'] }, name: nullable(str), plan: str,
  rate_limit_per_minute: nullable(int(1)), status: { enum: ['active', 'expiring', 'expired', 'revoked'] }, created_at: time,
  expires_at: nullable(time), revoked_at: nullable(time), rolled_from: nullable(str), rolled_to: nullable(str),
  identity_id: nullable(str), limits: nullable(keyLimits) };
/** A key's answer: `allowed_origins` only on browser keys. */
const keyOut = (props) => {
  const schema = out({ ...props });
  schema.properties.allowed_origins = { type: 'array', items: str, description: 'browser keys only: the origins whose pages may use the key (empty: any)' };
  return schema;
};
const webhookProps = { id: str, kind: { enum: ['url', 'cli'] }, url: nullable(str), events: { type: 'array', items: str }, status: { enum: ['active', 'disabled'] }, disabled_reason: nullable(str), created_at: time,
  previous_secret_expires_at: nullable({ ...time, description: 'while a rotation\'s grace runs: until when attempts are signed with the previous secret too' }),
  signature: { enum: ['v1', 'v1a'], description: 'how attempts are signed: v1 (HMAC-SHA256 with the secret) or v1a (Ed25519; receivers verify with public_key)' },
  public_key: nullable({ type: 'string', pattern: '^whpk_', description: 'a v1a subscription\'s public key (whpk_ + base64 of the 32-byte Ed25519 key); null for v1' }) };
const indexed = (props) => ({ type: 'array', items: out({ index: int(0), ...props }) });
// Response-time percentiles from the aggregates' buckets: the bucket's upper bound in ms (10, 25,
// 50, 100, 250, 500, 1000, 2500, 5000; 10000 for 5 s and more), null without requests.
const percentiles = { p50_ms: nullable(int(10, 10000)), p95_ms: nullable(int(10, 10000)), p99_ms: nullable(int(10, 10000)) };
const statsProps = { days: int(1, 90), total: int(0), error_share: { type: 'number', minimum: 0, maximum: 1 }, latency: out(percentiles),
  daily: { type: 'array', items: out({ date: { type: 'string', format: 'date' }, total: int(0), '4xx': int(0), '5xx': int(0), ...percentiles }) },
  top_endpoints: { type: 'array', items: out({ method: str, route: nullable(str), total: int(0), errors: int(0), ...percentiles }) } };
const schemas = {
  Error: out({ error: obj({ code: str, message: str, request_id: { type: 'string', format: 'uuid' }, retryable: { type: 'boolean' }, details: freeForm }, ['code', 'message', 'request_id', 'retryable', 'details']) }),
  // SPEC §25: the same error as RFC 9457 problem details, for a client whose Accept asks for them.
  Problem: { ...obj({
    type: { type: 'string', format: 'uri', description: 'the error reference section of the code (/errors#…), or https://iana.org/assignments/http-problem-types#quota-exceeded for a window or quota 429' },
    title: str, status: { type: 'integer', minimum: 400, maximum: 599 }, detail: str,
    instance: { type: 'string', pattern: '^urn:uuid:', description: 'urn:uuid: and the request id' },
    code: str, request_id: { type: 'string', format: 'uuid' }, retryable: { type: 'boolean' }, details: freeForm,
    'violated-policies': { type: 'array', items: str, description: 'the RateLimit-Policy policies a 429 exceeded' },
  }, ['type', 'title', 'status', 'detail', 'instance', 'code', 'request_id', 'retryable', 'details']) },
  ProjectCreated: out({ project_id: str, name: str, plan: str, owner_key: out({ id: str, key: str, prefix: str }) }),
  Key: keyOut(keyProps),
  KeyCreated: keyOut({ ...keyProps, key: { ...str, description: 'the secret; shown only in this response' } }),
  Identity: out({ id: str, external_id: str, meta: nullable(freeForm), limits: nullable(identityLimits), created_at: time, updated_at: time }),
  Me: out({ key_id: str, prefix: str, type: { enum: ['owner', 'server', 'browser', 'cicd'] }, project_id: str, plan: str, expires_at: nullable(time),
    rate_limit: out({ window: { enum: ['second', 'minute', 'hour', 'day'], description: 'the window closest to refusing (the headers advertise it)' }, limit: int(0), remaining: int(0), reset: time,
      windows: { type: 'array', description: 'every window the key\'s plan and own limits set (SPEC §20)', items: out({ window: { enum: ['second', 'minute', 'hour', 'day'] }, limit: int(0), remaining: int(0), reset: time }) } }),
    quota: out({ used: int(0), limit: nullable(int(0)), resets_at: time }) }),
  KeyStats: out({ key_id: str, ...statsProps }),
  ProjectStats: out({ ...statsProps, endpoint: nullable(str) }),
  AuditRow: out({ ts: time, request_id: str, key_id: nullable(str), key_prefix: nullable(str), method: str, path: str, route: nullable(str),
    status: int(100, 599), response_bytes: int(0), response_time_ms: int(0), ip: nullable(str), user_agent: nullable(str),
    idempotency_key: nullable(str), replayed: { type: 'boolean' }, original_request_id: nullable(str), rate_limit_remaining: nullable(int(0)), error_code: nullable(str),
    dashboard: { type: 'boolean', description: 'read under the dashboard budget (Gatehouse-Budget: dashboard)' },
    trace_id: { ...nullable({ type: 'string', pattern: '^[0-9a-f]{32}$' }), description: "the request's W3C trace id: its traceparent's, or one the gateway started (none on rows from before)" } }),
  StoredEvent: out({ event_id: str, event: str, key_type: { enum: ['server', 'browser'] }, user_id: nullable(str), anonymous_id: nullable(str),
    timestamp: { description: 'when the client says it happened, as it sent it (null when it sent none)' }, properties: freeForm,
    received_at: time, generated_id: { type: 'boolean', description: 'the gateway made the event_id (the client sent none)' } }),
  Archive: out({ date: { type: 'string', format: 'date' }, objects: { ...int(1), description: 'gzip objects (chunks of up to 5,000 rows) the day is stored in' }, size: { ...int(0), description: 'bytes, all objects of the day' }, uploaded_at: time }),
  Contact: out({ id: str, name: nullable(str), phone: nullable(str), email: nullable(str), external_id: nullable(str), created_at: time }),
  Message: out({ id: str, contact_id: str, text: str, status: { const: 'queued' }, created_at: time }),
  BulkResult: out({ created: int(0), failed: int(0), results: { type: 'array', items: { oneOf: [
    out({ index: int(0), status: { const: 'created' }, id: str }),
    out({ index: int(0), status: { const: 'failed' }, error: out({ code: str, message: str, details: freeForm }) }),
  ] } } }),
  ReleaseMarker: out({ id: str, project_id: str, version: str, ts: { oneOf: [int(0), str] }, environment: nullable(str), commit: nullable(str), created_at: time }),
  TrackItem: obj({ event_id: nullable({ ...str, description: 'a UUID in any case, braces, urn:uuid: or 32 hex digits (INVALID_EVENT_ID otherwise); absent = generated, not de-duplicated' }),
    event: text(200), anonymous_id: nullable(text(200)), user_id: nullable(text(200)),
    timestamp: nullable({ oneOf: [int(0), str], description: 'RFC 3339 or Unix seconds' }), properties: nullable(freeForm) }, ['event']),
  TrackResult: out({ accepted: indexed({ event_id: str }), duplicates: indexed({ event_id: str }), rejected: indexed({ code: str, message: str }) }),
  Webhook: out(webhookProps),
  WebhookCreated: { ...out({ ...webhookProps, secret: { type: 'string', pattern: '^whsec_', description: 'a v1 subscription\'s whsec_ + base64 of 24 random bytes; shown only in this response (and the rotation that made it). A v1a subscription\'s private key is never shown: no secret' } }),
    required: Object.keys(webhookProps) },
  Delivery: out({ id: str, webhook_id: str, event_id: str, event: str, request_id: nullable(str), status: { enum: ['pending', 'delivered', 'failed'] },
    attempt: int(0), scheduled_at: nullable(time), last_response_code: nullable(int(0)), last_error: nullable(str), created_at: time, payload: {},
    attempts: { type: 'array', items: out({ attempt: int(1), started_at: time, duration_ms: int(0), response_code: nullable(int(0)), response_body: nullable(str), error: nullable(str), next_retry_at: nullable(time) }) } }),
  DeadLetter: out({ id: str, queue: str, body: { type: 'string', description: 'the message body as sent' }, first_failed_at: time, dead_at: time, last_error: nullable(str),
    attempts: int(0), status: { enum: ['dead', 'redriven'] }, redriven_at: nullable(time) }),
};
// Webhooks (OpenAPI 3.1 `webhooks`): what a subscriber's URL receives for each event type — a POST
// of {id, type, created_at, data}, signed the Standard Webhooks way. tests/e2e/webhook_payloads
// validates real deliveries of every type against these schemas.
const usageRecord = out({ id: { type: 'string', pattern: '^[0-9a-f]{32}$', description: "the record's CloudEvents id: Stripe's identifier" }, subject: str, key_id: str, identity_id: nullable(str),
  value: { ...int(), description: 'what this run adds (either sign in an adjustment)' }, total: int(0),
  replaces: nullable({ type: 'string', pattern: '^[0-9a-f]{32}$', description: "the id of the subject's record this one replaces (null: the subject's first)" }) });
const usageData = out({ project_id: str, meter: { const: 'requests' }, period_start: time, period_end: time, sequence: { ...int(0), description: '0: the period; 1, 2, …: its adjustments' },
  object: { ...str, description: 'the R2 key of the run\'s CloudEvents (usage/{project}/{period}.ndjson)' }, value: int(), records: { type: 'array', maxItems: 100, items: usageRecord },
  records_complete: { type: 'boolean', description: 'false: more than 100 records, read the object' } });
const eventPayloads = {
  'contact.created': ['A contact was created', ref('Contact')],
  'message.created': ['A message was queued', ref('Message')],
  'scenario.run.started': ['A scenario run started', out({ run_id: str, scenario_id: str, contact_id: str, variables: freeForm, status: { const: 'started' } })],
  'release_marker.created': ['A deploy was recorded', ref('ReleaseMarker')],
  'usage.hourly': ['A usage period was exported (only to subscriptions that name it; "*" does not)', usageData],
  'usage.adjustment': ['Rows arrived after their period was exported: the difference (only to subscriptions that name it)', usageData],
};
const webhookHeader = (name, description, schema = str) => ({ name, in: 'header', required: true, description, schema });
const webhooks = Object.fromEntries(Object.entries(eventPayloads).map(([type, [summary, data]]) => [type, { post: {
  summary,
  parameters: [
    webhookHeader('webhook-id', "the delivery's id: the same on every attempt (de-duplicate on it)"),
    webhookHeader('webhook-timestamp', 'Unix seconds of this attempt', { type: 'string', pattern: '^[0-9]+$' }),
    webhookHeader('webhook-signature', 'v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>, space-separated (two during a secret rotation)', { type: 'string', pattern: '^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$' }),
    webhookHeader('X-Gatehouse-Event', 'the event type', { const: type }),
    webhookHeader('X-Gatehouse-Request-Id', 'the request that caused the event'),
    webhookHeader('X-Gatehouse-Signature', 'sha256=<hex HMAC-SHA256(secret, body)>', { type: 'string', pattern: '^sha256=[0-9a-f]{64}$' }),
  ],
  requestBody: { required: true, content: json(out({ id: str, type: { const: type }, created_at: time, data })) },
  responses: { '2XX': { description: 'delivered' }, 410: { description: 'Gone: the subscription is disabled' }, default: { description: 'anything else (or no answer within WEBHOOK_TIMEOUT_MS): retried on the schedule' } },
} }]));

// Proxy mode: the routes under UPSTREAMS prefixes are the provider's, so they are not paths here;
// this extension describes what the gateway adds to every one of them.
const proxyContract = {
  description: 'Requests under an UPSTREAMS prefix (route template "{prefix}*" in the log) run the same pipeline as built-in routes (key types, rate limit with cost, Idempotency-Key optional|required|off) and are forwarded to the origin with the original method, path, query and body.',
  request_to_origin: {
    removed: ['Authorization', 'hop-by-hop headers (Connection and the headers it names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*)', 'every client-sent X-Gatehouse-* header', "the client's X-Request-Id", 'Host', 'cf-*', 'Forwarded, X-Forwarded-*, X-Real-IP, True-Client-IP, X-Client-IP'],
    added: {
      'X-Request-Id': "the gateway's request id (UUIDv7)",
      'X-Gatehouse-Project-Id': 'project of the calling key',
      'X-Gatehouse-Key-Id': 'id of the calling key',
      'X-Gatehouse-Key-Type': 'owner | server | browser | cicd',
      'X-Gatehouse-Client-Ip': "the client's address (CF-Connecting-IP)",
      'X-Forwarded-For': "the client's address alone",
      'X-Gatehouse-Timestamp': 'Unix seconds',
      'X-Gatehouse-Content-Sha256': 'hex SHA-256 of the body, or UNSIGNED-PAYLOAD for a body over 1 MiB (streamed)',
      'X-Gatehouse-Signature': 'v2=<hex HMAC-SHA256(ORIGIN_SECRET, lines joined by \\n: v2, timestamp, method, path and query as the origin receives them (base path included), request id, project id, key id, key type, client address, body hash)>',
    },
    body: 'as received, up to max_body_bytes (413 PAYLOAD_TOO_LARGE beyond); over 1 MiB streamed and signed UNSIGNED-PAYLOAD; with an Idempotency-Key at most 1 MiB (413)',
  },
  response: {
    passed_through: "the origin's status, headers (minus hop-by-hop, Content-Length and Content-Encoding) and body, streamed",
    added: ['X-Request-Id', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit (the gateway\'s win over the origin\'s)'],
    idempotency: 'with an Idempotency-Key a 2xx of at most 1 MiB is kept 24 h and replayed (Idempotent-Replayed: 1); a larger 2xx is answered once and its replay is 409 IDEMPOTENCY_RESPONSE_NOT_STORED; a non-2xx is not kept and a retry forwards again',
    errors: { 401: 'INVALID_API_KEY', 403: 'FORBIDDEN (key type not in key_types)', 400: 'IDEMPOTENCY_KEY_REQUIRED', 409: 'IDEMPOTENCY_KEY_REUSED | IDEMPOTENCY_KEY_IN_USE | IDEMPOTENCY_RESPONSE_NOT_STORED', 413: 'PAYLOAD_TOO_LARGE', 422: 'VALIDATION_ERROR (Idempotency-Key)', 429: 'RATE_LIMIT_EXCEEDED | QUOTA_EXCEEDED | TRIAL_QUOTA_EXCEEDED', 502: 'UPSTREAM_UNAVAILABLE', 504: 'UPSTREAM_TIMEOUT' },
  },
};
const codes = { 400: 'VALIDATION_ERROR (malformed JSON, an object naming a key twice, a bad or unknown field or query parameter) or IDEMPOTENCY_KEY_REQUIRED', 401: 'INVALID_API_KEY (or a missing or wrong admin token); a known key that is refused says why in details.reason: expired, rolled or revoked', 403: 'FORBIDDEN',
  404: 'NOT_FOUND', 409: 'IDEMPOTENCY_KEY_REUSED or IDEMPOTENCY_KEY_IN_USE (Retry-After: 1), or CONFLICT (the project has an identity with this external_id already)', 413: 'PAYLOAD_TOO_LARGE',
  422: 'VALIDATION_ERROR (semantic, or a bad or repeated Idempotency-Key)', 429: 'RATE_LIMIT_EXCEEDED (Retry-After), QUOTA_EXCEEDED or TRIAL_QUOTA_EXCEEDED; also too many failed authentications from the address',
  500: 'INTERNAL_ERROR (nothing accepted; retry)', 502: 'UPSTREAM_UNAVAILABLE (proxy mode: the origin could not be reached; retryable)',
  503: 'SERVICE_UNAVAILABLE (a binding did not answer; retry with care)', 504: 'UPSTREAM_TIMEOUT (proxy mode: no answer within the route timeout_ms; retryable)' };
const retryAfter = { 409: true, 429: true, 503: true };
const errorHeaders = (c) => ({ 'X-Request-Id': header('X-Request-Id', true), ...Object.fromEntries(RATE.map((h) => [h, header(h, false)])), ...(retryAfter[c] && { 'Retry-After': header('Retry-After', false) }) });
const headerSchemas = {
  'X-Request-Id': { description: 'this request\'s id (a UUID), also in the error body and the log', schema: { type: 'string', format: 'uuid' } },
  'X-RateLimit-Limit': { description: 'requests per minute of the key', schema: { type: 'integer', minimum: 0 } },
  'X-RateLimit-Remaining': { schema: { type: 'integer', minimum: 0 } },
  'X-RateLimit-Reset': { description: 'Unix seconds of the window end', schema: { type: 'integer', minimum: 0 } },
  'RateLimit-Policy': { description: 'every limited window and the monthly quota ("month", w = the month\'s seconds): an RFC 9651 List', schema: { type: 'string', pattern: '^"[a-z]+";q=[0-9]+;w=[0-9]+(, "[a-z]+";q=[0-9]+;w=[0-9]+)*$', example: '"minute";q=30;w=60, "month";q=10000;w=2592000' } },
  'RateLimit': { description: 'the window closest to refusing', schema: { type: 'string', pattern: '^"[a-z]+";r=[0-9]+;t=[0-9]+$', example: '"minute";r=29;t=55' } },
  'Retry-After': { description: 'whole seconds to wait', schema: { type: 'integer', minimum: 1 } },
};
// The dashboard's reads (RouteId::is_dashboard_read; a unit test holds the two lists together):
// each takes the Gatehouse-Budget header. All are owner routes, so their 403 is listed already.
const DASHBOARD_READS = ['/public/v1/keys', '/public/v1/keys/last-used', '/public/v1/stats', '/public/v1/keys/{id}/stats',
  '/public/v1/identities', '/public/v1/identities/{id}', '/public/v1/logs', '/public/v1/logs/{request_id}', '/public/v1/events', '/public/v1/usage',
  '/public/v1/webhooks', '/public/v1/webhooks/{id}/deliveries'];
for (const path of DASHBOARD_READS) {
  const op = paths[path].get;
  op.parameters = [{ $ref: '#/components/parameters/GatehouseBudget' }, ...(op.parameters ?? [])];
}

const doc = {
  openapi: '3.1.0',
  info: { title: 'Gatehouse', version: '1.0.0', description: 'Public-API edge gateway. Errors follow one schema; every response carries X-Request-Id; authenticated ones carry the rate-limit headers. HEAD is served wherever GET is (same status and headers, no body; it counts against the rate limit and is audited like a GET). A method a path does not serve is a 405 with Allow; an unknown path is a 404. A query parameter an operation does not list is a 400 VALIDATION_ERROR naming it (details.field), as an unknown body field is; a JSON body naming a key twice in one object is a 400 too. Checked against the server by scripts/conformance (Schemathesis).' },
  servers: [{ url: '/' }],
  security: [{ apiKey: [] }],
  paths,
  webhooks,
  'x-gatehouse-proxy': proxyContract,
  components: {
    securitySchemes: {
      apiKey: { type: 'http', scheme: 'bearer', description: 'An API key: gh_<o|s|b|c>_…' },
      adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN' },
      originSecret: { type: 'http', scheme: 'bearer', description: 'EVENTS_SECRET (proxy mode: the origin sends events with it; ORIGIN_SECRET only signs forwarded requests)' },
    },
    parameters: {
      GatehouseBudget: { name: 'Gatehouse-Budget', in: 'header', required: false, description: 'dashboard: count this read under the owner key\'s dashboard budget (DASHBOARD_READS_PER_MINUTE, default 120 a minute) instead of its API windows and quota; owner keys only (403 otherwise); only on the dashboard\'s reads, any other value or route is a 400', schema: { enum: ['dashboard'] } },
      IdempotencyKey: { name: 'Idempotency-Key', in: 'header', required: false, description: 'an RFC 9651 sf-string of 1–255 printable ASCII characters ("…", as browsers send it), or 1–255 visible ASCII characters without a comma (422 otherwise); replays the first 2xx for 24 h', schema: { type: 'string', minLength: 1, maxLength: 512, pattern: '^("([ !#-\\[\\]-~]|\\\\["\\\\])+"|[!#-+\\--~][!-+\\--~]*)$' } } },
    headers: Object.fromEntries(Object.entries(headerSchemas).flatMap(([name, h]) => [[name, { ...h, required: true }], [`${name}-optional`, h]])),
    responses: Object.fromEntries(Object.entries(codes).map(([c, d]) => [`E${c}`, { description: d, headers: errorHeaders(c), content: { ...json(ref('Error')), 'application/problem+json': { schema: ref('Problem') } } }])),
    schemas,
  },
};
writeFileSync(new URL('../public/openapi.json', import.meta.url), JSON.stringify(doc, null, 1) + '\n');
console.log(`public/openapi.json: ${Object.keys(paths).length} paths`);
